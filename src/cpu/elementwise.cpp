// CPU elementwise kernels besides unary (unary.cpp) and binary (binary.cpp): where, copies and
// casts between every pair of dtypes, fill, arange.
#include <cmath>
#include <cstring>

#include "elementwise_loops.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

using elementwise::unary_loop;

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_dtype(out.dtype(), "where (cpu)", [&](auto t) {
    using T = decltype(t);
    T* po = ptr<T>(out);
    const bool* pc = ptr<const bool>(cond);
    const T* pa = ptr<const T>(a);
    const T* pb = ptr<const T>(b);
    Where op;
    for_each_run<4>(out.shape(), {out.strides(), cond.strides(), a.strides(), b.strides()},
                    [&](const std::array<int64_t, 4>& off, int64_t n,
                        const std::array<int64_t, 4>& st) {
                      for (int64_t i = 0; i < n; ++i)
                        po[off[0] + i * st[0]] = op(pc[off[1] + i * st[1]], pa[off[2] + i * st[2]],
                                                    pb[off[3] + i * st[3]]);
                    });
  });
}

void fill(const Tensor& dst, double value) {
  dispatch_dtype(dst.dtype(), "fill (cpu)", [&](auto d) {
    using D = decltype(d);
    D v = convert<D>(value);
    D* p = ptr<D>(dst);
    for_each_run<1>(dst.shape(), {dst.strides()},
                    [&](const std::array<int64_t, 1>& off, int64_t n,
                        const std::array<int64_t, 1>& st) {
                      for (int64_t i = 0; i < n; ++i) p[off[0] + i * st[0]] = v;
                    });
  });
}

void arange(const Tensor& out, double start, double step) {
  dispatch_dtype(out.dtype(), "arange (cpu)", [&](auto d) {
    using D = decltype(d);
    D* p = ptr<D>(out);
    parallel_for(0, out.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      // One rounding (fma), whatever the ISA object's contraction: the CUDA kernel's bits.
      for (int64_t i = lo; i < hi; ++i)
        p[i] = convert<D>(std::fma(static_cast<double>(i), step, start));
    });
  });
}

}  // namespace

void copy(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() &&
      dst.shape() == src.shape()) {
    std::memcpy(dst.raw_data(), src.raw_data(), dst.numel() * dst.element_size());
    return;
  }
  dispatch_dtype(dst.dtype(), "copy (cpu)", [&](auto d) {
    using D = decltype(d);
    dispatch_dtype(src.dtype(), "copy (cpu)", [&](auto s) {
      using S = decltype(s);
      unary_loop<D, S>(dst, src, [](acc_type<S> v) { return convert<D>(v); });
    });
  });
}

Tensor contiguous_as(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  Tensor out = make_tensor(t.shape(), dtype, t.device());
  copy(out, t);
  return out;
}

TANDEM_REGISTER_CPU(where, where);
TANDEM_REGISTER_CPU(copy, copy);
TANDEM_REGISTER_CPU(fill, fill);
TANDEM_REGISTER_CPU(arange, arange);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
