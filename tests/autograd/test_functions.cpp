// Custom autograd functions (autograd::Function<T>), autograd::grad, and gradients of gradients
// (create_graph): against the built-in ops, closed forms and finite differences.
#include "../util.hpp"

namespace torch = tandem;
using namespace torch::autograd;
using tandem::DType;
using tandem::Tensor;
using tandem::testing::error_of;
using tandem::testing::numeric_gradient;
using tandem::testing::require_close;

namespace custom {

// The two functions of libtorch's autograd example (pytorch/examples cpp/autograd), unchanged.
class LinearFunction : public Function<LinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor input, torch::Tensor weight,
                               torch::Tensor bias = torch::Tensor()) {
    ctx->save_for_backward({input, weight, bias});
    auto output = input.mm(weight.t());
    if (bias.defined()) {
      output += bias.unsqueeze(0).expand_as(output);
    }
    return output;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    auto input = saved[0];
    auto weight = saved[1];
    auto bias = saved[2];

    auto grad_output = grad_outputs[0];
    auto grad_input = grad_output.mm(weight);
    auto grad_weight = grad_output.t().mm(input);
    auto grad_bias = torch::Tensor();
    if (bias.defined()) {
      grad_bias = grad_output.sum(0);
    }

    return {grad_input, grad_weight, grad_bias};
  }
};

class MulConstant : public Function<MulConstant> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor tensor, double constant) {
    ctx->saved_data["constant"] = constant;
    return tensor * constant;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    return {grad_outputs[0] * ctx->saved_data["constant"].toDouble(), torch::Tensor()};
  }
};

// exp saving its output: backward is g * out, differentiable through out under create_graph.
struct Exp : Function<Exp> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    Tensor out = torch::exp(x);
    ctx->save_for_backward({out});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {g[0] * ctx->get_saved_variables()[0]};
  }
};

// Two outputs, 2x and x^2; backward sees both gradients (zeros, or undefined when the context
// says so, for an output not used).
struct TwoOutputs : Function<TwoOutputs> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, bool materialize) {
    ctx->set_materialize_grads(materialize);
    ctx->save_for_backward({x});
    return {x * 2.0, x * x};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Tensor x = ctx->get_saved_variables()[0];
    ctx->saved_data["undefined"] =
        static_cast<int64_t>(!g[0].defined()) + static_cast<int64_t>(!g[1].defined());
    Tensor out = torch::zeros_like(x);
    if (g[0].defined()) out = out + g[0] * 2.0;
    if (g[1].defined()) out = out + g[1] * x * 2.0;
    return {out, Tensor()};
  }
};

// Returns its input unchanged, and a mask it marks as not differentiable.
struct PassAndMask : Function<PassAndMask> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x) {
    Tensor mask = (x > 0.0).to(x.dtype());
    ctx->mark_non_differentiable({mask});
    return {x, mask};
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0]}; }
};

// Adds w into a buffer in place and returns the buffer (mark_dirty).
struct AddInPlace : Function<AddInPlace> {
  static Tensor forward(AutogradContext* ctx, Tensor buffer, const Tensor& w, bool give_back) {
    buffer.add_(w);
    ctx->mark_dirty({buffer});
    return give_back ? buffer : w * 1.0;
  }
  static variable_list backward(AutogradContext*, variable_list g) {
    return {Tensor(), g[0], Tensor()};
  }
};

// Returns its input and marks it not differentiable.
struct PassNonDifferentiable : Function<PassNonDifferentiable> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x) {
    ctx->mark_non_differentiable({x});
    return {x * 2.0, x};
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0] * 2.0}; }
};

// x^2 and x^3 (x > 0); backward from the saved outputs only: 2x = 2 x^3 / x^2, 3x^2.
struct SquareAndCube : Function<SquareAndCube> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x) {
    Tensor sq = x * x, cube = sq * x;
    ctx->save_for_backward({sq, cube});
    return {sq, cube};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    return {g[0] * saved[1] / saved[0] * 2.0 + g[1] * saved[0] * 3.0};
  }
};

// x and 3x.
struct OneAndThree : Function<OneAndThree> {
  static variable_list forward(AutogradContext*, const Tensor& x) { return {x * 1.0, x * 3.0}; }
  static variable_list backward(AutogradContext*, variable_list g) {
    return {g[0] + g[1] * 3.0};
  }
};

// The identity, whose backward throws.
struct ThrowsInBackward : Function<ThrowsInBackward> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x * 1.0; }
  static variable_list backward(AutogradContext*, variable_list) {
    throw std::runtime_error("backward failed on purpose");
  }
};

// c times the sum of a list of tensors: one gradient per tensor of the list.
struct ScaledSum : Function<ScaledSum> {
  static Tensor forward(AutogradContext* ctx, const std::vector<Tensor>& xs, double c) {
    ctx->saved_data["c"] = c;
    Tensor total = torch::zeros_like(xs[0]);
    for (const Tensor& x : xs) total = total + x;
    return total * c;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Tensor each = g[0] * ctx->saved_data["c"].toDouble();
    return {each, each, Tensor()};
  }
};

// Records which tensor arguments need a gradient, and returns one only for those.
struct Weighted : Function<Weighted> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
    ctx->saved_data["needs"] = std::vector<int64_t>{ctx->needs_input_grad(0),
                                                    ctx->needs_input_grad(1)};
    ctx->save_for_backward({a, b});
    return a * b;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    return {ctx->needs_input_grad(0) ? g[0] * saved[1] : Tensor(),
            ctx->needs_input_grad(1) ? g[0] * saved[0] : Tensor()};
  }
};

// Backward functions that break the rules.
struct TooFewGradients : Function<TooFewGradients> {
  static Tensor forward(AutogradContext*, const Tensor& a, const Tensor& b) { return a * b; }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0]}; }
};
struct GradientForANumber : Function<GradientForANumber> {
  static Tensor forward(AutogradContext*, const Tensor& a, double c) { return a * c; }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], g[0]}; }
};
struct WrongShape : Function<WrongShape> {
  static Tensor forward(AutogradContext*, const Tensor& a) { return a.sum(); }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0]}; }
};

}  // namespace custom

TEST_CASE("a custom function gives the built-in op's values and gradients", "[autograd]") {
  torch::manual_seed(3);
  for (bool with_bias : {true, false}) {
    INFO("bias " << with_bias);
    Tensor x = torch::randn({5, 3}, torch::dtype(torch::kFloat64).requires_grad(true));
    Tensor w = torch::randn({4, 3}, torch::dtype(torch::kFloat64).requires_grad(true));
    Tensor b = torch::randn({4}, torch::dtype(torch::kFloat64).requires_grad(true));
    Tensor y = with_bias ? custom::LinearFunction::apply(x, w, b)
                         : custom::LinearFunction::apply(x, w);
    REQUIRE(y.grad_fn());
    CHECK(y.grad_fn()->name().find("LinearFunction") != std::string::npos);
    Tensor gy = torch::randn({5, 4}, torch::kFloat64);
    y.backward(gy);
    Tensor x2 = x.detach().requires_grad_(), w2 = w.detach().requires_grad_(),
           b2 = b.detach().requires_grad_();
    Tensor y2 = torch::linear(x2, w2, with_bias ? b2 : Tensor());
    y2.backward(gy);
    require_close(y, y2, 1e-12, 1e-12, "values");
    require_close(x.grad(), x2.grad(), 1e-12, 1e-12, "input gradient");
    require_close(w.grad(), w2.grad(), 1e-12, 1e-12, "weight gradient");
    if (with_bias) {
      require_close(b.grad(), b2.grad(), 1e-12, 1e-12, "bias gradient");
    } else {
      CHECK_FALSE(b.grad().defined());
    }
  }
}

TEST_CASE("a custom function keeps numbers in saved_data and gives them no gradient",
          "[autograd]") {
  Tensor x = torch::from_vector<double>({1.0, -2.0}).requires_grad_();
  Tensor y = custom::MulConstant::apply(x, 5.5);
  CHECK(y.to_vector<double>() == std::vector<double>{5.5, -11.0});
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5.5, 5.5});

  // What IValue holds, and what it refuses.
  torch::IValue v = 2.5, n = int64_t{7}, s = "name", l = std::vector<int64_t>{1, 2};
  CHECK(v.toDouble() == 2.5);
  CHECK(n.toInt() == 7);
  CHECK(s.toStringRef() == "name");
  CHECK(l.toIntVector() == std::vector<int64_t>{1, 2});
  CHECK(torch::IValue().isNone());
  CHECK(error_of([&] { n.toDouble(); }).find("holds int") != std::string::npos);
}

TEST_CASE("a custom function's saved output and its second derivative", "[autograd]") {
  Tensor x = torch::from_vector<double>({0.5, -1.0, 2.0}).requires_grad_();
  Tensor y = custom::Exp::apply(x);
  // dy/dx = exp(x); with create_graph, d/dx of that is exp(x) again (through the saved output).
  Tensor g = grad({y}, {x}, {torch::ones_like(y)}, {}, /*create_graph=*/true)[0];
  require_close(g, torch::exp(x.detach()), 1e-12, 0, "first derivative");
  REQUIRE(g.requires_grad());
  Tensor g2 = grad({g.sum()}, {x})[0];
  require_close(g2, torch::exp(x.detach()), 1e-12, 0, "second derivative");
  CHECK_FALSE(x.grad().defined());  // grad() leaves .grad alone
}

TEST_CASE("a custom function with two outputs gets both gradients", "[autograd]") {
  Tensor x = torch::from_vector<double>({1.0, 3.0}).requires_grad_();
  auto outs = custom::TwoOutputs::apply(x, true);
  REQUIRE(outs.size() == 2);
  (outs[0].sum() + outs[1].sum() * 3.0).backward();
  // 2 + 3 * 2x
  CHECK(x.grad().to_vector<double>() == std::vector<double>{8.0, 20.0});

  // One output used: the other's gradient is zeros (materialized) ...
  x.set_grad(Tensor());
  custom::TwoOutputs::apply(x, true)[1].sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2.0, 6.0});
  // ... or undefined when the function asked for that; either way the same gradient.
  x.set_grad(Tensor());
  custom::TwoOutputs::apply(x, false)[1].sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2.0, 6.0});
}

TEST_CASE("a custom function's outputs: inputs handed back, non-differentiable, dirty",
          "[autograd]") {
  Tensor x = torch::from_vector<double>({-1.0, 2.0}).requires_grad_();
  auto outs = custom::PassAndMask::apply(x);
  CHECK_FALSE(outs[0].is_same(x));  // a new handle: x stays a leaf
  CHECK(x.is_leaf());
  CHECK(outs[0].requires_grad());
  CHECK_FALSE(outs[1].requires_grad());
  CHECK(outs[1].to_vector<double>() == std::vector<double>{0.0, 1.0});
  (outs[0] * 3.0).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3.0, 3.0});

  // An input handed back and marked non-differentiable: no history.
  auto nd = custom::PassNonDifferentiable::apply(x);
  CHECK(nd[0].requires_grad());
  CHECK_FALSE(nd[1].requires_grad());

  // In place into a buffer: the buffer keeps its identity and takes the function's history.
  Tensor buffer = torch::zeros({2}, torch::kFloat64);
  Tensor w = torch::from_vector<double>({1.0, 2.0}).requires_grad_();
  Tensor z = custom::AddInPlace::apply(buffer, w, true);
  CHECK(z.is_same(buffer));
  CHECK(buffer.to_vector<double>() == std::vector<double>{1.0, 2.0});
  CHECK(buffer.requires_grad());
  (buffer * buffer).sum().backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2.0, 4.0});
  // What cannot be told apart without version counters is refused: a tensor that requires
  // grad (a leaf, or one with history), and a dirty input that is not handed back.
  CHECK(error_of([&] { custom::AddInPlace::apply(x, w, true); }).find("requires grad") !=
        std::string::npos);
  Tensor with_history = x * 1.0;
  CHECK(error_of([&] { custom::AddInPlace::apply(with_history, w, true); })
            .find("requires grad") != std::string::npos);
  Tensor other = torch::zeros({2}, torch::kFloat64);
  CHECK(error_of([&] { custom::AddInPlace::apply(other, w, false); })
            .find("must be returned") != std::string::npos);
}

TEST_CASE("a custom function's saved outputs keep their history when the output is dropped",
          "[autograd]") {
  Tensor x = torch::from_vector<double>({0.5, 2.0}).requires_grad_();
  Tensor sq = custom::SquareAndCube::apply(x)[0];  // the cube is dropped at once
  Tensor g = grad({sq.sum()}, {x}, {}, {}, /*create_graph=*/true)[0];
  CHECK(g.to_vector<double>() == std::vector<double>{1.0, 4.0});  // 2x
  Tensor h = grad({g.sum()}, {x})[0];
  require_close(h, torch::full({2}, 2.0, torch::kFloat64), 1e-12, 0);
}

TEST_CASE("a failed backward leaves no gradient behind in a function with two outputs",
          "[autograd]") {
  Tensor x = torch::from_vector<double>({1.0, 1.0}).requires_grad_();
  auto o = custom::OneAndThree::apply(x);
  // o[1]'s gradient reaches the function before the other branch throws.
  Tensor loss = custom::ThrowsInBackward::apply(o[0] * 1.0 * 1.0 * 1.0).sum() + o[1].sum();
  CHECK_THROWS(loss.backward({}, /*retain_graph=*/true));
  CHECK(grad({o[1].sum()}, {x})[0].to_vector<double>() == std::vector<double>{3.0, 3.0});
}

TEST_CASE("a list of tensors is that many arguments of a custom function", "[autograd]") {
  Tensor a = torch::from_vector<double>({1.0, 2.0}).requires_grad_();
  Tensor b = torch::from_vector<double>({3.0, 4.0}).requires_grad_();
  Tensor y = custom::ScaledSum::apply(std::vector<Tensor>{a, b}, 2.0);
  CHECK(y.to_vector<double>() == std::vector<double>{8.0, 12.0});
  y.sum().backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{2.0, 2.0});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{2.0, 2.0});
}

TEST_CASE("in place with an operand that requires grad records history, as torch's", "[autograd]") {
  Tensor w = torch::ones({2}, torch::requires_grad());
  Tensor acc = torch::zeros({2});
  acc += w * 2.0;  // acc joins the graph (torch: AddBackward0)
  CHECK(acc.requires_grad());
  CHECK(acc.to_vector<float>() == std::vector<float>{2.0f, 2.0f});
  acc.sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{2.0f, 2.0f});
  Tensor plain = torch::zeros({2});
  plain.copy_(torch::mul(w, 3.0));  // plain joins the graph too (torch: CopyBackwards)
  CHECK(plain.requires_grad());
  w.grad().zero_();
  torch::mul(plain, plain).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{18.0f, 18.0f});
  Tensor other = torch::zeros({2});
  torch::NoGradGuard no_grad;
  other += w;  // no history wanted: fine
  CHECK(other.to_vector<float>() == std::vector<float>{1.0f, 1.0f});
  CHECK_FALSE(other.requires_grad());
}

TEST_CASE("in-place ops on results in the graph are recorded, as torch's (out += identity)",
          "[autograd]") {
  // A residual block written libtorch's way against the same block out of place: same values,
  // same gradients.
  auto block = [](const Tensor& x, const Tensor& w, bool in_place) {
    Tensor out = torch::mul(x, w);
    if (in_place) {
      out += x;
      out.relu_();
      out.mul_(2.0);
      out.sub_(w, 0.5);
      out.clamp_(-1.0, 3.0);
      out.div_(x);
    } else {
      out = torch::div(
          torch::clamp(torch::sub(torch::mul(torch::relu(torch::add(out, x)), 2.0), w, 0.5), -1.0,
                       3.0),
          x);
    }
    return out;
  };
  std::vector<Tensor> grads[2], values;
  for (bool in_place : {false, true}) {
    Tensor x = torch::from_vector<double>({-2, -0.5, 0.25, 1, 3}).requires_grad_();
    Tensor w = torch::from_vector<double>({0.5, 2, -1, 1.5, 0.75}).requires_grad_();
    Tensor y = block(x, w, in_place);
    values.push_back(y.detach());
    torch::mul(y, y).sum().backward();
    grads[in_place] = {x.grad(), w.grad()};
  }
  CHECK(torch::equal(values[0], values[1]));
  CHECK(torch::allclose(grads[0][0], grads[1][0], 1e-12, 1e-12));
  CHECK(torch::allclose(grads[0][1], grads[1][1], 1e-12, 1e-12));
  {  // retain_grad follows the tensor to its new history (torch's .grad: the new value's)
    Tensor x = torch::from_vector<float>({1, -2}).requires_grad_();
    Tensor y = torch::mul(x, 3.0);
    y.retain_grad();
    y.relu_();
    y.sum().backward();
    CHECK(y.grad().to_vector<float>() == std::vector<float>{1, 1});
    CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 0});
  }
  // Refused as torch refuses: a leaf that requires grad or a view of one, and a backward that
  // needs the values an in-place op overwrote (exp saves its result).
  Tensor x = torch::ones({3}, torch::requires_grad());
  CHECK(error_of([&] { x.add_(1); }).find("leaf tensor that requires grad") != std::string::npos);
  Tensor e = torch::exp(x);
  e.add_(1);
  CHECK(error_of([&] { e.sum().backward(); }).find("in place") != std::string::npos);
  CHECK(error_of([&] { x.slice(0, 0, 1).add_(1); }).find("view of a leaf") != std::string::npos);
  CHECK(x.to_vector<float>() == std::vector<float>(3, 1.0f));
}

TEST_CASE("the index ops, fills and copies in place are recorded as their out-of-place forms",
          "[autograd]") {
  const Tensor index = torch::from_vector<int64_t>({2, 0, 2}, {1, 3});
  auto program = [&](const Tensor& x, const Tensor& s, bool in_place) {
    Tensor y = torch::mul(x, 1.5);
    if (in_place) {
      y.scatter_(0, index, s.slice(0, 0, 1));
      y.scatter_add_(1, index.view({3, 1}), s.t());
      y.index_add_(0, torch::from_vector<int64_t>({1}), s.slice(0, 1, 2), -2.0);
      y.lerp_(s.slice(0, 0, 1).expand({3, 3}), 0.25);
      y.addcmul_(s.slice(0, 0, 1), y.detach().clone(), 0.5);
      y.masked_fill_(torch::gt(x, 1.0), 0.0);
      y.select(1, 2).fill_(3.0);
      return y;
    }
    y = torch::scatter(y, 0, index, s.slice(0, 0, 1));
    y = torch::scatter_add(y, 1, index.view({3, 1}), s.t());
    y = torch::index_add(y, 0, torch::from_vector<int64_t>({1}), s.slice(0, 1, 2), -2.0);
    y = torch::lerp(y, s.slice(0, 0, 1).expand({3, 3}), 0.25);
    y = torch::add(y, torch::mul(s.slice(0, 0, 1), y.detach().clone()), 0.5);
    y = y.masked_fill(torch::gt(x, 1.0), 0.0);
    return torch::cat({y.slice(1, 0, 2), torch::full({3, 1}, 3.0, torch::kFloat64)}, 1);
  };
  std::vector<Tensor> got[2];
  for (bool in_place : {false, true}) {
    Tensor x = torch::from_vector<double>({0.5, -1, 2, 1.25, 0.75, -0.5, 3, 0.1, -2}, {3, 3})
                   .requires_grad_();
    Tensor s = torch::from_vector<double>({1, 2, 3, -1, -2, -3}, {2, 3}).requires_grad_();
    Tensor y = program(x, s, in_place);
    torch::mul(y, torch::arange(9, torch::kFloat64).view({3, 3})).sum().backward();
    got[in_place] = {y.detach(), x.grad(), s.grad()};
  }
  for (size_t k = 0; k < 3; ++k) CHECK(torch::allclose(got[0][k], got[1][k], 1e-12, 1e-12));
}

TEST_CASE("in-place ops on views in the graph rewrite their base's history, as torch's CopySlices",
          "[autograd]") {
  using torch::indexing::Slice;
  // Values and gradients printed by torch 1.13 for the same programs (f64).
  auto values = [](const Tensor& t) { return t.detach().reshape({-1}).to_vector<double>(); };
  auto close = [](const std::vector<double>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
  };
  {  // views, views of views, a transposed view, copy_ into a view, a view made before
    Tensor x = torch::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
    Tensor w = torch::from_vector<double>({0.5, -1, 2}).requires_grad_();
    Tensor y = torch::mul(x, 2.0);
    Tensor v = y[1];  // its values change below, and so must its gradient
    y[0].mul_(w);
    y.index({Slice(), Slice(1)}).add_(1).mul_(-2);
    y.index({1, Slice(0, 2)}) = torch::mul(w.slice(0, 0, 2), 3.0);
    y.t()[2].sub_(w.slice(0, 0, 2));
    y.select(0, 1).narrow(0, 1, 2).mul_(w.slice(0, 1, 3));
    Tensor s =
        torch::add(torch::mul(y, y).sum(), torch::mul(v, torch::arange(3, torch::kFloat64)).sum());
    s.backward();
    close(values(y), {1.0, 6.0, -26.5, 1.5, 3.0, -50.0});
    close(values(v), {1.5, 3.0, -50.0});
    close(values(x.grad()), {2.0, 48.0, 424.0, 0.0, 0.0, 784.0});
    close(values(w.grad()), {66.0, 58.0, 3086.0});
  }
  {  // a buffer that requires no grad filled in a loop joins the graph (h[t] = ...)
    Tensor W = torch::from_vector<double>({0.3, -0.7}).requires_grad_();
    Tensor h = torch::zeros({3, 2}, torch::kFloat64);
    for (int64_t t = 0; t < 3; ++t)
      h[t] = torch::tanh(t > 0 ? torch::add(torch::mul(W, double(t + 1)), h[t - 1])
                               : torch::mul(W, 1.0));
    CHECK(h.requires_grad());
    torch::pow(h, 2).sum().backward();
    close(values(h), {0.2913126124515909, -0.6043677771171635, 0.7120414507919569,
                      -0.9643348712797634, 0.9234611376492495, -0.9956505229899426});
    close(values(W.grad()), {3.786283392884337, -1.1782804881114761});
  }
  {  // masked_fill_ on attention scores, zero_ and fill_ on views
    Tensor q = torch::from_vector<double>({0.1, 0.2, 0.3, -0.4, 0.5, 0.6}, {3, 2}).requires_grad_();
    Tensor sc = torch::matmul(q, q.t());
    Tensor mask = torch::from_vector<bool>(
        {false, true, true, false, false, true, false, false, false}, {3, 3});
    sc.masked_fill_(mask, -INFINITY);
    Tensor p = torch::mul(torch::softmax(sc, -1), 2.0);
    p[2].zero_();
    p.index({1, Slice(0, 1)}).fill_(0.25);
    torch::mul(p, torch::arange(1, 10, torch::kFloat64).view({3, 3})).sum().backward();
    close(values(p), {2.0, 0.0, 0.0, 0.25, 1.148885033623318, 0.0, 0.0, 0.0, 0.0});
    close(values(q.grad()), {-0.7333749350722378, 0.9778332467629838, 1.222291558453729,
                             -2.444583116907459, 0.0, 0.0});
  }
  {  // gradients of gradients through CopySlices
    Tensor a = torch::from_vector<double>({1, 2, 3}).requires_grad_();
    Tensor z = torch::mul(a, a);
    z.slice(0, 1, 3).mul_(a.slice(0, 0, 2));
    Tensor g = torch::autograd::grad({torch::pow(z, 2).sum()}, {a}, {}, true, true)[0];
    g.sum().backward();
    close(values(g), {36.0, 356.0, 432.0});
    close(values(a.grad()), {108.0, 706.0, 864.0});
  }
  {  // a base laid out channels-last (not row-major): the same gradients as a row-major one
    auto run = [&](torch::MemoryFormat format) {
      Tensor x = torch::arange(24, torch::kFloat64).view({1, 4, 2, 3}).requires_grad_();
      Tensor w = torch::from_vector<double>({0.5, -1, 2}).requires_grad_();
      Tensor y = torch::mul(x, 2.0).contiguous(format);
      REQUIRE(y.is_contiguous() == (format == torch::MemoryFormat::Contiguous));
      y[0][1].narrow(1, 0, 3).mul_(w);
      y.select(1, 3).select(1, 1).add_(w);
      torch::mul(torch::pow(y, 2), torch::arange(24, torch::kFloat64).view({1, 4, 2, 3}))
          .sum()
          .backward();
      return std::make_pair(values(x.grad()), values(w.grad()));
    };
    auto plain = run(torch::MemoryFormat::Contiguous);
    auto nhwc = run(torch::MemoryFormat::ChannelsLast);
    close(nhwc.first, plain.first);
    close(nhwc.second, plain.second);
  }
  {  // an in-place op on a base: a view made before takes the new history (it was stale)
    Tensor x = torch::from_vector<double>({1, 2}).requires_grad_();
    Tensor b = torch::mul(x, 2.0);
    Tensor first = b[0];
    b.mul_(3.0);
    first.backward();
    CHECK(x.grad().to_vector<double>() == std::vector<double>{6.0, 0.0});
  }
  {  // retain_grad on a view follows it; what an in-place op overwrote still refuses backward
    Tensor x = torch::from_vector<double>({1, 2, 3}).requires_grad_();
    Tensor y = torch::mul(x, 1.0);
    Tensor head = y.slice(0, 0, 2);
    head.retain_grad();
    head.mul_(5.0);
    torch::mul(head, torch::arange(1, 3, torch::kFloat64)).sum().backward({}, true);
    CHECK(head.grad().to_vector<double>() == std::vector<double>{1.0, 2.0});
    CHECK(x.grad().to_vector<double>() == std::vector<double>{5.0, 10.0, 0.0});
    x.grad().zero_();
    torch::mul(y, torch::arange(1, 4, torch::kFloat64)).sum().backward();  // not through head
    CHECK(x.grad().to_vector<double>() == std::vector<double>{5.0, 10.0, 3.0});
    Tensor e = torch::exp(torch::mul(x, 1.0));
    e.slice(0, 1, 3).add_(1.0);
    CHECK(error_of([&] { e.sum().backward(); }).find("in place") != std::string::npos);
  }
}

TEST_CASE("needs_input_grad and no history without grad", "[autograd]") {
  Tensor a = torch::from_vector<double>({2.0}).requires_grad_();
  Tensor b = torch::from_vector<double>({3.0});
  Tensor y = custom::Weighted::apply(a, b);
  y.sum().backward();
  CHECK(a.grad().item<double>() == 3.0);
  CHECK_FALSE(b.grad().defined());
  {
    torch::NoGradGuard no_grad;
    Tensor z = custom::Weighted::apply(a, b);
    CHECK_FALSE(z.requires_grad());
    CHECK_FALSE(z.grad_fn());
  }
  Tensor z = custom::Weighted::apply(b, b);
  CHECK_FALSE(z.requires_grad());
}

TEST_CASE("a custom backward that breaks the rules is named in the error", "[autograd]") {
  Tensor a = torch::ones({2}, torch::requires_grad());
  Tensor b = torch::ones({2}, torch::requires_grad());
  CHECK(error_of([&] { custom::TooFewGradients::apply(a, b).sum().backward(); })
            .find("incorrect number of gradients (expected 2, got 1)") != std::string::npos);
  CHECK(error_of([&] { custom::GradientForANumber::apply(a, 2.0).sum().backward(); })
            .find("argument 1 of forward is not a tensor") != std::string::npos);
  CHECK(error_of([&] { custom::WrongShape::apply(a).backward(); })
            .find("gradient of shape () for argument 0 of shape (2,)") != std::string::npos);
  // The saved tensors are gone after a backward without retain_graph.
  Tensor x = torch::from_vector<double>({1.0}).requires_grad_();
  Tensor y = custom::Exp::apply(x);
  y.backward();
  CHECK(error_of([&] { y.backward(); }).find("retain_graph") != std::string::npos);
  Tensor y2 = custom::Exp::apply(x);
  y2.backward({}, /*retain_graph=*/true);
  y2.backward();
  CHECK(x.grad().item<double>() == Approx(3 * std::exp(1.0)));
}

TEST_CASE("autograd::grad returns gradients and touches no .grad", "[autograd]") {
  Tensor x = torch::from_vector<double>({1.0, 2.0}).requires_grad_();
  Tensor y = torch::from_vector<double>({3.0, -1.0}).requires_grad_();
  Tensor unused = torch::ones({1}, torch::dtype(torch::kFloat64).requires_grad(true));
  int hooks = 0;
  x.register_grad_ready_hook([&](const Tensor&) { ++hooks; });
  Tensor z = x * 2.0;
  Tensor out = (z * z * y).sum();  // 4 x^2 y
  auto g = grad({out}, {x, y, z}, {}, /*retain_graph=*/true);
  CHECK(g[0].to_vector<double>() == std::vector<double>{24.0, -16.0});  // 8 x y
  CHECK(g[1].to_vector<double>() == std::vector<double>{4.0, 16.0});    // 4 x^2
  CHECK(g[2].to_vector<double>() == std::vector<double>{12.0, -8.0});   // 2 z y
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(y.grad().defined());
  CHECK(hooks == 0);

  CHECK(error_of([&] { grad({out}, {unused}, {}, true); }).find("allow_unused") !=
        std::string::npos);
  auto g2 = grad({out}, {x, unused}, {}, true, false, /*allow_unused=*/true);
  CHECK(g2[0].defined());
  CHECK_FALSE(g2[1].defined());
  // Non-scalar outputs take grad_outputs.
  Tensor v = x * y;
  auto g3 = grad({v}, {x}, {torch::from_vector<double>({1.0, 10.0})});
  CHECK(g3[0].to_vector<double>() == std::vector<double>{3.0, -10.0});
  CHECK(error_of([&] { grad({v}, {x}, {torch::ones_like(v)}); }).find("retain_graph") !=
        std::string::npos);
  CHECK(error_of([&] { grad({x * y}, {x}); }).find("only for scalar") != std::string::npos);
}

TEST_CASE("second derivatives of the elementwise ops against closed forms", "[autograd]") {
  Tensor x = torch::from_vector<double>({0.3, -0.7, 1.4}).requires_grad_();
  Tensor xd = x.detach();
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    std::function<Tensor(const Tensor&)> d2;
  };
  std::vector<Case> cases = {
      {"pow 3", [](const Tensor& t) { return torch::pow(t, 3.0); },
       [](const Tensor& t) { return t * 6.0; }},
      {"tanh", [](const Tensor& t) { return torch::tanh(t); },
       [](const Tensor& t) {
         Tensor y = torch::tanh(t);
         return y * (y * y - 1.0) * 2.0;
       }},
      {"sigmoid", [](const Tensor& t) { return torch::sigmoid(t); },
       [](const Tensor& t) {
         Tensor s = torch::sigmoid(t);
         return s * (1.0 - s) * (1.0 - s * 2.0);
       }},
      {"exp", [](const Tensor& t) { return torch::exp(t); },
       [](const Tensor& t) { return torch::exp(t); }},
      {"log of a square", [](const Tensor& t) { return torch::log(t * t); },
       [](const Tensor& t) { return -2.0 / (t * t); }},
      {"sqrt of 1 + x^2", [](const Tensor& t) { return torch::sqrt(t * t + 1.0); },
       [](const Tensor& t) { return torch::pow(t * t + 1.0, -1.5); }},
      {"softmax", [](const Tensor& t) { return torch::softmax(t, 0).select(0, 0) * 3.0; },
       nullptr},
      {"relu times x", [](const Tensor& t) { return torch::relu(t) * t; },
       [](const Tensor& t) { return (t > 0.0).to(DType::f64) * 2.0; }},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    x.set_grad(Tensor());
    Tensor y = c.f(x).sum();
    Tensor g = grad({y}, {x}, {}, {}, /*create_graph=*/true)[0];
    Tensor h = grad({g.sum()}, {x})[0];
    if (c.d2) {
      require_close(h, c.d2(xd), 1e-10, 1e-12);
    } else {  // the sum of the first derivative, by differences
      Tensor num = numeric_gradient([&] {
        Tensor xi = x.detach().requires_grad_();
        return grad({c.f(xi).sum()}, {xi})[0].sum().item<double>();
      }, x);
      require_close(h, num, 1e-5, 1e-7);
    }
  }
}

TEST_CASE("a gradient penalty trains through grad with create_graph", "[autograd]") {
  // libtorch's example: the gradient of a linear layer's output with respect to its input,
  // its row norms pulled towards 1, added to the loss; the combined loss's gradients against
  // finite differences.
  torch::manual_seed(11);
  auto model = std::make_shared<torch::nn::Linear>(4, 3);
  model->to(torch::kFloat64);
  Tensor input = torch::randn({3, 4}, torch::kFloat64).requires_grad_(true);
  Tensor target = torch::randn({3, 3}, torch::kFloat64);
  auto combined = [&] {
    Tensor output = torch::tanh((*model)(input));
    Tensor loss = torch::nn::MSELoss()(output, target);
    Tensor grad_output = torch::ones_like(output);
    Tensor gradient = grad({output}, {input}, {grad_output}, {}, /*create_graph=*/true)[0];
    Tensor gradient_penalty = torch::pow((gradient.norm(2, /*dim=*/1) - 1), 2).mean();
    return loss + gradient_penalty;
  };
  combined().backward();
  Tensor weight = model->weight;
  Tensor analytic_w = weight.grad(), analytic_x = input.grad();
  REQUIRE(analytic_w.defined());
  REQUIRE(analytic_x.defined());
  torch::NoGradGuard no_grad;  // perturbing the leaves in place, then a full forward for each
  auto value = [&] {
    torch::AutoGradMode enable(true);
    return combined().item<double>();
  };
  require_close(analytic_w, numeric_gradient(value, weight), 1e-5, 1e-7, "weight");
  require_close(analytic_x, numeric_gradient(value, input), 1e-5, 1e-7, "input");
}

TEST_CASE("backward with create_graph leaves differentiable gradients in .grad",
          "[autograd]") {
  // f = sum(x^2 y): .grad of x is 2 x y with history; the gradient of its sum: d/dx = 2 y,
  // d/dy = 2 x (a Hessian-vector product with the vector of ones).
  Tensor x = torch::from_vector<double>({1.0, 2.0}).requires_grad_();
  Tensor y = torch::from_vector<double>({-3.0, 0.5}).requires_grad_();
  (x * x * y).sum().backward({}, {}, /*create_graph=*/true);
  Tensor gx = x.grad();
  REQUIRE(gx.requires_grad());
  auto h = grad({gx.sum()}, {x, y});
  CHECK(h[0].to_vector<double>() == std::vector<double>{-6.0, 1.0});
  CHECK(h[1].to_vector<double>() == std::vector<double>{2.0, 4.0});
  // .grad holds a graph that holds the leaves (a cycle, as in torch): cleared, nothing leaks.
  x.set_grad(Tensor());
  y.set_grad(Tensor());
}

TEST_CASE("create_graph through an op whose backward is not differentiable says so",
          "[autograd]") {
  // sync_batch_norm's (its statistics are the group's; in a group of one the allreduce is the
  // identity).
  Tensor x = torch::randn({2, 3, 4, 4}, torch::requires_grad());
  const tandem::StatsAllreduce identity = [](const Tensor&) {};
  Tensor y = tandem::sync_batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5,
                                     Tensor(), false, identity).pow(2).sum();
  std::string e = error_of([&] { grad({y}, {x}, {}, /*retain_graph=*/true, true); });
  CHECK(e.find("create_graph") != std::string::npos);
  CHECK(e.find("sync_batch_norm") != std::string::npos);
  // Without create_graph the same graph works.
  CHECK(grad({y}, {x})[0].sizes() == x.sizes());
}

TEST_CASE("a gradient penalty through convolutions (WGAN-GP)", "[autograd]") {
  // A small critic: conv, leaky_relu, conv, mean per sample. The penalty pulls each sample's
  // input-gradient norm towards 1; the critic's weights and the input get the combined loss's
  // gradient, against finite differences, over strides, padding, dilation and bias.
  struct Case {
    int64_t stride, padding, dilation;
    bool bias;
  };
  for (Case c : {Case{1, 0, 1, true}, Case{2, 1, 1, false}, Case{1, 2, 2, true},
                 Case{2, 0, 1, true}}) {
    INFO("stride " << c.stride << ", padding " << c.padding << ", dilation " << c.dilation);
    torch::manual_seed(5);
    auto opts = torch::dtype(torch::kFloat64).requires_grad(true);
    Tensor x = torch::randn({2, 2, 7, 6}, opts);
    Tensor w1 = torch::randn({3, 2, 3, 3}, opts), w2 = torch::randn({1, 3, 2, 2}, opts);
    Tensor b1 = c.bias ? torch::randn({3}, opts) : Tensor();
    auto combined = [&] {
      Tensor h = torch::leaky_relu(
          torch::conv2d(x, w1, b1, c.stride, c.padding, c.dilation), 0.2);
      Tensor critic = torch::conv2d(h, w2).mean({1, 2, 3});
      Tensor g = grad({critic.sum()}, {x}, {}, {}, /*create_graph=*/true)[0];
      Tensor penalty = torch::pow(g.reshape({2, -1}).norm(2, 1) - 1.0, 2).mean();
      return critic.mean() + penalty * 10.0;
    };
    combined().backward();
    std::vector<Tensor> params = {x, w1, w2};
    if (c.bias) params.push_back(b1);
    std::vector<Tensor> analytic;
    for (const Tensor& p : params) analytic.push_back(p.grad());
    torch::NoGradGuard no_grad;
    auto value = [&] {
      torch::AutoGradMode enable(true);
      return combined().item<double>();
    };
    for (size_t i = 0; i < params.size(); ++i) {
      REQUIRE(analytic[i].defined());
      require_close(analytic[i], numeric_gradient(value, params[i]), 1e-5, 1e-7,
                    "parameter " + std::to_string(i));
    }
  }
}

TEST_CASE("p-norms along dims, all and any", "[autograd][ops]") {
  Tensor t = torch::tensor({{3.0, -4.0, 0.0}, {0.0, 0.0, 0.0}}, torch::kFloat64);
  CHECK(t.norm(2, 1).to_vector<double>() == std::vector<double>{5.0, 0.0});
  CHECK(t.norm(1, 1).to_vector<double>() == std::vector<double>{7.0, 0.0});
  CHECK(t.norm(INFINITY, 1).to_vector<double>() == std::vector<double>{4.0, 0.0});
  CHECK(t.norm(0, 1).to_vector<double>() == std::vector<double>{2.0, 0.0});
  CHECK(t.norm(2, {0, 1}, true).sizes() == tandem::Shape{1, 1});
  CHECK(t.norm(3).item<double>() == Approx(std::cbrt(27.0 + 64.0)));
  // A zero row's gradient is 0, not NaN; the others against finite differences.
  Tensor x = t.clone().requires_grad_();
  x.norm(2, 1).sum().backward();
  require_close(x.grad(), torch::tensor({{0.6, -0.8, 0.0}, {0.0, 0.0, 0.0}}, torch::kFloat64),
                1e-15, 0);
  for (double p : {1.5, 2.0, 3.0}) {
    INFO("p " << p);
    tandem::testing::gradcheck(
        [p](const std::vector<Tensor>& in) { return in[0].norm(p, 0, true); },
        {torch::tensor({{0.5, -1.0}, {2.0, 0.25}, {-0.75, 1.5}}, torch::kFloat64)});
  }
  CHECK(error_of([&] { t.norm(-1.0, 1); }).find("p must be") != std::string::npos);
  CHECK(t.norm(2, {}).item<double>() == 5.0);  // {} is every dim, not dim 0
  // p < 1: zero elements get a zero gradient, not NaN; p = 0 gives zeros.
  Tensor z = torch::tensor({0.0, 1.0, 4.0}, torch::kFloat64).requires_grad_();
  z.norm(0.5).backward();
  require_close(z.grad(), torch::tensor({0.0, 3.0, 1.5}, torch::kFloat64), 1e-12, 0);
  z.set_grad(Tensor());
  z.norm(0).backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0.0, 0.0, 0.0});

  Tensor b = torch::tensor({{1.0, 0.0}, {2.0, 3.0}});
  CHECK_FALSE(b.all().item<bool>());
  CHECK(b.any().item<bool>());
  CHECK(b.all(1).to_vector<bool>() == std::vector<bool>{false, true});
  CHECK(b.any(0, true).sizes() == tandem::Shape{1, 2});
  CHECK(torch::zeros({0}).all().item<bool>());
  CHECK_FALSE(torch::zeros({0}).any().item<bool>());
}

namespace {

// A Hessian-vector product two ways: the gradient of <dL/dp, v> taken through create_graph,
// against central differences of <dL/dp, v> (computed without create_graph) in each p.
void check_hessian_vector(const std::function<Tensor()>& loss,
                          const std::vector<Tensor>& params) {
  tandem::Generator gen(21);
  std::vector<Tensor> v;
  for (const Tensor& p : params) v.push_back(torch::randn(p.sizes(), torch::kFloat64, &gen));
  auto directional = [&](bool create_graph) {
    auto g = grad({loss()}, params, {}, {}, create_graph, /*allow_unused=*/true);
    Tensor h = torch::zeros({}, torch::kFloat64);
    for (size_t k = 0; k < params.size(); ++k)
      if (g[k].defined()) h = h + (g[k] * v[k]).sum();
    return h;
  };
  Tensor h = directional(true);
  REQUIRE(h.requires_grad());
  auto hv = grad({h}, params, {}, {}, false, /*allow_unused=*/true);
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor numeric = numeric_gradient([&] { return directional(false).item<double>(); },
                                      params[k]);
    Tensor analytic = hv[k].defined() ? hv[k] : torch::zeros_like(params[k]);
    require_close(analytic, numeric, 1e-5, 1e-6, "parameter " + std::to_string(k));
  }
}

Tensor leaf(const tandem::Shape& shape, tandem::Generator& gen) {
  return torch::randn(shape, torch::kFloat64, &gen).requires_grad_();
}

}  // namespace

TEST_CASE("Hessian-vector products through the kernel-backed ops", "[autograd]") {
  tandem::Generator gen(17);
  Tensor x = leaf({2, 3, 6, 5}, gen), w = leaf({3}, gen), b = leaf({3}, gen);
  Tensor r = leaf({2, 3, 6, 5}, gen);
  Tensor out_w = torch::randn({2, 3, 6, 5}, torch::kFloat64, &gen);
  auto weighted = [](const Tensor& y) {  // the same weights at every call
    tandem::Generator fixed(3);
    return (torch::tanh(y) * torch::randn(y.sizes(), torch::kFloat64, &fixed)).sum();
  };
  SECTION("max_pool2d") {
    check_hessian_vector([&] { return weighted(torch::max_pool2d(x, 2, 1, 1)); }, {x});
  }
  SECTION("avg_pool2d and adaptive_avg_pool2d") {
    check_hessian_vector([&] {
      return weighted(torch::avg_pool2d(x, 3, 2, 1)) +
             weighted(torch::adaptive_avg_pool2d(x, {2, 3}));
    }, {x});
  }
  SECTION("batch norm in training, with weight and bias") {
    check_hessian_vector([&] {
      return (torch::tanh(torch::batch_norm(x, {}, {}, w, b, true, 0.1, 1e-5)) * out_w).sum();
    }, {x, w, b});
  }
  SECTION("batch norm in evaluation") {
    Tensor rm = torch::randn({3}, torch::kFloat64, &gen);
    Tensor rv = torch::rand({3}, torch::kFloat64, &gen) + 0.5;
    check_hessian_vector([&] {
      return (torch::tanh(torch::batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5)) * out_w).sum();
    }, {x, w, b});
  }
  SECTION("batch norm + residual + relu") {
    check_hessian_vector([&] {
      Tensor y = torch::batch_norm_relu(x, {}, {}, w, b, true, 0.1, 1e-5, r);
      return (y * y * out_w).sum();
    }, {x, w, b, r});
  }
  SECTION("cross entropy and weighted nll_loss") {
    Tensor logits = leaf({5, 4}, gen);
    Tensor target = torch::tensor({0, 3, 1, 1, 2});
    Tensor class_w = torch::tensor({1.0, 2.0, 0.5, 1.5}, torch::kFloat64);
    check_hessian_vector([&] {
      return torch::cross_entropy(logits, target) +
             torch::nll_loss(logits * logits, target, class_w);
    }, {logits});
  }
  SECTION("embedding with a padding row") {
    Tensor table = leaf({5, 3}, gen);
    Tensor idx = torch::tensor({{0, 1, 4}, {1, 1, 3}});
    check_hessian_vector([&] {
      return torch::tanh(torch::embedding(table, idx, /*padding_idx=*/1)).sum();
    }, {table});
  }
  SECTION("gather, index_select, scatter_add, index_add") {
    Tensor a = leaf({3, 4}, gen), src = leaf({3, 2}, gen);
    Tensor idx = torch::tensor({{0, 3}, {2, 2}, {1, 0}});
    Tensor rows = torch::tensor({2, 0, 2});
    check_hessian_vector([&] {
      return torch::tanh(torch::gather(a, 1, idx)).sum() +
             torch::tanh(torch::index_select(a, 0, rows)).sum() +
             torch::tanh(torch::scatter_add(a, 1, idx, src)).sum() +
             torch::tanh(torch::index_add(a, 0, rows, a * 2.0)).sum();
    }, {a, src});
  }
  SECTION("clamp and binary cross entropy") {
    Tensor p = leaf({6}, gen), q = leaf({6}, gen);
    check_hessian_vector([&] {
      return torch::tanh(torch::clamp(p * 2.0, -1.0, 1.0)).sum() +
             torch::binary_cross_entropy(torch::sigmoid(p), torch::sigmoid(q));
    }, {p, q});
  }
  SECTION("conv_transpose2d") {
    Tensor in = leaf({2, 3, 4, 3}, gen), k = leaf({3, 2, 3, 3}, gen);
    check_hessian_vector([&] {
      return weighted(torch::conv_transpose2d(in, k, Tensor(), 2, 1, 1));
    }, {in, k});
  }
  // Recomputed as plain convolutions on their channel slices (nn_ops.cpp, grouped_composite).
  SECTION("grouped and depthwise conv2d, grouped conv_transpose2d") {
    Tensor in = leaf({2, 4, 5, 5}, gen), k = leaf({6, 2, 3, 3}, gen), bias = leaf({6}, gen);
    Tensor dw = leaf({4, 1, 3, 3}, gen), kt = leaf({4, 3, 3, 3}, gen);
    check_hessian_vector([&] {
      return weighted(torch::conv2d(in, k, bias, 2, 1, 1, /*groups=*/2)) +
             weighted(torch::conv2d(in, dw, Tensor(), 1, 1, 2, /*groups=*/4));
    }, {in, k, bias, dw});
    check_hessian_vector([&] {
      return weighted(torch::conv_transpose2d(in, kt, Tensor(), 2, 1, 1, /*groups=*/2));
    }, {in, kt});
  }
  SECTION("gelu, exact and tanh") {
    Tensor p = leaf({2, 3, 6, 5}, gen);
    check_hessian_vector([&] {
      return weighted(torch::gelu(p * 1.5)) + weighted(torch::gelu(p, "tanh") * 0.5);
    }, {p});
  }
}

TEST_CASE("a custom function's saved tensors changed in place refuse backward", "[autograd]") {
  Tensor x = torch::ones({2, 3});
  Tensor w = torch::ones({4, 3}, torch::requires_grad());
  Tensor y = custom::LinearFunction::apply(x, w).sum();
  {
    torch::NoGradGuard no_grad;
    x.add_(1.0);  // saved by save_for_backward
  }
  const std::string error = error_of([&] { y.backward(); });
  CHECK(error.find("LinearFunction saved") != std::string::npos);
  CHECK(error.find("changed in place") != std::string::npos);
}
