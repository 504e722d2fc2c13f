// CPU row reductions. Sums run over fixed blocks of kBlock elements with a double (or int64)
// accumulator and combine the block partials in order, so neither the thread count nor the
// scheduling changes a single bit of the result.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "extreme.hpp"
#include "kernels.hpp"
#include "loops.hpp"

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

// Integer sums and products wrap around as torch's do: the functors' wrap_add and wrap_mul.

// The sum of p[0..n): element i goes to lane i % kLanes, the lanes are added pairwise at the
// end. Each lane is an independent chain, so the compiler runs the lanes as vectors with no
// reassociation: the order is fixed by n alone.
//
// Floats computed in f32 (f32, f16, bf16) sum runs of kRun elements per lane in f32 and add each
// run to the lane's f64 accumulator: the widening convert, which costs more than the add (on
// AVX-512 GCC splits it into two converts, an extract and an insert, all on one port), comes
// once per kRun elements instead of once per element. A run of kRun terms in f32 errs by at most
// (kRun - 1) f32 ulps of the sum of its |x| and the f64 sum of the runs adds nothing at f32
// precision, so the error of a sum of any length stays within 7 ulps of its sum of |x| (a
// pairwise f32 sum's bound grows with log2 n).
constexpr int kLanes = 32;
constexpr int kRun = 8;
template <typename T>
Acc<T> lane_sum(const T* p, int64_t n) {
  using A = acc_type<T>;
  Acc<T> acc[kLanes] = {};
  if constexpr (std::is_same_v<A, float>) {
    float run[kLanes] = {};
    int in_run = 0;
    for (int64_t i = 0; i < n; i += kLanes) {
      for (int j = 0; j < kLanes && i + j < n; ++j) run[j] += widen_one(p[i + j]);
      if (++in_run == kRun || i + kLanes >= n) {
        for (int j = 0; j < kLanes; ++j) acc[j] += run[j];
        std::fill_n(run, kLanes, 0.0f);
        in_run = 0;
      }
    }
  } else {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) acc[j] = wrap_add(acc[j], Acc<T>(A(p[i + j])));
    for (int j = 0; i + j < n; ++j) acc[j] = wrap_add(acc[j], Acc<T>(A(p[i + j])));
  }
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) acc[j] = wrap_add(acc[j], acc[j + width]);
  return acc[0];
}

// f32, the common case, in the same lanes, runs and order, written with vectors: the compiler
// keeps the loop above's lane arrays in memory, which cost a store and a load per add.
template <>
double lane_sum<float>(const float* p, int64_t n) {
  typedef float F8 __attribute__((vector_size(32)));
  typedef double D8 __attribute__((vector_size(64)));
  auto add = [](F8& run, const float* q) {
    F8 x;
    std::memcpy(&x, q, sizeof x);
    run += x;
  };
  D8 a0 = {}, a1 = {}, a2 = {}, a3 = {};  // lanes 0-7, 8-15, 16-23, 24-31
  F8 r0 = {}, r1 = {}, r2 = {}, r3 = {};  // their runs in f32
  auto flush = [&] {
    a0 += __builtin_convertvector(r0, D8);
    a1 += __builtin_convertvector(r1, D8);
    a2 += __builtin_convertvector(r2, D8);
    a3 += __builtin_convertvector(r3, D8);
    r0 = r1 = r2 = r3 = F8{};
  };
  int64_t i = 0;
  for (; i + kRun * kLanes <= n; i += kRun * kLanes) {
    for (int r = 0; r < kRun; ++r) {
      const float* q = p + i + r * kLanes;
      add(r0, q);
      add(r1, q + 8);
      add(r2, q + 16);
      add(r3, q + 24);
    }
    flush();
  }
  if (i < n) {  // the last run; its last block zero-padded: each element still goes to lane i % 32
    for (; i + kLanes <= n; i += kLanes) {
      add(r0, p + i);
      add(r1, p + i + 8);
      add(r2, p + i + 16);
      add(r3, p + i + 24);
    }
    float tail[kLanes] = {};
    std::copy(p + i, p + n, tail);
    add(r0, tail);
    add(r1, tail + 8);
    add(r2, tail + 16);
    add(r3, tail + 24);
    flush();
  }
  a0 += a2;  // width 16
  a1 += a3;
  a0 += a1;  // width 8
  double l[8];
  std::memcpy(l, &a0, sizeof l);
  for (int width = 4; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) l[j] += l[j + width];
  return l[0];
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
                   partial[task] = lane_sum(p, n);
                 }
               });
  for (int64_t r = 0; r < rows; ++r) {
    Acc<T> s = 0;
    for (int64_t b = 0; b < blocks; ++b) s = wrap_add(s, partial[r * blocks + b]);
    out[r] = store<R>(s);
  }
}

template <bool kMax, bool kIndex, typename T, typename R>
void extreme_rows(R* out, const T* in, int64_t rows, int64_t cols) {
  parallel_for(0, rows, std::max<int64_t>(1, kBlock / std::max<int64_t>(cols, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) {
                   const T* p = in + r * cols;
                   const int64_t best = extreme_position<kMax>(p, cols);
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
// accumulators (f64, or i64; f32 and narrower in f32 runs of kRun rows first, as lane_sum),
// instead of a transposed copy summed row by row. Blocks of columns run in parallel; each
// column's sum runs over the rows in order, whatever the thread count.
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
                   if constexpr (std::is_same_v<A, float>) {  // in runs of kRun rows, as lane_sum
                     float run[kCols];
                     for (int64_t i0 = 0; i0 < rows; i0 += kRun) {
                       const int64_t i1 = std::min<int64_t>(rows, i0 + kRun);
                       std::fill_n(run, n, 0.0f);
                       for (int64_t i = i0; i < i1; ++i) {
                         const T* p = in + i * cols + j0;
                         for (int64_t j = 0; j < n; ++j) run[j] += widen_one(p[j]);
                       }
                       for (int64_t j = 0; j < n; ++j) acc[j] += run[j];
                     }
                   } else {
                     for (int64_t i = 0; i < rows; ++i) {
                       const T* p = in + i * cols + j0;
                       for (int64_t j = 0; j < n; ++j) acc[j] = wrap_add(acc[j], Acc<T>(A(p[j])));
                     }
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

// --- scans and sorts ------------------------------------------------------------------------

// Running sums (products) of each row in the accumulator of the sums (double, or int64), stored
// rounded element by element; rows in parallel, each row in order.
template <typename T>
void scan_rows_of(T* out, const T* in, int64_t rows, int64_t cols, ScanOp op, bool reverse,
                  bool exclusive) {
  parallel_for(0, rows, std::max<int64_t>(1, kBlock / cols), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* p = in + r * cols;
      T* q = out + r * cols;
      Acc<T> acc = op == ScanOp::sum ? Acc<T>(0) : Acc<T>(1);
      for (int64_t i = 0; i < cols; ++i) {
        const int64_t c = reverse ? cols - 1 - i : i;
        const auto v = static_cast<Acc<T>>(acc_type<T>(p[c]));
        if (exclusive) q[c] = store<T>(acc);
        acc = op == ScanOp::sum ? wrap_add(acc, v) : wrap_mul(acc, v);
        if (!exclusive) q[c] = store<T>(acc);
      }
    }
  });
}

void scan_rows(const Tensor& out, const Tensor& in, int64_t rows, int64_t cols, ScanOp op,
               bool reverse, bool exclusive) {
  dispatch_dtype(in.dtype(), "scan_rows (cpu)", [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, bool>) {
      TANDEM_THROW(NotImplementedError, "scan_rows (cpu): bool");  // the op makes bool i64
    } else {
      scan_rows_of<T>(ptr<T>(out), ptr<const T>(in), rows, cols, op, reverse, exclusive);
    }
  });
}

// Whether element a (at position ia) sorts before element b (at ib): by value, NaN above every
// number, then by position.
template <bool kDescending, typename A>
bool sorts_before(A a, int64_t ia, A b, int64_t ib) {
  if constexpr (std::is_floating_point_v<A>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) {
      if (na && nb) return ia < ib;
      return kDescending ? na : nb;
    }
  }
  if (a != b) return kDescending ? a > b : a < b;
  return ia < ib;
}

// The first k of a row for a small k, in one pass that keeps them sorted in `best`: most
// elements lose to the k-th kept at one comparison (partial_sort's heap took 1.6x PyTorch's
// time for topk 5 of 1000). f32 and f64 rows skip 64 bytes at a time where no element can
// enter: a vector compare with the k-th kept that lets NaNs through, so it never drops one
// that would enter; the element-by-element test decides the rest.
template <bool kDescending, typename A, typename T>
void select_row(int64_t* indices, const T* x, int64_t cols, int64_t k,
                std::pair<A, int64_t>* best) {
  int64_t n = 0;
  auto offer = [&](int64_t c) {
    const A v = A(x[c]);
    if (n == k && !sorts_before<kDescending>(v, c, best[k - 1].first, best[k - 1].second))
      return;
    int64_t i = n < k ? n++ : k - 1;  // a full list drops its last
    for (; i > 0 && sorts_before<kDescending>(v, c, best[i - 1].first, best[i - 1].second); --i)
      best[i] = best[i - 1];
    best[i] = {v, c};
  };
  int64_t c = 0;
  for (; c < k; ++c) offer(c);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    constexpr int64_t kLanes = 64 / sizeof(T);
    typedef T V __attribute__((vector_size(64)));
    for (; c + kLanes <= cols; c += kLanes) {
      V v;
      load_vector(v, x + c);
      const V worst = V{} + best[k - 1].first;
      // NaN on either side compares false, so `!(v <= worst)` lets it through
      if (any_lane(kDescending ? !(v <= worst) : !(v >= worst)))
        for (int64_t j = 0; j < kLanes; ++j) offer(c + j);
    }
  }
  for (; c < cols; ++c) offer(c);
  for (int64_t i = 0; i < k; ++i) indices[i] = best[i].second;
}

// An unsigned key per element that orders as sorts_before does: a float's bits with negatives
// reversed, -0 as +0 and every NaN as one key above +inf; an integer with its sign bit
// flipped. Descending inverts the keys (NaN first), and ties stay in position order either
// way: each pass of a least-significant-digit radix sort is stable.
template <typename T>
using RadixKey = std::conditional_t<sizeof(acc_type<T>) == 8, uint64_t, uint32_t>;

template <bool kDescending, typename T>
RadixKey<T> radix_key(T t) {
  using A = acc_type<T>;
  using K = RadixKey<T>;
  constexpr K kSign = K(1) << (8 * sizeof(K) - 1);
  const A v = A(t);
  K key;
  if constexpr (std::is_floating_point_v<A>) {
    static_assert(sizeof(A) == sizeof(K));
    if (v != v) {
      key = ~K(0);
    } else {
      const A folded = v == A(0) ? A(0) : v;  // -0 ties with +0, as `<` has it
      std::memcpy(&key, &folded, sizeof key);
      key = (key & kSign) ? ~key : (key | kSign);
    }
  } else if constexpr (std::is_signed_v<A>) {
    key = static_cast<K>(static_cast<std::make_signed_t<K>>(v)) ^ kSign;
  } else {
    key = static_cast<K>(v);
  }
  return kDescending ? ~key : key;
}

// The order of one row by radix sort on 11-bit digits, skipping digits all keys share: a
// comparison sort of (value, position) pairs took 1.14x PyTorch's time on rows of 4096.
template <bool kDescending, typename T>
void radix_sort_row(int64_t* indices, const T* x, int64_t cols, int64_t k,
                    std::vector<RadixKey<T>>& keys, std::vector<RadixKey<T>>& keys2,
                    std::vector<int64_t>& pos, std::vector<int64_t>& pos2) {
  using K = RadixKey<T>;
  constexpr int kBits = 11;
  constexpr K kMask = (K(1) << kBits) - 1;
  for (int64_t c = 0; c < cols; ++c) {
    keys[c] = radix_key<kDescending>(x[c]);
    pos[c] = c;
  }
  int64_t count[kMask + 1];
  for (int shift = 0; shift < int(8 * sizeof(K)); shift += kBits) {
    std::fill_n(count, kMask + 1, 0);
    for (int64_t c = 0; c < cols; ++c) ++count[(keys[c] >> shift) & kMask];
    if (count[(keys[0] >> shift) & kMask] == cols) continue;  // one digit for all
    int64_t sum = 0;
    for (K d = 0; d <= kMask; ++d) {
      const int64_t n = count[d];
      count[d] = sum;
      sum += n;
    }
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t to = count[(keys[c] >> shift) & kMask]++;
      keys2[to] = keys[c];
      pos2[to] = pos[c];
    }
    keys.swap(keys2);
    pos.swap(pos2);
  }
  std::copy_n(pos.begin(), k, indices);
}

template <bool kDescending, typename T>
void sort_rows_of(int64_t* indices, const T* in, int64_t rows, int64_t cols, int64_t k) {
  using A = acc_type<T>;
  constexpr int64_t kSelectMax = 16, kRadixMin = 64;
  parallel_for(0, rows, std::max<int64_t>(1, kBlock / cols), [&](int64_t lo, int64_t hi) {
    if (k <= kSelectMax && k < cols) {
      std::pair<A, int64_t> best[kSelectMax];
      for (int64_t r = lo; r < hi; ++r)
        select_row<kDescending>(indices + r * k, in + r * cols, cols, k, best);
      return;
    }
    if constexpr (!std::is_same_v<T, bool>) {
      if (cols >= kRadixMin) {
        const auto n = static_cast<size_t>(cols);
        std::vector<RadixKey<T>> keys(n), keys2(n);
        std::vector<int64_t> pos(n), pos2(n);
        for (int64_t r = lo; r < hi; ++r)
          radix_sort_row<kDescending>(indices + r * k, in + r * cols, cols, k, keys, keys2, pos,
                                      pos2);
        return;
      }
    }
    std::vector<std::pair<A, int64_t>> row(static_cast<size_t>(cols));
    for (int64_t r = lo; r < hi; ++r) {
      for (int64_t c = 0; c < cols; ++c) row[c] = {A(in[r * cols + c]), c};
      auto before = [](const std::pair<A, int64_t>& x, const std::pair<A, int64_t>& y) {
        return sorts_before<kDescending>(x.first, x.second, y.first, y.second);
      };
      if (k < cols) {
        std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
      } else {
        std::sort(row.begin(), row.end(), before);  // positions break ties: stable
      }
      for (int64_t c = 0; c < k; ++c) indices[r * k + c] = row[c].second;
    }
  });
}

void sort_rows(const Tensor& indices, const Tensor& in, int64_t rows, int64_t cols, int64_t k,
               bool descending) {
  dispatch_dtype(in.dtype(), "sort_rows (cpu)", [&](auto t) {
    using T = decltype(t);
    if (descending) {
      sort_rows_of<true, T>(ptr<int64_t>(indices), ptr<const T>(in), rows, cols, k);
    } else {
      sort_rows_of<false, T>(ptr<int64_t>(indices), ptr<const T>(in), rows, cols, k);
    }
  });
}

}  // namespace

TANDEM_REGISTER_CPU(reduce_rows, reduce_rows);
TANDEM_REGISTER_CPU(sum_columns, sum_columns);
TANDEM_REGISTER_CPU(scan_rows, scan_rows);
TANDEM_REGISTER_CPU(sort_rows, sort_rows);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
