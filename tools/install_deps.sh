#!/usr/bin/env bash
# Installs what lwcl needs on a Debian 12 machine, from Debian packages only. Idempotent: packages that
# are already present are skipped, so the README's commands can call it every time.
#   tools/install_deps.sh            build + test dependencies (compilers, header libraries, BLAS)
#   tools/install_deps.sh --bench    also the GEMM providers compared in bench/ (BLIS, oneDNN)
#   tools/install_deps.sh --python   also Python with PyTorch and NumPy (oracle fixtures, bench/peer)
#   tools/install_deps.sh --corpus   also the public-domain texts (bible-kjv, r-cran-janeaustenr)
set -euo pipefail

base=(cmake make g++ clang libomp-dev pkg-config
      libboost-dev doctest-dev libbenchmark-dev libopenblas-openmp-dev
      nlohmann-json3-dev libzstd-dev libcli11-dev libpng-dev libicu-dev)
bench=(libblis-dev libdnnl-dev)
python=(python3 python3-numpy python3-torch)
corpus=(bible-kjv r-cran-janeaustenr)

want=("${base[@]}")
for arg in "$@"; do
  case "$arg" in
    --bench) want+=("${bench[@]}") ;;
    --python) want+=("${python[@]}") ;;
    --corpus) want+=("${corpus[@]}") ;;
    --all) want+=("${bench[@]}" "${python[@]}" "${corpus[@]}") ;;
    *) echo "install_deps.sh: unknown option '$arg' (expected --bench, --python, --corpus or --all)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install_deps.sh: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
