#!/usr/bin/env bash
# Sourced by the run_*.sh scripts.
#   machine_line                  prints the CPU model, processor count, vector features and OPENBLAS_CORETYPE
#   side_by_side <cmake target> <python script> <rounds> [program options]
# builds the lwcl program, then alternates it with the PyTorch script for <rounds> rounds in one
# environment (machines here are shared and noisy), echoing the first round's output in full. PyTorch
# runs at every thread count from 1 to the number of processors in every round (torch.set_num_threads;
# which one is fastest differs between machines), lwcl with its defaults (OpenMP over all cores). It
# leaves the per-round step seconds in lwcl_times and, per thread count t, in torch_times_<t>;
# peer_summary <label> prints each setting's median, the fastest, and lwcl's ratio against it.
machine_line() {
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) processors," \
       "features:$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_tile)$' | tr '\n' ' ')"
  echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
}

side_by_side() {
  local target=$1 script=$2 rounds=$3 r t out
  shift 3
  tools/install_deps.sh --python
  cmake --preset host >/dev/null
  cmake --build --preset host --target "$target" -j"$(nproc)" >/dev/null
  machine_line
  lwcl_times=()
  for t in $(seq "$(nproc)"); do eval "torch_times_$t=()"; done
  for r in $(seq "$rounds"); do
    out=$("build/host/bench/peer/$target" "$@")
    [ "$r" = 1 ] && echo "$out"
    lwcl_times+=("$(echo "$out" | sed -n 's/^lwcl step seconds.*: //p')")
    local line="round $r: lwcl ${lwcl_times[-1]} s"
    for t in $(seq "$(nproc)"); do
      out=$(/usr/bin/python3 "$script" --threads "$t" "$@")
      [ "$r" = 1 ] && echo "$out"
      eval "torch_times_$t+=(\"$(echo "$out" | sed -n 's/^pytorch step seconds.*: //p')\")"
      eval "line+=\", pytorch $t thread(s) \${torch_times_$t[-1]} s\""
    done
    echo "$line"
  done
}

# peer_summary <label> [tokens per step]: the medians of side_by_side's runs, PyTorch's fastest thread
# setting named, and the lwcl/pytorch ratio against that setting (the last line).
peer_summary() {
  local label=$1 tokens=${2:-0} t args=()
  for t in $(seq "$(nproc)"); do eval "args+=(\"$t\" \"\${torch_times_$t[*]}\")"; done
  python3 - "$label" "$tokens" "${lwcl_times[*]}" "${args[@]}" <<'PY'
import statistics, sys
label, tokens, lw = sys.argv[1], int(sys.argv[2]), [float(x) for x in sys.argv[3].split()]
a = sys.argv[4:]
rows = [(int(a[i]), statistics.median(float(x) for x in a[i + 1].split())) for i in range(0, len(a), 2)]
rate = lambda s: " (%.0f tokens/s)" % (tokens / s) if tokens else ""
l = statistics.median(lw)
print("lwcl median step seconds: %.5f%s" % (l, rate(l)))
for t, p in rows:
    print("pytorch median step seconds, %d thread(s): %.5f%s" % (t, p, rate(p)))
bt, bp = min(rows, key=lambda r: r[1])
print("pytorch's fastest setting: %d thread(s)" % bt)
print("lwcl/pytorch %s ratio (against pytorch at %d thread(s)): %.3f: %s faster" % (label, bt, l / bp, "lwcl" if l < bp else "pytorch"))
PY
}
