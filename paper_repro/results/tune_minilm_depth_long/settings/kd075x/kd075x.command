/work/bin/minilm_compress --pool 1000 --budget 320 --ratio 0 --depth 0.5 --curve-points 12 --only lwcl_kd --kd-share 0.75 --end-exact-visits --seeds 3 --test-split --out runs/tune_minilm_depth/kd075x
