#!/usr/bin/env bash
# Sourced by the run_*.sh scripts: side_by_side <cmake target> <python script> <rounds> [program options]
# builds the lwcl program, then alternates it with the PyTorch script for <rounds> rounds in one
# environment (this machine is shared and noisy), echoing the first round's output in full. It leaves
# the per-round step seconds in the arrays lwcl_times and torch_times. PyTorch runs with
# torch.set_num_threads(1) while its BLAS uses every core, its fastest setting on this 2-core machine;
# lwcl runs with its defaults (OpenMP over all cores).
side_by_side() {
  local target=$1 script=$2 rounds=$3 r out
  shift 3
  tools/install_deps.sh --python
  cmake --preset host >/dev/null
  cmake --build --preset host --target "$target" -j"$(nproc)" >/dev/null
  lwcl_times=() torch_times=()
  for r in $(seq "$rounds"); do
    out=$("build/host/bench/peer/$target" "$@")
    [ "$r" = 1 ] && echo "$out"
    lwcl_times+=("$(echo "$out" | sed -n 's/^lwcl step seconds.*: //p')")
    out=$(/usr/bin/python3 "$script" --threads 1 "$@")
    [ "$r" = 1 ] && echo "$out"
    torch_times+=("$(echo "$out" | sed -n 's/^pytorch step seconds.*: //p')")
    echo "round $r: lwcl ${lwcl_times[-1]} s, pytorch ${torch_times[-1]} s"
  done
}
