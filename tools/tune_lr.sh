#!/usr/bin/env bash
# The learning rate of every method, tuned the same way on one harder setting: tools/tune.sh with one
# setting lr<rate>="--lr <rate>" per peak learning rate given (LWCL, layer-wise without curriculum and
# end-to-end KD all at that rate), on the deep teacher of <family> with <flags>.
#   tools/tune_lr.sh <family> "<flags>" <budget seconds> <out> <lr>...
set -euo pipefail
cd "$(dirname "$0")/.."
family=$1 flags=$2 budget=$3 out=$4
shift 4
settings=()
for lr in "$@"; do settings+=("lr$lr=--lr $lr"); done
exec tools/tune.sh "$family" "$flags" "$budget" "$out" "${settings[@]}"
