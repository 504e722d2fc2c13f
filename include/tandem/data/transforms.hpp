// Per-sample image transforms. The random ones draw from Philox keyed by (seed, epoch, index),
// so a sample's augmentation does not depend on the thread that builds it or on the order in
// which batches are built, and a resumed run sees the same augmentations.
#pragma once

#include <memory>
#include <vector>

#include "tandem/core/shape.hpp"

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

 private:
  std::vector<float> mean_, inv_std_;
};

/// Zero-pads by `padding` on every side, then crops a random window of the original size.
class RandomCrop : public Transform {
 public:
  explicit RandomCrop(int64_t padding);
  void apply(float* image, const Shape& chw, const SampleKey& key) const override;

 private:
  int64_t padding_;
};

/// Mirrors the image left-right with probability p.
class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  void apply(float* image, const Shape& chw, const SampleKey& key) const override;

 private:
  double p_;
};

using Transforms = std::vector<std::shared_ptr<const Transform>>;

}  // namespace tandem::data
