/work/bin/minilm_compress_kd --pool 1000 --budget 320 --ratio 0.5 --only lwcl_kd --kd-share 0.75 --seeds 3 --test-split --out runs/tune_minilm_closing/kd075
