// The autograd engine: gradients, accumulation, hooks, no-grad, graph reuse errors, long chains.
#include "../util.hpp"
#include "tandem/autograd/node.hpp"

using namespace tandem;
using tandem::testing::error_of;

TEST_CASE("backward computes gradients through a shared subexpression", "[autograd]") {
  Tensor x = from_vector<double>({2.0, -1.0}).set_requires_grad();
  Tensor y = mul(x, x);          // reused twice below: the engine must wait for both uses
  Tensor z = sum(add(mul(y, 3.0), y));  // z = 4 x^2
  z.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{16.0, -8.0});
  CHECK(x.is_leaf());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn()->name() == "mul");
}

TEST_CASE("gradients accumulate over backward calls until cleared", "[autograd]") {
  Tensor x = ones({3}).set_requires_grad();
  sum(mul(x, 2.0)).backward();
  sum(mul(x, 3.0)).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>(3, 5.0f));
  x.set_grad(Tensor());
  sum(x).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>(3, 1.0f));
}

TEST_CASE("backward with an explicit gradient", "[autograd]") {
  Tensor x = from_vector<float>({1, 2, 3}).set_requires_grad();
  Tensor y = mul(x, 2.0);
  y.backward(from_vector<float>({1.0f, 0.5f, -1.0f}));
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2.0f, 1.0f, -2.0f});
}

TEST_CASE("detach and no-grad stop history", "[autograd]") {
  Tensor x = ones({2}).set_requires_grad();
  Tensor d = mul(x, 2.0).detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  {
    NoGradGuard guard;
    Tensor y = mul(x, 2.0);
    CHECK_FALSE(y.requires_grad());
    CHECK(grad_mode_enabled() == false);
  }
  CHECK(grad_mode_enabled());
  Tensor z = add(mul(x, d), 1.0);  // gradient flows into x only
  sum(z).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>(2, 2.0f));
}

TEST_CASE("gradient-ready hooks fire once, after the gradient is complete", "[autograd]") {
  Tensor w = ones({2}).set_requires_grad();
  Tensor v = ones({2}).set_requires_grad();
  std::vector<std::vector<float>> seen;
  w.register_grad_ready_hook([&](const Tensor& g) { seen.push_back(g.to_vector<float>()); });
  // w is used three times; the hook must see the sum of all three contributions, once.
  Tensor loss = sum(add(add(mul(w, 2.0), mul(w, v)), mul(w, 4.0)));
  loss.backward();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<float>(2, 7.0f));
  sum(w).backward();
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == std::vector<float>(2, 8.0f));  // accumulated .grad
  CHECK(error_of([&] { mul(w, 2.0).register_grad_ready_hook([](const Tensor&) {}); })
            .find("only leaf tensors") != std::string::npos);
}

TEST_CASE("using a freed graph twice is a clear error, retain_graph keeps it", "[autograd]") {
  Tensor x = ones({2}).set_requires_grad();
  Tensor y = sum(exp(x));
  y.backward();
  CHECK(error_of([&] { y.backward(); }).find("backward through the graph a second time") !=
        std::string::npos);
  Tensor z = sum(exp(x));
  x.set_grad(Tensor());
  z.backward(Tensor(), true);
  z.backward();
  CHECK(x.grad().to_vector<float>()[0] == Approx(2 * std::exp(1.0)));
}

TEST_CASE("backward errors", "[autograd]") {
  Tensor x = ones({2}).set_requires_grad();
  CHECK(error_of([&] { mul(x, 2.0).backward(); }) ==
        "backward: a gradient can be implied only for scalar outputs, got shape (2,); pass a "
        "gradient of that shape");
  CHECK(error_of([&] { ones({1}).backward(); }) ==
        "backward: tensor 0 does not require grad and has no grad_fn");
  CHECK(error_of([&] { mul(x, 2.0).backward(ones({3})); }) ==
        "backward: gradient has shape (3,) but the tensor has shape (2,)");
  CHECK(error_of([] { ones({2}, DType::i64).set_requires_grad(); }) ==
        "requires_grad: only floating tensors can require gradients, got dtype i64");
  CHECK(error_of([&] { x.fill_(1.0); }).find("in-place operation on a leaf tensor that requires") !=
        std::string::npos);
}

TEST_CASE("a 10,000-op chain backpropagates and frees without recursion", "[autograd]") {
  Tensor x = full({1}, 1.0, DType::f64).set_requires_grad();
  Tensor y = x;
  for (int i = 0; i < 10000; ++i) y = mul(y, 1.0001);
  sum(y).backward();
  CHECK(x.grad().item<double>() == Approx(std::pow(1.0001, 10000)).epsilon(1e-9));
  // Dropping the last handle tears the graph down iteratively (a recursion would overflow in
  // sanitizer builds); a second, longer graph is freed without ever running backward.
  y = Tensor();
  Tensor z = x;
  for (int i = 0; i < 100000; ++i) z = add(z, 1.0);
  z = Tensor();
  SUCCEED("100,000-node graph freed");
}

TEST_CASE("gradients flow through views into the base", "[autograd]") {
  Tensor x = arange(6, DType::f64).reshape({2, 3}).detach().set_requires_grad();
  Tensor y = add(mul(x.select(0, 1), 2.0), sum(x.t().slice(0, 0, 2)));
  sum(y).backward();
  // select row 1 -> 2 each; t().slice columns 0,1 -> 3 each (y has 3 elements)
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 3, 0, 5, 5, 2});
}

TEST_CASE("a gradient buffer given in advance receives the gradient in place", "[autograd]") {
  // What data parallelism does: each parameter's gradient is a view into one flat bucket.
  Tensor bucket = full({5}, -7.0);  // stale contents: the first backward must overwrite them
  Tensor w = from_vector<float>({1, 2, 3}).set_requires_grad();
  Tensor b = from_vector<float>({4, 5}).set_requires_grad();
  w.set_grad_buffer(bucket.narrow(0, 0, 3));
  b.set_grad_buffer(bucket.narrow(0, 3, 2));
  Tensor w_ref = from_vector<float>({1, 2, 3}).set_requires_grad();
  Tensor b_ref = from_vector<float>({4, 5}).set_requires_grad();
  auto loss = [](const Tensor& w, const Tensor& b) { return add(sum(mul(w, w)), sum(mul(b, 3.0))); };

  loss(w, b).backward();
  loss(w_ref, b_ref).backward();
  CHECK(w.grad().raw_data() == bucket.raw_data());  // no copy out: the grad is the view
  CHECK(equal(w.grad(), w_ref.grad()));
  CHECK(bucket.to_vector<float>() == std::vector<float>{2, 4, 6, 3, 3});

  loss(w, b).backward();  // accumulates in place
  loss(w_ref, b_ref).backward();
  CHECK(bucket.to_vector<float>() == std::vector<float>{4, 8, 12, 6, 6});
  CHECK(equal(b.grad(), b_ref.grad()));

  w.set_grad(Tensor());  // zero_grad(set_to_none): the next backward copies in again
  loss(w, b).backward();
  CHECK(bucket.narrow(0, 0, 3).to_vector<float>() == std::vector<float>{2, 4, 6});
  CHECK(w.grad().raw_data() == bucket.raw_data());

  CHECK_THROWS_AS(w.set_grad_buffer(zeros({4})), ValueError);
  CHECK_THROWS_AS(w.set_grad_buffer(zeros({3}, DType::f64)), ValueError);
  w.set_grad_buffer(Tensor());  // back to fresh tensors
  loss(w, b).backward();
  CHECK(w.grad().raw_data() != bucket.raw_data());
}

TEST_CASE("gradients summed from two consumers keep their layout, a leaf's follows the leaf",
          "[autograd]") {
  // A residual block's input feeds two convolutions; on a channels-last network both hand back
  // channels-last gradients, and their sum must stay so (row-major, every kernel after it read
  // across strides and its consumer copied it back).
  const Shape shape{2, 8, 4, 4};
  Tensor x = randn(shape).contiguous(MemoryFormat::ChannelsLast).set_requires_grad();
  Tensor h = mul(x, 1.0);
  Tensor probe = h.detach().clone();
  Shape seen;
  autograd::record("probe", {h}, probe, [&seen](const Tensor& g) -> std::vector<Tensor> {
    seen = g.strides();
    return {g};
  });
  Generator gen(3);
  std::vector<Tensor> grads;
  const auto consumer = [&](const char* name) {
    grads.push_back(randn(shape, DType::f32, &gen).contiguous(MemoryFormat::ChannelsLast));
    Tensor out = zeros({1});
    autograd::record(name, {probe}, out, [g = grads.back()](const Tensor&) -> std::vector<Tensor> {
      return {g};
    });
    return out;
  };
  Tensor a = consumer("first"), b = consumer("second");
  add(a, b).sum().backward();
  CHECK(seen == channels_last_strides(shape));
  // The leaf x is channels-last: so is its .grad, and it is the sum.
  CHECK(x.grad().strides() == channels_last_strides(shape));
  CHECK(max(abs(x.grad() - add(grads[0], grads[1]))).item<double>() == 0.0);
  // A row-major leaf gets a row-major .grad from the same channels-last gradients.
  Tensor y = randn(shape).set_requires_grad();
  Tensor out = zeros({1});
  autograd::record("nhwc", {y}, out, [g = grads[0]](const Tensor&) -> std::vector<Tensor> {
    return {g};
  });
  out.sum().backward();
  CHECK(y.grad().is_contiguous());
  CHECK(max(abs(y.grad() - grads[0])).item<double>() == 0.0);
}

TEST_CASE(".grad takes over a gradient nothing else holds and copies one that is shared",
          "[autograd]") {
  const Shape shape{3, 4};
  const auto leaf_fed_by = [&](std::function<Tensor()> make, bool retain) {
    Tensor w = zeros(shape).set_requires_grad();
    Tensor out = zeros({1});
    autograd::record("source", {w}, out, [make](const Tensor&) -> std::vector<Tensor> {
      return {make()};
    });
    out.sum().backward({}, retain);
    return w;
  };
  // A fresh gradient: .grad is that tensor (its memory), not a copy.
  const void* fresh_memory = nullptr;
  Tensor w = leaf_fed_by([&] {
    Tensor g = full(shape, 2.0);
    fresh_memory = g.raw_data();
    return g;
  }, false);
  CHECK(w.grad().raw_data() == fresh_memory);
  CHECK(w.grad().to_vector<float>() == std::vector<float>(12, 2.0f));
  // Held elsewhere (here by the test), a view of a larger buffer, another layout: copied, so
  // .grad never aliases them.
  Tensor kept = full(shape, 3.0);
  const std::vector<std::pair<const char*, std::function<Tensor()>>> shared{
      {"held", [&] { return kept; }},
      {"a view", [&] { return full({3, 8}, 4.0).narrow(1, 0, 4); }},
      {"transposed", [&] { return full({4, 3}, 5.0).t(); }},
  };
  for (const auto& [name, make] : shared) {
    INFO(name);
    Tensor v = leaf_fed_by(make, true);
    CHECK(v.grad().raw_data() != kept.raw_data());
    CHECK(v.grad().is_contiguous());
    { NoGradGuard ng; v.grad().fill_(-1.0); }
    CHECK(kept.to_vector<float>() == std::vector<float>(12, 3.0f));
  }
  // A second backward adds into the .grad it took over.
  Tensor x = zeros(shape).set_requires_grad();
  for (int k = 0; k < 2; ++k) {
    Tensor out = zeros({1});
    autograd::record("fresh", {x}, out, [&](const Tensor&) -> std::vector<Tensor> {
      return {full(shape, 1.0)};
    });
    out.sum().backward();
  }
  CHECK(x.grad().to_vector<float>() == std::vector<float>(12, 2.0f));
}

// PyTorch 2 for the same program: y.grad [40, 80, 120] (its retain_grad runs after the tensor's
// hooks), x.grad [80, 160, 240]; after the second backward both doubled.
TEST_CASE("register_hook replaces or observes a gradient, retain_grad keeps a non-leaf's",
          "[autograd]") {
  Tensor x = from_vector<double>({1, 2, 3}).set_requires_grad();
  Tensor y = mul(x, 2.0);
  y.retain_grad();
  CHECK(y.retains_grad());
  std::vector<std::vector<double>> seen;
  y.register_hook(
      [&](const Tensor& g) { seen.push_back(g.to_vector<double>()); });  // void: observes
  const unsigned times_ten = y.register_hook([](const Tensor& g) { return mul(g, 10.0); });
  Tensor z = sum(mul(y, y));  // dz/dy = 2 y = [4, 8, 12]
  z.backward(Tensor(), true);
  CHECK(seen == std::vector<std::vector<double>>{{4, 8, 12}});
  CHECK(y.grad().to_vector<double>() == std::vector<double>{40, 80, 120});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{80, 160, 240});
  z.backward();  // both accumulate
  CHECK(y.grad().to_vector<double>() == std::vector<double>{80, 160, 240});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{160, 320, 480});

  // Removed, a hook no longer runs; a handle removed twice is an error.
  Tensor y2 = mul(x, 2.0);
  const unsigned h = y2.register_hook([](const Tensor& g) { return mul(g, 10.0); });
  y2.remove_hook(h);
  x.set_grad(Tensor());
  sum(y2).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 2, 2});
  CHECK(error_of([&] { y2.remove_hook(h); }).find("no hook with handle") != std::string::npos);
  y.remove_hook(times_ten);
}

TEST_CASE("a leaf's hooks run in order before .grad accumulates, and in autograd::grad",
          "[autograd]") {
  Tensor x = from_vector<float>({1, 2}).set_requires_grad();
  x.register_hook([](const Tensor& g) { return add(g, 1.0); });
  x.register_hook([](const Tensor& g) { return mul(g, 2.0); });
  std::vector<float> ready;
  x.register_grad_ready_hook([&](const Tensor& g) { ready = g.to_vector<float>(); });
  sum(mul(x, 3.0)).backward();  // (3 + 1) * 2
  CHECK(x.grad().to_vector<float>() == std::vector<float>{8, 8});
  CHECK(ready == std::vector<float>{8, 8});  // the ready hook sees the hooked gradient
  sum(mul(x, 3.0)).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{16, 16});

  // autograd::grad returns the hooked gradient and leaves .grad; a retaining non-leaf on the
  // way keeps its gradient, as in PyTorch.
  Tensor y = mul(x, 2.0);
  y.retain_grad();
  auto g = autograd::grad({sum(mul(y, y))}, {x});
  CHECK(g[0].to_vector<float>() == std::vector<float>{((4 * 2) + 1) * 2, ((8 * 2) + 1) * 2});
  CHECK(x.grad().to_vector<float>() == std::vector<float>{16, 16});
  CHECK(y.grad().to_vector<float>() == std::vector<float>{4, 8});
}

TEST_CASE("hooks on a non-leaf outlive its handle, misuse is a clear error", "[autograd]") {
  Tensor x = from_vector<float>({1, 2}).set_requires_grad();
  Tensor z;
  {
    Tensor y = mul(x, 1.0);
    y.register_hook([](const Tensor& g) { return mul(g, 5.0); });
    z = sum(y);
  }
  z.backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{5, 5});

  Tensor w = from_vector<float>({1, 2}).set_requires_grad();
  Tensor v = mul(w, 1.0);
  v.register_hook([](const Tensor&) { return ones({3}); });
  CHECK(error_of([&] { sum(v).backward(); })
            .find("returned a gradient of shape (3,), f32 on cpu for one of shape (2,), f32 on "
                  "cpu") != std::string::npos);
  // nor its dtype (torch: "hook has changed the type of value"); it was cast back silently
  Tensor v2 = mul(w, 1.0);
  v2.register_hook([](const Tensor& g) { return g.to(DType::f64); });
  CHECK(error_of([&] { sum(v2).backward(); })
            .find("returned a gradient of shape (2,), f64 on cpu for one of shape (2,), f32 on "
                  "cpu") != std::string::npos);
  Tensor plain = ones({2});
  CHECK(error_of([&] {
          plain.register_hook([](const Tensor& g) { return g; });
        }).find("does not require grad") != std::string::npos);
  CHECK(error_of([&] { plain.retain_grad(); }).find("does not require grad") != std::string::npos);
  w.retain_grad();  // a leaf keeps its gradient anyway
  CHECK_FALSE(w.retains_grad());
}

// PyTorch raises "one of the variables needed for gradient computation has been modified by an
// inplace operation" in each refused case below, and in none of the accepted ones.
TEST_CASE("backward refuses a saved tensor changed in place since its op ran", "[autograd]") {
  auto changed_in_place = [](const std::function<void()>& f) {
    return error_of(f).find("was changed in place after the forward pass") != std::string::npos;
  };
  // A GAN's classic slip: the discriminator's step between the generator's forward and
  // backward. The second layer's weight carries the gradient to the first; one layer alone
  // saves only its input (the weight's gradient needs x, not the weight), as in PyTorch.
  Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2});
  auto fc1 = std::make_shared<nn::Linear>(2, 2), fc2 = std::make_shared<nn::Linear>(2, 2);
  optim::SGD opt1(fc1->parameters(), optim::SGDOptions(0.1));
  Tensor one = sum(fc1->forward(x));
  one.backward(Tensor(), true);
  opt1.step();
  one.backward();  // nothing saved changed
  optim::SGD opt2(fc2->parameters(), optim::SGDOptions(0.1));
  Tensor loss = sum(fc2->forward(relu(fc1->forward(x))));
  loss.backward(Tensor(), true);
  opt2.step();  // fc2.weight changes in place
  CHECK(changed_in_place([&] { loss.backward(); }));
  sum(fc2->forward(relu(fc1->forward(x)))).backward();  // a fresh forward is fine

  // A saved input that does not require grad, changed under NoGradGuard (its version moves
  // through a view too).
  Tensor w = from_vector<double>({1, 2}).set_requires_grad();
  Tensor c = from_vector<double>({3, 4});
  Tensor y = sum(mul(w, c));
  {
    NoGradGuard no_grad;
    c.narrow(0, 1, 1).mul_(2.0);
  }
  CHECK(changed_in_place([&] { y.backward(); }));

  // A saved output (relu keeps its result).
  Tensor r = relu(mul(w, 1.0));
  Tensor z = sum(r);
  {
    NoGradGuard no_grad;
    r.fill_(5.0);
  }
  CHECK(changed_in_place([&] { z.backward(); }));

  // Not saved, so nothing to refuse: add keeps no values, and mul keeps w only for c's gradient.
  Tensor c2 = from_vector<double>({3, 4});
  Tensor s = sum(add(mul(w, c2), c2));
  {
    NoGradGuard no_grad;
    w.add_(10.0);
  }
  w.set_grad(Tensor());
  s.backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{3, 4});
}

TEST_CASE("autograd::backward from several roots, and into chosen inputs only", "[autograd]") {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Tensor w = from_vector<double>({3, -1}).set_requires_grad();
  Tensor a = mul(x, w);       // d/dx = w, d/dw = x
  Tensor b = sum(mul(x, x));  // d/dx = 2x
  autograd::backward({a, b}, {from_vector<double>({1, 10}), Tensor()});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3 + 2, -10 + 4});
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 20});
  CHECK(error_of([&] {
          autograd::backward({sum(a)}, {Tensor(), Tensor()});
        }).find("1 tensors but 2 grad_tensors") != std::string::npos);

  // With inputs: only x's .grad changes (accumulating onto what it holds); w's stays.
  Tensor y = sum(mul(mul(x, w), 2.0));
  autograd::backward({y}, {}, std::nullopt, false, {x});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5 + 6, -6 - 2});
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 20});
  // A non-leaf input gets a .grad too, and nothing below it runs.
  x.set_grad(Tensor());
  Tensor h = mul(x, 3.0);
  autograd::backward({sum(mul(h, h))}, {}, std::nullopt, false, {h});
  CHECK(h.grad().to_vector<double>() == std::vector<double>{6, 12});
  CHECK_FALSE(x.grad().defined());
  // An input's accumulation is part of the pass: a gradient-ready hook (data parallelism's)
  // may queue a callback, which runs before backward returns.
  int callbacks = 0;
  w.register_grad_ready_hook(
      [&](const Tensor&) { autograd::queue_callback([&] { ++callbacks; }); });
  autograd::backward({sum(mul(x, w))}, {}, std::nullopt, false, {w});
  CHECK(callbacks == 1);
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1 + 1, 20 + 2});
  // A bad input is refused under backward's name (autograd::grad's errors name grad).
  const Tensor constant = from_vector<double>({1, 2});
  CHECK(error_of([&] {
          autograd::backward({sum(mul(x, w))}, {}, std::nullopt, false, {constant});
        }) == "backward: input 0 does not require grad");
  CHECK(error_of([&] { autograd::grad({sum(mul(x, w))}, {constant}); }) ==
        "grad: input 0 does not require grad");
}

TEST_CASE("mutable_grad assigns, changes in place and drops a gradient", "[autograd]") {
  Tensor p = from_vector<float>({1, 2, 3}).set_requires_grad();
  CHECK_FALSE(p.mutable_grad().defined());
  p.mutable_grad() = full({3}, 0.5);
  CHECK(p.grad().to_vector<float>() == std::vector<float>(3, 0.5f));
  p.mutable_grad().mul_(4.0);  // in place on the gradient itself
  CHECK(p.grad().to_vector<float>() == std::vector<float>(3, 2.0f));
  sum(mul(p, 3.0)).backward();  // accumulates onto the assigned gradient
  CHECK(p.grad().to_vector<float>() == std::vector<float>(3, 5.0f));
  p.mutable_grad().reset();
  CHECK_FALSE(p.grad().defined());
  CHECK(error_of([&] { p.mutable_grad() = zeros({2}); }).find("set_grad: gradient of shape") !=
        std::string::npos);
}

TEST_CASE("anomaly detection names the op whose backward made a NaN", "[autograd]") {
  // sqrt's gradient at 0 is inf; times mul's zero gradient it is NaN, made by sqrt's backward.
  auto run = [] {
    Tensor x = from_vector<double>({4.0, 0.0}).set_requires_grad();
    sum(mul(sqrt(x), 0.0)).backward();
    return x.grad();
  };
  CHECK_FALSE(autograd::AnomalyMode::is_enabled());
  CHECK(std::isnan(run().to_vector<double>()[1]));  // off: the NaN reaches .grad silently
  {
    autograd::DetectAnomalyGuard guard;
    CHECK(autograd::AnomalyMode::is_enabled());
    const std::string message = error_of([&] { run(); });
    CHECK_THAT(message, Catch::Contains("the backward of 'sqrt' returned NaN values in its "
                                        "output 0") &&
                            Catch::Contains("going to 'AccumulateGrad'"));
    // A finite pass goes through untouched.
    Tensor x = from_vector<double>({4.0, 1.0}).set_requires_grad();
    sum(sqrt(x)).backward();
    CHECK(x.grad().to_vector<double>() == std::vector<double>{0.25, 0.5});
  }
  CHECK_FALSE(autograd::AnomalyMode::is_enabled());
}

TEST_CASE("a leaf's gradient is accumulated in place, as torch's AccumulateGrad", "[autograd]") {
  // torch 1.13: g = x.grad after the first backward is the same tensor after the second, and
  // holds the sum; a gradient zeroed in place keeps collecting into the same tensor.
  Tensor x = from_vector<float>({1, 2, 3}).requires_grad_();
  sum(mul(x, 2.0)).backward();
  Tensor g = x.grad();
  sum(mul(x, 3.0)).backward();
  CHECK(g.is_same(x.grad()));
  CHECK(g.to_vector<float>() == std::vector<float>{5, 5, 5});
  {
    NoGradGuard no_grad;
    x.grad().zero_();
  }
  sum(mul(x, x)).backward();
  CHECK(g.to_vector<float>() == std::vector<float>{2, 4, 6});
  // A gradient with history (create_graph) is summed out of place, keeping it.
  Tensor y = from_vector<float>({1, 2}).requires_grad_();
  sum(mul(y, y)).backward(Tensor(), /*retain_graph=*/false, /*create_graph=*/true);
  Tensor first = y.grad();
  CHECK(first.requires_grad());
  sum(mul(y, 4.0)).backward();
  CHECK(y.grad().to_vector<float>() == std::vector<float>{6, 8});
  CHECK(first.to_vector<float>() == std::vector<float>{2, 4});
}
