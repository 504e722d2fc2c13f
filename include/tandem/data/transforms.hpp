// Per-sample image transforms. The random ones draw from Philox keyed by (seed, epoch, index),
// so a sample's augmentation does not depend on the thread that builds it or on the order in
// which batches are built, and a resumed run sees the same augmentations.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "tandem/core/shape.hpp"
#include "tandem/core/tensor.hpp"

namespace tandem::data {

/// Where a sample is in a run: the stream its random transforms draw from.
struct SampleKey {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t index = 0;
};

class Transform {
 public:
  virtual ~Transform() = default;
  /// Transforms a (C, H, W) f32 image in place.
  virtual void apply(float* image, const Shape& chw, const SampleKey& key) const = 0;

 protected:
  /// Four random words for this transform and sample (`salt` separates transforms).
  static void random_words(const SampleKey& key, uint32_t salt, uint32_t out[4]);
};

/// (x - mean[c]) / std[c] per channel.
class Normalize : public Transform {
 public:
  Normalize(std::vector<float> mean, std::vector<float> std);
  void apply(float* image, const Shape& chw, const SampleKey& key) const override;
  const std::vector<float>& mean() const { return mean_; }
  /// 1 / std per channel, the factor apply() multiplies by.
  const std::vector<float>& inv_std() const { return inv_std_; }

 private:
  std::vector<float> mean_, inv_std_;
};

/// Zero-pads by `padding` on every side, then crops a random window of the original size.
class RandomCrop : public Transform {
 public:
  explicit RandomCrop(int64_t padding);
  void apply(float* image, const Shape& chw, const SampleKey& key) const override;
  /// The window's offset (dy, dx), each in [-padding, padding], that apply() uses for `key`.
  static std::pair<int64_t, int64_t> offset(const SampleKey& key, int64_t padding);

 private:
  int64_t padding_;
};

/// Mirrors the image left-right with probability p.
class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  void apply(float* image, const Shape& chw, const SampleKey& key) const override;
  /// Whether apply() mirrors the sample of `key`.
  static bool flips(const SampleKey& key, double p);

 private:
  double p_;
};

using Transforms = std::vector<std::shared_ptr<const Transform>>;

/// RandomCrop(padding), RandomHorizontalFlip(p) and Normalize(mean, std) as one kernel on a
/// batch of u8 images (B, C, H, W) on any device: `params` (B, 3) i32 holds each sample's crop
/// offset (dy, dx) and flip (0 or 1), from RandomCrop::offset and RandomHorizontalFlip::flips.
/// The same f32 values as the three transforms applied to the image scaled to [0, 1], bit for
/// bit. The loader runs it on the GPU with LoaderOptions::augment_on_device.
Tensor crop_flip_normalize(const Tensor& images, const Tensor& params,
                           const std::vector<float>& mean, const std::vector<float>& std);
/// The same with the per-channel mean and 1 / std already on the images' device (f32, (C)), as a
/// loader keeps them: no host-to-device copy per call (a copy from pageable memory would wait
/// for the device's queued work).
Tensor crop_flip_normalize(const Tensor& images, const Tensor& params, const Tensor& mean,
                           const Tensor& inv_std);

}  // namespace tandem::data
