// What the CUDA kernel files share: the element type of each dtype on the device, conversions
// rounded as the CPU backend rounds them, the strided offset calculator (over the dims
// kernels/collapse.hpp merged, as the CPU loop uses them) and the one launch shape, a
// grid-stride loop of kThreads-thread blocks on the calling thread's current stream.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "../kernels/collapse.hpp"
#include "../kernels/divider.hpp"
#include "check.hpp"
#include "tandem/core/tensor.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem::cuda {

// --- element types ---------------------------------------------------------------------------
/// The computation type of a stored type: f16 and bf16 compute in f32, as on the CPU.
template <typename T>
using compute_t =
    std::conditional_t<std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, float, T>;
template <typename T>
constexpr bool is_float_v = std::is_floating_point_v<compute_t<T>>;

/// Calls f(T{}) with T the device element type of `dtype` (float, double, __half,
/// __nv_bfloat16, int64_t, int32_t, uint8_t, bool). kFloatingOnly: integer and bool dtypes
/// throw (they never reach a floating kernel: the op layer checks), so they are not compiled.
template <bool kFloatingOnly = false, typename F>
void dispatch(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); return;
    case DType::f64: f(double{}); return;
    case DType::f16: f(__half{}); return;
    case DType::bf16: f(__nv_bfloat16{}); return;
    default: break;
  }
  if constexpr (!kFloatingOnly) {
    switch (dtype) {
      case DType::i64: f(int64_t{}); return;
      case DType::i32: f(int32_t{}); return;
      case DType::u8: f(uint8_t{}); return;
      case DType::boolean: f(bool{}); return;
      default: break;
    }
  }
  TANDEM_THROW(NotImplementedError, what, ": no CUDA kernel for dtype ", dtype);
}

/// `v` as To, through f32 for f16/bf16 on either side (round to nearest even), as the CPU's
/// convert does it.
template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, __half>) {
    return convert<To>(__half2float(v));
  } else if constexpr (std::is_same_v<From, __nv_bfloat16>) {
    return convert<To>(__bfloat162float(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);  // in From's own type: an f64 of 1e-300 is true
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, uint8_t> && std::is_floating_point_v<From>) {
    return static_cast<To>(convert<int64_t>(v));  // through int64, as the CPU's convert
  } else if constexpr (std::is_integral_v<To> && std::is_signed_v<To> &&
                       std::is_floating_point_v<From>) {
    // NaN and values outside To's range give To's minimum, as the CPU's convert (x86's result);
    // a GPU's conversion would give 0 for NaN and saturate the rest. (No numeric_limits: not
    // constexpr on the device without --expt-relaxed-constexpr.)
    using U = std::make_unsigned_t<To>;
    constexpr To kMin = static_cast<To>(U{1} << (8 * sizeof(To) - 1));
    constexpr From lo = static_cast<From>(kMin);  // -2^31 or -2^63, exact
    return v >= lo && v < -lo ? static_cast<To>(v) : kMin;
  } else {
    return static_cast<To>(v);
  }
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

// --- 16-byte vectors -------------------------------------------------------------------------
/// V elements loaded or stored at once. A kernel that keeps one 2- or 4-byte load per operand in
/// flight per thread reaches a fraction of what a GPU's memory needs in flight to stream at full
/// bandwidth (a device copy moves 16-byte vectors).
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

/// The element types vector kernels are built for (a training step's activations and
/// gradients): the kernel count, and so the build, stays small.
template <typename T>
constexpr bool kVectorizable = std::is_same_v<T, float> || std::is_same_v<T, __half> ||
                               std::is_same_v<T, __nv_bfloat16>;

/// Elements per vector for an output O and inputs T: 16 bytes of the wider.
template <typename O, typename T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T) > sizeof(O) ? sizeof(T) : sizeof(O));

template <typename X, int V>
bool aligned_for(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.raw_data()) % alignof(Vec<X, V>) == 0;
}

// --- strided operands ----------------------------------------------------------------------
/// Dims an elementwise kernel takes after merging; more are refused (NotImplementedError).
constexpr int kMaxDims = 10;

/// Element offsets of N operands for a linear index over the collapsed loop; `contiguous` when
/// every operand is dense in the loop's order (offset = index). Below 2^31 elements (`narrow`)
/// the index is split into dims by 32-bit division with magic numbers (kernels/divider.hpp),
/// else by 64-bit division.
template <int N>
struct OffsetCalc {
  int dims = 1;
  bool contiguous = true;
  bool narrow = false;
  int64_t sizes[kMaxDims] = {};
  kernels::FastDivider dividers[kMaxDims];
  int64_t strides[N][kMaxDims] = {};

  __device__ __forceinline__ void get(int64_t i, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = contiguous ? i : 0;
    if (contiguous) return;
    if (narrow) {
      uint32_t rest = static_cast<uint32_t>(i);
      for (int d = dims - 1; d >= 0; --d) {
        const uint32_t q = dividers[d].div(rest);
        const int64_t idx = rest - q * dividers[d].divisor;
        rest = q;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
      }
      return;
    }
    for (int d = dims - 1; d >= 0; --d) {
      const int64_t idx = i % sizes[d];
      i /= sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
    }
  }
};

/// The offset calculator for a loop over `shape` with each operand's strides.
template <int N>
OffsetCalc<N> offsets(const Shape& shape, const std::array<Shape, N>& strides) {
  const kernels::CollapsedDims<N> c = kernels::collapse_dims<N>(shape, strides);
  TANDEM_CHECK_T(NotImplementedError, c.sizes.size() <= static_cast<size_t>(kMaxDims),
                 "CUDA elementwise kernels take up to ", kMaxDims, " non-mergeable dims, got ",
                 c.sizes.size(), " for shape ", shape_str(shape));
  OffsetCalc<N> oc;
  oc.dims = static_cast<int>(c.sizes.size());
  oc.contiguous = oc.dims == 1;
  int64_t count = 1;
  for (int64_t size : c.sizes) count *= size;
  oc.narrow = count > 0 && count < (int64_t{1} << 31);
  for (int d = 0; d < oc.dims; ++d) {
    oc.sizes[d] = c.sizes[d];
    if (oc.narrow) oc.dividers[d] = kernels::FastDivider(static_cast<uint32_t>(c.sizes[d]));
    for (int k = 0; k < N; ++k) {
      oc.strides[k][d] = c.strides[k][d];
      if (oc.dims == 1 && c.strides[k][d] != 1) oc.contiguous = false;
    }
  }
  return oc;
}

// --- launching -------------------------------------------------------------------------------
constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over `count` elements: enough to fill any current GPU, few
/// enough that each thread does several elements of a large tensor. grid_for's cap: grid-stride
/// loops cover the rest. The CUDA emulation (tests/cuda_emu) caps grids at 64 blocks, so that
/// the tests' small tensors already take every kernel's grid-stride loop round more than once.
#ifdef TANDEM_CUDA_EMULATED
constexpr int64_t kMaxBlocks = 64;
#else
constexpr int64_t kMaxBlocks = 65536;
#endif
inline unsigned grid_for(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

/// Throws CudaError naming `what` when the last launch failed.
inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw CudaError(std::string(what) + " (kernel launch)", error_text(err), "loops.cuh",
                    __LINE__);
}

/// Makes the device of `t` current for the launch and restores the caller's device after it: a
/// kernel never leaves the calling thread's current device changed, unless that device had no
/// context yet (DeviceGuard: a thread that never chose a device stays on the one used).
class TensorDeviceGuard : public DeviceGuard {
 public:
  explicit TensorDeviceGuard(const Tensor& t) : DeviceGuard(t.device().index()) {}
};

// --- elementwise launches ------------------------------------------------------------------
/// The stored output type of a functor's result R on stored inputs T: bool stays bool, else T.
template <typename R, typename T>
using stored_t = std::conditional_t<std::is_same_v<R, bool>, bool, T>;

/// The elementwise loops keep one 2- or 4-byte load per operand in flight per thread. Where
/// every operand is dense in the loop's order (offset = index) and aligned, a vector kernel loads
/// and stores V elements at once (16 bytes of the widest operand; the last n % V one by one), for
/// f32, f16 and bf16 operands only (the kernel count, and so the build, stays small). Starts it
/// through launch(integral_constant<V>, blocks) and returns true where it applies; off with
/// set_vectorized_elementwise(false).
template <typename O, typename T, int N, typename Launch>
bool launch_vectorized(const OffsetCalc<N>& oc, const Tensor& out,
                       std::initializer_list<const Tensor*> in, int64_t n, Launch launch) {
  if constexpr (kVectorizable<T> && (kVectorizable<O> || std::is_same_v<O, bool>)) {
    constexpr int V = kVec<O, T>;
    if (!oc.contiguous || !vectorized_elementwise() || n < V || !aligned_for<O, V>(out))
      return false;
    for (const Tensor* t : in)
      if (!aligned_for<T, V>(*t)) return false;
    launch(std::integral_constant<int, V>{}, grid_for((n + V - 1) / V));
    return true;
  } else {
    return false;
  }
}

// --- reductions over threads -----------------------------------------------------------------
/// `v` from the thread `delta` lanes down the warp; a type of several members gives an overload
/// that moves each.
template <typename V>
__device__ __forceinline__ V shuffle_down(V v, int delta) {
  return __shfl_down_sync(0xffffffffu, v, delta);
}

/// Reduces `value` over each group of kGroup neighbouring threads with `combine` (associative);
/// the result is in the group's first thread. kGroup is 32 (a warp) or the block's size, a
/// multiple of 32 (warps, then shared memory; `identity` pads warp 0's second round, and every
/// thread of the block must call it). The order of combination depends on the launch shape only,
/// so a result's bits do not change from run to run.
template <int kGroup, typename V, typename Combine>
__device__ V group_reduce(V value, Combine combine, V identity) {
  static_assert(kGroup == 32 || (kGroup % 32 == 0 && kGroup <= 1024), "a warp or a block");
#pragma unroll
  for (int d = 16; d > 0; d /= 2) value = combine(value, shuffle_down(value, d));
  if constexpr (kGroup > 32) {
    __shared__ V warps[kGroup / 32];
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) warps[warp] = value;
    __syncthreads();
    if (warp == 0) {
      value = threadIdx.x < kGroup / 32 ? warps[threadIdx.x] : identity;
#pragma unroll
      for (int d = 16; d > 0; d /= 2) value = combine(value, shuffle_down(value, d));
    }
    __syncthreads();  // warps[] is free for the next call
  }
  return value;
}

struct Plus {
  template <typename V>
  __device__ __forceinline__ V operator()(V a, V b) const {
    return a + b;
  }
};

/// group_reduce over the block (kThreads threads), the result in every thread.
template <typename V, typename Combine>
__device__ V block_reduce(V v, Combine combine, V identity) {
  __shared__ V total;
  v = group_reduce<kThreads>(v, combine, identity);
  if (threadIdx.x == 0) total = v;
  __syncthreads();  // the next call writes `total` only after its group_reduce's barriers
  return total;
}
template <typename V>
__device__ V block_sum(V v) {
  return block_reduce(v, Plus{}, V(0));
}

}  // namespace tandem::cuda

/// The grid-stride loop over [0, n) of every kernel here.
#define TANDEM_CUDA_LOOP(i, n)                                                         \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
