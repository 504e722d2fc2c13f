#!/usr/bin/env bash
# Copies the header-only dependencies (Eigen, Catch2, CLI11, nlohmann-json) with their CMake
# package files, zlib's headers and library, and the Fashion-MNIST files from this machine into
# third_party_carry/ (git-ignored, laid out like a prefix), for a machine that has no Debian
# packages: the GPU machine, where scripts/gpu-check.sh points CMake at it. Run scripts/setup.sh
# first. Usage: scripts/carry-deps.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dst="$root/third_party_carry"
rm -rf "$dst"
copy() {  # copy SRC (a path under /usr) to the same place under $dst
  mkdir -p "$dst/$(dirname "$2")"
  cp -rL "$1" "$dst/$2"
}
copy /usr/include/eigen3 include/eigen3
copy /usr/share/eigen3/cmake share/eigen3/cmake
copy /usr/include/catch2 include/catch2
copy /usr/lib/cmake/Catch2 lib/cmake/Catch2
copy /usr/lib/libCatch2WithMain.a lib/libCatch2WithMain.a
copy /usr/include/nlohmann include/nlohmann
copy /usr/share/cmake/nlohmann_json share/cmake/nlohmann_json
copy /usr/include/CLI include/CLI
copy /usr/share/cmake/CLI11 share/cmake/CLI11
copy /usr/include/zlib.h include/zlib.h
copy /usr/include/zconf.h include/zconf.h
# The real file under the link name: the program then asks for libz.so.1, which any machine has.
copy /usr/lib/x86_64-linux-gnu/libz.so lib/libz.so
# Fashion-MNIST (30 MB of gzip files), so the example trains on real u8 images there: the GPU
# data path (pinned staging, augmentation on the GPU) and the evaluation run as a user runs them.
copy /usr/share/datasets/fashion-mnist fashion-mnist
echo "third_party_carry: $(du -sh "$dst" | cut -f1)"
