// libtorch's data API (data/pipeline.hpp): datasets subclassed as in libtorch, map() chains,
// the samplers, and loaders with and without worker threads, which must hand out the same
// batches, pass an exception on and never wait forever.
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "../util.hpp"

using namespace tandem;
using tandem::testing::error_of;

namespace {

// Sample i: data (2) = {i, -i}, target i; as a libtorch user writes a dataset.
class Numbers : public data::datasets::Dataset<Numbers> {
 public:
  explicit Numbers(size_t n, int sleep_ms = 0, int64_t fail_at = -1)
      : n_(n), sleep_ms_(sleep_ms), fail_at_(fail_at) {}
  data::Example<> get(size_t index) override {
    if (sleep_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    TANDEM_CHECK(static_cast<int64_t>(index) != fail_at_, "Numbers: sample ", index, " is broken");
    const double v = static_cast<double>(index);
    return {from_vector<double>({v, -v}), scalar_tensor(v, DType::i64)};
  }
  optional<size_t> size() const override { return n_; }

 private:
  size_t n_;
  int sleep_ms_;
  int64_t fail_at_;
};

using Stacked = data::transforms::Stack<>;

// The targets of each batch of one epoch, in the order the loader gave them.
template <typename Loader>
std::vector<std::vector<int64_t>> epoch_targets(Loader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& batch : loader) out.push_back(batch.target.template to_vector<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("a dataset, mapped and stacked, in sequential batches, and drop_last leaving the short one out",
          "[data][pipeline]") {
  auto dataset = Numbers(10)
                     .map(data::transforms::Lambda<data::Example<>>([](data::Example<> e) {
                       e.data = e.data * 2.0;
                       return e;
                     }))
                     .map(Stacked());
  REQUIRE(dataset.size().value() == 10);
  auto loader = data::make_data_loader<data::samplers::SequentialSampler>(dataset, 4);
  size_t seen = 0;
  for (auto& batch : *loader) {
    REQUIRE(batch.data.shape() == Shape{static_cast<int64_t>(batch.target.numel()), 2});
    const auto t = batch.target.to_vector<int64_t>();
    const auto d = batch.data.to_vector<double>();
    for (size_t k = 0; k < t.size(); ++k) {
      CHECK(t[k] == static_cast<int64_t>(seen + k));
      CHECK(d[2 * k] == 2.0 * t[k]);
      CHECK(d[2 * k + 1] == -2.0 * t[k]);
    }
    seen += t.size();
  }
  CHECK(seen == 10);
  CHECK(epoch_targets(*loader) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});
  auto dropping = data::make_data_loader<data::samplers::SequentialSampler>(
      dataset, data::DataLoaderOptions(4).drop_last(true));
  CHECK(epoch_targets(*dropping).size() == 2);
  // Without Stack, a batch is the vector of examples.
  auto unstacked = data::make_data_loader<data::samplers::SequentialSampler>(Numbers(5), 3);
  std::vector<size_t> sizes;
  for (auto& batch : *unstacked) sizes.push_back(batch.size());
  CHECK(sizes == std::vector<size_t>{3, 2});
}

TEST_CASE("RandomSampler: every index once an epoch, a new order each epoch, repeatable by seed",
          "[data][pipeline]") {
  auto orders = [] {
    manual_seed(11);
    data::samplers::RandomSampler sampler(50);
    std::vector<std::vector<size_t>> epochs;
    for (int e = 0; e < 2; ++e) {
      sampler.reset();
      std::vector<size_t> order;
      while (auto batch = sampler.next(7)) {
        CHECK(batch->size() == std::min<size_t>(7, 50 - order.size()));
        order.insert(order.end(), batch->begin(), batch->end());
      }
      CHECK(std::set<size_t>(order.begin(), order.end()).size() == 50);
      epochs.push_back(order);
    }
    return epochs;
  };
  auto a = orders(), b = orders();
  CHECK(a == b);
  CHECK(a[0] != a[1]);
  std::vector<size_t> identity(50);
  for (size_t i = 0; i < 50; ++i) identity[i] = i;
  CHECK(a[0] != identity);
  // make_data_loader's default sampler is the random one, as libtorch's.
  auto loader = data::make_data_loader(Numbers(20).map(Stacked()), 20);
  auto targets = epoch_targets(*loader);
  REQUIRE(targets.size() == 1);
  CHECK(std::set<int64_t>(targets[0].begin(), targets[0].end()).size() == 20);
}

TEST_CASE("loader workers build the same batches, ordered or as they come", "[data][pipeline]") {
  auto dataset = Numbers(37).map(Stacked());
  auto serial = data::make_data_loader<data::samplers::SequentialSampler>(dataset, 5);
  const auto expected = epoch_targets(*serial);
  REQUIRE(expected.size() == 8);
  for (size_t workers : {1, 2, 3}) {
    INFO(workers << " workers");
    auto loader = data::make_data_loader<data::samplers::SequentialSampler>(
        dataset, data::DataLoaderOptions(5).workers(workers).max_jobs(2));
    CHECK(epoch_targets(*loader) == expected);
    CHECK(epoch_targets(*loader) == expected);  // a second epoch
    auto unordered = data::make_data_loader<data::samplers::SequentialSampler>(
        dataset, data::DataLoaderOptions(5).workers(workers).enforce_ordering(false));
    auto got = epoch_targets(*unordered);
    std::sort(got.begin(), got.end());
    CHECK(got == expected);
  }
  // An epoch left halfway, then a new one: the first one's workers stop and its iterator ends.
  auto loader = data::make_data_loader<data::samplers::SequentialSampler>(
      dataset, data::DataLoaderOptions(5).workers(2));
  auto it = loader->begin();
  CHECK(it->target.to_vector<int64_t>() == expected[0]);
  ++it;
  CHECK(epoch_targets(*loader) == expected);
  ++it;
  CHECK(it == loader->end());
  // drop_last with workers leaves out the short batch too.
  auto dropping = data::make_data_loader<data::samplers::SequentialSampler>(
      dataset, data::DataLoaderOptions(5).workers(2).drop_last(true));
  CHECK(epoch_targets(*dropping) ==
        std::vector<std::vector<int64_t>>(expected.begin(), expected.end() - 1));
}

namespace {
// A dataset with state its get() changes (a cursor, as a file reader keeps): each worker has a
// copy of its own, as in libtorch, so workers never share one (ThreadSanitizer watches this).
class Cursor : public data::Dataset<Cursor> {  // libtorch's torch::data::Dataset<Self> spelling
 public:
  static std::atomic<int> copies;
  Cursor() = default;
  Cursor(const Cursor& other) : reads_(other.reads_) { ++copies; }
  Cursor(Cursor&&) = default;
  data::Example<> get(size_t index) override {
    ++reads_;
    return {scalar_tensor(static_cast<double>(reads_)), scalar_tensor(index, DType::i64)};
  }
  optional<size_t> size() const override { return 24; }

 private:
  int64_t reads_ = 0;
};
std::atomic<int> Cursor::copies{0};
}  // namespace

TEST_CASE("each loader worker reads its own copy of the dataset, and TensorLambda maps the data",
          "[data][pipeline]") {
  Cursor::copies = 0;
  auto loader = data::make_data_loader<data::samplers::SequentialSampler>(
      Cursor()
          .map(data::transforms::TensorLambda<>([](Tensor t) { return t * 10.0; }))
          .map(data::transforms::Stack<>()),
      data::DataLoaderOptions(4).workers(2));
  CHECK(Cursor::copies == 2);  // one per worker, made with the loader
  for (int epoch = 0; epoch < 2; ++epoch) {
    int64_t total = 0, count = 0;
    for (auto& batch : *loader) {
      // Within a worker's copy, reads count up.
      const auto reads = batch.data.to_vector<double>();
      for (size_t k = 1; k < reads.size(); ++k) CHECK(reads[k] == reads[k - 1] + 10.0);
      for (int64_t t : batch.target.to_vector<int64_t>()) total += t;
      count += batch.target.numel();
    }
    CHECK(count == 24);
    CHECK(total == 23 * 24 / 2);
  }
  CHECK(Cursor::copies == 2);  // and kept: a worker's dataset keeps its state across epochs
}

TEST_CASE("a failing sample and a slow one reach the loop as errors, with and without workers",
          "[data][pipeline]") {
  for (size_t workers : {0, 2}) {
    INFO(workers << " workers");
    auto broken = data::make_data_loader<data::samplers::SequentialSampler>(
        Numbers(20, 0, /*fail_at=*/13).map(Stacked()), data::DataLoaderOptions(4).workers(workers));
    size_t batches = 0;
    CHECK_THAT(error_of([&] {
                 for (auto& batch : *broken) {
                   (void)batch;
                   ++batches;
                 }
               }),
               Catch::Contains("Numbers: sample 13 is broken"));
    CHECK(batches == 3);  // samples 0-11 came through first
  }
  // A sampler that throws hands its error to the loop, after the batches before it.
  struct Failing : data::samplers::SequentialSampler {
    using SequentialSampler::SequentialSampler;
    optional<std::vector<size_t>> next(size_t batch_size) override {
      auto batch = SequentialSampler::next(batch_size);
      TANDEM_CHECK(!batch || batch->front() < 8, "Failing: no samples past 8");
      return batch;
    }
  };
  for (size_t workers : {0, 2}) {
    INFO(workers << " workers");
    auto loader = data::make_data_loader(Numbers(20).map(Stacked()), Failing(20),
                                         data::DataLoaderOptions(4).workers(workers));
    size_t batches = 0;
    CHECK_THAT(error_of([&] {
                 for (auto& batch : *loader) {
                   (void)batch;
                   ++batches;
                 }
               }),
               Catch::Contains("Failing: no samples past 8"));
    CHECK(batches == 2);
  }
  auto slow = data::make_data_loader<data::samplers::SequentialSampler>(
      Numbers(4, /*sleep_ms=*/300).map(Stacked()),
      data::DataLoaderOptions(2).workers(1).timeout(std::chrono::milliseconds(50)));
  CHECK_THAT(error_of([&] { epoch_targets(*slow); }),
             Catch::Contains("DataLoader: no batch within the timeout of 50 ms"));
  // An unknown size needs a sampler of one's own.
  struct Endless : data::datasets::Dataset<Endless> {
    data::Example<> get(size_t) override { return {}; }
    optional<size_t> size() const override { return std::nullopt; }
  };
  CHECK_THAT(error_of([] { data::make_data_loader(Endless(), 4); }),
             Catch::Contains("the dataset's size() is unknown"));
  CHECK_THAT(error_of([] { data::make_data_loader(Numbers(3), data::DataLoaderOptions(0)); }),
             Catch::Contains("batch_size must be positive"));
}

TEST_CASE("Normalize per channel, MNIST from IDX files as libtorch reads them", "[data][pipeline]") {
  data::transforms::Normalize<> norm({1.0, 2.0}, {0.5, 4.0});
  Tensor x = ones({2, 1, 2});
  CHECK(norm(x).to_vector<float>() == std::vector<float>{0, 0, -0.25f, -0.25f});
  CHECK_THAT(error_of([] { data::transforms::Normalize<>({1.0, 2.0}, {1.0}); }),
             Catch::Contains("2 means but 1 standard deviations"));

  tandem::testing::TempDir root;
  tandem::testing::write_mnist_files(root.path, 30, 20);
  data::datasets::MNIST train(root.path.string());
  data::datasets::MNIST test(root.path.string(), data::datasets::MNIST::Mode::kTest);
  CHECK(train.is_train());
  CHECK(!test.is_train());
  CHECK(train.size().value() == 30);
  CHECK(test.size().value() == 20);
  auto e = train.get(13);
  CHECK(e.data.shape() == Shape{1, 28, 28});
  CHECK(e.data.dtype() == DType::f32);
  CHECK(e.target.item<int64_t>() == 3);
  // Class 3's square: rows 2..7, columns 17..22, bright; the rest dim.
  CHECK(e.data.narrow(1, 2, 6).narrow(2, 17, 6).min().item<float>() >= 195.0f / 255.0f);
  CHECK(e.data.max().item<float>() <= 1.0f);
  CHECK_THROWS_AS(train.get(30), IndexError);
  CHECK_THROWS(data::datasets::MNIST((root.path / "missing").string()));
}
