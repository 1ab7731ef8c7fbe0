#!/usr/bin/env bash
# The README's main job: installs what lwcl needs (Debian packages), fetches and tokenises the
# public-domain corpora when data/prepared/ is missing, builds experiments/quickstart with the host
# preset and runs it on the CPU. Extra arguments go to the program (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
cmake --preset host >/dev/null
cmake --build --preset host --target quickstart prepare_data -j"$(nproc)"
if [ ! -f data/prepared/validation.bin ]; then
  [ -f data/corpus/manifest.json ] || tools/fetch_corpus.sh data/corpus
  build/host/experiments/prepare_data --corpus data/corpus --out data/prepared --vocab 1024
fi
# The zero-shot multiple-choice tasks (written once, fixed seed) for --mc; not scored by default.
if [ ! -f data/mc/austen_next_sentence.validation.jsonl ]; then
  [ -f data/corpus/manifest.json ] || tools/fetch_corpus.sh data/corpus
  python3 tools/make_mc_tasks.py --corpus data/corpus --out data/mc
fi
exec build/host/experiments/quickstart "$@"
