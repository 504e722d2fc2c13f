// Channels-last (NHWC) tensors: the layout itself, and every op a ResNet runs giving on a
// channels-last input what it gives on the row-major one, in the input's layout (the CPU's
// convolutions and batch norm compute row-major either way, and pooling sums in the same order in
// both layouts, so the values are the same bits).
#include "../util.hpp"

using namespace tandem;
using tandem::testing::require_close;

namespace {

constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;

Tensor randn_seeded(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::f32, &g);
}

void require_same(const Tensor& got, const Tensor& expected, const std::string& what) {
  INFO(what);
  REQUIRE(got.to_vector<float>() == expected.to_vector<float>());
  REQUIRE(got.shape() == expected.shape());
}

}  // namespace

TEST_CASE("channels-last tensors: strides, layout queries and conversions", "[ops]") {
  Tensor x = randn_seeded({2, 3, 4, 5}, 1);
  CHECK(x.suggest_memory_format() == MemoryFormat::Contiguous);
  CHECK_FALSE(x.is_contiguous(kCL));
  Tensor cl = x.contiguous(kCL);
  CHECK(cl.strides() == Shape{60, 1, 15, 3});
  CHECK(cl.is_contiguous(kCL));
  CHECK_FALSE(cl.is_contiguous());
  CHECK(cl.suggest_memory_format() == kCL);
  require_same(cl, x, "same values, another layout");
  CHECK(cl.contiguous(kCL).is_same(cl));
  Tensor back = cl.contiguous();
  CHECK(back.strides() == x.strides());
  require_same(back, x, "back to row-major");
  // The NHWC buffer itself: element (n, c, h, w) at n HWC + h WC + w C + c.
  const float* p = cl.data_ptr<float>();
  const float x_1123 = x.select(0, 1).select(0, 1).select(0, 2).select(0, 3).item<float>();
  CHECK(p[((1 * 4 + 2) * 5 + 3) * 3 + 1] == x_1123);
  // A permuted view of an NHWC buffer is channels-last too.
  Tensor nhwc = randn_seeded({2, 4, 5, 3}, 2);
  CHECK(nhwc.permute({0, 3, 1, 2}).suggest_memory_format() == kCL);
  // One channel: both layouts hold; the exact strides say which was meant.
  Tensor one = randn_seeded({2, 1, 4, 5}, 3);
  CHECK(one.suggest_memory_format() == MemoryFormat::Contiguous);
  Tensor one_cl = one.contiguous(kCL);
  CHECK(one_cl.strides() == Shape{20, 1, 5, 1});
  CHECK(one_cl.suggest_memory_format() == kCL);
  CHECK(one_cl.is_contiguous());
  require_same(one_cl, one, "one channel");
  // Not 4-d: never channels-last, and asking for it is an error that says so.
  CHECK_FALSE(randn_seeded({3, 4}, 4).is_contiguous(kCL));
  CHECK_THROWS_WITH(randn_seeded({3, 4}, 4).contiguous(kCL),
                    Catch::Contains("expected a 4-d (N, C, H, W) shape"));
  // The copy is differentiable: the gradient reaches the row-major leaf.
  Tensor leaf = randn_seeded({2, 3, 4, 5}, 5).set_requires_grad(true);
  sum(mul(leaf.contiguous(kCL), x)).backward();
  require_same(leaf.grad(), x, "d(sum(leaf * x)) / d leaf");
  // clone, to(dtype) and empty_like keep the layout.
  CHECK(cl.clone().suggest_memory_format() == kCL);
  CHECK(cl.to(DType::f64).suggest_memory_format() == kCL);
  CHECK(empty_like(cl).strides() == cl.strides());
}

TEST_CASE("elementwise ops on channels-last operands give channels-last results", "[ops]") {
  Tensor x = randn_seeded({2, 3, 4, 5}, 11), y = randn_seeded({2, 3, 4, 5}, 12);
  Tensor bias = randn_seeded({1, 3, 1, 1}, 13);
  Tensor xc = x.contiguous(kCL), yc = y.contiguous(kCL);
  struct Case {
    const char* name;
    Tensor got, expected;
  };
  const std::vector<Case> cases{
      {"relu", relu(xc), relu(x)},
      {"exp", exp(xc), exp(x)},
      {"add, both channels-last", add(xc, yc), add(x, y)},
      {"mul, one channels-last", mul(y, xc), mul(y, x)},
      {"add a broadcast bias", add(xc, bias), add(x, bias)},
      {"add a scalar", add(xc, 2.5), add(x, 2.5)},
      {"where", where(gt(xc, yc), xc, yc), where(gt(x, y), x, y)},
      {"dropout", dropout(xc, 0.3, true, nullptr), Tensor()},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    CHECK(c.got.suggest_memory_format() == kCL);
    if (c.expected.defined()) require_same(c.got, c.expected, c.name);
  }
  CHECK(add(x, y).suggest_memory_format() == MemoryFormat::Contiguous);
}

TEST_CASE("convolution, batch norm and pooling keep a channels-last input's layout and values",
          "[ops]") {
  Tensor x = randn_seeded({4, 8, 9, 9}, 21);
  Tensor w3 = randn_seeded({16, 8, 3, 3}, 22), w1 = randn_seeded({16, 8, 1, 1}, 23);
  Tensor b = randn_seeded({16}, 24), gamma = randn_seeded({8}, 25), beta = randn_seeded({8}, 26);
  Tensor residual = randn_seeded({4, 8, 9, 9}, 27);
  using F = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<const char*, F>> ops{
      {"conv 3x3, stride 1, padding 1 (Winograd on AVX2)",
       [&](const Tensor& t) { return conv2d(t, w3, Tensor(), 1, 1); }},
      {"conv 3x3, stride 2, with bias", [&](const Tensor& t) { return conv2d(t, w3, b, 2, 1); }},
      {"conv 1x1, stride 2", [&](const Tensor& t) { return conv2d(t, w1, Tensor(), 2, 0); }},
      {"batch norm, training",
       [&](const Tensor& t) {
         return batch_norm(t, Tensor(), Tensor(), gamma, beta, true, 0.1, 1e-5);
       }},
      {"batch norm + residual + relu",
       [&](const Tensor& t) {
         return batch_norm_relu(t, Tensor(), Tensor(), gamma, beta, true, 0.1, 1e-5,
                                residual.contiguous(kCL));
       }},
      {"sync batch norm + residual + relu (a group of one)",
       [&](const Tensor& t) {
         return sync_batch_norm(t, Tensor(), Tensor(), gamma, beta, 0.1, 1e-5,
                                residual.contiguous(kCL), true, [](const Tensor&) {});
       }},
      {"max pool 3x3 / 2", [&](const Tensor& t) { return max_pool2d(t, 3, 2, 1); }},
      {"avg pool 2x2", [&](const Tensor& t) { return avg_pool2d(t, 2); }},
      {"adaptive avg pool", [&](const Tensor& t) { return adaptive_avg_pool2d(t, {2, 3}); }},
  };
  for (const auto& [name, f] : ops) {
    INFO(name);
    // Forward and the input's gradient, from the row-major input and from the channels-last one.
    Tensor in = x.clone().set_requires_grad(true);
    Tensor in_cl = x.contiguous(kCL).set_requires_grad(true);
    Tensor expected = f(in), got = f(in_cl);
    CHECK(got.suggest_memory_format() == kCL);
    require_same(got, expected, std::string(name) + ": forward");
    Tensor g = randn_seeded(expected.shape(), 28);
    sum(mul(expected, g)).backward();
    sum(mul(got, g)).backward();
    require_close(in_cl.grad(), in.grad(), 1e-6, 1e-6, std::string(name) + ": input gradient");
  }
  // f64 convolves row-major on every device (cuDNN has no NHWC f64 kernels); the result still
  // comes back channels-last.
  Tensor x64 = x.to(DType::f64), w64 = w3.to(DType::f64);
  Tensor y64 = conv2d(x64.contiguous(kCL), w64, Tensor(), 1, 1);
  CHECK(y64.suggest_memory_format() == kCL);
  require_close(y64, conv2d(x64, w64, Tensor(), 1, 1), 0, 0, "f64 convolution");
}

TEST_CASE("pooling a channels-last input: f16 and bf16, one channel, 1x1 maps", "[ops]") {
  // Pooling runs in the input's layout; where size-1 dims make both layouts one buffer, the
  // strides say which it is, and the narrow dtypes' f32 copies keep it (with the indices).
  using F = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<const char*, F>> ops{
      {"max pool 3x3 / 2", [](const Tensor& t) { return max_pool2d(t, 3, 2, 1); }},
      {"max pool 2x2, padding 1", [](const Tensor& t) { return max_pool2d(t, 2, 1, 1); }},
      {"avg pool 2x2, padding 1", [](const Tensor& t) { return avg_pool2d(t, 2, 1, 1); }},
      // windows one column wide (the 3-d pools' depth pass): row-major ones a row at a time
      {"max pool 2x1 / 2x1, padding 1x0, dilation 2x1",
       [](const Tensor& t) {
         return max_pool2d(t, {2, 1}, {2, 1}, {1, 0}, {2, 1});
       }},
      {"max pool 2x1 / 2x1, ceil",
       [](const Tensor& t) {
         return max_pool2d(t, {2, 1}, {2, 1}, {0, 0}, {1, 1}, true);
       }},
      {"avg pool 3x1 / 2x1, padding 1x0",
       [](const Tensor& t) {
         return avg_pool2d(t, {3, 1}, {2, 1}, {1, 0});
       }},
      {"avg pool 3x1 / 2x1, padding 1x0, ceil, padding not counted",
       [](const Tensor& t) {
         return avg_pool2d(t, {3, 1}, {2, 1}, {1, 0}, true, false);
       }},
      {"avg pool 2x1, padding 1x0, divisor 3",
       [](const Tensor& t) {
         return avg_pool2d(t, {2, 1}, {1, 1}, {1, 0}, false, true, 3);
       }},
      {"adaptive avg pool",
       [](const Tensor& t) {
         return adaptive_avg_pool2d(t, {2, 3});
       }},
      {"global avg pool",
       [](const Tensor& t) {
         return adaptive_avg_pool2d(t, {1, 1});
       }},
  };
  // (3, 20, 7, 5): global pooling's blocks of 16 row-major planes and a tail
  for (const Shape& shape :
       {Shape{2, 3, 7, 5}, Shape{2, 1, 5, 6}, Shape{3, 4, 1, 1}, Shape{3, 20, 7, 5}}) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      for (const auto& [name, f] : ops) {
        INFO(name << " on " << shape_str(shape) << " " << dtype_name(dt));
        Tensor x = randn_seeded(shape, 41).to(dt);
        Tensor in = x.clone().set_requires_grad(true);
        Tensor in_cl = x.contiguous(kCL).set_requires_grad(true);
        REQUIRE(in_cl.suggest_memory_format() == kCL);
        Tensor expected = f(in), got = f(in_cl);
        CHECK(got.suggest_memory_format() == kCL);
        CHECK(got.dtype() == dt);
        require_same(got.to(DType::f32), expected.to(DType::f32), "forward");
        if (std::string(name) == "global avg pool")  // against the mean, summed in f64
          require_close(expected.to(DType::f64),
                        mean(x.to(DType::f64), {2, 3}, true).to(dt).to(DType::f64),
                        dt == DType::f32 ? 1e-6 : 1e-2, 1e-6, "global pool = mean");
        Tensor g = randn_seeded(expected.shape(), 42).to(dt);
        sum(mul(expected, g)).backward();
        sum(mul(got, g)).backward();
        require_same(in_cl.grad().to(DType::f32), in.grad().to(DType::f32), "input gradient");
      }
    }
  }
}

TEST_CASE("pooling a tensor without channels or images gives an empty result and gradient",
          "[ops]") {
  using F = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<const char*, F>> ops{
      {"max pool", [](const Tensor& t) { return max_pool2d(t, 2); }},
      {"avg pool", [](const Tensor& t) { return avg_pool2d(t, 2); }},
      {"adaptive avg pool", [](const Tensor& t) { return adaptive_avg_pool2d(t, {1, 1}); }},
  };
  for (const Shape& shape : {Shape{2, 0, 4, 4}, Shape{0, 3, 4, 4}})
    for (const auto& [name, f] : ops) {
      INFO(name << " on " << shape_str(shape));
      Tensor x = zeros(shape).set_requires_grad(true);
      Tensor y = f(x);
      CHECK(y.numel() == 0);
      sum(y).backward();
      CHECK(x.grad().shape() == shape);
    }
}

TEST_CASE("ResNet-20 trains the same on channels-last input", "[ops][nn]") {
  auto run = [](bool channels_last) {
    manual_seed(7);
    auto model = nn::resnet20(nn::ResNetOptions().in_channels(3));
    Tensor x = randn_seeded({4, 3, 16, 16}, 31);
    Tensor y = randint(0, 10, {4});
    if (channels_last) x = x.contiguous(kCL);
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    std::vector<Tensor> out{loss.detach()};
    for (const Tensor& p : model->parameters()) out.push_back(p.grad());
    return out;
  };
  const std::vector<Tensor> row_major = run(false), channels_last = run(true);
  REQUIRE(row_major.size() == channels_last.size());
  require_close(channels_last[0], row_major[0], 1e-6, 1e-6, "loss");
  for (size_t i = 1; i < row_major.size(); ++i) {
    INFO("parameter " << i - 1);
    CHECK(channels_last[i].is_contiguous());  // parameters and their gradients stay row-major
    require_close(channels_last[i], row_major[i], 1e-4, 1e-5, "gradient");
  }
}

TEST_CASE("the *_like tensors and moves keep a channels-last tensor's layout", "[ops]") {
  Tensor cl = randn_seeded({2, 3, 4, 5}, 41).contiguous(kCL);
  for (const Tensor& t : {empty_like(cl), zeros_like(cl), ones_like(cl), full_like(cl, 2.5)})
    CHECK(t.strides() == cl.strides());
  CHECK(zeros_like(cl).to_vector<float>() == std::vector<float>(cl.numel(), 0.0f));
  CHECK(full_like(cl, 2.5).to_vector<float>() == std::vector<float>(cl.numel(), 2.5f));
  // A row-major or a strided (non-dense) tensor gives a row-major one, as before.
  Tensor rm = randn_seeded({2, 3, 4, 5}, 42);
  CHECK(zeros_like(rm).is_contiguous());
  CHECK(zeros_like(rm.slice(3, 0, 5, 2)).is_contiguous());
}

namespace {

// Two SGD steps (momentum, weight decay) of a ResNet-20 on a 4-image batch, with the input and
// the model in either layout; what the run ends with, for comparison.
struct ClRun {
  nn::StateDict state;                  // parameters and buffers after the steps
  std::vector<Tensor> grads, momentum;  // the last gradients and the momentum buffers
  nn::StateDict optimizer;
};
ClRun train_resnet20(bool channels_last_input, bool channels_last_model) {
  manual_seed(7);
  auto model = nn::resnet20(nn::ResNetOptions().in_channels(3));
  if (channels_last_model) model->to(kCL);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
  for (int step = 0; step < 2; ++step) {
    Tensor x = randn_seeded({4, 3, 16, 16}, 50 + step);
    Tensor y = randint(0, 10, {4});
    if (channels_last_input) x = x.contiguous(kCL);
    opt.zero_grad();
    cross_entropy(model->forward(x), y).backward();
    opt.step();
  }
  ClRun out;
  for (const auto& [k, v] : model->state_dict()) out.state[k] = v.clone();
  for (const Tensor& p : model->parameters()) out.grads.push_back(p.grad());
  out.optimizer = opt.state_dict();
  for (size_t k = 0; k < out.grads.size(); ++k)
    out.momentum.push_back(out.optimizer.at("state." + std::to_string(k) + ".momentum_buffer"));
  return out;
}

}  // namespace

TEST_CASE("Module::to(ChannelsLast) lays 4-d parameters out NHWC in place", "[ops][nn]") {
  auto model = nn::resnet20(nn::ResNetOptions().in_channels(3));
  const std::vector<Tensor> before = model->parameters();
  std::vector<Tensor> values;
  for (const Tensor& p : before) values.push_back(p.detach().clone());
  const Tensor conv = before.front();  // the stem's weight
  REQUIRE(conv.dim() == 4);
  Tensor(conv).set_grad(ones_like(conv));
  model->to(kCL);
  const std::vector<Tensor> after = model->parameters();
  REQUIRE(after.size() == before.size());
  int converted = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    INFO("parameter " << i);
    CHECK(after[i].is_same(before[i]));  // the same tensors: an optimizer built before sees it
    require_same(after[i], values[i], "values kept");
    if (after[i].dim() == 4) {
      CHECK(after[i].strides() == channels_last_strides(after[i].shape()));
      ++converted;
    } else {
      CHECK(after[i].is_contiguous());
    }
  }
  CHECK(converted == 19);  // ResNet-20's convolutions
  CHECK(conv.grad().strides() == conv.strides());  // a gradient follows its parameter
  // A dtype change keeps the layout.
  model->to(DType::f64);
  CHECK(conv.dtype() == DType::f64);
  CHECK(conv.strides() == channels_last_strides(conv.shape()));
  require_close(conv, values.front(), 0, 0, "converted to f64");
  // And back.
  model->to(MemoryFormat::Contiguous);
  for (size_t i = 0; i < after.size(); ++i) CHECK(after[i].strides() == contiguous_strides(after[i].shape()));

  // Where size-1 dims make both layouts the same bytes (one input channel, a 1x1 filter), the
  // strides change and nothing is copied, both ways.
  auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 4, 3)),
                                              std::make_shared<nn::Conv2d>(nn::Conv2dOptions(4, 8, 1)));
  for (const MemoryFormat format : {kCL, MemoryFormat::Contiguous}) {
    for (const Tensor& p : seq->parameters()) {
      if (p.dim() != 4) continue;
      INFO(shape_str(p.shape()));
      const void* data = p.raw_data();
      seq->to(format);
      CHECK(p.raw_data() == data);
      CHECK(p.strides() == (format == kCL ? channels_last_strides(p.shape())
                                          : contiguous_strides(p.shape())));
      CHECK(p.suggest_memory_format() == format);
    }
  }
}

TEST_CASE("a channels-last model trains as the row-major one, its gradients, momentum and checkpoints "
          "keep or restore the layout",
          "[ops][nn]") {
  const ClRun expected = train_resnet20(false, false);
  for (const auto& [cl_input, cl_model] :
       std::vector<std::pair<bool, bool>>{{false, true}, {true, true}, {true, false}}) {
    INFO("input " << (cl_input ? "channels-last" : "row-major") << ", model "
                  << (cl_model ? "channels-last" : "row-major"));
    const ClRun got = train_resnet20(cl_input, cl_model);
    for (const auto& [key, value] : expected.state) {
      const Tensor& t = got.state.at(key);
      if (value.dtype() == DType::i64) {
        CHECK(t.to_vector<int64_t>() == value.to_vector<int64_t>());
        continue;
      }
      require_close(t, value, 1e-5, 1e-6, key);
    }
    for (size_t i = 0; i < expected.grads.size(); ++i) {
      INFO("parameter " << i);
      const Tensor &g = got.grads[i], &m = got.momentum[i];
      require_close(g, expected.grads[i], 1e-5, 1e-6, "gradient");
      require_close(m, expected.momentum[i], 1e-5, 1e-6, "momentum");
      // A gradient and a momentum buffer lie as their parameter: NHWC for a channels-last
      // model's convolutions, row-major for everything else.
      const bool nhwc = cl_model && g.dim() == 4;
      const Shape want = nhwc ? channels_last_strides(g.shape()) : contiguous_strides(g.shape());
      CHECK(g.strides() == want);
      CHECK(m.strides() == want);
    }
  }

  // A checkpoint of the channels-last model holds the values in their logical order: it loads
  // into a row-major model and back into a channels-last one (which stays channels-last), and
  // the optimizer's state loads in the parameters' layout.
  tandem::testing::TempDir dir;
  const std::string file = (dir.path / "cl.safetensors").string();
  const ClRun cl = train_resnet20(true, true);
  io::save_safetensors(file, cl.state);
  const nn::StateDict loaded = io::load_safetensors(file);
  auto row_major = nn::resnet20(nn::ResNetOptions().in_channels(3));
  row_major->load_state_dict(loaded);
  auto channels_last = nn::resnet20(nn::ResNetOptions().in_channels(3));
  channels_last->to(kCL);
  channels_last->load_state_dict(loaded);
  const nn::StateDict a = row_major->state_dict(), b = channels_last->state_dict();
  for (const auto& [key, value] : cl.state) {
    INFO(key);
    if (value.dtype() == DType::i64) continue;
    require_same(a.at(key), value, key + ": into a row-major model");
    require_same(b.at(key), value, key + ": into a channels-last model");
    CHECK(b.at(key).strides() == value.strides());
  }
  optim::SGD opt(channels_last->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  nn::StateDict opt_state;
  for (const auto& [key, value] : cl.optimizer) opt_state[key] = value.contiguous();  // as a file has it
  opt.load_state_dict(opt_state);
  const nn::StateDict restored = opt.state_dict();
  for (size_t k = 0; k < cl.momentum.size(); ++k) {
    INFO("parameter " << k);
    const Tensor& m = restored.at("state." + std::to_string(k) + ".momentum_buffer");
    require_same(m, cl.momentum[k], "momentum restored");
    CHECK(m.strides() == cl.momentum[k].strides());
  }
}

TEST_CASE("autocast: a channels-last f32 weight convolves as a channels-last bf16 one, its "
          "gradient comes back f32 channels-last",
          "[ops][amp]") {
  Tensor x = randn_seeded({2, 8, 9, 9}, 61).contiguous(kCL);
  for (int64_t k : {1, 3}) {
    INFO("kernel " << k);
    Tensor w_rm = randn_seeded({16, 8, k, k}, 62 + k).set_requires_grad(true);
    Tensor w_cl = w_rm.detach().contiguous(kCL).set_requires_grad(true);
    Tensor y_rm, y_cl;
    {
      amp::autocast guard(DType::bf16);
      y_rm = conv2d(x, w_rm, Tensor(), 1, k / 2);
      y_cl = conv2d(x, w_cl, Tensor(), 1, k / 2);
    }
    CHECK(y_cl.dtype() == DType::bf16);
    require_same(y_cl.to(DType::f32), y_rm.to(DType::f32), "forward");
    Tensor g = randn_seeded(y_rm.shape(), 65).to(DType::bf16);
    sum(mul(y_rm, g)).backward();
    sum(mul(y_cl, g)).backward();
    CHECK(w_cl.grad().dtype() == DType::f32);
    CHECK(w_cl.grad().strides() == channels_last_strides(w_cl.shape()));
    require_same(w_cl.grad(), w_rm.grad(), "weight gradient");
  }
}
