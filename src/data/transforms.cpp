#include "tandem/data/transforms.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tandem/core/error.hpp"
#include "tandem/core/philox.hpp"
#include "tandem/ops/creation.hpp"
#include "../kernels/kernels.hpp"

namespace tandem::data {

void Transform::random_words(const SampleKey& key, uint32_t salt, uint32_t out[4]) {
  // Counter: (index, epoch and salt); key: the seed.
  uint64_t hi = (static_cast<uint64_t>(key.epoch) << 8) | salt;
  auto r = Philox4x32::generate(key.seed, static_cast<uint64_t>(key.index), hi);
  std::copy(r.v, r.v + 4, out);
}

Normalize::Normalize(std::vector<float> mean, std::vector<float> std) : mean_(std::move(mean)) {
  TANDEM_CHECK(!mean_.empty() && mean_.size() == std.size(),
               "Normalize: need one mean and one std per channel, got ", mean_.size(), " and ",
               std.size());
  for (float s : std) {
    TANDEM_CHECK(s > 0, "Normalize: std must be positive, got ", s);
    inv_std_.push_back(1.0f / s);
  }
}

void Normalize::apply(float* image, const Shape& chw, const SampleKey&) const {
  const int64_t channels = chw[0], plane = chw[1] * chw[2];
  TANDEM_CHECK(static_cast<size_t>(channels) == mean_.size(), "Normalize: ", mean_.size(),
               " channel statistics for an image of ", channels, " channels");
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < plane; ++i)
      image[c * plane + i] = (image[c * plane + i] - mean_[c]) * inv_std_[c];
}

RandomCrop::RandomCrop(int64_t padding) : padding_(padding) {
  TANDEM_CHECK(padding >= 0, "RandomCrop: padding must be >= 0, got ", padding);
}

std::pair<int64_t, int64_t> RandomCrop::offset(const SampleKey& key, int64_t padding) {
  if (padding == 0) return {0, 0};
  uint32_t r[4];
  random_words(key, 1, r);
  // Window origin in the padded image, as an offset from the original: dy, dx in [-p, p].
  const int64_t span = 2 * padding + 1;
  return {static_cast<int64_t>(r[0] % span) - padding, static_cast<int64_t>(r[1] % span) - padding};
}

void RandomCrop::apply(float* image, const Shape& chw, const SampleKey& key) const {
  if (padding_ == 0) return;
  const auto [dy, dx] = offset(key, padding_);
  const int64_t c = chw[0], h = chw[1], w = chw[2];
  thread_local std::vector<float> copy;
  copy.assign(image, image + c * h * w);
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < h; ++y) {
      float* dst = image + (ch * h + y) * w;
      const int64_t sy = y + dy;
      if (sy < 0 || sy >= h) {
        std::fill(dst, dst + w, 0.0f);
        continue;
      }
      const float* src = copy.data() + (ch * h + sy) * w;
      for (int64_t x = 0; x < w; ++x) {
        const int64_t sx = x + dx;
        dst[x] = sx >= 0 && sx < w ? src[sx] : 0.0f;
      }
    }
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  TANDEM_CHECK(p >= 0 && p <= 1, "RandomHorizontalFlip: p must be in [0, 1], got ", p);
}

bool RandomHorizontalFlip::flips(const SampleKey& key, double p) {
  uint32_t r[4];
  random_words(key, 2, r);
  return Philox4x32::to_unit_double(r[0], r[1]) < p;
}

void RandomHorizontalFlip::apply(float* image, const Shape& chw, const SampleKey& key) const {
  if (!flips(key, p_)) return;
  const int64_t rows = chw[0] * chw[1], w = chw[2];
  for (int64_t y = 0; y < rows; ++y) std::reverse(image + y * w, image + (y + 1) * w);
}

Tensor crop_flip_normalize(const Tensor& images, const Tensor& params,
                           const std::vector<float>& mean, const std::vector<float>& std) {
  const Normalize n(mean, std);  // checks the statistics, keeps 1 / std as apply() uses it
  const Shape c{static_cast<int64_t>(mean.size())};  // 1-d even for one channel
  return crop_flip_normalize(images, params, from_vector(n.mean(), c).to(images.device()),
                             from_vector(n.inv_std(), c).to(images.device()));
}

Tensor crop_flip_normalize(const Tensor& images, const Tensor& params, const Tensor& mean,
                           const Tensor& inv_std) {
  TANDEM_CHECK(images.dim() == 4 && images.dtype() == DType::u8,
               "crop_flip_normalize: images must be u8 (B, C, H, W), got ", images.dtype(), " ",
               shape_str(images.shape()));
  const int64_t batch = images.size(0), channels = images.size(1);
  const bool params_ok = params.dtype() == DType::i32 && params.shape() == Shape{batch, 3};
  TANDEM_CHECK(params_ok,
               "crop_flip_normalize: params must be i32 (", batch, ", 3), got ", params.dtype(),
               " ", shape_str(params.shape()));
  const Device device = images.device();
  TANDEM_CHECK(params.device() == device && mean.device() == device && inv_std.device() == device,
               "crop_flip_normalize: params, mean and std must be on the images' device ", device);
  const bool stats_ok = mean.dtype() == DType::f32 && inv_std.dtype() == DType::f32 &&
                        mean.shape() == Shape{channels} && inv_std.shape() == Shape{channels};
  TANDEM_CHECK(stats_ok, "crop_flip_normalize: need one mean and one std per channel (", channels,
               "), got ", mean.numel(), " and ", inv_std.numel());
  Tensor out = empty(images.shape(), TensorOptions(DType::f32).device(device));
  if (out.numel() == 0) return out;  // no plane to cut (the kernels divide by its size)
  kernels::crop_flip_normalize(out, images.contiguous(), params.contiguous(), mean.contiguous(),
                               inv_std.contiguous());
  return out;
}

}  // namespace tandem::data
