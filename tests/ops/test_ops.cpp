// Op behaviour checked against closed forms: running statistics, dropout, comparisons,
// reductions over empty and integer tensors, index results.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "../util.hpp"

using namespace tandem;
using tandem::testing::require_close;

TEST_CASE("batch norm updates running statistics with momentum and unbiased variance", "[ops]") {
  Tensor x = from_vector<float>({1, 2, 3, 4, 10, 20, 30, 40}).reshape({4, 2});  // (N=4, C=2)
  Tensor rm = zeros({2}), rv = ones({2});
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 0.0 + 1e-5);
  // channel 0 holds 1, 3, 10, 30; channel 1 holds 2, 4, 20, 40
  double m0 = (1 + 3 + 10 + 30) / 4.0, m1 = (2 + 4 + 20 + 40) / 4.0;
  auto unbiased = [](std::vector<double> v, double m) {
    double s = 0;
    for (double e : v) s += (e - m) * (e - m);
    return s / (v.size() - 1);
  };
  double v0 = unbiased({1, 3, 10, 30}, m0), v1 = unbiased({2, 4, 20, 40}, m1);
  require_close(rm, from_vector<double>({0.1 * m0, 0.1 * m1}), 1e-6, 1e-6);
  require_close(rv, from_vector<double>({0.9 + 0.1 * v0, 0.9 + 0.1 * v1}), 1e-6, 1e-5);
  // normalized output: zero mean, biased variance one, per channel
  require_close(mean(y, {0}), zeros({2}), 0, 1e-6);
  require_close(var(y, {0}, 0), ones({2}), 1e-3, 1e-4);
  // eval mode uses the running statistics
  Tensor e = batch_norm(x, rm, rv, Tensor(), Tensor(), false);
  require_close(e.select(1, 0), div(sub(x.select(1, 0), full({}, 0.1 * m0)),
                                    full({}, std::sqrt(0.9 + 0.1 * v0 + 1e-5))), 1e-5, 1e-5);
}

TEST_CASE("batch norm's running statistics of another dtype or layout are updated where they lie",
          "[ops]") {
  // Same data as above; the statistics' update runs in f32 on copies and is written back.
  Tensor x = from_vector<float>({1, 2, 3, 4, 10, 20, 30, 40}).reshape({4, 2});
  const double m1 = (2 + 4 + 20 + 40) / 4.0;
  double v1 = 0;
  for (double e : {2.0, 4.0, 20.0, 40.0}) v1 += (e - m1) * (e - m1) / 3;
  // bf16 statistics: 0.1 m1 = 1.65 and 0.9 + 0.1 v1 = 31.93, rounded to bf16 (within 2^-9).
  Tensor rm16 = zeros({2}, DType::bf16), rv16 = ones({2}, DType::bf16);
  batch_norm(x, rm16, rv16, Tensor(), Tensor(), true, 0.1, 1e-5);
  CHECK(rm16.dtype() == DType::bf16);
  require_close(rm16.select(0, 1).to(DType::f64), full({}, 0.1 * m1, DType::f64), 4e-3, 0);
  require_close(rv16.select(0, 1).to(DType::f64), full({}, 0.9 + 0.1 * v1, DType::f64), 4e-3, 0);
  // Strided f64 views: every other element of a (4) tensor; the ones between are untouched.
  Tensor rm = full({4}, 7.0, DType::f64), rv = full({4}, 7.0, DType::f64);
  Tensor rm_view = rm.slice(0, 0, 4, 2), rv_view = rv.slice(0, 0, 4, 2);
  batch_norm(x, rm_view, rv_view, Tensor(), Tensor(), true, 0.1, 1e-5);
  require_close(rm, from_vector<double>({7 * 0.9 + 0.1 * 11, 7, 7 * 0.9 + 0.1 * m1, 7}), 0, 1e-6);
  require_close(rv.select(0, 2), full({}, 7 * 0.9 + 0.1 * v1, DType::f64), 0, 1e-5);
  CHECK(rv.select(0, 3).item<double>() == 7.0);
  // Evaluation reads them the same way: (x - running mean) / sqrt(running var + eps).
  Tensor e = batch_norm(x, rm_view, rv_view, Tensor(), Tensor(), false, 0.1, 1e-5);
  require_close(
      e.select(1, 1),
      div(sub(x.select(1, 1).to(DType::f64), rm.select(0, 2)), sqrt(add(rv.select(0, 2), 1e-5)))
          .to(DType::f32),
      1e-6, 1e-6);
}

TEST_CASE("batch_norm_relu's backward keeps no residual, and its second derivatives are the separate ops'",
          "[ops]") {
  Generator gen(6);
  auto leaf = [&](Shape shape) {
    Tensor t = randn(shape, DType::f64, &gen);
    t.set_requires_grad(true);
    return t;
  };
  Tensor x = leaf({3, 4, 5, 6}), w = leaf({4}), b = leaf({4}), s = leaf({3, 4, 5, 6});
  Tensor g = randn({3, 4, 5, 6}, DType::f64, &gen);
  // A shortcut's output (mul saves its other operand, not its result): the fused op reads it in
  // the forward and keeps no handle to it for the backward.
  Tensor r = mul(s, 2.0);
  const long handles = r.storage().use_count();
  Tensor fused = batch_norm_relu(x, Tensor(), Tensor(), w, b, true, 0.1, 1e-5, r);
  CHECK(r.storage().use_count() == handles);
  Tensor separate = relu(add(batch_norm(x, Tensor(), Tensor(), w, b, true), r));
  // First derivatives with create_graph, then the gradient of their squares: recorded ops on
  // both sides (the fused op's from relu's mask, the residual's value unused).
  std::vector<std::vector<Tensor>> second;
  for (const Tensor& y : {fused, separate}) {
    auto first = autograd::grad({y}, {x, w, s}, {g}, true, /*create_graph=*/true);
    Tensor penalty = add(add(sum(mul(first[0], first[0])), sum(mul(first[1], first[1]))),
                         sum(mul(first[2], first[2])));
    auto grads = autograd::grad({penalty}, {x, w});
    grads.insert(grads.end(), first.begin(), first.end());
    second.push_back(grads);
  }
  for (size_t k = 0; k < second[0].size(); ++k) {
    INFO("gradient " << k << " (x, w of the squares, then the first ones of x, w, s)");
    require_close(second[0][k], second[1][k], 1e-10, 1e-10);
  }
}

TEST_CASE("batch_norm_relu equals relu(batch_norm(x) + residual), values and gradients, bit for bit",
          "[ops]") {
  // The fused op against the three separate ops (f32; the kernels round alike), with and
  // without a residual, training and evaluation, on a plane size with a vector tail (63).
  Generator gen(5);
  for (const bool training : {true, false}) {
    for (const bool with_residual : {false, true}) {
      INFO("training " << training << ", residual " << with_residual);
      auto leaf = [&](Shape shape) {
        Tensor t = randn(shape, DType::f32, &gen);
        t.set_requires_grad(true);
        return t;
      };
      Tensor x = leaf({3, 5, 7, 9}), w = leaf({5}), b = leaf({5});
      Tensor r = with_residual ? leaf({3, 5, 7, 9}) : Tensor();
      Tensor rm1 = randn({5}, DType::f32, &gen), rv1 = add(rand({5}, DType::f32, &gen), 0.5);
      Tensor rm2 = rm1.clone(), rv2 = rv1.clone();
      Tensor weights = randn({3, 5, 7, 9}, DType::f32, &gen);  // d loss / d out

      Tensor fused = batch_norm_relu(x, rm1, rv1, w, b, training, 0.1, 1e-5, r);
      sum(mul(fused, weights)).backward();
      std::vector<Tensor> grads{x.grad(), w.grad(), b.grad()};
      if (with_residual) grads.push_back(r.grad());
      for (Tensor t : {x, w, b, r})
        if (t.defined()) t.set_grad(Tensor());

      Tensor bn = batch_norm(x, rm2, rv2, w, b, training, 0.1, 1e-5);
      Tensor separate = relu(with_residual ? add(bn, r) : bn);
      sum(mul(separate, weights)).backward();

      CHECK(equal(fused, separate));
      CHECK(equal(grads[0], x.grad()));
      CHECK(equal(grads[1], w.grad()));
      CHECK(equal(grads[2], b.grad()));
      if (with_residual) CHECK(equal(grads[3], r.grad()));
      CHECK(equal(rm1, rm2));
      CHECK(equal(rv1, rv2));
      // relu did something: some outputs are zero, some not.
      const double zero_share = mean(eq(fused, zeros({})).to(DType::f64)).item<double>();
      CHECK(zero_share > 0.2);
      CHECK(zero_share < 0.8);
    }
  }
  CHECK(testing::error_of([] {
          batch_norm_relu(zeros({2, 3, 4}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1,
                          1e-5, zeros({2, 3, 5}));
        }) == "batch_norm_relu: the residual must have the input's shape and dtype ((2, 3, 4), "
              "f32), got (2, 3, 5), f32");
}

TEST_CASE("layer norm's kernels match the formula in recorded f64 ops: values and gradients",
          "[ops]") {
  // Against mean, sub, pow and mul in f64 and their autograd: rows with a vector tail (515),
  // more rows than one chunk of the weight gradient's row sums (11000 rows of 3 features: two
  // chunks), one feature (each output is the bias), two normalized dims; without weight and
  // bias, and with an input that wants no gradient (only the weight's and bias's run); in f64
  // also the second derivatives (create_graph).
  struct Case {
    Shape shape, normalized;
    bool affine, input_grad;
  };
  const std::vector<Case> cases = {
      {{37, 515}, {515}, true, true}, {{11000, 3}, {3}, true, true},
      {{6, 1}, {1}, true, true},      {{4, 3, 5, 6}, {5, 6}, true, true},
      {{9, 40}, {40}, false, true},   {{9, 40}, {40}, true, false}};
  auto run_reference = [](const Tensor& x, const Tensor& w, const Tensor& b,
                          const Shape& normalized) {
    Shape dims;
    for (size_t k = 0; k < normalized.size(); ++k)
      dims.push_back(static_cast<int64_t>(x.dim() - 1 - static_cast<int64_t>(k)));
    Tensor centered = sub(x, mean(x, dims, true));
    Tensor y = mul(centered, pow(add(mean(mul(centered, centered), dims, true), 1e-5), -0.5));
    return w.defined() ? add(mul(y, w), b) : y;
  };
  Generator gen(11);
  for (const DType dt : {DType::f64, DType::f32, DType::bf16}) {
    for (const Case& c : cases) {
      INFO(dt << " " << shape_str(c.shape) << " over " << shape_str(c.normalized)
              << (c.affine ? "" : ", no affine") << (c.input_grad ? "" : ", no input gradient"));
      // Values dt holds exactly, so both sides start from the same numbers.
      auto in_dt = [&](const Tensor& t) { return t.to(dt).to(DType::f64); };
      const Tensor x64 = in_dt(add(mul(randn(c.shape, DType::f64, &gen), 3.0), 1.5));
      const Tensor w64 = in_dt(randn(c.normalized, DType::f64, &gen));
      const Tensor b64 = in_dt(randn(c.normalized, DType::f64, &gen));
      const Tensor g64 = in_dt(randn(c.shape, DType::f64, &gen));
      auto run = [&](bool reference) {
        const DType t = reference ? DType::f64 : dt;
        Tensor x = x64.to(t), w = w64.to(t), b = b64.to(t);
        x.set_requires_grad(c.input_grad);
        w.set_requires_grad(true);
        b.set_requires_grad(true);
        if (!c.affine) w = b = Tensor();
        Tensor y = reference ? run_reference(x, w, b, c.normalized)
                             : layer_norm(x, c.normalized, w, b, 1e-5);
        std::vector<Tensor> wanted;
        for (const Tensor& leaf : {x, w, b})
          if (leaf.defined() && leaf.requires_grad()) wanted.push_back(leaf);
        std::vector<Tensor> out{y};
        for (const Tensor& grad : autograd::grad({y}, wanted, {g64.to(t)})) out.push_back(grad);
        return out;
      };
      const std::vector<Tensor> got = run(false), expected = run(true);
      if (dt == DType::f64 && c.affine && c.input_grad) {
        // Under create_graph the backward is recorded ops: second derivatives as the formula's.
        auto second = [&](bool reference) {
          Tensor x = x64.detach(), w = w64.detach(), b = b64.detach();
          for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
          Tensor y = reference ? run_reference(x, w, b, c.normalized)
                               : layer_norm(x, c.normalized, w, b, 1e-5);
          auto g = autograd::grad({y}, {x, w}, {g64}, true, /*create_graph=*/true);
          return autograd::grad({add(sum(mul(g[0], g[0])), sum(mul(g[1], g[1])))}, {x, w});
        };
        const auto got2 = second(false), expected2 = second(true);
        for (size_t k = 0; k < got2.size(); ++k) require_close(got2[k], expected2[k], 1e-9, 1e-9);
      }
      REQUIRE(got.size() == expected.size());
      const double tol = dt == DType::bf16 ? 1e-2 : dt == DType::f32 ? 1e-4 : 1e-11;
      for (size_t k = 0; k < got.size(); ++k) {
        INFO("output " << k << " (0: the result, then the gradients)");
        REQUIRE(got[k].dtype() == dt);
        // The result and input gradient rounded once (in f32, rows of 3 features lose about
        // 1e-4 to cancellation in the input gradient); the parameters' gradients are sums of
        // thousands of products, allowed more.
        require_close(got[k].to(DType::f64), expected[k], tol, tol * (k >= 2 ? 10 : 1));
      }
    }
  }
}

TEST_CASE("softmax's row kernels match the composed ops (over another dim), values and gradients",
          "[ops]") {
  // Over the last dim the row kernels run; over dim 0 of the transpose, amax, sub, exp, sum and
  // div: the same numbers. Rows of 1, 17 (a vector tail) and 1000; f64 and f32; both forms.
  Generator gen(13);
  for (const DType dt : {DType::f64, DType::f32}) {
    for (const int64_t cols : {int64_t{1}, int64_t{17}, int64_t{1000}}) {
      for (const bool log_form : {false, true}) {
        INFO(dt << ", " << cols << " columns" << (log_form ? ", log_softmax" : ", softmax"));
        const Tensor x0 = mul(randn({37, cols}, dt, &gen), 4.0), g = randn({37, cols}, dt, &gen);
        auto run = [&](bool rows) {
          Tensor x = rows ? x0.detach() : x0.t().contiguous().detach();
          x.set_requires_grad(true);
          Tensor y = log_form ? log_softmax(x, rows ? 1 : 0) : softmax(x, rows ? 1 : 0);
          if (!rows) y = y.t();
          y.backward(g);
          return std::make_pair(y.detach(), rows ? x.grad() : x.grad().t());
        };
        const auto [y, gx] = run(true);
        const auto [y_ref, gx_ref] = run(false);
        const double tol = dt == DType::f64 ? 1e-12 : 2e-6;
        require_close(y, y_ref, tol, tol);
        require_close(gx, gx_ref, tol, tol);
      }
    }
  }
  // A NaN makes its row NaN; -inf is probability 0; a row of -inf is NaN, as PyTorch's.
  const Tensor odd = from_vector<float>({1, NAN, 2, -INFINITY, 0, 1, -INFINITY, -INFINITY}, {4, 2});
  const std::vector<float> p = softmax(odd, 1).to_vector<float>();
  CHECK((std::isnan(p[0]) && std::isnan(p[1])));
  CHECK((p[2] == 1.0f && p[3] == 0.0f));
  CHECK(std::fabs(p[4] - 1 / (1 + std::exp(1.0f))) < 1e-6f);
  CHECK((std::isnan(p[6]) && std::isnan(p[7])));
  // The same in rows long enough for the vector max (40): a NaN late in a row, a row of -inf,
  // and -inf beside numbers.
  Tensor longer = zeros({3, 40});
  longer.index_put_({0, 33}, NAN);
  longer.index_put_({1}, -INFINITY);
  longer.index_put_({2, 5}, -INFINITY);
  const std::vector<float> q = softmax(longer, 1).to_vector<float>();
  for (int64_t i = 0; i < 80; ++i) CHECK(std::isnan(q[i]));
  CHECK(q[85] == 0.0f);
  for (int64_t i = 80; i < 120; ++i)
    if (i != 85) CHECK(q[i] == Approx(1.0 / 39));
}

TEST_CASE("dropout keeps about 1 - p and rescales", "[ops]") {
  Generator g(3);
  Tensor x = ones({100000});
  Tensor y = dropout(x, 0.25, true, &g);
  double kept = mean(ne(y, zeros({})).to(DType::f64)).item<double>();
  CHECK(kept == Approx(0.75).margin(0.01));
  CHECK(max(y).item<float>() == Approx(1.0 / 0.75));
  CHECK(equal(dropout(x, 0.25, false), x));
}

TEST_CASE("extremes of long rows: first NaN, else first of the tied extremes, any length",
          "[ops]") {
  // The vector search (rows of 16 f32 or 8 f64 and more) against an element loop in f64: rows
  // of ties, of -0 beside 0, with a NaN early or at the very end, all -inf, and lengths that
  // leave a tail.
  auto first = [](const std::vector<double>& row, bool largest) {
    int64_t best = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      if (std::isnan(row[i])) return static_cast<int64_t>(i);
      if (largest ? row[i] > row[best] : row[i] < row[best]) best = static_cast<int64_t>(i);
    }
    return best;
  };
  Generator gen(9);
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (int64_t cols : {15, 16, 17, 40, 64, 1000}) {
      INFO("dtype " << dt << " cols " << cols);
      std::vector<double> v = randint(-3, 4, {7, cols}, DType::f64, &gen).to_vector<double>();
      for (int64_t c = 0; c < cols; ++c) {
        v[1 * cols + c] = c % 2 ? 0.0 : -0.0;  // zeros of both signs
        v[4 * cols + c] = -INFINITY;           // all -inf
      }
      v[2 * cols + cols / 3] = NAN;                         // a NaN inside
      v[3 * cols + cols - 1] = NAN;                         // a NaN last
      v[5 * cols + cols - 1] = 9;                           // the max in the tail
      v[6 * cols + 1] = NAN, v[6 * cols + cols - 2] = NAN;  // two NaNs
      Tensor x = from_vector(v, {7, cols}).to(dt);
      std::vector<double> xv = x.to(DType::f64).to_vector<double>();
      std::vector<int64_t> hi, lo;
      for (int64_t r = 0; r < 7; ++r) {
        std::vector<double> row(xv.begin() + r * cols, xv.begin() + (r + 1) * cols);
        hi.push_back(first(row, true));
        lo.push_back(first(row, false));
      }
      CHECK(argmax(x, 1).to_vector<int64_t>() == hi);
      CHECK(argmin(x, 1).to_vector<int64_t>() == lo);
      // the values are the elements at those positions, bit for bit (the sign of a zero too)
      Tensor at_hi = gather(x, 1, argmax(x, 1, true)).reshape({7});
      Tensor at_lo = gather(x, 1, argmin(x, 1, true)).reshape({7});
      auto bits = [](const Tensor& t) { return t.to(DType::f64).to_vector<double>(); };
      auto same_bits = [&](const Tensor& a, const Tensor& b) {
        auto av = bits(a), bv = bits(b);
        for (size_t i = 0; i < av.size(); ++i)
          if (std::memcmp(&av[i], &bv[i], sizeof(double)) != 0 &&
              !(std::isnan(av[i]) && std::isnan(bv[i])))
            return false;
        return true;
      };
      CHECK(same_bits(amax(x, {1}), at_hi));
      CHECK(same_bits(min(x, 1).first, at_lo));
      CHECK(same_bits(max(x, 1).first, at_hi));
    }
  }
}

TEST_CASE("logical and bitwise ops, against the same ops on the elements", "[ops]") {
  // Every pair of these, broadcast (3, 1) against (1, 4), in each integer dtype and bool.
  const std::vector<int64_t> p{0, 1, 5, 12}, q{0, 3, 6};
  for (DType dt : {DType::i64, DType::i32, DType::u8}) {
    INFO("dtype " << dt);
    Tensor a = from_vector<int64_t>(q).reshape({3, 1}).to(dt);
    Tensor b = from_vector<int64_t>(p).reshape({1, 4}).to(dt);
    std::vector<double> want_and, want_or, want_xor, want_land, want_lor, want_lxor;
    for (int64_t x : q)
      for (int64_t y : p) {
        want_and.push_back(double(x & y));
        want_or.push_back(double(x | y));
        want_xor.push_back(double(x ^ y));
        want_land.push_back(x && y);
        want_lor.push_back(x || y);
        want_lxor.push_back(bool(x) != bool(y));
      }
    CHECK((a & b).dtype() == dt);
    CHECK((a & b).to_vector<double>() == want_and);
    CHECK((a | b).to_vector<double>() == want_or);
    CHECK(bitwise_xor(a, b).to_vector<double>() == want_xor);
    CHECK(logical_and(a, b).dtype() == DType::boolean);
    CHECK(logical_and(a, b).to_vector<double>() == want_land);
    CHECK(a.logical_or(b).to_vector<double>() == want_lor);
    CHECK(logical_xor(a, b).to_vector<double>() == want_lxor);
  }
  // ~x: every bit flipped, in the tensor's own width.
  CHECK((~from_vector<int64_t>({0, 5, -7})).to_vector<int64_t>() ==
        std::vector<int64_t>{-1, -6, 6});
  CHECK((~from_vector<int32_t>({0, 5, -7})).to_vector<int32_t>() ==
        std::vector<int32_t>{-1, -6, 6});
  CHECK((~from_vector<int64_t>({0, 5, 255}).to(DType::u8)).to_vector<double>() ==
        std::vector<double>{255, 250, 0});
  // Bool masks, as libtorch code writes them.
  Tensor x = from_vector<float>({-2, -0.5, 0, 0.5, 2});
  CHECK(((x > -1.0) & (x < 1.0)).to_vector<bool>() ==
        std::vector<bool>{false, true, true, true, false});
  CHECK(((x < -1.0) | (x > 1.0)).to_vector<bool>() ==
        std::vector<bool>{true, false, false, false, true});
  CHECK(((x > 0.0) ^ (x >= 0.0)).to_vector<bool>() ==
        std::vector<bool>{false, false, true, false, false});
  CHECK((~(x > 0.0)).to_vector<bool>() == std::vector<bool>{true, true, true, false, false});
  CHECK((x > 0.0).bitwise_and(x < 1.0).dtype() == DType::boolean);
  // The logical ops take any dtype (nonzero is true, NaN included); the bitwise ones refuse floats.
  Tensor y = from_vector<float>({0, 1, 0, std::nanf(""), -3});
  CHECK(logical_and(x, y).to_vector<bool>() == std::vector<bool>{false, true, false, true, true});
  CHECK(logical_or(x, y).to_vector<bool>() == std::vector<bool>{true, true, false, true, true});
  CHECK(gt(x, 0.0).to_vector<bool>() == (x > 0.0).to_vector<bool>());
  CHECK_THROWS_WITH(x & y, Catch::Contains("integer or bool"));
  CHECK_THROWS_WITH(~x, Catch::Contains("integer or bool"));
  CHECK_THROWS_WITH(logical_and(x, Tensor()), Catch::Contains("logical_and"));
}

TEST_CASE("comparisons, where, argmax and extreme values", "[ops]") {
  Tensor a = from_vector<float>({1, 5, 3, 5}), b = from_vector<float>({2, 2, 3, 9});
  CHECK(gt(a, b).to_vector<bool>() == std::vector<bool>{false, true, false, false});
  CHECK(eq(a, b).to_vector<bool>() == std::vector<bool>{false, false, true, false});
  CHECK(le(a, b).to_vector<bool>() == std::vector<bool>{true, false, true, true});
  CHECK(logical_not(eq(a, b)).to_vector<bool>() == std::vector<bool>{true, true, false, true});
  CHECK(argmax(a).item<int64_t>() == 1);  // first of the tied maxima
  CHECK(where(gt(a, b), a, b).to_vector<float>() == std::vector<float>{2, 5, 3, 9});
  {
    // Every way the values can lie (dense, one number, strided), against an element loop.
    Generator gen(4);
    Tensor c = gt(randn({5, 33}, {}, &gen), zeros({}));
    Tensor x = randn({5, 33}, {}, &gen), y = randn({5, 33}, {}, &gen);
    Tensor xt = randn({33, 5}, {}, &gen).t(), one = full({}, 7.0);
    auto expected = [&](const Tensor& p, const Tensor& q) {
      auto cv = c.to_vector<bool>();
      auto pv = p.expand({5, 33}).contiguous().to_vector<float>();
      auto qv = q.expand({5, 33}).contiguous().to_vector<float>();
      for (size_t i = 0; i < cv.size(); ++i) pv[i] = cv[i] ? pv[i] : qv[i];
      return pv;
    };
    for (const auto& [p, q] : std::vector<std::pair<Tensor, Tensor>>{
             {x, y}, {x, one}, {one, y}, {one, full({}, -1.0)}, {xt, y}, {x, xt}}) {
      CHECK(where(c, p, q).to_vector<float>() == expected(p, q));
    }
  }
  CHECK(std::isnan(max(from_vector<float>({1, NAN, 3})).item<float>()));
  CHECK(maximum(a, b).to_vector<float>() == std::vector<float>{2, 5, 3, 9});
  auto [v, i] = min(from_vector<float>({4, 1, 1, 7}).reshape({2, 2}), 1);
  CHECK(v.to_vector<float>() == std::vector<float>{1, 1});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
}

TEST_CASE("reductions of empty and integer tensors", "[ops]") {
  CHECK(sum(zeros({0})).item<float>() == 0.0f);
  CHECK(std::isnan(mean(zeros({0})).item<float>()));
  CHECK_THROWS_AS(max(zeros({0})), Error);
  CHECK(sum(arange(5)).item<int64_t>() == 10);
  CHECK(sum(zeros({3, 0}), {1}).shape() == Shape{3});
}

TEST_CASE("integer arithmetic with negative scalars and alphas wraps as PyTorch's", "[ops]") {
  // PyTorch 1.13's values. A negative double converted to u8 directly is undefined (UBSan's
  // float-cast-overflow in the sanitizer build; a GPU gives 0): the scalar goes through int64.
  const Tensor a = from_vector<int64_t>({5, 1, 200}).to(DType::u8);
  const Tensor b = from_vector<int64_t>({7, 3, 100}).to(DType::u8);
  auto values = [](const Tensor& t) { return t.to(DType::i64).to_vector<int64_t>(); };
  using V = std::vector<int64_t>;
  CHECK(values(sub(a, b)) == V{254, 254, 100});
  CHECK(values(add(a, -3)) == V{2, 254, 197});
  CHECK(values(mul(a, -1)) == V{251, 255, 56});
  CHECK(values(sub(a, b, 2)) == V{247, 251, 0});
  CHECK(values(add(a, b, -2)) == V{247, 251, 0});
  const Tensor i = from_vector<int64_t>({5, -1}).to(DType::i32);
  CHECK(values(mul(i, -2.0)) == V{-10, 2});
  CHECK(values(add(i, -3.0)) == V{2, -4});
}

TEST_CASE("floats cast to u8 wrap through int64 as PyTorch's casts do", "[ops]") {
  // PyTorch 1.13's values (c10::convert goes through int64 for uint8: a negative float converted
  // to an unsigned type directly is undefined, and a GPU clamps it to 0).
  auto values = [](const Tensor& t) { return t.to(DType::i64).to_vector<int64_t>(); };
  using V = std::vector<int64_t>;
  const Tensor x = from_vector<double>({-1.0, -3.7, 300.0, 255.9, -0.5});
  for (DType dt : {DType::f64, DType::f32, DType::f16}) {
    INFO("from " << dt);
    CHECK(values(x.to(dt).to(DType::u8)) == V{255, 253, 44, 255, 0});
  }
  CHECK(values(x.to(DType::bf16).to(DType::u8)) == V{255, 253, 44, 0, 0});  // 255.9 is 256 in bf16
  CHECK(values(arange(-3.0, 3.0, 1.0, DType::u8)) == V{253, 254, 255, 0, 1, 2});
  CHECK(values(full({2}, -2.0, DType::u8)) == V{254, 254});
}

TEST_CASE("big sums are exact to double accumulation", "[ops]") {
  // 2^24 + 1 ones cannot be counted in f32 one by one; the double accumulator can.
  Tensor x = ones({(1 << 24) + 1});
  CHECK(sum(x).item<double>() == 16777216.0);  // the f32 result rounds to nearest even
  CHECK(sum(x.to(DType::f64)).item<double>() == 16777217.0);
}

TEST_CASE("matmul matches a naive triple loop for transposed operands", "[ops]") {
  Generator g(4);
  Tensor a = randn({37, 300}, DType::f64, &g), b = randn({300, 290}, DType::f64, &g);
  Tensor c = matmul(a.t().contiguous().t(), b.t().contiguous().t());  // column-major inputs
  auto av = a.to_vector<double>(), bv = b.to_vector<double>(), cv = c.to_vector<double>();
  double worst = 0;
  for (int i = 0; i < 37; ++i)
    for (int j = 0; j < 290; ++j) {
      double s = 0;
      for (int k = 0; k < 300; ++k) s += av[i * 300 + k] * bv[k * 290 + j];
      worst = std::max(worst, std::fabs(s - cv[i * 290 + j]));
    }
  CHECK(worst < 1e-10);
}

TEST_CASE("f32 matmul of every operand layout matches f64", "[ops]") {
  // The packed GEMM copies each operand into panels of 8 rows and 48 columns, whole panels
  // through 8 x 8 transposes, in slices of 1,024 along k, and computes edge tiles on one, two or
  // three 16-column vectors: shapes with whole and partial panels (edges of 16 and 32 columns
  // among them), depths past one slice and not a multiple of 8, each operand row-major or
  // transposed.
  struct Case {
    int64_t m, n, k;
  };
  for (Case c : {Case{37, 290, 1030}, Case{64, 96, 20}, Case{8, 48, 8}, Case{16, 100, 3},
                 Case{24, 64, 40}, Case{37, 80, 9}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO("m " << c.m << " n " << c.n << " k " << c.k << " ta " << ta << " tb " << tb);
        Generator g(c.m + c.k);
        Tensor a = randn({c.m, c.k}, {}, &g), b = randn({c.k, c.n}, {}, &g);
        Tensor a_op = ta ? a.t().contiguous().t() : a, b_op = tb ? b.t().contiguous().t() : b;
        Tensor ref = matmul(a.to(DType::f64), b.to(DType::f64));
        require_close(matmul(a_op, b_op), ref, 1e-4, 1e-4, "f32 matmul against f64");
        require_close(matmul(a_op * 3, b_op), ref * 3, 1e-4, 1e-4, "scaled operand");
      }
  }
}

TEST_CASE("integer matmul sums in its dtype, wrapping, as torch's CPU", "[ops]") {
  // Small whole numbers: every product and sum is exact in f64, the reference.
  Generator g(11);
  Tensor a = randint(-50, 50, {3, 5, 7}, DType::i64, &g),
         b = randint(-50, 50, {3, 7, 4}, DType::i64, &g);
  Tensor ref = matmul(a.to(DType::f64), b.to(DType::f64));
  for (DType dt : {DType::i64, DType::i32}) {
    INFO("dtype " << dt);
    Tensor x = a.to(dt), y = b.to(dt);
    Tensor c = matmul(x, y);
    REQUIRE(c.dtype() == dt);
    require_close(c.to(DType::f64), ref, 0, 0, "batched");
    // Transposed operands are read through their strides.
    require_close(matmul(x.transpose(1, 2).contiguous().transpose(1, 2),
                         y.transpose(1, 2).contiguous().transpose(1, 2))
                      .to(DType::f64),
                  ref, 0, 0, "transposed operands");
    require_close(mv(x[0], y[0].select(1, 2)).to(DType::f64), ref[0].select(1, 2), 0, 0, "mv");
  }
  // Overflow wraps: 16 * 16 in u8 is 0, and (2^62 + 2^62) in i64 is INT64_MIN.
  Tensor u = full({1, 2}, 16, DType::u8);
  CHECK(matmul(u, full({2, 1}, 16, DType::u8)).to_vector<uint8_t>() == std::vector<uint8_t>{0});
  CHECK(
      matmul(full({1, 2}, int64_t{1} << 31, DType::i64), full({2, 1}, int64_t{1} << 31, DType::i64))
          .to_vector<int64_t>() == std::vector<int64_t>{INT64_MIN});
  // An empty depth gives zeros.
  CHECK(matmul(zeros({2, 0}, DType::i32), zeros({0, 3}, DType::i32)).to_vector<int32_t>() ==
        std::vector<int32_t>(6, 0));
}

TEST_CASE("conv2d on an empty batch: an empty result, zero weight and bias gradients", "[ops]") {
  for (DType dt : {DType::f32, DType::f64}) {
    INFO("dtype " << dt);
    Tensor x = zeros({0, 3, 9, 8}, TensorOptions(dt)).set_requires_grad();
    Tensor w = ones({4, 3, 3, 3}, TensorOptions(dt)).set_requires_grad();
    Tensor b = ones({4}, TensorOptions(dt)).set_requires_grad();
    Tensor y = conv2d(x, w, b, 1, 1);
    REQUIRE(y.shape() == Shape{0, 4, 9, 8});
    sum(y).backward();
    REQUIRE(x.grad().shape() == x.shape());
    require_close(w.grad(), zeros({4, 3, 3, 3}, TensorOptions(dt)), 0, 0, "weight gradient");
    require_close(b.grad(), zeros({4}, TensorOptions(dt)), 0, 0, "bias gradient");
  }
}

TEST_CASE("f32 convolution paths agree with the f64 reference path", "[ops]") {
  // f32 3x3 convolutions of stride 1 and 2 take direct kernels on AVX-512 and AVX2 machines (stride
  // 1 takes Winograd F(2x2, 3x3) unless the map is large, the 100x100 case, or on AVX-512 has
  // fewer than 32 input channels) where the output has 32 positions or more, and their direct
  // weight gradient where a chunk of samples (16 at most) has 64 or more (hence the batches of
  // 21 to 29 on small maps); f64 always takes
  // im2col + GEMM. Shapes cover narrow and wide maps (Winograd's 1, 2 or 4 tile rows per vector,
  // with a last vector of tile rows partly past the map, and several samples per GEMM with a
  // last group of fewer: batches of 20 and 24, so that a thread's share of samples holds more
  // than one), partial vectors, channel counts that
  // are not multiples of 8 or 16, odd input channel counts, every padding, both strides, odd
  // output sizes (Winograd's half tiles) and odd padded sizes (uneven parity planes).
  struct Case { int64_t n, ci, co, h, w, pad, stride; };
  for (Case c : {Case{2, 3, 12, 9, 20, 1, 1},    Case{1, 16, 16, 28, 28, 1, 1},
                 Case{3, 5, 7, 12, 13, 0, 1},    Case{2, 4, 9, 6, 40, 2, 1},
                 Case{2, 8, 8, 14, 14, 1, 1},    Case{2, 6, 10, 15, 17, 1, 2},
                 Case{2, 16, 32, 28, 28, 1, 2},  Case{29, 5, 12, 14, 13, 0, 2},
                 Case{25, 3, 8, 9, 11, 2, 2},    Case{21, 4, 8, 7, 7, 1, 1},
                 Case{1, 16, 8, 100, 100, 1, 1}, Case{29, 3, 5, 6, 6, 1, 1},
                 Case{1, 4, 8, 11, 9, 1, 1},     Case{3, 8, 16, 13, 15, 1, 1},
                 Case{25, 32, 32, 7, 6, 1, 1},   Case{1, 40, 36, 11, 9, 1, 1},
                 Case{24, 64, 64, 7, 7, 1, 1},   Case{2, 32, 40, 13, 15, 1, 1},
                 Case{1, 32, 32, 28, 28, 1, 1},  Case{20, 32, 16, 17, 19, 1, 1}}) {
    INFO("n " << c.n << " ci " << c.ci << " co " << c.co << " h " << c.h << " w " << c.w
              << " pad " << c.pad << " stride " << c.stride);
    Generator g(c.ci * 100 + c.w);
    Tensor x = randn({c.n, c.ci, c.h, c.w}, DType::f64, &g);
    Tensor w = randn({c.co, c.ci, 3, 3}, DType::f64, &g);
    Tensor b = randn({c.co}, DType::f64, &g);
    Tensor x32 = x.to(DType::f32).detach().set_requires_grad(), w32 = w.to(DType::f32).detach().set_requires_grad();
    Tensor b32 = b.to(DType::f32).detach().set_requires_grad();
    x.set_requires_grad();
    w.set_requires_grad();
    b.set_requires_grad();
    Tensor y = conv2d(x, w, b, c.stride, c.pad), y32 = conv2d(x32, w32, b32, c.stride, c.pad);
    require_close(y32, y, 1e-4, 1e-4, "output");
    Tensor gy = randn(y.shape(), DType::f64, &g);
    y.backward(gy);
    y32.backward(gy.to(DType::f32));
    require_close(x32.grad(), x.grad(), 1e-4, 1e-4, "input gradient");
    require_close(w32.grad(), w.grad(), 1e-4, 1e-3, "weight gradient");
    require_close(b32.grad(), b.grad(), 1e-4, 1e-3, "bias gradient");
  }
}

TEST_CASE("sums over leading dims (no transposed copy on the CPU) match the sums written out",
          "[ops]") {
  // Reduced dims that lead a contiguous tensor take the column sums (sum_columns); others the
  // row sums of a transposed copy. Both against a loop in f64 (i64 exactly), with keepdim,
  // several leading dims, a column count past one block (256) and a narrow dtype.
  Generator gen(3);
  struct Case {
    Shape shape;
    Shape dims;
  };
  for (const Case& c : {Case{{7, 300}, {0}}, Case{{3, 5, 600}, {0, 1}}, Case{{4, 3, 2}, {0}},
                        Case{{2, 513}, {-2}}, Case{{300, 7}, {1}}}) {
    INFO(shape_str(c.shape) << " over " << shape_str(c.dims));
    Tensor x = randn(c.shape, DType::f64, &gen);
    const auto xv = x.to_vector<double>();
    // x as (lead, rest): the reduced dims are the first ones (leading) or the last ones
    const bool leading = c.dims[0] == 0 || c.dims[0] == -static_cast<int64_t>(c.shape.size());
    const size_t split = leading ? c.dims.size() : c.shape.size() - c.dims.size();
    int64_t lead = 1, rest = 1;
    for (size_t d = 0; d < c.shape.size(); ++d) (d < split ? lead : rest) *= c.shape[d];
    std::vector<double> want(static_cast<size_t>(leading ? rest : lead), 0.0);
    for (int64_t i = 0; i < lead; ++i)
      for (int64_t j = 0; j < rest; ++j)
        want[static_cast<size_t>(leading ? j : i)] += xv[static_cast<size_t>(i * rest + j)];
    for (bool keepdim : {false, true}) {
      const auto got = sum(x.to(DType::f32), c.dims, keepdim).to_vector<float>();
      REQUIRE(got.size() == want.size());
      for (size_t k = 0; k < got.size(); ++k)
        REQUIRE(got[k] == Approx(want[k]).epsilon(1e-6).margin(1e-5));
    }
    const auto got64 = sum(x, c.dims).to_vector<double>();
    for (size_t k = 0; k < got64.size(); ++k) REQUIRE(got64[k] == Approx(want[k]).epsilon(1e-12));
    Tensor xi = mul(x, 100.0).to(DType::i64);
    const auto iv = xi.to_vector<int64_t>();
    std::vector<int64_t> want_i(want.size(), 0);
    for (int64_t i = 0; i < lead; ++i)
      for (int64_t j = 0; j < rest; ++j)
        want_i[static_cast<size_t>(leading ? j : i)] += iv[static_cast<size_t>(i * rest + j)];
    CHECK(sum(xi, c.dims).to_vector<int64_t>() == want_i);
    // bf16 sums as f32 does (runs of 8 per lane in f32, exact for these values, then f64) and
    // rounds once: the f32 sum of the same values, rounded
    Tensor xb = x.to(DType::bf16);
    CHECK(equal(sum(xb, c.dims), sum(xb.to(DType::f64), c.dims).to(DType::f32).to(DType::bf16)));
  }
}

TEST_CASE("f32 sums of any length err by at most 7 ulps of the sum of |x|", "[ops]") {
  // f32 sums run 8 elements per lane in f32, then add the runs in f64 (src/cpu/reduce.cpp): the
  // bound holds for every length, rows (lane_sum) and columns (sum_columns) alike, where a
  // running f32 sum's error grows with the length. Lengths around the lanes (32), the runs
  // (256) and the parallel blocks (8192); magnitudes over 2^-20..2^20, both signs.
  Generator gen(5);
  for (int64_t n : {1, 7, 31, 32, 33, 255, 256, 257, 1000, 8191, 8192, 8193, 100003}) {
    INFO("n = " << n);
    const Tensor x =
        mul(randn({n}, DType::f32, &gen), pow(2.0, randint(-20, 21, {n}, DType::f32, &gen)));
    const auto xv = x.to_vector<float>();
    double exact = 0, total_abs = 0;
    for (float v : xv) {
      exact += v;
      total_abs += std::fabs(v);
    }
    const double bound = 7 * std::ldexp(total_abs, -24) + std::ldexp(std::fabs(exact), -24);
    CHECK(std::fabs(sum(x).item<float>() - exact) <= bound);
    // the same values as the one column of an (n, 1) tensor and the first of an (n, 3) one
    CHECK(std::fabs(sum(reshape(x, {n, 1}), {0}).item<float>() - exact) <= bound);
    const Tensor wide = cat({reshape(x, {n, 1}), ones({n, 2})}, 1);
    CHECK(std::fabs(sum(wide, {0}).to_vector<float>()[0] - exact) <= bound);
  }
  // 2^21 times 1 + 3 * 2^-10 is 2^21 + 3 * 2^11, exactly: runs of 8 are exact and so is their
  // f64 sum. Summed in f32 lanes, each lane's 2^16 additions would round up by a quarter ulp
  // once its sum passes 2^15 (an error near 1e-3 of the sum).
  const int64_t n = int64_t{1} << 21;
  CHECK(sum(full({n}, 1.0029296875)).item<float>() == 2103296.0f);
  CHECK(sum(full({n, 1}, 1.0029296875), {0}).item<float>() == 2103296.0f);
}

TEST_CASE("reductions of transposed views (in their memory order) match the dense copy's",
          "[ops]") {
  Generator gen(11);
  const Tensor x = randn({6, 5, 70}, DType::f32, &gen);
  struct Case {
    Shape perm, dims;
    bool keepdim;
  };
  for (const Case& c :
       {Case{{2, 1, 0}, {2}, false}, Case{{2, 1, 0}, {1, 2}, true}, Case{{1, 2, 0}, {0}, false},
        Case{{0, 2, 1}, {1}, true}, Case{{2, 0, 1}, {0, 2}, false}, Case{{1, 0, 2}, {1}, false}}) {
    INFO("permute " << shape_str(c.perm) << ", dims " << shape_str(c.dims));
    const Tensor v = x.permute(c.perm), dense = v.contiguous();
    const Tensor got = sum(v, c.dims, c.keepdim), want = sum(dense, c.dims, c.keepdim);
    REQUIRE(got.shape() == want.shape());
    tandem::testing::require_close(got, want, 1e-5, 1e-5, "sum");
    CHECK(equal(amax(v, c.dims, c.keepdim), amax(dense, c.dims, c.keepdim)));
    tandem::testing::require_close(mean(v, c.dims, c.keepdim), mean(dense, c.dims, c.keepdim), 1e-5,
                                   1e-6, "mean");
    if (c.dims.size() == 1) {
      CHECK(equal(argmax(v, c.dims[0], c.keepdim), argmax(dense, c.dims[0], c.keepdim)));
      CHECK(equal(v.max(c.dims[0]).second, dense.max(c.dims[0]).second));
    }
  }
  // The transpose's gradient is the dense one's.
  Tensor a = x.detach().set_requires_grad(), b = x.detach().set_requires_grad();
  sum(mul(sum(a.transpose(0, 2), {1}), 2.0)).backward();
  sum(mul(sum(b.transpose(0, 2).contiguous(), {1}), 2.0)).backward();
  CHECK(equal(a.grad(), b.grad()));
}

namespace {
// The gradient of sum(f(x)) at x (each element's derivative), from the op's backward.
Tensor grad_of(const Tensor& t, const std::function<Tensor(const Tensor&)>& f) {
  Tensor x = t.detach().set_requires_grad();
  sum(f(x)).backward();
  return x.grad();
}
}  // namespace

TEST_CASE(
    "f32 exp, sin, cos, tan, atan, atan2, erf, the logarithms, expm1, sigmoid, tanh, gelu, silu, "
    "elu, "
    "softplus, mish and log_sigmoid (vectorized on AVX2 and AVX-512) against libm in f64",
    "[ops]") {
  // A dense sweep over [-110, 110] and [-3, 3] plus special values, forward, and gelu's two
  // forms' derivatives: within a few ulp of the f64 values (gelu: plus 1.5e-7 |x|, the error of
  // the erf approximation times x / 2, and f32's own cancellation in 1 + erf(x / sqrt 2); the
  // tanh form's derivative cancels in 1 - tanh^2 times a factor growing with x^2).
  std::vector<float> xs;
  for (double x = -110; x <= 110; x += 0.0037) xs.push_back(static_cast<float>(x));
  for (double x = -3; x <= 3; x += 1e-5) xs.push_back(static_cast<float>(x));
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f,       -0.0f, 1e-30f,      -1e-30f,    1e-40f,     0.625f,      -0.625f,
                  0.6249999f, 88.7f, -87.5f,      -103.9f,    9.0f,       -9.5f,       inf,
                  -inf,       -1.0f, 1.0f,        1e-45f,     1.0000001f, 0.99999994f, 8191.9f,
                  -8192.5f,   1e6f,  3.14159274f, 1.57079637f})
    xs.push_back(x);
  const auto n = static_cast<int64_t>(xs.size());
  auto ulp = [](double r) {
    return std::fabs(r) < 1.1754943508222875e-38 ? 1.401298464324817e-45
                                                 : std::ldexp(1.0, std::ilogb(r) - 23);
  };
  const double s2 = std::sqrt(2.0), k = std::sqrt(2.0 / M_PI), c = 0.044715;
  auto phi = [](double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); };
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    std::function<double(double)> ref;
    double ulps, per_x;  // allowed: ulps * ulp(ref) + per_x * |x| (* (1 + x^2 / 8) with `cubic`)
    bool cubic = false;
    // plus this much absolute: silu far below 0 is x e^x, whose e^x is a subnormal with few
    // bits below x = -87 (PyTorch's x / (1 + e^-x) gives 0 there)
    double absolute = 0;
  };
  const std::vector<Case> cases = {
      {"exp", [](const Tensor& t) { return exp(t); }, [](double x) { return std::exp(x); }, 2, 0},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, 3, 0},
      {"tanh", [](const Tensor& t) { return tanh(t); }, [](double x) { return std::tanh(x); }, 3,
       0},
      {"gelu", [](const Tensor& t) { return gelu(t); },
       [&](double x) { return 0.5 * x * (1 + std::erf(x / s2)); }, 3, 1.5e-7},
      {"gelu tanh form", [](const Tensor& t) { return gelu(t, "tanh"); },
       [&](double x) { return 0.5 * x * (1 + std::tanh(k * (x + c * x * x * x))); }, 4, 1e-7},
      {"gelu's derivative",
       [](const Tensor& t) {
         Tensor x = t.detach().set_requires_grad();
         sum(gelu(x)).backward();
         return x.grad();
       },
       [&](double x) { return 0.5 * (1 + std::erf(x / s2)) + x * phi(x); }, 4, 1.5e-7},
      {"gelu tanh form's derivative",
       [](const Tensor& t) {
         Tensor x = t.detach().set_requires_grad();
         sum(gelu(x, "tanh")).backward();
         return x.grad();
       },
       [&](double x) {
         const double th = std::tanh(k * (x + c * x * x * x));
         return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * c * x * x);
       },
       4, 2e-7, true},
      {"silu", [](const Tensor& t) { return silu(t); },
       [](double x) { return x / (1 + std::exp(-x)); }, 4, 0, false, 1e-36},
      {"silu's derivative",
       [](const Tensor& t) {
         Tensor x = t.detach().set_requires_grad();
         sum(silu(x)).backward();
         return x.grad();
       },
       [](double x) {
         const double s = 1 / (1 + std::exp(-x));
         return s * (1 + x * (1 - s));
       },
       4, 2e-7, false, 1e-36},
      {"elu", [](const Tensor& t) { return elu(t, 1.0, 1.0); },
       [](double x) { return x > 0 ? x : std::expm1(x); }, 4, 0},
      {"elu's derivative",
       [](const Tensor& t) { return grad_of(t, [](const Tensor& x) { return elu(x, 1.0, 1.0); }); },
       [](double x) { return x > 0 ? 1.0 : std::exp(x); }, 3, 0},
      {"softplus", [](const Tensor& t) { return softplus(t); },
       [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }, 5, 0, false, 1e-36},
      {"softplus beta 2 threshold 3",  // 2 x > 3 is linear, so the switch lies at 1.5
       [](const Tensor& t) { return softplus(t, 2.0, 3.0); },
       [](double x) { return 2 * x > 3 ? x : std::log1p(std::exp(2 * x)) / 2; }, 5, 0, false,
       1e-36},
      {"softplus's derivative",
       [](const Tensor& t) { return grad_of(t, [](const Tensor& x) { return softplus(x); }); },
       [](double x) { return x > 20 ? 1.0 : 1 / (1 + std::exp(-x)); }, 3, 0},
      {"sin", [](const Tensor& t) { return sin(t); }, [](double x) { return std::sin(x); }, 2,
       2e-10},
      {"cos", [](const Tensor& t) { return cos(t); }, [](double x) { return std::cos(x); }, 2,
       2e-10},
      {"tan", [](const Tensor& t) { return tan(t); }, [](double x) { return std::tan(x); }, 4,
       2e-10},
      {"atan", [](const Tensor& t) { return atan(t); }, [](double x) { return std::atan(x); }, 3,
       0},
      // erf above 1 is A&S 7.1.26, within 1.5e-7 absolute (its use inside gelu)
      {"erf", [](const Tensor& t) { return erf(t); }, [](double x) { return std::erf(x); }, 3, 0,
       false, 1.5e-7},
      {"log", [](const Tensor& t) { return log(t); }, [](double x) { return std::log(x); }, 1.5, 0},
      {"log2", [](const Tensor& t) { return log2(t); }, [](double x) { return std::log2(x); }, 2,
       0},
      {"log10", [](const Tensor& t) { return log10(t); }, [](double x) { return std::log10(x); }, 2,
       0},
      {"log1p", [](const Tensor& t) { return log1p(t); }, [](double x) { return std::log1p(x); }, 3,
       0},
      {"expm1", [](const Tensor& t) { return expm1(t); }, [](double x) { return std::expm1(x); }, 4,
       0},
      {"log_sigmoid", [](const Tensor& t) { return log_sigmoid(t); },
       [](double x) { return x < 0 ? x - std::log1p(std::exp(x)) : -std::log1p(std::exp(-x)); }, 4,
       0},
      {"log_sigmoid's derivative",
       [](const Tensor& t) { return grad_of(t, [](const Tensor& x) { return log_sigmoid(x); }); },
       [](double x) { return 1 / (1 + std::exp(x)); }, 4, 0, false, 1e-36},
      {"mish", [](const Tensor& t) { return mish(t); },
       [](double x) { return x * std::tanh(x > 20 ? x : std::log1p(std::exp(x))); }, 6, 0, false,
       1e-36},
      // t + x s (1 - t^2) cancels near x = -1.2 (a root): slack in |x|
      {"mish's derivative",
       [](const Tensor& t) { return grad_of(t, [](const Tensor& x) { return mish(x); }); },
       [](double x) {
         const double t = std::tanh(x > 20 ? x : std::log1p(std::exp(x)));
         return t + x / (1 + std::exp(-x)) * (1 - t * t);
       },
       6, 4e-7, false, 1e-36}};
  for (const Case& cs : cases) {
    INFO(cs.name);
    const auto got = cs.op(from_vector(xs, {n})).to_vector<float>();
    REQUIRE(got.size() == xs.size());
    std::string first_miss;  // one message for the first element out of bounds
    int64_t misses = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double x = xs[i], r = cs.ref(x), g = got[i];
      bool ok;
      if (std::isnan(r)) {
        ok = std::isnan(g);
      } else if (std::fabs(r) >= 3.4028234663852886e38 || std::isinf(x)) {
        ok = static_cast<float>(r) == got[i];              // the f32 limit (+-inf, +-1, 0)
      } else if (std::fabs(r) < 1.1754943508222875e-38) {  // subnormal: 1 / (1 + inf) may be 0
        ok = std::fabs(g - r) <= 1.1754943508222875e-38;
      } else {
        // f32 cancels in 1 + erf, 1 + tanh and 1 - tanh^2 (any f32 evaluation does)
        const double slack = cs.per_x * std::fabs(x) * (cs.cubic ? 1 + x * x / 8 : 1);
        ok = std::fabs(g - r) <= cs.ulps * ulp(r) + slack + cs.absolute;
      }
      if (!ok && misses++ == 0)
        first_miss =
            "x = " + std::to_string(x) + ": " + std::to_string(g) + ", want " + std::to_string(r);
    }
    INFO(first_miss);
    CHECK(misses == 0);
  }
  {
    // atan2 over a grid of both signs and magnitudes 1e-30..1e30, with zeros of both signs,
    // infinities and NaN: within 4 ulp of the f64 value, the exact quadrant values exactly.
    std::vector<float> ys, xv;
    std::vector<float> mags{0.0f, 1e-30f, 3e-8f, 0.1f, 0.7f, 1.0f, 1.3f, 2.5f, 7.0f, 1e4f, 1e30f};
    for (double v = 0.01; v < 50; v *= 1.07) mags.push_back(static_cast<float>(v));
    mags.push_back(inf);
    for (float my : mags)
      for (float mx : mags)
        for (float sy : {1.0f, -1.0f})
          for (float sx : {1.0f, -1.0f}) {
            ys.push_back(sy * my);
            xv.push_back(sx * mx);
          }
    ys.push_back(NAN), xv.push_back(1.0f);
    ys.push_back(1.0f), xv.push_back(NAN);
    const auto m = static_cast<int64_t>(ys.size());
    const auto got = atan2(from_vector(ys, {m}), from_vector(xv, {m})).to_vector<float>();
    int64_t misses = 0;
    std::string first_miss;
    for (size_t i = 0; i < ys.size(); ++i) {
      const double r = std::atan2(double(ys[i]), double(xv[i])), g = got[i];
      const bool ok = std::isnan(r) ? std::isnan(g)
                      : r == 0      ? g == 0 && std::signbit(g) == std::signbit(r)
                                    : std::fabs(g - r) <= 4 * ulp(r);
      if (!ok && misses++ == 0)
        first_miss = "atan2(" + std::to_string(ys[i]) + ", " + std::to_string(xv[i]) +
                     "): " + std::to_string(g) + ", want " + std::to_string(r);
    }
    INFO(first_miss);
    CHECK(misses == 0);
    CHECK(atan2(from_vector(std::vector<float>{0.0f}, {1}),
                from_vector(std::vector<float>{-1.0f}, {1}))
              .to_vector<float>()[0] == std::atan2(0.0f, -1.0f));
  }
  CHECK(std::signbit(tanh(from_vector(std::vector<float>{-0.0f}, {1})).to_vector<float>()[0]));
  // exp's results below f32's normal range are the subnormals, within 2 of their steps
  const auto tiny =
      exp(from_vector(std::vector<float>{-90.0f, -100.0f, -103.0f}, {3})).to_vector<float>();
  for (size_t i = 0; i < 3; ++i)
    CHECK(std::fabs(tiny[i] - std::exp(std::vector<double>{-90.0, -100.0, -103.0}[i])) <= 2.9e-45);
  CHECK(std::isnan(exp(from_vector(std::vector<float>{NAN}, {1})).to_vector<float>()[0]));
}

TEST_CASE("f32 fmod and remainder (vectorized on AVX2 and AVX-512) are libm's, bit for bit",
          "[ops]") {
  // Pairs over magnitudes 1e-44 (subnormal) to 3e38 and both signs, quotients below and above
  // 2^28 (the vector path's bound), exact multiples, zeros, infinities and NaN; f32 contiguous
  // and with b broadcast, f64 (the scalar path) alike.
  std::vector<float> mags{0.0f,
                          1e-44f,
                          1e-38f,
                          3e-8f,
                          0.1f,
                          0.5f,
                          1.0f,
                          1.5f,
                          3.0f,
                          7.0f,
                          1e3f,
                          16777216.0f,
                          268435456.0f,
                          3e9f,
                          1e30f,
                          3e38f,
                          std::numeric_limits<float>::infinity()};
  for (double v = 1e-3; v < 1e9; v *= 1.37) mags.push_back(static_cast<float>(v));
  std::vector<float> as, bs;
  for (float ma : mags)
    for (float mb : mags)
      for (float sa : {1.0f, -1.0f})
        for (float sb : {1.0f, -1.0f}) {
          as.push_back(sa * ma);
          bs.push_back(sb * mb);
        }
  as.push_back(NAN), bs.push_back(2.0f);
  as.push_back(2.0f), bs.push_back(NAN);
  const auto m = static_cast<int64_t>(as.size());
  const Tensor a = from_vector(as, {m}), b = from_vector(bs, {m});
  auto remainder_of = [](float x, float y) {  // Python's %: fmod moved by y where signs differ
    const float r = std::fmod(x, y);
    return r != 0.0f && ((r < 0.0f) != (y < 0.0f)) ? r + y : r;
  };
  auto same = [](float g, float r) {
    return std::isnan(r) ? std::isnan(g) : std::memcmp(&g, &r, sizeof g) == 0;
  };
  const auto fm = fmod(a, b).to_vector<float>(), rm = remainder(a, b).to_vector<float>();
  const auto fm64 = fmod(a.to(DType::f64), b.to(DType::f64)).to_vector<double>();
  int64_t misses = 0;
  std::string first_miss;
  for (size_t i = 0; i < as.size(); ++i) {
    const float f = std::fmod(as[i], bs[i]), r = remainder_of(as[i], bs[i]);
    const double f64 = std::fmod(double(as[i]), double(bs[i]));
    if ((!same(fm[i], f) || !same(rm[i], r) ||
         !(std::isnan(f64) ? std::isnan(fm64[i]) : fm64[i] == f64)) &&
        misses++ == 0)
      first_miss = "fmod(" + std::to_string(as[i]) + ", " + std::to_string(bs[i]) +
                   "): " + std::to_string(fm[i]) + ", remainder " + std::to_string(rm[i]) +
                   "; want " + std::to_string(f) + ", " + std::to_string(r);
  }
  INFO(first_miss);
  CHECK(misses == 0);
  // b broadcast (a number, as x % 3 is written): the same values as the pairs'
  const Tensor big = from_vector(as, {m}).mul(1.7);
  const auto by3 = fmod(big, 3.0).to_vector<float>(),
             by3r = remainder(big, -3.0).to_vector<float>();
  const auto bigv = big.to_vector<float>();
  int64_t broadcast_misses = 0;
  for (size_t i = 0; i < bigv.size(); ++i)
    broadcast_misses +=
        !same(by3[i], std::fmod(bigv[i], 3.0f)) || !same(by3r[i], remainder_of(bigv[i], -3.0f));
  CHECK(broadcast_misses == 0);
}

TEST_CASE("conv2d on small maps (im2col through its table of offsets) matches its definition",
          "[ops][conv]") {
  // Output rows shorter than 8 take im2col's table of source offsets, in f64 (always im2col) as in
  // f32 below 32 output positions: the forward and both gradients against the sums written out,
  // with strides, dilation, unequal pads, groups, non-square maps and a 1x1 map; and 1x1
  // convolutions of several samples (their planes copied side by side), small and wide.
  struct Case {
    int64_t n, ci, co, h, w, kh, kw, groups;
    Int2 s, p, d;
  };
  for (Case c : {Case{2, 4, 6, 5, 6, 3, 3, 1, Int2(2, 1), Int2(1, 2), Int2(1, 2)},
                 Case{3, 4, 4, 7, 4, 3, 2, 2, Int2(1, 2), Int2(2, 0), Int2(2, 1)},
                 Case{2, 3, 5, 1, 1, 3, 3, 1, Int2(1, 1), Int2(1, 1), Int2(1, 1)},
                 Case{1, 2, 3, 4, 4, 3, 3, 1, Int2(1, 1), Int2(0, 0), Int2(1, 1)},
                 Case{5, 4, 6, 3, 3, 1, 1, 2, Int2(1, 1), Int2(0, 0), Int2(1, 1)},
                 Case{3, 3, 4, 9, 10, 1, 1, 1, Int2(1, 1), Int2(0, 0), Int2(1, 1)}}) {
    INFO(c.n << "x" << c.ci << "x" << c.h << "x" << c.w << " -> " << c.co << ", " << c.kh << "x"
             << c.kw << ", groups " << c.groups);
    Generator gen(c.h * 10 + c.w);
    const int64_t cig = c.ci / c.groups, cog = c.co / c.groups;
    Tensor x = randn({c.n, c.ci, c.h, c.w}, DType::f64, &gen).set_requires_grad();
    Tensor w = randn({c.co, cig, c.kh, c.kw}, DType::f64, &gen).set_requires_grad();
    Tensor y = conv2d(x, w, Tensor(), c.s, c.p, c.d, c.groups);
    const int64_t ho = y.size(2), wo = y.size(3);
    REQUIRE(ho == (c.h + 2 * c.p.h - c.d.h * (c.kh - 1) - 1) / c.s.h + 1);
    REQUIRE(wo == (c.w + 2 * c.p.w - c.d.w * (c.kw - 1) - 1) / c.s.w + 1);
    Tensor gy = randn(y.shape(), DType::f64, &gen);
    y.backward(gy);
    const auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), gv = gy.to_vector<double>();
    std::vector<double> want_y(gv.size(), 0.0), want_dx(xv.size(), 0.0), want_dw(wv.size(), 0.0);
    for (int64_t b = 0; b < c.n; ++b)
      for (int64_t o = 0; o < c.co; ++o)
        for (int64_t i = 0; i < cig; ++i)
          for (int64_t r = 0; r < ho; ++r)
            for (int64_t q = 0; q < wo; ++q)
              for (int64_t a = 0; a < c.kh; ++a)
                for (int64_t e = 0; e < c.kw; ++e) {
                  const int64_t ih = r * c.s.h - c.p.h + a * c.d.h,
                                iw = q * c.s.w - c.p.w + e * c.d.w;
                  if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) continue;
                  const auto xi =
                      static_cast<size_t>(((b * c.ci + o / cog * cig + i) * c.h + ih) * c.w + iw);
                  const auto wi = static_cast<size_t>(((o * cig + i) * c.kh + a) * c.kw + e);
                  const auto yi = static_cast<size_t>(((b * c.co + o) * ho + r) * wo + q);
                  want_y[yi] += xv[xi] * wv[wi];
                  want_dx[xi] += gv[yi] * wv[wi];
                  want_dw[wi] += gv[yi] * xv[xi];
                }
    auto check = [](const Tensor& got, const std::vector<double>& want, const char* what) {
      INFO(what);
      const auto g = got.to_vector<double>();
      REQUIRE(g.size() == want.size());
      for (size_t k = 0; k < g.size(); ++k) REQUIRE(g[k] == Approx(want[k]).margin(1e-12));
    };
    check(y, want_y, "output");
    check(x.grad(), want_dx, "input gradient");
    check(w.grad(), want_dw, "weight gradient");
  }
}

TEST_CASE("conv_transpose2d with an output_padding of a stride or more matches its definition",
          "[ops][conv]") {
  // Allowed below the dilation; computed as the transposed convolution of the input with zero
  // rows added. Against the definition: x[n, ci, i, j] * w[ci, co, a, b] lands on
  // out[n, group(ci) * C_out/groups + co, i * s - p + a * d, j * s - p + b * d].
  Generator gen(31);
  const int64_t n = 2, ci = 4, h = 3, w = 4, groups = 2, cog = 3, kh = 3, kw = 2;
  const Int2 s(1, 2), p(1, 0), op(1, 1), d(2, 1);
  Tensor x = randn({n, ci, h, w}, DType::f64, &gen), wt = randn({ci, cog, kh, kw}, DType::f64, &gen);
  Tensor y = conv_transpose2d(x, wt, Tensor(), s, p, op, groups, d);
  const int64_t ho = (h - 1) * s.h - 2 * p.h + d.h * (kh - 1) + op.h + 1;
  const int64_t wo = (w - 1) * s.w - 2 * p.w + d.w * (kw - 1) + op.w + 1;
  REQUIRE(y.shape() == Shape{n, groups * cog, ho, wo});
  std::vector<double> want(static_cast<size_t>(y.numel()), 0.0);
  const auto xv = x.to_vector<double>(), wv = wt.to_vector<double>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t c = 0; c < ci; ++c)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j)
          for (int64_t o = 0; o < cog; ++o)
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t e = 0; e < kw; ++e) {
                const int64_t r = i * s.h - p.h + a * d.h, q = j * s.w - p.w + e * d.w;
                if (r < 0 || r >= ho || q < 0 || q >= wo) continue;
                const int64_t oc = c / (ci / groups) * cog + o;
                want[static_cast<size_t>(((b * groups * cog + oc) * ho + r) * wo + q)] +=
                    xv[static_cast<size_t>(((b * ci + c) * h + i) * w + j)] *
                    wv[static_cast<size_t>(((c * cog + o) * kh + a) * kw + e)];
              }
  const auto got = y.to_vector<double>();
  for (size_t k = 0; k < got.size(); ++k) REQUIRE(got[k] == Approx(want[k]).margin(1e-12));
}

TEST_CASE("diagonal, unfold and meshgrid are views; median's NaN rows and empty input", "[ops]") {
  // Views share the input's storage, as torch's: a write through one shows in the input.
  Tensor m = zeros({3, 4});
  diagonal(m, 1).fill_(7.0);
  CHECK(m.to_vector<float>() == std::vector<float>{0, 7, 0, 0, 0, 0, 7, 0, 0, 0, 0, 7});
  Tensor x = arange(6.0, DType::f32);
  Tensor w = x.unfold(0, 3, 2);  // windows (0 1 2) and (2 3 4): element 2 in both
  CHECK(w.shape() == Shape{2, 3});
  CHECK(w.to_vector<float>() == std::vector<float>{0, 1, 2, 2, 3, 4});
  w.select(0, 1).select(0, 0).fill_(-1.0);
  CHECK(x.to_vector<float>() == std::vector<float>{0, 1, -1, 3, 4, 5});
  CHECK(w.select(0, 0).select(0, 2).item<float>() == -1.0f);
  auto grids = meshgrid({arange(2.0, DType::f32), arange(3.0, DType::f32)}, "xy");
  CHECK(grids[0].shape() == Shape{3, 2});
  CHECK(grids[0].to_vector<float>() == std::vector<float>{0, 1, 0, 1, 0, 1});
  CHECK(grids[1].to_vector<float>() == std::vector<float>{0, 0, 1, 1, 2, 2});
  // A row with NaN: NaN at its first NaN, as torch; the other row's lower median.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor t = from_vector<float>({1, nan, 3, nan, 0, 4, 2, 3, 1, 0}).reshape({2, 5});
  auto [values, indices] = t.median(1);
  CHECK(std::isnan(values.to_vector<float>()[0]));
  CHECK(values.to_vector<float>()[1] == 2.0f);
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(std::isnan(t.median().item<float>()));
  CHECK(std::isnan(zeros({0}).median().item<float>()));
  CHECK(from_vector<int64_t>({3, 1, 2, 4}).median().item<int64_t>() == 2);
  // kthvalue counts NaN as the largest.
  CHECK(t.kthvalue(3, 1).first.to_vector<float>() == std::vector<float>{3, 2});
  // repeat_interleave of counts alone: the indices, 1-d however many.
  CHECK(repeat_interleave(from_vector<int64_t>({2, 0, 1})).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 0, 2});
  CHECK(repeat_interleave(from_vector<int64_t>({0, 1, 0})).shape() == Shape{1});
}

TEST_CASE(
    "NaN through hardshrink, threshold and gaussian_nll_loss; std's gradient where the "
    "variance is 0",
    "[ops]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = from_vector<float>({nan, 0.3f, -2.0f});
  // As torch's: a NaN stays NaN.
  const std::vector<float> shrunk = hardshrink(x, 0.5).to_vector<float>();
  CHECK(std::isnan(shrunk[0]));
  CHECK(shrunk[1] == 0.0f);
  CHECK(shrunk[2] == -2.0f);
  const std::vector<float> cut = threshold(x, 0.0, -3.0).to_vector<float>();
  CHECK(std::isnan(cut[0]));
  CHECK(cut[1] == 0.3f);
  CHECK(cut[2] == -3.0f);
  // A NaN variance gives NaN, not the negative-variance error (torch's check is var < 0).
  CHECK(std::isnan(
      gaussian_nll_loss(ones({2}), zeros({2}), from_vector<float>({1, nan})).item<float>()));
  // PyTorch 1.13: std_mean([[2, 2], [1, 3]], 1)[0].sum().backward() gives [[0, 0], [-0.7071,
  // 0.7071]]; sqrt's own gradient at a zero variance would make row 0 NaN.
  for (int method = 0; method < 2; ++method) {
    Tensor t = from_vector<float>({2, 2, 1, 3}).reshape({2, 2});
    t.set_requires_grad(true);
    (method == 0 ? std_mean(t, {1}).first : t.std({1})).sum().backward();
    require_close(t.grad(), from_vector<float>({0, 0, -0.70710678f, 0.70710678f}).reshape({2, 2}),
                  1e-6, 1e-6);
  }
  // ...but only where the variance is 0: a NaN variance (a NaN or infinite element, one
  // element, none) is a NaN deviation, as torch's (the mask made each of these 0).
  for (const Tensor& t : {from_vector<float>({1, nan, 3}), from_vector<float>({1, inf}),
                          from_vector<float>({3.7f}), zeros({0})}) {
    CHECK(std::isnan(t.std().item<float>()));
    CHECK(std::isnan(std_mean(t, {0}).first.item<float>()));
  }
  CHECK(std::isnan(ones({3, 1}).std({1}).to_vector<float>()[2]));
  CHECK(std::isnan(zeros({0, 3}).std({0}).to_vector<float>()[1]));
}

TEST_CASE("eigh, SVD and QR: factors that give A back, orthogonality, order, empty matrices",
          "[ops]") {
  Generator gen(11);
  const Tensor x = randn({2, 6, 6}, DType::f64, &gen);
  const Tensor sym = add(x, x.transpose(-1, -2));
  auto orthonormal = [](const Tensor& q) {  // Q^T Q = I
    const Tensor gram = matmul(q.transpose(-1, -2), q);
    return allclose(gram, eye(q.size(-1), DType::f64).expand(gram.shape()), 1e-12, 1e-12);
  };
  // eigh: A = Q diag(L) Q^T, L ascending; "U" reads the upper triangle only.
  auto [l, q] = linalg::eigh(sym);
  CHECK(allclose(matmul(mul(q, l.unsqueeze(-2)), q.transpose(-1, -2)), sym, 1e-12, 1e-12));
  CHECK(orthonormal(q));
  CHECK(sub(l.narrow(-1, 1, 5), l.narrow(-1, 0, 5)).ge(0.0).all().item<bool>());
  const Tensor upper_only = add(triu(sym), tril(full({2, 6, 6}, 50.0, DType::f64), -1));
  CHECK(allclose(linalg::eigvalsh(upper_only, "U"), l, 1e-12, 1e-12));
  // svd: A = U diag(S) Vh, S descending and not negative; the full factors orthogonal.
  const Tensor tall = randn({2, 7, 4}, DType::f64, &gen);
  auto [u, s, vh] = linalg::svd(tall);
  CHECK(u.shape() == Shape{2, 7, 7});
  CHECK(vh.shape() == Shape{2, 4, 4});
  CHECK(orthonormal(u));
  CHECK(orthonormal(vh.transpose(-1, -2)));
  CHECK(allclose(matmul(mul(u.narrow(-1, 0, 4), s.unsqueeze(-2)), vh), tall, 1e-12, 1e-12));
  CHECK(sub(s.narrow(-1, 0, 3), s.narrow(-1, 1, 3)).ge(0.0).all().item<bool>());
  CHECK(s.ge(0.0).all().item<bool>());
  CHECK(allclose(linalg::svdvals(tall.transpose(-1, -2)), s, 1e-12, 1e-12));
  auto [ue, se, vhe] = linalg::svd(zeros({0, 3}, DType::f64));
  CHECK(ue.shape() == Shape{0, 0});
  CHECK(se.shape() == Shape{0});
  CHECK(vhe.equal(eye(3, DType::f64)));
  // qr: A = Q R, Q orthonormal, R upper; mode "complete" squares Q; "r" gives R alone.
  for (const Shape& shape : {Shape{2, 7, 4}, Shape{4, 4}, Shape{3, 6}}) {
    const Tensor a = randn(shape, DType::f64, &gen);
    auto [qq, rr] = linalg::qr(a);
    CHECK(orthonormal(qq));
    CHECK(rr.equal(triu(rr)));
    CHECK(allclose(matmul(qq, rr), a, 1e-12, 1e-12));
    auto [qc, rc] = linalg::qr(a, "complete");
    CHECK(qc.size(-1) == a.size(-2));
    CHECK(orthonormal(qc));
    CHECK(allclose(matmul(qc, rc), a, 1e-12, 1e-12));
    auto [qr0, r_only] = linalg::qr(a, "r");
    CHECK(qr0.numel() == 0);
    CHECK(allclose(r_only, rr, 1e-12, 1e-12));
  }
  // Gradients through eigenvalues alone need no distinct ones: at the identity, d sum(L) = I.
  Tensor identity = eye(3, DType::f64).requires_grad_();
  sum(std::get<0>(linalg::eigh(identity))).backward();
  CHECK(identity.grad().equal(eye(3, DType::f64)));
  Tensor identity2 = eye(3, DType::f64).requires_grad_();
  sum(linalg::svdvals(identity2)).backward();
  CHECK(allclose(identity2.grad(), eye(3, DType::f64), 1e-12, 1e-12));
  // An output changed in place before the backward is refused, as torch's.
  Tensor xg = randn({3, 3}, DType::f64, &gen).requires_grad_();
  auto [ug, sg, vhg] = linalg::svd(xg);
  {
    NoGradGuard no_grad;
    ug.mul_(2.0);
  }
  CHECK_THROWS_WITH(sum(sg).backward(), Catch::Contains("was changed in place"));
}

TEST_CASE("pinv, matrix_rank and matrix_norm: closed forms", "[ops]") {
  Generator gen(12);
  const Tensor a = randn({5, 3}, DType::f64, &gen);
  const Tensor p = linalg::pinv(a);
  CHECK(allclose(matmul(matmul(a, p), a), a, 1e-12, 1e-12));  // the Penrose conditions
  CHECK(allclose(matmul(matmul(p, a), p), p, 1e-12, 1e-12));
  CHECK(allclose(matmul(p, a), eye(3, DType::f64), 1e-12, 1e-12));  // full column rank
  // A rank-1 matrix u v^T: its pseudo-inverse is v u^T / (|u|^2 |v|^2), its rank 1.
  const Tensor u = from_vector<double>({1, 2, 2}, {3, 1}), v = from_vector<double>({3, 4}, {2, 1});
  const Tensor rank1 = matmul(u, v.t());
  CHECK(allclose(linalg::pinv(rank1), div(matmul(v, u.t()), 9.0 * 25.0), 1e-12, 1e-12));
  CHECK(linalg::matrix_rank(rank1).item<int64_t>() == 1);
  CHECK(linalg::matrix_rank(zeros({3, 2})).item<int64_t>() == 0);
  CHECK(linalg::matrix_rank(a).item<int64_t>() == 3);
  CHECK(linalg::matrix_rank(rank1, 1e3, false).item<int64_t>() == 0);  // an atol above |u||v|
  // Norms of a diagonal matrix: 2 and -2 its largest and smallest |d|, nuc their sum, 1 and inf
  // the largest |d| too; fro the root of the squares.
  const Tensor d = diag(from_vector<double>({3, -4, 0.5}));
  CHECK(linalg::matrix_norm(d, 2).item<double>() == Approx(4.0));
  CHECK(linalg::matrix_norm(d, -2).item<double>() == Approx(0.5));
  CHECK(linalg::matrix_norm(d, "nuc").item<double>() == Approx(7.5));
  CHECK(linalg::matrix_norm(d, 1).item<double>() == 4.0);
  CHECK(linalg::matrix_norm(d, -std::numeric_limits<double>::infinity()).item<double>() == 0.5);
  CHECK(linalg::matrix_norm(d).item<double>() == Approx(std::sqrt(25.25)));
  CHECK(linalg::matrix_norm(zeros({2, 3, 4}), "fro", {0, 2}, true).shape() == Shape{1, 3, 1});
  // lstsq: the residual is orthogonal to A's columns (the normal equations), the residuals are
  // its squared norms, and for a rank-deficient A the solution is the minimum-norm one.
  const Tensor b = randn({5, 2}, DType::f64, &gen);
  auto [x, residuals, rank, values] = linalg::lstsq(a, b, std::nullopt, "gelsd");
  const Tensor residual = sub(matmul(a, x), b);
  CHECK(allclose(matmul(a.t(), residual), zeros({3, 2}, DType::f64), 1e-12, 1e-12));
  CHECK(allclose(residuals, sum(mul(residual, residual), {0}), 1e-12, 1e-12));
  CHECK(rank.item<int64_t>() == 3);
  CHECK(allclose(values, linalg::svdvals(a), 1e-12, 1e-12));
  auto [xd, rd, rankd, vd] = linalg::lstsq(matmul(u, v.t()), from_vector<double>({1, 2, 3}, {3}));
  CHECK(allclose(xd, matmul(linalg::pinv(matmul(u, v.t())), from_vector<double>({1, 2, 3})), 1e-12,
                 1e-12));
  CHECK(rankd.item<int64_t>() == 1);
  CHECK(rd.numel() == 0);  // gelsy gives no residuals; a rank-deficient A none from any driver
  CHECK(vd.numel() == 0);
}

TEST_CASE("LU, matrix_exp, norm, cond, multi_dot: closed forms", "[ops]") {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Generator gen(13);
  // P L U gives A back for every shape; L is unit lower, U upper; pivots name the rows.
  for (const Shape& shape : {Shape{2, 4, 4}, Shape{3, 6}, Shape{6, 3}, Shape{0, 3, 3}}) {
    const Tensor a = randn(shape, DType::f64, &gen);
    auto [p, l, u] = linalg::lu(a);
    CHECK(allclose(matmul(matmul(p, l), u), a, 1e-12, 1e-12));
    CHECK(allclose(l, add(tril(l, -1), eye(l.size(-2), l.size(-1), DType::f64))));
    CHECK(allclose(u, triu(u)));
    CHECK(allclose(matmul(p, p.transpose(-1, -2)), eye(p.size(-1), DType::f64).expand(p.shape())));
  }
  // A known factorization: rows 3, then 3 again (the first and third swapped, then the second
  // and third), as LAPACK's pivots count them.
  const Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 10}, {3, 3});
  auto [lu, pivots] = linalg::lu_factor(a);
  CHECK(pivots.dtype() == DType::i32);
  CHECK(pivots.to_vector<int32_t>() == std::vector<int32_t>{3, 3, 3});
  CHECK(allclose(lu,
                 from_vector<double>(
                     {7, 8, 10, 1.0 / 7, 6.0 / 7, 1.5714285714285714, 4.0 / 7, 0.5, -0.5}, {3, 3}),
                 1e-12, 1e-12));
  const Tensor b = randn({3, 2}, DType::f64, &gen);
  CHECK(allclose(matmul(a, linalg::lu_solve(lu, pivots, b)), b, 1e-12, 1e-12));
  CHECK(allclose(matmul(a.t(), linalg::lu_solve(lu, pivots, b, true, true)), b, 1e-12, 1e-12));
  CHECK(allclose(matmul(linalg::lu_solve(lu, pivots, b.t(), false), a), b.t(), 1e-12, 1e-12));
  // A singular matrix factors with a zero on U's diagonal (lu_factor refuses it); the _ex forms
  // say where, inv refuses it. inv_ex factors a contiguous A as A^T, any other as A (torch's).
  const Tensor singular = from_vector<double>({1, 2, 2, 4}, {2, 2});
  auto [lu_s, pivots_s, info_s] = linalg::lu_factor_ex(singular);
  CHECK(lu_s[1][1].item<double>() == 0.0);
  CHECK(info_s.dtype() == DType::i32);
  CHECK(info_s.item<int32_t>() == 2);
  CHECK(allclose(std::get<2>(linalg::lu(singular)), from_vector<double>({2, 4, 0, 0}, {2, 2})));
  CHECK(std::get<1>(linalg::inv_ex(singular)).item<int32_t>() == 2);
  // [[0, 0], [1, 1]]: its A^T's first column is zero; its own second pivot.
  const Tensor zero_first_row = from_vector<double>({0, 0, 1, 1}, {2, 2});
  CHECK(std::get<1>(linalg::inv_ex(zero_first_row)).item<int32_t>() == 1);
  const Tensor strided = from_vector<double>({0, 1, 0, 1}, {2, 2}).t();  // the same values
  CHECK(std::get<1>(linalg::inv_ex(strided)).item<int32_t>() == 2);
  // lu_unpack takes any pivot in [1, m], as torch: [1, 1] swaps nothing, then rows 2 and 1.
  auto [p11, l11, u11] = lu_unpack(eye(2, DType::f64), from_vector<int32_t>({1, 1}, {2}));
  CHECK(allclose(p11, from_vector<double>({0, 1, 1, 0}, {2, 2})));
  CHECK(std::get<1>(linalg::inv_ex(a)).item<int32_t>() == 0);
  CHECK_THROWS(linalg::inv_ex(singular, true));
  // e^A: of a diagonal matrix, its entries' exponentials; of a nilpotent one, I + N + N^2/2;
  // e^A e^-A = I; a rotation's generator gives the rotation, also far beyond the unscaled range.
  const Tensor d = diag(from_vector<double>({1, -2, 0.5}));
  CHECK(allclose(linalg::matrix_exp(d), diag(exp(from_vector<double>({1, -2, 0.5}))), 1e-13, 0));
  const Tensor nil = from_vector<double>({0, 1, 2, 0, 0, 3, 0, 0, 0}, {3, 3});
  CHECK(allclose(linalg::matrix_exp(nil),
                 add(add(eye(3, DType::f64), nil), mul(matmul(nil, nil), 0.5)), 1e-14, 1e-14));
  const Tensor m = randn({2, 4, 4}, DType::f64, &gen);
  CHECK(allclose(matmul(linalg::matrix_exp(m), linalg::matrix_exp(neg(m))),
                 eye(4, DType::f64).expand({2, 4, 4}), 1e-12, 1e-12));
  // inf or NaN in a matrix makes its exponential NaN; the rest of the batch is unaffected.
  const Tensor mixed = stack({full({2, 2}, std::numeric_limits<double>::infinity(), DType::f64),
                              diag(from_vector<double>({1, 2}))});
  const Tensor e = linalg::matrix_exp(mixed);
  CHECK(isnan(e[0]).all().item<bool>());
  CHECK(allclose(e[1], diag(exp(from_vector<double>({1, 2}))), 1e-13, 0));
  for (double t : {0.3, 40.0}) {
    const Tensor rotation = linalg::matrix_exp(from_vector<double>({0, -t, t, 0}, {2, 2}));
    CHECK(
        allclose(rotation,
                 from_vector<double>({std::cos(t), -std::sin(t), std::sin(t), std::cos(t)}, {2, 2}),
                 1e-12, 1e-12));
  }
  // norm: a vector's or a matrix's by the input's dims, the 2-norm of everything by default.
  const Tensor x = randn({2, 3, 4}, DType::f64, &gen);
  CHECK(allclose(linalg::norm(x), sqrt(sum(mul(x, x)))));
  CHECK(allclose(linalg::norm(x, 1, Shape{2}), sum(abs(x), {2})));
  CHECK(allclose(linalg::norm(x, 1, Shape{1, 2}), linalg::matrix_norm(x, 1, {1, 2})));
  CHECK(allclose(linalg::norm(x[0], 2), linalg::matrix_norm(x[0], 2)));
  CHECK(allclose(linalg::norm(x[0][0], kInf), max(abs(x[0][0]))));
  // cond: of a diagonal matrix, the ratio of its extreme |d| in every ord but fro and nuc.
  for (double ord : {2.0, 1.0, -kInf, kInf})
    CHECK(linalg::cond(d, ord).item<double>() ==
          Approx(std::abs(ord) == 2 || ord > 0 ? 4.0 : 0.25));
  CHECK(linalg::cond(d, "nuc").item<double>() == Approx(3.5 * 3.5));
  CHECK(linalg::cond(zeros({2, 0, 0}, DType::f64)).shape() == Shape{2});
  // A zero matrix: inf in the ords through the inverse (0 inf taken as inf), NaN in 2 (0 / 0).
  for (double ord : {1.0, -1.0, kInf, -kInf})
    CHECK(linalg::cond(zeros({2, 2}, DType::f64), ord).item<double>() == kInf);
  CHECK(linalg::cond(zeros({2, 2}, DType::f64), "fro").item<double>() == kInf);
  CHECK(std::isnan(linalg::cond(zeros({2, 2}, DType::f64)).item<double>()));
  // multi_dot: the chained matmul, whatever the order it chose.
  const Tensor m1 = randn({1, 30}, DType::f64, &gen), m2 = randn({30, 2}, DType::f64, &gen),
               m3 = randn({2, 40}, DType::f64, &gen), m4 = randn({40, 5}, DType::f64, &gen);
  CHECK(allclose(linalg::multi_dot({m1, m2, m3, m4}), matmul(matmul(matmul(m1, m2), m3), m4), 1e-12,
                 1e-12));
  CHECK(linalg::multi_dot({m1[0], m2, m3.select(1, 0)}).dim() == 0);
  CHECK(allclose(linalg::vecdot(x, x, 1), sum(mul(x, x), {1})));
}

TEST_CASE("factorizations: closed forms, residuals, empty and singular matrices", "[ops]") {
  // A X = B to rounding for a larger system, in f32 (computed in f64, then rounded).
  Generator gen(5);
  const Tensor a = add(randn({64, 64}, DType::f32, &gen), mul(eye(64), 8.0));
  const Tensor b = randn({64, 5}, DType::f32, &gen);
  CHECK(max(abs(sub(matmul(a, linalg::solve(a, b)), b))).item<float>() < 1e-4f);
  CHECK(max(abs(sub(matmul(linalg::inv(a), a), eye(64)))).item<float>() < 1e-5f);
  // det of a triangular matrix is its diagonal's product; slogdet agrees; logdet NaN below 0.
  const Tensor tri = from_vector<double>({2, 5, 7, 0, -3, 1, 0, 0, 0.5}, {3, 3});
  CHECK(linalg::det(tri).item<double>() == Approx(-3.0));
  auto [sign, log_abs] = linalg::slogdet(tri);
  CHECK(sign.item<double>() == -1.0);
  CHECK(log_abs.item<double>() == Approx(std::log(3.0)));
  CHECK(std::isnan(logdet(tri).item<double>()));
  // A singular matrix: det 0, sign 0, log|det| -inf; logdet -inf.
  const Tensor singular = from_vector<double>({1, 2, 2, 4}, {2, 2});
  CHECK(linalg::det(singular).item<double>() == 0.0);
  auto [s0, l0] = linalg::slogdet(singular);
  CHECK(s0.item<double>() == 0.0);
  CHECK(l0.item<double>() == -std::numeric_limits<double>::infinity());
  CHECK(logdet(singular).item<double>() == -std::numeric_limits<double>::infinity());
  // Empty matrices and batches, as torch: det of a 0 x 0 matrix is 1.
  CHECK(linalg::inv(zeros({0, 0})).shape() == Shape{0, 0});
  CHECK(linalg::det(zeros({2, 0, 0})).equal(ones({2})));
  CHECK(linalg::inv(zeros({0, 3, 3})).shape() == Shape{0, 3, 3});
  CHECK(linalg::solve(eye(3), zeros({3, 0})).shape() == Shape{3, 0});
  // cholesky reads the lower triangle only; L L^T gives A back; upper is L^T.
  const Tensor spd = from_vector<double>({4, 2, -2, 2, 10, 4, -2, 4, 9}, {3, 3});
  const Tensor junk = add(spd, triu(full({3, 3}, 100.0, DType::f64), 1));
  const Tensor l = linalg::cholesky(junk);
  CHECK(allclose(matmul(l, l.t()), spd, 1e-12, 1e-12));
  CHECK(l.equal(tril(l)));
  CHECK(linalg::cholesky(spd, true).equal(l.t()));
  // cholesky_solve and cholesky_inverse against the plain solve and inverse.
  const Tensor rhs = from_vector<double>({1, 0, 2, -1, 3, 1}, {3, 2});
  CHECK(allclose(cholesky_solve(rhs, l), linalg::solve(spd, rhs), 1e-12, 1e-12));
  CHECK(allclose(cholesky_inverse(l.t(), true), linalg::inv(spd), 1e-12, 1e-12));
  // solve_triangular reads its triangle only; unitriangular takes the diagonal as ones.
  const Tensor lower = from_vector<double>({2, 9, 9, 1, 4, 9, 3, -1, 0.5}, {3, 3});
  const Tensor x = linalg::solve_triangular(lower, rhs, false);
  CHECK(allclose(matmul(tril(lower), x), rhs, 1e-12, 1e-12));
  const Tensor unit = linalg::solve_triangular(lower, rhs, false, true, true);
  CHECK(allclose(matmul(add(tril(lower, -1), eye(3, DType::f64)), unit), rhs, 1e-12, 1e-12));
  // matrix_power: 0 gives the identity, -1 the inverse, 1 a copy.
  CHECK(linalg::matrix_power(spd, 0).equal(eye(3, DType::f64)));
  CHECK(allclose(linalg::matrix_power(spd, -1), linalg::inv(spd), 1e-12, 1e-12));
  CHECK(allclose(linalg::matrix_power(spd, 4), matmul(matmul(spd, spd), matmul(spd, spd)), 1e-12,
                 1e-12));
  const Tensor copy = linalg::matrix_power(spd, 1);
  CHECK_FALSE(copy.storage().is_same(spd.storage()));
  // The upper form reads the upper triangle, as torch's: [[4, 2], [100, 3]] -> [[2, 1], [0, 2^.5]].
  const Tensor skew = from_vector<double>({4, 2, 100, 3}, {2, 2});
  CHECK(allclose(linalg::cholesky(skew, true),
                 from_vector<double>({2, 1, 0, std::sqrt(2.0)}, {2, 2}), 1e-12, 1e-12));
  // cholesky_solve broadcasts batch dims, and its gradients go back to each operand's shape.
  Tensor factor =
      linalg::cholesky(add(spd, zeros({4, 3, 3}, DType::f64))).detach().requires_grad_();
  Tensor rhs_grad = rhs.clone().requires_grad_();
  sum(cholesky_solve(rhs_grad, factor)).backward();
  CHECK(rhs_grad.grad().shape() == Shape{3, 2});
  CHECK(factor.grad().shape() == Shape{4, 3, 3});
}

TEST_CASE(
    "review fixes: the hinge loss's gradient where the margin is met exactly, the last row "
    "of 2-d bags with include_last_offset",
    "[ops]") {
  // torch's kernel: no gradient where margin - x[y] + x[j] is exactly 0 (here j = 1).
  Tensor x = from_vector<double>({1, 0, 0.5}, {1, 3}).requires_grad_();
  multi_margin_loss(x, from_vector<int64_t>({0}, {1})).backward();
  CHECK(allclose(x.grad(), from_vector<double>({-1.0 / 3, 0, 1.0 / 3}, {1, 3}), 1e-12, 1e-12));
  // torch: each row's start is an offset, so the last row only ends the bag before it.
  const Tensor w = arange(0.0, 12.0, DType::f32).reshape({6, 2});
  const Tensor bags = embedding_bag(w, from_vector<int64_t>({1, 2, 3, 4, 5, 0}, {3, 2}), Tensor(),
                                    EmbeddingBagMode::sum, Tensor(), true);
  CHECK(bags.equal(from_vector<float>({6, 8, 14, 16}, {2, 2})));
}

TEST_CASE("elementwise ops on transposed operands: the tiled walk gives the dense results",
          "[ops]") {
  // z.t() reads across z's rows: the loop walks it in tiles (src/cpu/loops.hpp). The reference
  // is z's values transposed on the host.
  Generator gen(13);
  for (const Shape& shape : {Shape{300, 37}, Shape{3000, 150}}) {
    const int64_t rows = shape[0], cols = shape[1];
    for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32}) {
      INFO(dtype_name(t) << " " << shape_str(shape));
      const Tensor z = mul(randn(shape, DType::f32, &gen), 8.0).to(t);
      const std::vector<double> v = z.to(DType::f64).to_vector<double>();
      std::vector<double> transposed(v.size());
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) transposed[j * rows + i] = v[i * cols + j];
      const Tensor ref = from_vector(transposed, {cols, rows}).to(t);
      CHECK(z.t().contiguous().equal(ref));
      CHECK(neg(z.t()).equal(neg(ref)));
      const Tensor other = mul(randn({cols, rows}, DType::f32, &gen), 8.0).to(t);
      CHECK(add(other, z.t()).equal(add(other, ref)));
      if (is_floating(t)) {
        CHECK(sigmoid(z.t()).equal(sigmoid(ref)));
        CHECK(mul(z.t(), z.t()).equal(mul(ref, ref)));
        // A strided unary input whose result is row-major: gathered a block at a time.
        const Tensor every_other = slice(z, 1, 0, cols, 2);
        CHECK(sigmoid(every_other).equal(sigmoid(every_other.contiguous())));
      }
    }
  }
}

TEST_CASE("elementwise results and copies are laid out as PyTorch's", "[ops]") {
  // The strides torch 1.13 gives each result (TensorIterator's rule): a unary result keeps a
  // dense input's strides, the first operand decides where it can, a broadcast dim decides
  // nothing. The values are those of the same op on contiguous copies.
  Generator gen(29);
  const Tensor a = randn({4, 3}, DType::f32, &gen).t();  // (3, 4), strides (1, 3)
  const Tensor b = randn({3, 4}, DType::f32, &gen), row = randn({4}, DType::f32, &gen);
  const Tensor ac = a.contiguous();
  auto check = [](const Tensor& result, const Tensor& expected, const Shape& strides) {
    CHECK(result.strides() == strides);
    CHECK(result.equal(expected));
  };
  check(sigmoid(a), sigmoid(ac), {1, 3});
  check(neg(a), neg(ac), {1, 3});
  check(mul(a, 2.0), mul(ac, 2.0), {1, 3});
  check(add(a, b), add(ac, b), {1, 3});
  check(add(b, a), add(b, ac), {4, 1});
  check(mul(a, a), mul(ac, ac), {1, 3});
  check(add(a, row), add(ac, row), {1, 3});
  check(add(row, a), add(row, ac), {1, 3});  // the first operand's broadcast dim decides nothing
  check(gt(a, 0.0), gt(ac, 0.0), {1, 3});
  check(where(gt(a, 0.0), a, b), where(gt(ac, 0.0), ac, b), {1, 3});
  const Tensor p = permute(randn({2, 3, 4}, DType::f32, &gen), {2, 0, 1});  // strides (1, 12, 4)
  check(exp(p), exp(p.contiguous()), {1, 12, 4});
  // Not dense: the dims in the input's order, dense in it.
  const Tensor q = slice(randn({4, 6}, DType::f32, &gen).t(), 0, 0, 6, 2);  // (3, 4), (2, 6)
  check(exp(q), exp(q.contiguous()), {1, 3});
  const Tensor r = permute(randn({4, 1, 3}, DType::f32, &gen), {2, 1, 0});  // (3, 1, 4), (1, 3, 3)
  check(exp(r), exp(r.contiguous()), {1, 3, 3});
  // A broadcast operand's size-1 dims take part in the order, as torch's.
  const Tensor lone = permute(randn({2, 1, 1}, DType::f32, &gen), {1, 2, 0});  // (1, 1, 2)
  const Tensor square = randn({2, 2}, DType::f32, &gen);
  check(add(lone, square), add(lone.contiguous(), square), {1, 1, 2});
  // An operand of another dtype is converted first (laid out densely), as on torch's CPU.
  const Tensor ints = arange(0.0, 3.0, TensorOptions(DType::i64)).expand({4, 3});
  check(add(ints, b.t()), add(ints.contiguous(), b.t().contiguous()), {3, 1});  // b.t(): (1, 4)
  // Copies keep the layout too (preserve_format): dense strides as they are, others dense in the
  // input's order of dims.
  check(a.clone(), ac, {1, 3});
  check(a.to(DType::f64), ac.to(DType::f64), {1, 3});
  check(zeros_like(a), zeros({3, 4}), {1, 3});
  check(q.clone(), q.contiguous(), {1, 3});
  CHECK(empty_like(q).strides() == Shape{1, 3});
  check(p.to(DType::f16), p.contiguous().to(DType::f16), {1, 12, 4});
  // Channels-last stays so, also beside a row-major operand (torch: the first operand's layout).
  const Tensor x = randn({2, 3, 4, 5}, DType::f32, &gen);
  const Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);
  CHECK(add(x, cl).is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(relu(cl).is_contiguous(MemoryFormat::ChannelsLast));
  // Gradients come back in the leaf's own layout and values.
  Tensor leaf = randn({4, 3}, DType::f32, &gen).requires_grad_(true);
  sum(mul(sigmoid(leaf.t()), b)).backward();
  const Tensor s = sigmoid(leaf.detach());
  require_close(leaf.grad(), mul(mul(s, sub(ones_like(s), s)), b.t()), 1e-6, 1e-6);
  CHECK(leaf.grad().is_contiguous());
}

TEST_CASE("ctc_loss: closed forms of short alignments", "[ops]") {
  Generator gen(31);
  const Tensor lp = log_softmax(randn({3, 1, 3}, DType::f64, &gen), 2).requires_grad_(true);
  const Tensor p = exp(lp.detach());
  auto prob = [&](int64_t t, int64_t c) {
    return p.select(0, t).select(0, 0).select(0, c).item<double>();
  };
  auto ctc = [&](int64_t frames, std::vector<int64_t> target, bool zero_infinity = false) {
    const int64_t length = static_cast<int64_t>(target.size());
    const Tensor rows = from_vector(target.empty() ? std::vector<int64_t>{0} : target,
                                    {1, std::max<int64_t>(length, 1)});
    return ctc_loss(lp, rows, std::vector<int64_t>{frames}, std::vector<int64_t>{length}, 0,
                    Reduction::sum, zero_infinity);
  };
  const int64_t a = 2, blank = 0;
  // One frame, one label: -log p(a).
  CHECK(ctc(1, {a}).item<double>() == Approx(-std::log(prob(0, a))).epsilon(1e-12));
  // Two frames, target (a): the alignments a a, - a and a -.
  CHECK(ctc(2, {a}).item<double>() ==
        Approx(-std::log(prob(0, a) * prob(1, a) + prob(0, blank) * prob(1, a) +
                         prob(0, a) * prob(1, blank)))
            .epsilon(1e-12));
  // Target (a, a) in three frames: only a - a (a repeat needs a blank between).
  CHECK(ctc(3, {a, a}).item<double>() ==
        Approx(-std::log(prob(0, a) * prob(1, blank) * prob(2, a))).epsilon(1e-12));
  // An empty target: blanks only; no frames: probability 1.
  CHECK(ctc(2, {}).item<double>() ==
        Approx(-std::log(prob(0, blank) * prob(1, blank))).epsilon(1e-12));
  CHECK(ctc(0, {}).item<double>() == 0.0);
  CHECK(std::isinf(ctc(0, {a}).item<double>()));
  // (a, a) in two frames fits no alignment: inf, or 0 with no gradient under zero_infinity.
  CHECK(std::isinf(ctc(2, {a, a}).item<double>()));
  const Tensor zeroed = ctc(2, {a, a}, true);
  CHECK(zeroed.item<double>() == 0.0);
  zeroed.backward();
  CHECK(lp.grad().equal(zeros_like(lp)));
}

TEST_CASE("ctc_loss: NaN inputs, the loss changed in place, unbatched padded targets", "[ops]") {
  Generator gen(43);
  const Tensor x = randn({5, 1, 4}, DType::f64, &gen);
  const Tensor target = from_vector<int64_t>({1, 2}, {1, 2});
  const std::vector<int64_t> frames{5}, length{2};
  // A NaN frame (diverged logits) gives a NaN loss and NaN gradients, zero_infinity or not, as
  // torch's: the recursions' log-sum-exp must not drop a NaN behind a -inf.
  for (int64_t t : {0, 2, 4})
    for (bool zero_infinity : {false, true}) {
      Tensor lp = x.clone();
      lp.select(0, t).fill_(NAN);
      lp.set_requires_grad(true);
      const Tensor loss = ctc_loss(lp, target, frames, length, 0, Reduction::mean, zero_infinity);
      CHECK(std::isnan(loss.item<double>()));
      loss.backward();
      CHECK(isnan(lp.grad()).any().item<bool>());
    }
  // The backward reads the per-sample losses it returned: changed in place since, it refuses.
  const Tensor lp = log_softmax(x, 2).detach().set_requires_grad(true);
  Tensor losses = ctc_loss(lp, target, frames, length, 0, Reduction::none);
  {
    NoGradGuard no_grad;
    losses.add_(1.0);
  }
  CHECK(testing::error_of([&] { sum(losses).backward(); }).find("was changed in place") !=
        std::string::npos);
  // Unbatched (T, C) log_probs take a (1, S) row of padded targets too, as torch's: the same as
  // the concatenated form.
  const Tensor lp2 = log_softmax(x.select(1, 0), 1);
  const Tensor padded = ctc_loss(lp2, from_vector<int64_t>({1, 2, 3}, {1, 3}), frames, length);
  CHECK(padded.item<double>() == ctc_loss(lp2, target.flatten(), frames, length).item<double>());
}

TEST_CASE("tensorinv and tensorsolve: the inverse map and the solution", "[ops]") {
  Generator gen(37);
  const Tensor a = randn({2, 3, 6}, DType::f64, &gen);
  // tensorinv(A) (6, 2, 3) composed with A over their shared dims is the identity either way.
  const Tensor ainv = linalg::tensorinv(a);
  require_close(matmul(a.reshape({6, 6}), ainv.reshape({6, 6})), eye(6, DType::f64), 1e-10, 1e-10);
  require_close(matmul(ainv.reshape({6, 6}), a.reshape({6, 6})), eye(6, DType::f64), 1e-10, 1e-10);
  // tensordot(A, X, 1) = B: A's (2, 3) dims against X's one.
  const Tensor b = randn({2, 3}, DType::f64, &gen);
  const Tensor x = linalg::tensorsolve(a, b);
  CHECK(x.shape() == Shape{6});
  require_close(matmul(a, x), b, 1e-10, 1e-10);
  // dims: A's dim 0 moved last first.
  const Tensor x0 = linalg::tensorsolve(permute(a, {2, 0, 1}), b, {0});
  require_close(x0, x, 1e-12, 1e-12);
}

TEST_CASE("multilabel_margin_loss: one class, and no samples", "[ops]") {
  // One class is its own target or none: no other class to compare with, a loss of 0 (torch's).
  CHECK(multilabel_margin_loss(full({}, 0.5), zeros({}, DType::i64)).item<float>() == 0.0f);
  CHECK(multilabel_margin_loss(full({}, 0.5), full({}, -1.0, DType::i64)).item<float>() == 0.0f);
  const Tensor none = zeros({0, 3}), no_targets = zeros({0, 3}, DType::i64);
  CHECK(multilabel_margin_loss(none, no_targets, Reduction::none).shape() == Shape{0});
  CHECK(multilabel_margin_loss(none, no_targets, Reduction::sum).item<float>() == 0.0f);
}

TEST_CASE("lu_unpack broadcasts LU's and the pivots' batch dims", "[ops]") {
  Generator gen(41);
  const Tensor a = randn({2, 3, 3}, DType::f64, &gen);
  const auto factored = linalg::lu_factor(a);
  const Tensor lu = std::get<0>(factored), pivots = std::get<1>(factored);
  // Pivots of one matrix for both: P from them, L and U from each LU (torch's result).
  const auto one = lu_unpack(lu, pivots[0]);
  const auto first = lu_unpack(lu[0], pivots[0]);
  CHECK(std::get<0>(one).shape() == Shape{2, 3, 3});
  CHECK(std::get<0>(one)[1].equal(std::get<0>(first)));
  CHECK(std::get<1>(one).equal(std::get<1>(lu_unpack(lu, pivots))));
  // One LU for two sets of pivots: L and U repeated, each P from its own pivots.
  const auto shared = lu_unpack(lu[0], pivots);
  CHECK(std::get<0>(shared).equal(std::get<0>(lu_unpack(lu, pivots))));
  CHECK(std::get<2>(shared)[1].equal(std::get<2>(first)));
  // The pair that belongs together gives back its matrix: P L U = A.
  require_close(
      matmul(matmul(std::get<0>(shared)[0], std::get<1>(shared)[0]), std::get<2>(shared)[0]), a[0],
      1e-12, 1e-12);
}

TEST_CASE(
    "cosine_similarity broadcasts first; vector_norm's negative orders have gradient 0 at "
    "a zero",
    "[ops]") {
  // Values from torch 1.13 for the same inputs (a differential probe found both).
  Tensor x1 = mul(arange(15).to(DType::f32), 0.37).sin().reshape({3, 5}).requires_grad_();
  Tensor x2 = add(mul(arange(5).to(DType::f32), 0.91), 0.3).cos().reshape({1, 5}).requires_grad_();
  Tensor y = cosine_similarity(x1, x2, 0);
  y.backward(arange(1, 6).to(DType::f32));
  require_close(
      y, from_vector<float>({0.22693714f, 0.17405474f, -0.10549447f, -0.03463712f, 0.03593859f}),
      1e-5, 1e-6);
  require_close(
      x1.grad().reshape({-1}),
      from_vector<float>({0.52600044f, 0.88418490f, -1.21679127f, -1.64132726f, -2.23577094f,
                          0.34493029f, 0.77652305f, -1.24548912f, -1.69560385f, -2.11918879f,
                          0.62580276f, 1.17188108f, -1.52955210f, -1.78485048f, -2.04968810f}),
      1e-5, 1e-5);
  require_close(x2.grad(), zeros({1, 5}), 0, 1e-5);  // scaling a broadcast row changes nothing
  // Operands of different ranks: dim counts in the common shape.
  const Tensor a = mul(arange(60).to(DType::f32), 0.13).cos().reshape({3, 4, 5});
  const Tensor b = mul(arange(20).to(DType::f32), 0.29).sin().reshape({4, 5});
  const Tensor last = cosine_similarity(a, b, -1), middle = cosine_similarity(a, b, 1);
  CHECK(last.shape() == Shape{3, 4});
  CHECK(middle.shape() == Shape{3, 5});
  require_close(
      last.reshape({-1}).narrow(0, 0, 5),
      from_vector<float>({0.80980855f, 0.99792874f, 0.73156619f, 0.94175178f, -0.86548603f}), 1e-5,
      1e-6);
  require_close(
      middle.reshape({-1}).narrow(0, 0, 5),
      from_vector<float>({0.63875258f, 0.77359152f, 0.87270880f, 0.92657948f, 0.92797297f}), 1e-5,
      1e-6);

  // Small vectors: each norm is clamped at eps on its own (torch 1.13), not their product.
  Tensor s = mul(mul(arange(6).to(DType::f32), 0.9).sin().reshape({2, 3}), 1e-5).requires_grad_();
  const Tensor c = mul(add(mul(arange(6).to(DType::f32), 0.4), 0.2).cos().reshape({2, 3}), 1e-5);
  Tensor small = cosine_similarity(s, c, 1);
  require_close(small, from_vector<float>({0.67476773f, 0.99185759f}), 1e-5, 0);
  small.sum().backward();
  require_close(
      s.grad().reshape({-1}),
      from_vector<float>({56393.684f, 13651.031f, -10980.377f, -9251.590f, 2792.4785f, -5308.969f}),
      1e-4, 0);
  // normalize by a negative order: vector_norm's (-inf: the smallest |x|).
  require_close(
      normalize(from_vector<float>({1, -2, 4, 0.5f, 3, -1}).reshape({2, 3}), -INFINITY, 1),
      from_vector<float>({1, -2, 4, 1, 6, -2}).reshape({2, 3}), 1e-6, 0);

  Tensor x = from_vector<float>({0, 1, -2, 3, -1, 0.5f}).reshape({2, 3}).requires_grad_();
  Tensor n = linalg::vector_norm(x, -2.0, {1});
  n.backward(from_vector<float>({1, 2}));
  require_close(n, from_vector<float>({0, 0.44232586f}), 1e-6, 1e-7);
  require_close(x.grad().reshape({-1}),
                from_vector<float>({0, 0, 0, 0.00641052f, -0.17308404f, 1.38467228f}), 1e-5, 1e-7);
}

TEST_CASE("integer inputs: float functions compute in f32, rounding and sign keep the dtype",
          "[ops]") {
  // torch 1.13's dtypes: exp/sqrt/sigmoid/atan2 of integers are f32; sign, relu, floor, ceil,
  // round, trunc keep an integer dtype; the rounding ones and relu refuse bool.
  const Tensor i = from_vector<int64_t>({3, -2, 0});
  const Tensor k = from_vector<int64_t>({3, -2, 7}), f = k.to(DType::f32);
  for (auto [name, fn] :
       std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>>{{"exp", &exp},
                                                                      {"sqrt", &sqrt},
                                                                      {"sigmoid", &sigmoid},
                                                                      {"sin", &sin},
                                                                      {"log1p", &log1p},
                                                                      {"reciprocal", &reciprocal},
                                                                      {"tanh", &tanh},
                                                                      {"erf", &erf}}) {
    INFO(name);
    const Tensor r = fn(k);
    CHECK(r.dtype() == DType::f32);
    require_close(r, fn(f), 0, 0);  // NaN where f's is
  }
  CHECK(exp(from_vector<bool>({true})).dtype() == DType::f32);
  CHECK(atan2(k, from_vector<int64_t>({1, 1, 1})).equal(atan2(f, ones({3}))));
  CHECK(sign(i).to_vector<int64_t>() == std::vector<int64_t>{1, -1, 0});
  CHECK(sign(from_vector<bool>({true, false})).to_vector<bool>() == std::vector<bool>{true, false});
  CHECK(relu(i).to_vector<int64_t>() == std::vector<int64_t>{3, 0, 0});
  CHECK(sign(from_vector<uint8_t>({0, 7})).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1});
  using Fn = Tensor (*)(const Tensor&);
  for (Fn fn : std::vector<Fn>{&floor, &ceil, &round, &trunc}) {
    CHECK(fn(i).dtype() == DType::i64);
    CHECK(fn(i).equal(i));
    CHECK_THROWS_WITH(fn(from_vector<bool>({true})), Catch::Contains("not implemented for bool"));
  }
  CHECK_THROWS_WITH(relu(from_vector<bool>({true})), Catch::Contains("not implemented for bool"));
  Tensor j = i.clone();
  j.floor_();
  CHECK(j.equal(i));
  CHECK_THROWS_WITH(j.exp_(), Catch::Contains("cannot be written into a i64 tensor"));
  // all and any of u8 are u8, as torch's; of other dtypes bool.
  const Tensor u = from_vector<uint8_t>({1, 0, 7, 9}).reshape({2, 2});
  CHECK(u.any().dtype() == DType::u8);
  CHECK(u.all(1).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1});
  CHECK(u.any(0).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1});
  CHECK(u.all().item<int64_t>() == 0);
  CHECK(i.any().dtype() == DType::boolean);
}

TEST_CASE("cross_entropy and nll_loss take one unbatched sample, as torch's", "[ops]") {
  // torch 1.13: F.cross_entropy(x, t, weight=w, label_smoothing=0.2) for x = sin(0.7 k), t = 3.
  Tensor x = mul(arange(5).to(DType::f32), 0.7).sin().requires_grad_();
  const Tensor t = full({}, 3, DType::i64);
  const Tensor w = from_vector<float>({1, 2, 0.5f, 3, 1.5f});
  CrossEntropyOptions o;
  o.weight = w;
  o.label_smoothing = 0.2;
  Tensor loss = cross_entropy(x, t, o);
  CHECK(loss.dim() == 0);
  CHECK(loss.item<float>() == Approx(1.2714095f).epsilon(1e-6));
  loss.backward();
  require_close(
      x.grad(),
      from_vector<float>({0.08361363f, 0.15796849f, 0.25305584f, -0.61016238f, 0.11552448f}), 1e-5,
      1e-7);
  const Tensor none = nll_loss(x.detach(), t, Tensor(), Reduction::none);
  CHECK(none.dim() == 0);
  CHECK(none.item<float>() == Approx(-0.86320943f).epsilon(1e-6));
  CHECK(std::isnan(cross_entropy(x.detach(), full({}, -100, DType::i64)).item<float>()));
  CHECK_THROWS_WITH(cross_entropy(x.detach(), full({1}, 3, DType::i64)),
                    Catch::Contains("target must be ()"));
}

TEST_CASE("cross_entropy takes class probabilities for targets, as torch's", "[ops]") {
  // torch 1.13's values for the same inputs.
  Tensor x = mul(arange(12).to(DType::f32), 0.7).sin().reshape({3, 4}).requires_grad_();
  const Tensor p = softmax(mul(arange(12).to(DType::f32), 1.3).cos().reshape({3, 4}), 1);
  CrossEntropyOptions o;
  o.weight = from_vector<float>({1, 2, 0.5f, 3});
  o.label_smoothing = 0.1;
  Tensor loss = cross_entropy(x, p, o);
  CHECK(loss.item<float>() == Approx(2.1788752f).epsilon(1e-6));
  loss.backward();
  require_close(x.grad().reshape({-1}),
                from_vector<float>({-0.11334345f, -0.06076488f, 0.14444736f, 0.02966104f,
                                    0.15239003f, -0.17303367f, 0.04130942f, -0.02066576f,
                                    0.00333453f, -0.13537061f, 0.08102598f, 0.05101009f}),
                1e-5, 1e-7);
  CrossEntropyOptions none;
  none.reduction = Reduction::none;
  require_close(cross_entropy(x.detach(), p, none),
                from_vector<float>({1.73361742f, 1.36082041f, 1.45038295f}), 1e-6, 1e-7);
  CrossEntropyOptions summed;
  summed.reduction = Reduction::sum;
  CHECK(cross_entropy(x.detach(), p, summed).item<float>() == Approx(4.5448213f).epsilon(1e-6));
  // (N, C, d1, d2): classes along dim 1.
  const Tensor x3 = mul(arange(24).to(DType::f32), 0.3).cos().reshape({2, 3, 2, 2});
  const Tensor p3 = softmax(mul(arange(24).to(DType::f32), 0.5).sin().reshape({2, 3, 2, 2}), 1);
  CHECK(cross_entropy(x3, p3).item<float>() == Approx(1.2288268f).epsilon(1e-6));
  CHECK_THROWS_WITH(cross_entropy(x.detach(), p.narrow(1, 0, 3)),
                    Catch::Contains("must have the input's shape (3, 4)"));
}

TEST_CASE("gradients at NaN and at 0^0, NaN clamp bounds, sums in an integer dtype: torch 1.13's",
          "[ops]") {
  // Each input's gradient of sum(f(x)), compared as vectors (NaN equal to NaN).
  auto same = [](const Tensor& t, std::vector<float> want) {
    const std::vector<float> got = t.to_vector<float>();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i)
      CHECK(((std::isnan(got[i]) && std::isnan(want[i])) || got[i] == want[i]));
  };
  auto leaf = [](std::vector<float> v) { return from_vector<float>(v).requires_grad_(); };
  const float nan = NAN;
  {  // pow's base gradient is 0 where the exponent is 0 (not 0 * 0^-1)
    Tensor a = leaf({0, 0, 2, -2}), b = leaf({0, 2, 0, 3});
    sum(pow(a, b)).backward();
    same(a.grad(), {0, 0, 0, 12});
    same(b.grad(), {0, 0, 0.6931471824645996f, nan});
  }
  {  // max()/min() of all elements: a NaN result's gradient shared by the NaNs; ties split
    Tensor a = leaf({1, nan, 3, nan});
    max(a).backward();
    same(a.grad(), {0, 0.5f, 0, 0.5f});
    Tensor m = leaf({1, 2, 1});
    min(m).backward();
    same(m.grad(), {0.5f, 0, 0.5f});
  }
  {  // median: the gradient goes to the NaN it picks
    Tensor a = leaf({1, nan, 3, -2});
    sum(median(a.reshape({1, 4}), 1).first).backward();
    same(a.grad(), {0, 1, 0, 0});
    Tensor b = leaf({1, nan, 3, -2});
    median(b).backward();
    same(b.grad(), {0, 1, 0, 0});
  }
  {  // maximum/minimum: where either is NaN both get the gradient
    Tensor a = leaf({1, nan, 2, 3}), b = leaf({nan, 2, 2, 1});
    sum(maximum(a, b)).backward();
    same(a.grad(), {1, 1, 0.5f, 1});
    same(b.grad(), {1, 1, 0.5f, 0});
    Tensor c = leaf({1, nan, 2, 3}), d = leaf({nan, 2, 2, 1});
    sum(minimum(c, d)).backward();
    same(c.grad(), {1, 1, 0.5f, 0});
    same(d.grad(), {1, 1, 0.5f, 1});
  }
  {  // a NaN bound: every element NaN, gradient 0
    same(clamp(from_vector<float>({1, nan, 3}), nan, 2.0), {nan, nan, nan});
    Tensor a = leaf({1, 2});
    sum(clamp_min(a, nan)).backward();
    same(a.grad(), {0, 0});
    Tensor b = from_vector<float>({1, 5});
    b.clamp_(std::nullopt, nan);
    same(b, {nan, nan});
  }
  // sum with an integer or bool dtype is of that dtype and wraps as it does
  const Tensor big = from_vector<int64_t>({2147483647, 1}).to(DType::i32);
  CHECK(sum(big, DType::i32).dtype() == DType::i32);
  CHECK(sum(big, DType::i32).item<int64_t>() == -2147483648LL);
  CHECK(sum(from_vector<int64_t>({200, 100}).to(DType::u8), DType::u8).item<int64_t>() == 44);
  CHECK(sum(from_vector<int64_t>({1, 1}).to(DType::boolean), DType::boolean).item<bool>());
  CHECK(sum(big, {0}, true, DType::i64).item<int64_t>() == 2147483648LL);
}
