// The sweep the peer programs share (raw Open MPI, raw NCCL; they use no tandem code): f32
// messages from 8 B to max_bytes, doubling; per size one warm-up call, then `iters` timed calls
// (a quarter of them, at least 5, from 64 MiB up); the median time, as JSON rows
// {"bytes", "time_us", "algbw_gbps"} joined by ", ".
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "median.hpp"

/// `time_one(bytes)` runs one allreduce of `bytes` and returns its seconds.
template <typename TimeOne>
std::string peer_sweep(long long max_bytes, int iters, TimeOne time_one) {
  std::string rows;
  for (long long bytes = 8; bytes <= max_bytes; bytes *= 2) {
    time_one(bytes);  // warm-up
    const int reps = bytes >= (64ll << 20) ? std::max(5, iters / 4) : iters;
    std::vector<double> times;
    for (int i = 0; i < reps; ++i) times.push_back(time_one(bytes));
    const double t = median(times);
    char row[160];
    std::snprintf(row, sizeof row, "%s{\"bytes\": %lld, \"time_us\": %.3f, \"algbw_gbps\": %.4f}",
                  rows.empty() ? "" : ", ", bytes, t * 1e6, bytes / t / 1e9);
    rows += row;
  }
  return rows;
}
