#!/usr/bin/env bash
# Rehearses scripts/gpu-check.sh on this machine, without a GPU, before a session with a GPU spends
# its device time on it: the build is the CPU emulation of CUDA (tests/cuda_emu), a stand-in
# nvidia-smi lists its TANDEM_CUDA_EMU_DEVICES (default 2) GPUs as H200s, the workloads are token
# ones and every limit 20 times longer (TANDEM_GPU_CHECK_TINY=1). It proves the script's steps,
# their flags, logs, summary and $OUT, and the programs' GPU paths as far as the emulation goes;
# no figure it prints means anything. The PyTorch side of the ResNet-50 benchmark fails here (no
# CUDA PyTorch), so its step does too; every other step should pass.
# Run scripts/setup.sh and scripts/carry-deps.sh first. Builds into build-rehearsal/, writes to
# gpu-out-rehearsal/ (or $OUT). Usage: scripts/gpu-check-rehearsal.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
fake="$(mktemp -d)"
trap 'rm -rf "$fake"' EXIT
export TANDEM_CUDA_EMU_DEVICES="${TANDEM_CUDA_EMU_DEVICES:-2}"
cat >"$fake/nvidia-smi" <<EOF
#!/bin/sh
# Stands in for nvidia-smi: -L, and --query-gpu=compute_cap (all gpu-check.sh asks).
for a in "\$@"; do
  case "\$a" in
    -L) i=0; while [ \$i -lt $TANDEM_CUDA_EMU_DEVICES ]; do
          echo "GPU \$i: NVIDIA H200 (UUID: GPU-emulated-\$i)"; i=\$((i + 1)); done; exit 0 ;;
    --query-gpu=compute_cap) i=0; while [ \$i -lt $TANDEM_CUDA_EMU_DEVICES ]; do
          echo "9.0"; i=\$((i + 1)); done; exit 0 ;;
  esac
done
echo "nvidia-smi (rehearsal stand-in): \$* not emulated" >&2
exit 1
EOF
chmod +x "$fake/nvidia-smi"
export PATH="$fake:/usr/local/cuda/bin:$PATH"
export CUDNN_ROOT=/usr/local/cuda NCCL_ROOT=/usr/local/cuda  # the wheels' stand-ins: the toolkit
export TANDEM_GPU_CHECK_TINY=1 TANDEM_GPU_CHECK_BUILD=build-rehearsal
export TANDEM_GPU_CHECK_SECONDS="${TANDEM_GPU_CHECK_SECONDS:-7200}"
export TANDEM_GPU_CHECK_WORK="${TANDEM_GPU_CHECK_WORK:-/tmp/rehearsal}"
export OUT="${OUT:-$root/gpu-out-rehearsal}"
export GPU_CHECK_CMAKE_ARGS="-DTANDEM_CUDA_EMULATION=ON ${GPU_CHECK_CMAKE_ARGS:-}"
# Not `exec`: the trap removes the stand-in afterwards.
"$root/scripts/gpu-check.sh"
