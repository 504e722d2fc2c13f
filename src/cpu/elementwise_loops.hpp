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

// The runs' length in a tile of a transposed operand (loops.hpp): a vector function's runs are
// blocks of kNarrowBlock, as its per-call setup (its constants) costs more than a 16-element
// run; a plain copy or a scalar function's stay short, for the TLB.
template <bool kVector>
constexpr int64_t vec_width() {
  return kVector ? kNarrowBlock : kTileCols;
}

// Narrow inputs (f16, bf16) are widened a block at a time into f32 scratch, computed there as
// the f32 loop computes, and rounded back: memory is read and written once, narrow. The strided
// walk, the widening and the rounding are compiled once per pair of stored types; only the block
// of f32 math is per functor (it is the f32 loop's own vector form), reached through a pointer
// once per block of kNarrowBlock elements. Per functor, they had been as much code again as the
// f32 and f64 loops together, in every instruction set's build.
template <typename Res>
using UnaryBlock = void (*)(const void* op, Res* r, const float* x, int64_t n);
template <typename Res>
using BinaryBlock = void (*)(const void* op, Res* r, const float* x, const float* y, int64_t n);

template <typename Op, typename Res>
void unary_block(const void* op, Res* r, const float* x, int64_t n) {
  const Op& f = *static_cast<const Op*>(op);
  if constexpr (vec::kUnary<Op, float>) {
    vec::unary(f, r, x, n);
  } else {
    for (int64_t i = 0; i < n; ++i) r[i] = f(x[i]);
  }
}

template <typename Op, typename Res>
void binary_block(const void* op, Res* r, const float* x, const float* y, int64_t n) {
  const Op& f = *static_cast<const Op*>(op);
  if constexpr (vec::kBinary<Op, float>) {
    vec::binary(f, r, x, y, n);
  } else {
    for (int64_t i = 0; i < n; ++i) r[i] = f(x[i], y[i]);
  }
}

template <typename R, typename T, typename Res>
void narrow_unary_loop(const Tensor& out, const Tensor& in, const void* op, UnaryBlock<Res> block) {
  R* po = ptr<R>(out);
  const T* pi = ptr<const T>(in);
  for_each_run<2>(
      out.shape(), {out.strides(), in.strides()},
      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
        float xa[kNarrowBlock];
        Res ra[kNarrowBlock];
        for (int64_t b = 0; b < n; b += kNarrowBlock) {
          const int64_t m = std::min(kNarrowBlock, n - b);
          widen_block(xa, pi + off[1] + b * st[1], st[1], m);
          block(op, ra, xa, m);
          store_block(po + off[0] + b * st[0], st[0], ra, m);
        }
      },
      kNarrowBlock);
}

template <typename R, typename T, typename Res>
void narrow_binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, const void* op,
                        BinaryBlock<Res> block) {
  R* po = ptr<R>(out);
  const T* pa = ptr<const T>(a);
  const T* pb = ptr<const T>(b);
  for_each_run<3>(
      out.shape(), {out.strides(), a.strides(), b.strides()},
      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
        float xa[kNarrowBlock], ya[kNarrowBlock];
        Res ra[kNarrowBlock];
        for (int64_t blk = 0; blk < n; blk += kNarrowBlock) {
          const int64_t m = std::min(kNarrowBlock, n - blk);
          widen_block(xa, pa + off[1] + blk * st[1], st[1], m);
          widen_block(ya, pb + off[2] + blk * st[2], st[2], m);
          block(op, ra, xa, ya, m);
          store_block(po + off[0] + blk * st[0], st[0], ra, m);
        }
      },
      kNarrowBlock);
}

// R: the stored output type; T: the stored input type; the functor sees acc_type<T>.
template <typename R, typename T, typename Op>
void unary_loop(const Tensor& out, const Tensor& in, Op op) {
  using A = acc_type<T>;
  if constexpr (is_narrow<T>) {
    using Res = decltype(op(A{}));
    narrow_unary_loop<R, T, Res>(out, in, &op, &unary_block<Op, Res>);
  } else {
    R* po = ptr<R>(out);
    const T* pi = ptr<const T>(in);
    for_each_run<2>(
        out.shape(), {out.strides(), in.strides()},
        [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
          R* o = po + off[0];
          const T* x = pi + off[1];
          if (st[0] == 1 && st[1] == 1) {
            if constexpr (vec::kUnary<Op, A> && std::is_same_v<R, float>) {
              vec::unary(op, o, x, n);
              return;
            }
            for (int64_t i = 0; i < n; ++i) o[i] = R(op(A(x[i])));
          } else if (st[0] == 1 && st[1] == 0) {
            // A broadcast input (an expanded gradient made dense): one value a run.
            std::fill(o, o + n, R(op(A(x[0]))));
          } else {
            if constexpr (vec::kUnary<Op, A> && std::is_same_v<R, float>) {
              if (st[0] == 1) {  // a strided input (a transpose): gathered, then in vectors
                T xa[kNarrowBlock];
                const T* gathered = xa;
                for (int64_t b = 0; b < n; b += kNarrowBlock) {
                  const int64_t m = std::min(kNarrowBlock, n - b);
                  for (int64_t i = 0; i < m; ++i) xa[i] = x[(b + i) * st[1]];
                  vec::unary(op, o + b, gathered, m);
                }
                return;
              }
            }
            for (int64_t i = 0; i < n; ++i) o[i * st[0]] = R(op(A(x[i * st[1]])));
          }
        },
        vec_width < vec::kUnary<Op, A> && std::is_same_v < R, float >> ());
  }
}

template <typename R, typename T, typename Op>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  using A = acc_type<T>;
  if constexpr (is_narrow<T>) {
    using Res = decltype(op(A{}, A{}));
    narrow_binary_loop<R, T, Res>(out, a, b, &op, &binary_block<Op, Res>);
  } else {
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
            for (int64_t i = 0; i < n; ++i) o[i * st[0]] = R(op(A(x[i * st[1]]), A(y[i * st[2]])));
          }
        },
        vec_width < vec::kBinary<Op, A> && std::is_same_v < R, float >> ());
  }
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
