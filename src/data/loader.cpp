#include "tandem/data/loader.hpp"

#include <numeric>

#include "tandem/core/context.hpp"
#include "tandem/core/error.hpp"
#include "tandem/core/philox.hpp"
#include "tandem/core/storage.hpp"
#include "tandem/core/thread_pool.hpp"
#include "tandem/cuda/runtime.hpp"
#include "tandem/ops/creation.hpp"

namespace tandem::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t rank, int64_t world,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : size_(dataset_size), rank_(rank), world_(world), shuffle_(shuffle), seed_(seed) {
  TANDEM_CHECK(world > 0 && rank >= 0 && rank < world, "DistributedSampler: rank ", rank,
               " is not in [0, world = ", world, ")");
  TANDEM_CHECK(dataset_size >= 0, "DistributedSampler: negative dataset size ", dataset_size);
  // Rounded up without n + d - 1, which overflows for sizes near int64's limit.
  num_samples_ = dataset_size / world + (!drop_last && dataset_size % world != 0);
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(size_);
  std::iota(order.begin(), order.end(), 0);
  if (shuffle_) {
    // Fisher-Yates, each swap drawn from Philox counter (i, epoch): a pure function of (seed, epoch).
    for (int64_t i = size_ - 1; i > 0; --i) {
      auto r = Philox4x32::generate(seed_, static_cast<uint64_t>(i), static_cast<uint64_t>(epoch_));
      uint64_t word = static_cast<uint64_t>(r.v[0]) << 32 | r.v[1];
      std::swap(order[i], order[word % static_cast<uint64_t>(i + 1)]);
    }
  }
  const int64_t total = num_samples_ * world_;
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t k = rank_; k < total; k += world_) mine.push_back(order[k % std::max<int64_t>(1, size_)]);
  return mine;
}

DataLoader::DataLoader(std::shared_ptr<const ImageDataset> dataset, DistributedSampler sampler,
                       LoaderOptions options, Transforms transforms)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options),
      transforms_(std::move(transforms)) {
  TANDEM_CHECK(dataset_ != nullptr, "DataLoader: null dataset");
  TANDEM_CHECK(options_.batch_size_ > 0, "DataLoader: batch size must be positive, got ",
               options_.batch_size_);
  TANDEM_CHECK(options_.workers_ >= 0 && options_.prefetch_ >= 1,
               "DataLoader: need workers >= 0 and prefetch >= 1, got ", options_.workers_, " and ",
               options_.prefetch_);
  for (const auto& t : transforms_) TANDEM_CHECK(t != nullptr, "DataLoader: null transform");
  if (const auto& a = options_.augment_on_device_) {
    TANDEM_CHECK(transforms_.empty(), "DataLoader: augment_on_device replaces the loader's ",
                 "transforms; give one or the other, not both");
    TANDEM_CHECK(dataset_->has_bytes(), "DataLoader: augment_on_device needs a dataset of u8 ",
                 "images (it ships the bytes)");
    TANDEM_CHECK(a->crop_padding_ >= 0 && a->flip_p_ >= 0 && a->flip_p_ <= 1,
                 "DataLoader: augment_on_device needs crop_padding >= 0 and flip_p in [0, 1], got ",
                 a->crop_padding_, " and ", a->flip_p_);
    const int64_t channels = dataset_->sample_shape()[0];
    TANDEM_CHECK(a->mean_.size() == static_cast<size_t>(channels) && a->std_.size() == a->mean_.size(),
                 "DataLoader: augment_on_device needs one mean and one std per channel (",
                 channels, "), got ", a->mean_.size(), " and ", a->std_.size());
    const Normalize n(a->mean_, a->std_);  // checks std > 0, keeps 1 / std as apply() uses it
    augment_mean_ = from_vector(n.mean(), {channels}).to(options_.device_);
    augment_inv_std_ = from_vector(n.inv_std(), {channels}).to(options_.device_);
  }
}

DataLoader::~DataLoader() { stop_workers(); }

int64_t DataLoader::num_batches() const {
  const int64_t n = sampler_.num_samples(), b = options_.batch_size_;
  return n / b + (!options_.drop_last_ && n % b != 0);
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  space_cv_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

void DataLoader::start_epoch(int64_t epoch, int64_t start_batch) {
  TANDEM_CHECK(start_batch >= 0 && start_batch <= num_batches(), "DataLoader: start batch ",
               start_batch, " is outside the epoch's ", num_batches(), " batches");
  stop_workers();
  sampler_.set_epoch(epoch);
  epoch_ = epoch;
  order_ = sampler_.indices();
  ready_.clear();
  next_build_ = next_take_ = start_batch;
  end_ = num_batches();
  stop_ = false;
  for (int64_t i = 0; i < options_.workers_; ++i)
    workers_.emplace_back([this] {
      // A worker is a thread of its own: it computes on its own thread only (a one-thread pool,
      // as PyTorch sets its loader workers to one thread), never on its rank's pool, and records
      // no autograd history.
      ExecutionContext context(options_.device_, std::make_shared<ThreadPool>(1));
      context.set_grad_mode(false);
      ContextGuard guard(context);
      // The loader's GPU current on this thread, as PyTorch's pin-memory thread sets it: its
      // CUDA calls that take no device (a pinned block's event queried) would otherwise make GPU
      // 0 current and create a context there in every rank's process.
      if (options_.device_.is_cuda()) cuda::set_device(options_.device_.index());
      worker_loop();
    });
}

Batch DataLoader::build(int64_t batch_index) const {
  const int64_t first = batch_index * options_.batch_size_;
  const int64_t count = std::min<int64_t>(options_.batch_size_, static_cast<int64_t>(order_.size()) - first);
  const Shape chw = dataset_->sample_shape();
  const int64_t sample = numel_of(chw);
  Shape shape{count, chw[0], chw[1], chw[2]};
  // A GPU target gets page-locked staging memory, so the host-to-device copy is asynchronous.
  auto staging = [&](const Shape& s, DType dtype) {
    if (options_.device_.is_cpu()) return empty(s, TensorOptions(dtype).device(kCPU));
    const size_t nbytes = static_cast<size_t>(numel_of(s)) * element_size(dtype);
    Allocator& pinned = pinned_allocator();
    return from_blob(pinned.allocate(nbytes), s, dtype, kCPU,
                     [&pinned, nbytes](void* p) { pinned.deallocate(p, nbytes); });
  };
  if (const auto& a = options_.augment_on_device_) {
    Batch batch{staging(shape, DType::u8), staging({count}, DType::i64), batch_index,
                staging({count, 3}, DType::i32)};
    uint8_t* images = batch.images.data_ptr<uint8_t>();
    int64_t* labels = batch.labels.data_ptr<int64_t>();
    int32_t* params = batch.augment.data_ptr<int32_t>();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t index = order_[first + i];
      labels[i] = dataset_->get_bytes(index, images + i * sample);
      const SampleKey key{options_.seed_, epoch_, index};
      const auto [dy, dx] = RandomCrop::offset(key, a->crop_padding_);
      params[i * 3] = static_cast<int32_t>(dy);
      params[i * 3 + 1] = static_cast<int32_t>(dx);
      params[i * 3 + 2] = a->flip_p_ > 0 && RandomHorizontalFlip::flips(key, a->flip_p_);
    }
    return batch;
  }
  Batch batch{staging(shape, DType::f32), staging({count}, DType::i64), batch_index, Tensor()};
  float* images = batch.images.data_ptr<float>();
  int64_t* labels = batch.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = order_[first + i];
    float* image = images + i * sample;
    labels[i] = dataset_->get(index, image);
    const SampleKey key{options_.seed_, epoch_, index};
    for (const auto& t : transforms_) t->apply(image, chw, key);
  }
  return batch;
}

void DataLoader::worker_loop() {
  for (;;) {
    int64_t b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      space_cv_.wait(lock, [&] {
        return stop_ || next_build_ >= end_ || next_build_ < next_take_ + options_.prefetch_;
      });
      if (stop_ || next_build_ >= end_) return;
      b = next_build_++;
    }
    std::pair<Batch, std::exception_ptr> result;
    try {
      result.first = build(b);
    } catch (...) {
      result.second = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.emplace(b, std::move(result));
    }
    ready_cv_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  if (next_take_ >= end_) return std::nullopt;
  Batch batch;
  if (workers_.empty()) {
    batch = build(next_take_++);
  } else {
    std::pair<Batch, std::exception_ptr> result;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_cv_.wait(lock, [&] { return ready_.count(next_take_) > 0; });
      auto it = ready_.find(next_take_);
      result = std::move(it->second);
      ready_.erase(it);
      ++next_take_;
    }
    space_cv_.notify_all();
    if (result.second) {
      stop_workers();
      std::rethrow_exception(result.second);
    }
    batch = std::move(result.first);
  }
  // From pinned staging: the copies are queued on the device's stream and return at once.
  const Device device = options_.device_;
  batch.images = batch.images.to(device, /*non_blocking=*/true);
  batch.labels = batch.labels.to(device, /*non_blocking=*/true);
  if (options_.augment_on_device_) {
    batch.images = crop_flip_normalize(batch.images, batch.augment.to(device, /*non_blocking=*/true),
                                       augment_mean_, augment_inv_std_);
    batch.augment = Tensor();
  }
  return batch;
}

}  // namespace tandem::data
