#!/usr/bin/env bash
# experiments/minilm_compress end to end on the pretrained all-MiniLM-L6-v2 (tools/install_deps.sh
# --minilm) and a corpus of the project's docs (train) and README.md (validation): width pruning with
# curves and two seeds, and depth halving (6 -> 3 layers). Checks every method's figures, the layer map,
# the students reloading bitwise, the seeds summary and the time-to-quality reading off the curves.
#   minilm_program.sh <build dir with experiments/> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
source "$src/tests/support/docs_corpus.sh"
make_docs_corpus "$src" "$work"
x=$build/experiments/minilm_compress
common=(--corpus "$work/corpus" --batch 4 --seq 32 --feature-batches 2 --calib-batches 2 --pool 16)
"$x" "${common[@]}" --budget steps:16 --curve-points 4 --curve-pool 8 --seeds 2 --out "$work/width" > "$work/width.txt"
"$x" "${common[@]}" --budget steps:8 --ratio 0 --depth 0.5 --out "$work/depth" > "$work/depth.txt"
set +e
"$x" "${common[@]}" --model "$work/nowhere" --out "$work/bad" > /dev/null 2> "$work/bad.txt"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "install_deps.sh --minilm" "$work/bad.txt" || { echo "minilm_program: a missing model gave $rc" >&2; exit 1; }

python3 - "$work" "$src" <<'PY'
import json, math, os, sys
work = sys.argv[1]
sys.path.insert(0, os.path.join(sys.argv[2], "tests", "support"))
from curves import reach
names = ["teacher", "pruned", "lwcl", "layerwise_no_curriculum", "e2e_embedding", "e2e_hidden"]

def check_seed(d, steps, layers):
    rep = json.load(open(os.path.join(d, "report.json")))
    m = {x["name"]: x for x in rep["methods"]}
    assert list(m) == names, list(m)
    assert rep["val_protocol"].startswith("split=validation pool=16 sentences"), rep["val_protocol"]
    assert m["teacher"]["cosine"] == 1 and m["pruned"]["layers"] == layers, (m["teacher"], m["pruned"]["layers"])
    for n in names[1:]:
        assert 0 < m[n]["cosine"] <= 1 + 1e-9 and 0 <= m[n]["top10_agreement"] <= 1, (n, m[n])
        assert m[n]["min_cosine"] <= m[n]["cosine"], n
    for n in names[2:]:
        assert m[n]["reloads_bitwise"] == 1 and m[n]["steps"] == steps, (n, m[n]["steps"])
        assert m[n]["run_peak_compute_bytes"] >= m[n]["peak_compute_bytes"] > 0, n
        assert m[n]["peak_resident_bytes"] > m[n]["run_peak_compute_bytes"], n
        assert m[n]["train_flops"] > 0 and m[n]["wall_seconds"] > 0, n
        cfg = json.load(open(os.path.join(d, n, "student", "config.json")))
        # BertModel derives the head width from the hidden size: with heads removed the student is written
        # in lwcl's form (model_type lwcl, its module beside it), otherwise as a plain bert checkpoint.
        plain = cfg["num_attention_heads"] * cfg["head_dim"] == cfg["hidden_size"]
        if plain:
            assert cfg["model_type"] == "bert", (n, cfg)
        else:
            assert cfg["model_type"] == "lwcl" and cfg["lwcl_family"] == "bert", (n, cfg)
            assert os.path.exists(os.path.join(d, n, "student", "lwcl_modeling.py")), n
        assert cfg["num_hidden_layers"] == layers, (n, cfg)
        assert os.path.exists(os.path.join(d, n, "student", "vocab.txt")), (n, "no tokenizer with the student")
    # The layer-wise students train the layers only; only the end-to-end ones move the embeddings.
    assert m["lwcl"]["peak_compute_bytes"] < m["e2e_embedding"]["peak_compute_bytes"]
    return m

seeds = []
for s in (0, 1):
    m = check_seed(os.path.join(work, "width", f"seed_{s}"), 16, 6)
    kd = m["e2e_embedding"]["curve"]
    assert [p["step"] for p in kd] == [0, 4, 8, 12, 16], kd
    target = kd[-1]["ppl"]
    kr = reach(kd, target)
    for n in ("lwcl", "layerwise_no_curriculum"):
        c = m[n]["curve"]
        assert c[0]["step"] == 0 and c[-1]["flops"] == m[n]["train_flops"], (n, c[0], c[-1])
        r = reach(c, target)
        assert m[n]["reached_target"] == (1 if r else 0), (n, m[n]["reached_target"])
        if r and kr["flops"] > 0:
            assert abs(m[n]["flops_to_target_ratio"] - r["flops"] / kr["flops"]) < 1e-9, (n, m[n]["flops_to_target_ratio"])
    seeds.append(m)
summary = {x["name"]: x for x in json.load(open(os.path.join(work, "width", "report.json")))["methods"]}
for n in names[1:]:
    vals = [s[n]["cosine"] for s in seeds]
    assert summary[n]["cosine"]["values"] == vals, (n, summary[n]["cosine"], vals)
    assert abs(summary[n]["cosine"]["mean"] - sum(vals) / 2) < 1e-12
# Two calibration samples and data orders: the recovered students differ.
assert seeds[0]["lwcl"]["cosine"] != seeds[1]["lwcl"]["cosine"]
m = check_seed(os.path.join(work, "depth"), 8, 3)
b = m["pruned"]["boundaries"]
assert len(b) == 4 and b[0] == 0 and b[-1] == 6 and b == sorted(set(b)), b
print("minilm_program: width with curves and seeds, depth 6 -> 3, reloads and refusals checked")
PY
