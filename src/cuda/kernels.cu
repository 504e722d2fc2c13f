// The kernels the communicators call directly, on their own stream: f16/bf16 <-> f32 for
// reductions that accumulate in f32 (the conversions are the CUDA backend's, loops.cuh), and
// floats as ordered integers for max/min that keep NaN.
#include <limits>

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

// The integer of f's bits (I: int32_t or int64_t) ordered as the floats: non-negative floats as
// they are, negative ones with their magnitude bits flipped; NaN is `nan_key`. decode: back.
template <typename I>
__global__ void ordered_bits_kernel(I* dst, const I* src, int64_t count, I nan_key, bool decode) {
  constexpr I kMagnitude = ~(I(1) << (sizeof(I) * 8 - 1));  // every bit but the sign
  constexpr I kInf = sizeof(I) == 4 ? I(0x7f800000) : I(0x7ff0000000000000);
  constexpr I kQuietNan = sizeof(I) == 4 ? I(0x7fc00000) : I(0x7ff8000000000000);
  TANDEM_CUDA_LOOP(i, count) {
    const I b = src[i];
    if (decode) {
      dst[i] = b == nan_key ? kQuietNan : b >= 0 ? b : b ^ kMagnitude;
    } else {
      dst[i] = (b & kMagnitude) > kInf ? nan_key : b >= 0 ? b : b ^ kMagnitude;
    }
  }
}

template <typename I>
void launch_ordered(void* dst, const void* src, size_t count, bool nan_is_max, bool decode,
                    cudaStream_t stream) {
  if (count == 0) return;
  const int64_t n = static_cast<int64_t>(count);
  const I nan_key = nan_is_max ? std::numeric_limits<I>::max() : std::numeric_limits<I>::min();
  ordered_bits_kernel<<<grid_for(n), kThreads, 0, stream>>>(
      static_cast<I*>(dst), static_cast<const I*>(src), n, nan_key, decode);
  check_launch("ordered_bits");
}

}  // namespace

void ordered_bits(void* dst, const void* src, bool is_f64, size_t count, bool nan_is_max,
                  bool decode, cudaStream_t stream) {
  if (is_f64)
    launch_ordered<int64_t>(dst, src, count, nan_is_max, decode, stream);
  else
    launch_ordered<int32_t>(dst, src, count, nan_is_max, decode, stream);
}

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
