#!/usr/bin/env bash
# The GPU checks in one go, for a machine with GPUs but no Debian packages (nvcc, CMake, ninja and
# PyTorch's pip wheels of cuDNN and NCCL): configure against the carried dependencies
# (scripts/carry-deps.sh, run beforehand where the Debian packages are; the folder travels with
# the working tree), build the tests and the allreduce benchmarks, then
#   1. the CUDA and nccl tests (tandem_tests "[cuda],[nccl]": the collective suite on every GPU),
#   2. the allreduce sweep, tandem's nccl backend vs raw NCCL (benchmarks/bench_allreduce.py --gpu),
#   3. the whole test program (the CPU backend on a machine where CUDA is present).
# Logs and results go to $OUT (default gpu-out/); SUMMARY lists each step's exit status.
# GPU_CHECK_CMAKE_ARGS adds CMake arguments. Usage: scripts/gpu-check.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
carry="$root/third_party_carry"
if [ ! -d "$carry/include/eigen3" ]; then
  echo "third_party_carry/ is missing: run scripts/carry-deps.sh where the Debian packages are" >&2
  exit 1
fi
# The folder of a pip wheel's library (cuDNN, NCCL): nvidia/<name>, or wherever under nvidia/ its
# lib<name>.so.* lies (wheels for newer CUDA versions have moved things around).
wheel() {
  local dir
  dir=$(python3 -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null)
  if [ -n "$dir" ] && ls "$dir"/lib/lib"$1".so* >/dev/null 2>&1; then echo "$dir"; return; fi
  dir=$(python3 -c "import nvidia as m; print(list(m.__path__)[0])" 2>/dev/null) || return 0
  local lib
  lib=$(find "$dir" -name "lib$1.so*" 2>/dev/null | head -1)
  [ -n "$lib" ] && dirname "$(dirname "$lib")"
}
export CUDNN_ROOT="${CUDNN_ROOT:-$(wheel cudnn)}" NCCL_ROOT="${NCCL_ROOT:-$(wheel nccl)}"
export LD_LIBRARY_PATH="$CUDNN_ROOT/lib:$NCCL_ROOT/lib:${LD_LIBRARY_PATH:-}"
# A collective that cannot finish fails within a minute instead of the default five.
export TANDEM_COMM_TIMEOUT_MS="${TANDEM_COMM_TIMEOUT_MS:-60000}"
summary="$out/SUMMARY"
: >"$summary"
step() {  # step NAME TIMEOUT_S COMMAND...: runs it, logs to $out/NAME.log, records status and time
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - t0)) s" | tee -a "$summary"
  tail -n 25 "$out/$name.log"
  return $rc
}

# What the build will find, for when configure fails: GPUs, nvcc, the toolkit's cuBLAS, the wheels.
{
  nvidia-smi -L
  echo "nvcc: $(command -v nvcc) $(nvcc --version | tail -1)"
  ls -d /usr/local/cuda*/lib*/libcublas.so* 2>&1 | head -3
  echo "cuDNN $CUDNN_ROOT"
  echo "NCCL $NCCL_ROOT"
  cmake --version | head -1
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
step configure 300 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTANDEM_WITH_CUDA=ON -DTANDEM_WITH_MPI=OFF -DTANDEM_BUILD_EXAMPLES=OFF \
  -DCMAKE_PREFIX_PATH="$carry" -DZLIB_ROOT="$carry" ${GPU_CHECK_CMAKE_ARGS:-} || exit 1
step build 600 cmake --build build-gpu --target tandem_tests bench_allreduce bench_nccl_allreduce \
  || exit 1
step gpu_tests 300 build-gpu/tests/tandem_tests "[cuda],[nccl]" --durations yes
step allreduce 300 python3 benchmarks/bench_allreduce.py --gpu --repeats 5 \
  --bin build-gpu/benchmarks --out "$out/allreduce_nccl.json" --plot "$out/allreduce_nccl.png"
step all_tests 600 build-gpu/tests/tandem_tests
cat "$summary"
