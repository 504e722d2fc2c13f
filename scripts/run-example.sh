#!/usr/bin/env bash
# Sets up, builds and runs the main example: ResNet-20 trained on Fashion-MNIST, with a progress
# bar, test accuracy after every epoch and a checkpoint in ./checkpoints. Extra arguments go to
# the example (try --help).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$root/build"
exec "$root/build/examples/tandem-resnet" "$@"
