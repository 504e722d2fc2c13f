// CUDA unary kernels: the functors of kernels/functors.hpp (the CPU's, compiled for the device)
// over strided, broadcast operands, and the 16-byte vector kernel for dense ones; copies and
// casts between any two dtypes (a unary op whose functor converts). Unary, binary and the rest
// (elementwise.cu) compile in parallel, as on the CPU.
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
__global__ void unary_kernel(O* out, const T* in, int64_t n, OffsetCalc<2> oc, F f) {
  TANDEM_CUDA_LOOP(i, n) {
    int64_t off[2];
    oc.get(i, off);
    out[off[0]] = convert<O>(f(convert<compute_t<T>>(in[off[1]])));
  }
}

template <int V, typename O, typename T, typename F>
__global__ void unary_vec_kernel(O* out, const T* in, int64_t n, F f) {
  using C = compute_t<T>;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x, vecs = n / V;
  for (int64_t i = first; i < vecs; i += stride) {
    const Vec<T, V> x = reinterpret_cast<const Vec<T, V>*>(in)[i];
    Vec<O, V> r;
#pragma unroll
    for (int k = 0; k < V; ++k) r.v[k] = convert<O>(f(convert<C>(x.v[k])));
    reinterpret_cast<Vec<O, V>*>(out)[i] = r;
  }
  for (int64_t i = vecs * V + first; i < n; i += stride) out[i] = convert<O>(f(convert<C>(in[i])));
}

// Identity through the computation type: a copy is a unary op whose functor converts.
struct Identity {
  template <typename C>
  __device__ C operator()(C x) const {
    return x;
  }
};

template <typename O, typename T, typename F>
void launch_unary(const Tensor& out, const Tensor& in, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  auto oc = cuda::offsets<2>(out.shape(), {out.strides(), in.strides()});
  cuda::TensorDeviceGuard guard(out);
  const bool vectorized =
      cuda::launch_vectorized<O, T>(oc, out, {&in}, n, [&](auto v, unsigned blocks) {
        unary_vec_kernel<decltype(v)::value><<<blocks, cuda::kThreads, 0, cuda::current_stream()>>>(
            ptr<O>(out), ptr<const T>(in), n, f);
      });
  if (!vectorized)
    unary_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<O>(out), ptr<const T>(in), n, oc, f);
  cuda::check_launch("unary");
}

void unary(const Tensor& out, UnaryOp op, const OpArgs& args, const Tensor& in) {
  with_unary(op, args, [&](auto f) {
    using F = decltype(f);
    auto body = [&](auto t) {
      using T = decltype(t);
      using R = decltype(f(compute_t<T>{}));
      launch_unary<stored_t<R, T>, T>(out, in, f);
    };
    if constexpr (accepts_integers<F>::value) {
      cuda::dispatch(in.dtype(), "unary (cuda)", body);
    } else {
      cuda::dispatch<true>(in.dtype(), "unary (cuda)", body);
    }
  });
}

// Same-device copies; between the host and a GPU, and between GPUs, the tensor layer stages
// contiguous bytes through cuda::copy_bytes.
void copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    cuda::TensorDeviceGuard guard(dst);
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(),
                                      static_cast<size_t>(dst.numel()) * dst.element_size(),
                                      cudaMemcpyDeviceToDevice, cuda::current_stream()));
    return;
  }
  cuda::dispatch(dst.dtype(), "copy (cuda)", [&](auto d) {
    using D = decltype(d);
    cuda::dispatch(src.dtype(), "copy (cuda)",
                   [&](auto s) { launch_unary<D, decltype(s)>(dst, src, Identity{}); });
  });
}

}  // namespace

TANDEM_REGISTER_CUDA(unary, unary);
TANDEM_REGISTER_CUDA(copy, copy);

}  // namespace tandem::kernels::cuda_backend
