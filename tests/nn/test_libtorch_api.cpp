// Code written as a libtorch user writes it compiles here with one change, `namespace torch =
// tandem;`, and means what it means there: dtype and device names, Reduction::Sum, the Tensor
// methods, the factories, the layers, Adam. Each is checked against a closed form or against
// the functional op it forwards to; the new ops' values and gradients against PyTorch's are in
// tests/ops/test_golden.cpp, Adam's in tests/optim/test_optim.cpp.
#include <algorithm>
#include <numeric>
#include <set>
#include <sstream>

#include "../util.hpp"

namespace torch = tandem;
using tandem::DType;
using tandem::Shape;
using tandem::testing::require_close;

namespace {

std::vector<bool> bools(const torch::Tensor& t) {
  REQUIRE(t.dtype() == torch::kBool);
  return t.to_vector<bool>();
}

// The network of libtorch's MNIST example (pytorch/examples, cpp/mnist), its forward unchanged;
// the layers are held by shared_ptrs, as tandem's modules are (no holder classes).
struct Net : torch::nn::Module {
  Net() {
    conv1 = register_module("conv1", std::make_shared<torch::nn::Conv2d>(
                                         torch::nn::Conv2dOptions(1, 10, /*kernel_size=*/5)));
    conv2 = register_module("conv2", std::make_shared<torch::nn::Conv2d>(
                                         torch::nn::Conv2dOptions(10, 20, /*kernel_size=*/5)));
    conv2_drop = register_module("conv2_drop", std::make_shared<torch::nn::Dropout2d>());
    fc1 = register_module("fc1", std::make_shared<torch::nn::Linear>(320, 50));
    fc2 = register_module("fc2", std::make_shared<torch::nn::Linear>(50, 10));
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    torch::Tensor x = input;
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 320});
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, /*p=*/0.5, /*training=*/is_training());
    x = fc2->forward(x);
    return torch::log_softmax(x, /*dim=*/1);
  }

  std::shared_ptr<torch::nn::Conv2d> conv1, conv2;
  std::shared_ptr<torch::nn::Dropout2d> conv2_drop;
  std::shared_ptr<torch::nn::Linear> fc1, fc2;
};

// The MNIST example's train() and test(), as written there (its log interval and printing
// aside): they take any torch::data loader.
template <typename DataLoader>
void train(size_t epoch, Net& model, torch::Device device, DataLoader& data_loader,
           torch::optim::Optimizer& optimizer, size_t dataset_size) {
  model.train();
  size_t batch_idx = 0;
  for (auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    optimizer.zero_grad();
    auto output = model.forward(data);
    auto loss = torch::nll_loss(output, targets);
    REQUIRE(!std::isnan(loss.template item<float>()));
    loss.backward();
    optimizer.step();
    batch_idx++;
  }
  INFO("epoch " << epoch << ": " << batch_idx << " batches of " << dataset_size << " images");
  CHECK(batch_idx == (dataset_size + 63) / 64);
}

template <typename DataLoader>
double test(Net& model, torch::Device device, DataLoader& data_loader, size_t dataset_size) {
  torch::NoGradGuard no_grad;
  model.eval();
  double test_loss = 0;
  int32_t correct = 0;
  for (const auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    auto output = model.forward(data);
    test_loss += torch::nll_loss(output, targets, /*weight=*/{}, torch::Reduction::Sum)
                     .template item<float>();
    auto pred = output.argmax(1);
    correct += pred.eq(targets).sum().template item<int64_t>();
  }
  test_loss /= dataset_size;
  INFO("test loss " << test_loss);
  return static_cast<double>(correct) / dataset_size;
}

}  // namespace

TEST_CASE("libtorch names: dtypes, devices and reductions", "[libtorch]") {
  static_assert(torch::kFloat32 == DType::f32 && torch::kFloat == DType::f32);
  static_assert(torch::kFloat64 == DType::f64 && torch::kDouble == DType::f64);
  static_assert(torch::kFloat16 == DType::f16 && torch::kHalf == DType::f16);
  static_assert(torch::kBFloat16 == DType::bf16);
  static_assert(torch::kInt64 == DType::i64 && torch::kLong == DType::i64);
  static_assert(torch::kInt32 == DType::i32 && torch::kInt == DType::i32);
  static_assert(torch::kUInt8 == DType::u8 && torch::kByte == DType::u8);
  static_assert(torch::kBool == DType::boolean);

  CHECK(torch::Device(torch::kCUDA, 1).str() == "cuda:1");
  CHECK(torch::Device(torch::kCUDA) == torch::Device("cuda:0"));
  torch::Device device = torch::kCPU;
  CHECK(device.is_cpu());
  torch::DeviceType type = torch::kCUDA;
  CHECK(torch::Device(type, 0).is_cuda());

  auto x = torch::zeros({2, 3}, torch::kFloat64);
  CHECK(x.scalar_type() == torch::kDouble);
  CHECK(torch::ones({2}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCPU)).dtype() ==
        DType::i64);
  CHECK(torch::empty({2}, torch::kCPU).device() == torch::Device("cpu"));
  CHECK(x.to(torch::kCPU).is_same(x));
  CHECK(x.to(torch::kHalf).dtype() == DType::f16);

  CHECK(torch::Reduction::Sum == torch::Reduction::sum);
  CHECK(torch::Reduction::Mean == torch::Reduction::mean);
  CHECK(torch::Reduction::None == torch::Reduction::none);
}

TEST_CASE("libtorch names: Tensor methods compute what their closed forms say", "[libtorch]") {
  auto a = torch::arange(12, torch::kFloat).reshape({3, 4});  // rows 0..3, 4..7, 8..11
  CHECK(a.sum(1).to_vector<float>() == std::vector<float>{6, 22, 38});
  CHECK(a.sum(1, /*keepdim=*/true).sizes() == Shape{3, 1});
  CHECK(a.sum({}).item<float>() == 66);  // {} is every dim, never dim 0
  CHECK(a.mean({}, true).sizes() == Shape{1, 1});
  CHECK(a.sum({1}).to_vector<float>() == a.sum(1).to_vector<float>());
  CHECK(a.mean(0, true).to_vector<float>() == std::vector<float>{4, 5, 6, 7});
  CHECK(a.max().item<float>() == 11);
  CHECK(a.min().item<float>() == 0);
  auto [values, indices] = a.neg().max(1);
  CHECK(values.to_vector<float>() == std::vector<float>{0, -4, -8});
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0});
  CHECK(std::get<1>(a.min(0)).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 0});
  CHECK(a.argmin(1).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0});
  // Each row is 4 consecutive numbers: unbiased variance 5/3, biased 5/4.
  require_close(a.var({1}), torch::full({3}, 5.0 / 3.0), 1e-6, 0, "var");
  require_close(a.std({1}), torch::full({3}, std::sqrt(5.0 / 3.0)), 1e-6, 0, "std");
  require_close(a.std({1}, /*unbiased=*/false), torch::full({3}, std::sqrt(1.25)), 1e-6, 0, "std");
  CHECK(a.norm().item<float>() == Approx(std::sqrt(506.0)));  // sum of k^2, k < 12
  CHECK(a.square().sum().item<float>() == 506);
  CHECK(a.clamp(2, 5).to_vector<float>()[0] == 2);
  CHECK(a.clamp(2, 5).to_vector<float>()[11] == 5);
  CHECK(a.clamp(std::nullopt, 3).max().item<float>() == 3);
  CHECK(torch::equal(a.add(1).sub(1).mul(2).div(2), a));
  CHECK(torch::equal(a.add(a, 2).sub(a).div(a.add(1)), a.mul(2).div(a.add(1))));
  CHECK(torch::equal(a.mm(a.t()), torch::matmul(a, a.t())));
  CHECK(torch::equal(a.softmax(1), torch::softmax(a, 1)));
  CHECK(torch::equal(a.log_softmax(0), torch::log_softmax(a, 0)));
  CHECK(torch::equal(a.sigmoid(), torch::sigmoid(a)));
  CHECK(torch::equal(a.tanh(), torch::tanh(a)));
}

TEST_CASE("libtorch names: norm's gradient is x / norm, and zero at zero", "[libtorch]") {
  auto x = torch::tensor({3.0, -4.0}, torch::kDouble).requires_grad_();
  x.norm().backward();
  require_close(x.grad(), torch::tensor({0.6, -0.8}, torch::kDouble), 1e-15, 0, "norm gradient");
  auto z = torch::zeros({3}, torch::TensorOptions(torch::kDouble).requires_grad(true));
  z.norm().backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
}

TEST_CASE("libtorch names: comparisons give bool tensors, a number compares as torch's",
          "[libtorch]") {
  auto t = torch::tensor({1.0, 2.0, 3.0});
  CHECK(bools(t > 1.5) == std::vector<bool>{false, true, true});
  CHECK(bools(t >= 2) == std::vector<bool>{false, true, true});
  CHECK(bools(t < 2) == std::vector<bool>{true, false, false});
  CHECK(bools(t <= 2) == std::vector<bool>{true, true, false});
  CHECK(bools(t == 2) == std::vector<bool>{false, true, false});
  CHECK(bools(t != 2) == std::vector<bool>{true, false, true});
  CHECK(bools(t.gt(torch::tensor({0.0, 2.0, 4.0}))) == std::vector<bool>{true, false, false});
  // An integer tensor against a fraction compares in f64 (2 < 2.5), not against a truncated 2.
  auto i = torch::tensor({1, 2, 3});
  CHECK(i.dtype() == torch::kLong);
  CHECK(bools(i < 2.5) == std::vector<bool>{true, true, false});
  CHECK(bools(i.eq(2)) == std::vector<bool>{false, true, false});
  // A half tensor compares in its own precision: 0.1 rounds to the same f16 value on both sides.
  CHECK(bools(torch::tensor({0.1}, torch::kHalf) == 0.1) == std::vector<bool>{true});
  // Counting matches, as the MNIST example does.
  CHECK((t > 1.5).sum().item<int64_t>() == 2);
  CHECK(i.eq(torch::tensor({1, 0, 3})).sum().item<int64_t>() == 2);
  // The free forms with a number, masks combined with & | ^ ~, and the logical ops.
  CHECK(bools(torch::gt(t, 1.5)) == std::vector<bool>{false, true, true});
  CHECK(bools(torch::le(i, 2)) == std::vector<bool>{true, true, false});
  CHECK(bools((t > 1.5) & (t < 2.5)) == std::vector<bool>{false, true, false});
  CHECK(bools((t < 1.5) | (t > 2.5)) == std::vector<bool>{true, false, true});
  CHECK(bools(~(t > 1.5)) == std::vector<bool>{true, false, false});
  CHECK(bools(torch::logical_and(t > 1.5, i.ne(3))) == std::vector<bool>{false, true, false});
  CHECK(bools((t > 1.5).logical_xor(i > 1)) == std::vector<bool>{false, false, false});
  CHECK((i & torch::tensor({3, 3, 3})).sum().item<int64_t>() == 1 + 2 + 3);
  // torch::str, as error messages and logs build their text.
  CHECK(torch::str("step ", 3, ": loss ", 0.5) == "step 3: loss 0.5");
}

TEST_CASE("libtorch names: masked_fill", "[libtorch]") {
  auto x = torch::tensor({1.0, -2.0, 3.0, -4.0}, torch::kDouble).requires_grad_();
  auto y = x.masked_fill(x < 0, 0.5);
  CHECK(y.to_vector<double>() == std::vector<double>{1, 0.5, 3, 0.5});
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0, 1, 0});
  // A row mask broadcasts; a float mask, or one that does not broadcast, is refused.
  auto m = torch::zeros({2, 3}).masked_fill(torch::tensor({true, false, true}), -1);
  CHECK(m.to_vector<float>() == std::vector<float>{-1, 0, -1, -1, 0, -1});
  CHECK_THROWS_WITH(x.masked_fill(x, 0), Catch::Contains("must be bool"));
  CHECK_THROWS_WITH(x.masked_fill(torch::tensor({true, false}), 0),
                    Catch::Contains("cannot be broadcast"));
}

TEST_CASE("libtorch names: in-place sub_, div_, uniform_ and normal_", "[libtorch]") {
  auto t = torch::tensor({2.0, 4.0});
  t.sub_(1);
  CHECK(t.to_vector<float>() == std::vector<float>{1, 3});
  t.div_(2);
  CHECK(t.to_vector<float>() == std::vector<float>{0.5, 1.5});
  t.sub_(torch::tensor({0.5, 0.5}), 2);
  CHECK(t.to_vector<float>() == std::vector<float>{-0.5, 0.5});
  t.div_(torch::tensor({-0.5, 2.0}));
  CHECK(t.to_vector<float>() == std::vector<float>{1, 0.25});

  torch::Generator gen(7);
  auto u = torch::empty({20000}).uniform_(-2, 3, &gen);
  CHECK(u.min().item<float>() >= -2);
  CHECK(u.max().item<float>() < 3);
  CHECK(u.mean().item<float>() == Approx(0.5).margin(0.05));  // sigma of the mean 0.01
  auto n = torch::empty({20000}, torch::kDouble).normal_(1, 2, &gen);
  CHECK(n.mean().item<double>() == Approx(1).margin(0.06));  // sigma of the mean 0.014
  CHECK(n.std().item<double>() == Approx(2).margin(0.06));
  // The same numbers as rand from the same generator state.
  torch::Generator g1(11), g2(11);
  CHECK(torch::equal(torch::empty({5}).uniform_(0, 1, &g1), torch::rand({5}, {}, &g2)));

  auto leaf = torch::zeros({2}, torch::TensorOptions().requires_grad(true));
  CHECK_THROWS_WITH(leaf.uniform_(), Catch::Contains("requires grad"));
  CHECK_THROWS_WITH(torch::empty({2}).uniform_(1, 0), Catch::Contains("from <= to"));
}

TEST_CASE("libtorch names: tensor, eye, linspace and arange(start, end)", "[libtorch]") {
  // Nested lists are matrices, as torch::tensor({{...}, {...}}).
  auto m = torch::tensor({{1.5, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  CHECK(m.sizes() == Shape{2, 3});
  CHECK(m.dtype() == torch::kFloat32);
  CHECK(m.to_vector<float>() == std::vector<float>{1.5, 2, 3, 4, 5, 6});
  auto mi = torch::tensor({{1, 2}, {3, 4}});
  CHECK(mi.dtype() == torch::kLong);
  CHECK(mi.select(1, 1).to_vector<int64_t>() == std::vector<int64_t>{2, 4});
  CHECK(torch::tensor({{1, 2}}, torch::kFloat64).dtype() == torch::kFloat64);
  CHECK_THROWS_WITH(torch::tensor({{1.0, 2.0}, {3.0}}),
                    Catch::Contains("row 1 has 1 values, row 0 has 2"));
  auto f = torch::tensor({1.5, 2.0});
  CHECK((f.dtype() == torch::kFloat && f.sizes() == Shape{2}));
  CHECK(torch::tensor({7.0}).sizes() == Shape{1});  // a list of one is 1-D, as torch.tensor([7.])
  CHECK(torch::tensor({1, 2, 3}).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
  CHECK(torch::tensor({int64_t{1} << 40}).item<int64_t>() == int64_t{1} << 40);
  CHECK(torch::tensor({true, false}).dtype() == torch::kBool);
  CHECK(torch::tensor({1, 2}, torch::kFloat).to_vector<float>() == std::vector<float>{1, 2});
  CHECK(torch::tensor({1.0}, torch::TensorOptions().requires_grad(true)).requires_grad());

  CHECK(torch::eye(3).to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(torch::eye(2, 3, torch::kLong).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 0, 0, 0, 1, 0});
  CHECK(torch::linspace(0, 1, 5).to_vector<float>() ==
        std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1});
  CHECK(torch::linspace(-1, 1, 1).to_vector<float>() == std::vector<float>{-1});
  CHECK(torch::linspace(0, 1, 0).numel() == 0);
  auto l = torch::linspace(0.1, 0.7, 7, torch::kDouble).to_vector<double>();
  CHECK((l.front() == 0.1 && l.back() == 0.7));  // both ends exact
  CHECK(torch::arange(2, 5).to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4});
  // A device alone leaves the dtype to each factory, as torch's: i64 for integers...
  CHECK(torch::tensor({1, 2}, torch::kCPU).dtype() == torch::kLong);
  CHECK(torch::tensor({true}, torch::TensorOptions().device(torch::kCPU)).dtype() == torch::kBool);
  CHECK(torch::arange(3, torch::kCPU).dtype() == torch::kLong);
  CHECK(torch::randint(0, 5, {3}, torch::kCPU).dtype() == torch::kLong);
  CHECK(torch::zeros({2}, torch::kCPU).dtype() == torch::kFloat);
  // ... and torch's float for a range that is not whole.
  CHECK(torch::arange(0.5, 3.0).to_vector<float>() == std::vector<float>{0.5, 1.5, 2.5});
  // f32 values computed in f32, as torch's: torch.linspace(0.3, 2.9, 33)[:5].
  CHECK(torch::linspace(0.3, 2.9, 33).slice(0, 0, 5).to_vector<double>() ==
        std::vector<double>{0.30000001192092896, 0.3812500238418579, 0.46250003576278687,
                            0.5437500476837158, 0.625});
  static_assert(!std::is_convertible_v<bool, torch::indexing::TensorIndex>,
                "x.index({true}) means x[True] in libtorch, not x[1]");
  CHECK_THROWS_WITH(torch::linspace(0, 1, -1), Catch::Contains("steps must be >= 0"));
  CHECK_THROWS_WITH(torch::eye(-1), Catch::Contains("sizes must be >= 0"));
}

TEST_CASE("libtorch names: dropout2d zeroes whole channels and scales the rest",
          "[libtorch]") {
  torch::Generator gen(3);
  auto x = torch::ones({8, 16, 3, 3}, torch::TensorOptions().requires_grad(true));
  auto y = torch::dropout2d(x, 0.25, /*training=*/true, &gen);
  auto v = y.to_vector<float>();
  int zero_channels = 0;
  for (int c = 0; c < 8 * 16; ++c) {
    const float first = v[c * 9];
    CHECK((first == 0.0f || first == Approx(1 / 0.75f)));
    for (int k = 1; k < 9; ++k) REQUIRE(v[c * 9 + k] == first);  // one draw per channel
    zero_channels += first == 0.0f;
  }
  // 128 channels at p = 0.25: 32 expected, sigma 4.9.
  CHECK(zero_channels >= 12);
  CHECK(zero_channels <= 52);
  y.sum().backward();
  CHECK(torch::equal(x.grad(), y.detach()));  // d(sum)/dx = mask / (1 - p) = y for x = 1

  CHECK(torch::dropout2d(x, 0.5, /*training=*/false).is_same(x));
  CHECK(torch::dropout2d(x.detach(), 1.0).sum().item<float>() == 0);
  torch::nn::Dropout2d layer(torch::nn::DropoutOptions().p(0.5));
  layer.eval();
  CHECK(layer.forward(x).is_same(x));
  CHECK_THROWS_WITH(torch::dropout2d(torch::ones({4}), 0.5), Catch::Contains("(N, C, ...)"));
  CHECK_THROWS_WITH(torch::nn::Dropout2d(1.5), Catch::Contains("must be in [0, 1]"));
}

TEST_CASE("libtorch names: layers forward to their functional ops", "[libtorch]") {
  auto x = torch::randn({4, 5});
  torch::nn::LeakyReLU leaky(torch::nn::LeakyReLUOptions().negative_slope(0.2));
  CHECK(torch::equal(leaky.forward(x), torch::leaky_relu(x, 0.2)));
  CHECK(torch::equal(torch::nn::LeakyReLU().forward(x), torch::leaky_relu(x)));
  CHECK(torch::equal(torch::nn::Sigmoid().forward(x), x.sigmoid()));
  CHECK(torch::equal(torch::nn::Tanh().forward(x), x.tanh()));
  CHECK(torch::equal(torch::nn::Softmax(1).forward(x), x.softmax(1)));
  CHECK(torch::equal(torch::nn::LogSoftmax(torch::nn::LogSoftmaxOptions(0)).forward(x),
                     x.log_softmax(0)));
  CHECK(torch::nn::Dropout(0.3).p == 0.3);
  CHECK(torch::nn::Dropout(torch::nn::DropoutOptions().p(0.2)).p == 0.2);
  std::ostringstream os;
  os << leaky << " " << torch::nn::Softmax(1);
  CHECK(os.str() == "LeakyReLU(negative_slope=0.2) Softmax(dim=1)");
  auto seq = torch::nn::Sequential(std::make_shared<torch::nn::Linear>(5, 3),
                                   std::make_shared<torch::nn::LeakyReLU>(),
                                   std::make_shared<torch::nn::Tanh>());
  CHECK(seq.forward(x).sizes() == Shape{4, 3});
}

TEST_CASE("libtorch names: nll_loss with libtorch's weight argument", "[libtorch]") {
  auto logp = torch::log_softmax(torch::randn({6, 4}), 1);
  auto target = torch::tensor({0, 3, 1, 1, 2, 0});
  // `{}` is no weight, not Reduction::none: the mean.
  CHECK(torch::equal(torch::nll_loss(logp, target, {}), torch::nll_loss(logp, target)));
  CHECK(torch::nll_loss(logp, target, {}).dim() == 0);
  // `/*weight=*/{}` is the unweighted loss, as the MNIST example writes its test loss.
  CHECK(torch::equal(torch::nll_loss(logp, target, /*weight=*/{}, torch::Reduction::Sum),
                     torch::nll_loss(logp, target, torch::Reduction::Sum)));
  // All-equal weights give the unweighted mean (the weights cancel).
  require_close(torch::nll_loss(logp, target, torch::full({4}, 2.5)), torch::nll_loss(logp, target),
                1e-6, 0, "nll_loss weight 2.5");
  CHECK_THROWS_WITH(torch::nll_loss(logp, target, torch::ones({3})),
                    Catch::Contains("one value per class"));
}

TEST_CASE("libtorch names: binary_cross_entropy refuses what is not a probability",
          "[libtorch]") {
  auto target = torch::tensor({0.0, 1.0});
  CHECK_THROWS_WITH(torch::binary_cross_entropy(torch::tensor({0.5, 1.5}), target),
                    Catch::Contains("probability in [0, 1]"));
  CHECK_THROWS_WITH(
      torch::binary_cross_entropy(torch::tensor({0.5, std::nan("")}), target),
      Catch::Contains("probability in [0, 1]"));
  // 0 and 1 are probabilities: the log is clamped at -100 and the input gradient's divisor at
  // 1e-12, as torch's. PyTorch 1.13 gives, for x (1, 0, 0.5) and target (0, 1, 0.25): loss
  // 66.89771270751953, x.grad (333333331968, -333333331968, 0.3333333432674408), target.grad
  // (-inf, inf, 0).
  auto x = torch::tensor({1.0, 0.0, 0.5}).requires_grad_();
  auto t = torch::tensor({0.0, 1.0, 0.25}).requires_grad_();
  auto loss = torch::binary_cross_entropy(x, t);
  CHECK(loss.item<float>() == Approx(66.89771270751953));
  loss.backward();
  require_close(x.grad(), torch::tensor({333333331968.0, -333333331968.0, 0.3333333432674408}),
                1e-6, 0, "bce input gradient");
  auto tg = t.grad().to_vector<float>();
  CHECK((std::isinf(tg[0]) && tg[0] < 0 && std::isinf(tg[1]) && tg[1] > 0 && tg[2] == 0));
  CHECK_THROWS_WITH(torch::l1_loss(torch::ones({2}), torch::ones({3})),
                    Catch::Contains("must have the same shape"));
}

TEST_CASE("libtorch names: Adam's options and state", "[libtorch]") {
  auto model = std::make_shared<torch::nn::Linear>(3, 2);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(2e-4).betas(
                                                   std::make_tuple(0.5, 0.5)));
  CHECK(static_cast<const torch::optim::AdamOptions&>(adam.defaults()).betas() ==
        std::make_tuple(0.5, 0.5));
  CHECK(static_cast<const torch::optim::AdamOptions&>(adam.defaults()).weight_decay() ==
        0);  // torch.optim.Adam's default, AdamW's is 1e-2
  CHECK(static_cast<const torch::optim::AdamOptions&>(adam.defaults()).eps() == 1e-8);
  CHECK(torch::optim::AdamWOptions().weight_decay() == 1e-2);
  CHECK_THROWS_WITH(torch::optim::Adam(model->parameters(), torch::optim::AdamOptions().betas(1, 0)),
                    Catch::Contains("Adam: betas must be in [0, 1)"));

  // Two steps, a state dict, a third step: the same as three steps without the round trip.
  auto x = torch::randn({4, 3}), y = torch::randn({4, 2});
  auto twin = std::make_shared<torch::nn::Linear>(3, 2);
  twin->load_state_dict(model->state_dict());
  torch::optim::Adam a(model->parameters(), torch::optim::AdamOptions(0.1).weight_decay(0.01));
  torch::optim::Adam b(twin->parameters(), torch::optim::AdamOptions(0.1).weight_decay(0.01));
  auto step = [&](torch::optim::Adam& opt, torch::nn::Linear& m) {
    opt.zero_grad();
    torch::mse_loss(m.forward(x), y).backward();
    opt.step();
  };
  for (int k = 0; k < 2; ++k) step(a, *model), step(b, *twin);
  torch::optim::Adam resumed(twin->parameters(), torch::optim::AdamOptions(0.1).weight_decay(0.01));
  resumed.load_state_dict(b.state_dict());
  CHECK(resumed.state_dict().contains("state.0.exp_avg_sq"));
  step(a, *model);
  step(resumed, *twin);
  CHECK(torch::equal(model->weight, twin->weight));
  CHECK(torch::equal(model->bias, twin->bias));

  // clip_grad_norm_ under libtorch's name.
  auto p = torch::tensor({3.0, 4.0}, torch::TensorOptions().requires_grad(true));
  (p * p).sum().backward();  // gradient (6, 8), norm 10
  CHECK(torch::nn::utils::clip_grad_norm_({p}, 5.0) == Approx(10));
  require_close(p.grad(), torch::tensor({3.0, 4.0}), 1e-5, 0, "clipped gradient");
}

TEST_CASE("libtorch names: param_groups, per-group options and add_param_group", "[libtorch]") {
  namespace optim = torch::optim;
  auto x = torch::randn({6, 3}), y = torch::randn({6, 2});
  auto loss_of = [&](torch::nn::Linear& m) { return torch::mse_loss(m.forward(x), y); };
  // Two layers in two groups, the second with options of its own; each group must move as an
  // optimizer of its own with those options would move it.
  auto a = std::make_shared<torch::nn::Linear>(3, 2), b = std::make_shared<torch::nn::Linear>(3, 2);
  auto a_alone = std::make_shared<torch::nn::Linear>(3, 2);
  auto b_alone = std::make_shared<torch::nn::Linear>(3, 2);
  a_alone->load_state_dict(a->state_dict());
  b_alone->load_state_dict(b->state_dict());
  std::vector<optim::OptimizerParamGroup> groups{
      optim::OptimizerParamGroup(a->parameters()),
      optim::OptimizerParamGroup(b->parameters(),
                                 std::make_unique<optim::SGDOptions>(
                                     optim::SGDOptions(0.05).momentum(0.5).nesterov(true)))};
  optim::SGD both(groups, optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD only_a(a_alone->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD only_b(b_alone->parameters(), optim::SGDOptions(0.05).momentum(0.5).nesterov(true));
  REQUIRE(both.param_groups().size() == 2);
  CHECK(both.param_groups()[1].options().get_lr() == 0.05);
  CHECK(static_cast<optim::SGDOptions&>(both.param_groups()[1].options()).nesterov());
  CHECK(groups[1].options().get_lr() == 0.05);  // the optimizer holds copies
  // The rate changed as libtorch users change it, between steps.
  for (int step = 0; step < 3; ++step) {
    if (step == 2) {
      for (auto& group : both.param_groups())
        if (group.has_options())
          static_cast<optim::SGDOptions&>(group.options()).lr(group.options().get_lr() / 2);
      static_cast<optim::SGDOptions&>(only_a.param_groups()[0].options()).lr(0.05);
      only_b.param_groups()[0].options().set_lr(0.025);
    }
    both.zero_grad(), only_a.zero_grad(), only_b.zero_grad();
    (loss_of(*a) + loss_of(*b)).backward();
    loss_of(*a_alone).backward();
    loss_of(*b_alone).backward();
    both.step(), only_a.step(), only_b.step();
  }
  require_close(a->weight, a_alone->weight, 1e-6, 1e-7, "group 0 (the defaults)");
  require_close(b->weight, b_alone->weight, 1e-6, 1e-7, "group 1 (its own options)");
  require_close(b->bias, b_alone->bias, 1e-6, 1e-7, "group 1's bias");
  CHECK_FALSE(torch::allclose(a->weight, b->weight));

  // add_param_group: a new layer joins with the defaults, its state starts empty, and the
  // state dict numbers its parameters after the others'.
  auto c = std::make_shared<torch::nn::Linear>(3, 2);
  auto c_alone = std::make_shared<torch::nn::Linear>(3, 2);
  c_alone->load_state_dict(c->state_dict());
  both.add_param_group(optim::OptimizerParamGroup(c->parameters()));
  optim::SGD only_c(c_alone->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  REQUIRE(both.param_groups().size() == 3);
  CHECK(both.param_groups()[2].options().get_lr() == 0.1);
  for (int step = 0; step < 2; ++step) {
    both.zero_grad(), only_c.zero_grad();
    loss_of(*c).backward();
    loss_of(*c_alone).backward();
    both.step(), only_c.step();
  }
  require_close(c->weight, c_alone->weight, 1e-6, 1e-7, "the added group");
  CHECK(both.state_dict().contains("state.4.momentum_buffer"));  // c's weight, after a's and b's
  CHECK(both.state_dict().contains("group.2.lr"));

  // What is refused leaves the optimizer as it was.
  CHECK_THROWS_WITH(both.add_param_group(optim::OptimizerParamGroup({a->weight})),
                    Catch::Contains("some parameters appear in more than one parameter group"));
  CHECK_THROWS_WITH(
      both.add_param_group(optim::OptimizerParamGroup(torch::nn::Linear(2, 2).parameters(),
                                                      std::make_unique<optim::AdamOptions>(0.1))),
      Catch::Contains("SGD: a parameter group's options must be SGDOptions"));
  CHECK_THROWS_WITH(
      both.add_param_group(optim::OptimizerParamGroup(
          torch::nn::Linear(2, 2).parameters(),
          std::make_unique<optim::SGDOptions>(optim::SGDOptions(0.1).nesterov(true)))),
      Catch::Contains("Nesterov momentum requires a momentum > 0"));
  CHECK(both.param_groups().size() == 3);
  CHECK_THROWS_WITH(optim::OptimizerParamGroup({x}).options(), Catch::Contains("has no options"));
  // Adam's groups take AdamOptions, each with its own betas.
  optim::Adam adam(
      std::vector<optim::OptimizerParamGroup>{
          optim::OptimizerParamGroup(a->parameters()),
          optim::OptimizerParamGroup(
              b->parameters(),
              std::make_unique<optim::AdamOptions>(optim::AdamOptions(0.01).betas({0.5, 0.9})))},
      optim::AdamOptions(0.001));
  CHECK(static_cast<optim::AdamOptions&>(adam.param_groups()[1].options()).betas() ==
        std::make_tuple(0.5, 0.9));
  CHECK(adam.param_groups()[1].options().get_momentum() == 0.5);
  CHECK(adam.param_groups()[0].options().get_lr() == 0.001);
  b_alone->load_state_dict(b->state_dict());
  optim::Adam adam_b(b_alone->parameters(), optim::AdamOptions(0.01).betas({0.5, 0.9}));
  for (int step = 0; step < 3; ++step) {
    adam.zero_grad(), adam_b.zero_grad();
    (loss_of(*a) + loss_of(*b)).backward();
    loss_of(*b_alone).backward();
    adam.step(), adam_b.step();
  }
  require_close(b->weight, b_alone->weight, 1e-6, 1e-7, "Adam's group with its own betas");
}

TEST_CASE("libtorch names: LSTM, GRU and RNN modules", "[libtorch]") {
  // Parameters named, shaped and ordered as torch's, so state dicts move between the two.
  auto lstm = std::make_shared<torch::nn::LSTM>(
      torch::nn::LSTMOptions(3, 5).num_layers(2).batch_first(true).bidirectional(true));
  std::vector<std::string> names;
  for (const auto& item : lstm->named_parameters()) names.push_back(item.key());
  CHECK(names == std::vector<std::string>{
                     "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                     "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                     "bias_hh_l0_reverse", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1",
                     "bias_hh_l1", "weight_ih_l1_reverse", "weight_hh_l1_reverse",
                     "bias_ih_l1_reverse", "bias_hh_l1_reverse"});
  CHECK(lstm->named_parameters()["weight_ih_l1"].shape() == Shape{20, 10});  // 4H x 2H
  CHECK(lstm->named_parameters()["weight_hh_l0_reverse"].shape() == Shape{20, 5});
  for (const auto& w : lstm->parameters())  // torch's init: U(-1/sqrt(H), 1/sqrt(H))
    CHECK(w.abs().max().item<double>() <= 1 / std::sqrt(5.0));

  // libtorch's call forms; the states' layout: the last layer's forward state is the output at
  // the last step, its reverse state the output at the first.
  auto x = torch::randn({2, 7, 3});  // (N, T, features), batch_first
  auto [out, state] = lstm->forward(x);
  auto [h, c] = state;
  CHECK(out.shape() == Shape{2, 7, 10});
  CHECK(h.shape() == Shape{4, 2, 5});
  CHECK(c.shape() == Shape{4, 2, 5});
  require_close(out.select(1, 6).narrow(1, 0, 5), h[2], 1e-6, 0, "forward state");
  require_close(out.select(1, 0).narrow(1, 5, 5), h[3], 1e-6, 0, "reverse state");
  // Given states continue the sequence: two halves in a row give the whole (one direction).
  auto uni = std::make_shared<torch::nn::LSTM>(torch::nn::LSTMOptions(3, 4).num_layers(2));
  auto seq = torch::randn({6, 2, 3});
  auto whole = uni->forward(seq);
  auto first = uni->forward(seq.narrow(0, 0, 4));
  auto second = uni->forward(seq.narrow(0, 4, 2), std::get<1>(first));
  require_close(std::get<0>(second), std::get<0>(whole).narrow(0, 4, 2), 1e-5, 1e-6,
                "second half from the first half's states");
  require_close(std::get<1>(std::get<1>(second)), std::get<1>(std::get<1>(whole)), 1e-5, 1e-6,
                "c_n");

  auto gru = std::make_shared<torch::nn::GRU>(torch::nn::GRUOptions(3, 4));
  auto rnn =
      std::make_shared<torch::nn::RNN>(torch::nn::RNNOptions(3, 4).nonlinearity(torch::kReLU));
  CHECK(gru->named_parameters()["weight_ih_l0"].shape() == Shape{12, 3});
  auto [rnn_out, rnn_h] = rnn->forward(seq);
  CHECK(rnn_out.min().item<float>() >= 0);  // relu
  require_close(rnn_out[5], rnn_h[0], 1e-6, 0, "RNN state");

  // What is refused says why.
  CHECK_THROWS_WITH(gru->forward(torch::randn({6, 2, 5})),
                    Catch::Contains("gru: the input has 5 features (its last dim), the first "
                                    "layer's weights take 3"));
  CHECK_THROWS_WITH(
      gru->forward(seq, torch::zeros({2, 2, 4})),
      Catch::Contains("gru: expected hidden state h0 of shape (1, 2, 4), got (2, 2, 4)"));
  CHECK_THROWS_WITH(gru->forward(seq, torch::zeros({1, 2, 4}, torch::kFloat64)),
                    Catch::Contains("gru: expected hidden state h0 in the input's dtype and device "
                                    "(f32 on cpu), got f64 on cpu"));
  CHECK_THROWS_WITH(torch::nn::RNN(torch::nn::RNNOptions(3, 4).nonlinearity("sigmoid")),
                    Catch::Contains("nonlinearity must be \"tanh\" or \"relu\""));
  CHECK_THROWS_WITH(torch::nn::LSTM(torch::nn::LSTMOptions(3, 0)),
                    Catch::Contains("input_size and hidden_size must be positive"));

  // A GRU learns to recall the sign of a sequence's first element after seven noisy steps: the
  // gradient reaches back through every step.
  torch::manual_seed(3);
  auto memory = std::make_shared<torch::nn::GRU>(torch::nn::GRUOptions(1, 8).batch_first(true));
  auto head = std::make_shared<torch::nn::Linear>(8, 1);
  std::vector<torch::Tensor> params = memory->parameters();
  for (const auto& p : head->parameters()) params.push_back(p);
  torch::optim::Adam adam(params, torch::optim::AdamOptions(0.03));
  auto batch = [] {
    auto s = torch::randn({32, 8, 1}) * 0.3;
    auto sign = (torch::rand({32, 1}) > 0.5).to(torch::kFloat) * 2 - 1;
    s.select(1, 0).copy_(sign);
    return std::make_pair(s, sign);
  };
  auto loss_at = [&](const torch::Tensor& s, const torch::Tensor& y) {
    auto [o, hn] = memory->forward(s);
    return torch::mse_loss(head->forward(o.select(1, 7)), y);
  };
  auto [s0, y0] = batch();
  const double before = loss_at(s0, y0).item<double>();
  for (int step = 0; step < 150; ++step) {
    auto [s, y] = batch();
    adam.zero_grad();
    loss_at(s, y).backward();
    adam.step();
  }
  const double after = loss_at(s0, y0).item<double>();
  INFO("loss " << before << " -> " << after);
  CHECK(after < 0.1 * before);
}

TEST_CASE("libtorch names: chunk, split, unbind, repeat, flip, interpolate and Upsample",
          "[libtorch]") {
  namespace F = torch::nn::functional;
  auto x = torch::arange(12).reshape({3, 4}).to(torch::kFloat);
  auto pieces = x.chunk(3, 1);  // ceil(4 / 3) = 2 columns a piece: two pieces, as torch
  REQUIRE(pieces.size() == 2);
  CHECK(pieces[1].shape() == Shape{3, 2});
  CHECK(pieces[1].storage().is_same(x.storage()));  // views
  CHECK(x.split(3, 1).size() == 2);
  CHECK(x.split(3, 1)[1].shape() == Shape{3, 1});
  CHECK(x.unbind(0)[2].to_vector<float>() == std::vector<float>{8, 9, 10, 11});
  CHECK(x.repeat({2, 1, 2}).shape() == Shape{2, 3, 8});
  CHECK(x.flip({1})[0].to_vector<float>() == std::vector<float>{3, 2, 1, 0});
  CHECK(x.view_as(torch::zeros({4, 3})).shape() == Shape{4, 3});
  CHECK(torch::zeros({0, 2}).chunk(3).size() == 1);  // an empty dim: one empty piece
  CHECK_THROWS_WITH(x.chunk(0), Catch::Contains("chunk: chunks must be greater than 0, got 0"));
  CHECK_THROWS_WITH(
      x.split_with_sizes({1, 1}, 0),
      Catch::Contains("split sizes must sum to 3 (the input's size at dim 0), got (1, 1)"));
  CHECK_THROWS_WITH(x.repeat({2}), Catch::Contains("repeat: 1 repeats for a tensor of 2 dims"));
  CHECK_THROWS_WITH(x.flip({1, -1}), Catch::Contains("flip: dim 1 appears more than once"));

  // Nearest by 2 repeats each pixel in a 2x2 block; bilinear with align_corners keeps the
  // corners and puts the midpoints between them.
  auto img = torch::arange(4).reshape({1, 1, 2, 2}).to(torch::kFloat);
  auto up = torch::nn::Upsample(
      torch::nn::UpsampleOptions().scale_factor(std::vector<double>({2, 2})).mode(torch::kNearest));
  CHECK(up.forward(img).flatten().to_vector<float>() ==
        std::vector<float>{0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3});
  auto lin = F::interpolate(img, F::InterpolateFuncOptions()
                                     .size(std::vector<int64_t>{3, 3})
                                     .mode(torch::kBilinear)
                                     .align_corners(true));
  require_close(lin.flatten(), torch::tensor({0.0, 0.5, 1.0, 1.0, 1.5, 2.0, 2.0, 2.5, 3.0}), 1e-6,
                0, "bilinear, corners aligned");
  CHECK_THROWS_WITH(
      F::interpolate(
          img,
          F::InterpolateFuncOptions().scale_factor(std::vector<double>({2})).align_corners(true)),
      Catch::Contains("align_corners can only be set with an interpolating mode"));
  CHECK_THROWS_WITH(F::interpolate(img, F::InterpolateFuncOptions().mode("cubic").size(
                                            std::vector<int64_t>{4, 4})),
                    Catch::Contains("unknown mode 'cubic'"));
  CHECK_THROWS_WITH(F::interpolate(img),
                    Catch::Contains("give exactly one of size and scale_factor"));
  CHECK_THROWS_WITH(F::interpolate(img.flatten(), F::InterpolateFuncOptions().scale_factor(
                                                      std::vector<double>({2}))),
                    Catch::Contains("expected (N, C, L), (N, C, H, W) or (N, C, D, H, W) input"));
}

TEST_CASE("libtorch's MNIST example, with one namespace change, trains", "[libtorch]") {
  torch::manual_seed(1);
  torch::Device device = torch::kCPU;
  if (torch::cuda::is_available()) device = torch::Device(torch::kCUDA, 0);
  auto model = std::make_shared<Net>();
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(0.05).momentum(0.5));
  // 64 noise images, those of class 1 (of the 10 outputs) brighter by 1 than those of class 0.
  auto targets = torch::randint(0, 2, {64}).to(device);
  auto data = (torch::randn({64, 1, 28, 28}) +
               (targets.to(torch::kFloat) - 0.5).view({64, 1, 1, 1}).cpu()).to(device);
  model->train();
  float first_loss = 0, loss_value = 0;
  for (int step = 0; step < 60; ++step) {
    optimizer.zero_grad();
    auto output = model->forward(data);
    auto loss = torch::nll_loss(output, targets);
    REQUIRE(!std::isnan(loss.template item<float>()));
    loss.backward();
    optimizer.step();
    loss_value = loss.item<float>();
    if (step == 0) first_loss = loss_value;
  }
  torch::NoGradGuard no_grad;
  model->eval();
  auto output = model->forward(data);
  const double test_loss =
      torch::nll_loss(output, targets, /*weight=*/{}, torch::Reduction::Sum).template item<float>();
  auto pred = output.argmax(1);
  const int64_t correct = pred.eq(targets).sum().template item<int64_t>();
  INFO("first loss " << first_loss << ", last " << loss_value << ", eval loss " << test_loss / 64
                     << ", correct " << correct << " of 64");
  CHECK(first_loss > 2.0);  // about log(10) before training
  CHECK(test_loss / 64 < 0.5);
  CHECK(correct >= 58);
}

TEST_CASE("libtorch's MNIST example, whole: torch::data's MNIST, Normalize, Stack and loaders",
          "[libtorch]") {
  tandem::testing::TempDir root;
  tandem::testing::write_mnist_files(root.path, 640, 200);
  const std::string kDataRoot = root.path.string();
  const int64_t kTrainBatchSize = 64, kTestBatchSize = 1000;
  const size_t kNumberOfEpochs = 10;
  // main() of the example, from here on as written there.
  torch::manual_seed(1);
  torch::DeviceType device_type;
  if (torch::cuda::is_available()) {
    device_type = torch::kCUDA;
  } else {
    device_type = torch::kCPU;
  }
  torch::Device device(device_type);
  Net model;
  model.to(device);
  auto train_dataset = torch::data::datasets::MNIST(kDataRoot)
                           .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                           .map(torch::data::transforms::Stack<>());
  const size_t train_dataset_size = train_dataset.size().value();
  auto train_loader =
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
          std::move(train_dataset), kTrainBatchSize);
  auto test_dataset = torch::data::datasets::MNIST(
                          kDataRoot, torch::data::datasets::MNIST::Mode::kTest)
                          .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                          .map(torch::data::transforms::Stack<>());
  const size_t test_dataset_size = test_dataset.size().value();
  auto test_loader = torch::data::make_data_loader(std::move(test_dataset), kTestBatchSize);
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  double accuracy = 0;
  for (size_t epoch = 1; epoch <= kNumberOfEpochs; ++epoch) {
    train(epoch, model, device, *train_loader, optimizer, train_dataset_size);
    accuracy = test(model, device, *test_loader, test_dataset_size);
  }
  CHECK(train_dataset_size == 640);
  CHECK(test_dataset_size == 200);
  CHECK(accuracy >= 0.9);
}

TEST_CASE("libtorch names: torch::save and torch::load, as safetensors", "[libtorch]") {
  tandem::testing::TempDir tmp;
  const std::string dir = tmp.path.string();
  auto model = std::make_shared<Net>();
  auto copy = std::make_shared<Net>();
  CHECK(!torch::equal(model->fc1->weight, copy->fc1->weight));
  torch::save(model, dir + "/model.pt");
  torch::load(copy, dir + "/model.pt");
  for (const auto& [name, value] : model->state_dict()) {
    INFO(name);
    CHECK(torch::equal(value, copy->state_dict()[name]));
  }
  // The file is safetensors: another tool (and io::load_safetensors) reads it by torch's names.
  CHECK(tandem::io::load_safetensors(dir + "/model.pt").contains("conv1.weight"));

  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::nll_loss(model->forward(torch::randn({2, 1, 28, 28})), torch::tensor({3, 7})).backward();
  sgd.step();
  torch::save(sgd, dir + "/optimizer.pt");
  torch::optim::SGD restored(copy->parameters(), torch::optim::SGDOptions(0.5));
  torch::load(restored, dir + "/optimizer.pt");
  CHECK(restored.param_groups()[0].options().get_lr() == 0.1);
  CHECK(torch::equal(restored.state_dict()["state.0.momentum_buffer"],
                     sgd.state_dict()["state.0.momentum_buffer"]));

  auto t = torch::randn({3, 4}, torch::kDouble);
  torch::save(t, dir + "/t.pt");
  torch::Tensor back;
  torch::load(back, dir + "/t.pt");
  CHECK(torch::equal(back, t));
  CHECK_THROWS_WITH(torch::load(back, dir + "/model.pt"), Catch::Contains("not the one"));
  CHECK_THROWS_AS(torch::load(copy, dir + "/missing.pt"), tandem::io::IoError);

  // A list of tensors comes back in its order, past ten (where "10" sorts before "2").
  std::vector<torch::Tensor> list;
  for (int i = 0; i < 12; ++i) list.push_back(torch::full({i % 3 + 1}, i));
  list[4] = torch::randn({2, 3}, torch::kDouble);
  torch::save(list, dir + "/list.pt");
  std::vector<torch::Tensor> list_back{torch::ones({1})};
  torch::load(list_back, dir + "/list.pt");
  REQUIRE(list_back.size() == list.size());
  for (size_t i = 0; i < list.size(); ++i) CHECK(torch::equal(list_back[i], list[i]));
  std::vector<torch::Tensor> none;
  torch::save(none, dir + "/empty.pt");
  torch::load(list_back, dir + "/empty.pt");
  CHECK(list_back.empty());
  CHECK_THROWS_WITH(torch::load(list_back, dir + "/t.pt"),
                    Catch::Contains("holds 1 tensors but none named \"0\""));
}

TEST_CASE("libtorch names: indexing with integers, slices, None and the ellipsis",
          "[libtorch]") {
  using namespace torch::indexing;
  auto x = torch::arange(24, torch::kFloat).reshape({2, 3, 4});  // x[i][j][k] = 12 i + 4 j + k
  CHECK(x.index({1}).sizes() == Shape{3, 4});
  CHECK(x.index({1}).to_vector<float>().front() == 12);
  CHECK(x.index({Slice(), 0}).to_vector<float>() ==
        std::vector<float>{0, 1, 2, 3, 12, 13, 14, 15});
  CHECK(x.index({"...", -1}).to_vector<float>() == std::vector<float>{3, 7, 11, 15, 19, 23});
  CHECK(x.index({Ellipsis, Slice(None, 2)}).sizes() == Shape{2, 3, 2});
  CHECK(x.index({0, Slice(1, None), Slice(None, None, 2)}).to_vector<float>() ==
        std::vector<float>{4, 6, 8, 10});
  CHECK(x.index({Slice(-1)}).sizes() == Shape{1, 3, 4});
  CHECK(x.index({Slice(-1)}).to_vector<float>().front() == 12);
  CHECK(x.index({None}).sizes() == Shape{1, 2, 3, 4});
  CHECK(x.index({Slice(), None, 0}).sizes() == Shape{2, 1, 4});
  CHECK(x.index({1, 2, 3}).item<float>() == 23);

  // The result is a view: index_put_ writes into x.
  x.index_put_({0, 0}, 100.0);
  CHECK(x.index({0, 0}).to_vector<float>() == std::vector<float>{100, 100, 100, 100});
  x.index_put_({Slice(), Slice(), 3}, torch::tensor({-1.0, -2.0, -3.0}));  // broadcast over i
  CHECK(x.index({"...", 3}).to_vector<float>() == std::vector<float>{-1, -2, -3, -1, -2, -3});
  CHECK(x.index({1, 0, 0}).item<float>() == 12);  // untouched

  // Differentiable as the views it is made of.
  auto w = torch::ones({2, 3}, torch::TensorOptions().requires_grad(true));
  w.index({1, Slice(None, 2)}).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{0, 0, 0, 1, 1, 0});

  CHECK_THROWS_WITH(x.index({2}), Catch::Contains("out of range for dim 0 of size 2"));
  CHECK_THROWS_WITH(x.index({0, 0, 0, 0}), Catch::Contains("4 indices for a tensor of 3 dims"));
  CHECK_THROWS_WITH(x.index({"..", 0}), Catch::Contains("the only string index"));
  CHECK_THROWS_WITH(x.index({Ellipsis, "..."}), Catch::Contains("at most one ellipsis"));
  CHECK_THROWS_WITH(x.index({Slice(None, None, -1)}), Catch::Contains("step must be positive"));
}

TEST_CASE("libtorch names: indexing by a tensor of indices or a bool mask, and writing through "
          "them", "[libtorch]") {
  using namespace torch::indexing;
  auto x = torch::arange(24, torch::kFloat).reshape({2, 3, 4});  // x[i][j][k] = 12 i + 4 j + k
  // Integer indices (negative from the end) select along their dim, their shape in its place.
  auto picked = x.index({Slice(), torch::tensor({2, 0, -1})});
  CHECK(picked.sizes() == Shape{2, 3, 4});
  CHECK(torch::equal(picked, x.index_select(1, torch::tensor({2, 0, 2}))));
  auto grid = x.index({1, torch::tensor({1, 0, 2, 1}).view({2, 2})});
  CHECK(grid.sizes() == Shape{2, 2, 4});
  CHECK(grid.index({0, 0}).to_vector<float>() == std::vector<float>{16, 17, 18, 19});  // x[1][1]
  CHECK(grid.index({1, 0}).to_vector<float>() == std::vector<float>{20, 21, 22, 23});  // x[1][2]
  CHECK(x.index({"...", torch::tensor({3}, torch::kInt)}).sizes() == Shape{2, 3, 1});
  // A mask takes as many dims as it has, which become one: the elements where it is true.
  auto mask = x.index({0}) > 5.5;  // (3, 4): x[0] holds 0..11
  CHECK(x.index({0}).index({mask}).to_vector<float>() ==
        std::vector<float>{6, 7, 8, 9, 10, 11});
  CHECK(x.index({Slice(), mask}).sizes() == Shape{2, 6});
  CHECK(x.index({Slice(), torch::tensor({true, false, true})}).sizes() == Shape{2, 2, 4});
  // A copy, not a view; differentiable as index_select.
  picked.fill_(-1);
  CHECK(x.index({0, 0, 0}).item<float>() == 0);
  auto w = torch::zeros({4}, torch::TensorOptions().requires_grad(true));
  w.index({torch::tensor({3, 1, 3})}).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{0, 1, 0, 2});

  // index_put_ writes through them into x: a number, or values broadcast to the selection.
  auto y = x.clone();
  y.index_put_({y > 20}, 0);
  CHECK(y.max().item<float>() == 20);
  CHECK(y.index({1, 2}).to_vector<float>() == std::vector<float>{20, 0, 0, 0});
  y.index_put_({Slice(), torch::tensor({0, 2})}, torch::tensor({-1.0, -2.0, -3.0, -4.0}));
  CHECK(y.index({1, 0}).to_vector<float>() == std::vector<float>{-1, -2, -3, -4});
  CHECK(y.index({0, 2}).to_vector<float>() == std::vector<float>{-1, -2, -3, -4});
  CHECK(y.index({0, 1}).to_vector<float>() == std::vector<float>{4, 5, 6, 7});  // untouched
  auto t = torch::zeros({3, 4}).t();  // a strided destination
  t.index_put_({torch::tensor({1, 3})}, 5.0);
  CHECK(t.sum().item<float>() == 30);
  CHECK(t.index({3}).to_vector<float>() == std::vector<float>{5, 5, 5});

  // A 0-dim integer tensor is an integer, as in libtorch: a select, so a view.
  auto z = x.clone();
  z.index({torch::scalar_tensor(1, torch::kLong)}).fill_(0);
  CHECK(z.index({1}).abs().sum().item<float>() == 0);
  CHECK(z.index({torch::scalar_tensor(0, torch::kLong), torch::tensor({2, 0})}).sizes() ==
        Shape{2, 4});
  // A bad index into an empty block is refused by index_put_ as by index.
  CHECK_THROWS_AS(torch::zeros({0, 3}).index_put_({Slice(), torch::tensor({5})}, 1.0),
                  tandem::IndexError);
  CHECK_THROWS_WITH(x.index({torch::tensor({0}), torch::tensor({3})}),
                    Catch::Contains("index 3 is out of bounds for dimension 1 with size 3"));
  CHECK_THROWS_WITH(x.index({torch::ones({3, 3}, torch::kBool)}),
                    Catch::Contains("a mask of shape (3, 3) does not match the indexed dims (2, 3)"));
  CHECK_THROWS_WITH(x.index({torch::tensor({0.5})}), Catch::Contains("must hold integers"));
  CHECK_THROWS_AS(x.index({Slice(), torch::tensor({-4})}), tandem::IndexError);
  CHECK_THROWS_WITH(x.index({Slice(), torch::tensor({-4})}),
                    Catch::Contains("index -4 is out of bounds for dimension 1 with size 3"));
  CHECK_THROWS_WITH(y.index_put_({torch::tensor({1})}, torch::ones({2})),
                    Catch::Contains("index_put_: shapes (1, 3, 4) and (2,) cannot be broadcast"));
}

TEST_CASE("libtorch names: initializers take libtorch's mode and nonlinearity names",
          "[libtorch]") {
  auto conv = std::make_shared<torch::nn::Conv2d>(torch::nn::Conv2dOptions(64, 128, 3));
  torch::Generator g1(4), g2(4);
  torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU, &g1);
  // fan_out = 128 x 3 x 3, gain sqrt(2): std = sqrt(2 / 1152) = 1/24.
  CHECK(conv->weight.std().item<float>() == Approx(1.0 / 24).epsilon(0.02));
  auto w = torch::empty({128, 64, 3, 3});
  torch::nn::init::kaiming_normal_(w, 0.0, torch::nn::init::FanMode::fan_out, "relu", &g2);
  CHECK(torch::equal(w, conv->weight));
  // The handle is taken by value, so a temporary one fills the module's tensor.
  torch::nn::init::zeros_(conv->named_parameters().back().second);
  CHECK(conv->bias.abs().sum().item<float>() == 0);
  CHECK(torch::nn::init::calculate_gain(torch::kLeakyReLU, 0.2) == Approx(std::sqrt(2 / 1.04)));
}

TEST_CASE("libtorch names: nn::functional's options forms forward to the ops", "[libtorch]") {
  namespace F = torch::nn::functional;
  torch::Generator gen(9);
  auto x = torch::randn({2, 3, 6, 6}, {}, &gen), w = torch::randn({4, 3, 3, 3}, {}, &gen);
  auto b = torch::randn({4}, {}, &gen), m = torch::randn({5, 4}, {}, &gen);
  auto labels = torch::tensor({1, 0, 3, 2, 1});
  auto probs = torch::rand({5, 4}, {}, &gen), classw = torch::rand({4}, {}, &gen) + 0.5;
  CHECK(torch::equal(F::relu(x), torch::relu(x)));
  CHECK(torch::equal(F::leaky_relu(x, F::LeakyReLUFuncOptions().negative_slope(0.3)),
                     torch::leaky_relu(x, 0.3)));
  CHECK(torch::equal(F::gelu(x, F::GELUFuncOptions().approximate("tanh")),
                     torch::gelu(x, "tanh")));
  CHECK(torch::equal(F::softmax(m, F::SoftmaxFuncOptions(0)), torch::softmax(m, 0)));
  CHECK(torch::equal(F::log_softmax(m, /*dim=*/1), torch::log_softmax(m, 1)));
  CHECK(torch::equal(F::conv2d(x, w, F::Conv2dFuncOptions().bias(b).stride(2).padding(1)),
                     torch::conv2d(x, w, b, 2, 1)));
  auto wt = w.transpose(0, 1).contiguous();  // (3, 4, 3, 3): 3 in, 4 out
  // The options have defaults, as libtorch's.
  CHECK(torch::equal(F::conv2d(x, w), torch::conv2d(x, w)));
  CHECK(torch::equal(F::conv_transpose2d(x, wt), torch::conv_transpose2d(x, wt)));
  CHECK(torch::equal(F::conv1d(x.flatten(2), w.flatten(2)),
                     torch::conv1d(x.flatten(2), w.flatten(2))));
  CHECK(torch::equal(F::conv3d(x.unsqueeze(2), w.unsqueeze(2)),
                     torch::conv3d(x.unsqueeze(2), w.unsqueeze(2))));
  CHECK(torch::equal(
      F::conv_transpose2d(x, wt, F::ConvTranspose2dFuncOptions().stride(2).output_padding(1)),
      torch::conv_transpose2d(x, wt, {}, 2, 0, 1)));
  CHECK(torch::equal(F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(2).padding(1)),
                     torch::max_pool2d(x, 3, 2, 1)));
  CHECK(torch::equal(F::avg_pool2d(x, F::AvgPool2dFuncOptions(2)), torch::avg_pool2d(x, 2)));
  auto rm = torch::zeros({3}), rv = torch::ones({3});
  CHECK(torch::equal(F::batch_norm(x, rm, rv, F::BatchNormFuncOptions().eps(1e-3)),
                     torch::batch_norm(x, rm, rv, {}, {}, false, 0.1, 1e-3)));
  CHECK(torch::equal(F::dropout(x, F::DropoutFuncOptions().training(false)), x));
  CHECK(torch::equal(F::dropout2d(x, F::Dropout2dFuncOptions().p(0.0)), x));
  CHECK(torch::equal(F::pad(x, F::PadFuncOptions({1, 2}).value(0.5)), torch::pad(x, {1, 2}, 0.5)));
  CHECK(torch::equal(
      F::cross_entropy(m, labels, F::CrossEntropyFuncOptions().reduction(torch::kSum)),
      torch::cross_entropy(m, labels, {torch::Reduction::Sum})));
  CHECK(torch::equal(F::nll_loss(m, labels, F::NLLLossFuncOptions().weight(classw)),
                     torch::nll_loss(m, labels, classw)));
  CHECK(torch::equal(F::mse_loss(m, probs, F::MSELossFuncOptions(torch::kNone)),
                     torch::mse_loss(m, probs, torch::Reduction::None)));
  CHECK(torch::equal(F::l1_loss(m, probs, F::L1LossFuncOptions().reduction(torch::kSum)),
                     torch::l1_loss(m, probs, torch::Reduction::Sum)));
  CHECK(torch::equal(F::smooth_l1_loss(m, probs, F::SmoothL1LossFuncOptions().beta(0.5)),
                     torch::smooth_l1_loss(m, probs, torch::Reduction::Mean, 0.5)));
  CHECK(torch::equal(
      F::binary_cross_entropy(probs, probs, F::BinaryCrossEntropyFuncOptions().weight(classw)),
      torch::binary_cross_entropy(probs, probs, classw)));
  CHECK(torch::equal(F::binary_cross_entropy_with_logits(
                         m, probs, F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(classw)),
                     torch::binary_cross_entropy_with_logits(m, probs, {}, classw)));
}

TEST_CASE("libtorch names: the named_* traversals are OrderedDicts with key() and value()",
          "[libtorch]") {
  auto net = std::make_shared<Net>();
  std::vector<std::string> names;
  int64_t count = 0;
  for (const auto& p : net->named_parameters()) {
    names.push_back(p.key());
    count += p.value().numel();
  }
  CHECK(names.front() == "conv1.weight");
  CHECK(names.back() == "fc2.bias");
  CHECK(count == 250 + 10 + 5000 + 20 + 16000 + 50 + 500 + 10);  // the MNIST net's weights
  auto params = net->named_parameters();
  CHECK(params[2].key() == "conv2.weight");
  CHECK(params.at("fc1.bias").sizes() == Shape{50});
  CHECK(params.front().value().is_same(net->conv1->weight));
  for (const auto& [name, p] : params) CHECK(p.requires_grad());  // std::map's binding too
  CHECK_THROWS_AS(params[100], tandem::IndexError);
  CHECK(net->named_children()[2].key() == "conv2_drop");
  CHECK(net->named_children().at("fc2") == net->fc2);
  CHECK(net->named_modules()[0].key() == "");
  CHECK(net->named_modules().back().key() == "fc2");
  CHECK(net->named_buffers().empty());
}

TEST_CASE("libtorch names: ConvTranspose2d, as libtorch's DCGAN generator uses it",
          "[libtorch]") {
  using torch::nn::ConvTranspose2dOptions;
  // pytorch/examples cpp/dcgan: noise (N, 100, 1, 1) to (N, 1, 28, 28).
  auto first = std::make_shared<torch::nn::ConvTranspose2d>(
      ConvTranspose2dOptions(100, 256, 4).bias(false));
  torch::nn::Sequential generator(
      first, std::make_shared<torch::nn::BatchNorm2d>(256), std::make_shared<torch::nn::ReLU>(),
      std::make_shared<torch::nn::ConvTranspose2d>(
          ConvTranspose2dOptions(256, 128, 3).stride(2).padding(1).bias(false)),
      std::make_shared<torch::nn::BatchNorm2d>(128), std::make_shared<torch::nn::ReLU>(),
      std::make_shared<torch::nn::ConvTranspose2d>(
          ConvTranspose2dOptions(128, 64, 4).stride(2).padding(1).bias(false)),
      std::make_shared<torch::nn::BatchNorm2d>(64), std::make_shared<torch::nn::ReLU>(),
      std::make_shared<torch::nn::ConvTranspose2d>(
          ConvTranspose2dOptions(64, 1, 4).stride(2).padding(1).bias(false)),
      std::make_shared<torch::nn::Tanh>());
  auto images = generator.forward(torch::randn({2, 100, 1, 1}));
  CHECK(images.sizes() == Shape{2, 1, 28, 28});  // 1 -> 4 -> 7 -> 14 -> 28
  CHECK(images.abs().max().item<float>() <= 1);
  // torch's init: weight (in, out, kH, kW), fan_in = out x kH x kW = 4096, bound 1 / 64.
  CHECK(first->weight.sizes() == Shape{100, 256, 4, 4});
  CHECK(first->weight.abs().max().item<float>() <= 1.0f / 64);
  std::ostringstream os;
  os << *first;
  CHECK(os.str() == "ConvTranspose2d(100, 256, kernel_size=(4, 4), stride=(1, 1), bias=false)");
  CHECK_THROWS_WITH(torch::conv_transpose2d(torch::ones({1, 2, 3, 3}), torch::ones({2, 1, 3, 3}),
                                            {}, 2, 0, /*output_padding=*/2),
                    Catch::Contains("output_padding must be smaller than either stride or dilation"));
  CHECK_THROWS_WITH(torch::conv_transpose2d(torch::ones({1, 3, 3, 3}), torch::ones({2, 1, 3, 3})),
                    Catch::Contains("C == weight.size(0) == 2"));
}

// A bag-of-words classifier as a libtorch user writes one: an Embedding with a padding row, the
// mean of a sentence's vectors, a Linear layer; each sentence is labelled by whether it holds
// token 3. It learns the rule, and the padding row stays zero and untouched by the optimizer.
struct BagOfWords : torch::nn::Module {
  BagOfWords() {
    embed = register_module("embed", std::make_shared<torch::nn::Embedding>(
                                         torch::nn::EmbeddingOptions(10, 8).padding_idx(0)));
    fc = register_module("fc", std::make_shared<torch::nn::Linear>(8, 2));
  }
  torch::Tensor forward(const torch::Tensor& tokens) override {
    return fc->forward(embed->forward(tokens).mean(1));
  }
  std::shared_ptr<torch::nn::Embedding> embed;
  std::shared_ptr<torch::nn::Linear> fc;
};

TEST_CASE("libtorch names: an Embedding model (gather, index_add) learns which token matters",
          "[libtorch]") {
  torch::manual_seed(3);
  auto model = std::make_shared<BagOfWords>();
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(0.05));
  torch::Generator gen(4);
  torch::Tensor tokens = torch::randint(0, 10, {256, 6}, torch::kLong, &gen);
  // Pad the last two positions of every other sentence, as variable lengths would be.
  tokens.index_put_({torch::indexing::Slice(0, torch::indexing::None, 2),
                     torch::indexing::Slice(4, torch::indexing::None)}, 0);
  torch::Tensor labels = tokens.eq(3).sum(1).gt(0).to(torch::kLong);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(tokens), labels);
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  INFO("loss " << first << " -> " << last);
  CHECK(first > 0.5);
  CHECK(last < 0.25);
  torch::NoGradGuard no_grad;
  const auto correct =
      model->forward(tokens).argmax(1).eq(labels).sum().item<int64_t>();
  CHECK(correct >= 240);
  CHECK(model->embed->weight.select(0, 0).abs().sum().item<float>() == 0.0f);
}

TEST_CASE("libtorch names: loss modules forward to their functional forms", "[libtorch]") {
  namespace F = torch::nn::functional;
  torch::manual_seed(8);
  torch::Tensor x = torch::randn({4, 3}), y = torch::randn({4, 3});
  torch::Tensor p = torch::sigmoid(x), t = torch::rand({4, 3});
  torch::Tensor labels = torch::tensor({0, 2, 1, 2});
  auto same = [](const torch::Tensor& a, const torch::Tensor& b) {
    CHECK(a.to_vector<float>() == b.to_vector<float>());
  };
  same(torch::nn::MSELoss()(x, y), torch::mse_loss(x, y));
  same(torch::nn::MSELoss(torch::kSum)(x, y), torch::mse_loss(x, y, torch::kSum));
  same(torch::nn::L1Loss(torch::nn::L1LossOptions(torch::kNone))(x, y),
       torch::l1_loss(x, y, torch::kNone));
  same(torch::nn::SmoothL1Loss(torch::nn::SmoothL1LossOptions().beta(0.5))(x, y),
       torch::smooth_l1_loss(x, y, torch::kMean, 0.5));
  same(torch::nn::CrossEntropyLoss(torch::nn::CrossEntropyLossOptions().label_smoothing(0.1))(
           x, labels),
       F::cross_entropy(x, labels, F::CrossEntropyFuncOptions().label_smoothing(0.1)));
  torch::nn::NLLLoss nll(torch::nn::NLLLossOptions().ignore_index(1));
  same(nll.forward(torch::log_softmax(x, 1), labels),
       torch::nll_loss(torch::log_softmax(x, 1), labels, {}, torch::kMean, 1));
  same(torch::nn::BCELoss()(p, t), torch::binary_cross_entropy(p, t));
  torch::Tensor pos_weight = torch::full({3}, 2.0);
  same(torch::nn::BCEWithLogitsLoss(torch::nn::BCEWithLogitsLossOptions().pos_weight(pos_weight))(
           x, t),
       torch::binary_cross_entropy_with_logits(x, t, {}, pos_weight));
  CHECK(torch::nn::MSELoss().type_name() == "MSELoss");
  CHECK(torch::nn::MSELoss().parameters().empty());
}

TEST_CASE("libtorch names: option factories, one-size factories, compound operators, expand_as",
          "[libtorch]") {
  torch::Tensor a = torch::ones({2, 2}, torch::requires_grad());
  CHECK(a.requires_grad());
  CHECK(a.dtype() == torch::kFloat32);
  torch::Tensor b = torch::zeros({2}, torch::dtype(torch::kFloat64).requires_grad(true));
  CHECK(b.dtype() == torch::kFloat64);
  CHECK(b.requires_grad());
  CHECK(torch::empty({3}, torch::device(torch::kCPU)).device().is_cpu());
  // One size, as libtorch's IntArrayRef takes it; `{}` stays a 0-dim tensor.
  CHECK(torch::zeros(5).sizes() == tandem::Shape{5});
  CHECK(torch::ones(int64_t{3}, torch::kFloat64).sizes() == tandem::Shape{3});
  CHECK(torch::randn(4).sizes() == tandem::Shape{4});
  CHECK(torch::rand(2).sizes() == tandem::Shape{2});
  CHECK(torch::empty(size_t{6}).sizes() == tandem::Shape{6});
  CHECK(torch::full(2, 1.5).to_vector<float>() == std::vector<float>{1.5f, 1.5f});
  CHECK(torch::zeros({}).dim() == 0);
  CHECK(torch::zeros({5}).sizes() == tandem::Shape{5});

  torch::Tensor x = torch::tensor({1.0, 2.0});
  torch::Tensor x0 = x;  // the same tensor: += writes in place, as libtorch's
  x += torch::tensor({10.0, 20.0});
  CHECK(x0.to_vector<float>() == std::vector<float>{11.0f, 22.0f});
  x -= 1.0;
  x *= 2.0;
  x /= torch::tensor({4.0, 2.0});
  CHECK(x0.to_vector<float>() == std::vector<float>{5.0f, 21.0f});
  x *= torch::tensor({2.0, 0.5});
  x += 1.0;
  x -= torch::tensor({1.0, 1.0});
  x /= 2.0;
  CHECK(x0.to_vector<float>() == std::vector<float>{5.0f, 5.25f});
  // In place on a tensor that requires grad is refused, as every in-place op here.
  CHECK_THROWS_AS(a += 1.0, tandem::ValueError);

  torch::Tensor row = torch::tensor({1.0, 2.0, 3.0}).unsqueeze(0);
  torch::Tensor m = torch::zeros({2, 3});
  CHECK(row.expand_as(m).sizes() == m.sizes());
  CHECK(row.expand_as(m).sum().item<float>() == 12.0f);
}

TEST_CASE("libtorch names: LayerNorm and GroupNorm", "[libtorch]") {
  torch::manual_seed(12);
  torch::Tensor x = torch::randn({3, 2, 4}) * 3.0 + 1.0;
  // Closed form: each normalized slice has mean 0 and biased variance 1.
  auto ln = std::make_shared<torch::nn::LayerNorm>(torch::nn::LayerNormOptions({2, 4}));
  torch::Tensor y = ln->forward(x);
  require_close(y.mean({1, 2}), torch::zeros({3}), 0, 1e-6);
  require_close(y.var({1, 2}, /*unbiased=*/false), torch::ones({3}), 0, 1e-4);
  CHECK(ln->named_parameters().size() == 2);
  CHECK(ln->weight.sizes() == tandem::Shape{2, 4});
  // The affine part, through the functional form.
  ln->weight.detach().uniform_(0.5, 1.5);
  ln->bias.detach().uniform_(-1.0, 1.0);
  require_close(ln->forward(x),
                torch::nn::functional::layer_norm(
                    x, torch::nn::functional::LayerNormFuncOptions({2, 4})
                           .weight(ln->weight).bias(ln->bias)),
                0, 0);
  require_close(ln->forward(x), y * ln->weight + ln->bias, 1e-6, 1e-6);
  auto plain = torch::nn::LayerNorm(torch::nn::LayerNormOptions({4}).elementwise_affine(false));
  CHECK(plain.parameters().empty());
  CHECK_THROWS_AS(plain.forward(torch::zeros({2, 3})), tandem::ValueError);

  // GroupNorm: one group is a layer norm over (C, H, W); C groups normalize each channel.
  torch::Tensor img = torch::randn({2, 4, 3, 3});
  torch::nn::GroupNorm one(torch::nn::GroupNormOptions(1, 4));
  require_close(one.forward(img), torch::layer_norm(img, {4, 3, 3}), 1e-5, 1e-6);
  torch::nn::GroupNorm per_channel(torch::nn::GroupNormOptions(4, 4).affine(false));
  torch::Tensor centered = img - img.mean({2, 3}, true);
  require_close(per_channel.forward(img),
                centered / torch::sqrt(centered.pow(2).mean({2, 3}, true) + 1e-5), 1e-5, 1e-6);
  CHECK(per_channel.parameters().empty());
  CHECK_THROWS_AS(torch::nn::GroupNorm(torch::nn::GroupNormOptions(3, 4)), tandem::ValueError);
  // Gradients against finite differences, in f64.
  tandem::testing::gradcheck(
      [](const std::vector<torch::Tensor>& in) { return torch::group_norm(in[0], 2, in[1], in[2]); },
      {torch::randn({2, 4, 2, 3}, torch::kFloat64), torch::randn({4}, torch::kFloat64),
       torch::randn({4}, torch::kFloat64)});
  tandem::testing::gradcheck(
      [](const std::vector<torch::Tensor>& in) { return torch::layer_norm(in[0], {3}, in[1]); },
      {torch::randn({4, 3}, torch::kFloat64), torch::randn({3}, torch::kFloat64)});
}

TEST_CASE("libtorch names: ModuleList and Functional", "[libtorch]") {
  auto list = std::make_shared<torch::nn::ModuleList>(
      std::make_shared<torch::nn::Linear>(4, 8), std::make_shared<torch::nn::Linear>(8, 8));
  list->push_back(std::make_shared<torch::nn::Linear>(8, 2));
  CHECK(list->size() == 3);
  CHECK(list->parameters().size() == 6);  // registered: the list's parameters
  CHECK(list->named_parameters()[0].key() == "0.weight");
  CHECK(list->named_parameters()[5].key() == "2.bias");
  torch::Tensor x = torch::randn({5, 4});
  torch::Tensor h = x;
  for (const auto& layer : *list) h = torch::relu(layer->forward(h));
  CHECK(h.sizes() == tandem::Shape{5, 2});
  CHECK(list->ptr<torch::nn::Linear>(2)->weight.sizes() == tandem::Shape{2, 8});
  CHECK_THROWS_AS(list->ptr<torch::nn::Conv2d>(0), tandem::ValueError);
  CHECK_THROWS_AS(list->ptr(3), tandem::IndexError);
  torch::nn::ModuleList more;
  more.extend(*list);
  more.extend(more);
  CHECK(more.size() == 6);
  CHECK((*list)[1].get() == more[4].get());

  auto seq = torch::nn::Sequential(
      std::make_shared<torch::nn::Linear>(4, 3),
      std::make_shared<torch::nn::Functional>([](const torch::Tensor& t) { return t * 2.0; }),
      std::make_shared<torch::nn::Functional>(
          static_cast<torch::Tensor (*)(const torch::Tensor&)>(torch::relu)));
  auto first = std::dynamic_pointer_cast<torch::nn::Linear>(seq[0]);
  CHECK(seq.forward(x).to_vector<float>() ==
        torch::relu(first->forward(x) * 2.0).to_vector<float>());
  CHECK(seq.parameters().size() == 2);
}

TEST_CASE(
    "libtorch names: BatchNorm1d, pooling options, InferenceMode, clamp_, "
    "clip_grad_value_, get_last_lr",
    "[libtorch]") {
  // BatchNorm1d normalizes each channel over the batch (and L): the closed form, biased
  // variance; torch's state_dict keys; 2-d and 3-d input only.
  torch::nn::BatchNorm1d bn(torch::nn::BatchNormOptions(2).eps(1e-14).affine(false));
  auto x = torch::tensor({{1.0, 10.0}, {3.0, 30.0}}, torch::kFloat64);
  // (v - mean) / sqrt(biased var): -1 and 1 for two values
  require_close(bn.forward(x), torch::tensor({{-1.0, -1.0}, {1.0, 1.0}}, torch::kFloat64), 0,
                1e-12);
  auto x3 = torch::randn({4, 2, 5}).to(torch::kFloat64);
  torch::nn::BatchNorm1d bn3(2);
  auto y3 = bn3.forward(x3);
  auto mean = x3.mean({0, 2}, true), var = (x3 - mean).pow(2).mean({0, 2}, true);
  require_close(y3, (x3 - mean) / (var + 1e-5).sqrt(), 1e-12, 1e-12);
  std::vector<std::string> keys;
  for (const auto& item : bn3.named_parameters()) keys.push_back(item.key());
  for (const auto& item : bn3.named_buffers()) keys.push_back(item.key());
  CHECK(keys == std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                         "num_batches_tracked"});
  CHECK_THROWS_WITH(
      bn3.forward(torch::ones({2, 2, 3, 3})),
      Catch::Contains("BatchNorm1d(2): expected input (N, C) or (N, C, L) with C = 2, got "
                      "(2, 2, 3, 3)"));
  CHECK_THROWS_WITH(torch::nn::BatchNorm2d(3).forward(torch::ones({2, 3})),
                    Catch::Contains("BatchNorm2d(3): expected input (N, C, H, W) with C = 3"));
  std::ostringstream os;
  os << bn3;
  CHECK(os.str() ==
        "BatchNorm1d(2, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)");

  // Pooling layers from libtorch's options; the stride defaults to the window.
  auto img = torch::randn({2, 3, 9, 9});
  torch::nn::MaxPool2d pool(torch::nn::MaxPool2dOptions(3).stride(2).padding(1));
  CHECK(torch::equal(pool.forward(img), torch::max_pool2d(img, 3, 2, 1)));
  torch::nn::AvgPool2d avg(torch::nn::AvgPool2dOptions({2, 3}));
  CHECK(torch::equal(avg.forward(img), torch::avg_pool2d(img, {2, 3}, {2, 3})));
  torch::nn::AdaptiveAvgPool2d gap(torch::nn::AdaptiveAvgPool2dOptions({1, 1}));
  CHECK(gap.forward(img).sizes() == Shape{2, 3, 1, 1});

  // InferenceMode records nothing; InferenceMode(false) records again.
  auto w = torch::ones({2}, torch::requires_grad());
  {
    torch::InferenceMode guard;
    CHECK_FALSE((w * 2).requires_grad());
    torch::InferenceMode on(false);
    CHECK((w * 2).requires_grad());
  }
  CHECK((w * 2).requires_grad());

  // clamp_ in place (WGAN's weight clipping), refused where it would lose something.
  auto c = torch::tensor({-2.0, 0.5, 3.0});
  c.clamp_(-1, 1);
  CHECK(c.to_vector<float>() == std::vector<float>{-1.0f, 0.5f, 1.0f});
  auto ci = torch::tensor({-5, 5});
  ci.clamp_(0);
  CHECK(ci.to_vector<int64_t>() == std::vector<int64_t>{0, 5});
  CHECK_THROWS_WITH(ci.clamp_(0.5), Catch::Contains("floating point"));
  CHECK_THROWS_WITH(ci.clamp_(1.0), Catch::Contains("floating point"));  // as torch's
  auto bits = torch::tensor({true, false});
  CHECK_THROWS_WITH(bits.clamp_(0, 1), Catch::Contains("clamping bool is i64"));
  CHECK_THROWS_WITH(bits.clamp_(0.5), Catch::Contains("floating point"));
  // Out of place, as PyTorch: integers stay integers under integer bounds (indices clamped
  // into range), a floating bound gives f32, bool is clamped as i64; an integer bound past
  // the dtype's range saturates (PyTorch refuses it).
  auto idx = torch::tensor({-5, 1, 7});
  CHECK(idx.clamp(0, 3).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 3});
  CHECK(idx.clamp(0.5).to_vector<float>() == std::vector<float>{0.5f, 1.0f, 7.0f});
  auto flags = torch::tensor({true, false}).clamp(0, 1);
  CHECK(flags.dtype() == torch::kInt64);
  CHECK(flags.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  auto narrow = idx.to(torch::kInt32).clamp(int64_t{3000000000});
  CHECK(narrow.dtype() == torch::kInt32);
  CHECK(narrow.to_vector<int32_t>() == std::vector<int32_t>(3, 2147483647));
  CHECK(idx.to(torch::kInt32).clamp(3e9).to_vector<float>() == std::vector<float>(3, 3e9f));
  CHECK(idx.clamp(0.0, 3.0).dtype() == torch::kFloat32);
  CHECK(idx.to(torch::kUInt8).clamp(std::nullopt, 2).to_vector<uint8_t>() ==
        std::vector<uint8_t>{2, 1, 2});  // -5 wrapped to 251 by the cast, then clamped
  CHECK_THROWS_WITH(w.clamp_(0, 1), Catch::Contains("clamp_"));
  {
    torch::NoGradGuard no_grad;
    w.clamp_(0, 0.5);  // as WGAN clips its critic's weights
  }
  CHECK(w.to_vector<float>() == std::vector<float>{0.5f, 0.5f});

  // clip_grad_value_ clamps each gradient element; get_last_lr is last_lr.
  auto p = torch::zeros({3}, torch::requires_grad());
  (p * torch::tensor({-3.0, 0.2, 7.0})).sum().backward();
  torch::nn::utils::clip_grad_value_({p}, 1.0);
  CHECK(p.grad().to_vector<float>() == std::vector<float>{-1.0f, 0.2f, 1.0f});
  CHECK_THROWS_WITH(torch::nn::utils::clip_grad_value_({p}, -1), Catch::Contains(">= 0"));
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.1));
  torch::optim::StepLR schedule(sgd, 1, 0.5);
  schedule.step();
  CHECK(schedule.get_last_lr() == std::vector<double>{0.05});
}

TEST_CASE(
    "libtorch names: conv1d against its sum, its gradients against finite differences, "
    "and Conv1d",
    "[libtorch]") {
  // y[n, o, l] = b[o] + sum over c in o's group and j of x[n, c, l s - p + j d] w[o, c', j]
  const int64_t N = 2, C = 4, O = 6, L = 9, K = 3, s = 2, p = 1, d = 2, groups = 2;
  torch::Generator gen(3);
  auto x = torch::randn({N, C, L}, torch::kFloat64, &gen);
  auto w = torch::randn({O, C / groups, K}, torch::kFloat64, &gen);
  auto b = torch::randn({O}, torch::kFloat64, &gen);
  auto y = torch::conv1d(x, w, b, s, p, d, groups);
  const int64_t lo = (L + 2 * p - d * (K - 1) - 1) / s + 1;
  REQUIRE(y.sizes() == Shape{N, O, lo});
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> expect;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t l = 0; l < lo; ++l) {
        double acc = bv[o];
        const int64_t g = o / (O / groups);
        for (int64_t c = 0; c < C / groups; ++c)
          for (int64_t j = 0; j < K; ++j) {
            const int64_t at = l * s - p + j * d;
            if (at >= 0 && at < L)
              acc +=
                  xv[(n * C + g * (C / groups) + c) * L + at] * wv[(o * (C / groups) + c) * K + j];
          }
        expect.push_back(acc);
      }
  require_close(y, torch::from_vector(expect, {N, O, lo}), 1e-12, 1e-12);
  // Unbatched input, and the functional options form.
  namespace F = torch::nn::functional;
  require_close(
      F::conv1d(x[0], w,
                F::Conv1dFuncOptions().bias(b).stride(s).padding(p).dilation(d).groups(groups)),
      y[0], 1e-12, 1e-12);
  tandem::testing::gradcheck(
      [&](const std::vector<torch::Tensor>& v) {
        return torch::conv1d(v[0], v[1], v[2], s, p, d, groups);
      },
      {x.clone(), w.clone(), b.clone()});

  torch::nn::Conv1d conv(
      torch::nn::Conv1dOptions(4, 6, 3).stride(2).padding(1).dilation(2).groups(2).bias(false));
  std::ostringstream os;
  os << conv;
  CHECK(os.str() ==
        "Conv1d(4, 6, kernel_size=(3,), stride=(2,), padding=(1,), dilation=(2,), "
        "groups=2, bias=false)");  // PyTorch prints bias=False
  CHECK(conv.weight.sizes() == Shape{6, 2, 3});
  CHECK(conv.forward(torch::ones({5, 4, 9})).sizes() == Shape{5, 6, 4});
  CHECK_THROWS_WITH(conv.forward(torch::ones({5, 3, 9})),
                    Catch::Contains("conv1d: input has 3 channels"));
  CHECK_THROWS_WITH(conv.forward(torch::ones({5, 4, 9, 9})), Catch::Contains("(N, C_in, L)"));
  CHECK_THROWS_WITH(torch::nn::Conv1d(torch::nn::Conv1dOptions(4, 6, 3).stride(0)),
                    Catch::Contains("stride > 0"));
}

TEST_CASE("libtorch names: accessor reads and writes elements through the strides", "[libtorch]") {
  auto t = torch::arange(6, torch::kFloat32).reshape({2, 3});
  auto a = t.accessor<float, 2>();
  CHECK(a.size(0) == 2);
  CHECK(a.size(1) == 3);
  CHECK(a[1][2] == 5.0f);
  a[0][1] = 10.0f;
  CHECK(t.to_vector<float>() == std::vector<float>{0, 10, 2, 3, 4, 5});
  auto tt = t.t();  // a transposed view: element (i, j) of tt is (j, i) of t
  auto b = tt.accessor<float, 2>();
  CHECK(b.size(0) == 3);
  CHECK(b[1][0] == 10.0f);
  CHECK(b[2][1] == 5.0f);
  auto v = torch::arange(4, torch::kInt64);
  auto c = v.accessor<int64_t, 1>();
  int64_t total = 0;
  for (int64_t i = 0; i < c.size(0); ++i) total += c[i];
  CHECK(total == 6);
  CHECK_THROWS_WITH((t.accessor<float, 3>()), Catch::Contains("has 2 dims, accessor<T, 3>"));
  CHECK_THROWS_WITH((t.accessor<double, 2>()), Catch::Contains("data_ptr"));
}

TEST_CASE("libtorch names: tensor of any nesting, numbers and vectors", "[libtorch]") {
  // A braced list is always a list: one-element rows are columns, not numbers.
  auto col = torch::tensor({{1.0}, {0.0}});
  CHECK(col.sizes() == Shape{2, 1});
  CHECK(torch::tensor({{5}}).sizes() == Shape{1, 1});
  auto cube = torch::tensor({{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}});
  CHECK(cube.sizes() == Shape{2, 2, 2});
  CHECK(cube.select(0, 1).select(0, 0).to_vector<int64_t>() == std::vector<int64_t>{5, 6});
  CHECK_THROWS_WITH(torch::tensor({{{1, 2}}, {{3}}}), Catch::Contains("row 1 has 1 values"));
  // Numbers are 0-dim; a list mixing integers and floats is f32, as torch.tensor([1, 2.5]).
  auto s = torch::tensor(2.5);
  CHECK((s.dim() == 0 && s.dtype() == torch::kFloat && s.item<float>() == 2.5f));
  auto l = torch::tensor(3, torch::kLong);
  CHECK((l.dim() == 0 && l.dtype() == torch::kLong && l.item<int64_t>() == 3));
  auto mixed = torch::tensor({1, 2.5});
  CHECK((mixed.dtype() == torch::kFloat && mixed.to_vector<float>() == std::vector<float>{1, 2.5}));
  CHECK(torch::tensor({true, 2}).dtype() == torch::kLong);
  CHECK(torch::full({2}, 7).dtype() == torch::kLong);  // an integer fill: i64, as libtorch's
  CHECK(torch::full({2}, 7.0).dtype() == torch::kFloat);
  CHECK(torch::full({2}, true).dtype() == torch::kBool);
  CHECK(torch::full({2}, 7, torch::kDouble).to_vector<double>() == std::vector<double>{7, 7});
  auto empty = torch::tensor({});
  CHECK((empty.sizes() == Shape{0} && empty.dtype() == torch::kFloat));
  // A std::vector: 1-D, its element type's dtype (floating ones f32 unless named).
  std::vector<float> v{1, 2, 3};
  CHECK(torch::tensor(v).to_vector<float>() == v);
  CHECK(torch::tensor(std::vector<int64_t>{4, 5}).dtype() == torch::kLong);
  CHECK(torch::tensor(std::vector<double>{0.5}, torch::kDouble).sizes() == Shape{1});
  // Asked to require grad, the tensor is a leaf that backward fills, nested or not.
  auto x = torch::tensor({{1.0, 2.0}}, torch::requires_grad());
  CHECK(x.is_leaf());
  (x * 3).sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 3});
}

namespace {
// As libtorch's examples write a module: forward takes its tensor by value.
struct Doubler : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x) { return x * 2; }
};
}  // namespace

TEST_CASE(
    "libtorch names: options, argmax, max of two tensors, checking macros, Sequential of "
    "modules of one's own",
    "[libtorch]") {
  auto x = torch::tensor({1.0, 3.0, 2.0}, torch::kDouble);
  auto z = torch::zeros({2}, x.options());
  CHECK((z.dtype() == torch::kDouble && z.device() == x.device()));
  CHECK(x.argmax().item<int64_t>() == 1);
  CHECK(x.argmin().item<int64_t>() == 0);
  CHECK(torch::tensor({{1, 9}, {7, 2}}).argmax().item<int64_t>() == 1);  // of the flattened
  auto a = torch::tensor({1.0, 5.0}), b = torch::tensor({4.0, 2.0});
  CHECK(torch::max(a, b).to_vector<float>() == std::vector<float>{4, 5});
  CHECK(torch::min(a, b).to_vector<float>() == std::vector<float>{1, 2});
  CHECK(a.max(b).to_vector<float>() == std::vector<float>{4, 5});
  CHECK(torch::max(a).item<float>() == 5);  // the single-tensor forms stay reductions
  CHECK(std::get<1>(torch::max(a, 0)).item<int64_t>() == 1);
  TORCH_CHECK(x.numel() == 3, "never thrown");
  AT_ASSERT(x.dim() == 1);
  CHECK_THROWS_WITH(
      [&] { TORCH_CHECK(x.numel() == 4, "numel is ", x.numel()); }(),
      Catch::Contains("Expected x.numel() == 4 to be true") && Catch::Contains("numel is 3"));
  CHECK_THROWS_WITH([&] { AT_ASSERT(x.dim() == 2); }(), Catch::Contains("x.dim() == 2"));
  // A Sequential calls each module through its own type: by-value forwards run, named or not.
  auto seq = std::make_shared<torch::nn::Sequential>(std::make_shared<Doubler>(),
                                                     std::make_shared<torch::nn::ReLU>());
  seq->push_back("twice", std::make_shared<Doubler>());
  CHECK(seq->size() == 3);
  CHECK(seq->named_children()[2].first == "twice");
  CHECK(seq->forward(torch::tensor({-1.0, 2.0})).to_vector<float>() == std::vector<float>{0, 8});
  std::shared_ptr<torch::nn::Module> erased = std::make_shared<torch::nn::Tanh>();
  seq->push_back(erased);  // through Module: its virtual forward
  CHECK(seq->forward(torch::tensor({0.0})).item<float>() == 0.0f);
}

TEST_CASE(
    "libtorch names: item() as a Scalar, conversions, one-dim reductions, inplace options, "
    "class-weighted CrossEntropyLoss",
    "[libtorch]") {
  auto f = torch::tensor({2.5});
  torch::Scalar s = f.item();
  CHECK((s.isFloatingPoint() && s.toFloat() == 2.5f && s.toDouble() == 2.5 && s.toLong() == 2));
  CHECK((f + f.item()).item<float>() == 5.0f);  // a Scalar stands where a number does
  auto big = torch::tensor({int64_t{1} << 60});
  CHECK((big.item().isIntegral(false) && big.item().toLong() == int64_t{1} << 60));
  CHECK(torch::tensor({true}).item().isIntegral(true));
  CHECK(!torch::tensor({true}).item().isIntegral(false));
  CHECK(torch::tensor({3}).item().to<int>() == 3);

  auto x = torch::ones({2}), y = torch::ones({2}, torch::kDouble);
  CHECK(x.type_as(y).dtype() == torch::kDouble);
  CHECK(x.to(y).dtype() == torch::kDouble);
  CHECK(x.toType(torch::kHalf).dtype() == torch::kHalf);
  auto n = y.new_zeros({3});
  CHECK((n.dtype() == torch::kDouble && n.sizes() == Shape{3} && n.sum().item<double>() == 0));
  CHECK(y.new_full({2}, 7).to_vector<double>() == std::vector<double>{7, 7});
  CHECK(y.new_ones({1}).item<double>() == 1);
  CHECK(y.new_empty({4}).sizes() == Shape{4});
  auto w = torch::ones({2}).requires_grad_();
  auto d = (w * 2).data();
  CHECK((!d.requires_grad() && d.to_vector<float>() == std::vector<float>{2, 2}));
  if (!torch::cuda::is_available()) CHECK_THROWS(x.cuda());
  CHECK(torch::cuda::cudnn_is_available() == torch::cuda::is_available());
  torch::cuda::manual_seed_all(11);  // the one default generator
  auto first = torch::randn({3});
  torch::manual_seed(11);
  CHECK(torch::equal(first, torch::randn({3})));

  auto m = torch::tensor({{1.0, 2.0, 3.0}, {4.0, 6.0, 8.0}});
  std::ostringstream printed;
  printed << m.sizes();
  CHECK(printed.str() == "[2, 3]");
  std::vector<int64_t> sizes = m.sizes().vec();
  CHECK(sizes == std::vector<int64_t>{2, 3});
  const auto kept = torch::zeros({4, 1}).sizes();  // its own copy, from a temporary
  CHECK(kept == Shape{4, 1});
  CHECK(torch::sum(m, 1).to_vector<float>() == std::vector<float>{6, 18});
  CHECK(torch::mean(m, 0).to_vector<float>() == std::vector<float>{2.5, 4, 5.5});
  CHECK(torch::amax(m, 1, true).sizes() == Shape{2, 1});
  CHECK(torch::var(m, 1).to_vector<float>() == std::vector<float>{1, 4});
  CHECK(torch::var(m, 1, /*unbiased=*/false).to_vector<float>()[1] == Approx(8.0 / 3));
  CHECK(m.var(1).to_vector<float>() == std::vector<float>{1, 4});
  CHECK(m.std(1).to_vector<float>() == std::vector<float>{1, 2});
  CHECK(torch::sum(m, {}).item<float>() == 24);  // {} is every dim, never dim 0

  // inplace is taken; the result is the same, computed out of place.
  auto r = std::make_shared<torch::nn::ReLU>(torch::nn::ReLUOptions().inplace(true));
  auto neg = torch::tensor({-1.0, 2.0});
  CHECK(r->forward(neg).to_vector<float>() == std::vector<float>{0, 2});
  CHECK(neg.to_vector<float>() == std::vector<float>{-1, 2});
  CHECK(torch::nn::LeakyReLUOptions().inplace(true).inplace());
  CHECK(torch::nn::DropoutOptions(0.2).inplace(true).p() == 0.2);

  // Class weights: each target's loss times its class's weight, the mean over their sum.
  auto logits = torch::tensor({{2.0, 0.0}, {0.0, 1.0}, {1.0, 1.0}});
  auto target = torch::tensor({0, 1, 1});
  auto cw = torch::tensor({1.0, 3.0});
  auto loss =
      torch::nn::CrossEntropyLoss(torch::nn::CrossEntropyLossOptions().weight(cw))(logits, target);
  const auto lp = torch::log_softmax(logits, 1).to_vector<float>();
  const double want = -(1 * lp[0] + 3 * lp[3] + 3 * lp[5]) / (1 + 3 + 3);
  CHECK(loss.item<double>() == Approx(want).epsilon(1e-6));
  CHECK_THROWS_WITH(torch::nn::functional::cross_entropy(
                        logits, target,
                        torch::nn::functional::CrossEntropyFuncOptions().weight(torch::ones({3}))),
                    Catch::Contains("weight must have one value per class (2)"));
}

TEST_CASE("libtorch names: sin, cos, log1p, rsqrt, floor, ceil, round, isnan, isinf",
          "[libtorch]") {
  const std::vector<double> v{-2.5, -1.5, -0.5, -0.3, 0.0, 0.5, 0.7, 1.5, 2.5, 3.9};
  auto x = torch::tensor(v, torch::kDouble);
  auto close = [](const torch::Tensor& got, double (*f)(double), const std::vector<double>& in) {
    const auto g = got.to_vector<double>();
    for (size_t i = 0; i < in.size(); ++i) {
      INFO("at " << in[i]);
      CHECK(g[i] == Approx(f(in[i])).margin(1e-15));
    }
  };
  close(
      x.sin(), [](double a) { return std::sin(a); }, v);
  close(
      torch::cos(x), [](double a) { return std::cos(a); }, v);
  close(
      x.floor(), [](double a) { return std::floor(a); }, v);
  close(
      x.ceil(), [](double a) { return std::ceil(a); }, v);
  // halves to even, as torch.round: -2.5 -> -2, -1.5 -> -2, 0.5 -> 0, 1.5 -> 2, 2.5 -> 2
  CHECK(x.round().to_vector<double>() == std::vector<double>{-2, -2, -0.0, -0.0, 0, 0, 1, 2, 2, 4});
  auto p = torch::tensor({1e-10, 0.5, 3.0}, torch::kDouble);
  close(p.log1p(), [](double a) { return std::log1p(a); }, {1e-10, 0.5, 3.0});
  close(p.rsqrt(), [](double a) { return 1 / std::sqrt(a); }, {1e-10, 0.5, 3.0});
  CHECK(torch::tensor({1e-10f}).log1p().item<float>() == Approx(1e-10f).epsilon(1e-6));
  CHECK(x.sign().to_vector<double>()[0] == -1);
  CHECK(!std::signbit(torch::tensor({-0.0}).abs().item<float>()));  // +0.0, as torch's
  auto special = torch::tensor({1.0, NAN, INFINITY, -INFINITY});
  CHECK(bools(special.isnan()) == std::vector<bool>{false, true, false, false});
  CHECK(bools(special.isinf()) == std::vector<bool>{false, false, true, true});
  CHECK(bools(torch::isinf(torch::tensor({1, 2}))) == std::vector<bool>{false, false});
  // Rounding passes no gradient.
  auto r = torch::tensor({0.4, 1.6}, torch::requires_grad());
  (r.floor() + r.ceil() + r.round()).sum().backward();
  CHECK(r.grad().to_vector<float>() == std::vector<float>{0, 0});
  // f16 and bf16 run in f32 and round once.
  CHECK(torch::tensor({0.5}, torch::kHalf).sin().item<float>() ==
        Approx(std::sin(0.5)).epsilon(1e-3));
}

TEST_CASE("libtorch names: max pooling with ceil_mode", "[libtorch]") {
  auto x = torch::arange(25, torch::kFloat).reshape({1, 1, 5, 5});
  auto pool = torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2).stride(2).ceil_mode(true));
  auto y = pool.forward(x);  // windows of rows and columns {0, 1}, {2, 3}, {4}
  CHECK(y.sizes() == Shape{1, 1, 3, 3});
  CHECK(y.flatten().to_vector<float>() == std::vector<float>{6, 8, 9, 16, 18, 19, 21, 23, 24});
  CHECK(torch::equal(torch::max_pool2d(x, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true), y));
  CHECK(torch::equal(torch::nn::functional::max_pool2d(
                         x, torch::nn::functional::MaxPool2dFuncOptions(2).ceil_mode(true)),
                     y));
  CHECK(torch::max_pool2d(x, 2).sizes() == Shape{1, 1, 2, 2});  // floor by default
  // Average pooling divides the last windows, clipped to the input, by what they hold.
  auto avg = torch::nn::AvgPool2d(torch::nn::AvgPool2dOptions(2).ceil_mode(true));
  CHECK(avg.forward(x).flatten().to_vector<float>() ==
        std::vector<float>{3, 5, 6.5, 13, 15, 16.5, 20.5, 22.5, 24});
  std::ostringstream os;
  os << avg;
  CHECK(os.str() == "AvgPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), ceil_mode=True)");
  // Padding counted or not, or a divisor of one's own.
  auto ones = torch::ones({1, 1, 2, 2});
  namespace F = torch::nn::functional;
  CHECK(F::avg_pool2d(ones, F::AvgPool2dFuncOptions(2).stride(1).padding(1))
            .flatten()
            .to_vector<float>() ==
        std::vector<float>{0.25, 0.5, 0.25, 0.5, 1, 0.5, 0.25, 0.5, 0.25});
  CHECK(
      F::avg_pool2d(ones, F::AvgPool2dFuncOptions(2).stride(1).padding(1).count_include_pad(false))
          .flatten()
          .to_vector<float>() == std::vector<float>(9, 1.0f));
  CHECK(torch::avg_pool2d(ones, 2, 1, 1, false, true, 2).flatten().to_vector<float>() ==
        std::vector<float>{0.5, 1, 0.5, 1, 2, 1, 0.5, 1, 0.5});
  CHECK_THROWS_WITH(torch::avg_pool2d(ones, 2, 1, 1, false, true, 0),
                    Catch::Contains("avg_pool2d: divisor_override must be non-zero"));
}

TEST_CASE("libtorch names: the 3-d layers", "[libtorch]") {
  namespace F = torch::nn::functional;
  torch::manual_seed(3);
  auto x = torch::randn({2, 3, 4, 5, 6});

  torch::nn::Conv3d conv(torch::nn::Conv3dOptions(3, 4, {2, 3, 3}).stride(2).padding({0, 1, 1}));
  auto sd = conv.state_dict();
  REQUIRE(sd.size() == 2);
  CHECK(sd.begin()->first == "weight");
  CHECK(conv.weight.sizes() == Shape{4, 3, 2, 3, 3});
  // torch's init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = 3 * 2 * 3 * 3.
  const double bound = 1.0 / std::sqrt(54.0);
  CHECK(conv.weight.abs().max().item<double>() <= bound);
  CHECK(conv.weight.abs().max().item<double>() > 0.8 * bound);
  auto y = conv.forward(x);
  CHECK(y.sizes() == Shape{2, 4, 2, 3, 3});
  CHECK(torch::equal(
      y, F::conv3d(x, conv.weight,
                   F::Conv3dFuncOptions().bias(conv.bias).stride(2).padding({0, 1, 1}))));
  std::ostringstream os;
  os << conv;
  CHECK(os.str() == "Conv3d(3, 4, kernel_size=(2, 3, 3), stride=(2, 2, 2), padding=(0, 1, 1))");
  // A kernel one deep is conv2d on every depth slice.
  auto w1 = torch::randn({5, 3, 1, 3, 2});
  auto by_slices = torch::stack({torch::conv2d(x.select(2, 0), w1.select(2, 0), {}, 1, {1, 0}),
                                 torch::conv2d(x.select(2, 1), w1.select(2, 0), {}, 1, {1, 0}),
                                 torch::conv2d(x.select(2, 2), w1.select(2, 0), {}, 1, {1, 0}),
                                 torch::conv2d(x.select(2, 3), w1.select(2, 0), {}, 1, {1, 0})},
                                2);
  CHECK(torch::allclose(torch::conv3d(x, w1, {}, 1, {0, 1, 0}), by_slices, 1e-5, 1e-5));
  CHECK_THROWS_WITH(torch::conv3d(x, torch::randn({4, 2, 1, 1, 1})),
                    Catch::Contains("conv3d: input must be (N, C, D, H, W) with C == "
                                    "weight.size(1) * groups == 2"));
  CHECK_THROWS_WITH(torch::conv3d(x, torch::randn({4, 3, 5, 1, 1})),
                    Catch::Contains("conv3d: input of spatial size (4, 5, 6) with padding (0, 0, "
                                    "0) is smaller than the dilated kernel (5, 1, 1)"));
  CHECK_THROWS_WITH(torch::conv3d(x, torch::randn({4, 3, 1, 3, 1}), {}, 1, 0, {1, 3, 1}),
                    Catch::Contains("is smaller than the dilated kernel (1, 7, 1)"));
  CHECK_THROWS_WITH(torch::conv3d(x, w1, torch::randn({3})),
                    Catch::Contains("conv3d: bias must be (5), got (3,)"));
  CHECK_THROWS_WITH(torch::conv3d(x, w1, {}, {1, 0, 1}),
                    Catch::Contains("conv3d: stride (1, 0, 1) and dilation (1, 1, 1) must be "
                                    "positive and padding (0, 0, 0) non-negative"));
  CHECK_THROWS_WITH(torch::conv3d(x, torch::randn({4, 3, 1, 1})),
                    Catch::Contains("conv3d: weight must be (C_out, C_in / groups, kD, kH, kW)"));

  torch::nn::MaxPool3d maxpool(torch::nn::MaxPool3dOptions({2, 2, 3}).stride(1));
  CHECK(torch::equal(maxpool.forward(x),
                     F::max_pool3d(x, F::MaxPool3dFuncOptions({2, 2, 3}).stride(1))));
  // The max over a box is the max of the maxima of its planes.
  auto m = maxpool.forward(x);
  CHECK(m.sizes() == Shape{2, 3, 3, 4, 4});
  CHECK(m.index({1, 2, 0, 3, 1}).item<float>() ==
        x.slice(2, 0, 2).slice(3, 3, 5).slice(4, 1, 4)[1][2].max().item<float>());
  torch::nn::AvgPool3d avgpool(torch::nn::AvgPool3dOptions(2).count_include_pad(false));
  auto a = avgpool.forward(x);
  CHECK(a.sizes() == Shape{2, 3, 2, 2, 3});
  CHECK(a.index({0, 1, 1, 0, 2}).item<float>() ==
        Approx(x.slice(2, 2, 4).slice(3, 0, 2).slice(4, 4, 6)[0][1].mean().item<float>()));
  os.str("");
  os << avgpool;
  CHECK(os.str() ==
        "AvgPool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(0, 0, 0), "
        "count_include_pad=False)");
  torch::nn::AdaptiveAvgPool3d gap(torch::nn::AdaptiveAvgPool3dOptions({1, 1, 1}));
  CHECK(torch::allclose(gap.forward(x).flatten(1), x.mean({2, 3, 4}), 1e-5, 1e-6));
  CHECK_THROWS_WITH(torch::max_pool3d(x, 2, 1, {2, 0, 0}),
                    Catch::Contains("max_pool3d: padding should be at most half of the kernel "
                                    "size, got padding (2, 0, 0) for kernel (2, 2, 2)"));
  CHECK_THROWS_WITH(torch::avg_pool3d(x, {5, 1, 1}),
                    Catch::Contains("avg_pool3d: the input (2, 3, 4, 5, 6) is too small for the "
                                    "kernel (5, 1, 1)"));
  CHECK_THROWS_WITH(torch::max_pool3d(x.flatten(2), 2),
                    Catch::Contains("max_pool3d: input must be (N, C, D, H, W) or (C, D, H, W)"));

  // Batch norm per channel over (N, D, H, W): mean 0 and biased variance 1.
  torch::nn::BatchNorm3d bn(torch::nn::BatchNorm3dOptions(3));
  auto z = bn.forward(x);
  CHECK(z.mean({0, 2, 3, 4}).abs().max().item<double>() < 1e-5);
  CHECK(torch::allclose(z.var({0, 2, 3, 4}, false), torch::ones({3}), 1e-3, 1e-3));
  CHECK_THROWS_WITH(bn.forward(x[0]),
                    Catch::Contains("BatchNorm3d(3): expected input (N, C, D, H, W) with C = 3"));
  torch::nn::InstanceNorm3d in(torch::nn::InstanceNormOptions(3));
  CHECK(in.forward(x).mean({2, 3, 4}).abs().max().item<double>() < 1e-5);

  // Dropout3d zeroes whole channels and scales the rest; evaluation passes the input.
  torch::nn::Dropout3d drop(torch::nn::DropoutOptions(0.5));
  auto d = drop.forward(torch::ones({4, 8, 2, 2, 2}));
  auto per_channel = d.flatten(2);
  auto kept = per_channel.amax(2);
  CHECK(kept.equal(per_channel.amin(2)));  // one value per channel
  CHECK(kept.equal(torch::amin(per_channel, {2})));
  CHECK_FALSE(kept.equal(kept.unsqueeze(0)));  // another shape
  CHECK(torch::equal(kept.eq(0).to(torch::kFloat) + kept.eq(2).to(torch::kFloat),
                     torch::ones({4, 8})));
  CHECK(kept.eq(0).any().item<bool>());
  CHECK(kept.eq(2).any().item<bool>());
  drop.eval();
  CHECK(torch::equal(drop.forward(x), x));
  CHECK(torch::equal(F::dropout3d(x, F::Dropout3dFuncOptions().p(0.3).training(false)), x));
}

TEST_CASE("libtorch names: in-place math, rand_like, randn_like, bernoulli", "[libtorch]") {
  auto x = torch::tensor({-1.5, -0.25, 0.5, 2.0});
  struct Case {
    const char* name;
    torch::Tensor& (torch::Tensor::*inplace)();
    torch::Tensor (*out_of_place)(const torch::Tensor&);
    bool positive;  // needs a positive input
  };
  const Case cases[] = {
      {"relu_", &torch::Tensor::relu_, torch::relu, false},
      {"sigmoid_", &torch::Tensor::sigmoid_, torch::sigmoid, false},
      {"tanh_", &torch::Tensor::tanh_, torch::tanh, false},
      {"exp_", &torch::Tensor::exp_, torch::exp, false},
      {"log_", &torch::Tensor::log_, torch::log, true},
      {"log1p_", &torch::Tensor::log1p_, torch::log1p, true},
      {"sqrt_", &torch::Tensor::sqrt_, torch::sqrt, true},
      {"rsqrt_", &torch::Tensor::rsqrt_, torch::rsqrt, true},
      {"sin_", &torch::Tensor::sin_, torch::sin, false},
      {"cos_", &torch::Tensor::cos_, torch::cos, false},
      {"floor_", &torch::Tensor::floor_, torch::floor, false},
      {"ceil_", &torch::Tensor::ceil_, torch::ceil, false},
      {"round_", &torch::Tensor::round_, torch::round, false},
      {"neg_", &torch::Tensor::neg_, torch::neg, false},
      {"abs_", &torch::Tensor::abs_, torch::abs, false},
      {"sign_", &torch::Tensor::sign_, torch::sign, false},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    auto in = c.positive ? x.abs() : x.clone();
    auto want = c.out_of_place(in);
    auto& same = (in.*c.inplace)();
    CHECK(&same == &in);
    CHECK(torch::equal(in, want));
  }
  auto p = x.clone();
  p.pow_(2);
  CHECK(torch::equal(p, x * x));
  auto leaf = torch::ones({2}, torch::requires_grad());
  CHECK_THROWS_WITH(leaf.relu_(), Catch::Contains("relu_"));
  auto ints = torch::tensor({-3, 4});
  CHECK(ints.abs_().to_vector<int64_t>() == std::vector<int64_t>{3, 4});
  CHECK_THROWS_WITH(ints.exp_(), Catch::Contains("exp_"));

  auto d = torch::ones({2, 3}, torch::kDouble);
  auto u = torch::rand_like(d), n = torch::randn_like(d);
  CHECK((u.dtype() == torch::kDouble && u.sizes() == Shape{2, 3} && n.sizes() == Shape{2, 3}));
  torch::manual_seed(5);
  auto first = torch::randn_like(d);
  torch::manual_seed(5);
  CHECK(torch::equal(first, torch::randn({2, 3}, torch::kDouble)));
  // bernoulli: 0 and 1 exactly where p is; about a fraction p of 1s elsewhere.
  auto probs = torch::cat({torch::zeros({100}), torch::ones({100}), torch::full({10000}, 0.3)});
  auto draws = torch::bernoulli(probs);
  CHECK(draws.dtype() == torch::kFloat);
  CHECK(draws.slice(0, 0, 100).sum().item<float>() == 0);
  CHECK(draws.slice(0, 100, 200).sum().item<float>() == 100);
  CHECK(draws.slice(0, 200, 10200).mean().item<double>() == Approx(0.3).margin(0.03));
  CHECK_THROWS_WITH(torch::bernoulli(torch::tensor({0.5, 1.5})), Catch::Contains("[0, 1]"));
}

TEST_CASE("libtorch names: assigning to an indexed view writes into the tensor", "[libtorch]") {
  auto t = torch::zeros({3});
  t[1] = 5;
  CHECK(t.to_vector<float>() == std::vector<float>{0, 5, 0});
  auto m = torch::zeros({2, 3});
  m[0] = torch::tensor({1.0, 2.0, 3.0});
  m[1][2] = 7;
  m.index({torch::indexing::Slice(), 0}) = -1;
  CHECK(m.to_vector<float>() == std::vector<float>{-1, 2, 3, -1, 0, 7});
  // A named tensor is a handle: assigning to it rebinds, writing nothing.
  auto a = torch::ones({2});
  auto b = a;
  b = torch::zeros({2});
  CHECK(a.to_vector<float>() == std::vector<float>{1, 1});
  auto leaf = torch::ones({2}, torch::requires_grad());
  CHECK_THROWS(leaf[0] = 3);  // in place on a tensor that requires grad, as every in-place op
}

TEST_CASE("libtorch names: the other activations as layers, F:: calls and functions",
          "[libtorch]") {
  namespace F = torch::nn::functional;
  // Values and gradients against PyTorch are golden cases (tests/ops/test_golden.cpp); here the
  // libtorch spellings reach the same ops, checked against closed forms at chosen points.
  auto x = torch::tensor({-4.0, -1.0, 0.0, 0.5, 2.0, 7.0});
  const std::vector<double> xs = {-4.0, -1.0, 0.0, 0.5, 2.0, 7.0};
  auto each = [&](double (*f)(double)) {
    std::vector<double> v;
    for (double e : xs) v.push_back(f(e));
    return torch::tensor(v).to(torch::kFloat);
  };
  require_close(torch::nn::SiLU()(x), each([](double v) { return v / (1.0 + std::exp(-v)); }), 1e-6,
                1e-6, "SiLU");
  require_close(torch::nn::ELU(torch::nn::ELUOptions().alpha(0.5))(x),
                each([](double v) { return v > 0 ? v : 0.5 * std::expm1(v); }), 1e-6, 1e-6, "ELU");
  require_close(F::elu(x, F::ELUFuncOptions().alpha(0.5)), torch::elu(x, 0.5), 0, 0, "F::elu");
  require_close(torch::nn::SELU()(x), torch::elu(x, 1.6732632423543772, 1.0507009873554805), 0, 0,
                "SELU");
  require_close(torch::nn::Softplus(torch::nn::SoftplusOptions().beta(2).threshold(5))(x),
                each([](double v) { return 2 * v > 5 ? v : std::log1p(std::exp(2 * v)) / 2; }),
                1e-6, 1e-6, "Softplus");
  require_close(torch::nn::Hardtanh(torch::nn::HardtanhOptions().min_val(-2).max_val(3))(x),
                torch::clamp(x, -2, 3), 0, 0, "Hardtanh");
  require_close(F::relu6(x), torch::clamp(x, 0, 6), 0, 0, "relu6");
  require_close(torch::nn::Mish()(x),
                each([](double v) { return v * std::tanh(std::log1p(std::exp(v))); }), 1e-6, 1e-6,
                "Mish");
  require_close(torch::nn::Hardswish()(x),
                each([](double v) { return v * std::min(std::max(v + 3, 0.0), 6.0) / 6; }), 1e-6,
                1e-6, "Hardswish");
  require_close(F::hardsigmoid(x),
                each([](double v) { return std::min(std::max(v + 3, 0.0), 6.0) / 6; }), 1e-6, 1e-6,
                "hardsigmoid");
  require_close(torch::nn::LogSigmoid()(x),
                each([](double v) { return std::log(1.0 / (1.0 + std::exp(-v))); }), 1e-6, 1e-6,
                "LogSigmoid");
  require_close(F::softsign(x), each([](double v) { return v / (1 + std::fabs(v)); }), 1e-6, 1e-6,
                "softsign");
  // log_sigmoid is finite far out, where the naive form is log(0)
  CHECK(std::isfinite(torch::log_sigmoid(torch::tensor({-200.0})).item<double>()));
  CHECK(torch::log_sigmoid(torch::tensor({-200.0})).item<double>() == Approx(-200.0));

  // PReLU: one slope per channel, a parameter that learns.
  auto prelu = torch::nn::PReLU(torch::nn::PReLUOptions().num_parameters(2).init(0.1));
  CHECK(prelu.named_parameters().size() == 1);
  auto y = torch::tensor({{{-1.0, 2.0}}, {{-3.0, 4.0}}}).reshape({1, 2, 2});
  require_close(prelu(y), torch::tensor({-0.1, 2.0, -0.3, 4.0}).reshape({1, 2, 2}), 1e-7, 1e-7,
                "PReLU");
  prelu(y).sum().backward();
  require_close(prelu.weight.grad(), torch::tensor({-1.0, -3.0}), 0, 0, "PReLU weight grad");
  CHECK_THROWS_WITH(torch::prelu(y, torch::ones({3})),
                    Catch::Contains("expected 1 or the input's 2 channels"));
  CHECK_THROWS_WITH(torch::nn::Hardtanh(torch::nn::HardtanhOptions().min_val(1).max_val(0)),
                    Catch::Contains("must be greater than min_val"));

  // In a Sequential, by name.
  auto seq = torch::nn::Sequential(
      std::make_shared<torch::nn::Linear>(3, 4), std::make_shared<torch::nn::SiLU>(),
      std::make_shared<torch::nn::Linear>(4, 2), std::make_shared<torch::nn::Hardswish>());
  CHECK(seq(torch::ones({5, 3})).sizes() == std::vector<int64_t>{5, 2});
  std::ostringstream os;
  os << torch::nn::ELU(torch::nn::ELUOptions().alpha(0.5)) << " "
     << torch::nn::Softplus(torch::nn::SoftplusOptions().beta(2));
  CHECK(os.str() == "ELU(alpha=0.5) Softplus(beta=2, threshold=20)");
}

TEST_CASE("libtorch names: math methods, in place too", "[libtorch]") {
  auto x = torch::tensor({0.25, 0.5, 2.0});
  require_close(x.expm1(), torch::exp(x) - 1, 1e-6, 1e-7, "expm1");
  require_close(x.reciprocal(), 1.0 / x, 0, 0, "reciprocal");
  require_close(x.log2(), torch::log(x) / std::log(2.0), 1e-6, 0, "log2");
  require_close(x.log10(), torch::log(x) / std::log(10.0), 1e-6, 0, "log10");
  require_close(x.tan(), torch::sin(x) / torch::cos(x), 1e-6, 0, "tan");
  require_close(x.atan().tan(), x, 1e-6, 0, "atan");
  CHECK(torch::erf(torch::tensor({0.0, 10.0})).to_vector<float>() == std::vector<float>{0, 1});
  auto y = x.clone();
  y.reciprocal_();
  require_close(y, x.reciprocal(), 0, 0, "reciprocal_");
  y.erf_();
  require_close(y, x.reciprocal().erf(), 0, 0, "erf_");
  // An integer input computes in f32, as torch's (log2(i64) is f32).
  CHECK(torch::tensor({1, 2}).log2().to_vector<float>() == std::vector<float>{0, 1});
  CHECK_THROWS_WITH(torch::tensor({1, 2}).log2_(), Catch::Contains("log2_"));
}

TEST_CASE("libtorch names: sort, topk, argsort, cumsum, prod, logsumexp", "[libtorch]") {
  auto x = torch::tensor({{3.0, 1.0, 2.0, 1.0}, {0.0, -1.0, 5.0, 5.0}});
  // structured bindings and std::get, as with libtorch's tuples
  auto [values, indices] = x.sort(1);
  require_close(values, torch::tensor({{1.0, 1.0, 2.0, 3.0}, {-1.0, 0.0, 5.0, 5.0}}), 0, 0, "sort");
  // equal values keep their order (1 at 1 before 1 at 3; 5 at 2 before 5 at 3), both ways
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{1, 3, 2, 0, 1, 0, 2, 3});
  CHECK(std::get<1>(torch::sort(x, 1, /*descending=*/true)).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 2, 1, 3, 2, 3, 0, 1});
  CHECK(x.argsort(0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 0, 0, 0, 1, 1});
  auto top = torch::topk(x, 2);
  CHECK(top.first.sizes() == std::vector<int64_t>{2, 2});
  CHECK(top.second.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 2, 3});
  CHECK(x.topk(1, 1, /*largest=*/false).first.to_vector<float>() == std::vector<float>{1, -1});
  // NaN sorts above every number, as torch.sort
  const double nan = std::nan("");
  auto withnan = torch::tensor({1.0, nan, -2.0});
  CHECK(withnan.argsort().to_vector<int64_t>() == std::vector<int64_t>{2, 0, 1});
  CHECK(withnan.argsort(-1, true).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 2});
  CHECK_THROWS_WITH(x.topk(5), Catch::Contains("topk: k (5) out of range"));
  // A small k takes a one-pass selection, a large one the sort: both give the sort's first k,
  // ties in position order and NaN first when largest, in every dtype.
  for (auto dt : {torch::kFloat, torch::kDouble, torch::kBFloat16, torch::kInt}) {
    torch::manual_seed(5);
    auto r = torch::randint(0, 7, {6, 40}).to(torch::kDouble);  // many ties
    if (dt != torch::kInt) r = torch::where(r == 6.0, torch::full({}, nan), r);
    r = r.to(dt);
    for (bool largest : {true, false}) {
      auto order = r.sort(1, largest).second;
      for (int64_t k : {1, 5, 16, 17, 39}) {
        INFO("dtype " << dt << " largest " << largest << " k " << k);
        CHECK(r.topk(k, 1, largest).second.to_vector<int64_t>() ==
              order.narrow(1, 0, k).contiguous().to_vector<int64_t>());
      }
    }
  }
  // Rows of 64 and more take a radix sort: its order against std::stable_sort of the values in
  // f64 (NaN above every number, -0 tied with 0), with ties, signed zeros, infinities and NaN,
  // in every dtype, both ways, whole and the first k.
  for (auto dt :
       {torch::kFloat, torch::kDouble, torch::kHalf, torch::kInt, torch::kLong, torch::kByte}) {
    torch::manual_seed(6);
    const bool floating = dt == torch::kFloat || dt == torch::kDouble || dt == torch::kHalf;
    auto r = torch::randint(-20, 20, {3, 300}).to(torch::kDouble);
    if (dt == torch::kByte) r = r.abs();
    if (floating) {
      r = r * 1000.5;  // past f16's integers: ties after rounding too
      r.index_put_({0, 7}, -0.0);
      r.index_put_({0, 8}, 0.0);
      r.index_put_({1, 0}, INFINITY);
      r.index_put_({1, 1}, -INFINITY);
      r.index_put_({2, 5}, nan);
      r.index_put_({2, 299}, nan);
    }
    r = r.to(dt);
    const auto values = r.to(torch::kDouble).to_vector<double>();
    for (bool descending : {false, true}) {
      std::vector<int64_t> expected;
      for (int64_t row = 0; row < 3; ++row) {
        std::vector<int64_t> order(300);
        std::iota(order.begin(), order.end(), 0);
        const double* v = values.data() + row * 300;
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          if (std::isnan(v[a]) || std::isnan(v[b]))
            return descending ? std::isnan(v[a]) && !std::isnan(v[b])
                              : !std::isnan(v[a]) && std::isnan(v[b]);
          return descending ? v[a] > v[b] : v[a] < v[b];
        });
        expected.insert(expected.end(), order.begin(), order.end());
      }
      INFO("dtype " << dt << " descending " << descending);
      CHECK(r.argsort(1, descending).to_vector<int64_t>() == expected);
      auto first_k = r.topk(50, 1, /*largest=*/descending).second;
      for (int64_t row = 0; row < 3; ++row)
        CHECK(
            first_k.select(0, row).to_vector<int64_t>() ==
            std::vector<int64_t>(expected.begin() + row * 300, expected.begin() + row * 300 + 50));
    }
  }
  // a 0-dim tensor sorts as itself
  CHECK(torch::tensor(4.0).sort().first.item<double>() == 4.0);
  CHECK(torch::tensor(4.0).sort().first.dim() == 0);

  // cumsum: integers sum in i64, or in the dtype asked for
  auto i = torch::tensor({1, 2, 3}).to(torch::kInt);
  CHECK(i.cumsum(0).dtype() == torch::kLong);
  CHECK(i.cumsum(0).to_vector<int64_t>() == std::vector<int64_t>{1, 3, 6});
  CHECK(torch::cumsum(i, 0, torch::kFloat).dtype() == torch::kFloat);
  CHECK(torch::tensor({true, false, true}).cumsum(0).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 1, 2});
  // the gradient of a cumsum sums the gradients after each element
  auto c = torch::tensor({1.0, 2.0, 3.0}, torch::requires_grad());
  (c.cumsum(0) * torch::tensor({1.0, 10.0, 100.0})).sum().backward();
  CHECK(c.grad().to_vector<float>() == std::vector<float>{111, 110, 100});

  // cumprod: running products, integers in i64; the gradient holds at a zero
  CHECK(torch::tensor({2, 3, 4}).to(torch::kInt).cumprod(0).to_vector<int64_t>() ==
        std::vector<int64_t>{2, 6, 24});
  auto cp = torch::tensor({2.0, 0.0, 3.0}, torch::requires_grad());
  cp.cumprod(0).sum().backward();  // d/dx of x0 + x0 x1 + x0 x1 x2 at (2, 0, 3)
  CHECK(cp.grad().to_vector<float>() == std::vector<float>{1, 2 + 6, 0});
  // An infinity after the zero: out = (2, 0, NaN); the terms of x0's gradient through the
  // products holding the zero are 0 (torch 1.13: 1, inf, 0), x1's is 2 + 2 inf.
  const float inf = std::numeric_limits<float>::infinity();
  auto ci = torch::tensor({2.0f, 0.0f, inf}, torch::requires_grad());
  ci.cumprod(0).sum().backward();
  CHECK(ci.grad().to_vector<float>() == std::vector<float>{1, inf, 0});

  // in-place view changes: every handle sees the new shape; refused where grad is required
  auto v = torch::arange(6).reshape({2, 3});
  auto same = v;
  v.unsqueeze_(0);
  CHECK(same.sizes() == std::vector<int64_t>{1, 2, 3});
  v.squeeze_();
  CHECK(v.sizes() == std::vector<int64_t>{2, 3});
  v.t_();
  CHECK(v.sizes() == std::vector<int64_t>{3, 2});
  CHECK(v.contiguous().to_vector<int64_t>() == std::vector<int64_t>{0, 3, 1, 4, 2, 5});
  v.transpose_(0, 1).unsqueeze_(2).squeeze_(2);
  CHECK(v.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  CHECK_THROWS_WITH(cp.unsqueeze_(0), Catch::Contains("unsqueeze_: changes the shape of a tensor "
                                                      "that requires grad"));

  // prod: of all, along a dim, of integers (i64), of an empty dim (1)
  CHECK(x.prod().item<double>() == 0.0);
  CHECK(x.prod(1).to_vector<float>() == std::vector<float>{6, -0.0f});
  CHECK(torch::tensor({2, 3, 4}).prod().item<int64_t>() == 24);
  CHECK(torch::tensor({2, 3, 4}).prod().dtype() == torch::kLong);
  CHECK(torch::ones({2, 0}).prod(1).to_vector<float>() == std::vector<float>{1, 1});
  // integer products wrap around, as torch's: (2^40)^3 = 2^120 = 0 modulo 2^64
  CHECK(torch::full({3}, std::ldexp(1.0, 40), torch::kLong).prod().item<int64_t>() == 0);

  // logsumexp: no overflow, -inf rows stay -inf
  CHECK(torch::logsumexp(torch::tensor({1000.0, 1000.0}), 0).item<double>() ==
        Approx(1000.0 + std::log(2.0)));
  auto ninf = -std::numeric_limits<double>::infinity();
  CHECK(torch::tensor({ninf, ninf}).logsumexp(0).item<double>() == ninf);
}

TEST_CASE("libtorch names: masked_select, nonzero, randperm, multinomial", "[libtorch]") {
  auto x = torch::tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}, torch::requires_grad());
  auto picked = torch::masked_select(x, torch::tensor({true, false, true}));  // broadcast
  CHECK(picked.to_vector<float>() == std::vector<float>{1, 3, 4, 6});
  picked.sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{1, 0, 1, 1, 0, 1});
  CHECK_THROWS_WITH(x.masked_select(torch::ones({3})), Catch::Contains("must be a bool tensor"));

  auto nz = torch::tensor({{0, 3}, {5, 0}}).nonzero();
  CHECK(nz.sizes() == std::vector<int64_t>{2, 2});
  CHECK(nz.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1, 0});
  CHECK(torch::zeros({3}).nonzero().sizes() == std::vector<int64_t>{0, 1});
  CHECK(torch::tensor(2.0).nonzero().sizes() == std::vector<int64_t>{1, 0});

  // randperm: a permutation, the same for the same seed
  torch::manual_seed(5);
  auto p = torch::randperm(100);
  CHECK(p.dtype() == torch::kLong);
  CHECK(std::get<0>(p.sort()).to_vector<int64_t>() == torch::arange(100).to_vector<int64_t>());
  CHECK(p.to_vector<int64_t>() != torch::arange(100).to_vector<int64_t>());
  torch::manual_seed(5);
  CHECK(torch::randperm(100).to_vector<int64_t>() == p.to_vector<int64_t>());
  CHECK(torch::randperm(0).numel() == 0);

  // multinomial with replacement: frequencies near the weights (20000 draws: each count within
  // 5 standard deviations of its expectation, a bound a correct sampler misses with
  // probability ~1e-6)
  torch::manual_seed(7);
  auto w = torch::tensor({1.0, 0.0, 3.0, 6.0});
  const int64_t n = 20000;
  auto draws = torch::multinomial(w, n, /*replacement=*/true);
  CHECK(draws.sizes() == std::vector<int64_t>{n});
  std::vector<int64_t> counts(4, 0);
  for (int64_t d : draws.to_vector<int64_t>()) ++counts.at(static_cast<size_t>(d));
  CHECK(counts[1] == 0);
  for (int k : {0, 2, 3}) {
    const double q = w[k].item<double>() / 10.0, mean = q * n, sd = std::sqrt(n * q * (1 - q));
    CHECK(std::abs(counts[k] - mean) < 5 * sd);
  }
  // without replacement: distinct categories, never a zero-weight one; the first pick follows
  // the weights too
  std::vector<int64_t> first(4, 0);
  for (int r = 0; r < 2000; ++r) {
    auto s = torch::multinomial(w, 3).to_vector<int64_t>();
    CHECK(std::set<int64_t>(s.begin(), s.end()).size() == 3);
    CHECK(std::find(s.begin(), s.end(), 1) == s.end());
    ++first.at(static_cast<size_t>(s[0]));
  }
  CHECK(std::abs(first[3] - 1200) < 5 * std::sqrt(2000 * 0.6 * 0.4));
  // Many categories: the draws are counted in chunks (here two), joined in order.
  auto sparse = torch::zeros({3000});
  sparse[17] = 1.0;
  sparse[2999] = 3.0;
  auto far = torch::multinomial(sparse, 2000, /*replacement=*/true).to_vector<int64_t>();
  CHECK(far.size() == 2000);
  const auto at_17 = std::count(far.begin(), far.end(), 17);
  CHECK(at_17 + std::count(far.begin(), far.end(), 2999) == 2000);
  CHECK(std::abs(at_17 - 500) < 5 * std::sqrt(2000 * 0.25 * 0.75));
  auto rows = torch::multinomial(torch::ones({3, 5}), 2);
  CHECK(rows.sizes() == std::vector<int64_t>{3, 2});
  CHECK_THROWS_WITH(torch::multinomial(w, 4), Catch::Contains("too few to sample"));
  CHECK_THROWS_WITH(torch::multinomial(torch::tensor({-1.0, 2.0}), 1),
                    Catch::Contains("nonnegative"));
}

TEST_CASE("libtorch names: ModuleDict, InstanceNorm2d, one_hot, normalize, tril, GradMode",
          "[libtorch]") {
  namespace F = torch::nn::functional;
  // ModuleDict: registered under its keys in insertion order; insert replaces in place.
  auto dict = std::make_shared<torch::nn::ModuleDict>(
      std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{
          {"encoder", std::make_shared<torch::nn::Linear>(4, 3)},
          {"act", std::make_shared<torch::nn::ReLU>()}});
  dict->insert("decoder", std::make_shared<torch::nn::Linear>(3, 2));
  CHECK(dict->keys() == std::vector<std::string>{"encoder", "act", "decoder"});
  CHECK(dict->size() == 3);
  CHECK(dict->contains("act"));
  auto names = dict->named_parameters().keys();
  CHECK(names == std::vector<std::string>{"encoder.weight", "encoder.bias", "decoder.weight",
                                          "decoder.bias"});
  auto y = dict->at<torch::nn::Linear>("decoder")->forward((*dict)["act"]->forward(
      dict->at<torch::nn::Linear>("encoder")->forward(torch::ones({2, 4}))));
  CHECK(y.sizes() == std::vector<int64_t>{2, 2});
  dict->insert("act", std::make_shared<torch::nn::SiLU>());
  CHECK(dict->keys() == std::vector<std::string>{"encoder", "act", "decoder"});
  CHECK((*dict)["act"]->type_name() == "SiLU");
  int visited = 0;
  for (const auto& item : *dict) visited += item.value() != nullptr;
  CHECK(visited == 3);
  CHECK(dict->pop("encoder")->type_name() == "Linear");
  CHECK(dict->named_parameters().size() == 2);
  CHECK_THROWS_WITH((*dict)["encoder"], Catch::Contains("no module 'encoder'"));
  CHECK_THROWS_WITH(dict->at<torch::nn::Linear>("act"), Catch::Contains("not of the type"));
  dict->clear();
  CHECK(dict->empty());
  CHECK(dict->parameters().empty());

  // InstanceNorm2d: each sample's channels over their own positions (group norm, a group per
  // channel); PyTorch's values are a golden case of that op.
  torch::manual_seed(3);
  auto x = torch::randn({2, 3, 4, 4}) * 3 + 1;
  auto in = torch::nn::InstanceNorm2d(torch::nn::InstanceNormOptions(3).affine(true));
  CHECK(in.named_parameters().keys() == std::vector<std::string>{"weight", "bias"});
  auto z = in(x);
  require_close(z.mean({2, 3}), torch::zeros({2, 3}), 0, 1e-5, "instance means");
  require_close(z.var({2, 3}, /*unbiased=*/false), torch::ones({2, 3}), 1e-3, 1e-3,
                "instance variances");
  {
    // Running statistics: torch 1.13's InstanceNorm2d(3, affine=True, track_running_stats=True)
    // after two training batches, its state dict's keys, and its eval output.
    auto tracked = torch::nn::InstanceNorm2d(
        torch::nn::InstanceNormOptions(3).affine(true).track_running_stats(true));
    {
      torch::NoGradGuard no_grad;
      tracked.weight.copy_(torch::tensor({1.0, 2.0, 0.5}));
      tracked.bias.copy_(torch::tensor({0.0, 1.0, -1.0}));
    }
    auto xs = (torch::arange(36).to(torch::kFloat) * 0.37).sin().reshape({2, 3, 2, 3}) * 3 + 1;
    tracked(xs);
    tracked(xs * 2);
    std::vector<std::string> keys;
    for (const auto& item : tracked.state_dict()) keys.push_back(item.key());
    CHECK(keys == std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                           "num_batches_tracked"});
    require_close(tracked.running_mean, torch::tensor({0.91226816, 0.15777922, -0.17239943}), 1e-5,
                  1e-6, "running mean");
    require_close(tracked.running_var, torch::tensor({1.27582538, 2.37832403, 1.79289269}), 1e-5,
                  1e-6, "running var");
    CHECK(tracked.num_batches_tracked.item<int64_t>() == 0);  // torch's stays 0 too
    tracked.eval();
    require_close(tracked(xs).index({0, torch::indexing::Slice(), 0}).reshape({-1}),
                  torch::tensor({0.07767117, 1.03811276, 1.86856282, 5.19134855, 4.13108158,
                                 2.79486847, -1.64115095, -1.67712069, -1.56219232}),
                  1e-5, 1e-6, "eval output");
  }
  CHECK_THROWS_WITH(in(torch::ones({2, 4, 4, 4})), Catch::Contains("expected input (N, 3, H, W)"));

  // one_hot and normalize
  auto oh = F::one_hot(torch::tensor({2, 0}), 3);
  CHECK(oh.dtype() == torch::kLong);
  CHECK(oh.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 0, 0});
  CHECK(torch::one_hot(torch::tensor({1, 3})).sizes() == std::vector<int64_t>{2, 4});
  CHECK_THROWS_WITH(torch::one_hot(torch::tensor({1, 3}), 3),
                    Catch::Contains("is not smaller than num_classes (3)"));
  CHECK_THROWS_WITH(torch::one_hot(torch::tensor({-1})), Catch::Contains("nonnegative"));
  auto v = F::normalize(torch::tensor({{3.0, 4.0}, {0.0, 0.0}}), F::NormalizeFuncOptions().dim(1));
  require_close(v, torch::tensor({{0.6, 0.8}, {0.0, 0.0}}), 1e-6, 0, "normalize (a zero row too)");

  // tril / triu and the remainders
  auto m = torch::ones({3, 3});
  CHECK(m.tril().to_vector<float>() == std::vector<float>{1, 0, 0, 1, 1, 0, 1, 1, 1});
  CHECK(torch::triu(m, 1).to_vector<float>() == std::vector<float>{0, 1, 1, 0, 0, 1, 0, 0, 0});
  CHECK(torch::tensor({-7, 7}).fmod(3).to_vector<int64_t>() == std::vector<int64_t>{-1, 1});
  CHECK(torch::tensor({-7, 7}).remainder(3).to_vector<int64_t>() == std::vector<int64_t>{2, 1});
  CHECK(torch::tensor({-7.5}).remainder(2).item<double>() == 0.5);
  CHECK_THROWS_WITH(torch::tensor({1, 2}).fmod(torch::tensor({1, 0})),
                    Catch::Contains("integer division by zero"));
  CHECK(std::isnan(torch::tensor({1.0}).fmod(0.0).item<double>()));
  CHECK(torch::atan2(torch::tensor({1.0}), torch::tensor({-1.0})).item<double>() ==
        Approx(3 * M_PI / 4));

  // GradMode
  CHECK(torch::GradMode::is_enabled());
  torch::GradMode::set_enabled(false);
  CHECK_FALSE((torch::ones({1}, torch::requires_grad()) * 2).requires_grad());
  torch::GradMode::set_enabled(true);
  CHECK((torch::ones({1}, torch::requires_grad()) * 2).requires_grad());
}

TEST_CASE("libtorch names: einsum against matmul, and its errors", "[libtorch]") {
  // Values and gradients against PyTorch are golden cases; here the common forms against the
  // products they spell.
  torch::manual_seed(2);
  auto q = torch::randn({2, 3, 4, 5}), k = torch::randn({2, 3, 6, 5});
  require_close(torch::einsum("bhqd,bhkd->bhqk", {q, k}), torch::matmul(q, k.transpose(-2, -1)),
                1e-5, 1e-5, "attention scores");
  auto a = torch::randn({3, 4}), b = torch::randn({4, 2});
  require_close(torch::einsum("ij,jk", {a, b}), torch::mm(a, b), 1e-5, 1e-5, "implicit mm");
  require_close(torch::einsum("ij->", {a}), a.sum(), 1e-5, 1e-5, "sum of all");
  CHECK_THROWS_WITH(torch::einsum("ij,jk->ik", {a}), Catch::Contains("names 2 operands, 1 given"));
  CHECK_THROWS_WITH(torch::einsum("ii->i", {torch::ones({3, 3})}),
                    Catch::Contains("appears twice in operand 0 (a diagonal)"));
  CHECK_THROWS_WITH(torch::einsum("ijk->i", {a}),
                    Catch::Contains("has 2 dims, but \"ijk\" names 3"));
  CHECK_THROWS_WITH(torch::einsum("ij,jk->ik", {a, torch::ones({3, 2})}),
                    Catch::Contains("subscript 'j' has size 4 in one operand and 3"));
  CHECK_THROWS_WITH(torch::einsum("ij->k", {a}), Catch::Contains("'k' is in no operand"));
  CHECK_THROWS_WITH(torch::einsum("i1->i", {a}), Catch::Contains("is not a subscript"));
}

TEST_CASE("libtorch names: MultiheadAttention, its parameters, masks and modes", "[libtorch]") {
  namespace F = torch::nn::functional;
  torch::manual_seed(3);
  auto mha = std::make_shared<torch::nn::MultiheadAttention>(
      torch::nn::MultiheadAttentionOptions(8, 2).dropout(0.5));
  // torch's state_dict: the module's own parameters, then out_proj's
  std::vector<std::string> keys;
  for (const auto& item : mha->state_dict()) keys.push_back(item.key());
  CHECK(keys == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                         "out_proj.bias"});
  CHECK(mha->in_proj_weight.sizes() == std::vector<int64_t>{24, 8});
  // torch's initialization: zero biases, Xavier-uniform projections within sqrt(6 / (8 + 24))
  CHECK(mha->in_proj_bias.abs().max().item<double>() == 0.0);
  CHECK(mha->out_proj->bias.abs().max().item<double>() == 0.0);
  CHECK(mha->in_proj_weight.abs().max().item<double>() <= std::sqrt(6.0 / 32.0));
  CHECK(mha->in_proj_weight.std().item<double>() > 0.2);

  auto x = torch::randn({5, 3, 8});  // (L, N, E)
  auto o = F::MultiheadAttentionForwardFuncOptions(8, 2, mha->in_proj_weight, mha->in_proj_bias, {},
                                                   {}, false, 0.5, mha->out_proj->weight,
                                                   mha->out_proj->bias)
               .training(false);
  mha->eval();  // no dropout: the module is the functional form with its weights
  auto [out, weights] = mha->forward(x, x, x);
  CHECK(out.sizes() == std::vector<int64_t>{5, 3, 8});
  CHECK(weights.sizes() == std::vector<int64_t>{3, 5, 5});
  require_close(out, std::get<0>(F::multi_head_attention_forward(x, x, x, o)), 0, 0, "module");
  // each query's weights are a distribution over the keys
  require_close(weights.sum(-1), torch::ones({3, 5}), 1e-6, 1e-6, "weights sum to 1");
  // self-attention's one packed projection gives what three separate ones give
  auto [out3, w3] = mha->forward(x, x.clone(), x.clone());
  require_close(out3, out, 1e-6, 1e-6, "packed projection");
  // per-head weights average to the averaged ones
  auto per_head = std::get<1>(mha->forward(x, x, x, {}, true, {}, /*average=*/false));
  CHECK(per_head.sizes() == std::vector<int64_t>{3, 2, 5, 5});
  require_close(per_head.mean(1), weights, 1e-6, 1e-6, "per-head weights");
  // need_weights false gives an undefined tensor
  CHECK_FALSE(std::get<1>(mha->forward(x, x, x, {}, false)).defined());

  // a left-out key gets zero weight; a causal mask, zero weight above the diagonal
  auto padding = torch::zeros({3, 5}, torch::kBool);
  padding.index_put_({1, 4}, true);
  auto causal = torch::ones({5, 5}, torch::kBool).triu(1);
  auto masked = std::get<1>(mha->forward(x, x, x, padding, true, causal));
  CHECK(masked.index({1, torch::indexing::Slice(), 4}).abs().max().item<double>() == 0.0);
  CHECK(masked.triu(1).abs().max().item<double>() == 0.0);
  require_close(masked.sum(-1), torch::ones({3, 5}), 1e-6, 1e-6, "masked weights sum to 1");
  // a floating mask of -inf is the boolean mask
  auto as_float = torch::zeros({5, 5}).masked_fill(causal, -INFINITY);
  require_close(std::get<0>(mha->forward(x, x, x, {}, true, as_float)),
                std::get<0>(mha->forward(x, x, x, {}, true, causal)), 0, 0, "float mask");

  // training: dropout on the weights changes the output; every parameter gets a gradient
  mha->train();
  auto [trained, tw] = mha->forward(x, x, x);
  CHECK((trained - out).abs().max().item<double>() > 1e-3);
  trained.pow(2).sum().backward();
  for (const auto& p : mha->parameters()) CHECK(p.grad().abs().sum().item<double>() > 0);

  // other key and value sizes: separate projections, and torch's extra biases and zero slot
  auto kv = std::make_shared<torch::nn::MultiheadAttention>(
      torch::nn::MultiheadAttentionOptions(8, 4).kdim(5).vdim(7).add_bias_kv(true).add_zero_attn(
          true));
  keys.clear();
  for (const auto& item : kv->state_dict()) keys.push_back(item.key());
  CHECK(keys == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight",
                                         "in_proj_bias", "bias_k", "bias_v", "out_proj.weight",
                                         "out_proj.bias"});
  auto [kv_out, kv_w] = kv->forward(x, torch::randn({6, 3, 5}), torch::randn({6, 3, 7}));
  CHECK(kv_out.sizes() == std::vector<int64_t>{5, 3, 8});
  CHECK(kv_w.sizes() == std::vector<int64_t>{3, 5, 8});  // 6 keys, bias_k's and the zero slot
  // unbatched (L, E)
  auto [single, single_w] = mha->forward(x.select(1, 0), x.select(1, 0), x.select(1, 0));
  CHECK(single.sizes() == std::vector<int64_t>{5, 8});
  CHECK(single_w.sizes() == std::vector<int64_t>{5, 5});

  // bad input: a clear error
  CHECK_THROWS_WITH(torch::nn::MultiheadAttention(10, 3),
                    Catch::Contains("embed_dim (10) must split into num_heads (3)"));
  CHECK_THROWS_WITH(mha->forward(x, x, x, torch::zeros({3, 4}, torch::kBool)),
                    Catch::Contains("key_padding_mask must be (3, 5), got (3, 4)"));
  CHECK_THROWS_WITH(mha->forward(x, x, x, {}, true, torch::zeros({4, 5})),
                    Catch::Contains("a 2-d attn_mask must be (5, 5), got (4, 5)"));
  CHECK_THROWS_WITH(mha->forward(x, torch::randn({4, 2, 8}), torch::randn({4, 2, 8})),
                    Catch::Contains("query's batch N = 3"));
  CHECK_THROWS_WITH(mha->forward(torch::randn({5, 3, 6}), x, x),
                    Catch::Contains("query's embedding size is 6"));
}

TEST_CASE("libtorch names: AnyModule holds any module and calls its own forward", "[libtorch]") {
  torch::nn::AnyModule linear(std::make_shared<torch::nn::Linear>(3, 4));
  auto x = torch::randn({2, 3});
  CHECK(linear.forward(x).sizes() == std::vector<int64_t>{2, 4});
  require_close(linear.forward(x), linear.get<torch::nn::Linear>().forward(x), 0, 0, "forward");
  CHECK(linear.ptr()->type_name() == "Linear");
  CHECK(linear.ptr<torch::nn::Linear>()->weight.sizes() == std::vector<int64_t>{4, 3});
  torch::nn::AnyModule doubler(std::make_shared<Doubler>());
  require_close(doubler.forward(x), x * 2, 0, 0, "by-value forward");
  CHECK_THROWS_WITH(linear.ptr<torch::nn::Conv2d>(), Catch::Contains("not of the type asked for"));
  torch::nn::AnyModule empty;
  CHECK(empty.is_empty());
  CHECK_THROWS_WITH(empty.forward(x), Catch::Contains("forward on an empty AnyModule"));
}

TEST_CASE("libtorch names: one-number sizes, from_blob's forms, dtype arguments, conversions",
          "[libtorch]") {
  using V = std::vector<float>;
  auto x = torch::arange(6).to(torch::kFloat);
  CHECK(x.view({2, 3}).view(-1).sizes().vec() == std::vector<int64_t>{6});
  CHECK(x.view({3, 2}).reshape(-1).to_vector<float>() == x.to_vector<float>());
  CHECK(torch::tensor({1.0, 2.0}).repeat(2).to_vector<float>() == V{1, 2, 1, 2});
  CHECK(torch::tensor({1.0, 2.0, 3.0}).flip(0).to_vector<float>() == V{3, 2, 1});
  CHECK(x.view({2, 3}).ndimension() == 2);
  CHECK(x.data_ptr() == static_cast<void*>(x.data_ptr<float>()));
  torch::IntArrayRef sizes = x.view({2, 3}).sizes();
  CHECK(sizes == std::vector<int64_t>{2, 3});
  torch::TensorList list{x, x};
  CHECK(torch::cat(list).size(0) == 12);

  // from_blob without a dtype is f32 and views the caller's memory; with options or a deleter.
  std::vector<float> buf{1, 2, 3, 4};
  auto b = torch::from_blob(buf.data(), {2, 2});
  CHECK(b.dtype() == torch::kFloat32);
  buf[3] = 9;
  CHECK(b[1][1].item<float>() == 9);
  std::vector<double> dbuf{1.5, 2.5};
  auto d = torch::from_blob(dbuf.data(), {2}, torch::TensorOptions().dtype(torch::kFloat64));
  CHECK(d.dtype() == torch::kFloat64);
  CHECK(d.sum().item<double>() == 4.0);
  bool released = false;
  {
    auto e = torch::from_blob(buf.data(), {4}, [&](void*) { released = true; });
  }
  CHECK(released);

  // Reductions and softmax computed in another dtype: the input converted first.
  auto big = torch::full({3}, 16777216.0);  // 2^24: adding 1 in f32 is lost, not in f64
  auto with_one = torch::cat({big, torch::ones({1})});
  CHECK(with_one.sum(torch::kDouble).item<double>() == 3 * 16777216.0 + 1);
  CHECK(with_one.sum(torch::kDouble).dtype() == torch::kFloat64);
  CHECK(torch::sum(x.view({2, 3}), 1, false, torch::kDouble).to_vector<double>() ==
        std::vector<double>{3, 12});
  CHECK(x.mean(torch::kDouble).item<double>() == 2.5);
  CHECK(x.view({2, 3}).mean(0, true, torch::kDouble).sizes().vec() == std::vector<int64_t>{1, 3});
  auto s = x.softmax(-1, torch::kDouble);
  CHECK(s.dtype() == torch::kFloat64);
  CHECK(torch::allclose(s, torch::softmax(x.to(torch::kFloat64), -1), 0, 0));
  CHECK(torch::log_softmax(x, 0, torch::kDouble).dtype() == torch::kFloat64);

  // to(TensorOptions): the options' dtype and device, each where named.
  CHECK(x.to(torch::TensorOptions().dtype(torch::kFloat64)).dtype() == torch::kFloat64);
  CHECK(x.to(torch::TensorOptions().device(torch::kCPU)).dtype() == torch::kFloat32);
  CHECK(x.to(torch::kCPU).is_cpu());
  CHECK(x.to(x.options()).to_vector<float>() == x.to_vector<float>());

  // randint with an upper bound only: [0, high), i64.
  auto r = torch::randint(10, {1000});
  CHECK(r.dtype() == torch::kInt64);
  CHECK(r.min().item<int64_t>() >= 0);
  CHECK(r.max().item<int64_t>() <= 9);
  CHECK(torch::randint(3, {5}, torch::kInt32).dtype() == torch::kInt32);

  // Without a GPU, synchronize says so.
  if (!torch::cuda::is_available()) CHECK_THROWS(torch::cuda::synchronize());
}

TEST_CASE("libtorch names: masks and updates in place, clamp_min, isclose, lerp, addcmul",
          "[libtorch]") {
  using V = std::vector<float>;
  auto y = torch::tensor({-1.0, 2.0, -3.0});
  y.masked_fill_(y < 0, 0.5);
  CHECK(y.to_vector<float>() == V{0.5, 2, 0.5});
  auto leaf = torch::ones({2}, torch::requires_grad());
  CHECK_THROWS_WITH(leaf.masked_fill_(leaf > 0, 0.0), Catch::Contains("masked_fill_"));

  auto c = torch::tensor({-2.0, 0.5, 3.0});
  CHECK(c.clamp_min(0).to_vector<float>() == V{0, 0.5, 3});
  CHECK(c.clamp_max(1).to_vector<float>() == V{-2, 0.5, 1});
  CHECK(torch::clamp_min(c, 1).to_vector<float>() == V{1, 1, 3});
  c.clamp_min_(0);
  CHECK(c.to_vector<float>() == V{0, 0.5, 3});

  // isclose: |a - b| <= atol + rtol |b|, equal infinities, NaN only with equal_nan.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  auto a = torch::tensor({1.0f, 1.0f, inf, -inf, nan, 100.0f});
  auto b = torch::tensor({1.0f + 5e-6f, 1.1f, inf, inf, nan, 100.001f});
  CHECK(bools(torch::isclose(a, b)) == std::vector<bool>{true, false, true, false, false, true});
  CHECK(bools(a.isclose(b, 1e-5, 1e-8, true)) ==
        std::vector<bool>{true, false, true, false, true, true});
  CHECK(bools(torch::isfinite(a)) == std::vector<bool>{true, true, false, false, false, true});
  CHECK(bools(torch::tensor({1, 2}).isfinite()) == std::vector<bool>{true, true});
  CHECK(bools(torch::isclose(torch::tensor({3, 4}), torch::tensor({3, 5}))) ==
        std::vector<bool>{true, false});
  CHECK(torch::tensor({1.0, 2.0}).allclose(torch::tensor({1.0, 2.0 + 1e-9})));

  // lerp, addcmul, addcdiv against their closed forms, and in place.
  auto s = torch::tensor({0.0, 10.0}), e = torch::tensor({4.0, 20.0});
  CHECK(torch::lerp(s, e, 0.25).to_vector<float>() == V{1, 12.5});
  CHECK(torch::lerp(s, e, 0.75).to_vector<float>() == V{3, 17.5});
  CHECK(torch::lerp(s, e, 1.0).to_vector<float>() == e.to_vector<float>());  // exact at the end
  CHECK(torch::lerp(s, e, torch::tensor({0.5, 0.1})).to_vector<float>() == V{2, 11});
  CHECK(torch::addcmul(s, e, e, 0.5).to_vector<float>() == V{8, 210});
  CHECK(torch::addcdiv(s, e, torch::tensor({2.0, 4.0}), 2).to_vector<float>() == V{4, 20});
  auto ema = s.clone();
  ema.lerp_(e, 0.5);
  CHECK(ema.to_vector<float>() == V{2, 15});
  ema.addcmul_(e, e, 0.5).addcdiv_(e, e);
  CHECK(ema.to_vector<float>() == V{11, 216});

  // Free forms with a number.
  auto x = torch::tensor({1.0, 2.0, 3.0});
  CHECK(torch::sub(x, 1).to_vector<float>() == V{0, 1, 2});
  CHECK(torch::div(x, 2).to_vector<float>() == V{0.5, 1, 1.5});
  CHECK(torch::pow(2.0, x).to_vector<float>() == V{2, 4, 8});
  CHECK(torch::pow(2.0, torch::tensor({1, 3})).to_vector<float>() == V{2, 8});
  CHECK(torch::where(x > 1.5, x, 0.0).to_vector<float>() == V{0, 2, 3});
  CHECK(torch::where(x > 1.5, -1.0, x).to_vector<float>() == V{1, -1, -1});
  CHECK(torch::square(x).to_vector<float>() == V{1, 4, 9});
  auto copy = torch::clone(x);
  copy[0] = 7;
  CHECK(x[0].item<float>() == 1);
  // pow(2, x)'s gradient flows to the exponent: d/dx 2^x = 2^x ln 2.
  auto ex = torch::tensor({1.0, 2.0}, torch::requires_grad());
  torch::pow(2.0, ex).sum().backward();
  CHECK(ex.grad().to_vector<float>()[1] == Approx(4 * std::log(2.0)));

  // detach_: every handle loses the history.
  auto w = torch::ones({2}, torch::requires_grad());
  auto h = w * 3;
  auto alias = h;
  h.detach_();
  CHECK_FALSE(alias.requires_grad());
  CHECK(alias.grad_fn() == nullptr);
  torch::autograd::Variable v = w;
  CHECK(v.requires_grad());
}

TEST_CASE("libtorch names: dot, mv, outer, addmm and bmm as their sums", "[libtorch]") {
  auto a = torch::tensor({1.0, 2.0, 3.0}), b = torch::tensor({4.0, 5.0, 6.0});
  CHECK(torch::dot(a, b).item<float>() == 32);
  CHECK(a.dot(b).dim() == 0);
  auto o = torch::outer(a, b);
  CHECK(o.sizes().vec() == std::vector<int64_t>{3, 3});
  CHECK(o[1][2].item<float>() == 12);
  auto m = torch::arange(6).to(torch::kFloat).view({2, 3});  // [[0, 1, 2], [3, 4, 5]]
  CHECK(torch::mv(m, a).to_vector<float>() == std::vector<float>{8, 26});
  CHECK(m.mv(a).to_vector<float>() == torch::matmul(m, a).to_vector<float>());
  auto bias = torch::tensor({1.0, -1.0});            // broadcast over (2, 2)
  auto am = torch::addmm(bias, m, m.t(), 0.5, 2.0);  // 2 m m^T + 0.5 bias
  CHECK(am.to_vector<float>() == std::vector<float>{10.5, 27.5, 28.5, 99.5});
  CHECK(bias.addmm(m, m.t(), 0.0).to_vector<float>() == torch::mm(m, m.t()).to_vector<float>());
  auto batch = torch::randn({2, 3, 4});
  CHECK(torch::allclose(batch.bmm(batch.transpose(1, 2)), torch::bmm(batch, batch.transpose(1, 2)),
                        0, 0));
  CHECK_THROWS_WITH(torch::dot(a, torch::ones({2})), Catch::Contains("dot: expected two 1-d"));
  CHECK_THROWS_WITH(torch::mv(m, b.narrow(0, 0, 2)),
                    Catch::Contains("mv: expected (M, N) and (N)"));
  CHECK_THROWS_WITH(torch::addmm(torch::ones({3}), m, m.t()), Catch::Contains("addmm"));
}

TEST_CASE("libtorch names: Module::as, modules(false), Sequential::ptr<T>", "[libtorch]") {
  auto seq = std::make_shared<torch::nn::Sequential>(std::make_shared<torch::nn::Linear>(3, 4),
                                                     std::make_shared<torch::nn::ReLU>(),
                                                     std::make_shared<torch::nn::Linear>(4, 2));
  int linears = 0;
  seq->apply([&](torch::nn::Module& m) {
    if (auto* lin = m.as<torch::nn::Linear>()) {
      torch::nn::init::constant_(lin->weight, 0.5);
      ++linears;
    }
  });
  CHECK(linears == 2);
  CHECK(seq->ptr<torch::nn::Linear>(2)->weight.sum().item<float>() == 4.0f);
  CHECK(seq->ptr(1)->as<torch::nn::ReLU>() != nullptr);
  CHECK_THROWS_WITH(seq->ptr<torch::nn::Linear>(1), Catch::Contains("Sequential: module 1"));
  CHECK(seq->modules().size() == 4);
  CHECK(seq->modules(/*include_self=*/false).size() == 3);
  CHECK(seq->modules(false)[0].get() == seq->ptr(0).get());
}

TEST_CASE("libtorch names: 1-d pools, HuberLoss, KLDivLoss, CosineSimilarity, PairwiseDistance",
          "[libtorch]") {
  namespace F = torch::nn::functional;
  // The 1-d pools are the 2-d ones over a height of 1 (their values: the golden cases).
  auto x = torch::randn({2, 3, 9});
  auto pooled =
      torch::nn::MaxPool1d(torch::nn::MaxPool1dOptions(3).stride(2).padding(1)).forward(x);
  CHECK(torch::equal(pooled, torch::max_pool2d(x.unsqueeze(2), {1, 3}, {1, 2}, {0, 1}).squeeze(2)));
  CHECK(torch::equal(F::max_pool1d(x, F::MaxPool1dFuncOptions(3).stride(2).padding(1)), pooled));
  auto avg = torch::nn::AvgPool1d(torch::nn::AvgPool1dOptions(2)).forward(x);
  CHECK(avg.sizes().vec() == std::vector<int64_t>{2, 3, 4});
  CHECK(avg[1][2][3].item<float>() == Approx((x[1][2][6] + x[1][2][7]).item<float>() / 2));
  CHECK_THROWS_WITH(F::avg_pool1d(x, F::AvgPool1dFuncOptions(2).divisor_override(3)),
                    Catch::Contains("no divisor_override"));
  auto adaptive = torch::nn::AdaptiveAvgPool1d(1).forward(x);
  CHECK(torch::allclose(adaptive.squeeze(-1), x.mean(-1), 1e-6, 1e-6));
  std::ostringstream repr;
  torch::nn::MaxPool1d(torch::nn::MaxPool1dOptions(3).stride(2)).pretty_print(repr);
  CHECK(repr.str() == "MaxPool1d(kernel_size=3, stride=2, padding=0)");
  CHECK_THROWS_WITH(F::max_pool1d(torch::randn({2, 3, 4, 5}), F::MaxPool1dFuncOptions(2)),
                    Catch::Contains("max_pool1d"));

  // The loss modules forward to their functional forms, with libtorch's options.
  auto input = torch::randn({4, 5}), target = torch::randn({4, 5});
  torch::nn::HuberLoss huber(torch::nn::HuberLossOptions().delta(0.5).reduction(torch::kSum));
  CHECK(torch::equal(
      huber(input, target),
      F::huber_loss(input, target, F::HuberLossFuncOptions().delta(0.5).reduction(torch::kSum))));
  // Huber with delta d is d times smooth L1 with beta d.
  CHECK(torch::allclose(huber(input, target),
                        torch::smooth_l1_loss(input, target, torch::kSum, 0.5) * 0.5, 1e-6, 1e-6));
  auto logp = torch::randn({4, 5}).log_softmax(1), p = torch::randn({4, 5}).softmax(1);
  torch::nn::KLDivLoss kl(torch::nn::KLDivLossOptions().reduction(torch::kBatchMean));
  const auto by_hand = (p * (p.log() - logp)).sum() / 4;
  CHECK(kl(logp, p).item<float>() == Approx(by_hand.item<float>()).epsilon(1e-5));
  CHECK(F::kl_div(logp, p, F::KLDivFuncOptions().reduction(torch::kSum)).item<float>() ==
        Approx(by_hand.item<float>() * 4).epsilon(1e-5));
  // log_target: the same divergence from the target's logarithms.
  CHECK(torch::allclose(F::kl_div(logp, p.log(), F::KLDivFuncOptions().log_target(true)),
                        F::kl_div(logp, p, F::KLDivFuncOptions()), 1e-5, 1e-6));

  torch::nn::CosineSimilarity cos(torch::nn::CosineSimilarityOptions().dim(1));
  auto a = torch::tensor({{1.0, 0.0}, {1.0, 1.0}, {0.0, 0.0}}), b = torch::tensor({{2.0, 0.0}});
  auto c = cos(a, b);  // parallel, 45 degrees, and a zero vector (eps keeps it finite)
  CHECK(c[0].item<float>() == Approx(1.0));
  CHECK(c[1].item<float>() == Approx(std::sqrt(0.5)));
  CHECK(c[2].item<float>() == 0);
  torch::nn::PairwiseDistance dist(torch::nn::PairwiseDistanceOptions().p(1).eps(0));
  CHECK(dist(torch::tensor({{1.0, 2.0}}), torch::tensor({{4.0, -2.0}})).item<float>() == 7);
}

TEST_CASE("libtorch names: padding modes and layers, LSTMCell, GRUCell and RNNCell", "[libtorch]") {
  namespace F = torch::nn::functional;
  using V = std::vector<float>;
  // Reflection mirrors without repeating the edge, replication repeats it, circular wraps.
  auto row = torch::tensor({1.0, 2.0, 3.0, 4.0}).view({1, 1, 4});
  CHECK(F::pad(row, F::PadFuncOptions({2, 1}).mode(torch::kReflect)).to_vector<float>() ==
        V{3, 2, 1, 2, 3, 4, 3});
  CHECK(F::pad(row, F::PadFuncOptions({2, 1}).mode(torch::kReplicate)).to_vector<float>() ==
        V{1, 1, 1, 2, 3, 4, 4});
  CHECK(F::pad(row, F::PadFuncOptions({2, 1}).mode(torch::kCircular)).to_vector<float>() ==
        V{3, 4, 1, 2, 3, 4, 1});
  CHECK(F::pad(row, F::PadFuncOptions({1, 1}).value(9)).to_vector<float>() == V{9, 1, 2, 3, 4, 9});
  CHECK_THROWS_WITH(F::pad(row, F::PadFuncOptions({4, 0}).mode(torch::kReflect)),
                    Catch::Contains("reflect padding (4, 0) must be below the size of dim 2 (4)"));
  CHECK_THROWS_WITH(F::pad(row, F::PadFuncOptions({-1, 0}).mode(torch::kReplicate)),
                    Catch::Contains("no negative pads"));
  // The gradient sums what each element was copied to: reflect (2, 1) copies element 1 twice
  // and element 2 three times.
  auto leaf = row.clone().set_requires_grad(true);
  torch::pad(leaf, {2, 1}, torch::kReflect).sum().backward();
  CHECK(leaf.grad().to_vector<float>() == V{1, 2, 3, 1});

  auto image = torch::arange(12).to(torch::kFloat).view({1, 1, 3, 4});
  auto reflected = torch::nn::ReflectionPad2d(torch::nn::ReflectionPad2dOptions(1)).forward(image);
  CHECK(reflected.sizes().vec() == std::vector<int64_t>{1, 1, 5, 6});
  CHECK(reflected[0][0][0][0].item<float>() == image[0][0][1][1].item<float>());
  auto replicated = torch::nn::ReplicationPad2d({1, 0, 2, 0}).forward(image);
  CHECK(replicated.sizes().vec() == std::vector<int64_t>{1, 1, 5, 5});
  CHECK(replicated[0][0][0][0].item<float>() == 0);
  CHECK(torch::nn::ZeroPad2d(2).forward(image).sum().item<float>() == image.sum().item<float>());
  CHECK(torch::nn::ConstantPad1d(torch::nn::ConstantPad1dOptions(1, -1.0))
            .forward(row)
            .to_vector<float>() == V{-1, 1, 2, 3, 4, -1});
  std::ostringstream repr;
  torch::nn::ReflectionPad2d({1, 2, 3, 4}).pretty_print(repr);
  CHECK(repr.str() == "ReflectionPad2d((1, 2, 3, 4))");
  CHECK_THROWS_WITH(torch::nn::ReflectionPad2d({1, 2}), Catch::Contains("4 numbers, got 2"));

  // The cells are their sequence layers over one step, with the same parameter names.
  torch::manual_seed(3);
  torch::nn::LSTMCell cell(4, 5);
  CHECK(cell.named_parameters().keys() ==
        std::vector<std::string>{"weight_ih", "weight_hh", "bias_ih", "bias_hh"});
  torch::nn::LSTM lstm(4, 5);
  for (auto& [name, p] : lstm.named_parameters()) {
    torch::NoGradGuard guard;
    p.copy_(cell.named_parameters().at(name.substr(0, name.size() - 3)));  // drop "_l0"
  }
  auto x = torch::randn({3, 4}), h = torch::randn({3, 5}), c = torch::randn({3, 5});
  auto [h1, c1] = cell.forward(x, std::make_tuple(h, c));
  auto [out, state] = lstm.forward(x.unsqueeze(0), std::make_tuple(h.unsqueeze(0), c.unsqueeze(0)));
  CHECK(torch::equal(h1, std::get<0>(state).squeeze(0)));
  CHECK(torch::equal(c1, std::get<1>(state).squeeze(0)));
  auto [h0, c0] = cell.forward(x);  // no state: zeros
  CHECK(torch::equal(h0, std::get<0>(cell.forward(
                             x, std::make_tuple(torch::zeros({3, 5}), torch::zeros({3, 5}))))));
  torch::nn::GRUCell gru(torch::nn::GRUCellOptions(4, 5).bias(false));
  CHECK(gru.parameters().size() == 2);
  CHECK(gru.forward(x[0]).sizes().vec() == std::vector<int64_t>{5});  // unbatched
  torch::nn::RNNCell relu_cell(torch::nn::RNNCellOptions(4, 5).nonlinearity("relu"));
  CHECK(relu_cell.forward(x, h).min().item<float>() >= 0);
  CHECK_THROWS_WITH(cell.forward(torch::randn({3, 6})),
                    Catch::Contains("LSTMCell: expected an input (N, 4)"));
  CHECK_THROWS_WITH(torch::nn::RNNCell(torch::nn::RNNCellOptions(4, 5).nonlinearity("gelu")),
                    Catch::Contains("nonlinearity"));
}

TEST_CASE("libtorch names: a convolution's padding by name (kSame, kValid) and padding_mode",
          "[libtorch]") {
  namespace nn = torch::nn;
  namespace F = torch::nn::functional;
  torch::manual_seed(3);
  // kSame keeps every spatial size, even kernels and dilations included.
  nn::Conv2d same(nn::Conv2dOptions(3, 5, {4, 3}).padding(torch::kSame).dilation({1, 2}));
  CHECK(same.forward(torch::randn({2, 3, 7, 6})).sizes() == Shape{2, 5, 7, 6});
  nn::Conv1d same1(nn::Conv1dOptions(2, 2, 4).padding(torch::kSame).padding_mode(torch::kReflect));
  CHECK(same1.forward(torch::randn({1, 2, 9})).sizes() == Shape{1, 2, 9});
  nn::Conv3d same3(nn::Conv3dOptions(1, 2, {2, 3, 4}).padding(torch::kSame));
  CHECK(same3.forward(torch::randn({1, 1, 4, 5, 6})).sizes() == Shape{1, 2, 4, 5, 6});
  // Numbers set after a name replace it; kValid is no padding.
  auto options = nn::Conv2dOptions(1, 1, 3).padding(torch::kSame).padding(1);
  CHECK_FALSE(options.padding_kind().has_value());
  const torch::Tensor x = torch::randn({1, 1, 6, 6}), w = torch::randn({1, 1, 3, 3});
  CHECK(F::conv2d(x, w, F::Conv2dFuncOptions().padding(torch::kValid)).sizes() ==
        Shape{1, 1, 4, 4});
  // zeros with kSame and an odd kernel is the convolution's own padding, bit for bit.
  CHECK(F::conv2d(x, w, F::Conv2dFuncOptions().padding(torch::kSame))
            .equal(torch::conv2d(x, w, {}, 1, 1)));
  // Reflect padding is the padded input convolved without padding.
  nn::Conv2d reflect(nn::Conv2dOptions(1, 1, 3).padding(1).padding_mode(torch::kReflect));
  const auto expected =
      torch::conv2d(F::pad(x, F::PadFuncOptions({1, 1, 1, 1}).mode(torch::kReflect)),
                    reflect.weight, reflect.bias);
  CHECK(reflect.forward(x).equal(expected));

  std::ostringstream os;
  os << same << "; " << reflect;
  CHECK(os.str() ==
        "Conv2d(3, 5, kernel_size=(4, 3), stride=(1, 1), padding=same, dilation=(1, 2)); "
        "Conv2d(1, 1, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), "
        "padding_mode=reflect)");
  CHECK_THROWS_WITH(nn::Conv2d(nn::Conv2dOptions(1, 1, 3).stride(2).padding(torch::kSame)),
                    Catch::Contains("padding kSame is not supported for strided convolutions"));
  CHECK_THROWS_WITH(F::conv1d(torch::ones({1, 1, 5}), torch::ones({1, 1, 3}),
                              F::Conv1dFuncOptions().stride(2).padding(torch::kSame)),
                    Catch::Contains("padding kSame is not supported for strided convolutions"));
  CHECK_THROWS_WITH(
      F::conv2d(x, torch::randn({1, 1, 3}), F::Conv2dFuncOptions().padding(torch::kSame)),
      Catch::Contains("kSame needs a weight of 4 dims"));
}

namespace {
// libtorch's DQN shape: a network of one's own, cloneable because reset() registers everything.
struct QNet : torch::nn::Cloneable<QNet> {
  QNet(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override {
    fc1 = register_module("fc1", std::make_shared<torch::nn::Linear>(in_, 8));
    bn = register_module("bn", std::make_shared<torch::nn::BatchNorm1d>(8));
    fc2 = register_module("fc2", std::make_shared<torch::nn::Linear>(8, out_));
    scale = register_parameter("scale", torch::ones({1}));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    return fc2->forward(torch::relu(bn->forward(fc1->forward(x)))) * scale;
  }
  int64_t in_, out_;
  std::shared_ptr<torch::nn::Linear> fc1, fc2;
  std::shared_ptr<torch::nn::BatchNorm1d> bn;
  torch::Tensor scale;
};

// A module whose forward takes its argument by value (libtorch's examples), in a Sequential.
struct Twice : torch::nn::Cloneable<Twice> {
  Twice() { reset(); }
  void reset() override {}
  torch::Tensor forward(torch::Tensor x) { return x * 2; }
};

struct Plain : torch::nn::Module {};

// Same keys and values, storage of its own.
void check_deep_copy(const torch::nn::Module& original, const torch::nn::Module& copy) {
  const auto a = original.state_dict(), b = copy.state_dict();
  REQUIRE(a.keys() == b.keys());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].key());
    CHECK(a[i].value().equal(b[i].value()));
    CHECK(a[i].value().data_ptr() != b[i].value().data_ptr());
  }
}
}  // namespace

TEST_CASE("libtorch names: clone() copies a Cloneable module deeply", "[libtorch]") {
  torch::manual_seed(5);
  auto net = std::make_shared<QNet>(4, 2);
  const torch::Tensor x = torch::randn({6, 4});
  net->forward(x).sum().backward();  // running statistics move, gradients appear
  net->scale.set_requires_grad(false);
  net->fc2->eval();

  auto copy = std::dynamic_pointer_cast<QNet>(net->clone());
  REQUIRE(copy != nullptr);
  check_deep_copy(*net, *copy);
  // The copy's members are its own registrations, not the original's.
  CHECK(copy->fc1 != net->fc1);
  CHECK(copy->fc1 == copy->named_children().at("fc1"));
  CHECK(copy->scale.is_same(copy->named_parameters().at("scale")));
  CHECK(copy->bn->running_mean.equal(net->bn->running_mean));
  // Flags and modes come along; gradients do not.
  CHECK_FALSE(copy->scale.requires_grad());
  CHECK(copy->fc1->weight.requires_grad());
  CHECK(copy->is_training());
  CHECK_FALSE(copy->fc2->is_training());
  CHECK(net->fc1->weight.grad().defined());
  CHECK_FALSE(copy->fc1->weight.grad().defined());
  // The same function, and independent from now on.
  net->eval();
  copy->eval();
  CHECK(copy->forward(x).equal(net->forward(x)));
  {
    torch::NoGradGuard no_grad;
    net->fc1->weight.add_(1.0);
  }
  CHECK_FALSE(copy->fc1->weight.equal(net->fc1->weight));

  // A module that is not Cloneable says so, also inside a container.
  CHECK_THROWS_WITH(std::make_shared<Plain>()->clone(),
                    Catch::Contains("derive it from nn::Cloneable<"));
  torch::nn::Sequential with_plain(std::make_shared<torch::nn::ReLU>(), std::make_shared<Plain>());
  CHECK_THROWS_AS(with_plain.clone(), tandem::NotImplementedError);
}

TEST_CASE("libtorch names: the built-in layers and containers clone", "[libtorch]") {
  namespace nn = torch::nn;
  torch::manual_seed(6);
  auto seq = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(2, 3, 3).padding(torch::kSame)),
      std::make_shared<nn::BatchNorm2d>(3), std::make_shared<Twice>(),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Dropout>(0.3));
  const torch::Tensor x = torch::randn({2, 2, 4, 4});
  seq->forward(x);  // batch statistics into the running ones
  auto copy = std::dynamic_pointer_cast<nn::Sequential>(seq->clone());
  REQUIRE(copy != nullptr);
  check_deep_copy(*seq, *copy);
  CHECK(copy->ptr<nn::Conv2d>(0)->options.padding_kind() == torch::kSame);
  CHECK(copy->ptr<nn::Dropout>(4)->p == 0.3);
  CHECK(copy->named_children().keys() == seq->named_children().keys());
  seq->eval();
  copy->eval();
  CHECK(copy->forward(x).equal(seq->forward(x)));  // Twice runs through its by-value forward

  // A child registered beside the steps is cloned as a child; a child replaced by another
  // type is cloned as what it is now, and runs.
  auto with_extra = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, 2),
                                                     std::make_shared<nn::Dropout>(0.5));
  with_extra->register_module("extra", std::make_shared<nn::Linear>(1, 1));
  with_extra->replace_module("1", std::make_shared<nn::Tanh>());
  auto extra_copy = std::dynamic_pointer_cast<nn::Sequential>(with_extra->clone());
  check_deep_copy(*with_extra, *extra_copy);
  CHECK(extra_copy->named_children().at("1")->name() == "Tanh");
  const torch::Tensor two = torch::randn({3, 2});
  CHECK(extra_copy->forward(two).equal(with_extra->forward(two)));
  CHECK(extra_copy->forward(two).abs().max().item<float>() < 1.0f);  // tanh ran

  // The example's models, and a bottleneck block with its downsampling shortcut.
  auto cifar = nn::resnet20(nn::ResNetOptions().in_channels(1));
  auto shortcut = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(8, 16, 1).stride(2).bias(false)),
      std::make_shared<nn::BatchNorm2d>(16));
  auto block = std::make_shared<nn::Bottleneck>(8, 4, 2, shortcut);
  const std::vector<std::pair<std::shared_ptr<nn::Module>, torch::Tensor>> models = {
      {cifar, torch::randn({2, 1, 12, 12})}, {block, torch::randn({2, 8, 6, 6})}};
  for (const auto& [model, input] : models) {
    INFO(model->name());
    model->forward(input);  // running statistics move
    const auto cloned = model->clone();
    check_deep_copy(*model, *cloned);
    model->eval();
    cloned->eval();
    CHECK(cloned->forward(input).equal(model->forward(input)));
  }

  // Every built-in kind: the same type, keys and values, storage of its own.
  std::vector<std::shared_ptr<nn::Module>> layers = {
      std::make_shared<nn::Linear>(3, 2),
      std::make_shared<nn::Embedding>(nn::EmbeddingOptions(5, 3).padding_idx(1)),
      std::make_shared<nn::LSTM>(nn::LSTMOptions(3, 4).num_layers(2)),
      std::make_shared<nn::GRUCell>(3, 4),
      std::make_shared<nn::LayerNorm>(nn::LayerNormOptions({4})),
      std::make_shared<nn::PReLU>(nn::PReLUOptions().num_parameters(3)),
      std::make_shared<nn::MultiheadAttention>(4, 2),
      std::make_shared<nn::TransformerEncoder>(
          nn::TransformerEncoderOptions(nn::TransformerEncoderLayerOptions(4, 2), 2)
              .norm(std::make_shared<nn::LayerNorm>(nn::LayerNormOptions({4})))),
      std::make_shared<nn::TransformerDecoder>(
          nn::TransformerDecoderOptions(nn::TransformerDecoderLayerOptions(4, 2), 0)),
      std::make_shared<nn::ModuleList>(std::make_shared<nn::Linear>(2, 2),
                                       std::make_shared<nn::Tanh>()),
      std::make_shared<nn::ModuleDict>(
          std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>>{
              {"a", std::make_shared<nn::Conv1d>(nn::Conv1dOptions(2, 2, 3))}}),
      std::make_shared<nn::ReflectionPad2d>(nn::ReflectionPad2dOptions({1, 2, 0, 1})),
      std::make_shared<nn::CrossEntropyLoss>(nn::CrossEntropyLossOptions().label_smoothing(0.1)),
  };
  for (const auto& layer : layers) {
    INFO(layer->type_name());
    const nn::Module& original = *layer;
    const auto cloned_handle = layer->clone();
    const nn::Module& cloned = *cloned_handle;
    CHECK(typeid(cloned) == typeid(original));
    check_deep_copy(original, cloned);
    std::ostringstream a, b;
    a << original;
    b << cloned;
    CHECK(a.str() == b.str());
  }
}

TEST_CASE("libtorch names: the max pools' indices and MaxUnpool1d/2d/3d", "[libtorch]") {
  namespace nn = torch::nn;
  namespace F = torch::nn::functional;
  torch::manual_seed(11);
  const torch::Tensor x = torch::rand({2, 3, 6, 8});  // positive: above the zeros unpooled
  nn::MaxPool2d pool(nn::MaxPool2dOptions(2));
  torch::Tensor values, indices;  // (clang refuses structured bindings in the lambdas below)
  std::tie(values, indices) = pool.forward_with_indices(x);
  CHECK(values.equal(pool.forward(x)));
  CHECK(indices.scalar_type() == torch::kLong);
  // Each index names its value in its own H x W plane; a channels-last input gives the same.
  CHECK(x.flatten(2).gather(2, indices.flatten(2)).view({2, 3, 3, 4}).equal(values));
  auto [cl_values, cl_indices] = F::max_pool2d_with_indices(
      x.contiguous(tandem::MemoryFormat::ChannelsLast), F::MaxPool2dFuncOptions(2));
  CHECK(cl_indices.equal(indices));
  // Unpooling puts each value back where it was and zeros elsewhere: the pool of that is the
  // values again (they are positive), and it keeps exactly the input's entries at the maxima.
  nn::MaxUnpool2d unpool(nn::MaxUnpool2dOptions(2));
  const torch::Tensor back = unpool.forward(values, indices);
  CHECK(back.sizes() == x.sizes());
  CHECK(pool.forward(back).equal(values));
  CHECK(torch::where(torch::ne(back, 0.0), x, back).equal(back));
  CHECK(torch::ne(back, 0.0).sum().item<int64_t>() == values.numel());
  // output_size as (H, W) or (N, C, H, W), within stride of the default
  CHECK(unpool.forward(values, indices, std::vector<int64_t>{2, 3, 7, 9}).sizes() ==
        Shape{2, 3, 7, 9});
  CHECK(F::max_unpool2d(values, indices,
                        F::MaxUnpool2dFuncOptions(2).output_size(std::vector<int64_t>{6, 8}))
            .equal(back));
  // Unbatched, and the 1-d and 3-d forms: indices along L and into each D x H x W volume
  auto [v2, i2] = F::max_pool2d_with_indices(x[0], F::MaxPool2dFuncOptions(2));
  CHECK(v2.equal(values[0]));
  CHECK(i2.equal(indices[0]));
  CHECK(torch::max_unpool2d(v2, i2, {6, 8}).equal(back[0]));
  const torch::Tensor seq = torch::randn({2, 4, 11});
  auto [v1, i1] = nn::MaxPool1d(nn::MaxPool1dOptions(3).stride(2)).forward_with_indices(seq);
  CHECK(seq.gather(2, i1).equal(v1));
  CHECK(nn::MaxUnpool1d(nn::MaxUnpool1dOptions(3).stride(2)).forward(v1, i1).size(2) == 11);
  const torch::Tensor vol = torch::randn({2, 2, 5, 4, 6});
  auto [v3, i3] = nn::MaxPool3d(nn::MaxPool3dOptions(2).padding(1)).forward_with_indices(vol);
  CHECK(vol.flatten(2).gather(2, i3.flatten(2)).view(v3.sizes()).equal(v3));
  CHECK(nn::MaxUnpool3d(nn::MaxUnpool3dOptions(2).padding(1))
            .forward(v3, i3, std::vector<int64_t>{5, 4, 6})
            .flatten(2)
            .gather(2, i3.flatten(2))
            .view(v3.sizes())
            .equal(v3));
  // torch's reprs
  std::ostringstream os;
  os << unpool << " " << nn::MaxUnpool1d(3) << " "
     << nn::MaxUnpool3d(nn::MaxUnpool3dOptions(2).padding(1));
  CHECK(os.str() ==
        "MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0)) "
        "MaxUnpool1d(kernel_size=(3,), stride=(3,), padding=(0,)) "
        "MaxUnpool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(1, 1, 1))");
  // Bad input: torch's messages, and nothing written
  CHECK(tandem::testing::error_of([&] {
          unpool.forward(values, indices, std::vector<int64_t>{7, 11});
        }) == "max_unpool2d: invalid output_size (7, 11) (dim 1 must be between 6 and 10)");
  CHECK(tandem::testing::error_of([&] {
          unpool.forward(values, indices, std::vector<int64_t>{6, 8, 1});
        }) == "max_unpool2d: output_size should have 2 or 4 elements, but it has 3");
  CHECK(tandem::testing::error_of([&] { unpool.forward(values, indices.to(torch::kFloat)); }) ==
        "max_unpool2d: expected indices of dtype i64, got f32");
  CHECK(tandem::testing::error_of([&] { unpool.forward(values, indices.narrow(3, 0, 2)); }) ==
        "max_unpool2d: expected indices of the input's shape (2, 3, 3, 4), got (2, 3, 3, 2)");
  CHECK_THROWS_AS(unpool.forward(values, torch::add(indices, 48)), tandem::IndexError);
  CHECK(tandem::testing::error_of([&] {
          torch::max_unpool2d(values, torch::sub(indices, 1), {6, 8});
        }).find("max_unpool2d: found an invalid max index -1") == 0);
  CHECK(tandem::testing::error_of([&] { unpool.forward(values); }).find("forward") !=
        std::string::npos);
  CHECK(tandem::testing::error_of([&] {
          torch::max_unpool2d(values.to(torch::kLong), indices, {6, 8});
        }) ==
        "max_unpool2d: expected a floating-point input (f32, f64, f16 or bf16), got dtype i64");
  // libtorch's forms: built from a kernel size, called with two or three arguments, ATen's
  // max_unpool3d with stride and padding
  nn::MaxUnpool2d by_size(2);
  CHECK(by_size(values, indices).equal(back));
  CHECK(by_size(values, indices, std::vector<int64_t>{7, 8}).sizes() == Shape{2, 3, 7, 8});
  CHECK(tandem::int_list(nn::MaxUnpool3d(2).options.stride()) == std::vector<int64_t>{2, 2, 2});
  CHECK(torch::max_unpool3d(v3, i3, {5, 4, 6}, {2, 2, 2}, {1, 1, 1})
            .equal(torch::max_unpool3d(v3, i3, {5, 4, 6})));
  // An empty batch, and an output of no positions (torch takes both)
  auto [v0, i0] = torch::max_pool3d_with_indices(torch::randn({0, 3, 4, 4, 4}), 2);
  CHECK(v0.sizes() == Shape{0, 3, 2, 2, 2});
  CHECK(torch::max_unpool3d(v0, i0, {4, 4, 4}).sizes() == Shape{0, 3, 4, 4, 4});
  CHECK(torch::max_unpool2d(torch::zeros({2, 3, 0, 4}), torch::zeros({2, 3, 0, 4}, torch::kLong),
                            {0, 8})
            .sizes() == Shape{2, 3, 0, 8});
  // A depth window over padding alone (dilation 3 past a depth of 2): -inf, index -1, as the
  // 2-d pool's windows of padding alone
  auto [vp, ip] = torch::max_pool3d_with_indices(torch::randn({1, 1, 2, 3, 3}), {2, 1, 1},
                                                 {2, 1, 1}, {1, 0, 0}, {3, 1, 1});
  CHECK(std::isinf(vp.flatten()[0].item<float>()));
  CHECK(vp.flatten()[0].item<float>() < 0);
  CHECK(ip.flatten()[0].item<int64_t>() == -1);
}

TEST_CASE("libtorch names: AdaptiveMaxPool1d/2d, their indices and pad_sequence", "[libtorch]") {
  namespace nn = torch::nn;
  namespace F = torch::nn::functional;
  torch::manual_seed(7);
  const torch::Tensor x = torch::randn({2, 3, 7, 5});
  nn::AdaptiveMaxPool2d pool(nn::AdaptiveMaxPool2dOptions({3, 2}));
  auto [values, indices] = pool.forward_with_indices(x);
  CHECK(values.sizes() == Shape{2, 3, 3, 2});
  CHECK(indices.scalar_type() == torch::kLong);
  // Each index names the value it reports, in its own H x W plane.
  CHECK(x.flatten(2).gather(2, indices.flatten(2)).view({2, 3, 3, 2}).equal(values));
  CHECK(pool.forward(x).equal(values));
  CHECK(F::adaptive_max_pool2d(x, F::AdaptiveMaxPool2dFuncOptions({3, 2})).equal(values));
  // Divisible sizes are max_pool2d's windows.
  CHECK(F::adaptive_max_pool2d(x.narrow(2, 0, 6), F::AdaptiveMaxPool2dFuncOptions({3, 5}))
            .equal(torch::max_pool2d(x.narrow(2, 0, 6), {2, 1})));
  std::ostringstream os;
  os << pool;
  CHECK(os.str() == "AdaptiveMaxPool2d(output_size=(3, 2))");
  const torch::Tensor seq = torch::randn({2, 9});
  auto [v1, i1] = nn::AdaptiveMaxPool1d(3).forward_with_indices(seq);
  CHECK(v1.sizes() == Shape{2, 3});
  CHECK(seq.gather(1, i1).equal(v1));
  CHECK_THROWS_WITH(pool.forward(torch::ones({2, 3}, torch::kLong)),
                    Catch::Contains("adaptive_max_pool2d"));

  // pad_sequence: the sequences one after another along the batch dim, padded after.
  const torch::Tensor a = torch::ones({2, 3}), b = torch::full({4, 3}, 2.0);
  const torch::Tensor padded = nn::utils::rnn::pad_sequence({a, b}, true, -1.0);
  CHECK(padded.sizes() == Shape{2, 4, 3});
  CHECK(padded[0].narrow(0, 0, 2).equal(a));
  CHECK(padded[0].narrow(0, 2, 2).eq(-1.0).all().item<bool>());
  CHECK(padded[1].equal(b));
  CHECK(nn::utils::rnn::pad_sequence({a, b}).sizes() == Shape{4, 2, 3});
  CHECK_THROWS_WITH(nn::utils::rnn::pad_sequence({a, torch::ones({2, 4})}),
                    Catch::Contains("the dims after the first must agree"));
}

TEST_CASE("libtorch names: an implicit Scalar, Module::name() and a named Sequential",
          "[libtorch]") {
  const torch::Scalar two = 2, half = 0.5, yes = true;
  CHECK(two.isIntegral(false));
  CHECK(two.toLong() == 2);
  CHECK(half.isFloatingPoint());
  CHECK(half.toDouble() == 0.5);
  CHECK(yes.isBoolean());
  const torch::Scalar big = int64_t{1} << 60;  // exact, not through a double
  CHECK(big.toLong() == (int64_t{1} << 60));
  CHECK((torch::ones({2}) * two).equal(torch::full({2}, 2.0)));

  namespace nn = torch::nn;
  nn::Sequential seq(
      {{"fc", std::make_shared<nn::Linear>(3, 2)}, {"act", std::make_shared<nn::ReLU>()}});
  CHECK(seq.named_children().keys() == std::vector<std::string>{"fc", "act"});
  CHECK(seq.named_parameters().keys() == std::vector<std::string>{"fc.weight", "fc.bias"});
  CHECK(seq.forward(torch::ones({4, 3})).sizes() == Shape{4, 2});
  CHECK(seq.ptr<nn::Linear>(0)->name() == "Linear");
  CHECK(seq.name() == "Sequential");
}

TEST_CASE("libtorch names: serialize archives and saving to streams", "[libtorch]") {
  tandem::testing::TempDir tmp;
  const std::string file = (tmp.path / "checkpoint.pt").string();
  torch::manual_seed(8);
  auto model = std::make_shared<Net>();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::nll_loss(model->forward(torch::randn({2, 1, 28, 28})), torch::tensor({3, 7})).backward();
  sgd.step();

  // A checkpoint as libtorch code writes one: the model, the optimizer nested, an epoch.
  torch::serialize::OutputArchive archive, optimizer_archive;
  model->save(archive);
  sgd.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("epoch", torch::tensor(int64_t{7}));
  archive.save_to(file);

  auto copy = std::make_shared<Net>();
  torch::optim::SGD restored(copy->parameters(), torch::optim::SGDOptions(0.5));
  torch::serialize::InputArchive in, optimizer_in;
  in.load_from(file);
  copy->load(in);  // the other keys are left for their readers
  in.read("optimizer", optimizer_in);
  restored.load(optimizer_in);
  torch::Tensor epoch;
  in.read("epoch", epoch);
  CHECK(epoch.item<int64_t>() == 7);
  for (const auto& [name, value] : model->state_dict()) {
    INFO(name);
    CHECK(torch::equal(value, copy->state_dict()[name]));
  }
  CHECK(restored.param_groups()[0].options().get_lr() == 0.1);
  CHECK(torch::equal(restored.state_dict()["state.0.momentum_buffer"],
                     sgd.state_dict()["state.0.momentum_buffer"]));
  // Into a defined tensor the values are copied: every handle on it sees them.
  torch::Tensor weight = copy->fc1->weight;
  {
    torch::NoGradGuard no_grad;
    weight.zero_();
  }
  in.read("fc1.weight", weight);
  CHECK(torch::equal(copy->fc1->weight, model->fc1->weight));
  torch::Tensor wrong = torch::zeros({2});
  CHECK_THROWS_WITH(in.read("fc1.weight", wrong), Catch::Contains("has shape"));
  CHECK_THROWS_WITH(in.read("fc9.weight", wrong), Catch::Contains("holds no 'fc9.weight'"));
  CHECK_FALSE(in.try_read("fc9.weight", wrong));
  // A module whose keys are not all there loads nothing.
  torch::serialize::InputArchive partial;
  partial.load_from(file);
  torch::serialize::OutputArchive only_epoch;
  only_epoch.write("epoch", epoch);
  std::stringstream epoch_bytes;
  only_epoch.save_to(epoch_bytes);
  partial.load_from(epoch_bytes);
  const auto before = copy->fc1->weight.clone();
  CHECK_THROWS_WITH(copy->load(partial), Catch::Contains("the archive holds no conv1.weight"));
  CHECK(torch::equal(copy->fc1->weight, before));

  // A module without parameters writes an empty archive, which reads back as one.
  torch::serialize::OutputArchive outer, empty;
  torch::nn::ReLU().save(empty);
  outer.write("relu", empty);
  outer.write("w", torch::ones({1}));
  CHECK_THROWS_WITH(outer.write("w", torch::ones({1})), Catch::Contains("written twice"));
  torch::serialize::InputArchive outer_in, relu_in;
  std::stringstream outer_bytes;
  outer.save_to(outer_bytes);
  outer_in.load_from(outer_bytes);
  outer_in.read("relu", relu_in);
  torch::nn::ReLU().load(relu_in);
  CHECK_FALSE(outer_in.try_read("relu", relu_in));
  CHECK(outer_in.keys() == std::vector<std::string>{"w"});

  // torch::save / torch::load of a module through a stream.
  std::stringstream bytes;
  torch::save(model, bytes);
  auto third = std::make_shared<Net>();
  torch::load(third, bytes);
  CHECK(torch::equal(third->fc2->weight, model->fc2->weight));
  std::stringstream garbage("not safetensors");
  CHECK_THROWS_AS(torch::load(third, garbage), tandem::io::IoError);
}

TEST_CASE("libtorch names: archives hold IValues and give back their kinds", "[libtorch]") {
  torch::serialize::OutputArchive archive, nested;
  archive.write("epoch", torch::IValue(7));
  archive.write("lr", 0.05);  // a double converts to an IValue, as in libtorch
  archive.write("resumed", true);
  archive.write("name", "resnet20");
  archive.write("milestones", std::vector<int64_t>{30, 60});
  archive.write("betas", std::vector<double>{0.9, 0.999});
  archive.write("weights", torch::IValue(torch::ones({2, 2})));
  nested.write("step", int64_t{1} << 40);
  nested.write("tag", std::string("inner"));
  archive.write("scheduler", nested);
  CHECK_THROWS_WITH(archive.write("name", 1), Catch::Contains("'name' is written twice"));
  CHECK_THROWS_WITH(archive.write("epoch", torch::ones({1})),
                    Catch::Contains("'epoch' is written twice"));
  CHECK_THROWS_WITH(archive.write("none", torch::IValue()), Catch::Contains("is None"));
  torch::serialize::OutputArchive clash, outer;
  clash.write("tag", 1.0);
  clash.write("kept", 2.0);
  outer.write("scheduler.tag", "taken");
  CHECK_THROWS_WITH(outer.write("scheduler", clash),
                    Catch::Contains("'scheduler.tag' is written twice"));
  CHECK(outer.keys() == std::vector<std::string>{"scheduler.tag"});  // all or nothing
  CHECK(archive.keys() == std::vector<std::string>{"epoch", "lr", "resumed", "milestones", "betas",
                                                   "weights", "scheduler.step", "name",
                                                   "scheduler.tag"});

  std::stringstream bytes;
  archive.save_to(bytes);
  const std::string file = bytes.str();
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  torch::IValue v;
  in.read("epoch", v);
  REQUIRE(v.isInt());
  CHECK(v.toInt() == 7);
  in.read("lr", v);
  REQUIRE(v.isDouble());
  CHECK(v.toDouble() == 0.05);  // stored as f64: exact
  in.read("resumed", v);
  CHECK(v.toBool());
  in.read("name", v);
  CHECK(v.toStringRef() == "resnet20");
  in.read("milestones", v);
  CHECK(v.toIntVector() == std::vector<int64_t>{30, 60});
  in.read("betas", v);
  CHECK(v.toDoubleVector() == std::vector<double>{0.9, 0.999});
  in.read("weights", v);
  REQUIRE(v.isTensor());
  CHECK(torch::equal(v.toTensor(), torch::ones({2, 2})));
  torch::serialize::InputArchive scheduler;
  in.read("scheduler", scheduler);
  scheduler.read("step", v);
  CHECK(v.toInt() == int64_t{1} << 40);
  scheduler.read("tag", v);
  CHECK(v.toStringRef() == "inner");
  CHECK(scheduler.keys() == std::vector<std::string>{"step", "tag"});
  CHECK(in.keys() == archive.keys());
  CHECK_FALSE(in.try_read("missing", v));
  CHECK_THROWS_WITH(in.read("missing", v), Catch::Contains("holds no 'missing'"));
  // Numbers are tensors to every other reader, strings and kinds in the metadata.
  torch::Tensor epoch;
  in.read("epoch", epoch);
  CHECK(epoch.dim() == 0);
  CHECK(epoch.dtype() == torch::kLong);
  tandem::io::Metadata metadata;
  const auto tensors = tandem::io::from_safetensors(file, &metadata);
  CHECK(tensors.at("lr").dtype() == torch::kFloat64);
  CHECK(metadata.at("tandem.ivalue.name") == "string:resnet20");
  CHECK(metadata.at("tandem.ivalue.scheduler.step") == "int");
  // A file whose marks do not match its tensors is refused by name, not misread.
  tandem::io::Metadata wrong = metadata;
  wrong["tandem.ivalue.epoch"] = "double";
  std::stringstream bad(tandem::io::to_safetensors(tensors, wrong));
  torch::serialize::InputArchive bad_in;
  bad_in.load_from(bad);
  CHECK_THROWS_WITH(bad_in.read("epoch", v),
                    Catch::Contains("'epoch' in <stream> is marked as double but holds a i64"));
}

TEST_CASE(
    "libtorch names: EmbeddingBag, LocalResponseNorm and MultiMarginLoss as libtorch code "
    "writes them",
    "[libtorch]") {
  namespace nn = torch::nn;
  namespace F = torch::nn::functional;
  torch::manual_seed(12);
  nn::EmbeddingBag bag(nn::EmbeddingBagOptions(10, 3).mode(torch::kSum).padding_idx(0));
  CHECK(bag.named_parameters().keys() == std::vector<std::string>{"weight"});
  CHECK(torch::equal(bag.weight[0], torch::zeros({3})));  // the padding row starts at zero
  const torch::Tensor input = torch::tensor({1, 0, 4, 5, 4}), offsets = torch::tensor({0, 2});
  const torch::Tensor out = bag.forward(input, offsets);
  CHECK(out.sizes() == std::vector<int64_t>{2, 3});
  CHECK(torch::allclose(out[0], bag.weight[1]));  // the padding entry left out
  CHECK(torch::allclose(out[1], bag.weight[4] * 2 + bag.weight[5]));
  nn::EmbeddingBag maxima(nn::EmbeddingBagOptions(10, 3).mode(torch::kMax));
  CHECK(
      torch::equal(maxima.forward(torch::tensor({{2, 7}})),
                   std::get<0>(torch::max(maxima.weight.index_select(0, torch::tensor({2, 7})), 0))
                       .unsqueeze(0)));
  CHECK(torch::equal(
      F::embedding_bag(
          input, bag.weight,
          F::EmbeddingBagFuncOptions().offsets(offsets).mode(torch::kSum).padding_idx(0)),
      out));
  CHECK(bag.clone()->named_parameters().size() == 1);

  nn::LocalResponseNorm lrn(nn::LocalResponseNormOptions(2).alpha(1.0).beta(1.0).k(1.0));
  // Size 2: each channel with the one before it (zero before the first): x / (1 + (x_{c-1}^2 +
  // x_c^2) / 2).
  const torch::Tensor x = torch::tensor({1.0, 2.0, 3.0}).view({1, 3, 1});
  const torch::Tensor expected = torch::tensor({1.0 / 1.5, 2.0 / 3.5, 3.0 / 7.5}).view({1, 3, 1});
  CHECK(torch::allclose(lrn.forward(x), expected));

  nn::MultiMarginLoss hinge(nn::MultiMarginLossOptions().margin(0.5));
  // Scores (0, 1, 0.2) for class 1: max(0, 0.5 - 1 + 0) + max(0, 0.5 - 1 + 0.2) = 0, over 3.
  CHECK(hinge(torch::tensor({{0.0, 1.0, 0.2}}), torch::tensor({1})).item<float>() == 0.0f);
  // For class 0: (0.5 - 0 + 1) + (0.5 - 0 + 0.2) = 2.2, over 3.
  CHECK(hinge(torch::tensor({{0.0, 1.0, 0.2}}), torch::tensor({0})).item<float>() ==
        Approx(2.2 / 3));
}

TEST_CASE("libtorch names: reset_parameters draws again, reset_running_stats starts over",
          "[libtorch]") {
  namespace nn = torch::nn;
  torch::manual_seed(9);
  nn::Linear linear(4, 3);
  const torch::Tensor w0 = linear.weight.clone();
  linear.reset_parameters();
  CHECK_FALSE(linear.weight.equal(w0));
  // Drawn from torch's bound: |w| <= 1 / sqrt(in_features).
  CHECK(linear.weight.abs().max().item<float>() <= 0.5f);
  CHECK(linear.weight.requires_grad());

  nn::BatchNorm2d bn(3);
  bn.forward(torch::randn({4, 3, 2, 2}) * 5.0 + 2.0);
  {
    torch::NoGradGuard no_grad;
    bn.weight.mul_(3.0);
  }
  CHECK_FALSE(bn.running_mean.equal(torch::zeros({3})));
  bn.reset_running_stats();
  CHECK(bn.running_mean.equal(torch::zeros({3})));
  CHECK(bn.running_var.equal(torch::ones({3})));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 0);
  CHECK(bn.weight.equal(torch::full({3}, 3.0)));  // reset_running_stats leaves the affine part
  bn.reset_parameters();
  CHECK(bn.weight.equal(torch::ones({3})));
  CHECK(bn.bias.equal(torch::zeros({3})));

  nn::Embedding embedding(nn::EmbeddingOptions(5, 2).padding_idx(2));
  const torch::Tensor e0 = embedding.weight.clone();
  embedding.reset_parameters();
  CHECK_FALSE(embedding.weight.equal(e0));
  CHECK(embedding.weight[2].equal(torch::zeros({2})));

  // The recurrent layers: under one seed, reset draws what the constructor drew.
  {
    const auto options = nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true);
    torch::manual_seed(21);
    nn::LSTM fresh(options);
    nn::LSTM reset(options);  // drawn from the stream after fresh's
    const auto a = fresh.named_parameters(), b = reset.named_parameters();
    REQUIRE(a.size() == 16);
    std::vector<torch::Tensor> old;
    for (const auto& p : b) old.push_back(p.value().clone());
    torch::manual_seed(21);
    reset.reset_parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].key());
      CHECK(a[i].value().equal(b[i].value()));
      CHECK_FALSE(b[i].value().equal(old[i]));
      CHECK(b[i].value().abs().max().item<float>() <= 0.5f);  // 1 / sqrt(hidden_size)
    }
  }
  {
    torch::manual_seed(21);
    nn::GRUCell fresh(3, 5);
    nn::GRUCell reset(3, 5);
    const torch::Tensor old = reset.weight_hh.clone();
    torch::manual_seed(21);
    reset.reset_parameters();
    CHECK(fresh.weight_ih.equal(reset.weight_ih));
    CHECK(fresh.bias_hh.equal(reset.bias_hh));
    CHECK_FALSE(reset.weight_hh.equal(old));
  }
  {
    nn::MultiheadAttention attention(nn::MultiheadAttentionOptions(8, 2).add_bias_kv(true).kdim(6));
    const torch::Tensor q0 = attention.q_proj_weight.clone(), k0 = attention.bias_k.clone();
    const torch::Tensor out0 = attention.out_proj->weight.clone();
    {
      torch::NoGradGuard no_grad;
      attention.in_proj_bias.fill_(1.0);
      attention.out_proj->bias.fill_(1.0);
    }
    attention._reset_parameters();  // libtorch's name for it
    CHECK_FALSE(attention.q_proj_weight.equal(q0));
    CHECK_FALSE(attention.bias_k.equal(k0));
    CHECK(attention.in_proj_bias.equal(torch::zeros({24})));
    CHECK(attention.out_proj->bias.equal(torch::zeros({8})));
    CHECK(attention.out_proj->weight.equal(out0));  // as torch's _reset_parameters
    // Xavier-uniform: |w| <= sqrt(6 / (fan_in + fan_out)).
    CHECK(attention.k_proj_weight.abs().max().item<float>() <= std::sqrt(6.0f / 14.0f));
  }
}

TEST_CASE("libtorch names: pin_memory copies into pinned memory, movedim moves dims",
          "[libtorch]") {
  torch::Tensor x = torch::randn({2, 3, 4}).requires_grad_(true);
  torch::Tensor pinned = x.pin_memory();
  CHECK(pinned.equal(x));
  CHECK_FALSE(pinned.storage().is_same(x.storage()));
  // Without a GPU the memory is plain host memory, as the loader's staging is.
  CHECK(pinned.is_pinned() == torch::cuda::is_available());
  (pinned * 2.0).sum().backward();  // the gradient passes through the copy
  CHECK(x.grad().equal(torch::full({2, 3, 4}, 2.0)));
  CHECK(torch::zeros({0, 3}).pin_memory().numel() == 0);
  // Channels-last stays channels-last.
  torch::Tensor nhwc = torch::randn({2, 3, 4, 5}).contiguous(torch::MemoryFormat::ChannelsLast);
  CHECK(nhwc.pin_memory().is_contiguous(torch::MemoryFormat::ChannelsLast));

  torch::Tensor m = torch::randn({2, 3, 4, 5});
  CHECK(m.movedim(0, -1).sizes() == torch::IntArrayRef{3, 4, 5, 2});
  CHECK(torch::movedim(m, {0, 3}, {2, 0}).sizes() == torch::IntArrayRef{5, 3, 2, 4});
  CHECK(torch::movedim(m, {1, 2}, {2, 1}).equal(m.transpose(1, 2)));
  CHECK(torch::moveaxis(m, 1, 1).equal(m));
  CHECK(tandem::testing::error_of([&] {
          torch::movedim(m, {0, 1}, {2, 2});
        }) == "movedim: destination dim 2 appears twice in (2, 2)");
}

TEST_CASE(
    "libtorch names: torch::linalg's eigh, svd, qr, pinv, norms and rank as libtorch "
    "spells them",
    "[libtorch]") {
  torch::Tensor a = torch::randn({4, 3}, torch::kFloat64);
  auto [l, q] = torch::linalg::eigh(torch::matmul(a.t(), a), "L");
  auto [u, s, vh] = torch::linalg::svd(a, false, std::nullopt);
  auto [qq, r] = torch::linalg::qr(a, "reduced");
  // The eigenvalues of A^T A are the squared singular values, in the other order.
  CHECK(torch::allclose(l.flip({0}), s * s, 1e-10, 1e-10));
  CHECK(torch::allclose(torch::linalg::svdvals(a, std::nullopt), s, 1e-12, 1e-12));
  CHECK(torch::allclose(torch::matmul(qq, r), a, 1e-12, 1e-12));
  CHECK(torch::allclose(torch::matmul(torch::linalg::pinv(a, 1e-15, false), a),
                        torch::eye(3, torch::kFloat64), 1e-12, 1e-12));
  CHECK(torch::allclose(torch::pinverse(a), torch::linalg::pinv(a, 1e-15, false)));
  CHECK(torch::linalg::matrix_norm(a, "fro", {-2, -1}, false, std::nullopt).item<double>() ==
        Approx(std::sqrt((s * s).sum().item<double>())));
  CHECK(torch::linalg::matrix_norm(a, 2, {-2, -1}, false, std::nullopt).item<double>() ==
        Approx(s[0].item<double>()));
  CHECK(torch::linalg::matrix_rank(a, 1e-7, false).item<int64_t>() == 3);
  CHECK(torch::linalg::eigvalsh(torch::matmul(a.t(), a), "U").allclose(l));
  torch::Tensor b = torch::randn({4, 2}, torch::kFloat64);
  auto [x, residuals, rank, values] = torch::linalg::lstsq(a, b, std::nullopt, "gelsd");
  CHECK(torch::allclose(x, torch::matmul(torch::linalg::pinv(a, 1e-15, false), b), 1e-10, 1e-10));
  CHECK(rank.item<int64_t>() == 3);
  CHECK(torch::allclose(values, s));
}

TEST_CASE("libtorch names: torch::linalg's LU family, matrix_exp, norm, cond and multi_dot",
          "[libtorch]") {
  torch::Tensor a = torch::randn({3, 3}, torch::kFloat64) + 3 * torch::eye(3, torch::kFloat64);
  torch::Tensor b = torch::randn({3, 2}, torch::kFloat64);
  auto [lu, pivots] = torch::linalg::lu_factor(a, true);
  auto [p, l, u] = torch::lu_unpack(lu, pivots, true, true);
  CHECK(torch::allclose(torch::matmul(torch::matmul(p, l), u), a, 1e-12, 1e-12));
  auto [p2, l2, u2] = torch::linalg::lu(a, true);
  CHECK(torch::allclose(l2, l));
  CHECK(torch::allclose(torch::matmul(a, torch::linalg::lu_solve(lu, pivots, b, true, false)), b,
                        1e-12, 1e-12));
  auto [inverse, info] = torch::linalg::inv_ex(a, false);
  CHECK(info.item<int32_t>() == 0);
  CHECK(torch::allclose(torch::matmul(torch::matrix_exp(a), torch::linalg::matrix_exp(-a)),
                        torch::eye(3, torch::kFloat64), 1e-10, 1e-10));
  CHECK(torch::linalg::norm(a, std::nullopt, std::nullopt, false, std::nullopt)
            .allclose(torch::linalg::norm(a, "fro", std::nullopt, false, std::nullopt)));
  CHECK(torch::linalg::norm(b, 2, {0}, false, std::nullopt).sizes() == std::vector<int64_t>{2});
  CHECK(torch::linalg::cond(a, std::nullopt).item<double>() ==
        Approx((torch::linalg::norm(a, 2) * torch::linalg::norm(inverse, 2)).item<double>()));
  CHECK(torch::allclose(torch::linalg::multi_dot({a, b, b.t()}), a.matmul(b).matmul(b.t())));
  CHECK(torch::allclose(torch::linalg::vecdot(a, a, 0), (a * a).sum(0)));
}

TEST_CASE("libtorch names: ConvTranspose1d and ConvTranspose3d, and their functional forms",
          "[libtorch]") {
  namespace F = torch::nn::functional;
  torch::manual_seed(4);
  torch::nn::ConvTranspose1d up1(
      torch::nn::ConvTranspose1dOptions(4, 6, 3).stride(2).padding(1).output_padding(1).groups(2));
  CHECK(up1.weight.sizes() == Shape{4, 3, 3});
  auto x1 = torch::randn({2, 4, 5});
  auto y1 = up1.forward(x1);
  CHECK(y1.sizes() == Shape{2, 6, 10});  // (5 - 1) 2 - 2 + 2 + 1 + 1
  CHECK(torch::equal(y1, F::conv_transpose1d(x1, up1.weight,
                                             F::ConvTranspose1dFuncOptions()
                                                 .bias(up1.bias)
                                                 .stride(2)
                                                 .padding(1)
                                                 .output_padding(1)
                                                 .groups(2))));
  std::ostringstream os;
  os << up1;
  CHECK(os.str() ==
        "ConvTranspose1d(4, 6, kernel_size=(3,), stride=(2,), padding=(1,), "
        "output_padding=(1,), groups=2)");
  // A 3-d kernel one deep at stride 1 is conv_transpose2d on every depth slice.
  torch::nn::ConvTranspose3d up3(torch::nn::ConvTranspose3dOptions(3, 2, {1, 3, 3}).bias(false));
  auto x3 = torch::randn({2, 3, 4, 5, 6});
  auto by_slices = torch::stack({torch::conv_transpose2d(x3.select(2, 0), up3.weight.select(2, 0)),
                                 torch::conv_transpose2d(x3.select(2, 1), up3.weight.select(2, 0)),
                                 torch::conv_transpose2d(x3.select(2, 2), up3.weight.select(2, 0)),
                                 torch::conv_transpose2d(x3.select(2, 3), up3.weight.select(2, 0))},
                                2);
  CHECK(torch::allclose(up3.forward(x3), by_slices, 1e-5, 1e-5));
  CHECK_THROWS_WITH(torch::conv_transpose1d(torch::randn({2, 4, 5, 1}), up1.weight),
                    Catch::Contains("conv_transpose1d: expected input (N, C_in, L) or (C_in, L) "
                                    "and weight (C_in, C_out / groups, k), got (2, 4, 5, 1)"));
  CHECK_THROWS_WITH(
      torch::conv_transpose3d(x3, up3.weight, {}, {2, 1, 1}, 0, {2, 0, 0}),
      Catch::Contains("conv_transpose3d: output_padding must be smaller than either stride or "
                      "dilation"));
  CHECK_THROWS_WITH(torch::conv_transpose3d(x3, up3.weight, torch::randn({3})),
                    Catch::Contains("conv_transpose3d: bias must be (2), got (3,)"));
  CHECK_THROWS_WITH(torch::conv_transpose3d(torch::randn({2, 2, 4, 5, 6}), up3.weight),
                    Catch::Contains("conv_transpose3d: input must be (N, C, D, H, W) with C == "
                                    "weight.size(0) == 3, got (2, 2, 4, 5, 6)"));
}

TEST_CASE("an undefined tensor registers an absent parameter or buffer, as libtorch's",
          "[nn][libtorch]") {
  struct NoBias : torch::nn::Module {
    torch::Tensor weight, bias, stat;
    NoBias() {
      weight = register_parameter("weight", torch::ones({2}));
      bias = register_parameter("bias", torch::Tensor(), false);  // libtorch's conv.h idiom
      stat = register_buffer("stat", torch::Tensor());
    }
  };
  auto m = std::make_shared<NoBias>();
  CHECK(m->parameters().size() == 1);
  CHECK(m->named_parameters().keys() == std::vector<std::string>{"weight"});
  CHECK(m->buffers().empty());
  CHECK(m->state_dict().keys() == std::vector<std::string>{"weight"});
  CHECK_THROWS_WITH(m->register_parameter("bias", torch::ones({1})),
                    Catch::Contains("already registered"));
  (m->weight * 3.0).sum().backward();
  m->to(torch::kFloat64);
  CHECK(m->weight.dtype() == torch::kFloat64);
  CHECK(m->weight.grad().dtype() == torch::kFloat64);  // converted with it, as torch's Module.to
  CHECK(m->weight.grad().to_vector<double>() == std::vector<double>{3, 3});
  m->load_state_dict(m->state_dict());
  CHECK(m->weight.to_vector<double>() == std::vector<double>{1, 1});
}

TEST_CASE("libtorch forms a gap survey found missing: flags, options, bounds and rounded division",
          "[libtorch]") {
  using torch::indexing::Slice;
  auto f64 = [](const torch::Tensor& t) { return t.to(torch::kFloat64).to_vector<double>(); };
  torch::Tensor x = torch::arange(6.0).view({2, 3});
  SECTION("var(false) and std(false) are the biased statistics of all elements, not dim 0") {
    // torch 1.13: x.var(False) 2.91667, x.std(False) 1.70783, torch.std(x) 1.87083.
    CHECK(x.var(false).item<float>() == Approx(2.9166667));
    CHECK(x.std(false).item<float>() == Approx(1.7078252));
    CHECK(torch::var(x, false).item<float>() == Approx(2.9166667));
    CHECK(torch::std(x).item<float>() == Approx(1.8708287));
    CHECK(torch::std(x, 0).sum().item<float>() == Approx(6.3639607));
    CHECK(x.var(0).dim() == 1);  // a dim is still a dim
    CHECK(x.var({1}).sizes() == Shape{2});
  }
  SECTION("the *_like factories and new_* take options naming what differs") {
    CHECK(torch::zeros_like(x, torch::kLong).dtype() == torch::kLong);
    torch::Tensor b = torch::ones_like(x, x.options().dtype(torch::kBool));
    CHECK(b.dtype() == torch::kBool);
    CHECK(b.sizes() == x.sizes());
    CHECK(f64(torch::full_like(x, 7, torch::kInt32)) == std::vector<double>(6, 7.0));
    CHECK(torch::full_like(x, 7, torch::kInt32).dtype() == torch::kInt32);
    CHECK(torch::empty_like(x, torch::requires_grad()).requires_grad());
    CHECK(torch::randn_like(x, torch::kFloat64).dtype() == torch::kFloat64);
    CHECK(x.new_zeros(3).sizes() == Shape{3});
    CHECK(x.new_zeros(3).dtype() == torch::kFloat32);
    CHECK(x.new_ones({2}, torch::kFloat64).dtype() == torch::kFloat64);
    CHECK(x.new_full({2}, 5, torch::kLong).to_vector<int64_t>() == std::vector<int64_t>{5, 5});
  }
  SECTION("slice's defaults, tensor bounds, a tensor fill value, where of two numbers") {
    CHECK(f64(x.slice(1, 1)) == std::vector<double>{1, 2, 4, 5});
    CHECK(f64(x.slice()) == f64(x));
    // torch 1.13's values and gradients (clamp_backward_min_max): NaN anywhere gives NaN and no
    // gradient; min > max gives max.
    torch::Tensor t = torch::from_vector<float>({-2, 0.5, 3, NAN, 1, 2}).requires_grad_();
    torch::Tensor lo = torch::from_vector<float>({0, 0, 0, 0, NAN, 3}).requires_grad_();
    torch::Tensor hi = torch::ones({6}).requires_grad_();
    torch::Tensor c = t.clamp(lo, hi);
    (c * torch::arange(1, 7)).sum().backward();
    std::vector<float> cv = c.to_vector<float>();
    CHECK(cv[0] == 0.0f);
    CHECK(cv[1] == 0.5f);
    CHECK(cv[2] == 1.0f);
    CHECK(std::isnan(cv[3]));
    CHECK(std::isnan(cv[4]));
    CHECK(cv[5] == 1.0f);
    CHECK(f64(t.grad()) == std::vector<double>{0, 2, 0, 0, 0, 0});
    CHECK(f64(lo.grad()) == std::vector<double>{1, 0, 0, 0, 0, 0});
    CHECK(f64(hi.grad()) == std::vector<double>{0, 0, 3, 0, 0, 6});
    CHECK(f64(torch::clamp_min(torch::arange(4), torch::full({}, 2))) ==
          std::vector<double>{2, 2, 2, 3});
    torch::Tensor v = torch::full({}, 2.5).requires_grad_();
    torch::Tensor m = torch::from_vector<bool>({true, false, true});
    torch::Tensor y = torch::zeros({3}).masked_fill(m, v);
    (y * torch::from_vector<float>({1, 2, 3})).sum().backward();
    CHECK(f64(y) == std::vector<double>{2.5, 0, 2.5});
    CHECK(v.grad().item<float>() == 4.0f);
    CHECK(torch::where(m, 1, 0).dtype() == torch::kLong);
    CHECK(torch::where(m, 1.5, 0).dtype() == torch::kFloat32);
    CHECK(torch::where(m, true, false).dtype() == torch::kBool);
    CHECK(f64(torch::where(m, 1.5, 0)) == std::vector<double>{1.5, 0, 1.5});
    CHECK(f64(x.pow(torch::full({}, 2.0)).sum()) == std::vector<double>{55});
    CHECK(torch::equal(x.lerp(x + 2, 0.5), x + 1));
    CHECK(torch::equal(x.maximum(x.flip(1)), torch::maximum(x, x.flip(1))));
    CHECK(torch::equal(x.where(x > 2, torch::zeros_like(x)), torch::where(x > 2, x, 0)));
  }
  SECTION("div with a rounding mode and floor_divide, as torch 1.13's") {
    torch::Tensor a = torch::tensor({7, -7, 7, -7, 0, -9});
    torch::Tensor b = torch::tensor({2, 2, -2, -2, 3, -1});
    CHECK(torch::div(a, b, "floor").to_vector<int64_t>() ==
          std::vector<int64_t>{3, -4, -4, 3, 0, 9});
    CHECK(torch::div(a, b, "trunc").to_vector<int64_t>() ==
          std::vector<int64_t>{3, -3, -3, 3, 0, 9});
    CHECK(torch::floor_divide(a, b).dtype() == torch::kLong);
    CHECK(a.div(2, "floor").to_vector<int64_t>() == std::vector<int64_t>{3, -4, 3, -4, 0, -5});
    // INT64_MIN / -1 wraps (torch's CPU kernel traps there).
    CHECK(torch::floor_divide(torch::tensor({std::numeric_limits<int64_t>::min()}), -1)
              .item<int64_t>() == std::numeric_limits<int64_t>::min());
    torch::Tensor f = torch::from_vector<double>({7.5, -7.5, 1, -1, 0, -0.0, 5, NAN});
    torch::Tensor g = torch::from_vector<double>({2, 2, 0, 0, -3, 3, -0.5, 1});
    const double inf = INFINITY;
    std::vector<double> fl = torch::div(f, g, "floor").to_vector<double>();
    std::vector<double> tr = torch::div(f, g, "trunc").to_vector<double>();
    const std::vector<double> want_fl{3, -4, inf, -inf, -0.0, -0.0, -10},
        want_tr{3, -3, inf, -inf, -0.0, -0.0, -10};
    for (size_t i = 0; i < want_fl.size(); ++i) {
      CHECK(fl[i] == want_fl[i]);
      CHECK(tr[i] == want_tr[i]);
      CHECK(std::signbit(fl[i]) == std::signbit(want_fl[i]));
    }
    CHECK(std::isnan(fl[7]));
    CHECK(std::isnan(tr[7]));
    // torch: floor of 0.25 is +0, of -0.25 is -1, 0 / -1 is -0.
    std::vector<double> signs = torch::div(torch::from_vector<double>({0.5, -0.5, 0}),
                                           torch::from_vector<double>({2, 2, -1}), "floor")
                                    .to_vector<double>();
    CHECK((signs[0] == 0 && !std::signbit(signs[0]) && signs[1] == -1 && std::signbit(signs[2])));
    CHECK(f64(torch::floor_divide(torch::tensor({7, -7}), 2.5)) == std::vector<double>{2, -3});
    CHECK(torch::floor_divide(torch::tensor({7, -7}), 2.5).dtype() == torch::kFloat32);
    CHECK(f64(torch::floor_divide(torch::tensor({7.0, -7.0, 100.0}, torch::kHalf),
                                  torch::tensor({2.0, 2.0, 3.0}, torch::kHalf))) ==
          std::vector<double>{3, -4, 33});
    // In place; the gradient is zero (torch's), floor_divide has none.
    torch::Tensor ip = torch::tensor({7, -7});
    ip.div_(2, "floor");
    CHECK(ip.to_vector<int64_t>() == std::vector<int64_t>{3, -4});
    ip.floor_divide_(torch::tensor({-2, 3}));
    CHECK(ip.to_vector<int64_t>() == std::vector<int64_t>{-2, -2});
    torch::Tensor w = torch::from_vector<float>({3, -5}).requires_grad_();
    torch::Tensor q = torch::div(w, 2.0, "floor");
    CHECK(q.requires_grad());
    (q * 3.0).sum().backward();
    CHECK(f64(w.grad()) == std::vector<double>{0, 0});
    CHECK_FALSE(torch::floor_divide(w, 2.0).requires_grad());
    // Refused: integer division by zero (nothing written), bool, an unknown mode.
    CHECK_THAT(tandem::testing::error_of([&] {
                 ip.floor_divide_(torch::tensor({1, 0}));
               }),
               Catch::Contains("integer division by zero"));
    CHECK(ip.to_vector<int64_t>() == std::vector<int64_t>{-2, -2});
    CHECK_THAT(tandem::testing::error_of([&] { torch::div(a, b, "round"); }),
               Catch::Contains("rounding_mode must be"));
    CHECK_THAT(tandem::testing::error_of([&] { torch::floor_divide(a > 0, a > 1); }),
               Catch::Contains("bool operands"));
  }
  SECTION("nan_to_num: the dtype's largest finite values by default, integers as they are") {
    torch::Tensor n = torch::from_vector<float>({NAN, INFINITY, -INFINITY, 1.5});
    const std::vector<std::pair<DType, double>> largest{{torch::kHalf, 65504.0},
                                                        {torch::kBFloat16, 3.3895313892515355e38},
                                                        {torch::kFloat32, 3.4028234663852886e38},
                                                        {torch::kFloat64, 1.7976931348623157e308}};
    for (auto [dt, big] : largest)
      CHECK(f64(torch::nan_to_num(n.to(dt))) == std::vector<double>{0, big, -big, 1.5});
    CHECK(f64(n.nan_to_num(1.0, 2.0, -3.0)) == std::vector<double>{1, 2, -3, 1.5});
    CHECK(torch::equal(torch::nan_to_num(torch::arange(3)), torch::arange(3)));
    torch::Tensor r = n.clone().requires_grad_();
    torch::nan_to_num(r).sum().backward();
    CHECK(f64(r.grad()) == std::vector<double>{0, 0, 0, 1});
    torch::Tensor z = n.clone();
    z.nan_to_num_();
    CHECK(f64(z)[0] == 0.0);
  }
}

TEST_CASE("several tensor indices broadcast together, as torch's advanced indexing", "[libtorch]") {
  using torch::indexing::Slice;
  auto values = [](const torch::Tensor& t) { return t.detach().to_vector<float>(); };
  // Values, shapes and gradients printed by torch 1.13 for the same indexing.
  torch::Tensor x = torch::arange(24.0).view({2, 3, 4}).requires_grad_();
  torch::Tensor a = x.index({torch::tensor({1, 0, 1}), torch::tensor({2, 0, -1})});  // adjacent
  torch::Tensor b = x.index({Slice(), torch::tensor({0, 2}), torch::tensor({1, 3}).view({2, 1})});
  torch::Tensor c = x.index({torch::tensor({1, 0}), Slice(), torch::tensor({3, 0})});  // apart
  torch::Tensor m = torch::from_vector<bool>({true, false, true, false, true, false}, {2, 3});
  torch::Tensor d = x.index({m, torch::tensor({0, 1, 3})});  // a mask and an index
  CHECK(a.sizes() == Shape{3, 4});
  CHECK(values(a) == std::vector<float>{20, 21, 22, 23, 0, 1, 2, 3, 20, 21, 22, 23});
  CHECK(b.sizes() == Shape{2, 2, 2});
  CHECK(values(b) == std::vector<float>{1, 9, 3, 11, 13, 21, 15, 23});
  CHECK(c.sizes() == Shape{2, 3});
  CHECK(values(c) == std::vector<float>{15, 19, 23, 0, 4, 8});
  CHECK(values(d) == std::vector<float>{0, 9, 19});
  (a.sum() + (b * 2).sum() + (c * 3).sum() + (d * 4).sum()).backward();
  CHECK(values(x.grad()) ==
        std::vector<float>{8, 3, 1, 3, 3, 0, 0, 0, 3, 6, 0, 2, 0, 2, 0, 5, 0, 0, 0, 7, 2, 4, 2, 7});
  torch::Tensor y = torch::zeros({3, 4});
  y.index_put_({torch::tensor({0, 2}), torch::tensor({1, 3})}, torch::from_vector<float>({5, 6}));
  y.index_put_({torch::tensor({1}), Slice()}, 7.0);
  CHECK(values(y) == std::vector<float>{0, 5, 0, 0, 7, 7, 7, 7, 0, 0, 0, 6});
  torch::Tensor z = torch::zeros({2, 3, 4});
  z.index_put_({torch::tensor({0, 1}), Slice(), torch::tensor({0, 3}).view({2, 1})},
               torch::arange(12.0).view({2, 2, 3}));
  CHECK(values(z) == std::vector<float>{0, 0, 0, 6, 1, 0, 0, 7,  2, 0, 0, 8,
                                        3, 0, 0, 9, 4, 0, 0, 10, 5, 0, 0, 11});
  // The common case: each row's score at its label.
  torch::Tensor logits = torch::randn({5, 7});
  torch::Tensor target = torch::tensor({6, 0, 3, 3, 1});
  CHECK(torch::equal(logits.index({torch::arange(5), target}),
                     logits.gather(1, target.unsqueeze(1)).squeeze(1)));
  CHECK_THROWS_WITH(x.index({torch::tensor({0, 1}), torch::tensor({0, 1, 2})}),
                    Catch::Contains("cannot be broadcast"));
  CHECK_THROWS_AS(x.index({torch::tensor({0}), torch::tensor({-4})}), tandem::IndexError);
}

TEST_CASE("libtorch ops the survey found missing: inverse trig, erfinv, counting and index helpers",
          "[libtorch]") {
  // Values and gradients printed by torch 1.13 (f64), compared to a few ulps.
  auto close = [](const torch::Tensor& got, const std::vector<double>& want, double eps = 1e-12) {
    const std::vector<double> v =
        got.detach().to(torch::kFloat64).reshape({-1}).to_vector<double>();
    REQUIRE(v.size() == want.size());
    for (size_t i = 0; i < v.size(); ++i) {
      INFO("element " << i);
      if (std::isnan(want[i]))
        CHECK(std::isnan(v[i]));
      else if (std::isinf(want[i]))
        CHECK(v[i] == want[i]);
      else
        CHECK(v[i] == Approx(want[i]).epsilon(eps).margin(1e-300));
    }
  };
  auto value_and_grad = [&](const char* name, torch::Tensor (*f)(const torch::Tensor&),
                            const std::vector<double>& in, const std::vector<double>& value,
                            const std::vector<double>& grad) {
    INFO(name);
    torch::Tensor x = torch::from_vector<double>(in).requires_grad_();
    torch::Tensor y = f(x);
    y.sum().backward();
    close(y, value);
    close(x.grad(), grad);
  };
  const std::vector<double> unit{-0.9, -0.5, 0.0, 0.3, 0.99};
  value_and_grad(
      "asin", torch::asin, unit,
      {-1.1197695149986342, -0.5235987755982989, 0.0, 0.30469265401539747, 1.4292568534704693},
      {2.294157338705618, 1.1547005383792517, 1.0, 1.0482848367219182, 7.088812050083354});
  value_and_grad(
      "acos", torch::acos, unit,
      {2.6905658417935308, 2.0943951023931957, 1.5707963267948966, 1.2661036727794992,
       0.1415394733244273},
      {-2.294157338705618, -1.1547005383792517, -1.0, -1.0482848367219182, -7.088812050083354});
  value_and_grad(
      "atanh", torch::atanh, unit,
      {-1.4722194895832204, -0.5493061443340548, 0.0, 0.30951960420311175, 2.6466524123622457},
      {5.263157894736843, 1.3333333333333333, 1.0, 1.0989010989010988, 50.25125628140696});
  value_and_grad(
      "erfinv", torch::erfinv, unit,
      {-1.1630871536766743, -0.4769362762044699, 0.0, 0.2724627147267544, 1.8213863677184483},
      {3.4280428114518418, 1.1125848189719496, 0.8862269254527579, 0.9545203588405493,
       24.450876473746312});
  const std::vector<double> wide{-30, -2, -1e-8, 0, 0.5, 3, 700};
  const std::vector<double> sinh_values{
      -5343237290762.231, -3.626860407847019, -1.0000000000000002e-08, 0.0,
      0.5210953054937474, 10.017874927409903, 5.0711602736750225e+303};
  const std::vector<double> cosh_values{
      5343237290762.231,  3.7621956910836314,     1.0, 1.0, 1.1276259652063807,
      10.067661995777765, 5.0711602736750225e+303};
  value_and_grad("sinh", torch::sinh, wide, sinh_values, cosh_values);
  value_and_grad("cosh", torch::cosh, wide, cosh_values, sinh_values);
  value_and_grad("asinh", torch::asinh, wide,
                 {-4.09462222433053, -1.4436354751788103, -9.999999999999999e-09, 0.0,
                  0.48121182505960347, 1.8184464592320668, 7.2442280258070415},
                 {0.03331483023263848, 0.4472135954999579, 1.0, 1.0, 0.8944271909999159,
                  0.31622776601683794, 0.001428569970847712});
  value_and_grad(
      "acosh", torch::acosh, {1, 1.0000001, 1.5, 10, 1e10},
      {0.0, 0.0004472135919037347, 0.9624236501192069, 2.993222846126381, 23.7189981105004},
      // (2236.06792098999 from torch's 1 / sqrt(x^2 - 1), which cancels)
      {INFINITY, 2236.0679209453, 0.8944271909999159, 0.10050378152592121, 1e-10});
  // Its ends and outside its domain; overflowing squares; f32.
  const torch::Tensor edges = torch::from_vector<double>({1, -1, 2});
  close(torch::asin(edges), {1.5707963267948966, -1.5707963267948966, NAN});
  close(torch::atanh(edges), {INFINITY, -INFINITY, NAN});
  close(torch::erfinv(edges), {INFINITY, -INFINITY, NAN});
  close(torch::asinh(torch::from_vector<double>({1e200, -1e300})),
        {461.2101657793691, -691.4686750787736});
  close(torch::from_vector<float>({-0.999f, -0.3f, 0.5f, 0.9999f}).erfinv(),
        {-2.326756715774536, -0.27246272563934326, 0.4769362807273865, 2.7510364055633545}, 2e-6);
  CHECK(torch::asin(torch::tensor({0, 1})).dtype() == torch::kFloat32);

  torch::Tensor a = torch::from_vector<double>({1, -INFINITY, INFINITY, 1000, -3});
  torch::Tensor b = torch::from_vector<double>({2, -INFINITY, INFINITY, 999, 5});
  close(torch::logaddexp(a, b),
        {2.313261687518223, -INFINITY, INFINITY, 1000.3132616875182, 5.000335406372896});
  torch::Tensor x = torch::from_vector<double>({0, 0, 2, 3, 0}).requires_grad_();
  torch::Tensor y = torch::from_vector<double>({0, NAN, 3, 0.5, 2}).requires_grad_();
  torch::Tensor xy = torch::xlogy(x, y);
  xy.sum().backward();
  close(xy, {0.0, NAN, 2.1972245773362196, -2.0794415416798357, 0.0});
  close(x.grad(), {0.0, NAN, 1.0986122886681098, -0.6931471805599453, 0.6931471805599453});
  close(y.grad(), {NAN, NAN, 0.6666666666666666, 6.0, 0.0});

  torch::Tensor t = torch::from_vector<float>({0, 1, NAN, 2, 0, 0}, {2, 3});
  CHECK(torch::count_nonzero(t).item<int64_t>() == 3);
  CHECK(t.count_nonzero({0}).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1});
  CHECK(torch::bincount(torch::tensor({1, 3, 3, 0})).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 1, 0, 2});
  torch::Tensor weighted =
      torch::bincount(torch::tensor({1, 3, 3}), torch::from_vector<float>({0.5, 1, 2}), 6);
  CHECK(weighted.dtype() == torch::kFloat32);
  close(weighted, {0, 0.5, 0, 3, 0, 0});
  CHECK(torch::bincount(torch::tensor({1, 3}), torch::tensor({1, 2})).dtype() == torch::kFloat64);
  CHECK_THROWS_WITH(torch::bincount(torch::tensor({1, -1})), Catch::Contains("non-negative"));
  CHECK(torch::tril_indices(3, 4, 1).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 0, 1, 1, 1, 2, 2, 2, 2, 0, 1, 0, 1, 2, 0, 1, 2, 3});
  CHECK(torch::triu_indices(4, 3, -1).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 3, 0, 1, 2, 0, 1, 2, 1, 2, 2});
  CHECK(torch::tril_indices(0, 3).sizes() == Shape{2, 0});

  torch::Tensor m = torch::arange(12.0).view({3, 4});
  close(torch::take_along_dim(m, torch::tensor({2, 0, 1, 1}).view({1, 4}), 0), {8, 1, 6, 7});
  close(m.take_along_dim(torch::tensor({11, 0})), {11, 0});
  close(m.index_fill(1, torch::tensor({0, -1}), -2.0), {-2, 1, 2, -2, -2, 5, 6, -2, -2, 9, 10, -2});
  close(torch::rot90(m), {3, 7, 11, 2, 6, 10, 1, 5, 9, 0, 4, 8});
  close(m.rot90(-1), {8, 4, 0, 9, 5, 1, 10, 6, 2, 11, 7, 3});
  close(torch::rot90(m, 2, {1, 0}), {11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  torch::Tensor tall = torch::zeros({7, 3});
  tall.fill_diagonal_(5, /*wrap=*/true);
  close(tall, {5, 0, 0, 0, 5, 0, 0, 0, 5, 0, 0, 0, 5, 0, 0, 0, 5, 0, 0, 0, 5});
  torch::Tensor cube = torch::zeros({3, 3, 3});
  cube.fill_diagonal_(1);
  CHECK(cube.sum().item<float>() == 3);
  CHECK(cube.index({2, 2, 2}).item<float>() == 1);
  torch::Tensor acc = torch::zeros({5});
  acc.index_put_({torch::tensor({0, 2, 0})}, torch::from_vector<float>({1, 2, 3}), true);
  close(acc, {4, 0, 2, 0, 0});
  // One integer where libtorch takes a list; to() and copy_ with libtorch's flags.
  CHECK(torch::equal(torch::roll(m, 1, 0), torch::roll(m, {1}, {0})));
  CHECK(torch::equal(m.roll(1), torch::roll(m, Shape{1})));
  CHECK(torch::equal(torch::flip(m, 0), m.flip({0})));
  CHECK(m.tile(2).sizes() == Shape{3, 8});
  CHECK(torch::reshape(m, -1).sizes() == Shape{12});
  CHECK(torch::ones({1}).expand(3).sizes() == Shape{3});
  CHECK(m.split({1, 2}).size() == 2);
  CHECK(m.to(torch::kFloat64, false, true).dtype() == torch::kFloat64);
  torch::Tensor copied = m.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
  CHECK_FALSE(copied.is_same(m));
  CHECK(torch::equal(copied, m));
  torch::Tensor dst = torch::zeros({3, 4});
  dst.copy_(m, /*non_blocking=*/true);
  CHECK(torch::equal(dst, m));
  // Softmax in f32 of an f16 input; torch::batch_norm's own argument order.
  namespace F = torch::nn::functional;
  torch::Tensor h = m.to(torch::kHalf);
  torch::Tensor p = F::softmax(h, F::SoftmaxFuncOptions(1).dtype(torch::kFloat32));
  CHECK(p.dtype() == torch::kFloat32);
  CHECK(torch::allclose(p, torch::softmax(m, 1)));
  CHECK(torch::softmax(m, 1, std::nullopt).dtype() == torch::kFloat32);
  torch::Tensor in = torch::randn({4, 3, 2, 2});
  torch::Tensor w = torch::rand({3}), bias = torch::randn({3});
  torch::Tensor rm1 = torch::zeros({3}), rv1 = torch::ones({3});
  torch::Tensor rm2 = rm1.clone(), rv2 = rv1.clone();
  torch::Tensor ours = torch::batch_norm(in, rm1, rv1, w, bias, true, 0.1, 1e-5);
  torch::Tensor theirs = torch::batch_norm(in, w, bias, rm2, rv2, true, 0.1, 1e-5, true);
  CHECK(torch::equal(ours, theirs));
  CHECK(torch::equal(rm1, rm2));
}

TEST_CASE("index_put with tensor indices is recorded in the graph, as torch's index_put",
          "[libtorch]") {
  // Values and gradients printed by torch 1.13 for the same program.
  auto f64 = torch::TensorOptions(torch::kFloat64);
  torch::Tensor x = torch::arange(12.0, f64).view({3, 4}).requires_grad_();
  torch::Tensor v = torch::from_vector<double>({10, 20}).requires_grad_();
  torch::Tensor y = x * 2;
  y.index_put_({torch::tensor({0, 2}), torch::tensor({1, 3})}, v);  // in place, in the graph
  torch::Tensor z = y.index_put({torch::tensor({1, 1}), torch::tensor({0, 0})}, v * 3, true);
  torch::Tensor w = z.index_put({torch::tensor({2})}, torch::full({}, 5.0, f64));
  (w * torch::arange(12.0, f64).view({3, 4})).sum().backward();
  CHECK(w.to_vector<double>() == std::vector<double>{0, 10, 4, 6, 98, 10, 12, 14, 5, 5, 5, 5});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0});
  CHECK(v.grad().to_vector<double>() == std::vector<double>{13, 12});
  // Without grad it is a copy with the values written.
  torch::Tensor plain = torch::zeros({3});
  CHECK(plain.index_put({torch::tensor({1})}, torch::ones({1})).to_vector<float>() ==
        std::vector<float>{0, 1, 0});
  CHECK(plain.to_vector<float>() == std::vector<float>{0, 0, 0});
}

TEST_CASE(
    "index_copy_, masked_scatter_ and scatter_reduce_ in place in the graph, and what the "
    "new ops refuse",
    "[libtorch]") {
  // Values and gradients printed by torch 1.13 for the same program.
  auto f64 = torch::TensorOptions(torch::kFloat64);
  torch::Tensor x = torch::arange(12.0, f64).view({3, 4}).requires_grad_();
  torch::Tensor s = torch::from_vector<double>({-1, -2, -3, -4, -5, -6}).view({3, 2});
  s.requires_grad_();
  torch::Tensor y = x * 2;
  y.index_copy_(1, torch::tensor({3, 0}), s);
  y.masked_scatter_(y > 10, s.flatten() * 10);
  y.scatter_reduce_(0, torch::tensor({2, 0, 1, 0}).view({1, 4}), x.narrow(0, 0, 1) * 3, "amax");
  (y * torch::arange(12.0, f64).view({3, 4})).sum().backward();
  CHECK(y.to_vector<double>() == std::vector<double>{-2, 3, 4, 9, -4, 10, 6, -3, 0, -20, -30, -5});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{24, 3, 22, 9, 0, 10, 0, 0, 0, 0, 0, 0});
  CHECK(s.grad().to_vector<double>() == std::vector<double>{0, 90, 107, 4, 11, 0});
  // Empty inputs give empty results, as torch's.
  auto [values, inverse, counts] = torch::_unique2(torch::zeros({0}), true, true, true);
  CHECK((values.numel() == 0 && inverse.numel() == 0 && counts.numel() == 0));
  CHECK(std::get<0>(torch::unique_dim(torch::zeros({0, 3}), 0)).shape() == Shape{0, 3});
  // What is refused, with what was wrong.
  torch::Tensor a = torch::ones({2, 3});
  CHECK_THROWS_WITH(a.scatter_reduce(0, torch::zeros({1, 3}, torch::kLong), a, "max"),
                    Catch::Contains("reduce must be sum, prod, mean, amax or amin"));
  CHECK_THROWS_WITH(a.scatter_reduce(0, torch::full({1, 3}, 2, torch::kLong), a, "sum"),
                    Catch::Contains("index 2 is out of bounds for dim 0 of size 2"));
  CHECK_THROWS_WITH(a.masked_scatter(a > 0, torch::ones({5})),
                    Catch::Contains("the mask has 6 true elements but source has only 5"));
  CHECK_THROWS_WITH(torch::quantile(a, 1.5), Catch::Contains("q values must be in [0, 1]"));
  CHECK_THROWS_WITH(torch::quantile(a, 0.5, std::nullopt, false, "cubic"),
                    Catch::Contains("interpolation must be"));
  CHECK_THROWS_WITH(torch::index_copy(a, 1, torch::tensor({0}), torch::ones({2, 2})),
                    Catch::Contains("source must have shape (2, 1)"));
  namespace F = torch::nn::functional;
  CHECK_THROWS_WITH(F::interpolate(a.view({1, 1, 2, 3}),
                                   F::InterpolateFuncOptions().size(Shape{4}).mode(torch::kLinear)),
                    Catch::Contains("linear mode needs a 3-d input"));
  CHECK_THROWS_WITH(
      F::interpolate(
          a.view({1, 1, 6}),
          F::InterpolateFuncOptions().size(Shape{3}).mode(torch::kLinear).antialias(true)),
      Catch::Contains("antialias is for the bilinear and bicubic modes (4-d input), got linear"));
  CHECK_THROWS_WITH(torch::diff(torch::ones({})), Catch::Contains("at least 1 dim"));
  torch::Tensor leaf = torch::zeros({3}).requires_grad_();
  CHECK_THROWS_WITH(leaf.index_copy_(0, torch::tensor({1}), torch::ones({1})),
                    Catch::Contains("index_copy_: in-place operation on a leaf"));
  // NaNs are each distinct and sort last (torch 2's; 1.13's CPU unique misplaces them).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto [u, u_inverse, u_counts] =
      torch::_unique2(torch::from_vector<double>({nan, 1, nan, 1}), true, true, true);
  const std::vector<double> uv = u.to_vector<double>();
  CHECK((uv.size() == 3 && uv[0] == 1 && std::isnan(uv[1]) && std::isnan(uv[2])));
  CHECK(u_inverse.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 2, 0});
  CHECK(u_counts.to_vector<int64_t>() == std::vector<int64_t>{2, 1, 1});
}

TEST_CASE(
    "Embedding's max_norm renormalizes the rows looked up, in the weight, as torch's; "
    "ReLU's options take a bool",
    "[libtorch]") {
  // Values printed by torch 1.13 for the same program.
  torch::Tensor w = torch::arange(12.0, torch::kFloat64).view({4, 3}) / 2;
  auto table = torch::nn::Embedding::from_pretrained(
      w.clone(), torch::nn::EmbeddingFromPretrainedOptions().freeze(false).max_norm(2.0));
  torch::Tensor out = table->forward(torch::tensor({1, 3, 1, 0}).view({2, 2}));
  out.sum().backward();
  require_close(table->weight.flatten(),
                torch::from_vector<double>({0.0, 0.5, 1.0, 0.8485281134238577, 1.131370817898477,
                                            1.414213522373096, 3.0, 3.5, 4.0, 1.0357835958466552,
                                            1.1508706620518392, 1.2659577282570231}),
                1e-12, 1e-12, "renormalized weight");
  // The rows looked up come from the renormalized weight, and the gradient is the lookup's.
  CHECK(torch::equal(out,
                     table->weight.index_select(0, torch::tensor({1, 3, 1, 0})).view({2, 2, 3})));
  CHECK(table->weight.grad().to_vector<double>() ==
        std::vector<double>{1, 1, 1, 2, 2, 2, 0, 0, 0, 1, 1, 1});
  // The functional form renormalizes the caller's weight, here by the 1-norm.
  namespace F = torch::nn::functional;
  torch::Tensor w2 = w.clone();
  torch::Tensor row =
      F::embedding(torch::tensor({2}), w2, F::EmbeddingFuncOptions().max_norm(1.0).norm_type(1.0));
  require_close(
      row.flatten(),
      torch::from_vector<double>({0.2857142829931973, 0.3333333301587302, 0.38095237732426307}),
      1e-12, 1e-12, "renormalized row");
  CHECK(torch::equal(w2[2], row[0]));
  CHECK(torch::equal(w2[0], w[0]));
  CHECK_THROWS_WITH(torch::nn::Embedding(torch::nn::EmbeddingOptions(4, 3).sparse(true)),
                    Catch::Contains("sparse gradients are not supported"));
  // scale_grad_by_freq: row 1, looked up twice, gets the mean of its two gradients, as torch's
  // (the golden cases check the values against torch's); a clone keeps it.
  torch::nn::Embedding freq(torch::nn::EmbeddingOptions(4, 3).scale_grad_by_freq(true));
  freq(torch::tensor({1, 3, 1})).sum().backward();
  CHECK(freq.weight.grad().to_vector<float>() ==
        std::vector<float>{0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1});
  CHECK(std::dynamic_pointer_cast<torch::nn::Embedding>(freq.clone())->scale_grad_by_freq);
  // libtorch's ReLUOptions(bool) and F::ReLUFuncOptions: inplace is taken, the result is relu's.
  torch::Tensor x = torch::from_vector<float>({-1, 2});
  CHECK(torch::equal(F::relu(x, F::ReLUFuncOptions(true)), torch::relu(x)));
  CHECK(torch::nn::ReLU(torch::nn::ReLUOptions(true)).options.inplace());
}

TEST_CASE(
    "searchsorted orders NaN as sort does; var with no degrees of freedom left has "
    "torch's infinite gradient",
    "[libtorch]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // NumPy's searchsorted gives these; before, a NaN boundary counted as below every value.
  torch::Tensor seq = torch::from_vector<double>({1, 2, nan});
  torch::Tensor values = torch::from_vector<double>({0, 1.5, 3, nan});
  CHECK(torch::searchsorted(seq, values).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 2});
  CHECK(torch::searchsorted(seq, values, false, true).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 1, 2, 3});
  // Without NaN boundaries a NaN value goes last, as torch's.
  CHECK(torch::searchsorted(torch::from_vector<double>({1, 2}), values).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 1, 2, 2});
  // torch 1.13: var([1, 3], correction=2) is inf and its gradient [-inf, inf]; std's is NaN.
  torch::Tensor x = torch::from_vector<double>({1, 3}).requires_grad_();
  torch::Tensor v = torch::var(x, {}, 2);
  v.backward();
  CHECK(std::isinf(v.item<double>()));
  CHECK(x.grad().to_vector<double>() ==
        std::vector<double>{-std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::infinity()});
  // The usual case and its second derivative still match torch's: var([1, 2, 4]) = 7/3, its
  // gradient 2 (x - mean) / 2 = [-4/3, -1/3, 5/3]; d/dx of sum(grad^2) = 2 (grad - mean(grad)).
  torch::Tensor y = torch::from_vector<double>({1, 2, 4}).requires_grad_();
  torch::Tensor g = torch::autograd::grad({torch::var(y)}, {y}, {}, {}, true)[0];
  require_close(g, torch::from_vector<double>({-4.0 / 3, -1.0 / 3, 5.0 / 3}), 1e-15, 0, "grad");
  torch::Tensor gg = torch::autograd::grad({(g * g).sum()}, {y})[0];
  require_close(gg, torch::from_vector<double>({-8.0 / 3, -2.0 / 3, 10.0 / 3}), 1e-14, 0,
                "second derivative");
}

TEST_CASE("grid_sample and affine_grid in libtorch's spelling, and what they refuse",
          "[libtorch]") {
  namespace F = torch::nn::functional;
  torch::Tensor x = torch::arange(12.0).view({1, 1, 3, 4});
  // The identity transform samples every pixel's centre: the input back.
  torch::Tensor identity = torch::from_vector<float>({1, 0, 0, 0, 1, 0}).view({1, 2, 3});
  torch::Tensor grid = F::affine_grid(identity, {1, 1, 3, 4}, false);
  CHECK(torch::allclose(F::grid_sample(x, grid, F::GridSampleFuncOptions().align_corners(false)), x,
                        1e-6, 1e-6));
  CHECK(torch::equal(F::grid_sample(x, grid,
                                    F::GridSampleFuncOptions()
                                        .mode(torch::kNearest)
                                        .padding_mode(torch::kZeros)
                                        .align_corners(false)),
                     x));
  // Far outside: zeros, the nearest edge, or the edge reflected back.
  torch::Tensor far = torch::full({1, 1, 1, 2}, 5.0);
  CHECK(F::grid_sample(x, far).item<float>() == 0);
  CHECK(F::grid_sample(x, far, F::GridSampleFuncOptions().padding_mode(torch::kBorder))
            .item<float>() == 11);
  // Bicubic at the pixels' centres gives the pixels back; it takes 4-d input only, as torch's.
  CHECK(torch::allclose(F::grid_sample(x, grid, F::GridSampleFuncOptions().mode(torch::kBicubic)),
                        x, 1e-5, 1e-5));
  CHECK_THROWS_WITH(F::grid_sample(x.unsqueeze(2), torch::zeros({1, 1, 1, 1, 3}),
                                   F::GridSampleFuncOptions().mode(torch::kBicubic)),
                    Catch::Contains("bicubic mode takes a 4-d input, got 5 dims"));
  CHECK_THROWS_WITH(F::grid_sample(x, far, F::GridSampleFuncOptions().mode("area")),
                    Catch::Contains("mode 'area' is not supported"));
  CHECK_THROWS_WITH(F::grid_sample(x, torch::zeros({1, 2, 2, 3})),
                    Catch::Contains("expected a grid of shape (N, ..., 2)"));
  CHECK_THROWS_WITH(F::affine_grid(torch::zeros({1, 3, 4}), {1, 1, 3, 4}),
                    Catch::Contains("theta must be (N, 2, 3)"));
}

TEST_CASE("libtorch's in-place samplers and torch::normal draw their distributions", "[libtorch]") {
  // Each against its closed form: means, spreads and frequencies of 100,000 draws, within five
  // standard errors (a seeded generator: the same draws every run).
  const int64_t n = 100000;
  const double root_n = std::sqrt(static_cast<double>(n));
  tandem::Generator gen(2024);
  auto f64 = torch::TensorOptions(torch::kFloat64);
  auto mean_of = [](const torch::Tensor& t) { return t.to(torch::kFloat64).mean().item<double>(); };
  auto fraction = [&](const torch::Tensor& mask) { return mean_of(mask); };

  torch::Tensor e = torch::empty({n}, f64).exponential_(2.0, &gen);
  CHECK(e.min().item<double>() >= 0);
  CHECK(std::abs(mean_of(e) - 0.5) < 5 * 0.5 / root_n);

  torch::Tensor g = torch::empty({n}, torch::kInt64).geometric_(0.3, &gen);
  CHECK(g.min().item<int64_t>() == 1);
  const double g_sd = std::sqrt(0.7) / 0.3;
  CHECK(std::abs(mean_of(g) - 1 / 0.3) < 5 * g_sd / root_n);
  CHECK(std::abs(fraction(g == 1) - 0.3) < 5 * std::sqrt(0.3 * 0.7) / root_n);

  torch::Tensor l = torch::empty({n}, f64).log_normal_(1.0, 0.5, &gen);
  CHECK(std::abs(mean_of(torch::log(l)) - 1.0) < 5 * 0.5 / root_n);
  CHECK(std::abs(torch::log(l).std().item<double>() - 0.5) < 5 * 0.5 / std::sqrt(2.0 * n));

  torch::Tensor c = torch::empty({n}, f64).cauchy_(2.0, 3.0, &gen);
  CHECK(std::abs(torch::median(c).item<double>() - 2.0) < 5 * M_PI * 3.0 / (2 * root_n));
  CHECK(std::abs(fraction(c < -1.0) - 0.25) < 5 * std::sqrt(0.25 * 0.75) / root_n);

  torch::Tensor r = torch::empty({n}, torch::kInt64).random_(3, 8, &gen);
  CHECK((r.min().item<int64_t>() == 3 && r.max().item<int64_t>() == 7));
  for (int64_t v = 3; v < 8; ++v) CHECK(std::abs(fraction(r == v) - 0.2) < 5 * 0.4 / root_n);
  CHECK(torch::empty({n}, torch::kFloat32).random_(4, &gen).max().item<float>() == 3);
  // Without an upper bound: up to the largest integer the dtype holds exactly, as torch's.
  torch::Tensor h = torch::empty({n}, torch::kHalf).random_(&gen).to(torch::kFloat32);
  CHECK((h.min().item<float>() == 0 && h.max().item<float>() == 2048));
  torch::Tensor bf = torch::empty({n}, torch::kBFloat16).random_(&gen).to(torch::kFloat32);
  CHECK((bf.min().item<float>() == 0 && bf.max().item<float>() == 256));
  torch::Tensor big = torch::empty({n}, f64).random_(&gen);
  const double top = std::ldexp(1.0, 53);
  CHECK(big.max().item<double>() <= top);
  CHECK(torch::equal(big, torch::floor(big)));
  CHECK(std::abs(mean_of(big) / top - 0.5) < 5 * std::sqrt(1.0 / 12) / root_n);
  torch::Tensor wide = torch::empty({n}, torch::kInt64).random_(&gen);
  CHECK(wide.min().item<int64_t>() >= 0);
  const double half_range = std::ldexp(1.0, 62);
  CHECK(std::abs(mean_of(wide.to(f64)) / half_range - 1) < 5 * 2 * std::sqrt(1.0 / 12) / root_n);
  CHECK(torch::empty({n}, torch::kFloat32).random_(5, std::nullopt, &gen).min().item<float>() >= 5);
  CHECK(torch::empty({n}, torch::kBool).random_(&gen).to(torch::kFloat32).sum().item<float>() > 0);

  torch::Tensor b = torch::empty({n}, torch::kFloat32).bernoulli_(0.3, &gen);
  CHECK(std::abs(mean_of(b) - 0.3) < 5 * std::sqrt(0.3 * 0.7) / root_n);
  torch::Tensor bp = torch::empty({n, 3}).bernoulli_(torch::from_vector<float>({0, 1, 0.5}), &gen);
  CHECK(mean_of(bp.select(1, 0)) == 0);
  CHECK(mean_of(bp.select(1, 1)) == 1);
  CHECK(std::abs(mean_of(bp.select(1, 2)) - 0.5) < 5 * 0.5 / root_n);

  // torch::normal with tensors broadcast: per column means and spreads; zero gradients.
  torch::Tensor mean = torch::from_vector<double>({-5, 5}).requires_grad_();
  torch::Tensor sd = torch::from_vector<double>({1, 3});
  torch::Tensor draws = torch::normal(mean, sd.expand({n, 2}), &gen);
  CHECK(draws.shape() == Shape{n, 2});
  for (int64_t j = 0; j < 2; ++j) {
    const double m = j == 0 ? -5 : 5, s = j == 0 ? 1 : 3;
    CHECK(std::abs(mean_of(draws.select(1, j)) - m) < 5 * s / root_n);
    CHECK(std::abs(draws.select(1, j).std().item<double>() - s) < 5 * s / std::sqrt(2.0 * n));
  }
  draws.sum().backward();
  CHECK(mean.grad().to_vector<double>() == std::vector<double>{0, 0});
  torch::Tensor plain = torch::normal(2.0, 3.0, {n}, &gen, f64);
  CHECK(std::abs(mean_of(plain) - 2.0) < 5 * 3.0 / root_n);
  // The same seed, the same draws.
  tandem::Generator a(7), a2(7);
  CHECK(torch::equal(torch::empty({5}).cauchy_(0, 1, &a), torch::empty({5}).cauchy_(0, 1, &a2)));
  // Refused: a floating distribution into integers, a tensor that requires grad, bad arguments.
  CHECK_THROWS_WITH(torch::zeros({2}, torch::kInt64).exponential_(),
                    Catch::Contains("exponential_: expected a floating-point tensor"));
  CHECK_THROWS_WITH(torch::zeros({2}).requires_grad_().cauchy_(),
                    Catch::Contains("cauchy_: in-place operation on a tensor that requires grad"));
  CHECK_THROWS_WITH(torch::zeros({2}).geometric_(1.5), Catch::Contains("expected 0 < p < 1"));
  CHECK_THROWS_WITH(torch::zeros({2}).random_(5, 5), Catch::Contains("expected from < to"));
}

TEST_CASE(
    "libtorch names: packed sequences through LSTM, GRU and RNN equal each sequence run alone",
    "[libtorch]") {
  namespace rnn_utils = torch::nn::utils::rnn;
  torch::manual_seed(11);
  // Four sequences of lengths 3, 5, 2 and 4, padded to 5 steps with garbage the packing drops.
  const std::vector<int64_t> lengths{3, 5, 2, 4};
  auto x = torch::randn({5, 4, 3}).requires_grad_();
  auto lstm = std::make_shared<torch::nn::LSTM>(
      torch::nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true));
  auto h0 = torch::randn({4, 4, 4}), c0 = torch::randn({4, 4, 4});
  auto packed = rnn_utils::pack_padded_sequence(x, torch::from_vector(lengths), false, false);
  CHECK(packed.batch_sizes().to_vector<int64_t>() == std::vector<int64_t>{4, 4, 3, 2, 1});
  CHECK(packed.sorted_indices().to_vector<int64_t>() == std::vector<int64_t>{1, 3, 0, 2});
  CHECK(packed.unsorted_indices().to_vector<int64_t>() == std::vector<int64_t>{2, 0, 3, 1});
  auto [out, state] = lstm->forward_with_packed_input(packed, std::make_tuple(h0, c0));
  auto [padded, got_lengths] = rnn_utils::pad_packed_sequence(out, false, -7.0);
  CHECK(got_lengths.to_vector<int64_t>() == lengths);
  CHECK(padded.shape() == Shape{5, 4, 8});
  // The reference: each sequence alone, its own length, its own initial states.
  torch::Tensor loss_ref = torch::zeros({});
  for (int64_t b = 0; b < 4; ++b) {
    const int64_t n = lengths[b];
    auto one = x.narrow(0, 0, n).narrow(1, b, 1);
    auto [o, s] = lstm->forward(one, std::make_tuple(h0.narrow(1, b, 1), c0.narrow(1, b, 1)));
    INFO("sequence " << b);
    require_close(padded.narrow(0, 0, n).narrow(1, b, 1), o, 1e-5, 1e-6, "output");
    if (n < 5)
      CHECK(torch::equal(padded.narrow(0, n, 5 - n).narrow(1, b, 1),
                         torch::full({5 - n, 1, 8}, -7.0)));
    require_close(std::get<0>(state).narrow(1, b, 1), std::get<0>(s), 1e-5, 1e-6, "h_n");
    require_close(std::get<1>(state).narrow(1, b, 1), std::get<1>(s), 1e-5, 1e-6, "c_n");
    loss_ref = loss_ref + o.sum() + std::get<0>(s).sum() * 2;
  }
  // Gradients too: the packed run's equal the per-sequence runs' (padding gets none).
  auto loss = out.data().sum() + std::get<0>(state).sum() * 2;
  auto weights = lstm->parameters();
  std::vector<torch::Tensor> inputs{x};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  auto g = torch::autograd::grad({loss}, inputs);
  auto g_ref = torch::autograd::grad({loss_ref}, inputs);
  for (size_t k = 0; k < g.size(); ++k) require_close(g[k], g_ref[k], 1e-4, 1e-5, "gradient");
  CHECK(torch::equal(g[0].narrow(0, 3, 2).narrow(1, 0, 1), torch::zeros({2, 1, 3})));

  // GRU and RNN, batch_first, sorted already (no permutation), no initial state.
  auto gru = std::make_shared<torch::nn::GRU>(torch::nn::GRUOptions(3, 5).batch_first(true));
  auto rnn = std::make_shared<torch::nn::RNN>(torch::nn::RNNOptions(3, 5).batch_first(true));
  auto xb = torch::randn({3, 4, 3});
  auto sorted = rnn_utils::pack_padded_sequence(xb, torch::from_vector<int64_t>({4, 2, 1}), true);
  CHECK(!sorted.sorted_indices().defined());
  auto [gru_out, gru_h] = gru->forward_with_packed_input(sorted);
  auto [rnn_out, rnn_h] = rnn->forward_with_packed_input(sorted);
  const std::vector<int64_t> sorted_lengths{4, 2, 1};
  for (int64_t b = 0; b < 3; ++b) {
    auto one = xb.narrow(0, b, 1).narrow(1, 0, sorted_lengths[b]);
    require_close(gru_h.narrow(1, b, 1), std::get<1>(gru->forward(one)), 1e-5, 1e-6, "GRU h_n");
    require_close(rnn_h.narrow(1, b, 1), std::get<1>(rnn->forward(one)), 1e-5, 1e-6, "RNN h_n");
  }
  auto [gru_padded, gl] = rnn_utils::pad_packed_sequence(gru_out, true);
  require_close(gru_padded.narrow(0, 0, 1), std::get<0>(gru->forward(xb.narrow(0, 0, 1))), 1e-5,
                1e-6, "GRU output of the longest");

  // pack_sequence sorts with enforce_sorted false; pad_packed_sequence undoes any packing.
  auto a = torch::randn({2, 3}), b = torch::randn({4, 3});
  auto both = rnn_utils::pack_sequence({a, b}, false);
  auto [back, back_lengths] = rnn_utils::pad_packed_sequence(both, true, 0.0, 6);
  CHECK(back.shape() == Shape{2, 6, 3});
  CHECK(torch::equal(back[0].narrow(0, 0, 2), a));
  CHECK(torch::equal(back[1].narrow(0, 0, 4), b));
  CHECK(back_lengths.to_vector<int64_t>() == std::vector<int64_t>{2, 4});
  CHECK(torch::equal(rnn_utils::invert_permutation(torch::from_vector<int64_t>({2, 0, 1})),
                     torch::from_vector<int64_t>({1, 2, 0})));

  // What is refused says why.
  CHECK_THROWS_WITH(rnn_utils::pack_sequence({a, b}),
                    Catch::Contains("lengths must not increase with enforce_sorted (got 2 then 4); "
                                    "pass enforce_sorted = false"));
  CHECK_THROWS_WITH(
      rnn_utils::pack_padded_sequence(x, torch::from_vector<int64_t>({3, 6, 2, 4}), false, false),
      Catch::Contains("length 6 of sequence 1 is not in [1, 5]"));
  CHECK_THROWS_WITH(
      rnn_utils::pack_padded_sequence(x, torch::from_vector<int64_t>({3, 2}), false, false),
      Catch::Contains("expected one length per sequence, got 2 lengths for a batch of 4"));
  CHECK_THROWS_WITH(rnn_utils::pad_packed_sequence(both, false, 0.0, 3),
                    Catch::Contains("total_length must be at least the longest sequence's 4 "
                                    "steps, got 3"));
  CHECK_THROWS_WITH(gru->forward_with_packed_input(sorted, torch::zeros({1, 4, 5})),
                    Catch::Contains("gru: expected hidden state h0 of shape (1, 3, 5), got "
                                    "(1, 4, 5)"));
  CHECK_THROWS_WITH(
      torch::gru(torch::randn({6, 3}), torch::from_vector<int64_t>({3, 4}), {}, gru->all_weights(),
                 true, 1, 0.0, false, false),
      Catch::Contains("gru: batch_sizes must be positive and non-increasing, got 4 at step 1"));
  CHECK_THROWS_WITH(torch::gru(torch::randn({6, 3}), torch::from_vector<int64_t>({3, 2}), {},
                               gru->all_weights(), true, 1, 0.0, false, false),
                    Catch::Contains("gru: batch_sizes sum to 5 rows, data has 6"));
}
