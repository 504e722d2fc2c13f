// libtorch's data API (torch::data): examples, datasets you subclass (get + size), MNIST,
// transforms chained with map() (Normalize, Lambda, Stack), samplers and make_data_loader, so
// that
//   auto ds = data::datasets::MNIST(root).map(data::transforms::Normalize<>(0.1307, 0.3081))
//                                        .map(data::transforms::Stack<>());
//   auto loader = data::make_data_loader(std::move(ds), data::DataLoaderOptions(64).workers(2));
//   for (auto& batch : *loader) model->forward(batch.data) ...
// reads as it does in libtorch. Templates, as libtorch's: a pipeline's batch type is known at
// compile time. tandem's own loader (data/loader.hpp) is the fast path of the bundled example:
// pinned staging, augmentation on the GPU, sharding across ranks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "tandem/autograd/grad_mode.hpp"
#include "tandem/core/arg.hpp"
#include "tandem/core/context.hpp"
#include "tandem/core/error.hpp"
#include "tandem/core/thread_pool.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/elementwise.hpp"
#include "tandem/ops/shape_ops.hpp"

namespace tandem {
/// c10::optional's names in libtorch code (`torch::optional<size_t> size() const override`).
template <typename T>
using optional = std::optional<T>;
using std::nullopt;
}  // namespace tandem

namespace tandem::data {

/// One sample, or a batch once collated: data and target.
template <typename Data = Tensor, typename Target = Tensor>
struct Example {
  using DataType = Data;
  using TargetType = Target;
  Example() = default;
  Example(Data data, Target target) : data(std::move(data)), target(std::move(target)) {}
  Data data;
  Target target;
};

namespace datasets {

template <typename Source, typename Transform>
class MapDataset;

/// A dataset that hands out whole batches for a list of indices.
template <typename Self, typename Batch, typename BatchRequest = std::vector<size_t>>
class BatchDataset {
 public:
  using SelfType = Self;
  using BatchType = Batch;
  using BatchRequestType = BatchRequest;
  virtual ~BatchDataset() = default;
  virtual Batch get_batch(BatchRequest request) = 0;
  /// The number of samples, if known (make_data_loader needs it).
  virtual std::optional<size_t> size() const = 0;

  /// This dataset with `transform` applied to each batch it hands out.
  template <typename Transform>
  MapDataset<Self, Transform> map(Transform transform) & {
    return MapDataset<Self, Transform>(static_cast<Self&>(*this), std::move(transform));
  }
  template <typename Transform>
  MapDataset<Self, Transform> map(Transform transform) && {
    return MapDataset<Self, Transform>(std::move(static_cast<Self&>(*this)), std::move(transform));
  }
};

/// A dataset of single examples: subclasses define get(index) and size(); a batch is the
/// vector of its examples. get may be called from several loader workers at once.
template <typename Self, typename SingleExample = Example<>>
class Dataset : public BatchDataset<Self, std::vector<SingleExample>> {
 public:
  using ExampleType = SingleExample;
  virtual SingleExample get(size_t index) = 0;
  std::vector<SingleExample> get_batch(std::vector<size_t> indices) override {
    std::vector<SingleExample> batch;
    batch.reserve(indices.size());
    for (size_t i : indices) batch.push_back(get(i));
    return batch;
  }
};

/// `source` with `transform`'s apply_batch run on each of its batches.
template <typename Source, typename Transform>
class MapDataset : public BatchDataset<MapDataset<Source, Transform>,
                                       typename Transform::OutputBatchType,
                                       typename Source::BatchRequestType> {
 public:
  using DatasetType = Source;
  using TransformType = Transform;
  using BatchType = typename Transform::OutputBatchType;
  using BatchRequestType = typename Source::BatchRequestType;

  MapDataset(Source source, Transform transform)
      : dataset_(std::move(source)), transform_(std::move(transform)) {}
  BatchType get_batch(BatchRequestType request) override {
    return transform_.apply_batch(dataset_.get_batch(std::move(request)));
  }
  std::optional<size_t> size() const override { return dataset_.size(); }
  const Source& dataset() const noexcept { return dataset_; }
  const Transform& transform() const noexcept { return transform_; }

 private:
  Source dataset_;
  Transform transform_;
};

/// MNIST-style IDX files in `root` (train-images-idx3-ubyte, train-labels-idx1-ubyte,
/// t10k-..., plain or .gz): images (1, 28, 28) f32 in [0, 1], targets i64 scalars, as libtorch's.
class MNIST : public Dataset<MNIST> {
 public:
  enum class Mode { kTrain, kTest };
  explicit MNIST(const std::string& root, Mode mode = Mode::kTrain);
  Example<> get(size_t index) override;
  std::optional<size_t> size() const override;
  bool is_train() const noexcept { return train_; }
  /// All images (N, 1, 28, 28) and targets (N).
  const Tensor& images() const { return images_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor images_, targets_;
  bool train_;
};

}  // namespace datasets

// As libtorch's torch/data.h: `torch::data::Dataset<Self>` is the datasets' one.
using datasets::BatchDataset;
using datasets::Dataset;

namespace transforms {

/// Maps a whole batch.
template <typename InputBatch, typename OutputBatch>
class BatchTransform {
 public:
  using InputBatchType = InputBatch;
  using OutputBatchType = OutputBatch;
  virtual ~BatchTransform() = default;
  virtual OutputBatch apply_batch(InputBatch input_batch) = 0;
};

/// Maps each example of a batch.
template <typename Input, typename Output>
class Transform : public BatchTransform<std::vector<Input>, std::vector<Output>> {
 public:
  using InputType = Input;
  using OutputType = Output;
  virtual Output apply(Input input) = 0;
  std::vector<Output> apply_batch(std::vector<Input> input_batch) override {
    std::vector<Output> out;
    out.reserve(input_batch.size());
    for (auto& x : input_batch) out.push_back(apply(std::move(x)));
    return out;
  }
};

/// A function of one example.
template <typename Input, typename Output = Input>
class Lambda : public Transform<Input, Output> {
 public:
  using FunctionType = std::function<Output(Input)>;
  explicit Lambda(FunctionType function) : function_(std::move(function)) {}
  Output apply(Input input) override { return function_(std::move(input)); }

 private:
  FunctionType function_;
};

/// A function of a whole batch.
template <typename Input, typename Output = Input>
class BatchLambda : public BatchTransform<Input, Output> {
 public:
  using FunctionType = std::function<Output(Input)>;
  explicit BatchLambda(FunctionType function) : function_(std::move(function)) {}
  Output apply_batch(Input input) override { return function_(std::move(input)); }

 private:
  FunctionType function_;
};

/// Maps each example's data tensor, keeping its target.
template <typename Target = Tensor>
class TensorTransform : public Transform<Example<Tensor, Target>, Example<Tensor, Target>> {
 public:
  virtual Tensor operator()(Tensor input) = 0;
  Example<Tensor, Target> apply(Example<Tensor, Target> input) override {
    input.data = (*this)(std::move(input.data));
    return input;
  }
};

/// A function of each example's data tensor.
template <typename Target = Tensor>
class TensorLambda : public TensorTransform<Target> {
 public:
  using FunctionType = std::function<Tensor(Tensor)>;
  explicit TensorLambda(FunctionType function) : function_(std::move(function)) {}
  Tensor operator()(Tensor input) override { return function_(std::move(input)); }

 private:
  FunctionType function_;
};

/// (data - mean[c]) / stddev[c] per channel of (C, ...) data; one number serves every channel.
template <typename Target = Tensor>
class Normalize : public TensorTransform<Target> {
 public:
  Normalize(double mean, double stddev) : Normalize(std::vector<double>{mean}, {stddev}) {}
  Normalize(const std::vector<double>& mean, const std::vector<double>& stddev)
      : mean_(per_channel(mean)), stddev_(per_channel(stddev)) {
    TANDEM_CHECK(mean.size() == stddev.size(), "Normalize: ", mean.size(), " means but ",
                 stddev.size(), " standard deviations");
  }
  Tensor operator()(Tensor input) override {
    return div(sub(input, mean_.to(input.device())), stddev_.to(input.device()));
  }

 private:
  static Tensor per_channel(const std::vector<double>& v) {
    TANDEM_CHECK(!v.empty(), "Normalize: no mean or standard deviation given");
    return from_vector(v, {static_cast<int64_t>(v.size()), 1, 1}).to(DType::f32);
  }
  Tensor mean_, stddev_;
};

/// Collates a vector of examples into one batch.
template <typename Batch, typename Examples = std::vector<Batch>>
using Collation = BatchTransform<Examples, Batch>;

template <typename T = Example<>>
struct Stack;

/// Stacks the data tensors, and the targets, along a new dim 0.
template <>
struct Stack<Example<>> : public Collation<Example<>> {
  Example<> apply_batch(std::vector<Example<>> examples) override {
    std::vector<Tensor> data, targets;
    data.reserve(examples.size());
    targets.reserve(examples.size());
    for (auto& e : examples) {
      data.push_back(std::move(e.data));
      targets.push_back(std::move(e.target));
    }
    return {stack(data), stack(targets)};
  }
};

}  // namespace transforms

namespace samplers {

/// Hands out the indices of each batch of an epoch.
template <typename BatchRequest = std::vector<size_t>>
class Sampler {
 public:
  using BatchRequestType = BatchRequest;
  virtual ~Sampler() = default;
  /// Starts a new epoch (over `new_size` samples when given).
  virtual void reset(std::optional<size_t> new_size = std::nullopt) = 0;
  /// The next batch's indices (fewer at the end of the epoch), none once it is over.
  virtual std::optional<BatchRequest> next(size_t batch_size) = 0;
};

/// 0, 1, 2, ... in order.
class SequentialSampler : public Sampler<> {
 public:
  explicit SequentialSampler(size_t size) : size_(size) {}
  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
  size_t index() const noexcept { return index_; }

 private:
  size_t size_, index_ = 0;
};

/// A new random permutation every epoch, drawn from the default generator (manual_seed makes
/// it repeat).
class RandomSampler : public Sampler<> {
 public:
  explicit RandomSampler(int64_t size);
  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
  size_t index() const noexcept { return index_; }

 private:
  std::vector<size_t> order_;
  size_t index_ = 0;
};

}  // namespace samplers

struct DataLoaderOptions {
  DataLoaderOptions() = default;
  DataLoaderOptions(size_t batch_size) : batch_size_(batch_size) {}  // NOLINT: as libtorch's
  TANDEM_ARG(size_t, batch_size) = 1;
  /// Threads building batches ahead of the loop (0: the loop's own thread builds each one).
  TANDEM_ARG(size_t, workers) = 0;
  /// Batches in flight at once with workers (default 2 per worker).
  TANDEM_ARG(std::optional<size_t>, max_jobs);
  /// How long the loop waits for a worker's batch before throwing.
  TANDEM_ARG(std::optional<std::chrono::milliseconds>, timeout);
  /// Batches in the sampler's order (else each as soon as it is ready).
  TANDEM_ARG(bool, enforce_ordering) = true;
  /// Leaves out the last batch of an epoch when it is short.
  TANDEM_ARG(bool, drop_last) = false;
};

/// Runs a dataset's batches through an epoch per begin(). With workers, each worker thread has
/// its own copy of the dataset, made once (as libtorch's), computes on a one-thread pool with no autograd
/// history, and takes the next indices from the sampler in turn, at most max_jobs batches ahead
/// of the loop; an exception in a worker (the sampler's or the dataset's) reaches the loop. A
/// new begin() ends the epoch in progress: its workers stop and its iterators end.
template <typename Dataset, typename Sampler>
class StatelessDataLoader {
 public:
  using BatchType = typename Dataset::BatchType;

  StatelessDataLoader(Dataset dataset, Sampler sampler, DataLoaderOptions options)
      : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(std::move(options)) {
    TANDEM_CHECK(options_.batch_size() > 0, "DataLoader: batch_size must be positive");
    TANDEM_CHECK(options_.max_jobs().value_or(1) > 0, "DataLoader: max_jobs must be positive");
    // One copy per worker, made once: a dataset's state carries over from epoch to epoch.
    worker_datasets_.reserve(options_.workers());
    for (size_t w = 0; w < options_.workers(); ++w) worker_datasets_.push_back(dataset_);
  }
  ~StatelessDataLoader() { stop(); }
  StatelessDataLoader(const StatelessDataLoader&) = delete;
  StatelessDataLoader& operator=(const StatelessDataLoader&) = delete;

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = BatchType;
    using difference_type = std::ptrdiff_t;
    using pointer = BatchType*;
    using reference = BatchType&;
    Iterator() = default;
    Iterator(StatelessDataLoader* loader, size_t epoch)
        : loader_(loader), epoch_(epoch), batch_(loader->next(epoch)) {}
    BatchType& operator*() { return *batch_; }
    BatchType* operator->() { return &*batch_; }
    Iterator& operator++() {
      batch_ = loader_->next(epoch_);
      return *this;
    }
    /// Iterators are equal when both are past the end.
    bool operator==(const Iterator& other) const { return !batch_ && !other.batch_; }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    StatelessDataLoader* loader_ = nullptr;
    size_t epoch_ = 0;
    std::optional<BatchType> batch_;
  };

  /// Starts an epoch (ending one in progress).
  Iterator begin() {
    stop();
    epoch_.reset();
    ++epochs_;  // the last epoch's iterators end here, whatever follows
    sampler_.reset();
    epoch_ = std::make_unique<Epoch>();
    const Device device = current_context().device();
    for (size_t w = 0; w < options_.workers(); ++w)
      workers_.emplace_back([this, w, device] { work(worker_datasets_[w], device); });
    return Iterator(this, epochs_);
  }
  Iterator end() { return Iterator(); }
  const DataLoaderOptions& options() const noexcept { return options_; }

 private:
  // One epoch's shared state: jobs handed out in sampler order, results by job number.
  struct Epoch {
    std::mutex mu;
    std::condition_variable cv;
    size_t handed_out = 0, taken = 0;
    std::optional<size_t> total;  // known once the sampler ran dry (or threw)
    std::map<size_t, std::pair<std::optional<BatchType>, std::exception_ptr>> ready;
    std::exception_ptr broken;  // a worker failed outside its jobs: the epoch cannot go on
    bool stopping = false;
  };

  // The sampler's next batch of indices, or none at the end of the epoch (or a short last
  // batch with drop_last).
  std::optional<std::vector<size_t>> next_indices() {
    auto indices = sampler_.next(options_.batch_size());
    if (indices && options_.drop_last() && indices->size() < options_.batch_size()) return {};
    return indices;
  }

  void work(Dataset& dataset, Device device) {
    Epoch& e = *epoch_;
    try {
      ExecutionContext context(device, std::make_shared<ThreadPool>(1));
      context.set_grad_mode(false);
      ContextGuard guard(context);
      work_loop(dataset, e);
    } catch (...) {  // no thread for the pool, no memory for a result: the loop gets the error
      std::lock_guard<std::mutex> lock(e.mu);
      e.broken = std::current_exception();
      e.cv.notify_all();
    }
  }

  void work_loop(Dataset& dataset, Epoch& e) {
    const size_t max_jobs = options_.max_jobs().value_or(2 * options_.workers());
    for (;;) {
      std::vector<size_t> indices;
      size_t job;
      {
        std::unique_lock<std::mutex> lock(e.mu);
        e.cv.wait(lock, [&] { return e.stopping || e.total || e.handed_out - e.taken < max_jobs; });
        if (e.stopping || e.total) return;
        job = e.handed_out++;
        try {
          auto next = next_indices();
          if (!next) {
            e.total = job;
            e.cv.notify_all();
            return;
          }
          indices = std::move(*next);
        } catch (...) {  // the sampler's error ends the epoch, after the batches before it
          e.ready.emplace(job, std::make_pair(std::nullopt, std::current_exception()));
          e.total = job + 1;
          e.cv.notify_all();
          return;
        }
      }
      std::optional<BatchType> batch;
      std::exception_ptr error;
      try {
        batch = dataset.get_batch(std::move(indices));
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(e.mu);
      e.ready.emplace(job, std::make_pair(std::move(batch), error));
      e.cv.notify_all();
    }
  }

  std::optional<BatchType> next(size_t epoch) {
    if (!epoch_ || epoch != epochs_) return {};  // an iterator of an epoch that was ended
    if (workers_.empty()) {
      auto indices = next_indices();
      if (!indices) return {};
      return dataset_.get_batch(std::move(*indices));
    }
    Epoch& e = *epoch_;
    std::unique_lock<std::mutex> lock(e.mu);
    auto available = [&] {
      if (e.broken || (e.total && e.taken == *e.total)) return true;
      if (e.ready.empty()) return false;
      return !options_.enforce_ordering() || e.ready.begin()->first == e.taken;
    };
    if (options_.timeout()) {
      TANDEM_CHECK(e.cv.wait_for(lock, *options_.timeout(), available), "DataLoader: no batch ",
                   "within the timeout of ", options_.timeout()->count(), " ms");
    } else {
      e.cv.wait(lock, available);
    }
    if (e.broken) std::rethrow_exception(e.broken);
    if (e.total && e.taken == *e.total) return {};
    auto node = e.ready.extract(e.ready.begin());
    ++e.taken;
    e.cv.notify_all();
    lock.unlock();
    if (node.mapped().second) std::rethrow_exception(node.mapped().second);
    return std::move(node.mapped().first);
  }

  void stop() {
    if (epoch_) {
      std::lock_guard<std::mutex> lock(epoch_->mu);
      epoch_->stopping = true;
      epoch_->cv.notify_all();
    }
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  Dataset dataset_;
  Sampler sampler_;
  DataLoaderOptions options_;
  std::vector<Dataset> worker_datasets_;
  std::unique_ptr<Epoch> epoch_;
  size_t epochs_ = 0;
  std::vector<std::thread> workers_;
};

/// A loader over `dataset` (whose size must be known) with a Sampler of that size: random order
/// by default, as libtorch's.
template <typename Sampler = samplers::RandomSampler, typename Dataset>
std::unique_ptr<StatelessDataLoader<Dataset, Sampler>> make_data_loader(
    Dataset dataset, DataLoaderOptions options = {}) {
  const std::optional<size_t> size = dataset.size();
  TANDEM_CHECK(size.has_value(), "make_data_loader: the dataset's size() is unknown; pass a "
                                 "sampler of your own");
  Sampler sampler(*size);
  return std::make_unique<StatelessDataLoader<Dataset, Sampler>>(
      std::move(dataset), std::move(sampler), std::move(options));
}

template <typename Sampler = samplers::RandomSampler, typename Dataset>
std::unique_ptr<StatelessDataLoader<Dataset, Sampler>> make_data_loader(Dataset dataset,
                                                                        size_t batch_size) {
  return make_data_loader<Sampler>(std::move(dataset), DataLoaderOptions(batch_size));
}

template <typename Dataset, typename Sampler,
          typename = std::enable_if_t<std::is_base_of_v<samplers::Sampler<>, Sampler>>>
std::unique_ptr<StatelessDataLoader<Dataset, Sampler>> make_data_loader(
    Dataset dataset, Sampler sampler, DataLoaderOptions options = {}) {
  return std::make_unique<StatelessDataLoader<Dataset, Sampler>>(
      std::move(dataset), std::move(sampler), std::move(options));
}

}  // namespace tandem::data
