/work/bin/minilm_compress --pool 1000 --budget 320 --ratio 0 --depth 0.5 --curve-points 12 --only lwcl --end-exact-visits --seeds 3 --test-split --out runs/tune_minilm_depth/lwclx
