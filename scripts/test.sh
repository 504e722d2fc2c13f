#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite twice: the Release build (gcc, with the CUDA
# backend compiled when its toolkit is present), and an AddressSanitizer + UBSan build (clang) with
# the CUDA backend emulated on the CPU (its GPU tests run there); then fuzzes every file reader for
# a short, fixed time with that build, and runs the tests of threaded code under ThreadSanitizer
# (docs/RELIABILITY.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs="$(nproc)"
stage() { echo "== [${SECONDS} s] $*"; }  # each stage with the time spent so far
"$root/scripts/setup.sh"

# The CPU kernels' instruction sets (the library ships all three: CMakeLists.txt, TANDEM_CPU_ISAS),
# each tested here once, and compiled twice instead of three times: the release build takes the
# baseline and this machine's best, the sanitizer build the one between (AVX2 where the best is
# AVX-512; else the best), so the whole suite runs under each.
best=scalar
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo; then
  best=avx2
  if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo &&
     grep -qw avx512vl /proc/cpuinfo && grep -qw avx512dq /proc/cpuinfo; then best=avx512; fi
fi
release_isas=scalar
[ "$best" = scalar ] || release_isas="scalar;$best"
asan_isa=$best
[ "$best" = avx512 ] && asan_isa=avx2

stage "release build and tests (CPU kernels: ${release_isas/;/ and })"
"$root/scripts/build.sh" "$root/build" "-DTANDEM_CPU_ISAS=$release_isas"
ctest --test-dir "$root/build" -j "$jobs" --output-on-failure

stage "sanitizer build (clang: ASan + UBSan, and the fuzz targets; CPU kernels: $asan_isa), its tests, then the fuzzing"
# -O1 -g1 (libFuzzer's advice, line numbers in reports): clang builds this in a quarter of the
# time gcc takes for its ASan build at -O2. The fuzz targets link the same instrumented library.
clang=(-DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1"
       -DTANDEM_BUILD_BENCHMARKS=OFF)
# With the CUDA backend emulated on the CPU where the toolkit's headers are (tests/cuda_emu): its
# kernels, its cuBLAS and cuDNN calls and its allocator run in the [cuda] tests, under ASan.
emulate=ON
for h in cuda_runtime.h cublas_v2.h cudnn.h nccl.h; do
  [ -f "/usr/local/cuda/include/$h" ] || emulate=OFF
done
[ "$emulate" = OFF ] && echo "no CUDA toolkit headers in /usr/local/cuda: the GPU tests do not run"
"$root/scripts/build.sh" "$root/build-asan" "${clang[@]}" -DTANDEM_SANITIZE=ON -DTANDEM_FUZZ=ON \
  -DTANDEM_CPU_ISAS=$asan_isa -DTANDEM_CUDA_EMULATION=$emulate
export ASAN_SYMBOLIZER_PATH="${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer-14 || true)}"
# The emulated GPU hidden (TANDEM_CUDA_EMU_DEVICES=0): code that takes a GPU when there is one (the
# examples, libtorch's MNIST) runs on the CPU as everywhere else here; the GPU tests come after.
# Less what the sanitizers add nothing to: the header and downstream builds (compile checks) and
# the Fashion-MNIST smoke run (3 minutes here under ASan; the synthetic example runs and the IDX
# tests and fuzzing cover its code).
asan=(env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
      UBSAN_OPTIONS=print_stacktrace=1)
TANDEM_CUDA_EMU_DEVICES=0 "${asan[@]}" ctest --test-dir "$root/build-asan" -j "$jobs" \
  --output-on-failure -E '^(example_resnet_smoke|headers_standalone_.*|downstream_.*)$'
if [ "$emulate" = ON ]; then
  # Two emulated GPUs: the nccl backend runs two ranks, with its fault tests, and DDP on both.
  stage "the GPU tests on two emulated GPUs (TANDEM_REQUIRE_GPU=1: none may skip)"
  gpu_tests() {
    TANDEM_CUDA_EMU_DEVICES=2 TANDEM_REQUIRE_GPU=1 "${asan[@]}" \
      "$root/build-asan/tests/tandem_tests" --warn NoTests "$@"
  }
  # ResNet-20 (half a minute) beside the others, on the second core. The others with every
  # stream's work queued on the stream's own thread (TANDEM_CUDA_EMU_QUEUE_ALL=1, a slow GPU):
  # a missing wait or synchronize shows there; and with the threads of each block, and the
  # blocks, in descending order (a kernel that counts on an order gets other results). The op
  # tests with every tensor its own cudaMalloc (TANDEM_NO_CUDA_MEMORY_CACHING=1): ASan sees a
  # kernel's access past any tensor. ResNet-20, nccl and DDP with the caching allocator (blocks
  # that other streams use wait for their events), ResNet-20 and the host-wait counts (every
  # free is a wait without the caching allocator) with idle streams running work at once, in
  # ascending order.
  gpu_tests "*ResNet-20 trains the same on the GPU*" >"$root/build-asan/gpu_resnet.log" 2>&1 &
  resnet=$!
  trap 'kill "$resnet" 2>/dev/null' EXIT
  export TANDEM_CUDA_EMU_QUEUE_ALL=1 TANDEM_CUDA_EMU_ORDER=descending
  TANDEM_NO_CUDA_MEMORY_CACHING=1 gpu_tests "[cuda]~[host_waits]~*ResNet-20*"
  gpu_tests "[gpu],[nccl]"
  unset TANDEM_CUDA_EMU_QUEUE_ALL TANDEM_CUDA_EMU_ORDER
  # Idle streams running work at once: a deferred check's copy is done when it is read, as on a
  # GPU that the host does not outrun by a whole forward.
  gpu_tests "[host_waits]"
  wait "$resnet" || { cat "$root/build-asan/gpu_resnet.log"; exit 1; }
  trap - EXIT
  tail -n 2 "$root/build-asan/gpu_resnet.log"
fi
stage "fuzz every reader, ${TANDEM_FUZZ_SECONDS:-30} s each"
"$root/scripts/fuzz.sh" "$root/build-asan" "${TANDEM_FUZZ_SECONDS:-30}"

stage "ThreadSanitizer build (clang) and the tests of threaded code"
# Unoptimized: the build takes half the time of -O1's (its CPU kernels 12 s instead of 32 s a
# file), for tests of threads, not of speed, that run a little longer; every access is checked.
"$root/scripts/build.sh" "$root/build-tsan" "${clang[@]}" "-DCMAKE_CXX_FLAGS=-O0 -g1" \
  -DTANDEM_SANITIZE_THREAD=ON -DTANDEM_BUILD_EXAMPLES=OFF -DTANDEM_CPU_ISAS=scalar
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp" \
  ctest --test-dir "$root/build-tsan" -j "$jobs" --output-on-failure
stage "all passed"
