// The CUDA kernels of the backend. Launchers follow one shape: output first, then inputs, sizes,
// stream; they check preconditions, size the grid with a ceil-div, and check the launch.
#include <cuda_runtime.h>

#include "tandem/core/error.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem::cuda {
namespace {

__global__ void fill_kernel(float* __restrict__ dst, size_t count, float value) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = value;
}

}  // namespace

void fill_f32(float* dst, size_t count, float value, int device) {
  if (count == 0) return;
  TANDEM_CHECK(dst != nullptr, "fill_f32: null destination");
  TANDEM_CHECK(cudaSetDevice(device) == cudaSuccess, "fill_f32: cannot select cuda:", device);
  constexpr int kThreads = 256;
  size_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > 65535) blocks = 65535;  // grid-stride covers the rest
  fill_kernel<<<static_cast<unsigned>(blocks), kThreads>>>(dst, count, value);
  cudaError_t err = cudaGetLastError();
  TANDEM_CHECK(err == cudaSuccess, "fill_f32: launch failed: ", cudaGetErrorString(err));
}

}  // namespace tandem::cuda
