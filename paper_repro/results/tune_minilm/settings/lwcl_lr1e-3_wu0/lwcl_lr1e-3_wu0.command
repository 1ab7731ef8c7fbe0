/work/bin/minilm_compress --pool 1000 --budget 40 --ratio 0.5 --only lwcl --lr 1e-3 --warmup-steps 0 --seeds 3 --test-split --out runs/tune_minilm/lwcl_lr1e-3_wu0
