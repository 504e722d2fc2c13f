// Readers for the IDX format of MNIST and Fashion-MNIST (gzip-compressed or plain).
#pragma once

#include <string>

#include "tandem/core/tensor.hpp"

namespace tandem::data {

/// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// Reads one IDX file of unsigned bytes into a u8 tensor of the file's shape. Throws an Error
/// naming the file for a missing file, a bad magic number, a truncated or corrupt stream.
Tensor read_idx(const std::string& path);

/// One split of an MNIST-style dataset: images (N, 1, 28, 28) f32 in [0, 1], labels (N) i64.
struct MnistSplit {
  Tensor images;
  Tensor labels;
};

/// Loads `train` (train-*) or test (t10k-*) images and labels from `dir`.
MnistSplit load_mnist(const std::string& dir, bool train);

}  // namespace tandem::data
