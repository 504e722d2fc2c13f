// CUDA binary kernels: the functors of kernels/functors.hpp (the CPU's, compiled for the device)
// over strided, broadcast operands, and the 16-byte vector kernel for dense ones.
#include <cstdint>

#include "../kernels/kernels.hpp"
#include "loops.cuh"

namespace tandem::kernels::cuda_backend {
namespace {

using cuda::compute_t;
using cuda::convert;
using cuda::OffsetCalc;
using cuda::ptr;
using cuda::stored_t;
using cuda::Vec;

template <typename O, typename T, typename F>
__global__ void binary_kernel(O* out, const T* a, const T* b, int64_t n, OffsetCalc<3> oc, F f) {
  using C = compute_t<T>;
  TANDEM_CUDA_LOOP(i, n) {
    int64_t off[3];
    oc.get(i, off);
    out[off[0]] = convert<O>(f(convert<C>(a[off[1]]), convert<C>(b[off[2]])));
  }
}

template <int V, typename O, typename T, typename F>
__global__ void binary_vec_kernel(O* out, const T* a, const T* b, int64_t n, F f) {
  using C = compute_t<T>;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x, vecs = n / V;
  for (int64_t i = first; i < vecs; i += stride) {
    const Vec<T, V> x = reinterpret_cast<const Vec<T, V>*>(a)[i];
    const Vec<T, V> y = reinterpret_cast<const Vec<T, V>*>(b)[i];
    Vec<O, V> r;
#pragma unroll
    for (int k = 0; k < V; ++k) r.v[k] = convert<O>(f(convert<C>(x.v[k]), convert<C>(y.v[k])));
    reinterpret_cast<Vec<O, V>*>(out)[i] = r;
  }
  for (int64_t i = vecs * V + first; i < n; i += stride)
    out[i] = convert<O>(f(convert<C>(a[i]), convert<C>(b[i])));
}

void binary(const Tensor& out, BinaryOp op, const OpArgs& args, const Tensor& a, const Tensor& b) {
  const int64_t n = out.numel();
  if (n == 0) return;
  auto oc = cuda::offsets<3>(out.shape(), {out.strides(), a.strides(), b.strides()});
  cuda::TensorDeviceGuard guard(out);
  with_binary(op, args, [&](auto f) {
    using F = decltype(f);
    auto body = [&](auto t) {
      using T = decltype(t);
      using C = compute_t<T>;
      using O = stored_t<decltype(f(C{}, C{})), T>;
      const bool vectorized =
          cuda::launch_vectorized<O, T>(oc, out, {&a, &b}, n, [&](auto v, unsigned blocks) {
            binary_vec_kernel<decltype(v)::value>
                <<<blocks, cuda::kThreads, 0, cuda::current_stream()>>>(
                    ptr<O>(out), ptr<const T>(a), ptr<const T>(b), n, f);
          });
      if (!vectorized)
        binary_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, cuda::current_stream()>>>(
            ptr<O>(out), ptr<const T>(a), ptr<const T>(b), n, oc, f);
      cuda::check_launch("binary");
    };
    if constexpr (accepts_integers<F>::value) {
      cuda::dispatch(a.dtype(), "binary (cuda)", body);
    } else {
      cuda::dispatch<true>(a.dtype(), "binary (cuda)", body);
    }
  });
}

}  // namespace

TANDEM_REGISTER_CUDA(binary, binary);

}  // namespace tandem::kernels::cuda_backend
