#include "tandem/data/dataset.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tandem/core/error.hpp"
#include "tandem/core/philox.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/shape_ops.hpp"

namespace tandem::data {

TensorDataset::TensorDataset(Tensor images, Tensor labels, int64_t num_classes)
    : images_(images.contiguous()), labels_(labels.contiguous()), num_classes_(num_classes) {
  TANDEM_CHECK(
      labels_.is_cpu() && !labels_.is_floating_point() && labels_.dtype() != DType::boolean,
      "TensorDataset: labels must be a CPU integer tensor (class indices), got ", labels_.dtype(),
      " on ", labels_.device());
  labels_ = labels_.to(DType::i64);
  TANDEM_CHECK(images_.dim() == 4 && images_.is_cpu() &&
                   (images_.dtype() == DType::u8 || images_.dtype() == DType::f32),
               "TensorDataset: images must be a CPU (N, C, H, W) u8 or f32 tensor, got ",
               shape_str(images_.shape()), " ", images_.dtype());
  TANDEM_CHECK(labels_.dim() == 1 && labels_.size(0) == images_.size(0),
               "TensorDataset: ", labels_.numel(), " labels for ", images_.size(0), " images");
  TANDEM_CHECK(num_classes > 0, "TensorDataset: num_classes must be positive");
  if (labels_.numel() > 0) {
    const int64_t lo = labels_.min().item<int64_t>(), hi = labels_.max().item<int64_t>();
    TANDEM_CHECK_INDEX(lo >= 0 && hi < num_classes, "TensorDataset: labels run from ", lo, " to ",
                       hi, ", outside [0, ", num_classes, ") for ", num_classes, " classes");
  }
  sample_numel_ = images_.numel() / std::max<int64_t>(1, images_.size(0));
}

Shape TensorDataset::sample_shape() const {
  return {images_.size(1), images_.size(2), images_.size(3)};
}

int64_t TensorDataset::get(int64_t index, float* out) const {
  TANDEM_CHECK_INDEX(index >= 0 && index < size(), "TensorDataset: index ", index,
                     " out of range for ", size(), " samples");
  if (images_.dtype() == DType::u8) {
    const uint8_t* src = images_.data_ptr<uint8_t>() + index * sample_numel_;
    for (int64_t i = 0; i < sample_numel_; ++i) out[i] = src[i] * (1.0f / 255.0f);
  } else {
    const float* src = images_.data_ptr<float>() + index * sample_numel_;
    std::memcpy(out, src, sample_numel_ * sizeof(float));
  }
  return labels_.data_ptr<int64_t>()[index];
}

int64_t ImageDataset::get_bytes(int64_t, uint8_t*) const {
  TANDEM_THROW(NotImplementedError, "this dataset does not hold its images as u8 bytes");
}

int64_t TensorDataset::get_bytes(int64_t index, uint8_t* out) const {
  TANDEM_CHECK_INDEX(index >= 0 && index < size(), "TensorDataset: index ", index,
                     " out of range for ", size(), " samples");
  TANDEM_CHECK_T(NotImplementedError, has_bytes(), "TensorDataset: images are ",
                 images_.dtype(), ", not u8 bytes");
  std::memcpy(out, images_.data_ptr<uint8_t>() + index * sample_numel_, sample_numel_);
  return labels_.data_ptr<int64_t>()[index];
}

SyntheticDataset::SyntheticDataset(int64_t size, Shape shape, int64_t num_classes, uint64_t seed)
    : size_(size), shape_(std::move(shape)), num_classes_(num_classes), seed_(seed) {
  TANDEM_CHECK(size >= 0 && shape_.size() == 3 && numel_of(shape_) > 0 && num_classes > 0,
               "SyntheticDataset: need size >= 0, a (C, H, W) shape and num_classes > 0, got size ",
               size, ", shape ", shape_str(shape_), ", ", num_classes, " classes");
}

int64_t SyntheticDataset::get(int64_t index, float* out) const {
  TANDEM_CHECK_INDEX(index >= 0 && index < size_, "SyntheticDataset: index ", index,
                     " out of range for ", size_, " samples");
  const int64_t n = numel_of(shape_);
  // Counter (i / 4, index): each sample its own Philox stream; the last block gives the label.
  for (int64_t i = 0; i < n; i += 4) {
    auto r = Philox4x32::generate(seed_, static_cast<uint64_t>(i / 4), static_cast<uint64_t>(index));
    for (int64_t k = 0; k < 4 && i + k < n; ++k) out[i + k] = Philox4x32::to_unit_float(r.v[k]);
  }
  auto r = Philox4x32::generate(seed_, ~uint64_t{0}, static_cast<uint64_t>(index));
  return static_cast<int64_t>(r.v[0] % static_cast<uint32_t>(num_classes_));
}

ImageSplit load_cifar10(const std::string& dir, bool train) {
  TANDEM_CHECK_T(Error, std::filesystem::is_directory(dir), "load_cifar10: folder ", dir,
                 " not found. Pass --data-dir with the folder of the binary version of CIFAR-10 "
                 "(cifar-10-batches-bin: data_batch_1.bin ... data_batch_5.bin, test_batch.bin)");
  std::vector<std::string> files;
  if (train) {
    for (int i = 1; i <= 5; ++i) files.push_back(dir + "/data_batch_" + std::to_string(i) + ".bin");
  } else {
    files.push_back(dir + "/test_batch.bin");
  }
  constexpr int64_t kPixels = 3 * 32 * 32, kRecord = 1 + kPixels;
  std::vector<std::string> contents;
  int64_t total = 0;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    TANDEM_CHECK_T(Error, in.good(), "load_cifar10: cannot open ", path, ": ",
                   std::strerror(errno));
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const int64_t size = static_cast<int64_t>(bytes.size());
    TANDEM_CHECK_T(Error, size > 0 && size % kRecord == 0, "load_cifar10: ", path,
                   " is truncated or not a CIFAR-10 batch: ", size,
                   " bytes is not a whole number of ", kRecord, "-byte records");
    total += size / kRecord;
    contents.push_back(std::move(bytes));
  }
  ImageSplit split{empty({total, 3, 32, 32}, TensorOptions(DType::u8).device(kCPU)),
                   empty({total}, TensorOptions(DType::i64).device(kCPU))};
  uint8_t* images = split.images.data_ptr<uint8_t>();
  int64_t* labels = split.labels.data_ptr<int64_t>();
  int64_t n = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const auto* p = reinterpret_cast<const uint8_t*>(contents[f].data());
    const int64_t records = static_cast<int64_t>(contents[f].size()) / kRecord;
    for (int64_t r = 0; r < records; ++r, ++n) {
      const uint8_t* rec = p + r * kRecord;
      TANDEM_CHECK_T(Error, rec[0] < 10, "load_cifar10: ", files[f], " is corrupt: record ", r,
                     " has label ", static_cast<int>(rec[0]), " (expected 0..9)");
      labels[n] = rec[0];
      std::memcpy(images + n * kPixels, rec + 1, kPixels);
    }
  }
  return split;
}

}  // namespace tandem::data
