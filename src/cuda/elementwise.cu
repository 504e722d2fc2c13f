// CUDA elementwise kernels: the functors of kernels/functors.hpp (the CPU's, compiled for the
// device) over strided, broadcast operands; copies and casts between any two dtypes; fills,
// arange and the Philox random fills (the CPU's numbers: element i draws from word (seed,
// offset, i) on both devices).
#include <atomic>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "../kernels/kernels.hpp"
#include "loops.cuh"
#include "tandem/core/philox.hpp"

namespace tandem::kernels::cuda_backend {
namespace {

using cuda::compute_t;
using cuda::convert;
using cuda::OffsetCalc;
using cuda::ptr;

// The stored output type of a functor's result R on stored inputs T: bool stays bool, else T.
template <typename R, typename T>
using stored_t = std::conditional_t<std::is_same_v<R, bool>, bool, T>;

template <typename O, typename T, typename F>
__global__ void unary_kernel(O* out, const T* in, int64_t n, OffsetCalc<2> oc, F f) {
  TANDEM_CUDA_LOOP(i, n) {
    int64_t off[2];
    oc.get(i, off);
    out[off[0]] = convert<O>(f(convert<compute_t<T>>(in[off[1]])));
  }
}

template <typename O, typename T, typename F>
__global__ void binary_kernel(O* out, const T* a, const T* b, int64_t n, OffsetCalc<3> oc, F f) {
  using C = compute_t<T>;
  TANDEM_CUDA_LOOP(i, n) {
    int64_t off[3];
    oc.get(i, off);
    out[off[0]] = convert<O>(f(convert<C>(a[off[1]]), convert<C>(b[off[2]])));
  }
}

// --- dense operands: 16-byte vectors ------------------------------------------------------
// The loops above keep one 2- or 4-byte load per operand in flight per thread, a fraction of
// what a GPU's memory needs in flight to stream at full bandwidth (a device copy moves 16-byte
// vectors). Where every operand is dense in the loop's order (offset = index) and aligned, each
// thread loads and stores V elements at once (16 bytes of the widest operand) and the last
// n % V elements go one by one. Only for f32, f16 and bf16 operands (a training step's
// activations and gradients): the kernel count, and so the build, stays small.
std::atomic<bool> g_vectorized{true};

using cuda::aligned_for;
using cuda::kVec;
using cuda::kVectorizable;
using cuda::Vec;

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

// Starts the vector kernel of out = f(operands...) and returns true where it applies.
template <typename O, typename T, int N, typename Launch>
bool launch_vectorized(const cuda::OffsetCalc<N>& oc, const Tensor& out,
                       std::initializer_list<const Tensor*> in, int64_t n, Launch launch) {
  if constexpr (kVectorizable<T> && (kVectorizable<O> || std::is_same_v<O, bool>)) {
    constexpr int V = kVec<O, T>;
    if (!oc.contiguous || !g_vectorized.load(std::memory_order_relaxed) || n < V ||
        !aligned_for<O, V>(out))
      return false;
    for (const Tensor* t : in)
      if (!aligned_for<T, V>(*t)) return false;
    launch(std::integral_constant<int, V>{}, cuda::grid_for((n + V - 1) / V));
    return true;
  } else {
    return false;
  }
}

template <typename T>
__global__ void where_kernel(T* out, const bool* cond, const T* a, const T* b, int64_t n,
                             OffsetCalc<4> oc) {
  TANDEM_CUDA_LOOP(i, n) {
    int64_t off[4];
    oc.get(i, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

template <typename T>
__global__ void fill_kernel(T* out, T value, int64_t n, OffsetCalc<1> oc) {
  TANDEM_CUDA_LOOP(i, n) {
    int64_t off[1];
    oc.get(i, off);
    out[off[0]] = value;
  }
}

// start + i * step rounded once (fma), as the CPU computes it.
template <typename T>
__global__ void arange_kernel(T* out, double start, double step, int64_t n) {
  TANDEM_CUDA_LOOP(i, n) out[i] = convert<T>(fma(static_cast<double>(i), step, start));
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
  const bool vectorized = launch_vectorized<O, T>(oc, out, {&in}, n, [&](auto v, unsigned blocks) {
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

void binary(const Tensor& out, BinaryOp op, const OpArgs& args, const Tensor& a,
            const Tensor& b) {
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
          launch_vectorized<O, T>(oc, out, {&a, &b}, n, [&](auto v, unsigned blocks) {
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

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  const int64_t n = out.numel();
  if (n == 0) return;
  auto oc = cuda::offsets<4>(out.shape(),
                             {out.strides(), cond.strides(), a.strides(), b.strides()});
  cuda::TensorDeviceGuard guard(out);
  cuda::dispatch(out.dtype(), "where (cuda)", [&](auto t) {
    using T = decltype(t);
    where_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<T>(out), ptr<const bool>(cond), ptr<const T>(a), ptr<const T>(b), n, oc);
    cuda::check_launch("where");
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
    cuda::dispatch(src.dtype(), "copy (cuda)", [&](auto s) {
      launch_unary<D, decltype(s)>(dst, src, Identity{});
    });
  });
}

void fill(const Tensor& dst, double value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  auto oc = cuda::offsets<1>(dst.shape(), {dst.strides()});
  cuda::TensorDeviceGuard guard(dst);
  cuda::dispatch(dst.dtype(), "fill (cuda)", [&](auto d) {
    using D = decltype(d);
    // The value in dst's type, converted on the host as the CPU's fill converts it.
    D v;
    if constexpr (std::is_same_v<D, bool>) {
      v = static_cast<float>(value) != 0.0f;
    } else if constexpr (std::is_same_v<D, __half>) {
      v = __float2half_rn(static_cast<float>(value));
    } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
      v = __float2bfloat16_rn(static_cast<float>(value));
    } else {
      v = kernels::scalar_as<D>(value);  // integers through int64: -1 is 255 in u8, as on the CPU
    }
    fill_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, cuda::current_stream()>>>(ptr<D>(dst),
                                                                                  v, n, oc);
    cuda::check_launch("fill");
  });
}

void arange(const Tensor& out, double start, double step) {
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::TensorDeviceGuard guard(out);
  cuda::dispatch(out.dtype(), "arange (cuda)", [&](auto d) {
    using D = decltype(d);
    arange_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, cuda::current_stream()>>>(
        ptr<D>(out), start, step, n);
    cuda::check_launch("arange");
  });
}

// --- random: the CPU backend's draws, element for element -------------------------------------
struct UniformDraw {
  uint64_t seed, offset;
  template <typename T>
  __device__ T operator()(uint64_t i) const {
    if constexpr (std::is_same_v<T, double>) {
      return Philox4x32::to_unit_double(Philox4x32::word(seed, offset, 2 * i),
                                        Philox4x32::word(seed, offset, 2 * i + 1));
    } else {
      return convert<T>(Philox4x32::to_unit_float(Philox4x32::word(seed, offset, i)));
    }
  }
};

struct NormalDraw {  // Box-Muller on words (2i, 2i+1) in double, as the CPU
  uint64_t seed, offset;
  template <typename T>
  __device__ T operator()(uint64_t i) const {
    const double u1 = 1.0 - Philox4x32::to_unit_float(Philox4x32::word(seed, offset, 2 * i));
    const double u2 = Philox4x32::to_unit_float(Philox4x32::word(seed, offset, 2 * i + 1));
    const double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    if constexpr (std::is_same_v<T, double>) {
      return z;
    } else {
      return convert<T>(static_cast<float>(z));
    }
  }
};

struct IntDraw {
  uint64_t seed, offset, range;
  int64_t low;
  template <typename T>
  __device__ T operator()(uint64_t i) const {
    const uint64_t x = static_cast<uint64_t>(Philox4x32::word(seed, offset, 2 * i)) << 32 |
                       Philox4x32::word(seed, offset, 2 * i + 1);
    const int64_t v = low + static_cast<int64_t>(x % range);
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(v);
    } else {
      return convert<T>(static_cast<double>(v));
    }
  }
};

template <typename T, typename G>
__global__ void draw_kernel(T* out, int64_t n, G g) {
  TANDEM_CUDA_LOOP(i, n) out[i] = g.template operator()<T>(static_cast<uint64_t>(i));
}

template <bool kFloatingOnly, typename G>
void draw(const Tensor& out, const char* what, G g) {
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::TensorDeviceGuard guard(out);
  cuda::dispatch<kFloatingOnly>(out.dtype(), what, [&](auto d) {
    using D = decltype(d);
    if constexpr (std::is_same_v<D, bool>) {
      TANDEM_THROW(NotImplementedError, what, ": no bool draws");
    } else {
      draw_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, cuda::current_stream()>>>(ptr<D>(out),
                                                                                    n, g);
      cuda::check_launch(what);
    }
  });
}

void uniform(const Tensor& out, uint64_t seed, uint64_t offset) {
  draw<true>(out, "rand (cuda)", UniformDraw{seed, offset});
}
void normal(const Tensor& out, uint64_t seed, uint64_t offset) {
  draw<true>(out, "randn (cuda)", NormalDraw{seed, offset});
}
void randint(const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t offset) {
  draw<false>(out, "randint (cuda)",
              IntDraw{seed, offset, static_cast<uint64_t>(high - low), low});
}

}  // namespace

TANDEM_REGISTER_CUDA(unary, unary);
TANDEM_REGISTER_CUDA(binary, binary);
TANDEM_REGISTER_CUDA(where, where);
TANDEM_REGISTER_CUDA(copy, copy);
TANDEM_REGISTER_CUDA(fill, fill);
TANDEM_REGISTER_CUDA(arange, arange);
TANDEM_REGISTER_CUDA(uniform, uniform);
TANDEM_REGISTER_CUDA(normal, normal);
TANDEM_REGISTER_CUDA(randint, randint);

}  // namespace tandem::kernels::cuda_backend

namespace tandem::cuda {
void set_vectorized_elementwise(bool on) { kernels::cuda_backend::g_vectorized = on; }
bool vectorized_elementwise() { return kernels::cuda_backend::g_vectorized; }
}  // namespace tandem::cuda
