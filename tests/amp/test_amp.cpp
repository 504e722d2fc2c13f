// Mixed precision: the autocast policy row by row, low-precision training against f32, and the
// GradScaler's schedule, skipping and state, on one rank and across ranks.
#include <map>

#include "../util.hpp"

using namespace tandem;
using tandem::testing::require_close;

TEST_CASE("autocast: every policy row runs its op in the dtype the table says", "[amp]") {
  Generator g(1);
  Tensor x4 = randn({2, 3, 5, 5}, DType::f32, &g), w4 = randn({4, 3, 3, 3}, DType::f32, &g);
  Tensor m = randn({4, 6}, DType::f32, &g), w2 = randn({5, 6}, DType::f32, &g);
  Tensor b3 = randn({2, 4, 6}, DType::f32, &g), c3 = randn({2, 6, 3}, DType::f32, &g);
  Tensor labels = from_vector(std::vector<int64_t>{1, 0, 3, 2});
  Tensor rm = zeros({3}), rv = ones({3});
  // Each row's op on f32 inputs (lower rows) or on bf16 inputs (fp32 and widest rows).
  const Tensor low = m.to(DType::bf16), low4 = x4.to(DType::bf16);
  // The 1-d convolutions, addmm and baddbmm take a low-precision input beside an f32 one (a
  // layer's output meets the next layer's weight), which outside autocast they refuse or widen.
  const Tensor x3 = x4.select(2, 0), w3 = w4.select(2, 0);
  std::map<std::string, std::function<Tensor()>> run{
      {"conv1d", [&] { return conv1d(x3.to(DType::bf16), w3); }},
      {"conv_transpose1d",
       [&] { return conv_transpose1d(x3.to(DType::bf16), w3.transpose(0, 1)); }},
      {"addmm",
       [&] {
         return addmm(zeros({4, 5}), m.to(DType::bf16), w2.t());
       }},
      {"baddbmm",
       [&] {
         return baddbmm(zeros({2, 4, 3}), b3, c3.to(DType::bf16));
       }},
      {"conv2d", [&] { return conv2d(x4, w4, Tensor(), 1, 1); }},
      {"conv_transpose2d", [&] { return conv_transpose2d(x4, w4.transpose(0, 1), {}, 2, 1); }},
      {"conv3d",
       [&] {
         return conv3d(x4.unsqueeze(2), w4.unsqueeze(2), Tensor(), 1, {0, 1, 1});
       }},
      {"conv_transpose3d",
       [&] {
         return conv_transpose3d(x4.unsqueeze(2), w4.transpose(0, 1).unsqueeze(2), {}, 1,
                                 {0, 1, 1});
       }},
      {"linear", [&] { return linear(m, w2, zeros({5})); }},
      {"bmm", [&] { return bmm(b3, c3); }},
      {"batch_norm", [&] { return batch_norm(low4, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5); }},
      {"softmax", [&] { return softmax(low, 1); }},
      {"log_softmax", [&] { return log_softmax(low, 1); }},
      {"cross_entropy", [&] { return cross_entropy(low, labels); }},
      {"nll_loss", [&] { return nll_loss(low, labels); }},
      {"mse_loss", [&] { return mse_loss(low, low * 0.5); }},
      // Unreduced, so that the dtype is the loss's own, not the fp32 mean's.
      {"l1_loss", [&] { return l1_loss(low, low * 0.5, Reduction::None); }},
      {"smooth_l1_loss", [&] { return smooth_l1_loss(low, low * 0.5, Reduction::None); }},
      {"huber_loss", [&] { return huber_loss(low, low * 0.5, Reduction::None); }},
      {"kl_div",
       [&] {
         return kl_div(log_softmax(low, 1).to(DType::bf16), softmax(low, 1).to(DType::bf16),
                       Reduction::None);
       }},
      {"cosine_similarity", [&] { return cosine_similarity(low, low * 0.5); }},
      {"binary_cross_entropy",
       [&] { return binary_cross_entropy(sigmoid(low), sigmoid(low * 0.5), {}, Reduction::None); }},
      {"binary_cross_entropy_with_logits",
       [&] {
         return binary_cross_entropy_with_logits(low, sigmoid(low), {}, {}, Reduction::None);
       }},
      {"norm", [&] { return norm(low); }},
      {"sum", [&] { return sum(low); }},
      {"mean", [&] { return mean(low); }},
      {"var", [&] { return var(low, {1}); }},
  };
  for (DType dt : {DType::f16, DType::bf16}) {
    amp::autocast guard(dt);
    for (const AutocastRule& rule : autocast_policy()) {
      INFO("op " << rule.op << " under " << dtype_name(dt));
      REQUIRE(run.count(rule.op) == 1);  // a row without a case here fails
      const DType expected = rule.policy == AutocastPolicy::lower  ? dt
                             : rule.policy == AutocastPolicy::fp32 ? DType::f32
                                                                   : DType::bf16;
      CHECK(run.at(rule.op)().dtype() == expected);
    }
    // Batch norm: a residual of another dtype joins the input in the wider of the two (outside
    // autocast the fused op refuses the mix).
    Tensor x16 = x4.to(DType::f16), r16 = x4.to(DType::f16);
    CHECK(batch_norm_relu(low4, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5, x4).dtype() ==
          DType::f32);
    CHECK(batch_norm_relu(x16, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5, low4).dtype() ==
          DType::f32);
    CHECK(batch_norm_relu(x16, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5, r16).dtype() ==
          DType::f16);
    // Not in the table: elementwise ops take the widest input, views and relu keep theirs.
    CHECK(add(low, m).dtype() == DType::f32);
    CHECK(relu(low).dtype() == DType::bf16);
    // f64 is left alone.
    CHECK(matmul(m.to(DType::f64), w2.t().to(DType::f64)).dtype() == DType::f64);
  }
  CHECK(run.at("conv2d")().dtype() == DType::f32);  // off again after the scope
  CHECK_THROWS_AS(batch_norm_relu(low4, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5, x4),
                  ValueError);
  CHECK(!amp::is_autocast_enabled());
  CHECK_THROWS_AS(amp::autocast(DType::f32), ValueError);
}

TEST_CASE("autocast: batch norm takes a bf16 input as it is, with f32 statistics", "[amp]") {
  // The same values in bf16 and in f32: the statistics (and so the running ones) come out as the
  // f32 computation's, the output is the f32 output rounded to bf16. For batch_norm and for
  // sync_batch_norm (a one-rank group: the allreduce is the identity).
  Generator g(4);
  Tensor xb = (randn({4, 3, 5, 5}, DType::f32, &g) * 3.0 + 20.0).to(DType::bf16);
  Tensor xf = xb.to(DType::f32);
  Tensor w = randn({3}, DType::f32, &g), b = randn({3}, DType::f32, &g);
  const StatsAllreduce identity = [](const Tensor&) {};
  for (bool sync : {false, true}) {
    INFO((sync ? "sync_batch_norm" : "batch_norm"));
    auto run = [&](const Tensor& x, Tensor& rm, Tensor& rv) {
      return sync ? sync_batch_norm(x, rm, rv, w, b, 0.1, 1e-5, Tensor(), false, identity)
                  : batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
    };
    Tensor rm_f = zeros({3}), rv_f = ones({3}), rm_b = zeros({3}), rv_b = ones({3});
    Tensor yf = run(xf, rm_f, rv_f), yb;
    {
      amp::autocast guard(DType::bf16);
      yb = run(xb, rm_b, rv_b);
    }
    CHECK(yb.dtype() == DType::bf16);
    REQUIRE(rm_b.dtype() == DType::f32);
    require_close(rm_b, rm_f, 1e-6, 1e-6, "running mean");
    require_close(rv_b, rv_f, 1e-5, 1e-6, "running variance");
    require_close(yb.to(DType::f32), yf, 1e-2, 1e-2, "output");
  }
}

TEST_CASE("autocast: f32 parameters get f32 gradients close to the f32 run's", "[amp]") {
  Generator g(2);
  Tensor x = randn({4, 3, 6, 6}, DType::f32, &g);
  Tensor w = (randn({8, 3, 3, 3}, DType::f32, &g) * 0.3).set_requires_grad();
  Tensor v = (randn({10, 8 * 36}, DType::f32, &g) * 0.05).set_requires_grad();
  Tensor labels = from_vector(std::vector<int64_t>{1, 7, 3, 9});
  auto loss_of = [&] {
    Tensor h = relu(conv2d(x, w, Tensor(), 1, 1)).flatten(1);
    return cross_entropy(linear(h, v, Tensor()), labels);
  };
  loss_of().backward();
  Tensor gw = w.grad().clone(), gv = v.grad().clone();
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    w.set_grad(Tensor());
    v.set_grad(Tensor());
    Tensor loss;
    {
      amp::autocast guard(dt);
      loss = loss_of();
    }
    CHECK(loss.dtype() == DType::f32);
    loss.backward();
    REQUIRE(w.grad().dtype() == DType::f32);
    REQUIRE(v.grad().dtype() == DType::f32);
    const double tol = dt == DType::bf16 ? 3e-2 : 5e-3;
    require_close(w.grad(), gw, tol, tol * amax(gw.abs(), {0, 1, 2, 3}).item<double>(), "conv weight gradient");
    require_close(v.grad(), gv, tol, tol * amax(gv.abs(), {0, 1}).item<double>(), "linear weight gradient");
  }
}

TEST_CASE("autocast: f16 and bf16 training of a small model tracks its f32 run", "[amp]") {
  auto train = [](std::optional<DType> dt) {
    Generator g(3);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(16, 32),
                                                  std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(32, 4));
    {
      NoGradGuard no_grad;
      for (Tensor& p : model->parameters()) p.copy_(randn(p.shape(), DType::f32, &g) * 0.3);
    }
    Tensor x = randn({64, 16}, DType::f32, &g);
    Tensor y = argmax(x.narrow(1, 0, 4), 1);  // a learnable rule
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.2).momentum(0.9));
    amp::GradScaler scaler(amp::GradScalerOptions().enabled(dt == DType::f16));
    std::vector<double> losses;
    for (int k = 0; k < 40; ++k) {
      opt.zero_grad();
      Tensor loss;
      {
        amp::autocast guard(dt.value_or(DType::bf16), dt.has_value());
        loss = cross_entropy(model->forward(x), y);
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      losses.push_back(loss.item<double>());
    }
    return losses;
  };
  const auto f32 = train(std::nullopt), f16 = train(DType::f16), bf16 = train(DType::bf16);
  CHECK(f32.back() < 0.5 * f32.front());  // it learns
  for (size_t k = 0; k < f32.size(); k += 13) {
    INFO("step " << k);
    CHECK(std::fabs(f16[k] - f32[k]) <= 0.02 * f32.front());
    CHECK(std::fabs(bf16[k] - f32[k]) <= 0.05 * f32.front());
  }
  CHECK(std::fabs(f16.back() - f32.back()) <= 0.02 * f32.front());
  CHECK(std::fabs(bf16.back() - f32.back()) <= 0.05 * f32.front());
}

namespace {
struct Tiny {
  Tensor w = full({3}, 1.0).set_requires_grad();
  optim::SGD opt{std::vector<optim::ParamGroup>{optim::ParamGroup({w})},
                 optim::SGDOptions(0.1).momentum(0.9)};
  // Backward of scale(sum(w * c)) leaves grad = scale * c.
  void backward(amp::GradScaler& s, std::vector<float> c) {
    opt.zero_grad();
    s.scale(sum(w * from_vector(c))).backward();
  }
};
}  // namespace

TEST_CASE("GradScaler: scales, unscales, skips inf/NaN steps, backs off and grows", "[amp]") {
  amp::GradScaler s(amp::GradScalerOptions().growth_interval(3));
  CHECK(s.get_scale() == 65536.0);
  Tiny t;
  t.backward(s, {1, 2, 3});
  CHECK(t.w.grad().to_vector<float>() == std::vector<float>{65536, 131072, 196608});
  s.unscale(t.opt);
  CHECK(t.w.grad().to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK_THROWS(s.unscale(t.opt));  // once per iteration
  CHECK(s.step(t.opt));
  s.update();
  const auto after_one = t.w.detach().clone().to_vector<float>();
  const auto momentum = t.opt.state_dict();

  // An inf gradient: no step (weights and momentum untouched), the scale halves.
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    t.backward(s, {1, bad, 1});
    CHECK_FALSE(s.step(t.opt));
    s.update();
    CHECK(t.w.to_vector<float>() == after_one);
    CHECK(t.opt.state_dict().at("state.0.momentum_buffer").to_vector<float>() ==
          momentum.at("state.0.momentum_buffer").to_vector<float>());
  }
  CHECK(s.get_scale() == 16384.0);
  CHECK(s.growth_tracker() == 0);
  // Growth after growth_interval clean steps in a row.
  for (int k = 0; k < 3; ++k) {
    CHECK(s.get_scale() == 16384.0);
    t.backward(s, {1, 1, 1});
    CHECK(s.step(t.opt));
    s.update();
  }
  CHECK(s.get_scale() == 32768.0);

  // State round-trips; a malformed dict changes nothing.
  amp::GradScaler other;
  other.load_state_dict(s.state_dict());
  CHECK(other.get_scale() == 32768.0);
  CHECK(other.growth_tracker() == 0);
  nn::StateDict bad = s.state_dict();
  bad["scale"] = scalar_tensor(-1.0, DType::f64);
  CHECK_THROWS_AS(other.load_state_dict(bad), ValueError);
  CHECK(other.get_scale() == 32768.0);
  CHECK_THROWS_AS(amp::GradScaler(amp::GradScalerOptions().backoff_factor(2.0)), ValueError);
  // Settings that are not finite counts or factors (an inf growth made the scale inf, and every
  // later step skipped for good; 1e300 loaded as INT64_MIN).
  CHECK_THROWS_AS(amp::GradScaler(amp::GradScalerOptions().growth_factor(INFINITY)), ValueError);
  for (const auto& [key, value] :
       std::vector<std::pair<const char*, double>>{{"growth_factor", INFINITY},
                                                   {"growth_tracker", 1e300},
                                                   {"growth_interval", INFINITY},
                                                   {"growth_interval", 2.5},
                                                   {"backoff_factor", NAN}}) {
    INFO(key << " = " << value);
    nn::StateDict odd = s.state_dict();
    odd.at(key) = scalar_tensor(value, DType::f64);
    CHECK_THROWS_AS(other.load_state_dict(odd), ValueError);
  }
  CHECK(other.get_scale() == 32768.0);
  // Growth stops below f32's largest value (an inf scale could never come back).
  amp::GradScaler near_max(
      amp::GradScalerOptions().init_scale(1e38).growth_factor(10.0).growth_interval(1));
  Tensor q = ones({1}).set_requires_grad();
  optim::SGD q_opt({q}, optim::SGDOptions(0.1));
  q.set_grad(ones({1}));
  CHECK(near_max.step(q_opt));  // a clean step: the update would grow the scale
  near_max.update();
  CHECK(near_max.get_scale() == 1e38);
}

TEST_CASE("GradScaler.unscale: every float dtype and strided gradients, rounded as mul_, "
          "one inf or NaN in any gradient is found", "[amp]") {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    Generator g(4);
    // Gradients of three parameters: a transposed view, a row-major one, a strided slice.
    std::vector<Tensor> params, grads;
    std::vector<Shape> strides;
    for (int k = 0; k < 3; ++k) {
      Tensor base = randn({6, 8}, DType::f32, &g).to(dt) * 1024.0;
      // An inf outside the slice: not an element of the gradient, so not found.
      if (k == 2) base.narrow(1, 0, 1).fill_(std::numeric_limits<double>::infinity());
      Tensor grad = k == 0 ? base.t() : k == 1 ? base : base.narrow(1, 1, 5);
      params.push_back(zeros(grad.shape(), dt).set_requires_grad());
      params.back().set_grad(grad);
      grads.push_back(grad.clone());
      strides.push_back(grad.strides());
    }
    optim::SGD opt(params, optim::SGDOptions(0.1));
    amp::GradScaler s(amp::GradScalerOptions().init_scale(4096.0));
    s.unscale(opt);
    for (size_t k = 0; k < params.size(); ++k) {
      REQUIRE(params[k].grad().strides() == strides[k]);  // in place
      CHECK(max(abs(params[k].grad().to(DType::f64) - mul(grads[k], 1.0 / 4096.0).to(DType::f64)))
                .item<double>() == 0.0);
    }
    const bool steps = dt == DType::f32 || dt == DType::f64;  // SGD's kernels take these
    if (steps) CHECK(s.step(opt));
    for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
      // One element of the slice (skipped columns are not gradient elements, and stay finite).
      Tensor grad = params[2].grad();
      Tensor one = grad.narrow(0, 4, 1).narrow(1, 3, 1);
      { NoGradGuard ng; one.fill_(bad); }
      amp::GradScaler t;
      t.unscale(opt);
      CHECK_FALSE(t.step(opt));  // found: no step (for any dtype)
      { NoGradGuard ng; one.fill_(1.0); }
    }
  }
}

TEST_CASE("GradScaler.unscale finds one inf in a large strided gradient that threads share",
          "[amp]") {
  // Rows of a slice are runs of their own, handed to several threads: the one that meets the
  // inf must not be overwritten by those that do not (a race, before).
  const int threads = get_num_threads();
  set_num_threads(2);
  for (int trial = 0; trial < 20; ++trial) {
    INFO("trial " << trial);
    Tensor p = zeros({1024, 1000}).set_requires_grad();
    Tensor base = ones({1024, 1100});
    base.narrow(0, 1000 + trial, 1).narrow(1, 7, 1).fill_(std::numeric_limits<double>::infinity());
    p.set_grad(base.narrow(1, 0, 1000));
    optim::SGD opt({p}, optim::SGDOptions(0.1));
    amp::GradScaler s;
    s.unscale(opt);
    CHECK_FALSE(s.step(opt));
  }
  set_num_threads(threads);
}

TEST_CASE("GradScaler: an inf on one rank skips the step on every rank", "[amp][parallel]") {
  std::vector<int> stepped(2, -1);
  std::vector<double> scales(2);
  std::vector<std::vector<float>> weights(2);
  parallel::launch(2, [&](parallel::Rank& r) {
    amp::GradScaler s;
    s.set_sync(parallel::any_rank(r.comm));
    Tiny t;
    // Gradients not allreduced: only rank 1 sees the inf.
    t.backward(s, {1, r.rank() == 1 ? std::numeric_limits<float>::infinity() : 1.0f, 1});
    stepped[r.rank()] = s.step(t.opt) ? 1 : 0;
    s.update();
    scales[r.rank()] = s.get_scale();
    weights[r.rank()] = t.w.to_vector<float>();
  });
  CHECK(stepped == std::vector<int>{0, 0});
  CHECK(scales == std::vector<double>{32768.0, 32768.0});
  CHECK(weights[0] == std::vector<float>{1, 1, 1});
  CHECK(weights[1] == std::vector<float>{1, 1, 1});
}

TEST_CASE("GradScaler.unscale and clip_grad_norm change an expanded gradient's values once",
          "[amp]") {
  // A gradient set by hand as an expanded view: 4 elements per memory location. Unscaling per
  // element would divide each location by the scale 4 times.
  Tensor p = zeros({3, 4}).set_requires_grad();
  Tensor column = from_vector<float>({1024, 2048, -512}, {3, 1});
  p.set_grad(column.expand({3, 4}));
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  amp::GradScaler s(amp::GradScalerOptions().init_scale(512.0));
  s.unscale(opt);
  CHECK(column.reshape({3}).to_vector<float>() == std::vector<float>{2, 4, -1});
  CHECK(s.step(opt));  // p -= 0.1 * grad, every element
  CHECK(p.detach().reshape({12}).to_vector<float>() ==
        std::vector<float>{-0.2f, -0.2f, -0.2f, -0.2f, -0.4f, -0.4f, -0.4f, -0.4f, 0.1f, 0.1f,
                           0.1f, 0.1f});
  // clip_grad_norm: the norm of the 12 elements (torch's), the scaling applied once.
  const double norm = optim::clip_grad_norm({p}, 1.0);
  CHECK(norm == Approx(std::sqrt(4.0 * (4 + 16 + 1))).epsilon(1e-6));
  const std::vector<float> clipped = column.reshape({3}).to_vector<float>();
  for (size_t i = 0; i < 3; ++i)
    CHECK(clipped[i] == Approx(std::vector<double>{2, 4, -1}[i] / (norm + 1e-6)).epsilon(1e-6));
}

TEST_CASE("GradScaler.unscale refuses a bad gradient before it unscales any", "[amp][errors]") {
  // The second gradient is an integer tensor: unscale says so, leaves the first as it was and
  // the optimizer unmarked, so a fixed step unscales every gradient once.
  Tensor a = zeros({2}).set_requires_grad(), b = zeros({2}).set_requires_grad();
  optim::SGD opt({a, b}, optim::SGDOptions(1.0));
  amp::GradScaler s(amp::GradScalerOptions().init_scale(4.0));
  a.set_grad(full({2}, 8.0));
  b.impl()->grad = full({2}, 8.0, DType::i64).impl_ptr();  // planted: set_grad refuses it
  CHECK_THAT(tandem::testing::error_of([&] { s.unscale(opt); }),
             Catch::Contains("GradScaler.unscale: gradients are floating point, got i64"));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{8, 8});
  b.set_grad(full({2}, 8.0));
  CHECK(s.step(opt));  // unscales both (the first time), then steps
  CHECK(a.detach().to_vector<float>() == std::vector<float>{-2, -2});
  CHECK(b.detach().to_vector<float>() == std::vector<float>{-2, -2});
}

TEST_CASE("GradScaler: the scaled loss is f32, a step or an update twice is refused, a new scale",
          "[amp][errors]") {
  amp::GradScaler s;  // 65536
  // torch's scale is an f32 tensor: an f16 loss of 2 scales to 131072 (f16's range ends at
  // 65504), an integer loss to f32 too, an f64 loss stays f64.
  const Tensor half_loss = full({}, 2.0, DType::f16);
  CHECK(s.scale(half_loss).dtype() == DType::f32);
  CHECK(s.scale(half_loss).item<float>() == 131072);
  CHECK(s.scale(full({}, 3, DType::i64)).item<float>() == 196608);
  CHECK(s.scale(full({}, 0.5, DType::f64)).dtype() == DType::f64);
  // The gradient still reaches an f16 loss (through the cast), scaled.
  Tensor w = ones({2}, DType::f16).set_requires_grad();
  s.scale(sum(w)).backward();
  CHECK(w.grad().dtype() == DType::f16);
  CHECK(std::isinf(w.grad().to(DType::f32).to_vector<float>()[0]));  // 65536 overflows f16

  Tensor p = ones({3}).set_requires_grad();
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  CHECK_THAT(
      tandem::testing::error_of([&] { s.update(); }),
      Catch::Contains("GradScaler.update: no inf checks were recorded since the last update()"));
  CHECK(s.get_scale() == 65536);
  s.scale(sum(mul(p, 2.0))).backward();
  CHECK(s.step(opt));
  CHECK_THAT(tandem::testing::error_of([&] { s.step(opt); }),
             Catch::Contains("GradScaler.step: already called for this optimizer since the last "
                             "update()"));
  CHECK(p.detach().to_vector<float>() == std::vector<float>(3, 0.8f));  // stepped once
  s.update();
  // update(new_scale): the scale as given, the next iteration starts afresh.
  s.update(1024.0);
  CHECK(s.get_scale() == 1024);
  CHECK_THAT(tandem::testing::error_of([&] { s.update(-1.0); }),
             Catch::Contains("the new scale must be positive and finite, got -1"));
  p.grad().zero_();
  s.scale(sum(p)).backward();
  CHECK(s.step(opt));
}

TEST_CASE("GradScaler: each optimizer's step is skipped for its own infs only, as torch's",
          "[amp]") {
  // A GAN's two optimizers: an inf in the generator's gradients skips its step, not the
  // critic's; the scale backs off once for the iteration.
  amp::GradScaler s(amp::GradScalerOptions().init_scale(1024.0));
  Tensor a = ones({2}).set_requires_grad(), b = ones({2}).set_requires_grad();
  optim::SGD oa({a}, optim::SGDOptions(0.5)), ob({b}, optim::SGDOptions(0.5));
  a.set_grad(from_vector<float>({INFINITY, 1024}));
  b.set_grad(from_vector<float>({1024, 2048}));
  CHECK(!s.step(oa));
  CHECK(s.step(ob));
  CHECK(a.detach().to_vector<float>() == std::vector<float>{1, 1});        // skipped
  CHECK(b.detach().to_vector<float>() == std::vector<float>{0.5f, 0.0f});  // grads 1 and 2
  s.update();
  CHECK(s.get_scale() == 512);
  // The next iteration, clean for both: both step.
  a.set_grad(from_vector<float>({512, 512}));
  b.set_grad(from_vector<float>({512, 512}));
  CHECK(s.step(oa));
  CHECK(s.step(ob));
  // A disabled scaler's scale reads 1, as torch's.
  CHECK(amp::GradScaler(amp::GradScalerOptions().enabled(false).init_scale(64)).get_scale() == 1);
}
