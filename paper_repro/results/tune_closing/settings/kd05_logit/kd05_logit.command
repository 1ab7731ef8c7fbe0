/work/bin/lwcl_vs_kd_kdh --teacher runs/teacher_deep_gpt2 --budget 160 --ratio 0.5 --only lwcl --final-kd-share 0.5 --kd-lr 1e-3 --seeds 3 --test-split --out runs/tune_closing/kd05_logit
