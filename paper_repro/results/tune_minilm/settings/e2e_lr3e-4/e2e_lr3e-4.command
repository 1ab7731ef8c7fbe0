/work/bin/minilm_compress --pool 1000 --budget 40 --ratio 0.5 --only e2e_embedding --e2e-lr 3e-4 --seeds 3 --test-split --out runs/tune_minilm/e2e_lr3e-4
