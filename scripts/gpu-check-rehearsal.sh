#!/usr/bin/env bash
# Rehearses scripts/gpu-check.sh on this machine, without a GPU, before a session with a GPU spends
# its device time on it: the build is the CPU emulation of CUDA (tests/cuda_emu), a stand-in
# nvidia-smi lists its TANDEM_CUDA_EMU_DEVICES (default 2) GPUs as H200s, the workloads are token
# ones and every limit 20 times longer (TANDEM_GPU_CHECK_TINY=1). It proves the script's steps,
# their flags, logs, summary and $OUT, the look-up of PyTorch's wheels (stand-ins made of the
# toolkit's files), and the programs' GPU paths as far as the emulation goes; no figure it prints
# means anything. The PyTorch side of the ResNet-50 benchmark fails here (no CUDA PyTorch), so its
# step does too; it passes when every other step did and tandem's side of that one ran.
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
# PyTorch's wheels as the GPU machine has them (nvidia/cudnn, nvidia/nccl, nvidia/cu13: headers,
# and libraries by their versioned names only), made of the toolkit's files; gpu-check.sh finds
# them through python3. A real CUDA configuration against them (no build) must take the wheels'
# libraries, cuBLAS's too, as the GPU machine's would if its toolkit had no cuBLAS.
toolkit=/usr/local/cuda
for w in cudnn:cudnn nccl:nccl cu13:cublas; do
  mkdir -p "$fake/wheels/nvidia/${w%%:*}/lib" "$fake/wheels/nvidia/${w%%:*}/include"
  cp "$toolkit"/include/"${w##*:}"*.h "$fake/wheels/nvidia/${w%%:*}/include/"
  for lib in "$toolkit"/lib64/lib"${w##*:}"*.so.[0-9]*; do
    name=$(basename "$lib" | sed -E 's/(\.so\.[0-9]+).*/\1/')  # libcudnn.so.9.19.0 -> .so.9
    ln -sf "$(readlink -f "$lib")" "$fake/wheels/nvidia/${w%%:*}/lib/$name"
  done
done
export PYTHONPATH="$fake/wheels${PYTHONPATH:+:$PYTHONPATH}"
w="$fake/wheels/nvidia"
CUBLAS_ROOT="$w/cu13" CUDNN_ROOT="$w/cudnn" NCCL_ROOT="$w/nccl" cmake -S "$root" -B "$fake/cfg" \
  -G Ninja -DTANDEM_WITH_CUDA=ON -DTANDEM_WITH_MPI=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$root/third_party_carry" >"$fake/cfg.log" 2>&1 ||
  { cat "$fake/cfg.log"; exit 1; }
found=$(grep "CUDA backend on" "$fake/cfg.log")
echo "real CUDA configuration against the stand-in wheels:${found#*tandem:}"
for lib in cu13/lib/libcublas.so.13 cudnn/lib/libcudnn.so.9 nccl/lib/libnccl.so.2; do
  [[ "$found" == *"$w/$lib"* ]] || { echo "not taken from the wheels: $lib" >&2; exit 1; }
done
export TANDEM_GPU_CHECK_TINY=1 TANDEM_GPU_CHECK_BUILD=build-rehearsal
export TANDEM_GPU_CHECK_SECONDS="${TANDEM_GPU_CHECK_SECONDS:-7200}"
export TANDEM_GPU_CHECK_WORK="${TANDEM_GPU_CHECK_WORK:-/tmp/rehearsal}"
export OUT="${OUT:-$root/gpu-out-rehearsal}"
export GPU_CHECK_CMAKE_ARGS="-DTANDEM_CUDA_EMULATION=ON ${GPU_CHECK_CMAKE_ARGS:-}"
# Not `exec`: the trap removes the stand-ins afterwards. Passed: every step, but the ResNet-50
# benchmark, where only its tandem side must have run.
"$root/scripts/gpu-check.sh" || true
python3 - "$TANDEM_GPU_CHECK_WORK/tandem-gpu-check" <<'EOF'
import json, os, sys
work = sys.argv[1]
steps = json.load(open(os.path.join(work, "summary.json")))["steps"]
bad = [s["name"] for s in steps if s["exit"] != 0 and s["name"] != "resnet50"]
# Every step must have run: a script that stops early (a syntax error) leaves a summary of the
# steps before it, all passed.
expected = ["configure", "build", "build_benchmarks"] + (
    os.environ.get("TANDEM_GPU_CHECK_STEPS", "").replace(",", " ").split() or
    ["gpu_tests", "example", "gpu_ops", "resnet50", "allreduce", "all_tests"])
ran = {s["name"] for s in steps}
bad += [f"{name} (did not run)" for name in expected if name not in ran]
try:
    tandem = json.load(open(os.path.join(work, "resnet50_gpu.json")))["tandem_img_per_s"]
except (OSError, ValueError, KeyError):
    tandem = None
if tandem is None and any(s["name"] == "resnet50" for s in steps):
    bad.append("resnet50 (tandem's side)")
print(f"rehearsal: {len(steps)} steps, " + (f"failed: {', '.join(bad)}" if bad else
      "all passed (the PyTorch side of ResNet-50 needs a GPU)"))
sys.exit(1 if bad else 0)
EOF
