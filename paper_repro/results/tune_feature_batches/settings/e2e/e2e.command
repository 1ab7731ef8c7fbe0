/work/bin/lwcl_vs_kd_fb --teacher runs/teacher_deep_gpt2 --budget 160 --ratio 0.5 --only e2e_kd --seeds 3 --test-split --out runs/tune_feature_batches/e2e
