#!/usr/bin/env bash
# Sets up, builds and runs the main example (training on Fashion-MNIST). Extra arguments go to
# the example (try --help).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$root/build"
exec "$root/build/examples/tandem-fashion-mnist" "$@"
