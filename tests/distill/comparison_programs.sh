#!/usr/bin/env bash
# The comparison programs on the harness (studies/comparison.hpp), end to end on a small gpt2
# teacher trained on the project's docs: quickstart, curriculum_ablation, cache_tiers,
# segmentation_compare and lwcl_vs_kd each write config.json (every option), report.json (one entry per
# method), table.md and the plots, and what each program claims of its runs holds in what it wrote.
# Budgets a program refuses give a clear error.
#   comparison_programs.sh <build dir with experiments/> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
source "$src/tests/support/docs_corpus.sh"
make_docs_teacher "$build" "$src" "$work"
# A held-out sample of 128 windows (the default 1024 costs most of these runs' time and checks nothing more).
common=(--data "$work/data" --teacher "$work/teacher" --batch 4 --seq 32 --feature-batches 3 --calib-batches 2
        --eval-tokens 4096 --curve-tokens 2048)
x=$build/experiments
"$x/quickstart" "${common[@]}" --budget steps:24 --same-data --out "$work/qs" > "$work/qs.txt"
"$x/curriculum_ablation" "${common[@]}" --budget steps:56 --out "$work/ca" > "$work/ca.txt"
"$x/cache_tiers" "${common[@]}" --budget steps:40 --ring 2 --out "$work/ct" > "$work/ct.txt"
"$x/segmentation_compare" "${common[@]}" --budget steps:24 --boundaries 2 --out "$work/sc" > "$work/sc.txt"
"$x/lwcl_vs_kd" "${common[@]}" --budget steps:24 --curve-points 4 --out "$work/kd" > "$work/kd.txt"
"$x/lwcl_vs_kd" "${common[@]}" --budget 2 --out "$work/kds" > "$work/kds.txt"
# The tuning knobs, one method at a time.
"$x/lwcl_vs_kd" "${common[@]}" --budget steps:32 --curve-points 2 --only lwcl --lwcl-lr 0.003 --growth \
  --cosine-weight 1 --final-kd-share 0.25 --kd-lr 0.001 --out "$work/kdk" > "$work/kdk.txt"
"$x/lwcl_vs_kd" "${common[@]}" --budget steps:24 --curve-points 2 --only lwcl --ramp 0.25,0.75 --ramp-visit-steps 6 \
  --out "$work/kdr" > "$work/kdr.txt"
"$x/lwcl_vs_kd" "${common[@]}" --budget steps:24 --curve-points 4 --only e2e_kd --e2e-lr 0.003 --e2e-temperature 2 \
  --e2e-hidden-mse 0.5 --e2e-warmup-steps 4 --out "$work/kde" > "$work/kde.txt"
"$x/quickstart" "${common[@]}" --budget steps:16 --depth 0.5 --ratio 0 --skip-no-curriculum --save-dtype bf16 \
  --mc "$src/tests/data/mc/items.jsonl" --mc-limit 6 --out "$work/depth" > "$work/depth.txt"
# The teacher's multiple-choice scores from eval_model, to compare with the comparison's teacher row.
"$x/eval_model" "$work/teacher/model" --mc "$src/tests/data/mc/items.jsonl" --mc-limit 6 --mc-out "$work/depth_mc.json" \
  > "$work/depth_mc.txt"
"$x/quickstart" "${common[@]}" --budget steps:24 --skip-no-curriculum --seeds 3 --out "$work/seeds" > "$work/seeds.txt"

# Refused budgets: an lwcl::error on stderr and exit 2, nothing else.
source "$src/tests/support/expect_error.sh"
expect_error "time to quality is read off the curves" "$x/lwcl_vs_kd" "${common[@]}" --budget steps:10 --curve-points 0 --out "$work/e1"
expect_error "needs --ramp-visit-steps" "$x/lwcl_vs_kd" "${common[@]}" --budget steps:10 --only lwcl --ramp 0,0.5 --out "$work/e4"
expect_error "every tier trains the same steps" "$x/cache_tiers" "${common[@]}" --budget seconds:5 --out "$work/e2"
expect_error "give --ramp-visit-steps" "$x/curriculum_ablation" "${common[@]}" --budget 5 --out "$work/e3"
# Refused options state their rule in words (studies/validators.hpp), never a machine bound.
expect_bad_option "--lr: must be greater than 0 (got -1)" "$x/quickstart" "${common[@]}" --lr -1
expect_bad_option "--ratio: must be from 0 to 0.95 (got 2)" "$x/quickstart" "${common[@]}" --ratio 2
expect_bad_option "--seeds: must be a number greater than 0 (got 'two')" "$x/quickstart" "${common[@]}" --seeds two
expect_bad_option "--dtype: f16: expected f32 or bf16" "$x/quickstart" "${common[@]}" --dtype f16
# --dtype bf16: the GEMMs in bf16 where the CPU has AVX512-BF16 or AMX and oneDNN is built in (the choice
# said once on stderr, recorded in config.json), refused with the reason while the command line is read
# elsewhere.
set +e
"$x/quickstart" "${common[@]}" --budget steps:8 --skip-no-curriculum --dtype bf16 --out "$work/bf16" \
  > "$work/bf16.txt" 2> "$work/bf16.err"
rc=$?
set -e
if grep -qwE 'avx512_bf16|amx_tile' /proc/cpuinfo && ! grep -q "not compiled into this program" "$work/bf16.err"; then
  [ $rc = 0 ] || { echo "quickstart --dtype bf16 failed on a CPU with bf16 (exit $rc):" >&2; cat "$work/bf16.err" >&2; exit 1; }
  grep -q '^lwcl gemm: onednn bf16 (bf16 operands, f32 accumulation.*\[--dtype bf16\]$' "$work/bf16.err" ||
    { echo "quickstart --dtype bf16 did not run its GEMMs in bf16:" >&2; cat "$work/bf16.err" >&2; exit 1; }
  grep -q '"dtype": "bf16"' "$work/bf16/config.json" || { echo "config.json does not record --dtype bf16" >&2; exit 1; }
  grep -q '"dtype": "f32"' "$work/qs/config.json" || { echo "config.json does not record the default dtype f32" >&2; exit 1; }
else
  [ $rc != 0 ] && [ $rc -lt 128 ] && grep -qE -- '--dtype: bf16 (needs a CPU with AVX512-BF16 or AMX|runs the GEMMs on oneDNN)' \
    "$work/bf16.err" || { echo "quickstart --dtype bf16 was not refused with the reason (exit $rc):" >&2; cat "$work/bf16.err" >&2; exit 1; }
fi
"$x/quickstart" --help > "$work/help.txt"
grep -qF -- "--lr FLOAT:> 0" "$work/help.txt" || { echo "quickstart --help does not state --lr's rule" >&2; exit 1; }
grep -qE '[0-9]{20}' "$work/help.txt" && { echo "quickstart --help prints a machine bound" >&2; exit 1; }

python3 - "$work" "$src" <<'PY'
import json, math, os, sys
work = sys.argv[1]
sys.path.insert(0, os.path.join(sys.argv[2], "tests", "support"))
from curves import reach

def load(run):
    d = os.path.join(work, run)
    rep = json.load(open(os.path.join(d, "report.json")))
    cfg = json.load(open(os.path.join(d, "config.json")))
    md = open(os.path.join(d, "table.md")).read()
    with open(os.path.join(d, "cumulative_error.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", run
    methods = {m["name"]: m for m in rep["methods"]}
    assert list(methods)[:2] == ["teacher", "pruned"], (run, list(methods))
    # glibc's mmap threshold pinned by the harness: freed buffers leave the resident set
    assert rep["malloc_mmap_threshold"] == 1 << 20, (run, rep["malloc_mmap_threshold"])
    for name, m in methods.items():
        assert math.isfinite(m["val_ppl"]) and m["val_ppl"] > 1, (run, name, m["val_ppl"])
        assert f"| {name} |" in md, (run, name)
        if name != "teacher":
            assert len(m["cumulative_error"]) == 4, (run, name)
            os.path.isdir(os.path.join(d, name)) or name == "pruned" or sys.exit(f"{run}: no run folder {name}")
        if name not in ("teacher", "pruned"):
            # Memory from the tracker: the whole run holds at least what training held, and the process
            # at least that (its resident set also holds the program, the data and the cache).
            assert m["run_peak_compute_bytes"] >= m["peak_compute_bytes"] > 0, (run, name, m)
            assert m["peak_resident_bytes"] > m["run_peak_compute_bytes"], (run, name, m)
    # config.json: the options as given, and the budget parsed
    assert cfg["batch"] == 4 and cfg["seq"] == 32 and cfg["criterion"] == "wanda_sp", (run, cfg)
    # The held-out sample: windows of --seq over every validation document (README.md is the one here).
    assert rep["val_protocol"].startswith("split=validation sample=128 windows of 32 over all 1 documents"), rep["val_protocol"]
    return rep, cfg, methods

rep, cfg, m = load("qs")
assert list(m) == ["teacher", "pruned", "lwcl", "layerwise_no_curriculum", "e2e_kd", "e2e_kd_cached", "lwcl_distinct"], list(m)
assert cfg["budget"] == {"unit": "steps", "amount": 24.0} and cfg["skip_no_curriculum"] is False, cfg
assert cfg["same_data"] is True, cfg
# List options as lists: none given is [] (no multiple choice by default), one given is one entry.
assert cfg["eval_splits"] == [] and cfg["mc"] == [], (cfg["eval_splits"], cfg["mc"])
assert m["lwcl"]["segment_steps"] == 24 and m["e2e_kd"]["steps"] == 24, (m["lwcl"]["segment_steps"], m["e2e_kd"]["steps"])
# The same data both ways: LWCL's 8 visits of 3 steps cycle over the 3 cached batches, end-to-end KD sees
# 24 fresh ones; e2e_kd_cached cycles over the 3, lwcl_distinct reads 24 batches, one a step.
distinct = {n: m[n]["distinct_batches"] for n in ("lwcl", "e2e_kd", "e2e_kd_cached", "lwcl_distinct")}
assert distinct == {"lwcl": 3, "e2e_kd": 24, "e2e_kd_cached": 3, "lwcl_distinct": 24}, distinct
batches = [json.loads(l)["batch"] for l in open(os.path.join(work, "qs", "lwcl_distinct", "metrics.jsonl"))
           if "global_step" in json.loads(l)]
assert batches == list(range(24)), batches
assert m["lwcl_distinct"]["val_ppl"] != m["lwcl"]["val_ppl"]  # other data, another student
assert m["layerwise_no_curriculum"]["policies"]["curriculum"].startswith("curriculum<front_to_back,teacher_inputs")

rep, cfg, m = load("ca")
assert len(m) == 10 and cfg["ramp_start"] == 0.25 and cfg["core_only"] is False, (len(m), cfg)
# The ramp's steps from the fractions: 56 steps over the curriculum's visits (4 for e2h_ramp, 7 for ramp_doubling).
for name, visits in (("e2h_ramp", 4), ("ramp_doubling", 7)):
    v = 56 // visits
    want = f"{int(math.floor(0.25 * v + 0.5))}-{int(math.floor(0.75 * v + 0.5))} of {v}"
    assert m[name]["ramp"] == want and m[name]["visits"] == visits, (name, m[name]["ramp"], want, m[name]["visits"])
assert m["two_stage"]["phases"] == 2 and m["two_stage"]["phase0_order"] == "0 1 2 3", m["two_stage"]
# The orders by measured difficulty (each visit's initial local loss, in the run's own report.json):
# easy to hard ascending, hard to easy descending, and phase0_order the segments in that order.
for name, direction in (("two_stage_e2h", 1), ("h2e_student", -1)):
    visits = [v for v in json.load(open(os.path.join(work, "ca", name, "report.json")))["visits"] if v["phase"] == 0]
    d = [direction * v["difficulty"] for v in visits]
    assert d == sorted(d), (name, d)
    assert m[name]["phase0_order"] == " ".join(str(v["segment"]) for v in visits), (name, m[name]["phase0_order"])
for r in m.values():
    assert r["name"] in ("teacher", "pruned") or r["segment_steps"] == 56, (r["name"], r["segment_steps"])
# identical_students: groups of runs whose final students are the same bits, each run in one group at most
seen = [n for g in rep["identical_students"] for n in g]
assert len(seen) == len(set(seen)) and all(len(g) > 1 for g in rep["identical_students"]), rep["identical_students"]

rep, cfg, m = load("ct")
tiers = ["host", "disk", "host_exponent", "host_gauss", "host_zstd", "disk_exponent"]
assert list(m)[2:] == tiers and cfg["ring"] == 2, (list(m), cfg)
assert rep["students_bitwise_equal"] is True and rep["identical_students"] == [tiers], rep["identical_students"]
assert m["disk"]["tier"] == "disk" and m["host"]["tier"] == "host", (m["disk"]["tier"], m["host"]["tier"])
assert m["host_exponent"]["cache_compression_ratio"] > 1 and m["host"]["cache_compression_ratio"] == 1
assert m["host_gauss"]["cache_compression_ratio"] > 1, m["host_gauss"]["cache_compression_ratio"]

rep, cfg, m = load("sc")
assert cfg["boundaries"] == [2], cfg["boundaries"]
assert m["uniform4"]["segments"] == "[0,4)" and m["explicit"]["segments"] == "[0,2) [2,4)", (m["uniform4"], m["explicit"])
assert m["uniform2"]["segments"] == "[0,2) [2,4)", m["uniform2"]["segments"]
assert m["uniform1"]["peak_compute_bytes"] < m["uniform4"]["peak_compute_bytes"]
assert m["growing_student"]["policies"]["segmentation"] == m["growing"]["policies"]["segmentation"]

# Time to quality off the curves: every method's held-out perplexity before training, at 4 points of
# its 24 steps (layer-wise: after every visit), FLOPs to the end; the target is e2e_kd's last point, and
# each layer-wise figure is where its curve first reaches it (interpolated between the points around it).
for run in ("kd", "kds"):
    rep, cfg, m = load(run)
    assert list(m)[2:] == ["lwcl", "layerwise_no_curriculum", "e2e_kd"], list(m)
    assert cfg["curve_points"] == (4 if run == "kd" else 12), cfg["curve_points"]  # (12: lwcl_vs_kd's own default)
    for name in list(m)[2:]:
        c = m[name]["curve"]
        assert c[0]["step"] == 0 and c[0]["flops"] <= m[name]["train_flops"], (run, name, c[0])
        for a, b in zip(c, c[1:]):
            assert b["step"] > a["step"] and b["seconds"] >= a["seconds"] and b["flops"] > a["flops"], (run, name, a, b)
        assert c[-1]["flops"] == m[name]["train_flops"] and m[name]["eval_seconds"] > 0, (run, name, c[-1])
        for f in ("quality_vs_seconds.png", "quality_vs_flops.png"):
            with open(os.path.join(work, run, f), "rb") as fh:
                assert fh.read(8) == b"\x89PNG\r\n\x1a\n", (run, f)
    kd_curve = m["e2e_kd"]["curve"]
    if run == "kd":
        assert [p["step"] for p in kd_curve] == [0, 6, 12, 18, 24], kd_curve
        assert len(m["lwcl"]["curve"]) == m["lwcl"]["visits"] + 1, (len(m["lwcl"]["curve"]), m["lwcl"]["visits"])
        # The pruned student's point: the same sample and model before any step, on both sides.
        assert m["lwcl"]["curve"][0]["ppl"] == kd_curve[0]["ppl"], (m["lwcl"]["curve"][0], kd_curve[0])
    s = rep["summary"]
    target = kd_curve[-1]["ppl"]
    assert s["target_ppl"] == target, (s["target_ppl"], target)
    kd_at = reach(kd_curve, target)
    for name in ("lwcl", "layerwise_no_curriculum"):
        r = reach(m[name]["curve"], target)
        assert s[name]["reached"] == (r is not None) and m[name]["reached_target"] == (1 if r else 0), (run, name, s[name])
        assert ("time_ratio" in s[name]) == (r is not None and kd_at["flops"] > 0), (run, name, s[name])
        assert abs(s[name]["equal_budget_ppl_ratio"] - m[name]["val_ppl"] / m["e2e_kd"]["val_ppl"]) < 1e-12
        if r and kd_at["flops"] > 0:  # (the pruned student may already be as good as e2e_kd's end)
            for k, key in (("seconds", "time_ratio"), ("cpu_seconds", "cpu_ratio"), ("flops", "flops_ratio")):
                assert abs(s[name][key] - r[k] / kd_at[k]) <= 1e-9 * r[k] / kd_at[k], (run, name, key, s[name][key], r, kd_at)
        # The time to 50% and 90% of end-to-end KD's gain over the pruned student's point.
        start = kd_curve[0]["ppl"]
        for q in (50, 90):
            key = f"time_to_gain{q}_ratio"
            level = start - q / 100 * (start - target)
            kd_l, r_l = reach(kd_curve, level), reach(m[name]["curve"], level)
            if start > target and kd_l and kd_l["seconds"] > 0 and r_l:
                ratio = r_l["seconds"] / kd_l["seconds"]
                assert abs(m[name][key] - ratio) <= 1e-9 * ratio, (run, name, key, m[name][key], ratio)
                assert s[name][f"time_ratio_gain{q}"] == m[name][key], (run, name, q)
            else:
                assert key not in m[name], (run, name, key, start, target)
# The tuning knobs reach the method they name, and --only runs that method alone (no summary).
rep, cfg, m = load("kdk")
assert list(m)[2:] == ["lwcl"] and "summary" not in rep, (list(m), rep.keys())
assert cfg["only"] == "lwcl" and cfg["growth"] is True and cfg["lwcl_lr"] == 0.003, cfg
p = m["lwcl"]["policies"]
assert (p["loss"], p["segmentation"], p["curriculum"]) == ("weighted_sum<nmse,cosine>", "growing", "two_stage"), p
# 4 layers grow 1, 2, 4 per segment: 3 stages of two phases, 4 + 4 + 2 + 2 + 1 + 1 visits; the closing
# KD stage takes a quarter of the 32 steps.
assert (m["lwcl"]["phases"], m["lwcl"]["visits"]) == (6, 14), (m["lwcl"]["phases"], m["lwcl"]["visits"])
assert (m["lwcl"]["kd_steps"], m["lwcl"]["segment_steps"]) == (8, 24), (m["lwcl"]["kd_steps"], m["lwcl"]["segment_steps"])
run_opts = json.load(open(os.path.join(work, "kdk", "lwcl", "config.json")))["options"]
# (its own rate, not lwcl_vs_kd's --lr of 4e-3; each decaying to a tenth)
assert run_opts["lr"] == 0.003 and math.isclose(run_opts["min_lr"], 0.003 / 10, rel_tol=1e-15), run_opts
assert run_opts["final_kd_share"] == 0.25, run_opts
assert run_opts["kd_lr"] == 0.001, run_opts
# The closing KD stage trains at its own rate, decaying to a tenth of it.
kd_event = next(r for r in map(json.loads, open(os.path.join(work, "kdk", "lwcl", "metrics.jsonl")))
                if r.get("event") == "final_kd")
assert (kd_event["lr"], kd_event["steps"]) == (0.001, 8) and math.isclose(kd_event["min_lr"], 0.001 / 10, rel_tol=1e-15), kd_event
rep, cfg, m = load("kdr")
assert list(m)[2:] == ["lwcl"], list(m)
assert m["lwcl"]["policies"]["curriculum"] == "curriculum<front_to_back,ramp,as_segmented>", m["lwcl"]["policies"]
assert m["lwcl"]["ramp"] == "2-5 of 6" and m["lwcl"]["visits"] == 4, (m["lwcl"]["ramp"], m["lwcl"]["visits"])
rep, cfg, m = load("kde")
assert list(m)[2:] == ["e2e_kd"], list(m)
e = m["e2e_kd"]
assert (e["lr"], e["temperature"], e["hidden_mse_weight"], e["warmup_steps"]) == (0.003, 2, 0.5, 4), e
# Its warm-up: the rate of steps 1-4 rising linearly to 3e-3 (each step record has its rate).
lrs = [json.loads(l)["lr"] for l in open(os.path.join(work, "kde", "e2e_kd", "metrics.jsonl")) if '"lr"' in l]
assert len(lrs) == 24 and all(abs(lrs[s - 1] - 0.003 * s / 4) < 1e-15 for s in (1, 2, 3, 4)), lrs
base = load("kd")[2]["e2e_kd"]
# lwcl_vs_kd's defaults (chosen by the tuning): end-to-end KD at 2e-3 with the hidden-state MSE at 1,
# the layer-wise methods at 4e-3.
assert (base["lr"], base["temperature"], base["hidden_mse_weight"]) == (0.002, 1, 1) and cfg["lr"] == 0.004, (base, cfg)
assert json.load(open(os.path.join(work, "kd", "lwcl", "config.json")))["options"]["lr"] == 0.004
# The same student on the same first batch: the loss at step 1 differs only by the temperature and
# the hidden-state term.
def first_loss(run):
    recs = [json.loads(l) for l in open(os.path.join(work, run, "e2e_kd", "metrics.jsonl"))]
    return next(r["loss"] for r in recs if r.get("step") == 1 and "loss" in r)
assert first_loss("kde") != first_loss("kd"), (first_loss("kde"), first_loss("kd"))
# Depth halved: block influence keeps 2 of the 4 teacher layers, the layer map says which teacher layers
# each student layer replaces, and the cumulative error is read at the student's 2 boundaries.
drep = json.load(open(os.path.join(work, "depth", "report.json")))
dcfg = json.load(open(os.path.join(work, "depth", "config.json")))
assert len(dcfg["mc"]) == 1 and dcfg["mc"][0].endswith("tests/data/mc/items.jsonl"), dcfg["mc"]
dm = {x["name"]: x for x in drep["methods"]}
assert dm["pruned"]["layers"] == 2 and drep["student_parameters"] < drep["teacher_parameters"], dm["pruned"]
b = dm["pruned"]["boundaries"]
assert len(b) == 3 and b[0] == 0 and b[-1] == 4 and b == sorted(set(b)), b
assert 0.4 < dm["pruned"]["block_removed_fraction"] < 0.6, dm["pruned"]["block_removed_fraction"]
for name in ("pruned", "lwcl", "e2e_kd"):
    assert len(dm[name]["cumulative_error"]) == 2 and math.isfinite(dm[name]["val_ppl"]), (name, dm[name])
assert dm["lwcl"]["val_ppl"] != dm["pruned"]["val_ppl"], dm["lwcl"]["val_ppl"]  # trained
# --mc: every row scored on the task's first 6 items, the teacher's as eval_model scores it, and a
# multiple-choice table in table.md; --save-dtype bf16: the students' weights as bf16, with the tokenizer.
mc_ref = json.load(open(os.path.join(work, "depth_mc.json")))
ref = mc_ref["tasks"][0] if "tasks" in mc_ref else mc_ref[0]
for name, m in dm.items():
    assert m["mc_items_n"] == 6, (name, m.get("mc_items_n"))
    for k in ("acc", "acc_norm"):
        assert 0 <= m["mc_items_" + k] <= 1 and m["mc_items_" + k] * 6 == round(m["mc_items_" + k] * 6), (name, k, m)
        assert m["mc_items_" + k + "_stderr"] >= 0, (name, k)
for k in ("acc", "acc_norm"):
    assert dm["teacher"]["mc_items_" + k] == ref[k], (k, dm["teacher"]["mc_items_" + k], ref[k])
dmd = open(os.path.join(work, "depth", "table.md")).read()
assert "multiple choice: zero-shot" in dmd and "| teacher | items | 6 |" in dmd, dmd
for name in ("lwcl", "e2e_kd"):
    sdir = os.path.join(work, "depth", name, "student")
    scfg = json.load(open(os.path.join(sdir, "config.json")))
    assert scfg["torch_dtype"] == "bfloat16", (name, scfg["torch_dtype"])
    for f in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        assert os.path.exists(os.path.join(sdir, f)), (name, f)
# Three seeds: one run folder each, and the mean and sample standard deviation over them. Seed 0 is the
# single run (the same calibration sample and data order: qs's perplexities to the bit); the seeds change
# the calibration sample and the data order, not the teacher or the held-out sample.
import statistics
summary = json.load(open(os.path.join(work, "seeds", "report.json")))
assert summary["seeds"] == ["seed_0", "seed_1", "seed_2"], summary["seeds"]
per = [load(os.path.join("seeds", f"seed_{k}")) for k in range(3)]
qs_rep, qs_cfg, qs_m = load("qs")
for name in ("teacher", "pruned", "lwcl", "e2e_kd"):
    assert per[0][2][name]["val_ppl"] == qs_m[name]["val_ppl"], (name, per[0][2][name]["val_ppl"], qs_m[name]["val_ppl"])
sm = {m["name"]: m for m in summary["methods"]}
assert list(sm) == ["teacher", "pruned", "lwcl", "e2e_kd"], list(sm)
for name, m in sm.items():
    vals = [p[2][name]["val_ppl"] for p in per]
    assert m["val_ppl"]["values"] == vals, (name, m["val_ppl"], vals)
    assert abs(m["val_ppl"]["mean"] - statistics.mean(vals)) < 1e-12 * statistics.mean(vals)
    assert abs(m["val_ppl"]["sd"] - statistics.stdev(vals)) < 1e-9 * max(1.0, statistics.stdev(vals))
assert sm["teacher"]["val_ppl"]["sd"] == 0  # one teacher, one held-out sample
# Another calibration sample and another data order per seed (the hashes of their tokens), seed 0's
# those of the single run; the recovered students differ. (Two calibration samples may still prune the
# same groups, so the pruned student's perplexity can repeat.)
for key in ("calibration_hash", "training_stream_hash"):
    hashes = [p[2]["pruned"][key] for p in per]
    assert len(set(hashes)) == 3 and hashes[0] == qs_m["pruned"][key], (key, hashes, qs_m["pruned"][key])
for name in ("lwcl", "e2e_kd"):
    assert len(set(sm[name]["val_ppl"]["values"])) == 3, (name, sm[name]["val_ppl"])
assert "| lwcl |" in open(os.path.join(work, "seeds", "table.md")).read()
print("comparison_programs: 5 programs, their reports and refusals, the quality curves, depth pruning and the seeds harness checked")
PY

# Resume over seeds: the seeds run killed after its first two seeds (seed_2's report.json and the summary
# gone) and started again with the same command reads seeds 0 and 1 back, runs seed 2, and writes the
# uninterrupted run's summary (step budgets: the same numbers to the bit). A seed whose config.json
# differs from the run's (an option changed) runs again.
cp "$work/seeds/report.json" "$work/seeds_uninterrupted.json"
cp "$work/seeds/table.md" "$work/seeds_uninterrupted.md"
rm "$work/seeds/report.json" "$work/seeds/seed_2/report.json"
"$x/quickstart" "${common[@]}" --budget steps:24 --skip-no-curriculum --seeds 3 --out "$work/seeds" > "$work/seeds_resumed.txt"
python3 - "$work/seeds/config.json" "$work/seeds/seed_0/config.json" <<'PY'
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
c = json.load(open(src))
c["lr"] = c["lr"] * 2  # as if seed 0 had run with another learning rate
json.dump(c, open(dst, "w"), indent=2)
# Seed 1 as a build before --warmup-steps would have written it: the option, at its default here, is no change.
one = os.path.join(os.path.dirname(os.path.dirname(dst)), "seed_1", "config.json")
c = json.load(open(one))
del c["warmup_steps"]
json.dump(c, open(one, "w"), indent=2)
PY
"$x/quickstart" "${common[@]}" --budget steps:24 --skip-no-curriculum --seeds 3 --out "$work/seeds" > "$work/seeds_changed.txt"
python3 - "$work" <<'PY'
import json, os, sys
work = sys.argv[1]
def skipped(f):
    text = open(os.path.join(work, f)).read()
    return sorted(k for k in range(3) if f"seeds/seed_{k} finished before with the same configuration" in text)
assert skipped("seeds_resumed.txt") == [0, 1], skipped("seeds_resumed.txt")
assert skipped("seeds_changed.txt") == [1, 2], skipped("seeds_changed.txt")
want = {m["name"]: m for m in json.load(open(os.path.join(work, "seeds_uninterrupted.json")))["methods"]}
got = {m["name"]: m for m in json.load(open(os.path.join(work, "seeds", "report.json")))["methods"]}
assert list(got) == list(want), (list(got), list(want))
for name in want:
    for key in ("val_ppl", "err_last", "tokens", "peak_compute_bytes"):
        assert got[name][key]["values"] == want[name][key]["values"], (name, key, got[name][key], want[name][key])
# The table's own columns survive a resume (read back from the seeds' report.json).
def cost_header(f):
    return open(os.path.join(work, f)).read().split("\n| method |")[2].split("\n")[0]
assert cost_header("seeds/table.md") == cost_header("seeds_uninterrupted.md"), (cost_header("seeds/table.md"),
                                                                               cost_header("seeds_uninterrupted.md"))
print("comparison_programs: a resumed seeds run skips its finished seeds and writes the uninterrupted summary")
PY
