// Batches from a dataset: a distributed sampler that gives every rank the same number of
// samples, and a loader whose worker threads build the next batches while the model computes.
#pragma once

#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tandem/core/arg.hpp"
#include "tandem/core/device.hpp"
#include "tandem/core/tensor.hpp"
#include "tandem/data/dataset.hpp"
#include "tandem/data/transforms.hpp"

namespace tandem::data {

/// torch's DistributedSampler: an epoch's order is a permutation from (seed, epoch) (or 0..N-1
/// without shuffling), padded by repeating its start to a multiple of `world` (or truncated when
/// drop_last), then rank r takes every world-th index from r. Every rank gets the same count.
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int64_t rank = 0, int64_t world = 1, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  /// Samples per rank per epoch.
  int64_t num_samples() const { return num_samples_; }
  /// This rank's dataset indices for the current epoch.
  std::vector<int64_t> indices() const;

 private:
  int64_t size_, rank_, world_;
  bool shuffle_;
  uint64_t seed_;
  int64_t num_samples_;  // drop_last is all in this count
  int64_t epoch_ = 0;
};

/// Crop, flip and normalize done by one kernel on the loader's device (crop_flip_normalize)
/// instead of per sample on the loader's threads: the batch goes there as u8 bytes (a quarter
/// of the f32 bytes) with each sample's crop offset and flip, drawn as RandomCrop(crop_padding)
/// and RandomHorizontalFlip(flip_p) draw them, so the images are the same, bit for bit, as those
/// transforms followed by Normalize(mean, std) give. The dataset must hold u8 images.
struct DeviceAugment {
  TANDEM_ARG(int64_t, crop_padding) = 0;
  TANDEM_ARG(double, flip_p) = 0;
  TANDEM_ARG(std::vector<float>, mean);
  TANDEM_ARG(std::vector<float>, std);
};

struct LoaderOptions {
  TANDEM_ARG(int64_t, batch_size) = 64;
  TANDEM_ARG(bool, drop_last) = false;
  // 0: batches are built on the caller's thread. Each worker thread runs under an execution
  // context of its own: the loader's device, a one-thread pool (a transform that calls
  // parallel_for runs on the worker alone, not on its rank's cores), grad mode off.
  TANDEM_ARG(int64_t, workers) = 1;
  TANDEM_ARG(int64_t, prefetch) = 2;  // batches built ahead of the one being consumed
  TANDEM_ARG(uint64_t, seed) = 0;     // for the random transforms (the sampler has its own)
  // A GPU target gets pinned, reused staging buffers and asynchronous copies.
  TANDEM_ARG(Device, device) = kCPU;
  // Augmentation on the device, in place of the loader's transforms (which must then be empty).
  TANDEM_ARG(std::optional<DeviceAugment>, augment_on_device);
};

struct Batch {
  Tensor images;  // (B, C, H, W) f32 on the loader's device
  Tensor labels;  // (B) i64
  int64_t index;  // position in the epoch
  // augment_on_device: (B, 3) i32 crop offsets and flips of u8 `images`, between a worker
  // building the batch and next() applying them; undefined in what next() returns.
  Tensor augment;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const ImageDataset> dataset, DistributedSampler sampler,
             LoaderOptions options = {}, Transforms transforms = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Batches per epoch (the same on every rank).
  int64_t num_batches() const;
  /// Begins `epoch` (the sampler's order for it), skipping its first `start_batch` batches
  /// (resuming from a checkpoint). Stops the workers of an unfinished previous epoch.
  void start_epoch(int64_t epoch, int64_t start_batch = 0);
  /// The next batch, or nullopt after the epoch's last. An exception thrown while building this
  /// batch (on a worker thread) is rethrown here.
  std::optional<Batch> next();
  const ImageDataset& dataset() const { return *dataset_; }
  const DistributedSampler& sampler() const { return sampler_; }

 private:
  Batch build(int64_t batch_index) const;
  void worker_loop();
  void stop_workers();

  std::shared_ptr<const ImageDataset> dataset_;
  DistributedSampler sampler_;
  LoaderOptions options_;
  Transforms transforms_;
  std::vector<int64_t> order_;
  int64_t epoch_ = 0;
  Tensor augment_mean_, augment_inv_std_;  // augment_on_device: on the device, made once

  // Producer/consumer state of the current epoch.
  std::mutex mu_;
  std::condition_variable ready_cv_, space_cv_;
  std::map<int64_t, std::pair<Batch, std::exception_ptr>> ready_;
  int64_t next_build_ = 0, next_take_ = 0, end_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tandem::data
