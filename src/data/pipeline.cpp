// The non-template parts of libtorch's data API (data/pipeline.hpp): the MNIST dataset and the
// samplers.
#include "tandem/data/pipeline.hpp"

#include <numeric>

#include "tandem/autograd/grad_mode.hpp"
#include "tandem/data/idx.hpp"

namespace tandem::data {

namespace datasets {

MNIST::MNIST(const std::string& root, Mode mode) : train_(mode == Mode::kTrain) {
  MnistSplit split = load_mnist(root, train_);
  images_ = split.images;
  targets_ = split.labels;
}

Example<> MNIST::get(size_t index) {
  TANDEM_CHECK_INDEX(index < static_cast<size_t>(images_.size(0)), "MNIST: index ", index,
                     " is out of range for ", images_.size(0), " images");
  const auto i = static_cast<int64_t>(index);
  return {images_.select(0, i), targets_.select(0, i)};
}

std::optional<size_t> MNIST::size() const { return static_cast<size_t>(images_.size(0)); }

}  // namespace datasets

namespace samplers {

namespace {
// The indices [index, index + batch_size) of `order` (fewer at its end), none past it.
std::optional<std::vector<size_t>> take(size_t& index, size_t size, size_t batch_size,
                                        const std::vector<size_t>* order) {
  if (index >= size) return std::nullopt;
  const size_t n = std::min(batch_size, size - index);
  std::vector<size_t> batch(n);
  for (size_t k = 0; k < n; ++k) batch[k] = order ? (*order)[index + k] : index + k;
  index += n;
  return batch;
}
}  // namespace

void SequentialSampler::reset(std::optional<size_t> new_size) {
  if (new_size) size_ = *new_size;
  index_ = 0;
}

std::optional<std::vector<size_t>> SequentialSampler::next(size_t batch_size) {
  return take(index_, size_, batch_size, nullptr);
}

RandomSampler::RandomSampler(int64_t size) {
  TANDEM_CHECK(size >= 0, "RandomSampler: size must not be negative, got ", size);
  reset(static_cast<size_t>(size));
}

void RandomSampler::reset(std::optional<size_t> new_size) {
  order_.resize(new_size.value_or(order_.size()));
  std::iota(order_.begin(), order_.end(), size_t{0});
  // Fisher-Yates, each swap drawn from the default generator.
  const size_t n = order_.size();
  if (n > 1) {
    NoGradGuard no_grad;
    const std::vector<double> u = rand({static_cast<int64_t>(n)}, DType::f64).to_vector<double>();
    for (size_t i = n - 1; i > 0; --i)
      std::swap(order_[i], order_[std::min(i, static_cast<size_t>(u[i] * static_cast<double>(i + 1)))]);
  }
  index_ = 0;
}

std::optional<std::vector<size_t>> RandomSampler::next(size_t batch_size) {
  return take(index_, order_.size(), batch_size, &order_);
}

}  // namespace samplers

}  // namespace tandem::data
