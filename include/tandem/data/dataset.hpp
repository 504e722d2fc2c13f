// Datasets of labelled images: in-memory tensors (Fashion-MNIST, CIFAR-10) and a synthetic set
// of any shape (for benchmarks), plus the CIFAR-10 binary reader.
#pragma once

#include <memory>
#include <string>

#include "tandem/core/tensor.hpp"

namespace tandem::data {

/// Random access to (image, label) samples. Implementations are safe to read from several
/// loader threads at once.
class ImageDataset {
 public:
  virtual ~ImageDataset() = default;
  virtual int64_t size() const = 0;
  /// (C, H, W) of every image.
  virtual Shape sample_shape() const = 0;
  virtual int64_t num_classes() const = 0;
  /// Writes image `index` as f32 into `out` (numel(sample_shape()) values); returns its label.
  virtual int64_t get(int64_t index, float* out) const = 0;
  /// Whether the images are stored as u8, which get_bytes() then hands out as they are (the
  /// loader's augment_on_device path ships them so).
  virtual bool has_bytes() const { return false; }
  /// Writes image `index` as its u8 pixels into `out`; returns its label. Only when has_bytes().
  virtual int64_t get_bytes(int64_t index, uint8_t* out) const;
};

/// Images (N, C, H, W), u8 (scaled to [0, 1]) or f32 (as is), and labels (N) i64 in
/// [0, num_classes).
class TensorDataset : public ImageDataset {
 public:
  TensorDataset(Tensor images, Tensor labels, int64_t num_classes);
  int64_t size() const override { return images_.size(0); }
  Shape sample_shape() const override;
  int64_t num_classes() const override { return num_classes_; }
  int64_t get(int64_t index, float* out) const override;
  bool has_bytes() const override { return images_.dtype() == DType::u8; }
  int64_t get_bytes(int64_t index, uint8_t* out) const override;

 private:
  Tensor images_, labels_;
  int64_t num_classes_, sample_numel_;
};

/// `size` images of `shape` with uniform [0, 1) pixels and uniform labels, each a pure function
/// of (seed, index): no memory, any size, reproducible.
class SyntheticDataset : public ImageDataset {
 public:
  SyntheticDataset(int64_t size, Shape shape, int64_t num_classes, uint64_t seed = 0);
  int64_t size() const override { return size_; }
  Shape sample_shape() const override { return shape_; }
  int64_t num_classes() const override { return num_classes_; }
  int64_t get(int64_t index, float* out) const override;

 private:
  int64_t size_;
  Shape shape_;
  int64_t num_classes_;
  uint64_t seed_;
};

/// One split of a labelled image dataset: images (N, C, H, W), labels (N) i64.
struct ImageSplit {
  Tensor images;
  Tensor labels;
};

/// Reads the binary version of CIFAR-10 from `dir` (data_batch_1.bin ... data_batch_5.bin for
/// the training split, test_batch.bin for the test split): records of 1 label byte and 3072
/// pixel bytes. Images are u8 (N, 3, 32, 32). Throws an Error naming the file for a missing
/// folder or file, a size that is not a whole number of records, or a label outside 0..9.
ImageSplit load_cifar10(const std::string& dir, bool train);

}  // namespace tandem::data
