#!/usr/bin/env bash
# ctest hf_interop: hf_interop_writer writes one checkpoint folder per shape class lwcl produces, then
# tests/model/hf_interop_test.py loads each in transformers (tests/support/hf_python.sh) and compares.
#   bash tests/support/hf_interop.sh <hf_interop_writer> <scratch dir>
set -euo pipefail
writer=$1 out=$2
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$out"
"$writer" "$out"
bash "$here/hf_python.sh" "$here/../model/hf_interop_test.py" "$out"
