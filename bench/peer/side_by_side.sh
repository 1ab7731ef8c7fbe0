#!/usr/bin/env bash
# Sourced by the run_*.sh scripts.
#   machine_line                  prints the CPU model, processor count, vector features and OPENBLAS_CORETYPE
#   side_by_side <cmake target> <python script> <rounds> [program options]
# builds the lwcl program, then alternates it with the PyTorch script for <rounds> rounds in one
# environment (machines here are shared and noisy), echoing the first round's output in full. The peer is
# PyTorch from PyPI, the one a researcher installs (tools/install_deps.sh --bench: pinned, its own virtual
# environment; LWCL_PEER_PYTHON names another interpreter, /usr/bin/python3 for Debian's 1.13). PyTorch
# runs at every thread count from 1 to the number of processors in every round (torch.set_num_threads;
# which one is fastest differs between machines), in f32 and, where the processor has bf16 arithmetic
# (avx512_bf16 or amx_tile), also under CPU bf16 autocast; lwcl with its defaults (OpenMP over all cores)
# and, where the processor has bf16, also with bf16 GEMMs (LWCL_GEMM_PRECISION=bf16).
# It leaves the per-round step seconds in lwcl_times (lwcl_bf16_times) and, per setting k (f32_<threads>,
# bf16_<threads>), in peer_times[k]; peer_summary <label> prints each setting's median, the fastest f32
# and bf16 settings, and lwcl's ratio against each (lwcl with bf16 GEMMs against both; the f32 ratio last).
machine_line() {
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) processors," \
       "features:$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_tile)$' | tr '\n' ' ')"
  echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
}

# The peer's interpreter: LWCL_PEER_PYTHON, else the --bench virtual environment's (installed if missing).
peer_python() {
  if [ -n "${LWCL_PEER_PYTHON:-}" ]; then
    echo "$LWCL_PEER_PYTHON"
    return
  fi
  tools/install_deps.sh --bench >&2
  echo "${LWCL_BENCH_VENV:-$HOME/.cache/lwcl/bench-venv}/bin/python"
}

# Whether the processor has bf16 arithmetic PyTorch's autocast can use.
cpu_has_bf16() { grep -m1 '^flags' /proc/cpuinfo | grep -qwE 'avx512_bf16|amx_tile'; }

declare -A peer_times
side_by_side() {
  local target=$1 script=$2 rounds=$3 r t out py k dtype dtypes=(f32)
  shift 3
  py=$(peer_python)
  cmake --preset host >/dev/null
  cmake --build --preset host --target "$target" -j"$(nproc)" >/dev/null
  machine_line
  echo "peer: $("$py" -c 'import torch; print("PyTorch", torch.__version__, "from", torch.__file__)' 2>/dev/null)"
  cpu_has_bf16 && dtypes+=(bf16)
  lwcl_times=()
  lwcl_bf16_times=()
  peer_times=()
  for r in $(seq "$rounds"); do
    out=$("build/host/bench/peer/$target" "$@")
    [ "$r" = 1 ] && echo "$out"
    lwcl_times+=("$(echo "$out" | sed -n 's/^lwcl step seconds.*: //p')")
    local line="round $r: lwcl ${lwcl_times[-1]} s"
    if cpu_has_bf16; then
      out=$(LWCL_GEMM_PRECISION=bf16 "build/host/bench/peer/$target" "$@")
      [ "$r" = 1 ] && echo "$out"
      lwcl_bf16_times+=("$(echo "$out" | sed -n 's/^lwcl step seconds.*: //p')")
      line+=", lwcl bf16 GEMMs ${lwcl_bf16_times[-1]} s"
    fi
    for dtype in "${dtypes[@]}"; do
      for t in $(seq "$(nproc)"); do
        k=${dtype}_$t
        out=$("$py" "$script" --threads "$t" --autocast "$([ "$dtype" = bf16 ] && echo bf16 || echo none)" "$@")
        [ "$r" = 1 ] && echo "$out"
        peer_times[$k]="${peer_times[$k]:-} $(echo "$out" | sed -n 's/^pytorch step seconds.*: //p')"
        line+=", pytorch $dtype $t thread(s) $(echo "$out" | sed -n 's/^pytorch step seconds.*: //p') s"
      done
    done
    echo "$line"
  done
}

# peer_summary <label> [tokens per step]: the medians of side_by_side's runs, PyTorch's fastest f32 and
# bf16-autocast settings named, and the lwcl/pytorch ratio against each (the f32 one last).
peer_summary() {
  local label=$1 tokens=${2:-0} k args=()
  for k in "${!peer_times[@]}"; do args+=("$k" "${peer_times[$k]}"); done
  python3 - "$label" "$tokens" "${lwcl_times[*]}" "${lwcl_bf16_times[*]:-}" "${args[@]}" <<'PY'
import statistics, sys
label, tokens, lw = sys.argv[1], int(sys.argv[2]), [float(x) for x in sys.argv[3].split()]
lw16 = [float(x) for x in sys.argv[4].split()]
a = sys.argv[5:]
rows = sorted((a[i].split("_")[0], int(a[i].split("_")[1]), statistics.median(float(x) for x in a[i + 1].split()))
              for i in range(0, len(a), 2))
rate = lambda s: " (%.0f tokens/s)" % (tokens / s) if tokens else ""
l = statistics.median(lw)
print("lwcl median step seconds: %.5f%s" % (l, rate(l)))
for d, t, p in rows:
    print("pytorch %s median step seconds, %d thread(s): %.5f%s" % (d, t, p, rate(p)))
def best(d):
    r = [x for x in rows if x[0] == d]
    return min(r, key=lambda x: x[2]) if r else None
if lw16:
    print("lwcl with bf16 GEMMs median step seconds: %.5f%s" % (statistics.median(lw16), rate(statistics.median(lw16))))
for d, what in (("bf16", "bf16 autocast"), ("f32", "f32")):
    b = best(d)
    if not b:
        continue
    print("pytorch's fastest %s setting: %d thread(s)" % (what, b[1]))
    if lw16:
        l16 = statistics.median(lw16)
        print("lwcl-bf16/pytorch%s %s ratio (lwcl with bf16 GEMMs against pytorch %s at %d thread(s)): %.3f: %s faster"
              % ("" if d == "f32" else "-bf16", label, what, b[1], l16 / b[2], "lwcl" if l16 < b[2] else "pytorch"))
    print("lwcl/pytorch%s %s ratio (against pytorch %s at %d thread(s)): %.3f: %s faster"
          % ("" if d == "f32" else "-bf16", label, what, b[1], l / b[2], "lwcl" if l < b[2] else "pytorch"))
PY
}
