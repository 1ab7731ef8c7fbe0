#!/usr/bin/env bash
# ctest gguf_interop: gguf_interop_writer writes one GGUF file per class lwcl exports (with the same model as
# a Hugging Face folder), then tests/model/gguf_interop_test.py reads each with the gguf package and loads
# it in transformers where its GGUF loader holds the class (tests/support/hf_python.sh).
#   bash tests/support/gguf_interop.sh <gguf_interop_writer> <scratch dir>
set -euo pipefail
writer=$1 out=$2
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$out"
"$writer" "$out"
bash "$here/hf_python.sh" "$here/../model/gguf_interop_test.py" "$out"
