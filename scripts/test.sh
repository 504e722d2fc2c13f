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
# The CPU kernels for two instruction sets, not three (a sanitized build compiles slowly): the
# hand-written AVX-512 ones and the scalar fallback; the release build tests all three.
"$root/scripts/build.sh" "$root/build-asan" -DTANDEM_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTANDEM_BUILD_BENCHMARKS=OFF "-DTANDEM_CPU_ISAS=scalar;avx512"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$root/build-asan" -j "$jobs" --output-on-failure
