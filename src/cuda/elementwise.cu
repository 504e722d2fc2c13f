// CUDA elementwise kernels other than the functors' (unary.cu, binary.cu): where, fills, arange
// and the Philox random fills (the CPU's numbers: element i draws from word (seed, offset, i) on
// both devices).
#include <atomic>
#include <cmath>
#include <cstdint>

#include "../kernels/kernels.hpp"
#include "loops.cuh"
#include "tandem/core/philox.hpp"

namespace tandem::kernels::cuda_backend {
namespace {

using cuda::convert;
using cuda::OffsetCalc;
using cuda::ptr;

// Whether the elementwise launches may take their vector kernels (cuda::launch_vectorized).
std::atomic<bool> g_vectorized{true};

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
      v = value != 0.0;
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
    // in unsigned arithmetic: a range past int64's (low near its minimum) wraps, not overflows
    const int64_t v = static_cast<int64_t>(static_cast<uint64_t>(low) + x % range);
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
              IntDraw{seed, offset, static_cast<uint64_t>(high) - static_cast<uint64_t>(low), low});
}

}  // namespace

TANDEM_REGISTER_CUDA(where, where);
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
