/work/bin/minilm_compress --pool 1000 --budget 40 --ratio 0.5 --only e2e_embedding --e2e-lr 1e-3 --e2e-warmup-steps 5 --seeds 3 --test-split --out runs/tune_minilm/e2e_lr1e-3_wu5
