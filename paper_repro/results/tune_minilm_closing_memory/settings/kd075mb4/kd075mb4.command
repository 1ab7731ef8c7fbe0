/work/bin/minilm_compress --pool 1000 --budget 320 --ratio 0.5 --curve-points 12 --only lwcl_kd --kd-share 0.75 --kd-micro-batches 4 --seeds 3 --test-split --out runs/tune_minilm_closing2/kd075mb4
