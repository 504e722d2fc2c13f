// Every differentiable op against central finite differences in f64.
#include <limits>

#include "../util.hpp"

using namespace tandem;
using tandem::testing::gradcheck;
using V = const std::vector<Tensor>&;

namespace {
Generator gen(7);
Tensor r(const Shape& s) { return randn(s, DType::f64, &gen); }
Tensor pos(const Shape& s) { return add(rand(s, DType::f64, &gen), 0.5); }
constexpr double kInf = std::numeric_limits<double>::infinity();
// Values kept away from the kinks of abs/relu/clamp/max so differences stay smooth.
Tensor away_from_zero(const Shape& s) {
  Tensor x = r(s);
  return add(x, mul(sign(x), 0.1));
}
// Distinct values 0.1 apart in a scrambled order (7919 is prime, so i -> 7919 i mod n permutes).
Tensor distinct(const Shape& s) {
  int64_t n = numel_of(s);
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * 7919) % n) * 0.1;
  return from_vector(v, s);
}
// The gradient of sum(f(x)^3) under create_graph, itself checked against finite differences:
// f's backward, written with recorded ops, differentiated again.
void second_derivatives(const std::vector<std::function<Tensor(const Tensor&)>>& fs,
                        const Shape& shape) {
  for (const auto& f : fs)
    gradcheck(
        [&f](V x) {
          AutoGradMode on(true);  // (the finite differences run under NoGradGuard)
          Tensor v = f(x[0]);
          return autograd::grad({sum(v * v * v)}, {x[0]}, {}, {}, /*create_graph=*/true)[0];
        },
        {r(shape)});
}
}  // namespace

TEST_CASE("gradcheck: arithmetic with broadcasting", "[gradcheck]") {
  gradcheck([](V x) { return add(x[0], x[1], 0.7); }, {r({2, 3}), r({3})});
  gradcheck([](V x) { return sub(x[0], x[1]); }, {r({2, 1, 3}), r({4, 1})});
  gradcheck([](V x) { return mul(x[0], x[1]); }, {r({2, 3}), r({2, 1})});
  gradcheck([](V x) { return div(x[0], x[1]); }, {r({3, 2}), pos({2})});
  gradcheck([](V x) { return neg(x[0]); }, {r({4})});
  gradcheck([](V x) { return pow(x[0], 2.5); }, {pos({4})});
  gradcheck([](V x) { return pow(x[0], x[1]); }, {pos({3}), r({2, 3})});
  gradcheck([](V x) { return maximum(x[0], x[1]); }, {r({5}), r({5})});
  gradcheck([](V x) { return minimum(x[0], x[1]); }, {r({5}), r({5})});
  gradcheck([](V x) { return where(gt(x[0], x[1]), x[0], x[1]); }, {r({2, 3}), r({3})});
}

TEST_CASE("gradcheck: unary math and activations", "[gradcheck]") {
  gradcheck([](V x) { return exp(x[0]); }, {r({5})});
  gradcheck([](V x) { return log(x[0]); }, {pos({5})});
  gradcheck([](V x) { return sqrt(x[0]); }, {pos({5})});
  gradcheck([](V x) { return rsqrt(x[0]); }, {pos({5})});
  gradcheck([](V x) { return sin(x[0]); }, {r({5})});
  gradcheck([](V x) { return cos(x[0]); }, {r({5})});
  gradcheck([](V x) { return log1p(x[0]); }, {pos({5})});
  gradcheck([](V x) { return abs(x[0]); }, {away_from_zero({6})});
  gradcheck([](V x) { return clamp(x[0], -0.45, 0.55); }, {away_from_zero({8})});
  gradcheck([](V x) { return relu(x[0]); }, {away_from_zero({6})});
  gradcheck([](V x) { return gelu(x[0]); }, {r({6})});
  gradcheck([](V x) { return gelu(x[0], "tanh"); }, {r({6})});
  gradcheck([](V x) { return sigmoid(x[0]); }, {r({6})});
  gradcheck([](V x) { return tanh(x[0]); }, {r({6})});
  gradcheck([](V x) { return softmax(x[0], 1); }, {r({3, 4})});
  gradcheck([](V x) { return log_softmax(x[0], 0); }, {r({3, 4})});
}

TEST_CASE("gradcheck: the other activations and math, and their second derivatives",
          "[gradcheck]") {
  // Wide inputs: both sides of elu's and softplus's switches, hardswish's ramps.
  auto wide = [] { return mul(r({12}), 3.0); };
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> smooth{
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"elu", [](const Tensor& x) { return elu(x, 0.7, 1.3); }},
      {"selu", [](const Tensor& x) { return selu(x); }},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 3.0); }},
      {"mish", [](const Tensor& x) { return mish(x); }},
      {"log_sigmoid", [](const Tensor& x) { return log_sigmoid(x); }},
      {"softsign", [](const Tensor& x) { return softsign(x); }},
      {"expm1", [](const Tensor& x) { return expm1(x); }},
      {"atan", [](const Tensor& x) { return atan(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
  };
  for (const auto& c : smooth) {
    INFO(c.first);
    const auto& f = c.second;  // (a structured binding cannot be captured before C++20)
    gradcheck([&f](V x) { return f(x[0]); }, {wide()});  // the fused backward kernel
    // The gradient under create_graph, composed of recorded ops, differentiated again. (elu's
    // and softplus's have a jump at their switch; the random points are not on it.)
    gradcheck(
        [&f](V x) {
          AutoGradMode on(true);  // (the finite differences run under NoGradGuard)
          return autograd::grad({sum(f(x[0]))}, {x[0]}, {}, {}, /*create_graph=*/true)[0];
        },
        {wide()});
  }
  gradcheck([](V x) { return hardswish(x[0]); }, {away_from_zero({8})});
  gradcheck([](V x) { return tan(x[0]); }, {mul(r({5}), 0.5)});
  gradcheck([](V x) { return log2(x[0]); }, {pos({5})});
  gradcheck([](V x) { return log10(x[0]); }, {pos({5})});
  gradcheck([](V x) { return reciprocal(x[0]); }, {pos({5})});
  gradcheck([](V x) { return atan2(x[0], x[1]); }, {r({2, 3}), r({3})});
  gradcheck([](V x) { return remainder(x[0], x[1]); }, {mul(r({6}), 0.3), add(pos({6}), 1.0)});
  gradcheck([](V x) { return cumsum(x[0], 1); }, {r({3, 4})});
  gradcheck([](V x) { return prod(x[0], 0); }, {r({3, 4})});
  {
    // cumprod: rows without a zero, with one, and with two (its gradient changes form there)
    Tensor z = r({3, 5});
    {
      NoGradGuard no_grad;
      z.index_put_({1, 2}, 0.0);
      z.index_put_({2, 1}, 0.0);
      z.index_put_({2, 3}, 0.0);
    }
    gradcheck([](V x) { return cumprod(x[0], 1); }, {z});
    gradcheck([](V x) { return cumprod(x[0], 0); }, {z.t().contiguous().detach()});
    // Its gradient, differentiated again where there is no zero (at a zero the composed
    // gradient misses the terms through that zero of the positions after it: ARCHITECTURE).
    gradcheck(
        [](V x) {
          AutoGradMode on(true);
          Tensor w = arange(1, 6, TensorOptions(DType::f64));
          return autograd::grad({sum(mul(cumprod(x[0], 1), w))}, {x[0]}, {}, {},
                                /*create_graph=*/true)[0];
        },
        {r({2, 5})});
  }
  gradcheck([](V x) { return logsumexp(x[0], {1}); }, {r({3, 4})});
  gradcheck(  // its gradient, g exp(x - out), differentiated again
      [](V x) {
        AutoGradMode on(true);
        Tensor w = arange(0, 4, TensorOptions(DType::f64)).reshape({1, 4});
        return autograd::grad({sum(mul(logsumexp(x[0], {0, 1}, true), 2.0))}, {x[0]}, {}, {},
                              /*create_graph=*/true)[0]
            .mul(w);
      },
      {r({3, 4})});
  gradcheck([](V x) { return topk(x[0], 2, 1).first; }, {distinct({3, 5})});
  gradcheck([](V x) { return einsum("bij,bkj->bik", {x[0], x[1]}); }, {r({2, 3, 4}), r({2, 5, 4})});
  gradcheck([](V x) { return prelu(x[0], x[1]); }, {away_from_zero({2, 3, 4}), r({3})});
  gradcheck([](V x) { return prelu(x[0], x[1]); }, {away_from_zero({5}), r({1})});
  // its gradients under create_graph (recorded ops), with respect to input and weight, again
  gradcheck(
      [](V x) {
        AutoGradMode on(true);
        Tensor v = prelu(x[0], x[1]);
        const auto gs = autograd::grad({sum(v * v * v)}, {x[0], x[1]}, {}, {}, true);
        return cat({gs[0].reshape({-1}), gs[1].reshape({-1})});
      },
      {away_from_zero({2, 3, 4}), r({3})});
  gradcheck([](V x) { return normalize(x[0]); }, {r({3, 4})});
}

TEST_CASE("gradcheck: reductions", "[gradcheck]") {
  gradcheck([](V x) { return sum(x[0]); }, {r({2, 3})});
  gradcheck([](V x) { return sum(x[0], {0, 2}, true); }, {r({2, 3, 4})});
  gradcheck([](V x) { return mean(x[0], {1}); }, {r({2, 3, 4})});
  gradcheck([](V x) { return var(x[0], {1}); }, {r({2, 5})});
  gradcheck([](V x) { return var(x[0], {}, 0); }, {r({2, 5})});
  gradcheck([](V x) { return max(x[0]); }, {r({3, 4})});
  gradcheck([](V x) { return min(x[0]); }, {r({3, 4})});
  gradcheck([](V x) { return max(x[0], 1).first; }, {r({3, 4})});
  gradcheck([](V x) { return min(x[0], 0, true).first; }, {r({3, 4})});
  gradcheck([](V x) { return amax(x[0], {0, 2}); }, {r({2, 3, 2})});
}

TEST_CASE("gradcheck: matrix products", "[gradcheck]") {
  gradcheck([](V x) { return matmul(x[0], x[1]); }, {r({3, 4}), r({4, 2})});
  gradcheck([](V x) { return matmul(x[0], x[1]); }, {r({2, 1, 3, 4}), r({3, 4, 2})});
  gradcheck([](V x) { return matmul(x[0], x[1]); }, {r({4}), r({4})});
  gradcheck([](V x) { return matmul(x[0], x[1]); }, {r({2, 3, 4}), r({4})});
  gradcheck([](V x) { return matmul(x[0].transpose(0, 1), x[1]); }, {r({4, 3}), r({4, 2})});
  gradcheck([](V x) { return bmm(x[0], x[1]); }, {r({2, 3, 4}), r({2, 4, 5})});
  gradcheck([](V x) { return linear(x[0], x[1], x[2]); }, {r({2, 3, 4}), r({5, 4}), r({5})});
}

TEST_CASE("gradcheck: convolution", "[gradcheck]") {
  gradcheck([](V x) { return conv2d(x[0], x[1], x[2], 1, 1); },
            {r({2, 3, 5, 4}), r({2, 3, 3, 3}), r({2})});
  gradcheck([](V x) { return conv2d(x[0], x[1], Tensor(), 2, 1, 2); },
            {r({1, 2, 7, 6}), r({3, 2, 3, 2})});
  gradcheck([](V x) { return conv2d(x[0], x[1], x[2], Int2(1, 2), Int2(0, 1), 1, 2); },
            {r({2, 4, 5, 5}), r({4, 2, 2, 3}), r({4})});
  gradcheck([](V x) { return conv2d(x[0], x[1]); }, {r({2, 3, 3, 3}), r({4, 3, 1, 1})});
}

TEST_CASE("gradcheck: 3-d convolution and pooling", "[gradcheck]") {
  gradcheck([](V x) { return conv3d(x[0], x[1], x[2], 1, 1); },
            {r({2, 2, 4, 3, 3}), r({2, 2, 3, 2, 2}), r({2})});
  gradcheck(
      [](V x) {
        return conv3d(x[0], x[1], {}, {2, 1, 1}, {1, 0, 1}, {1, 2, 1}, 2);
      },
      {r({1, 4, 5, 5, 3}), r({2, 2, 2, 2, 2})});
  // Its gradient under create_graph, differentiated again (the weight's, by both operands).
  gradcheck(
      [](V x) {
        AutoGradMode on(true);
        return autograd::grad(
            {sum(mul(conv3d(x[0], x[1], {}, 1, 1), conv3d(x[0], x[1], {}, 1, 1)))}, {x[1]}, {}, {},
            /*create_graph=*/true)[0];
      },
      {r({1, 2, 3, 3, 3}), r({2, 2, 2, 2, 2})});
  gradcheck(
      [](V x) {
        return max_pool3d(x[0], 2, {1, 2, 2}, {1, 0, 1});
      },
      {distinct({1, 2, 4, 4, 5})});
  gradcheck([](V x) { return avg_pool3d(x[0], 3, 2, 1, true, false); }, {r({1, 2, 5, 4, 6})});
  gradcheck([](V x) { return avg_pool3d(x[0], 2, 1, 1, false, true, 3); }, {r({1, 1, 3, 4, 3})});
  gradcheck([](V x) { return adaptive_avg_pool3d(x[0], {2, 3, 2}); }, {r({1, 2, 5, 4, 3})});
  // avg_pool2d's divisors in its backward and in that backward's own gradient (create_graph).
  gradcheck(
      [](V x) {
        AutoGradMode on(true);
        Tensor y = avg_pool2d(x[0], 3, 2, 1, true, false);
        return autograd::grad({sum(mul(y, y))}, {x[0]}, {}, {}, /*create_graph=*/true)[0];
      },
      {r({1, 2, 6, 7})});
}

TEST_CASE("gradcheck: transposed convolution", "[gradcheck]") {
  gradcheck([](V x) { return conv_transpose2d(x[0], x[1], x[2], 2, 1, 1); },
            {r({2, 3, 3, 4}), r({3, 2, 3, 3}), r({2})});
  gradcheck([](V x) { return conv_transpose2d(x[0], x[1], {}, Int2(1, 2), 0, 0, 2, 2); },
            {r({1, 4, 3, 3}), r({4, 1, 2, 3})});
  // output_padding >= stride (below the dilation): through the padded input.
  gradcheck([](V x) { return conv_transpose2d(x[0], x[1], x[2], Int2(1, 2), 1, 1, 2, Int2(2, 1)); },
            {r({1, 4, 3, 3}), r({4, 1, 3, 2}), r({2})});
  gradcheck([](V x) { return conv_transpose1d(x[0], x[1], x[2], 2, 1, 1, 2, 2); },
            {r({2, 4, 3}), r({4, 1, 3}), r({2})});
  gradcheck(
      [](V x) {
        return conv_transpose3d(x[0], x[1], x[2], {2, 1, 2}, {1, 0, 1}, {1, 0, 0}, 2, {1, 2, 1});
      },
      {r({1, 4, 3, 3, 2}), r({4, 1, 2, 2, 2}), r({2})});
  gradcheck(
      [](V x) {
        return conv_transpose3d(x[0], x[1], {}, 1, {2, 0, 0}, {1, 0, 0}, 1, {2, 1, 1});
      },
      {r({2, 2, 3, 2, 2}), r({2, 2, 3, 1, 2})});
}

TEST_CASE("gradcheck: batch norm and pooling", "[gradcheck]") {
  gradcheck([](V x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true); },
            {r({3, 2, 3, 2}), r({2}), r({2})});
  gradcheck(
      [](V x) {
        Tensor rm = full({2}, 0.3, DType::f64), rv = full({2}, 1.7, DType::f64);
        return batch_norm(x[0], rm, rv, x[1], x[2], false);
      },
      {r({3, 2, 3}), r({2}), r({2})});
  // Fused with relu, and with a residual added before the relu; training and evaluation.
  gradcheck([](V x) { return batch_norm_relu(x[0], Tensor(), Tensor(), x[1], x[2], true); },
            {r({3, 2, 3, 2}), r({2}), r({2})});
  gradcheck(
      [](V x) {
        return batch_norm_relu(x[0], Tensor(), Tensor(), x[1], x[2], true, 0.1, 1e-5, x[3]);
      },
      {r({3, 2, 3, 2}), r({2}), r({2}), r({3, 2, 3, 2})});
  gradcheck(
      [](V x) {
        Tensor rm = full({2}, 0.3, DType::f64), rv = full({2}, 1.7, DType::f64);
        return batch_norm_relu(x[0], rm, rv, x[1], x[2], false, 0.1, 1e-5, x[3]);
      },
      {r({3, 2, 3}), r({2}), r({2}), r({3, 2, 3})});
  // Distinct, well-separated values so the max is stable under a 1e-6 nudge.
  gradcheck([](V x) { return max_pool2d(x[0], 2, 2); },
            {distinct({1, 2, 4, 4})});
  gradcheck([](V x) { return max_pool2d(x[0], 3, 2, 1); },
            {distinct({2, 1, 5, 5})});
  gradcheck([](V x) { return avg_pool2d(x[0], 3, 2, 1); }, {r({2, 2, 5, 6})});
  gradcheck([](V x) { return adaptive_avg_pool2d(x[0], Int2(2, 3)); }, {r({1, 2, 5, 7})});
}

TEST_CASE("gradcheck: losses", "[gradcheck]") {
  Tensor t = from_vector<int64_t>({2, 0, 1, 2});
  Tensor t_ign = from_vector<int64_t>({2, -100, 1, 2});
  gradcheck([&](V x) { return cross_entropy(x[0], t); }, {r({4, 3})});
  gradcheck([&](V x) { return cross_entropy(x[0], t_ign, {Reduction::mean, -100, 0.15}); },
            {r({4, 3})});
  gradcheck([&](V x) { return cross_entropy(x[0], t, {Reduction::none}); }, {r({4, 3})});
  gradcheck([&](V x) { return nll_loss(log_softmax(x[0], 1), t, Reduction::sum); }, {r({4, 3})});
  gradcheck([](V x) { return mse_loss(x[0], x[1]); }, {r({2, 3}), r({2, 3})});
  // Class weights and targets are constants here, as in torch (no gradient for them).
  Tensor w = pos({3});
  gradcheck([&](V x) { return nll_loss(log_softmax(x[0], 1), t_ign, w); }, {r({4, 3})});
  Tensor y = r({2, 3});
  gradcheck([&](V x) { return l1_loss(x[0] + y, y); }, {away_from_zero({2, 3})});
  gradcheck([&](V x) { return smooth_l1_loss(x[0], y, Reduction::Sum, 0.7); }, {r({2, 3})});
  Tensor p = rand({2, 3}, DType::f64, &gen);
  gradcheck([&](V x) { return binary_cross_entropy(sigmoid(x[0]), p, w); }, {r({2, 3})});
  gradcheck([&](V x) { return binary_cross_entropy_with_logits(x[0], p, {}, w); },
            {r({2, 3})});
}

TEST_CASE("gradcheck: libtorch-named ops", "[gradcheck]") {
  gradcheck([](V x) { return leaky_relu(x[0], 0.2); }, {away_from_zero({6})});
  gradcheck([](V x) { return x[0].norm(); }, {r({2, 3})});
  gradcheck([](V x) { return x[0].std({1}); }, {r({2, 4})});
  Tensor mask = from_vector(std::vector<bool>{true, false, false, true, false, true}, {2, 3});
  gradcheck([&](V x) { return x[0].masked_fill(mask, 2.5); }, {r({2, 3})});
  gradcheck(
      [](V x) {
        Generator g(5);
        return dropout2d(x[0], 0.4, true, &g);
      },
      {r({3, 4, 2, 2})});
}

TEST_CASE("gradcheck: views and shape ops", "[gradcheck]") {
  gradcheck([](V x) { return x[0].reshape({3, 2}) * 2.0; }, {r({2, 3})});
  gradcheck([](V x) { return x[0].permute({2, 0, 1}); }, {r({2, 3, 4})});
  gradcheck([](V x) { return x[0].slice(1, 1, 4, 2); }, {r({2, 5})});
  gradcheck([](V x) { return x[0].narrow(0, 1, 2); }, {r({4, 2})});
  gradcheck([](V x) { return x[0].select(1, -1); }, {r({2, 3})});
  gradcheck([](V x) { return x[0].unsqueeze(1).expand({3, 4, 2}); }, {r({3, 2})});
  gradcheck([](V x) { return x[0].squeeze(); }, {r({1, 3, 1})});
  gradcheck([](V x) { return flatten(x[0]); }, {r({2, 2, 2})});
  gradcheck([](V x) { return cat({x[0], x[1]}, 0); }, {r({1, 3}), r({2, 3})});
  gradcheck([](V x) { return stack({x[0], x[1]}, 1); }, {r({2, 3}), r({2, 3})});
  gradcheck([](V x) { return pad(x[0], {2, -1, 1, 1}, 0.25); }, {r({2, 3, 4})});
  gradcheck([](V x) { return x[0].transpose(0, 1).contiguous(); }, {r({2, 3})});
  gradcheck([](V x) { return x[0].to(DType::f32).to(DType::f64); }, {r({4})}, 1e-3, 1e-4, 1e-3);
}

TEST_CASE("gradcheck: dropout with a fixed mask", "[gradcheck]") {
  // Same generator state for every evaluation, so the mask is the same function each time.
  gradcheck(
      [](V x) {
        Generator g(5);
        return dropout(x[0], 0.3, true, &g);
      },
      {r({4, 5})});
}

TEST_CASE("gradcheck: indexing by tensors of indices", "[gradcheck]") {
  const Tensor rows = from_vector<int64_t>({2, 0, 2, 3});
  const Tensor idx = from_vector<int64_t>({1, 0, 1, 2, 2, 0}, {2, 3});
  // Distinct rows in each column, so scatter loses no value to a repeated position.
  const Tensor distinct_rows = from_vector<int64_t>({1, 0, 2, 2, 2, 1, 0, 0}, {2, 4});
  gradcheck([&](V x) { return index_select(x[0], 1, rows); }, {r({3, 4, 2})});
  gradcheck([&](V x) { return gather(x[0], 0, idx); }, {r({3, 4})});
  gradcheck([&](V x) { return gather(x[0], 1, idx); }, {r({3, 4})});  // index narrower than x
  gradcheck([&](V x) { return scatter_add(x[0], 0, idx, x[1]); }, {r({3, 4}), r({2, 5})});
  gradcheck([&](V x) { return scatter(x[0], 0, distinct_rows, x[1]); }, {r({3, 4}), r({2, 4})});
  gradcheck([&](V x) { return index_add(x[0], 0, rows, x[1], 0.5); }, {r({4, 3}), r({4, 3})});
  // (A padding row gets no gradient though the forward reads it, so finite differences check
  // embedding without one; the golden case has one.)
  gradcheck([&](V x) { return embedding(x[0], idx); }, {r({3, 5})});
  // With scale_grad_by_freq the weight's gradient is no derivative, but it is linear in the
  // output's gradient c: its own gradient in c (torch's drops the scaling) against finite
  // differences, a padding row too.
  const Tensor table = r({3, 5}).requires_grad_();
  for (int64_t padding : {-1, 2})
    gradcheck(
        [&](V x) {
          AutoGradMode on(true);  // (the finite differences run under NoGradGuard)
          return autograd::grad({sum(mul(embedding(table, idx, padding, true), x[0]))}, {table}, {},
                                {}, /*create_graph=*/true)[0];
        },
        {r({2, 3, 5})});
}

TEST_CASE("gradcheck: diagonals, rolls, windows, order statistics, products and more losses",
          "[gradcheck]") {
  gradcheck([](V x) { return diagonal(x[0], -1, 2, 0); }, {r({3, 2, 4})});
  gradcheck([](V x) { return diag(x[0], 2); }, {r({3})});
  gradcheck([](V x) { return diag(x[0], -1); }, {r({3, 4})});
  gradcheck([](V x) { return roll(x[0], {2, -1}, {1, 0}); }, {r({3, 4})});
  gradcheck([](V x) { return x[0].tile({2, 1, 2}); }, {r({2, 3})});
  gradcheck(
      [](V x) {
        return x[0].repeat_interleave(from_vector<int64_t>({2, 0, 1}), 1);
      },
      {r({2, 3})});
  gradcheck([](V x) { return x[0].unfold(0, 3, 1); }, {r({5, 2})});
  gradcheck([](V x) { return pixel_unshuffle(pixel_shuffle(x[0], 2) * 2.0, 2); },
            {r({1, 8, 2, 3})});
  gradcheck([](V x) { return x[0].kthvalue(3, 1).first; }, {distinct({2, 5})});
  gradcheck([](V x) { return x[0].median(); }, {distinct({3, 4})});
  gradcheck([](V x) { return x[0].trace(); }, {r({3, 4})});
  gradcheck([](V x) { return std_mean(x[0], {1}).first; }, {r({2, 4})});
  gradcheck([](V x) { return cross(x[0], x[1], 0); }, {r({3, 2}), r({3, 1})});
  gradcheck([](V x) { return baddbmm(x[0], x[1], x[2], 0.3, -1.5); },
            {r({2, 1}), r({2, 2, 3}), r({2, 3, 1})});
  gradcheck([](V x) { return cdist(x[0], x[1]); }, {r({3, 2}), r({4, 2})});
  gradcheck([](V x) { return cdist(x[0], x[1], 3.0); }, {r({3, 2}), r({4, 2})});
  gradcheck([](V x) { return cdist(x[0], x[1]); }, {r({26, 2}), r({3, 2})});  // the mm form
  gradcheck([](V x) { return linalg::vector_norm(x[0], 1.5, {0}); }, {r({3, 2})});
  gradcheck([](V x) { return logit(x[0], 0.05); },
            {add(mul(rand({6}, DType::f64, &gen), 0.8), 0.1)});
  gradcheck([](V x) { return glu(x[0], 0); }, {r({4, 3})});
  gradcheck([](V x) { return triplet_margin_loss(x[0], x[1], x[2], 2.0, 2.0, 1e-6, true); },
            {r({4, 3}), r({4, 3}), r({4, 3})});
  Tensor y = from_vector<double>({1, -1, -1, 1});
  gradcheck([&](V x) { return cosine_embedding_loss(x[0], x[1], y, -0.5); },
            {r({4, 3}), r({4, 3})});
  gradcheck([&](V x) { return margin_ranking_loss(x[0], x[1], y, 3.0); }, {r({4}), r({4})});
  gradcheck([](V x) { return gaussian_nll_loss(x[0], x[1], x[2], true); },
            {r({4, 2}), r({4, 2}), pos({4})});
  Tensor counts = from_vector<double>({0, 1, 2, 5, 3, 0});
  gradcheck([&](V x) { return poisson_nll_loss(x[0], counts, false, true); }, {pos({6})});
  gradcheck([](V x) { return celu(x[0], 0.6); }, {away_from_zero({8})});
  gradcheck([](V x) { return softshrink(x[0], 0.05); }, {away_from_zero({8})});
  gradcheck([](V x) { return softmin(x[0], 0); }, {r({3, 2})});
  gradcheck([](V x) { return bilinear(x[0], x[1], x[2], x[3]); },
            {r({2, 3}), r({2, 2}), r({4, 3, 2}), r({4})});
  gradcheck([](V x) { return channel_shuffle(x[0], 2); }, {r({1, 4, 3})});
  gradcheck([](V x) { return im2col(x[0], {2, 2}, {1, 2}, 1, {2, 1}); }, {r({1, 2, 4, 5})});
  gradcheck([](V x) { return col2im(x[0], {4, 5}, {2, 2}, {1, 2}, 1, {2, 1}); }, {r({1, 8, 15})});
  // The views' backward records itself: their gradients under create_graph differentiated again.
  second_derivatives({[](const Tensor& x) { return x.unfold(1, 2, 1); },
                      [](const Tensor& x) { return diagonal(x, 1); },
                      [](const Tensor& x) { return diag(x.flatten()); },
                      [](const Tensor& x) {
                        return col2im(x.reshape({1, 4, 6}), {3, 4}, 2, 1, 0, 1);
                      }},
                     {4, 6});
}

TEST_CASE("gradcheck: factorizations and solvers, and their second derivatives", "[gradcheck]") {
  const Tensor eye3 = eye(3, DType::f64);
  auto well = [&](const Tensor& x) { return add(x, mul(eye3, 3.0)); };
  // A symmetric positive-definite matrix of x: a perturbed entry of x moves both triangles, so
  // the finite differences see the symmetric gradient torch's formulas give.
  auto spd = [&](const Tensor& x) { return add(matmul(x, x.transpose(-1, -2)), eye3); };
  gradcheck([&](V x) { return linalg::inv(well(x[0])); }, {r({2, 3, 3})});
  gradcheck([&](V x) { return linalg::det(well(x[0])); }, {r({2, 3, 3})});
  gradcheck([](V x) { return std::get<1>(linalg::slogdet(x[0])); }, {r({3, 3})});
  gradcheck([&](V x) { return logdet(spd(x[0])); }, {r({3, 3})});
  gradcheck([&](V x) { return linalg::solve(well(x[0]), x[1]); }, {r({2, 3, 3}), r({3, 2})});
  gradcheck([&](V x) { return linalg::solve(well(x[0]), x[1], false); }, {r({3, 3}), r({2, 3})});
  gradcheck([&](V x) { return linalg::cholesky(spd(x[0])); }, {r({2, 3, 3})});
  gradcheck([&](V x) { return linalg::cholesky(spd(x[0]), true); }, {r({3, 3})});
  // The solves read one triangle: the other's entries get no gradient, as their differences.
  gradcheck([&](V x) { return linalg::solve_triangular(well(x[0]), x[1], true); },
            {r({3, 3}), r({3, 2})});
  gradcheck([&](V x) { return linalg::solve_triangular(well(x[0]), x[1], false, false, true); },
            {r({3, 3}), r({4, 3})});
  gradcheck([&](V x) { return cholesky_solve(x[1], add(tril(x[0]), mul(eye3, 2.0))); },
            {r({3, 3}), r({3, 2})});
  gradcheck([&](V x) { return cholesky_inverse(add(triu(x[0]), mul(eye3, 2.0)), true); },
            {r({3, 3})});
  gradcheck([&](V x) { return linalg::matrix_power(well(x[0]), -3); }, {r({3, 3})});
  gradcheck([](V x) { return linalg::matrix_power(x[0], 5); }, {mul(r({3, 3}), 0.5)});
  // Each backward is written with these ops: differentiated again under create_graph.
  second_derivatives(
      {[&](const Tensor& x) { return linalg::inv(well(x)); },
       [&](const Tensor& x) { return linalg::det(well(x)); },
       [&](const Tensor& x) { return linalg::cholesky(spd(x)); },
       [&](const Tensor& x) { return linalg::solve(well(x), x.sin()); },
       [&](const Tensor& x) { return linalg::solve_triangular(well(x), x.cos(), false); },
       [&](const Tensor& x) { return cholesky_solve(x.sin(), add(tril(x), mul(eye3, 2.0))); }},
      {3, 3});
}

TEST_CASE("gradcheck: eigh, SVD, QR, the pseudo-inverse and matrix norms, and second derivatives",
          "[gradcheck]") {
  // Functions the factors' signs leave unchanged; a symmetric input through x + x^T (a
  // perturbed entry of x moves both triangles, as the symmetric gradient torch's formula gives).
  auto sym = [](const Tensor& x) { return add(x, x.transpose(-1, -2)); };
  auto eigh_f = [&](const Tensor& x) {
    auto [l, q] = linalg::eigh(sym(x));
    return matmul(mul(q, sin(l).unsqueeze(-2)), q.transpose(-1, -2));
  };
  auto svd_f = [](const Tensor& x, bool full) {
    auto [u, s, vh] = linalg::svd(x, full);
    const int64_t k = s.size(-1);
    return matmul(mul(u.narrow(-1, 0, k), sin(s).unsqueeze(-2)), vh.narrow(-2, 0, k));
  };
  auto qr_f = [](const Tensor& x) {
    auto [q, r] = linalg::qr(x);
    return matmul(q, sin(r));
  };
  gradcheck([&](V x) { return eigh_f(x[0]); }, {r({2, 3, 3})});
  gradcheck([&](V x) { return linalg::eigvalsh(sym(x[0]), "U"); }, {r({4, 4})});
  gradcheck([&](V x) { return svd_f(x[0], false); }, {r({2, 3, 3})});
  gradcheck([&](V x) { return svd_f(x[0], false); }, {r({4, 3})});
  gradcheck([&](V x) { return svd_f(x[0], true); }, {r({3, 5})});
  gradcheck([](V x) { return linalg::svdvals(x[0]); }, {r({2, 3, 4})});
  gradcheck([&](V x) { return qr_f(x[0]); }, {r({5, 3})});
  gradcheck([&](V x) { return qr_f(x[0]); }, {r({2, 3, 3})});
  gradcheck([&](V x) { return qr_f(x[0]); }, {r({3, 5})});
  gradcheck([](V x) { return std::get<1>(linalg::qr(x[0])); }, {r({4, 3})});
  gradcheck([](V x) { return linalg::pinv(x[0]); }, {r({2, 4, 3})});
  gradcheck([](V x) { return linalg::pinv(x[0]); }, {r({3, 4})});
  gradcheck([&](V x) { return linalg::pinv(sym(x[0]), 1e-15, true); }, {r({3, 3})});
  gradcheck([](V x) { return std::get<0>(linalg::lstsq(x[0], x[1])); }, {r({5, 3}), r({5, 2})});
  gradcheck([](V x) { return std::get<0>(linalg::lstsq(x[0], x[1])); }, {r({3, 4}), r({3})});
  gradcheck([](V x) { return std::get<0>(linalg::lstsq(x[0], x[1], std::nullopt, "gels")); },
            {r({2, 4, 3}), r({1, 4, 2})});
  gradcheck([](V x) { return std::get<1>(linalg::lstsq(x[0], x[1], std::nullopt, "gelsd")); },
            {r({5, 3}), r({5, 2})});
  gradcheck([](V x) { return linalg::matrix_norm(x[0]); }, {r({2, 3, 4})});
  gradcheck([](V x) { return linalg::matrix_norm(x[0], "nuc"); }, {r({3, 4})});
  for (double ord : {1.0, -1.0, 2.0, -2.0, kInf, -kInf})
    gradcheck([ord](V x) { return linalg::matrix_norm(x[0], ord, {0, 2}, true); }, {r({3, 2, 4})});
  second_derivatives({eigh_f, [&](const Tensor& x) { return svd_f(x, false); }, qr_f,
                      [](const Tensor& x) { return linalg::pinv(x); }},
                     {3, 3});
}

TEST_CASE("gradcheck: LU, its solves, the matrix exponential, norms, cond and multi_dot",
          "[gradcheck]") {
  // LU's factors as functions of A (pivots fixed near x: random x has no ties).
  auto lu_f = [](const Tensor& x) {
    auto [p, l, u] = linalg::lu(x);
    return matmul(matmul(p, sin(l)), u);
  };
  gradcheck([](V x) { return std::get<0>(linalg::lu_factor(x[0])); }, {r({2, 3, 3})});
  gradcheck([](V x) { return std::get<0>(linalg::lu_factor(x[0])); }, {r({3, 5})});
  gradcheck([](V x) { return std::get<0>(linalg::lu_factor(x[0])); }, {r({2, 5, 3})});
  gradcheck([&](V x) { return lu_f(x[0]); }, {r({3, 4})});
  gradcheck([&](V x) { return lu_f(x[0]); }, {r({4, 2})});
  for (bool left : {true, false})
    for (bool adjoint : {false, true})
      gradcheck(
          [left, adjoint](V x) {
            auto [lu, pivots] = linalg::lu_factor(x[0]);
            return linalg::lu_solve(lu, pivots, x[1], left, adjoint);
          },
          {r({3, 3}), left ? r({2, 3, 2}) : r({2, 3})});
  gradcheck([](V x) { return linalg::matrix_exp(x[0]); }, {r({2, 3, 3})});
  // norms 1.5 and 12: unscaled, and scaled by 2^-2 and squared twice
  gradcheck([](V x) { return linalg::matrix_exp(x[0]); },
            {mul(r({2, 3, 3}), from_vector(std::vector<double>{0.5, 5.0}, {2, 1, 1}))});
  gradcheck([](V x) { return std::get<0>(linalg::inv_ex(x[0])); }, {r({3, 3})});
  gradcheck([](V x) { return linalg::norm(x[0], 3, Shape{1}); }, {r({2, 3})});
  gradcheck([](V x) { return linalg::norm(x[0], "nuc"); }, {r({3, 4})});
  for (double ord : {2.0, -2.0, 1.0, -1.0, kInf, -kInf})
    gradcheck([ord](V x) { return linalg::cond(x[0], ord); }, {r({2, 3, 3})});
  gradcheck([](V x) { return linalg::cond(x[0], "fro"); }, {r({3, 3})});
  gradcheck([](V x) { return linalg::cond(x[0], "nuc"); }, {r({3, 3})});
  gradcheck(
      [](V x) {
        return linalg::multi_dot({x[0], x[1], x[2]});
      },
      {r({4}), r({4, 2}), r({2, 3})});
  gradcheck([](V x) { return linalg::vecdot(x[0], x[1]); }, {r({2, 3}), r({3})});
  gradcheck([](V x) { return linalg::tensorinv(x[0], 1); }, {r({4, 2, 2})});
  gradcheck([](V x) { return linalg::tensorsolve(x[0], x[1], {0}); }, {r({4, 2, 2}), r({2, 2})});
  second_derivatives({[](const Tensor& x) { return std::get<0>(linalg::lu_factor(x)); },
                      [](const Tensor& x) {
                        auto [lu, pivots] = linalg::lu_factor(x);
                        return linalg::lu_solve(lu, pivots, x.cos());
                      },
                      [](const Tensor& x) { return linalg::matrix_exp(x); }},
                     {3, 3});
}

TEST_CASE("gradcheck: bags of embeddings, local response norm and the multi-class hinge loss",
          "[gradcheck]") {
  const Tensor indices = from_vector<int64_t>({1, 2, 4, 5, 4, 3, 2, 0});
  const Tensor offsets = from_vector<int64_t>({0, 3, 3, 6});
  gradcheck([&](V x) { return embedding_bag(x[0], indices, offsets, EmbeddingBagMode::sum, x[1]); },
            {r({6, 3}), r({8})});
  gradcheck([&](V x) { return embedding_bag(x[0], indices, offsets, EmbeddingBagMode::mean); },
            {r({6, 3})});
  gradcheck(
      [&](V x) {
        return embedding_bag(x[0], indices, offsets, EmbeddingBagMode::max, Tensor(), false, 2);
      },
      {distinct({6, 3})});
  gradcheck([](V x) { return local_response_norm(x[0], 3, 0.5, 0.75, 1.0); }, {r({2, 4, 3})});
  gradcheck([](V x) { return local_response_norm(x[0], 2, 0.5, 0.75, 1.0); }, {r({1, 3, 2, 2, 2})});
  const Tensor target = from_vector<int64_t>({2, 0, 1});
  gradcheck([&](V x) { return multi_margin_loss(x[0], target, 2, 0.4, x[1]); },
            {distinct({3, 4}), pos({4})});
  const Tensor labels = from_vector<int64_t>({3, 0, -1, 1, 1, 2, 1, -1}, {2, 4});
  gradcheck([&](V x) { return multilabel_margin_loss(x[0], labels, Reduction::none); },
            {distinct({2, 4})});
  // CTC's gradient with respect to the log-probabilities themselves (not through a softmax):
  // the loss's own, where torch's adds exp(log_probs).
  const Tensor ctc_targets = from_vector<int64_t>({1, 2, 2, 3, 1, 0}, {2, 3});
  gradcheck(
      [&](V x) {
        return ctc_loss(x[0], ctc_targets, std::vector<int64_t>{5, 4}, std::vector<int64_t>{3, 2},
                        0, Reduction::none);
      },
      {log_softmax(r({5, 2, 4}), 2).detach()});
  gradcheck(
      [&](V x) {
        return ctc_loss(log_softmax(x[0], 2), ctc_targets, std::vector<int64_t>{5, 3},
                        std::vector<int64_t>{3, 1}, 3);
      },
      {r({5, 2, 4})});
}
