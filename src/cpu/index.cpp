// CPU kernels of indexing along one dim: gather (index_select, gather, embedding) and scatter
// (index_add, scatter_add, scatter, and the gradients of the gathers).
#include <algorithm>
#include <cstring>

#include "kernels.hpp"
#include "loops.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

// The index operand: i64 (outer, n, inner), any strides.
struct IndexView {
  explicit IndexView(const Tensor& index)
      : data(ptr<const int64_t>(index)),
        outer(index.size(0)), n(index.size(1)), inner(index.size(2)),
        s0(index.stride(0)), s1(index.stride(1)), s2(index.stride(2)) {}
  int64_t at(int64_t o, int64_t j, int64_t i) const { return data[o * s0 + j * s1 + i * s2]; }

  const int64_t* data;
  int64_t outer, n, inner, s0, s1, s2;
};

// Throws for the first index outside [0, bound), reading each stored index once (an expanded
// dim's one element), before any element is written.
void check_bounds(const IndexView& ix, int64_t bound, int64_t dim, const char* op) {
  const int64_t no = ix.s0 ? ix.outer : std::min<int64_t>(ix.outer, 1);
  const int64_t nj = ix.s1 ? ix.n : std::min<int64_t>(ix.n, 1);
  const int64_t ni = ix.s2 ? ix.inner : std::min<int64_t>(ix.inner, 1);
  for (int64_t o = 0; o < no; ++o)
    for (int64_t j = 0; j < nj; ++j)
      for (int64_t i = 0; i < ni; ++i) {
        const int64_t v = ix.at(o, j, i);
        TANDEM_CHECK_INDEX(v >= 0 && v < bound, op, ": index ", v,
                           " is out of bounds for dimension ", dim, " with size ", bound);
      }
}

// A gather moves elements without looking at them: one instance per element size.
template <typename T>
void gather_bytes(const Tensor& out, const Tensor& in, const IndexView& ix) {
  const int64_t n_in = in.size(1), n_out = out.size(1), inner = out.size(2);
  const T* src = ptr<const T>(in);
  T* dst = ptr<T>(out);
  // One (o, j) row of `inner` elements at a time; a row-wide index (index_select's) copies it
  // whole.
  parallel_for(0, out.size(0) * n_out, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) {
                   const int64_t o = r / n_out, j = r % n_out;
                   const T* from = src + o * n_in * inner;
                   T* to = dst + r * inner;
                   if (ix.s2 == 0) {
                     std::memcpy(to, from + ix.at(o, j, 0) * inner, inner * sizeof(T));
                   } else {
                     for (int64_t i = 0; i < inner; ++i) to[i] = from[ix.at(o, j, i) * inner + i];
                   }
                 }
               });
}

void gather(const Tensor& out, const Tensor& in, const Tensor& index, int64_t dim, const char* op,
            BoundsCheck) {  // checked now: a host read of the index costs no wait here
  const IndexView ix(index);
  check_bounds(ix, in.size(1), dim, op);
  if (out.numel() == 0) return;
  switch (out.element_size()) {
    case 1: return gather_bytes<uint8_t>(out, in, ix);
    case 2: return gather_bytes<uint16_t>(out, in, ix);
    case 4: return gather_bytes<uint32_t>(out, in, ix);
    case 8: return gather_bytes<uint64_t>(out, in, ix);
  }
  TANDEM_THROW(NotImplementedError, op, ": no gather for dtype ", out.dtype());
}

template <typename T>
T add(T a, T b) {
  if constexpr (std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>)
    return T(static_cast<float>(a) + static_cast<float>(b));  // rounded once per add, as torch
  else
    return static_cast<T>(a + b);
}

template <typename T>
void scatter_typed(const Tensor& out, const Tensor& src, const IndexView& ix, bool accumulate) {
  const int64_t n_src = src.size(1), n_out = out.size(1), inner = src.size(2);
  const T* from = ptr<const T>(src);
  T* to = ptr<T>(out);
  // Every task owns a part of out that no other writes, so the result does not depend on the
  // thread count, and runs j in order: duplicates add in index order, and the last one is what
  // an assignment leaves, as torch's CPU kernel.
  constexpr int64_t kBlock = 256;
  const int64_t outer = src.size(0), tasks = 4 * get_num_threads();
  // Whole rows (index_add, embedding's gradient, where inner is one row of a table): a task
  // owns a range of out's rows of one plane and reads that plane's index for them, split only
  // as far as the planes alone do not make enough tasks. Where rows cannot make enough tasks
  // and are long, column blocks (below) do.
  const int64_t parts =
      std::clamp<int64_t>((tasks + outer - 1) / std::max<int64_t>(outer, 1), 1, std::max<int64_t>(n_out, 1));
  if (ix.s2 == 0 && (outer * parts >= tasks / 4 || inner <= kBlock)) {
    parallel_for(0, outer * parts, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        const int64_t o = t / parts, part = t % parts;
        const int64_t r0 = part * n_out / parts, r1 = (part + 1) * n_out / parts;
        T* plane = to + o * n_out * inner;
        for (int64_t j = 0; j < n_src; ++j) {
          const int64_t x = ix.at(o, j, 0);
          if (x < r0 || x >= r1) continue;
          const T* row = from + (o * n_src + j) * inner;
          T* dst = plane + x * inner;
          if (accumulate) {
            for (int64_t i = 0; i < inner; ++i) dst[i] = add(dst[i], row[i]);
          } else {
            std::copy(row, row + inner, dst);
          }
        }
      }
    });
    return;
  }
  // Element-wise indices (scatter, scatter_add), and long rows too few to split by rows: a task
  // owns a column block (o, [i0, i1)).
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n_src * kBlock, 1));
  parallel_for(0, outer * blocks, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t o = t / blocks, i0 = (t % blocks) * kBlock, i1 = std::min(inner, i0 + kBlock);
      T* plane = to + o * n_out * inner;
      for (int64_t j = 0; j < n_src; ++j) {
        const T* row = from + (o * n_src + j) * inner;
        for (int64_t i = i0; i < i1; ++i) {
          T& dst = plane[ix.at(o, j, i) * inner + i];
          dst = accumulate ? add(dst, row[i]) : row[i];
        }
      }
    }
  });
}

void scatter(const Tensor& out, const Tensor& src, const Tensor& index, bool accumulate,
             int64_t dim, const char* op, BoundsCheck) {
  const IndexView ix(index);
  check_bounds(ix, out.size(1), dim, op);
  if (src.numel() == 0) return;
  if (accumulate) {
    dispatch_dtype<DTypeSet::numeric>(out.dtype(), op, [&](auto tag) {
      scatter_typed<decltype(tag)>(out, src, ix, true);
    });
  } else {
    dispatch_dtype<DTypeSet::all>(out.dtype(), op, [&](auto tag) {
      scatter_typed<decltype(tag)>(out, src, ix, false);
    });
  }
}

}  // namespace

TANDEM_REGISTER_CPU(gather, gather);
TANDEM_REGISTER_CPU(scatter, scatter);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
