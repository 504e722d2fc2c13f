// CPU elementwise kernels: the functors of kernels/functors.hpp over the strided N-d loop.
#include <cstring>

#include "loops.hpp"
#include "tandem/kernels/cpu.hpp"

namespace tandem::kernels::cpu {
namespace {

template <typename R, typename T, typename Op>
void unary_loop(const Tensor& out, const Tensor& in, Op op) {
  R* po = ptr<R>(out);
  const T* pi = ptr<const T>(in);
  for_each_run<2>(out.shape(), {out.strides(), in.strides()},
                  [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                    R* o = po + off[0];
                    const T* x = pi + off[1];
                    if (st[0] == 1 && st[1] == 1) {
                      for (int64_t i = 0; i < n; ++i) o[i] = op(x[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = op(x[i * st[1]]);
                    }
                  });
}

template <typename R, typename T, typename Op>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  R* po = ptr<R>(out);
  const T* pa = ptr<const T>(a);
  const T* pb = ptr<const T>(b);
  for_each_run<3>(
      out.shape(), {out.strides(), a.strides(), b.strides()},
      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
        R* o = po + off[0];
        const T* x = pa + off[1];
        const T* y = pb + off[2];
        if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
          for (int64_t i = 0; i < n; ++i) o[i] = op(x[i], y[i]);
        } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {  // tensor op scalar, bias rows
          const T yv = *y;
          for (int64_t i = 0; i < n; ++i) o[i] = op(x[i], yv);
        } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
          const T xv = *x;
          for (int64_t i = 0; i < n; ++i) o[i] = op(xv, y[i]);
        } else {
          for (int64_t i = 0; i < n; ++i) o[i * st[0]] = op(x[i * st[1]], y[i * st[2]]);
        }
      });
}

}  // namespace

void unary(UnaryOp op, const OpArgs& args, const Tensor& out, const Tensor& in) {
  with_unary(op, args, [&](auto f) {
    auto body = [&](auto t) {
      using T = decltype(t);
      using R = decltype(f(T{}));
      unary_loop<R, T>(out, in, f);
    };
    if constexpr (accepts_integers<decltype(f)>::value) {
      dispatch_compute(in.dtype(), "unary", body);
    } else {
      dispatch_floating(in.dtype(), "unary", body);
    }
  });
}

void binary(BinaryOp op, const OpArgs& args, const Tensor& out, const Tensor& a, const Tensor& b) {
  with_binary(op, args, [&](auto f) {
    auto body = [&](auto t) {
      using T = decltype(t);
      using R = decltype(f(T{}, T{}));
      binary_loop<R, T>(out, a, b, f);
    };
    if constexpr (accepts_integers<decltype(f)>::value) {
      dispatch_compute(a.dtype(), "binary", body);
    } else {
      dispatch_floating(a.dtype(), "binary", body);
    }
  });
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_all(out.dtype(), [&](auto t) {
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

void copy(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() &&
      dst.shape() == src.shape()) {
    std::memcpy(dst.raw_data(), src.raw_data(), dst.numel() * dst.element_size());
    return;
  }
  dispatch_all(dst.dtype(), [&](auto d) {
    using D = decltype(d);
    dispatch_all(src.dtype(), [&](auto s) {
      using S = decltype(s);
      unary_loop<D, S>(dst, src, [](S v) { return convert<D>(v); });
    });
  });
}

void fill(const Tensor& dst, double value) {
  dispatch_all(dst.dtype(), [&](auto d) {
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

}  // namespace tandem::kernels::cpu
