// CPU row reductions. Sums run over fixed blocks of kBlock elements with a double (or int64)
// accumulator and combine the block partials in order, so neither the thread count nor the
// scheduling changes a single bit of the result.
#include <cmath>
#include <vector>

#include "loops.hpp"
#include "tandem/kernels/cpu.hpp"

namespace tandem::kernels::cpu {
namespace {

constexpr int64_t kBlock = 8192;

template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <typename T, typename R>
void sum_rows(R* out, const T* in, int64_t rows, int64_t cols) {
  const int64_t blocks = std::max<int64_t>(1, (cols + kBlock - 1) / kBlock);
  std::vector<Acc<T>> partial(rows * blocks);
  parallel_for(0, rows * blocks, std::max<int64_t>(1, kBlock / std::max<int64_t>(cols, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t task = lo; task < hi; ++task) {
                   int64_t r = task / blocks, b = task % blocks;
                   const T* p = in + r * cols + b * kBlock;
                   int64_t n = std::min(kBlock, cols - b * kBlock);
                   // Four independent accumulators: the adds pipeline, the order stays fixed.
                   Acc<T> s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                   int64_t i = 0;
                   for (; i + 4 <= n; i += 4) {
                     s0 += p[i];
                     s1 += p[i + 1];
                     s2 += p[i + 2];
                     s3 += p[i + 3];
                   }
                   for (; i < n; ++i) s0 += p[i];
                   partial[task] = (s0 + s1) + (s2 + s3);
                 }
               });
  for (int64_t r = 0; r < rows; ++r) {
    Acc<T> s = 0;
    for (int64_t b = 0; b < blocks; ++b) s += partial[r * blocks + b];
    out[r] = static_cast<R>(s);
  }
}

template <bool kMax, typename T>
bool better(T candidate, T best) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(best)) return false;
    if (std::isnan(candidate)) return true;
  }
  return kMax ? candidate > best : candidate < best;
}

template <bool kMax, bool kIndex, typename T, typename R>
void extreme_rows(R* out, const T* in, int64_t rows, int64_t cols) {
  parallel_for(0, rows, std::max<int64_t>(1, kBlock / std::max<int64_t>(cols, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) {
                   const T* p = in + r * cols;
                   int64_t best = 0;
                   for (int64_t i = 1; i < cols; ++i)
                     if (better<kMax>(p[i], p[best])) best = i;
                   if constexpr (kIndex) {
                     out[r] = best;
                   } else {
                     out[r] = p[best];
                   }
                 }
               });
}

}  // namespace

void reduce_rows(ReduceOp op, const Tensor& out, const Tensor& in, int64_t rows, int64_t cols) {
  dispatch_compute(in.dtype(), "reduce", [&](auto t) {
    using T = decltype(t);
    const T* p = ptr<const T>(in);
    switch (op) {
      case ReduceOp::sum:
        dispatch_compute(out.dtype(), "sum", [&](auto r) {
          sum_rows<T>(ptr<decltype(r)>(out), p, rows, cols);
        });
        break;
      case ReduceOp::max: extreme_rows<true, false>(ptr<T>(out), p, rows, cols); break;
      case ReduceOp::min: extreme_rows<false, false>(ptr<T>(out), p, rows, cols); break;
      case ReduceOp::argmax: extreme_rows<true, true>(ptr<int64_t>(out), p, rows, cols); break;
      case ReduceOp::argmin: extreme_rows<false, true>(ptr<int64_t>(out), p, rows, cols); break;
    }
  });
}

}  // namespace tandem::kernels::cpu
