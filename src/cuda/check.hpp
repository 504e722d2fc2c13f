// What the CUDA sources share: the error check for runtime calls and the current-device guard.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "tandem/core/error.hpp"

/// Throws CudaError naming the call, CUDA's error and file:line when `expr` is not cudaSuccess.
/// The thread's last error is cleared first (when it is not sticky), so that the next launch
/// check on this thread does not report this call's error as its own.
#define TANDEM_CUDA_CHECK(expr)                                                   \
  do {                                                                            \
    const cudaError_t err_ = (expr);                                              \
    if (err_ != cudaSuccess) {                                                    \
      cudaGetLastError();                                                         \
      throw ::tandem::CudaError(#expr, ::tandem::cuda::error_text(err_),          \
                                ::tandem::detail::base_name(__FILE__), __LINE__); \
    }                                                                             \
  } while (0)

namespace tandem::cuda {

/// "CUDA error cudaErrorInvalidValue: invalid argument".
inline std::string error_text(cudaError_t err) {
  return std::string("CUDA error ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
}

/// Whether GPU `device`'s primary context exists (the driver's cuDevicePrimaryCtxGetState, looked
/// up at run time: the driver library is not linked). True when the driver cannot say.
bool primary_context_active(int device);

/// Makes `device` the calling thread's current device and restores the previous one on exit,
/// unless that one has no context yet: restoring it would create one (hundreds of MB on GPU 0
/// for every thread that never chose a device), as PyTorch's MaybeSetDevice avoids too.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device) {
      TANDEM_CUDA_CHECK(cudaSetDevice(device));
      restore_ = previous_ >= 0 && primary_context_active(previous_);
    }
  }
  ~DeviceGuard() {
    if (restore_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

/// The compute stream: where tandem's kernels, cuBLAS and cuDNN calls run, and what
/// Work::wait_on_stream orders after a collective. The legacy default stream, so synchronous
/// copies and host reads are ordered with it (docs/ARCHITECTURE.md); every launch goes through
/// here, so moving them is one change.
inline cudaStream_t current_stream() { return nullptr; }

/// Converts `count` f16 or bf16 values (per `src_is_bf16`) at `src` to f32 at `dst`, on `stream`.
void widen_to_f32(float* dst, const void* src, bool src_is_bf16, size_t count, cudaStream_t stream);
/// Rounds `count` f32 values at `src` to f16 or bf16 at `dst` (nearest, ties to even), on `stream`.
void narrow_from_f32(void* dst, bool dst_is_bf16, const float* src, size_t count,
                     cudaStream_t stream);
/// On `stream`: the `count` f32 (f64 with `is_f64`) values at `src` as integers of the same
/// width at `dst` (which may be `src`), ordered as the floats are (-0 below +0), every NaN the
/// largest integer when `nan_is_max`, else the smallest, so that NCCL's integer max/min keep a
/// NaN (its float ones drop it, as fmaxf does); with `decode`, such integers back to the floats
/// (a NaN comes back as the canonical quiet NaN).
void ordered_bits(void* dst, const void* src, bool is_f64, size_t count, bool nan_is_max,
                  bool decode, cudaStream_t stream);

}  // namespace tandem::cuda
