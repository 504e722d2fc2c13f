// The median the benchmark programs quote: the upper middle of an even count (0 for none).
// Plain C++, so the peer programs (no tandem code) use it too.
#pragma once

#include <algorithm>
#include <vector>

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
