// CPU row reductions. Sums run over fixed blocks of kBlock elements with a double (or int64)
// accumulator and combine the block partials in order, so neither the thread count nor the
// scheduling changes a single bit of the result.
#include <cmath>
#include <vector>

#include "loops.hpp"
#include "kernels.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

constexpr int64_t kBlock = 8192;

// Floats (narrow ones included) sum in double, integers in int64.
template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<acc_type<T>>, double, int64_t>;

// A sum stored as R: narrow floats round through f32, as their f32 computation did.
template <typename R, typename S>
R store(S s) {
  if constexpr (std::is_same_v<acc_type<R>, R>) {
    return static_cast<R>(s);
  } else {
    return R(static_cast<float>(s));
  }
}

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
                   using A = acc_type<T>;
                   for (; i + 4 <= n; i += 4) {
                     s0 += A(p[i]);
                     s1 += A(p[i + 1]);
                     s2 += A(p[i + 2]);
                     s3 += A(p[i + 3]);
                   }
                   for (; i < n; ++i) s0 += A(p[i]);
                   partial[task] = (s0 + s1) + (s2 + s3);
                 }
               });
  for (int64_t r = 0; r < rows; ++r) {
    Acc<T> s = 0;
    for (int64_t b = 0; b < blocks; ++b) s += partial[r * blocks + b];
    out[r] = store<R>(s);
  }
}

template <bool kMax, typename T>
bool better(T candidate_t, T best_t) {
  const acc_type<T> candidate(candidate_t), best(best_t);
  if constexpr (std::is_floating_point_v<acc_type<T>>) {
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

// out[j] = the sum over rows i of in[i * cols + j] (the reduced dims lead: broadcasting ops'
// gradients, bias and norm weights): the rows streamed in order into a block of per-column
// accumulators (f64, or i64), instead of a transposed copy summed row by row. Blocks of columns
// run in parallel; each column's sum runs over the rows in order, whatever the thread count.
template <typename T, typename R>
void sum_columns_of(R* out, const T* in, int64_t rows, int64_t cols) {
  constexpr int64_t kCols = 256;
  using A = acc_type<T>;
  parallel_for(0, (cols + kCols - 1) / kCols,
               std::max<int64_t>(1, kBlock / std::max<int64_t>(rows * kCols, 1)),
               [&](int64_t lo, int64_t hi) {
                 Acc<T> acc[kCols];
                 for (int64_t b = lo; b < hi; ++b) {
                   const int64_t j0 = b * kCols, n = std::min(kCols, cols - j0);
                   std::fill_n(acc, n, Acc<T>(0));
                   for (int64_t i = 0; i < rows; ++i) {
                     const T* p = in + i * cols + j0;
                     for (int64_t j = 0; j < n; ++j) acc[j] += A(p[j]);
                   }
                   for (int64_t j = 0; j < n; ++j) out[j0 + j] = store<R>(acc[j]);
                 }
               });
}

void sum_columns(const Tensor& out, const Tensor& in, int64_t rows, int64_t cols) {
  dispatch_dtype(in.dtype(), "sum_columns (cpu)", [&](auto t) {
    using T = decltype(t);
    dispatch_dtype(out.dtype(), "sum (cpu)", [&](auto r) {
      sum_columns_of<T>(ptr<decltype(r)>(out), ptr<const T>(in), rows, cols);
    });
  });
}

void reduce_rows(const Tensor& out, ReduceOp op, const Tensor& in, int64_t rows, int64_t cols) {
  dispatch_dtype(in.dtype(), "reduce_rows (cpu)", [&](auto t) {
    using T = decltype(t);
    const T* p = ptr<const T>(in);
    switch (op) {
      case ReduceOp::sum:
        dispatch_dtype(out.dtype(), "sum (cpu)", [&](auto r) {
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

}  // namespace

TANDEM_REGISTER_CPU(reduce_rows, reduce_rows);
TANDEM_REGISTER_CPU(sum_columns, sum_columns);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
