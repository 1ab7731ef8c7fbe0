#!/usr/bin/env bash
# The README's main job: installs what lwcl needs (Debian packages), builds experiments/quickstart
# with the host preset and runs it on the CPU. Extra arguments go to the program (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
cmake --preset host >/dev/null
cmake --build --preset host --target quickstart -j"$(nproc)"
exec build/host/experiments/quickstart "$@"
