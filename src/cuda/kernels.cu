// The kernels the communicators call directly, on their own stream: f16/bf16 <-> f32 for
// reductions that accumulate in f32. The conversions are the CUDA backend's (loops.cuh).
#include "loops.cuh"

namespace tandem::cuda {
namespace {

template <typename To, typename From>
__global__ void convert_kernel(To* __restrict__ dst, const From* __restrict__ src, int64_t count) {
  TANDEM_CUDA_LOOP(i, count) dst[i] = convert<To>(src[i]);
}

template <typename To, typename From>
void launch_convert(To* dst, const From* src, size_t count, cudaStream_t stream, const char* what) {
  if (count == 0) return;
  const int64_t n = static_cast<int64_t>(count);
  convert_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst, src, n);
  check_launch(what);
}

}  // namespace

void widen_to_f32(float* dst, const void* src, bool src_is_bf16, size_t count,
                  cudaStream_t stream) {
  if (src_is_bf16)
    launch_convert(dst, static_cast<const __nv_bfloat16*>(src), count, stream, "widen_to_f32");
  else
    launch_convert(dst, static_cast<const __half*>(src), count, stream, "widen_to_f32");
}

void narrow_from_f32(void* dst, bool dst_is_bf16, const float* src, size_t count,
                     cudaStream_t stream) {
  if (dst_is_bf16)
    launch_convert(static_cast<__nv_bfloat16*>(dst), src, count, stream, "narrow_from_f32");
  else
    launch_convert(static_cast<__half*>(dst), src, count, stream, "narrow_from_f32");
}

}  // namespace tandem::cuda
