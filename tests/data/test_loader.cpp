// The distributed sampler, the data loader (workers, prefetch, resume, errors), the transforms
// against closed forms, the synthetic dataset and the CIFAR-10 reader on small files.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "../util.hpp"

using namespace tandem;
using namespace tandem::data;
using tandem::testing::error_of;
using tandem::testing::TempDir;

namespace {

std::shared_ptr<ImageDataset> numbered(int64_t n) {
  // Image i is filled with the value i; its label is i % 10.
  Tensor images = empty({n, 1, 2, 2});
  Tensor labels = empty({n}, DType::i64);
  for (int64_t i = 0; i < n; ++i) {
    images.select(0, i).fill_(static_cast<double>(i));
    labels.data_ptr<int64_t>()[i] = i % 10;
  }
  return std::make_shared<TensorDataset>(images, labels, 10);
}

std::vector<std::vector<float>> epoch_batches(DataLoader& loader, int64_t epoch, int64_t start = 0) {
  std::vector<std::vector<float>> out;
  loader.start_epoch(epoch, start);
  while (auto b = loader.next()) out.push_back(b->images.to_vector<float>());
  return out;
}

class Failing : public ImageDataset {
 public:
  int64_t size() const override { return 20; }
  Shape sample_shape() const override { return {1, 1, 1}; }
  int64_t num_classes() const override { return 2; }
  int64_t get(int64_t index, float* out) const override {
    TANDEM_CHECK(index != 13, "sample 13 is unreadable");
    *out = static_cast<float>(index);
    return 0;
  }
};


}  // namespace

TEST_CASE("DistributedSampler splits an epoch evenly and reproducibly", "[data]") {
  const int64_t n = 10, world = 3;
  std::multiset<int64_t> seen;
  for (int64_t r = 0; r < world; ++r) {
    DistributedSampler s(n, r, world, true, 42);
    s.set_epoch(5);
    auto idx = s.indices();
    CHECK(idx.size() == 4);  // ceil(10 / 3): two indices are repeated as padding
    CHECK(idx != DistributedSampler(n, r, world, true, 42).indices());  // epoch 0 differs
    seen.insert(idx.begin(), idx.end());
  }
  CHECK(seen.size() == 12);
  // Every rank runs the same number of batches, so no rank waits on a collective alone.
  auto ds = numbered(n);
  for (int64_t r = 0; r < world; ++r)
    CHECK(DataLoader(ds, DistributedSampler(n, r, world), LoaderOptions().batch_size(3))
              .num_batches() == 2);
  for (int64_t i = 0; i < n; ++i) CHECK(seen.count(i) >= 1);

  DistributedSampler a(n, 0, 1, true, 42), b(n, 0, 1, true, 42);
  a.set_epoch(3);
  b.set_epoch(3);
  CHECK(a.indices() == b.indices());
  DistributedSampler plain(n, 1, 3, false, 0, true);
  CHECK(plain.indices() == std::vector<int64_t>{1, 4, 7});  // drop_last: 9 of 10, no shuffle
  CHECK_THAT(error_of([] { DistributedSampler(10, 3, 3); }),
             Catch::Contains("rank 3 is not in [0, world = 3)"));
}

TEST_CASE("DataLoader yields every sample once, the same with and without workers", "[data]") {
  auto ds = numbered(23);
  DataLoader sync(ds, DistributedSampler(23, 0, 1, true, 7), LoaderOptions().batch_size(5).workers(0));
  DataLoader threaded(ds, DistributedSampler(23, 0, 1, true, 7),
                      LoaderOptions().batch_size(5).workers(3).prefetch(2));
  CHECK(sync.num_batches() == 5);
  auto a = epoch_batches(sync, 1), b = epoch_batches(threaded, 1);
  CHECK(a == b);
  std::multiset<float> values;
  for (const auto& batch : a)
    for (size_t i = 0; i < batch.size(); i += 4) values.insert(batch[i]);
  CHECK(values.size() == 23);
  CHECK(std::set<float>(values.begin(), values.end()).size() == 23);
  CHECK(a.back().size() == 3 * 4);  // the last, partial batch
  CHECK(epoch_batches(sync, 2) != a);  // another epoch, another order

  // Resuming mid-epoch gives the rest of the same epoch.
  auto tail = epoch_batches(threaded, 1, 3);
  CHECK(tail == std::vector<std::vector<float>>(a.begin() + 3, a.end()));
  // Abandoning an epoch part-way and starting another is fine.
  threaded.start_epoch(4);
  threaded.next();
  CHECK(epoch_batches(threaded, 1) == a);

  DataLoader dropping(ds, DistributedSampler(23, 0, 1), LoaderOptions().batch_size(5).drop_last(true));
  CHECK(dropping.num_batches() == 4);
  CHECK(epoch_batches(dropping, 0).size() == 4);
  CHECK_THAT(error_of([&] { DataLoader(ds, DistributedSampler(23), LoaderOptions().batch_size(0)); }),
             Catch::Contains("batch size must be positive, got 0"));
}

TEST_CASE("a worker's exception is rethrown on the caller's thread", "[data][errors]") {
  DataLoader loader(std::make_shared<Failing>(), DistributedSampler(20, 0, 1, false),
                    LoaderOptions().batch_size(4).workers(2));
  loader.start_epoch(0);
  for (int i = 0; i < 3; ++i) CHECK(loader.next().has_value());  // samples 0..11
  CHECK_THAT(error_of([&] { loader.next(); }), Catch::Contains("sample 13 is unreadable"));
}

namespace {
// Records the execution context each sample's transform ran under.
struct ContextProbe : Transform {
  mutable std::mutex mu;
  mutable std::set<const ExecutionContext*> contexts;
  mutable std::set<int> pool_sizes;
  mutable std::set<bool> grad_modes;
  void apply(float*, const Shape&, const SampleKey&) const override {
    std::lock_guard<std::mutex> lock(mu);
    contexts.insert(&current_context());
    pool_sizes.insert(get_num_threads());
    grad_modes.insert(current_context().grad_mode());
  }
};
}  // namespace

TEST_CASE("loader workers compute under a one-thread context of their own", "[data][context]") {
  auto probe = std::make_shared<ContextProbe>();
  // Inside a rank with a 2-thread pool: the workers must not use (or share) that pool.
  ExecutionContext rank(kCPU, std::make_shared<ThreadPool>(2));
  ContextGuard guard(rank);
  DataLoader loader(numbered(24), DistributedSampler(24, 0, 1, false),
                    LoaderOptions().batch_size(4).workers(2), {probe});
  loader.start_epoch(0);
  int batches = 0;
  while (loader.next()) ++batches;
  CHECK(batches == 6);
  CHECK(probe->pool_sizes == std::set<int>{1});
  CHECK(probe->grad_modes == std::set<bool>{false});
  CHECK(probe->contexts.size() <= 2);
  CHECK(probe->contexts.count(&rank) == 0);
  CHECK(probe->contexts.count(&default_context()) == 0);
  // Without workers the caller's thread builds the batches, under the caller's context.
  auto inline_probe = std::make_shared<ContextProbe>();
  DataLoader inline_loader(numbered(8), DistributedSampler(8, 0, 1, false),
                           LoaderOptions().batch_size(4).workers(0), {inline_probe});
  inline_loader.start_epoch(0);
  while (inline_loader.next()) {
  }
  CHECK(inline_probe->contexts == std::set<const ExecutionContext*>{&rank});
  CHECK(inline_probe->pool_sizes == std::set<int>{2});
}

TEST_CASE("transforms match their closed forms and depend only on (seed, epoch, index)",
          "[data]") {
  const Shape chw{2, 5, 6};
  std::vector<float> img(60);
  for (int i = 0; i < 60; ++i) img[i] = static_cast<float>(i + 1);
  auto at = [&](const std::vector<float>& v, int c, int y, int x) { return v[(c * 5 + y) * 6 + x]; };

  RandomHorizontalFlip always(1.0), never(0.0);
  auto f = img;
  always.apply(f.data(), chw, {});
  CHECK(at(f, 1, 2, 0) == at(img, 1, 2, 5));
  f = img;
  never.apply(f.data(), chw, {});
  CHECK(f == img);

  RandomCrop crop(2);
  std::set<std::pair<int, int>> shifts;
  for (int64_t index = 0; index < 200; ++index) {
    auto c = img;
    crop.apply(c.data(), chw, {3, 1, index});
    auto again = img;
    crop.apply(again.data(), chw, {3, 1, index});
    REQUIRE(c == again);
    // Find the shift (dy, dx) in [-2, 2]^2 that explains every pixel: shifted or zero padding.
    int found = 0;
    for (int dy = -2; dy <= 2; ++dy)
      for (int dx = -2; dx <= 2; ++dx) {
        bool ok = true;
        for (int ch = 0; ch < 2 && ok; ++ch)
          for (int y = 0; y < 5 && ok; ++y)
            for (int x = 0; x < 6 && ok; ++x) {
              int sy = y + dy, sx = x + dx;
              float want = sy >= 0 && sy < 5 && sx >= 0 && sx < 6 ? at(img, ch, sy, sx) : 0.0f;
              ok = at(c, ch, y, x) == want;
            }
        if (ok) {
          ++found;
          shifts.insert({dy, dx});
        }
      }
    REQUIRE(found == 1);
  }
  CHECK(shifts.size() == 25);  // every window position occurs

  int flips = 0;
  RandomHorizontalFlip half;
  for (int64_t index = 0; index < 1000; ++index) {
    auto c = img;
    half.apply(c.data(), chw, {9, 2, index});
    flips += c != img;
  }
  CHECK(flips > 430);
  CHECK(flips < 570);

  Normalize norm({1.0f, 2.0f}, {0.5f, 4.0f});
  auto n = img;
  norm.apply(n.data(), chw, {});
  CHECK(at(n, 0, 1, 1) == Approx((at(img, 0, 1, 1) - 1.0) / 0.5));
  CHECK(at(n, 1, 4, 5) == Approx((at(img, 1, 4, 5) - 2.0) / 4.0));
  CHECK_THAT(error_of([] { Normalize({0.5f}, {0.0f}); }), Catch::Contains("std must be positive"));
}

TEST_CASE("SyntheticDataset is a pure function of (seed, index)", "[data]") {
  SyntheticDataset a(1000, {3, 8, 8}, 10, 5), b(1000, {3, 8, 8}, 10, 5), c(1000, {3, 8, 8}, 10, 6);
  std::vector<float> x(192), y(192), z(192);
  std::set<int64_t> labels;
  for (int64_t i = 0; i < 1000; i += 7) {
    int64_t la = a.get(i, x.data());
    CHECK(la == b.get(i, y.data()));
    CHECK(x == y);
    c.get(i, z.data());
    CHECK(x != z);
    labels.insert(la);
    for (float v : x) REQUIRE((v >= 0.0f && v < 1.0f));
  }
  CHECK(labels.size() == 10);
  CHECK_THAT(error_of([&] { a.get(1000, x.data()); }), Catch::Contains("index 1000 out of range"));
}

TEST_CASE("the CIFAR-10 reader reads records and names bad files", "[data][errors]") {
  TempDir dir;
  auto write = [&](const std::string& name, const std::vector<int>& labels, size_t extra = 0) {
    std::ofstream out(dir.path / name, std::ios::binary);
    for (int label : labels) {
      out.put(static_cast<char>(label));
      for (int p = 0; p < 3072; ++p) out.put(static_cast<char>((p + label) & 0xff));
    }
    for (size_t i = 0; i < extra; ++i) out.put(0);
  };
  const std::string d = dir.path.string();
  write("test_batch.bin", {3, 9});
  ImageSplit test = load_cifar10(d, false);
  CHECK(test.images.shape() == Shape{2, 3, 32, 32});
  CHECK(test.labels.to_vector<int64_t>() == std::vector<int64_t>{3, 9});
  // Pixel p of record 1 is (p + 9) & 0xff; channel 1, row 0, column 2 is p = 1024 + 2.
  CHECK(test.images.select(0, 1).select(0, 1).select(0, 0).select(0, 2).item<int>() == ((1024 + 2 + 9) & 0xff));

  CHECK_THAT(error_of([&] { load_cifar10(d, true); }),
             Catch::Contains("cannot open " + d + "/data_batch_1.bin"));
  for (int i = 1; i <= 5; ++i) write("data_batch_" + std::to_string(i) + ".bin", {i});
  CHECK(load_cifar10(d, true).labels.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4, 5});
  write("data_batch_2.bin", {1}, 100);
  CHECK_THAT(error_of([&] { load_cifar10(d, true); }),
             Catch::Contains(d + "/data_batch_2.bin is truncated or not a CIFAR-10 batch: 3173 bytes"));
  write("test_batch.bin", {3, 200});
  CHECK_THAT(error_of([&] { load_cifar10(d, false); }),
             Catch::Contains("test_batch.bin is corrupt: record 1 has label 200"));
  CHECK_THAT(error_of([] { load_cifar10("/nonexistent", false); }),
             Catch::Contains("folder /nonexistent not found"));
}

TEST_CASE("Fashion-MNIST as bytes gives the dataset the same floats in a quarter of the memory",
          "[data]") {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz")) {
    WARN("Debian's dataset-fashion-mnist is not installed; skipped");
    return;
  }
  MnistSplit as_f32 = load_mnist(kFashionMnistDir, false);
  MnistSplit as_u8 = load_mnist(kFashionMnistDir, false, DType::u8);
  REQUIRE(as_u8.images.dtype() == DType::u8);
  CHECK(as_u8.images.shape() == as_f32.images.shape());
  CHECK(as_u8.images.numel() * as_u8.images.element_size() * 4 ==
        as_f32.images.numel() * as_f32.images.element_size());
  CHECK(equal(as_u8.labels, as_f32.labels));
  TensorDataset f32_set(as_f32.images, as_f32.labels, 10), u8_set(as_u8.images, as_u8.labels, 10);
  std::vector<float> a(28 * 28), b(28 * 28);
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{4999}, int64_t{9999}}) {
    INFO("sample " << i);
    CHECK(f32_set.get(i, a.data()) == u8_set.get(i, b.data()));
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
  CHECK_THROWS_AS(load_mnist(kFashionMnistDir, false, DType::f16), ValueError);
}

namespace {
// u8 images (n, 3, 5, 7) of distinct pixel values and labels i % 10.
std::shared_ptr<ImageDataset> byte_images(int64_t n) {
  Tensor images = empty({n, 3, 5, 7}, DType::u8);
  uint8_t* p = images.data_ptr<uint8_t>();
  for (int64_t i = 0; i < images.numel(); ++i) p[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  Tensor labels = empty({n}, DType::i64);
  for (int64_t i = 0; i < n; ++i) labels.data_ptr<int64_t>()[i] = i % 10;
  return std::make_shared<TensorDataset>(images, labels, 10);
}

std::vector<std::pair<std::vector<float>, std::vector<int64_t>>> all_batches(DataLoader& loader,
                                                                             int64_t epoch) {
  std::vector<std::pair<std::vector<float>, std::vector<int64_t>>> out;
  loader.start_epoch(epoch);
  while (auto b = loader.next()) {
    CHECK(b->images.dtype() == DType::f32);
    CHECK_FALSE(b->augment.defined());
    out.emplace_back(b->images.cpu().to_vector<float>(), b->labels.cpu().to_vector<int64_t>());
  }
  return out;
}
}  // namespace

TEST_CASE("augment_on_device gives the host transforms' images bit for bit", "[data]") {
  auto data = byte_images(37);
  const std::vector<float> mean{0.3f, 0.5f, 0.7f}, std{0.2f, 0.25f, 0.3f};
  for (int64_t workers : {0, 2}) {
    const auto options = LoaderOptions().batch_size(8).workers(workers).seed(5);
    DataLoader host(data, DistributedSampler(data->size(), 0, 1, true, 3), options,
                    {std::make_shared<RandomCrop>(2), std::make_shared<RandomHorizontalFlip>(),
                     std::make_shared<Normalize>(mean, std)});
    DataLoader device(data, DistributedSampler(data->size(), 0, 1, true, 3),
                      LoaderOptions(options).augment_on_device(
                          DeviceAugment().crop_padding(2).flip_p(0.5).mean(mean).std(std)));
    for (int64_t epoch : {0, 1}) {
      const auto want = all_batches(host, epoch), got = all_batches(device, epoch);
      REQUIRE(got.size() == want.size());
      for (size_t b = 0; b < got.size(); ++b) {
        CHECK(got[b].second == want[b].second);
        REQUIRE(got[b].first.size() == want[b].first.size());
        CHECK(std::memcmp(got[b].first.data(), want[b].first.data(),
                          got[b].first.size() * sizeof(float)) == 0);
      }
    }
  }
  // Some samples of the epoch were shifted and some flipped: the comparison saw both cases.
  int shifted = 0, flipped = 0;
  for (int64_t i = 0; i < data->size(); ++i) {
    const SampleKey key{5, 0, i};
    shifted += RandomCrop::offset(key, 2) != std::pair<int64_t, int64_t>{0, 0};
    flipped += RandomHorizontalFlip::flips(key, 0.5);
  }
  CHECK(shifted > 20);
  CHECK(flipped > 5);
  CHECK(flipped < 32);
}

TEST_CASE("crop_flip_normalize against its closed form, bad augment_on_device setups are refused",
          "[data][errors]") {
  // One 1x3x4 image, shifted right by one (dx = -1) and flipped: out[y][x] = in[y][2 - x]
  // shifted, i.e. in[y][(3 - x) - 1] with column -1 padded.
  Tensor img = from_vector(std::vector<uint8_t>{0, 51, 102, 153, 204, 255, 0, 51, 102, 153, 204, 255},
                           {1, 1, 3, 4});
  Tensor params = from_vector(std::vector<int32_t>{0, -1, 1}, {1, 3});
  const auto out = crop_flip_normalize(img, params, {0.5f}, {0.5f}).to_vector<float>();
  for (int64_t y = 0; y < 3; ++y)
    for (int64_t x = 0; x < 4; ++x) {
      const int64_t sx = 3 - x - 1;
      const float v = sx >= 0 ? img.data_ptr<uint8_t>()[y * 4 + sx] * (1.0f / 255.0f) : 0.0f;
      CHECK(out[y * 4 + x] == (v - 0.5f) * (1.0f / 0.5f));
    }
  CHECK_THAT(error_of([&] { crop_flip_normalize(img.to(DType::f32), params, {0.5f}, {0.5f}); }),
             Catch::Contains("images must be u8 (B, C, H, W), got f32"));
  CHECK_THAT(error_of([&] { crop_flip_normalize(img, params.to(DType::i64), {0.5f}, {0.5f}); }),
             Catch::Contains("params must be i32 (1, 3), got i64"));
  CHECK_THAT(error_of([&] { crop_flip_normalize(img, params, {0.5f, 0.1f}, {0.5f, 1.0f}); }),
             Catch::Contains("need one mean and one std per channel (1), got 2 and 2"));

  auto bytes = byte_images(4);
  const auto augment = DeviceAugment().crop_padding(1).flip_p(0.5).mean({0, 0, 0}).std({1, 1, 1});
  CHECK_THAT(error_of([&] {
               DataLoader(bytes, DistributedSampler(4), LoaderOptions().augment_on_device(augment),
                          {std::make_shared<RandomHorizontalFlip>()});
             }),
             Catch::Contains("give one or the other, not both"));
  CHECK_THAT(error_of([&] {
               DataLoader(numbered(4), DistributedSampler(4), LoaderOptions().augment_on_device(
                   DeviceAugment().mean({0}).std({1})));
             }),
             Catch::Contains("needs a dataset of u8 images"));
  CHECK_THAT(error_of([&] {
               DataLoader(bytes, DistributedSampler(4), LoaderOptions().augment_on_device(
                   DeviceAugment().mean({0}).std({1})));
             }),
             Catch::Contains("one mean and one std per channel (3), got 1 and 1"));
  CHECK_THAT(error_of([&] { numbered(4)->get_bytes(0, nullptr); }),
             Catch::Contains("images are f32, not u8 bytes"));
}

TEST_CASE("an empty dataset gives epochs of no batches, a batch larger than the dataset one "
          "batch (none with drop_last)", "[data]") {
  DataLoader empty_loader(numbered(0), DistributedSampler(0), LoaderOptions().batch_size(4));
  CHECK(empty_loader.num_batches() == 0);
  CHECK(epoch_batches(empty_loader, 0).empty());
  DataLoader one(numbered(3), DistributedSampler(3, 0, 1, false), LoaderOptions().batch_size(8));
  CHECK(epoch_batches(one, 0) ==
        std::vector<std::vector<float>>{{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}});  // images 0-2
  DataLoader none(numbered(3), DistributedSampler(3), LoaderOptions().batch_size(8).drop_last(true));
  CHECK(none.num_batches() == 0);
  CHECK(epoch_batches(none, 0).empty());
}
