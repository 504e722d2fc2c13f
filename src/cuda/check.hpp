// What the CUDA sources share: the error check for runtime calls and the current-device guard.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "tandem/core/error.hpp"

/// Throws CudaError naming the call, CUDA's error and file:line when `expr` is not cudaSuccess.
#define TANDEM_CUDA_CHECK(expr)                                                   \
  do {                                                                            \
    const cudaError_t err_ = (expr);                                              \
    if (err_ != cudaSuccess)                                                      \
      throw ::tandem::CudaError(#expr, ::tandem::cuda::error_text(err_),          \
                                ::tandem::detail::base_name(__FILE__), __LINE__); \
  } while (0)

namespace tandem::cuda {

/// "CUDA error cudaErrorInvalidValue: invalid argument".
inline std::string error_text(cudaError_t err) {
  return std::string("CUDA error ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
}

/// Makes `device` the calling thread's current device and restores the previous one on exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) TANDEM_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

/// The stream tandem's kernels and cuBLAS calls run on: the legacy default stream, until each
/// device's context carries a compute stream (docs/ARCHITECTURE.md). Every launch goes through
/// here, so moving them is one change.
inline cudaStream_t current_stream() { return nullptr; }

/// Converts `count` f16 or bf16 values (per `src_is_bf16`) at `src` to f32 at `dst`, on `stream`.
void widen_to_f32(float* dst, const void* src, bool src_is_bf16, size_t count, cudaStream_t stream);
/// Rounds `count` f32 values at `src` to f16 or bf16 at `dst` (nearest, ties to even), on `stream`.
void narrow_from_f32(void* dst, bool dst_is_bf16, const float* src, size_t count,
                     cudaStream_t stream);

}  // namespace tandem::cuda
