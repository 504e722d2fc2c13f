// The strided elementwise loops the CPU's elementwise kernels share (unary.cpp, binary.cpp,
// elementwise.cpp): each kernel family compiles in a file of its own, so the families' dtype x
// functor instantiations build in parallel. Narrow floats are loaded, computed in f32 (acc_type)
// and stored narrow.
#pragma once

#include <algorithm>
#include <type_traits>

#include "kernels.hpp"
#include "loops.hpp"
#include "tandem/core/dtype_dispatch.hpp"
#include "vec_math.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace elementwise {

template <typename T>
constexpr bool is_narrow = !std::is_same_v<acc_type<T>, T>;

// out[i] = R(res[i]) for a block of functor results: narrow outputs round in one vector pass.
template <typename R, typename Res>
inline void store_block(R* o, int64_t stride, const Res* res, int64_t n) {
  if constexpr (is_narrow<R> && std::is_same_v<Res, float>) {
    narrow_block(o, stride, res, n);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i * stride] = R(res[i]);
  }
}

// R: the stored output type; T: the stored input type; the functor sees acc_type<T>. Narrow
// inputs are widened a block at a time into f32 scratch, so the functor loop vectorizes as the
// f32 one does, and memory is read and written once, narrow.
template <typename R, typename T, typename Op>
void unary_loop(const Tensor& out, const Tensor& in, Op op) {
  using A = acc_type<T>;
  R* po = ptr<R>(out);
  const T* pi = ptr<const T>(in);
  for_each_run<2>(out.shape(), {out.strides(), in.strides()},
                  [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                    R* o = po + off[0];
                    const T* x = pi + off[1];
                    if constexpr (is_narrow<T>) {
                      using Res = decltype(op(A{}));
                      A xa[kNarrowBlock];
                      Res ra[kNarrowBlock];
                      for (int64_t b = 0; b < n; b += kNarrowBlock) {
                        const int64_t m = std::min(kNarrowBlock, n - b);
                        widen_block(xa, x + b * st[1], st[1], m);
                        if constexpr (vec::kUnary<Op, A>) {
                          vec::unary(op, ra, xa, m);
                        } else {
                          for (int64_t i = 0; i < m; ++i) ra[i] = op(xa[i]);
                        }
                        store_block(o + b * st[0], st[0], ra, m);
                      }
                    } else if (st[0] == 1 && st[1] == 1) {
                      if constexpr (vec::kUnary<Op, A> && std::is_same_v<R, float>) {
                        vec::unary(op, o, x, n);
                        return;
                      }
                      for (int64_t i = 0; i < n; ++i) o[i] = R(op(A(x[i])));
                    } else if (st[0] == 1 && st[1] == 0) {
                      // A broadcast input (an expanded gradient made dense): one value a run.
                      std::fill(o, o + n, R(op(A(x[0]))));
                    } else {
                      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = R(op(A(x[i * st[1]])));
                    }
                  });
}

template <typename R, typename T, typename Op>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  using A = acc_type<T>;
  R* po = ptr<R>(out);
  const T* pa = ptr<const T>(a);
  const T* pb = ptr<const T>(b);
  for_each_run<3>(
      out.shape(), {out.strides(), a.strides(), b.strides()},
      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
        R* o = po + off[0];
        const T* x = pa + off[1];
        const T* y = pb + off[2];
        if constexpr (is_narrow<T>) {
          using Res = decltype(op(A{}, A{}));
          A xa[kNarrowBlock], ya[kNarrowBlock];
          Res ra[kNarrowBlock];
          for (int64_t blk = 0; blk < n; blk += kNarrowBlock) {
            const int64_t m = std::min(kNarrowBlock, n - blk);
            widen_block(xa, x + blk * st[1], st[1], m);
            widen_block(ya, y + blk * st[2], st[2], m);
            if constexpr (vec::kBinary<Op, A>) {
              vec::binary(op, ra, xa, ya, m);
            } else {
              for (int64_t i = 0; i < m; ++i) ra[i] = op(xa[i], ya[i]);
            }
            store_block(o + blk * st[0], st[0], ra, m);
          }
        } else if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
          if constexpr (vec::kBinary<Op, A> && std::is_same_v<R, float>) {
            vec::binary(op, o, x, y, n);
            return;
          }
          for (int64_t i = 0; i < n; ++i) o[i] = R(op(A(x[i]), A(y[i])));
        } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {  // tensor op scalar, bias rows
          const A yv = A(*y);
          for (int64_t i = 0; i < n; ++i) o[i] = R(op(A(x[i]), yv));
        } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
          const A xv = A(*x);
          for (int64_t i = 0; i < n; ++i) o[i] = R(op(xv, A(y[i])));
        } else {
          for (int64_t i = 0; i < n; ++i)
            o[i * st[0]] = R(op(A(x[i * st[1]]), A(y[i * st[2]])));
        }
      });
}

// The stored output type of functor F on stored inputs T: bool stays bool, else T.
template <typename F, typename T, typename Result>
using stored_t = std::conditional_t<std::is_same_v<Result, bool>, bool, T>;

// Runs body(T{}) for `dtype`: every dtype when functor F accepts integers, else the floating
// ones (dispatch_dtype's error names `what` for the others).
template <typename F, typename Body>
void dispatch_for_functor(DType dtype, const char* what, Body&& body) {
  if constexpr (accepts_integers<F>::value) {
    dispatch_dtype(dtype, what, body);
  } else {
    dispatch_dtype<DTypeSet::floating>(dtype, what, body);
  }
}

}  // namespace elementwise
}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
