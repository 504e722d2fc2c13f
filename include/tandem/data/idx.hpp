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

/// One split of an MNIST-style dataset: images (N, 1, 28, 28), labels (N) i64.
struct MnistSplit {
  Tensor images;
  Tensor labels;
};

/// Loads `train` (train-*) or test (t10k-*) images and labels from `dir`. Images come as f32 in
/// [0, 1], or with `dtype` u8 as the file's bytes, a quarter of the memory (60,000 Fashion-MNIST
/// images: 47 instead of 188 MB): a TensorDataset of u8 images scales each sample to [0, 1] as
/// it is read, to the same floats.
MnistSplit load_mnist(const std::string& dir, bool train, DType dtype = DType::f32);

}  // namespace tandem::data
