// The CUDA kernels of the backend. Launchers follow one shape: output first, then inputs, sizes,
// stream; they check preconditions, size the grid with a ceil-div, and check the launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "check.hpp"
#include "tandem/core/error.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem::cuda {
namespace {

template <typename T>
__global__ void fill_kernel(T* __restrict__ dst, size_t count, T value) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = value;
}

// Reduced floats <-> f32 for reductions that accumulate in f32 (the comm layer).
template <typename T>
__device__ float widen(T v);
template <>
__device__ float widen(__half v) { return __half2float(v); }
template <>
__device__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ T narrow(float v);
template <>
__device__ __half narrow(float v) { return __float2half_rn(v); }
template <>
__device__ __nv_bfloat16 narrow(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__global__ void widen_kernel(float* __restrict__ dst, const T* __restrict__ src, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = widen(src[i]);
}

template <typename T>
__global__ void narrow_kernel(T* __restrict__ dst, const float* __restrict__ src, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = narrow<T>(src[i]);
}

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over `count` elements.
unsigned blocks_for(size_t count) {
  size_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks > 65535 ? 65535 : blocks);
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw CudaError(std::string(what) + " kernel launch", error_text(err),
                    detail::base_name(__FILE__), __LINE__);
}

}  // namespace

void widen_to_f32(float* dst, const void* src, bool src_is_bf16, size_t count,
                  cudaStream_t stream) {
  if (count == 0) return;
  if (src_is_bf16) {
    widen_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
        dst, static_cast<const __nv_bfloat16*>(src), count);
  } else {
    widen_kernel<<<blocks_for(count), kThreads, 0, stream>>>(dst, static_cast<const __half*>(src),
                                                             count);
  }
  check_launch("widen_to_f32");
}

void narrow_from_f32(void* dst, bool dst_is_bf16, const float* src, size_t count,
                     cudaStream_t stream) {
  if (count == 0) return;
  if (dst_is_bf16) {
    narrow_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst),
                                                              src, count);
  } else {
    narrow_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<__half*>(dst), src,
                                                              count);
  }
  check_launch("narrow_from_f32");
}

void fill_pattern(void* dst, size_t count, uint64_t pattern, int element_size, int device) {
  if (count == 0) return;
  TANDEM_CHECK(dst != nullptr, "fill_pattern: null destination");
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
  switch (element_size) {
    case 1:
      fill_kernel<<<blocks_for(count), kThreads>>>(static_cast<uint8_t*>(dst), count,
                                                   static_cast<uint8_t>(pattern));
      break;
    case 2:
      fill_kernel<<<blocks_for(count), kThreads>>>(static_cast<uint16_t*>(dst), count,
                                                   static_cast<uint16_t>(pattern));
      break;
    case 4:
      fill_kernel<<<blocks_for(count), kThreads>>>(static_cast<uint32_t*>(dst), count,
                                                   static_cast<uint32_t>(pattern));
      break;
    case 8:
      fill_kernel<<<blocks_for(count), kThreads>>>(static_cast<uint64_t*>(dst), count, pattern);
      break;
    default: TANDEM_THROW(ValueError, "fill_pattern: element size ", element_size, " is not 1, 2, 4 or 8");
  }
  check_launch("fill_pattern");
}

}  // namespace tandem::cuda
