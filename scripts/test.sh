#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite twice: the Release build (with the CUDA backend
# compiled when its toolkit is present), and an AddressSanitizer + UBSan build of the CPU side.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs="$(nproc)"
"$root/scripts/setup.sh"

echo "== release build and tests"
"$root/scripts/build.sh" "$root/build"
ctest --test-dir "$root/build" -j "$jobs" --output-on-failure

echo "== sanitizer build (ASan + UBSan) and tests"
# The CPU kernels of one instruction set, the best this machine runs (a sanitized build compiles
# slowly on two cores); the release build tests all three.
isa=scalar
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo; then
  isa=avx2
  if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo &&
     grep -qw avx512vl /proc/cpuinfo && grep -qw avx512dq /proc/cpuinfo; then isa=avx512; fi
fi
"$root/scripts/build.sh" "$root/build-asan" -DTANDEM_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTANDEM_BUILD_BENCHMARKS=OFF -DTANDEM_CPU_ISAS=$isa
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$root/build-asan" -j "$jobs" --output-on-failure
