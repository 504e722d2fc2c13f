#!/usr/bin/env bash
# What each CUDA kernel needs at launch, from ptxas (no GPU needed): registers, spills, stack
# and shared memory per kernel, the largest per file. Every kernel launches 256 threads a block
# (cuda::kThreads), so up to 255 registers a thread fit; a spill or a stack frame costs local
# memory traffic on every launch. Usage: scripts/cuda-resources.sh [ARCH] (default 90).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
arch="${1:-90}"
nvcc="${CUDACXX:-/usr/local/cuda/bin/nvcc}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for cu in "$root"/src/cuda/*.cu; do
  name="$(basename "$cu" .cu)"
  "$nvcc" -std=c++17 -O3 -DNDEBUG -DTANDEM_WITH_CUDA=1 -I"$root/include" \
    -isystem /usr/include/eigen3 --generate-code="arch=compute_$arch,code=sm_$arch" \
    -Xptxas -v -c "$cu" -o "$out/$name.o" 2>"$out/$name.log"
  awk -v file="$name.cu" '
    /Compiling entry function/ { kernels++ }
    /bytes stack frame/ {
      if ($1 + 0 > stack) stack = $1 + 0
      if ($5 + $9 > 0) spilling++
    }
    /Used [0-9]+ registers/ {
      for (i = 1; i <= NF; i++) {
        if ($(i + 1) == "registers," && $i + 0 > regs) regs = $i + 0
        if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/ && $i + 0 > smem) smem = $i + 0
      }
    }
    END { printf "%-16s %4d kernels  max %3d registers  max %5d B smem  max %3d B stack  %d spilling\n",
                 file, kernels, regs, smem, stack, spilling }' "$out/$name.log"
done
