/work/bin/minilm_compress --pool 1000 --budget 320 --ratio 0.5 --curve-points 12 --only e2e_embedding --e2e-micro-batches 4 --seeds 3 --test-split --out runs/tune_minilm_closing2/e2emb4
