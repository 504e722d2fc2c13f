// CUDA crop + flip + normalize of u8 batches (the loader's augment_on_device path): the CPU
// kernel's arithmetic (src/cpu/augment.cpp), with explicit roundings so that no FMA contraction
// changes a bit.
#include "../kernels/kernels.hpp"
#include "loops.cuh"

namespace tandem::kernels::cuda_backend {
namespace {

__global__ void crop_flip_normalize_kernel(float* out, const uint8_t* in, const int32_t* params,
                                           const float* mean, const float* inv_std,
                                           int64_t channels, int64_t h, int64_t w, int64_t n) {
  TANDEM_CUDA_LOOP(i, n) {
    const int64_t x = i % w, y = i / w % h, c = i / (w * h) % channels, b = i / (w * h * channels);
    const int64_t dy = params[b * 3], dx = params[b * 3 + 1];
    const int64_t sy = y + dy, sx = (params[b * 3 + 2] != 0 ? w - 1 - x : x) + dx;
    float v = 0.0f;
    if (sy >= 0 && sy < h && sx >= 0 && sx < w)
      v = __fmul_rn(static_cast<float>(in[((b * channels + c) * h + sy) * w + sx]), 1.0f / 255.0f);
    out[i] = __fmul_rn(__fsub_rn(v, mean[c]), inv_std[c]);
  }
}

void crop_flip_normalize(const Tensor& out, const Tensor& in, const Tensor& params,
                         const Tensor& mean, const Tensor& inv_std) {
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::TensorDeviceGuard guard(out);
  crop_flip_normalize_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, cuda::current_stream()>>>(
      out.data_ptr<float>(), in.data_ptr<uint8_t>(), params.data_ptr<int32_t>(),
      mean.data_ptr<float>(), inv_std.data_ptr<float>(), in.size(1), in.size(2), in.size(3), n);
  cuda::check_launch("crop_flip_normalize (cuda)");
}

}  // namespace

TANDEM_REGISTER_CUDA(crop_flip_normalize, crop_flip_normalize);

}  // namespace tandem::kernels::cuda_backend
