// Modules and layers: registration and traversal, state dicts, modes, placement, default
// initializations (statistics against their closed forms) and the ResNets against PyTorch.
#include <cmath>
#include <sstream>

#include "../util.hpp"

using namespace tandem;
using namespace tandem::nn;
using tandem::testing::error_of;
using tandem::testing::require_close;

namespace {

int64_t count_params(const Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// A module with a parameter, a buffer and a child, registered by hand.
class Net : public Module {
 public:
  Net() : Module("Net") {
    scale = register_parameter("scale", ones({3}));
    steps = register_buffer("steps", zeros({}, DType::i64));
    fc = register_module("fc", std::make_shared<Linear>(3, 2));
  }
  Tensor forward(const Tensor& x) override { return fc->forward(mul(x, scale)); }
  Tensor scale, steps;
  std::shared_ptr<Linear> fc;
};

}  // namespace

TEST_CASE("modules register, traverse and name their state like torch", "[nn]") {
  auto net = std::make_shared<Net>();
  auto named = net->named_parameters();
  REQUIRE(named.size() == 3);
  CHECK(named[0].first == "scale");
  CHECK(named[1].first == "fc.weight");
  CHECK(named[2].first == "fc.bias");
  CHECK(net->named_buffers()[0].first == "steps");
  CHECK(net->parameters(false).size() == 1);
  CHECK(net->children().size() == 1);
  CHECK(net->modules().size() == 2);
  for (auto& p : net->parameters()) CHECK(p.requires_grad());
  auto sd = net->state_dict();
  CHECK(sd.size() == 4);
  CHECK(sd.count("fc.weight") == 1);

  CHECK_THAT(error_of([&] { net->register_parameter("scale", ones({1})); }),
             Catch::Contains("name 'scale' is already registered"));
  CHECK_THAT(error_of([&] { net->register_buffer("a.b", ones({1})); }),
             Catch::Contains("invalid name 'a.b'"));
  std::ostringstream os;
  os << *net;
  CHECK(os.str() == "Net(\n  (fc): Linear(in_features=3, out_features=2, bias=true)\n)");
}

TEST_CASE("load_state_dict copies values and lists every mismatch", "[nn][errors]") {
  auto a = std::make_shared<Net>(), b = std::make_shared<Net>();
  b->load_state_dict(a->state_dict());
  CHECK(equal(a->fc->weight, b->fc->weight));
  CHECK_FALSE(a->fc->weight.is_same(b->fc->weight));  // copied, not aliased

  StateDict bad = a->state_dict();
  bad.erase("fc.bias");
  bad.erase("steps");
  bad["fc.extra"] = zeros({1});
  bad["fc.weight"] = zeros({4, 3});
  Tensor before = b->fc->weight.clone();
  std::string msg = error_of([&] { b->load_state_dict(bad); });
  CHECK_THAT(msg, Catch::Contains("missing keys: fc.bias, steps"));
  CHECK_THAT(msg, Catch::Contains("unexpected keys: fc.extra"));
  CHECK_THAT(msg, Catch::Contains("wrong shapes: fc.weight: expected (2, 3), got (4, 3)"));
  CHECK(equal(b->fc->weight, before));  // nothing copied

  // Not strict: key mismatches are allowed, the matching keys load.
  StateDict partial{{"scale", full({3}, 2.0)}, {"other", zeros({1})}};
  b->load_state_dict(partial, false);
  CHECK(b->scale.to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("train/eval, zero_grad and to(dtype) reach every descendant", "[nn]") {
  auto net = std::make_shared<Net>();
  net->eval();
  CHECK_FALSE(net->fc->is_training());
  net->train();
  CHECK(net->fc->is_training());

  Tensor w = net->fc->weight;  // a handle taken before the conversion
  sum(net->forward(ones({2, 3}))).backward();
  CHECK(w.grad().defined());
  net->zero_grad(false);
  CHECK(w.grad().defined());
  CHECK(sum(abs(w.grad())).item<double>() == 0.0);
  net->zero_grad();
  CHECK_FALSE(w.grad().defined());

  net->to(DType::f64);
  CHECK(w.dtype() == DType::f64);  // the handle sees the converted data
  CHECK(w.requires_grad());
  CHECK(net->steps.dtype() == DType::i64);  // integer buffers keep their dtype
  CHECK(net->forward(ones({1, 3}, DType::f64)).dtype() == DType::f64);
}

TEST_CASE("layers compute what their functional ops compute", "[nn]") {
  Tensor x = randn({2, 3, 8, 8});
  Conv2d conv(3, 4, 3, Conv2dOptions().stride(2).padding(1));
  require_close(conv.forward(x), conv2d(x, conv.weight, conv.bias, 2, 1), 0, 0);
  Sequential seq{std::make_shared<Conv2d>(3, 4, 3), std::make_shared<BatchNorm2d>(4),
                 std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
                 std::make_shared<Dropout>(0.5), std::make_shared<AdaptiveAvgPool2d>(1),
                 std::make_shared<Flatten>(), std::make_shared<Linear>(4, 2),
                 std::make_shared<GELU>(), std::make_shared<Identity>()};
  seq.eval();  // dropout off, running statistics
  auto& c = static_cast<Conv2d&>(*seq[0]);
  auto& fc = static_cast<Linear&>(*seq[7]);
  Tensor h = relu(batch_norm(conv2d(x, c.weight, c.bias), zeros({4}), ones({4}),
                             ones({4}), zeros({4}), false));
  h = flatten(adaptive_avg_pool2d(max_pool2d(h, 2), 1), 1);
  require_close(seq.forward(x), gelu(linear(h, fc.weight, fc.bias)), 1e-6, 1e-6);
  CHECK(seq.size() == 10);
  CHECK_THAT(error_of([&] { seq[10]; }), Catch::Contains("index 10 out of range for 10"));

  AvgPool2d avg(2);
  require_close(avg.forward(x), avg_pool2d(x, 2), 0, 0);

  BatchNorm2d bn(3);
  bn.forward(x);
  bn.forward(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  CHECK_THAT(error_of([&] { bn.forward(randn({2, 4, 3, 3})); }),
             Catch::Contains("BatchNorm2d(3): expected input (N, 3, H, W), got (2, 4, 3, 3)"));
}

TEST_CASE("initializations have their closed-form spread", "[nn][init]") {
  // Large tensors: the sample std / bound is within 2% of the formula.
  auto sample_std = [](const Tensor& t) { return std::sqrt(var(t.to(DType::f64)).item<double>()); };
  Tensor w = empty({256, 128, 3, 3});
  const double fan_in = 128 * 9, fan_out = 256 * 9;
  init::kaiming_normal_(w, 0.0, init::FanMode::fan_out, "relu");
  CHECK(sample_std(w) == Approx(std::sqrt(2.0 / fan_out)).epsilon(0.02));
  init::kaiming_uniform_(w, std::sqrt(5.0));
  CHECK(max(abs(w)).item<double>() <= 1.0 / std::sqrt(fan_in) + 1e-7);
  CHECK(sample_std(w) == Approx(1.0 / std::sqrt(3 * fan_in)).epsilon(0.02));
  init::xavier_uniform_(w);
  CHECK(sample_std(w) == Approx(std::sqrt(2.0 / (fan_in + fan_out))).epsilon(0.02));
  init::xavier_normal_(w, 2.0);
  CHECK(sample_std(w) == Approx(2.0 * std::sqrt(2.0 / (fan_in + fan_out))).epsilon(0.02));
  init::ones_(w);
  CHECK(sum(w).item<double>() == w.numel());
  CHECK(init::calculate_gain("tanh") == Approx(5.0 / 3));
  CHECK_THAT(error_of([&] { init::calculate_gain("swish"); }),
             Catch::Contains("unknown nonlinearity 'swish'"));
  Tensor v = empty({3});
  CHECK_THAT(error_of([&] { init::kaiming_normal_(v); }), Catch::Contains("at least 2 dims"));
  // torch's Linear default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
  Linear lin(400, 300);
  CHECK(max(abs(lin.weight)).item<double>() <= 0.05 + 1e-7);
  CHECK(max(abs(lin.bias)).item<double>() <= 0.05 + 1e-7);
  CHECK(sample_std(lin.weight) == Approx(0.05 / std::sqrt(3.0)).epsilon(0.03));
}

TEST_CASE("ResNets have torchvision's parameter counts and key names", "[nn][resnet]") {
  // torchvision.models.resnetXX(): 11,689,512 / 21,797,672 / 25,557,032 / 44,549,160.
  CHECK(count_params(*resnet18()) == 11689512);
  CHECK(count_params(*resnet34()) == 21797672);
  CHECK(count_params(*resnet50()) == 25557032);
  CHECK(count_params(*resnet101()) == 44549160);
  // He et al. 2016 Table 6: 0.27M, 0.46M, 0.66M, 0.85M (option A shortcuts, 3 channels).
  CHECK(count_params(*resnet20()) == 269722);
  CHECK(count_params(*resnet32()) == 464154);
  CHECK(count_params(*resnet44()) == 658586);
  CHECK(count_params(*resnet56()) == 853018);
  auto sd = resnet50()->state_dict();
  for (const char* key : {"conv1.weight", "bn1.num_batches_tracked", "layer1.0.downsample.0.weight",
                          "layer1.0.downsample.1.running_var", "layer4.2.conv3.weight", "fc.bias"})
    CHECK(sd.count(key) == 1);

  // Small inputs and other channel counts work; zero_init_residual zeroes the last BN gammas.
  auto r18 = resnet18(ResNetOptions().in_channels(1).num_classes(7).zero_init_residual(true));
  CHECK(r18->forward(randn({2, 1, 28, 28})).shape() == Shape{2, 7});
  CHECK(sum(abs(r18->layer2->named_children()[1].second->state_dict().at("bn2.weight")))
            .item<double>() == 0.0);
  auto r56 = resnet56(ResNetOptions().in_channels(1));
  CHECK(r56->forward(randn({2, 1, 28, 28})).shape() == Shape{2, 10});
  CHECK(resnet_by_name("resnet32")->state_dict().size() == resnet32()->state_dict().size());
  CHECK_THAT(error_of([] { resnet_by_name("resnet21"); }),
             Catch::Contains("unknown model 'resnet21' (valid: resnet18, resnet34"));
  CHECK_THAT(error_of([] { CifarResNet(21); }), Catch::Contains("depth must be 6n + 2"));
}

TEST_CASE("a CIFAR ResNet matches PyTorch: logits, gradients, running statistics", "[nn][golden]") {
  // tests/golden/make_model_golden.py: the same architecture in PyTorch 1.13, its weights and
  // results, written by an independent safetensors writer.
  io::Metadata meta;
  StateDict g = io::load_safetensors(std::string(TANDEM_GOLDEN_DIR) + "/resnet8.safetensors", &meta);
  CHECK(meta["source"] == "make_model_golden.py");
  auto model = std::make_shared<CifarResNet>(8, ResNetOptions().in_channels(1));
  StateDict weights;
  for (const auto& [k, v] : g)
    if (k.rfind("model.", 0) == 0) weights[k.substr(6)] = v;
  model->load_state_dict(weights);

  Tensor logits = model->forward(g.at("input"));
  require_close(logits, g.at("logits_train"), 1e-4, 1e-5, "train-mode logits");
  cross_entropy(logits, g.at("labels")).backward();
  for (const auto& [name, p] : model->named_parameters())
    require_close(p.grad(), g.at("grad." + name), 1e-3, 1e-5, "grad of " + name);
  for (const auto& [name, b] : model->named_buffers())
    require_close(b, g.at("after." + name), 1e-5, 1e-6, "buffer " + name);
  model->eval();
  NoGradGuard no_grad;
  require_close(model->forward(g.at("input")), g.at("logits_eval"), 1e-4, 1e-5, "eval logits");
}
