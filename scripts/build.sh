#!/usr/bin/env bash
# Configures and builds tandem in build/ (Release; the CUDA backend when its toolkit is found).
# Extra arguments go to CMake. Usage: scripts/build.sh [BUILD_DIR] [-DOPTION=VALUE ...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
cmake -S "$root" -B "$build" -G Ninja "$@" >/dev/null
cmake --build "$build"
