// CPU crop + flip + normalize of u8 batches (the loader's augment_on_device path when the device
// is the CPU, and the reference the CUDA kernel is tested against): one pass per plane.
#include "loops.hpp"
#include "kernels.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

void crop_flip_normalize(const Tensor& out, const Tensor& in, const Tensor& params,
                         const Tensor& mean, const Tensor& inv_std) {
  const int64_t channels = in.size(1), h = in.size(2), w = in.size(3), plane = h * w;
  const uint8_t* src = in.data_ptr<uint8_t>();
  const int32_t* prm = params.data_ptr<int32_t>();
  const float* m = mean.data_ptr<float>();
  const float* inv = inv_std.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  parallel_for(0, in.numel() / plane, std::max<int64_t>(1, kElementwiseGrain / plane),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t p = lo; p < hi; ++p) {
                   const int64_t b = p / channels, c = p % channels;
                   const int64_t dy = prm[b * 3], dx = prm[b * 3 + 1];
                   const bool flip = prm[b * 3 + 2] != 0;
                   const uint8_t* s = src + p * plane;
                   float* d = dst + p * plane;
                   // Padding is zero before normalization, as RandomCrop leaves it.
                   const float zero = (0.0f - m[c]) * inv[c];
                   for (int64_t y = 0; y < h; ++y) {
                     const int64_t sy = y + dy;
                     for (int64_t x = 0; x < w; ++x) {
                       const int64_t sx = (flip ? w - 1 - x : x) + dx;
                       d[y * w + x] = sy >= 0 && sy < h && sx >= 0 && sx < w
                                          ? (s[sy * w + sx] * (1.0f / 255.0f) - m[c]) * inv[c]
                                          : zero;
                     }
                   }
                 }
               });
}

}  // namespace

TANDEM_REGISTER_CPU(crop_flip_normalize, crop_flip_normalize);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
