// CUDA kernels of indexing along one dim (src/kernels/kernels.hpp): gather (index_select,
// gather, embedding) and scatter (index_add, scatter_add, scatter, the gathers' gradients).
// Bounds are checked first by a kernel of their own. Where an in-place op must change nothing on
// a bad index, the host reads its flag before anything is written (a wait for the device); into
// an output of the op's own, the flag is read later (cuda::defer_check) and the kernels skip a
// bad index meanwhile (kernels::BoundsCheck).
#include <algorithm>
#include <cstdint>

#include "../kernels/kernels.hpp"
#include "loops.cuh"
#include "tandem/cuda/runtime.hpp"

namespace tandem::kernels::cuda_backend {
namespace {

using cuda::ptr;

// (o, j, i) of a flat position over (outer, n, inner): magic-number divisions below 2^31
// positions (kernels/divider.hpp), 64-bit ones above.
struct Split3 {
  Split3(int64_t n, int64_t inner, int64_t total)
      : n(n), inner(inner), fast(total < (int64_t{1} << 31)),
        dn(fast ? static_cast<uint32_t>(std::max<int64_t>(n, 1)) : 1),
        di(fast ? static_cast<uint32_t>(std::max<int64_t>(inner, 1)) : 1) {}
  __device__ __forceinline__ void operator()(int64_t p, int64_t& o, int64_t& j,
                                             int64_t& i) const {
    if (fast) {
      const uint32_t q = di.div(static_cast<uint32_t>(p)), r = dn.div(q);
      i = p - static_cast<int64_t>(q) * inner;
      j = q - static_cast<int64_t>(r) * n;
      o = r;
    } else {
      i = p % inner;
      j = p / inner % n;
      o = p / inner / n;
    }
  }
  int64_t n, inner;
  bool fast;
  FastDivider dn, di;
};

// The index operand: (outer, n, inner) i64 with any strides.
struct IndexArg {
  explicit IndexArg(const Tensor& t)
      : data(ptr<const int64_t>(t)), s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)) {}
  __device__ __forceinline__ int64_t at(int64_t o, int64_t j, int64_t i) const {
    return data[o * s0 + j * s1 + i * s2];
  }
  const int64_t* data;
  int64_t s0, s1, s2;
};

__global__ void check_bounds_kernel(IndexArg index, Split3 split, int64_t total, int64_t bound,
                                    unsigned long long* bad) {
  TANDEM_CUDA_LOOP(p, total) {
    int64_t o, j, i;
    split(p, o, j, i);
    const int64_t v = index.at(o, j, i);
    if (v < 0 || v >= bound) atomicMin(bad, static_cast<unsigned long long>(p));
  }
}

// Throws IndexError, as the CPU's check does, for the first index outside [0, bound): now, or
// at the next cuda::check_deferred(); reads each stored index once (one element of an expanded
// dim).
void check_bounds(const Tensor& index, int64_t bound, int64_t dim, const char* op,
                  BoundsCheck when) {
  const int64_t no = index.stride(0) ? index.size(0) : std::min<int64_t>(index.size(0), 1);
  const int64_t nj = index.stride(1) ? index.size(1) : std::min<int64_t>(index.size(1), 1);
  const int64_t ni = index.stride(2) ? index.size(2) : std::min<int64_t>(index.size(2), 1);
  const int64_t total = no * nj * ni;
  if (total == 0) return;
  Tensor bad = make_tensor({1}, DType::i64, index.device());
  fill(bad, -1.0);  // all bits set: the largest unsigned value
  cuda::TensorDeviceGuard guard(index);
  check_bounds_kernel<<<cuda::grid_for(total), cuda::kThreads, 0, cuda::current_stream()>>>(
      IndexArg(index), Split3(nj, ni, total), total, bound, ptr<unsigned long long>(bad));
  cuda::check_launch("index bounds check");
  auto report = [index, bound, dim, nj, ni, op = std::string(op)](int64_t position) {
    if (position < 0) return;
    const int64_t o = position / (nj * ni), j = position / ni % nj, i = position % ni;
    const int64_t value = index.narrow(0, o, 1).narrow(1, j, 1).narrow(2, i, 1).item<int64_t>();
    TANDEM_THROW(IndexError, op, ": index ", value, " is out of bounds for dimension ", dim,
                 " with size ", bound);
  };
  if (when == BoundsCheck::deferred)
    cuda::defer_check(bad.raw_data(), index.device().index(), report);
  else
    report(bad.item<int64_t>());
}

// A gather moves elements without looking at them: one instance per element size.
template <typename T>
__global__ void gather_kernel(T* out, const T* in, IndexArg index, Split3 split, int64_t total,
                              int64_t n_in) {
  TANDEM_CUDA_LOOP(p, total) {
    int64_t o, j, i;
    split(p, o, j, i);
    const int64_t k = index.at(o, j, i);
    out[p] = k >= 0 && k < n_in ? in[(o * n_in + k) * split.inner + i] : T{};  // bad: zero
  }
}

void gather(const Tensor& out, const Tensor& in, const Tensor& index, int64_t dim, const char* op,
            BoundsCheck when) {
  check_bounds(index, in.size(1), dim, op, when);
  const int64_t total = out.numel();
  if (total == 0) return;
  const Split3 split(out.size(1), out.size(2), total);
  cuda::TensorDeviceGuard guard(out);
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    gather_kernel<<<cuda::grid_for(total), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<T>(out), ptr<const T>(in), IndexArg(index), split, total, in.size(1));
    cuda::check_launch("gather");
  };
  switch (out.element_size()) {
    case 1: return launch(uint8_t{});
    case 2: return launch(uint16_t{});
    case 4: return launch(uint32_t{});
    case 8: return launch(uint64_t{});
  }
  TANDEM_THROW(NotImplementedError, op, ": no CUDA gather for dtype ", out.dtype());
}

// *to += v, atomically (duplicates in the index add up in some order).
template <typename T>
__device__ __forceinline__ void atomic_add(T* to, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(to), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    // No byte-wide atomic: a compare-and-swap of the aligned word holding the byte.
    auto* word = reinterpret_cast<unsigned*>(reinterpret_cast<uintptr_t>(to) & ~uintptr_t{3});
    const unsigned shift = (reinterpret_cast<uintptr_t>(to) & 3u) * 8u;
    unsigned old = *word, assumed;
    do {
      assumed = old;
      const unsigned sum = ((assumed >> shift) + v) & 0xffu;
      old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (sum << shift));
    } while (assumed != old);
  } else if constexpr (std::is_same_v<T, bool>) {
    *to = *to || v;  // never reached: the op layer refuses to add bools
  } else {
    atomicAdd(to, v);  // f32, f64, i32, and f16/bf16 (sm_70/sm_80 and later)
  }
}

template <typename T>
__global__ void scatter_kernel(T* out, const T* src, IndexArg index, Split3 split, int64_t total,
                               int64_t n_out, bool accumulate) {
  TANDEM_CUDA_LOOP(p, total) {
    int64_t o, j, i;
    split(p, o, j, i);
    const int64_t k = index.at(o, j, i);
    if (k < 0 || k >= n_out) continue;  // a bad index (its error deferred): nothing written
    T* to = out + (o * n_out + k) * split.inner + i;
    if (accumulate) {
      atomic_add(to, src[p]);
    } else {
      *to = src[p];
    }
  }
}

void scatter(const Tensor& out, const Tensor& src, const Tensor& index, bool accumulate,
             int64_t dim, const char* op, BoundsCheck when) {
  check_bounds(index, out.size(1), dim, op, when);
  const int64_t total = src.numel();
  if (total == 0) return;
  TANDEM_CHECK_T(NotImplementedError, !(accumulate && out.dtype() == DType::boolean), op,
                 ": cannot add bool tensors");
  const Split3 split(src.size(1), src.size(2), total);
  cuda::TensorDeviceGuard guard(out);
  cuda::dispatch(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    scatter_kernel<<<cuda::grid_for(total), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<T>(out), ptr<const T>(src), IndexArg(index), split, total, out.size(1), accumulate);
    cuda::check_launch("scatter");
  });
}

}  // namespace

TANDEM_REGISTER_CUDA(gather, gather);
TANDEM_REGISTER_CUDA(scatter, scatter);

}  // namespace tandem::kernels::cuda_backend
