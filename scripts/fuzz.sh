#!/usr/bin/env bash
# Runs the fuzz targets of a TANDEM_FUZZ build (fuzz/), two at a time, each for SECONDS on its seed
# corpus: fuzz/corpus/<target> is read, never written; what the run adds goes to
# BUILD_DIR/fuzz-corpus/<target>. A finding (crash, sanitizer report, input running over
# -timeout, allocation over -malloc_limit_mb, leak) fails the script; its input is saved as
# BUILD_DIR/fuzz-findings/<target>-crash-* (or -timeout-, -oom-, -leak-) and its log is shown.
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET ...]   (default: every target)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$1" && pwd)"
seconds="$2"
shift 2
targets=("$@")
((${#targets[@]})) || targets=(safetensors checkpoint idx cifar10)
parallel="${TANDEM_FUZZ_JOBS:-2}"

mkdir -p "$build/fuzz-findings" "$build/fuzz-logs"
# Reports with file:line (Debian's llvm-14 installs the symbolizer under a versioned name only).
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ] && command -v llvm-symbolizer-14 >/dev/null; then
  export ASAN_SYMBOLIZER_PATH="$(command -v llvm-symbolizer-14)"
fi
# The targets that read paths write their inputs to files: in memory where there is a tmpfs.
scratch=/dev/shm
[ -d "$scratch" ] && [ -w "$scratch" ] || scratch="${TMPDIR:-/tmp}"

run_one() {
  local target="$1"
  mkdir -p "$build/fuzz-corpus/$target"
  local dict=()  # the JSON header's vocabulary helps mutations reach past the parser
  case "$target" in safetensors | checkpoint) dict=(-dict="$root/fuzz/safetensors.dict") ;; esac
  # Inputs are at most a few KiB: no allocation may exceed 64 MiB (the IDX reader once asked
  # 16 GiB for a 12-byte file), nor the process 1 GiB (ASan's own overhead included).
  TMPDIR="$scratch" UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 \
    -malloc_limit_mb=64 -print_final_stats=1 -artifact_prefix="$build/fuzz-findings/$target-" \
    "${dict[@]}" \
    "$build/fuzz-corpus/$target" "$root/fuzz/corpus/$target" >"$build/fuzz-logs/$target.log" 2>&1
}

summary() {
  local target="$1" log="$build/fuzz-logs/$1.log"
  local execs cov
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  cov="$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*/[0-9a-zA-Z]*' "$log" | tail -1)"
  echo "fuzz_$target: ${execs:-?} executions in ${seconds} s, ${cov:-no coverage line}"
}

failed=0
pids=()
names=()
wait_first() {  # waits for the oldest running target and reports it
  local pid="${pids[0]}" target="${names[0]}"
  pids=("${pids[@]:1}")
  names=("${names[@]:1}")
  if wait "$pid"; then
    summary "$target"
  else
    failed=1
    echo "fuzz_$target: FINDING (log $build/fuzz-logs/$target.log):"
    tail -n 60 "$build/fuzz-logs/$target.log"
  fi
}
for target in "${targets[@]}"; do
  ((${#pids[@]} < parallel)) || wait_first
  run_one "$target" &
  pids+=("$!")
  names+=("$target")
done
while ((${#pids[@]})); do wait_first; done
exit "$failed"
