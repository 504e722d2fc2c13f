#!/usr/bin/env bash
# Installs the Debian packages tandem builds, tests and runs with (only the missing ones).
# Sourced by run-example.sh and test.sh; safe to run on its own. `setup.sh --bench` adds what the
# benchmark scripts compare against and plot with: PyTorch 1.13, torchvision, matplotlib.
set -euo pipefail

# clang-14 and its runtimes (libFuzzer, the sanitizers) build the fuzz targets; llvm-14 brings
# llvm-symbolizer, which turns sanitizer reports into file:line.
packages=(cmake ninja-build g++ libeigen3-dev catch2 zlib1g-dev nlohmann-json3-dev libcli11-dev
          dataset-fashion-mnist ccache libopenmpi-dev openmpi-bin
          clang-14 libclang-rt-14-dev llvm-14)
if [ "${1:-}" = "--bench" ]; then
  # libopenblas0: the BLAS libtorch1.13 recommends (apt installs recommends by default; without it
  # the peer's matmuls run on the reference BLAS, at 6 GFLOP/s, which would flatter tandem).
  packages+=(python3-torch python3-torchvision python3-matplotlib libopenblas0)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "tandem setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
