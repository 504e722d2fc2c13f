// CPU elementwise kernels besides unary (unary.cpp) and binary (binary.cpp): where, copies and
// casts between every pair of dtypes, fill, arange.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "elementwise_loops.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

using elementwise::unary_loop;

// c ? x : y by bits, not by a branch: the conditions of a mask taken from data (x > 0) are as
// good as random, and a mispredicted branch per element cost ~30 times an add. Exact for every
// value (NaN payloads, infinities, -0.0); the loop vectorizes.
template <typename T>
inline T select_bits(bool c, T x, T y) {
  using U = std::conditional_t<sizeof(T) == 1, uint8_t,
            std::conditional_t<sizeof(T) == 2, uint16_t,
            std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
  static_assert(sizeof(U) == sizeof(T));
  U xb, yb;
  std::memcpy(&xb, &x, sizeof(T));
  std::memcpy(&yb, &y, sizeof(T));
  const U mask = static_cast<U>(U(0) - static_cast<U>(c));
  const U r = static_cast<U>((xb & mask) | (yb & static_cast<U>(~mask)));
  T out;
  std::memcpy(static_cast<void*>(&out), &r, sizeof(T));  // T may be Eigen::half: not trivial
  return out;
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_dtype(out.dtype(), "where (cpu)", [&](auto t) {
    using T = decltype(t);
    T* po = ptr<T>(out);
    const bool* pc = ptr<const bool>(cond);
    const T* pa = ptr<const T>(a);
    const T* pb = ptr<const T>(b);
    for_each_run<4>(out.shape(), {out.strides(), cond.strides(), a.strides(), b.strides()},
                    [&](const std::array<int64_t, 4>& off, int64_t n,
                        const std::array<int64_t, 4>& st) {
                      T* o = po + off[0];
                      const bool* c = pc + off[1];
                      const T* x = pa + off[2];
                      const T* y = pb + off[3];
                      // Dense runs with each value dense or one number (a gradient masked
                      // against a zero, leaky_relu's select): loops without strides.
                      // The strides as constants (0 or 1), so that each loop vectorizes.
                      auto dense = [&](auto xs, auto ys) {
                        for (int64_t i = 0; i < n; ++i)
                          o[i] = select_bits(c[i], x[i * xs], y[i * ys]);
                      };
                      using Zero = std::integral_constant<int64_t, 0>;
                      using One = std::integral_constant<int64_t, 1>;
                      if (st[0] == 1 && st[1] == 1 && (st[2] == 0 || st[2] == 1) &&
                          (st[3] == 0 || st[3] == 1)) {
                        if (st[2] == 1 && st[3] == 1) dense(One{}, One{});
                        else if (st[2] == 1) dense(One{}, Zero{});
                        else if (st[3] == 1) dense(Zero{}, One{});
                        else dense(Zero{}, Zero{});
                        return;
                      }
                      for (int64_t i = 0; i < n; ++i)
                        o[i * st[0]] = select_bits(c[i * st[1]], x[i * st[2]], y[i * st[3]]);
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
    // In parts of 256 KiB or more on the pool's threads: one thread's memcpy of a 25 MB
    // activation (a leaf's gradient, a clone) ran at a third less than the two cores' bandwidth.
    constexpr int64_t kPart = int64_t{1} << 18;
    const int64_t bytes = dst.numel() * dst.element_size();
    char* to = static_cast<char*>(dst.raw_data());
    const char* from = static_cast<const char*>(src.raw_data());
    parallel_for(0, (bytes + kPart - 1) / kPart, 1, [&](int64_t lo, int64_t hi) {
      std::memcpy(to + lo * kPart, from + lo * kPart, std::min(hi * kPart, bytes) - lo * kPart);
    });
    return;
  }
  // Autocast's casts between f32 and bf16/f16 activations: one vector pass, without the strided
  // loop's f32 scratch block in between (they were a quarter of a bf16 ResNet-20 step).
  if (dst.is_contiguous() && src.is_contiguous() && dst.shape() == src.shape()) {
    auto narrow_pair = [&](DType narrow, DType wide) {
      return (narrow == DType::bf16 || narrow == DType::f16) && wide == DType::f32;
    };
    if (narrow_pair(src.dtype(), dst.dtype()) || narrow_pair(dst.dtype(), src.dtype())) {
      const bool widen = dst.dtype() == DType::f32;
      auto convert_all = [&](auto n) {
        using N = decltype(n);
        parallel_for(0, dst.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
          if (widen) widen_block(ptr<float>(dst) + lo, ptr<const N>(src) + lo, 1, hi - lo);
          else narrow_block(ptr<N>(dst) + lo, 1, ptr<const float>(src) + lo, hi - lo);
        });
      };
      if ((widen ? src : dst).dtype() == DType::bf16) convert_all(Eigen::bfloat16{});
      else convert_all(Eigen::half{});
      return;
    }
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
