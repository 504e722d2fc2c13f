// f16/bf16 reach the kernels as they are: every op on narrow floats must give exactly what the
// f32 computation rounded to the narrow dtype gives (the kernels load narrow, compute f32, store
// narrow), and keep the narrow dtype.
#include "../util.hpp"
#include "tandem/kernels/cpu_isa.hpp"

using namespace tandem;

namespace {
// The reference: widen every input to f32, run the op, round the result back. Not `exact`: the
// op sums in another order than the f32 op, so results may differ by one rounding.
template <typename F>
void check_matches_f32(DType dt, F&& op, std::vector<Tensor> inputs_f32, const char* what,
                       bool exact = true) {
  INFO(what << " in " << dt);
  std::vector<Tensor> narrow, wide;
  for (auto& t : inputs_f32) {
    narrow.push_back(t.to(dt));
    wide.push_back(t.to(dt).to(DType::f32));  // the same values, held wide
  }
  Tensor got = op(narrow);
  Tensor want = op(wide).to(dt);
  REQUIRE(got.dtype() == dt);
  if (exact) {
    CHECK(equal(got, want));
  } else {
    CHECK(allclose(got.to(DType::f32), want.to(DType::f32), 1.0 / 128, 1e-6));
  }
}
}  // namespace

TEST_CASE("f16 and bf16 ops equal the f32 computation rounded", "[ops][lowp]") {
  Generator gen(7);
  Tensor x = randn({4, 3, 6, 6}, DType::f32, &gen), y = randn({4, 3, 6, 6}, DType::f32, &gen);
  Tensor w = randn({5, 3, 3, 3}, DType::f32, &gen), m = randn({6, 5}, DType::f32, &gen);
  Tensor row = randn({6}, DType::f32, &gen);
  for (DType dt : {DType::f16, DType::bf16}) {
    using V = std::vector<Tensor>;
    check_matches_f32(dt, [](const V& v) { return exp(v[0]); }, {x}, "exp");
    check_matches_f32(dt, [](const V& v) { return gelu(v[0]); }, {x}, "gelu");
    check_matches_f32(dt, [](const V& v) { return mul(add(v[0], v[1]), 0.5); }, {x, y}, "add, mul");
    check_matches_f32(dt, [](const V& v) { return add(v[0], v[1]); }, {x, row}, "broadcast add");
    check_matches_f32(dt, [](const V& v) { return sum(v[0], {1, 2}); }, {x}, "sum");
    check_matches_f32(dt, [](const V& v) { return amax(v[0], {3}); }, {x}, "amax");
    // bf16 products on the CPU's bf16 dot products add them two at a time, in another order.
    const bool same_order = !(dt == DType::bf16 && kernels::cpu_bf16_dot());
    check_matches_f32(
        dt, [](const V& v) { return conv2d(v[0], v[1], Tensor(), 1, 1); }, {x, w}, "conv2d",
        same_order);
    check_matches_f32(dt, [](const V& v) { return max_pool2d(v[0], 2); }, {x}, "max_pool2d");
    check_matches_f32(
        dt, [](const V& v) { return adaptive_avg_pool2d(v[0], 1); }, {x}, "adaptive_avg_pool2d");
    check_matches_f32(dt, [](const V& v) { return matmul(v[0].reshape({-1, 6}), v[1]); },
                      {x, m}, "matmul", same_order);
    check_matches_f32(dt, [](const V& v) { return batch_norm(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
                      {x}, "batch_norm");
    check_matches_f32(dt, [](const V& v) {
                        return batch_norm_relu(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true,
                                               0.1, 1e-5, v[1]);
                      },
                      {x, y}, "batch_norm_relu");
  }
}

TEST_CASE("bf16 matmul: f32 sums of the exact products, rounded once", "[ops][lowp]") {
  // On a CPU with AVX512_BF16 the packed bf16 GEMM (vdpbf16ps) runs; elsewhere the f32 GEMM on
  // widened copies. Either must be within one bf16 rounding of the exact product, plus f32's
  // summation error. Shapes: tile edges (rows not a multiple of 8, columns not of 48; edges of
  // 16 and 32 columns), odd depths
  // (a zero-padded last pair), depths over one packed slice (2048), transposed views, a batch.
  if (!kernels::cpu_bf16_dot()) WARN("this CPU has no AVX512_BF16: the f32 GEMM path runs");
  struct Case {
    int64_t batch, m, k, n;
    bool ta, tb;
  };
  Generator gen(11);
  for (Case c : {Case{1, 8, 2, 48, false, false}, Case{1, 37, 301, 290, false, false},
                 Case{1, 37, 301, 290, true, false}, Case{1, 37, 301, 290, false, true},
                 Case{1, 37, 301, 290, true, true}, Case{3, 19, 7, 50, false, false},
                 Case{1, 70, 2501, 130, false, true}, Case{1, 70, 2501, 130, false, false},
                 Case{1, 70, 2501, 130, true, false}, Case{1, 1, 1, 1, false, false},
                 Case{2, 5, 0, 9, false, false}, Case{1, 16, 301, 64, false, false},
                 Case{1, 16, 33, 80, false, true}}) {
    INFO("batch " << c.batch << ", " << c.m << "x" << c.k << " @ " << c.k << "x" << c.n
                  << (c.ta ? ", A transposed" : "") << (c.tb ? ", B transposed" : ""));
    Tensor a = randn(c.ta ? Shape{c.batch, c.k, c.m} : Shape{c.batch, c.m, c.k}, DType::f32, &gen)
                   .to(DType::bf16);
    Tensor b = randn(c.tb ? Shape{c.batch, c.n, c.k} : Shape{c.batch, c.k, c.n}, DType::f32, &gen)
                   .to(DType::bf16);
    if (c.ta) a = a.transpose(1, 2);
    if (c.tb) b = b.transpose(1, 2);
    const Tensor got = matmul(a, b);
    REQUIRE(got.dtype() == DType::bf16);
    REQUIRE(got.shape() == Shape{c.batch, c.m, c.n});
    const Tensor a64 = a.to(DType::f64), b64 = b.to(DType::f64);
    const Tensor exact = matmul(a64, b64), magnitude = matmul(abs(a64), abs(b64));
    // One bf16 rounding of the result (half an ulp: 2^-9 relative), and f32 sums of k products.
    const Tensor bound = add(mul(abs(exact), std::ldexp(1.0, -8)),
                             mul(magnitude, static_cast<double>(c.k) * std::ldexp(1.0, -23)));
    CHECK(all(le(abs(sub(got.to(DType::f64), exact)), bound)).item<bool>());
  }
}

TEST_CASE("gradients flow through narrow ops in the narrow dtype", "[ops][lowp]") {
  Generator gen(3);
  Tensor x32 = randn({2, 3, 5, 5}, DType::f32, &gen), w32 = randn({4, 3, 3, 3}, DType::f32, &gen);
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor x = x32.to(dt).set_requires_grad(), w = w32.to(dt).set_requires_grad();
    Tensor xr = x32.to(dt).to(DType::f32).set_requires_grad();
    Tensor wr = w32.to(dt).to(DType::f32).set_requires_grad();
    sum(relu(conv2d(x, w, Tensor(), 1, 1))).backward();
    sum(relu(conv2d(xr, wr, Tensor(), 1, 1).to(dt).to(DType::f32))).backward();
    REQUIRE(x.grad().dtype() == dt);
    REQUIRE(w.grad().dtype() == dt);
    // Rounding of intermediates differs slightly (the reference's chain rounds at other points).
    testing::require_close(x.grad().to(DType::f32), xr.grad(), 2e-2, 2e-2, "input grad");
    testing::require_close(w.grad().to(DType::f32), wr.grad(), 2e-2, 5e-2, "weight grad");
  }
}

TEST_CASE("narrow convolutions: forward and gradients equal the f32 kernels' results rounded",
          "[ops][lowp]") {
  // The direct and Winograd kernels read f16/bf16 tensors as they are (widening what they copy,
  // rounding each output block): every result must be bit for bit the f32 computation on the
  // same values, rounded once. The shapes reach each path (the direct kernels need 32 output
  // positions, their weight gradient 64 a chunk of samples): few channels (direct), 32 or more at
  // stride 1 (Winograd on AVX-512, forward and input gradient), stride 2 (direct forward, col2im
  // input gradient), odd widths without padding, non-square maps with unequal pads, maps too
  // small for the direct forward, a bias, 1x1 and 7x7 convolutions, groups and dilation
  // (im2col), 9 and 17 samples (the weight gradient's chunks of samples, each serving several
  // blocks of output channels) and channels-last tensors (through f32 copies).
  // On a CPU with bf16 dot products, a row-major bf16 convolution's output and gradients (but the
  // bias's, a sum in f64) come from the bf16 kernels and the bf16 GEMM (vdpbf16ps), which add
  // products two at a time in another order: those are checked against the f64 result, within
  // one bf16 rounding plus the f32 summation error of their terms.
  const bool dot = kernels::cpu_bf16_dot();
  if (!dot) WARN("this CPU has no AVX512_BF16: the bf16 kernels and the bf16 GEMM do not run");
  struct Case {
    int64_t n, ci, co, h, w, k, stride, pad_h, pad_w;
    bool bias = false, channels_last = false;
    int64_t groups = 1, dilation = 1;
  };
  Generator gen(5);
  for (Case c : {Case{3, 3, 10, 9, 9, 3, 1, 1, 1}, Case{2, 32, 9, 8, 8, 3, 1, 1, 1, true},
                 Case{2, 5, 17, 15, 15, 3, 2, 1, 1, true}, Case{2, 40, 8, 11, 11, 3, 1, 0, 0},
                 Case{2, 6, 4, 5, 5, 1, 1, 0, 0, true},
                 Case{2, 16, 8, 6, 6, 3, 1, 1, 1, true, true}, Case{2, 4, 8, 17, 17, 3, 2, 0, 0},
                 Case{17, 3, 5, 6, 6, 3, 1, 2, 2}, Case{2, 3, 4, 7, 7, 7, 2, 3, 3},
                 Case{9, 3, 20, 16, 16, 3, 2, 1, 1}, Case{3, 6, 4, 24, 24, 1, 1, 0, 0, true},
                 Case{2, 8, 32, 8, 8, 3, 1, 1, 1}, Case{2, 5, 6, 13, 16, 3, 2, 2, 1},
                 Case{2, 4, 6, 7, 9, 3, 1, 1, 2}, Case{2, 3, 4, 1, 1, 3, 1, 1, 1},
                 Case{2, 3, 4, 3, 3, 3, 2, 1, 1}, Case{2, 4, 6, 8, 8, 3, 1, 1, 1, false, false, 2},
                 Case{2, 3, 4, 9, 9, 3, 1, 2, 2, false, false, 1, 2}}) {
    const int64_t oh = (c.h + 2 * c.pad_h - c.dilation * (c.k - 1) - 1) / c.stride + 1;
    const int64_t ow = (c.w + 2 * c.pad_w - c.dilation * (c.k - 1) - 1) / c.stride + 1;
    for (DType dt : {DType::f16, DType::bf16}) {
      INFO(dt << ": " << c.n << "x" << c.ci << "x" << c.h << "x" << c.w << " -> " << c.co << ", "
              << c.k << "x" << c.k << " stride " << c.stride << " pad " << c.pad_h << "," << c.pad_w
              << (c.bias ? ", bias" : "") << (c.channels_last ? ", channels-last" : "")
              << ", groups " << c.groups << ", dilation " << c.dilation);
      auto draw = [&](Shape s) { return randn(s, DType::f32, &gen).to(dt).detach(); };
      Tensor x = draw({c.n, c.ci, c.h, c.w}), w = draw({c.co, c.ci / c.groups, c.k, c.k});
      Tensor b = c.bias ? draw({c.co}) : Tensor();
      if (c.channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
      Tensor dy = draw({c.n, c.co, oh, ow});
      // The results in `as`; with `magnitude`, of the absolute values (bounds on the sums' terms).
      auto run = [&](DType as, bool magnitude = false) {
        auto leaf = [&](const Tensor& t) {
          return (magnitude ? abs(t.to(as)) : t.to(as)).detach().set_requires_grad();
        };
        std::vector<Tensor> leaves{leaf(x), leaf(w)};
        if (c.bias) leaves.push_back(leaf(b));
        Tensor y = conv2d(leaves[0], leaves[1], c.bias ? leaves[2] : Tensor(), c.stride,
                          Int2(c.pad_h, c.pad_w), c.dilation, c.groups);
        sum(mul(y, magnitude ? abs(dy.to(as)) : dy.to(as))).backward();
        std::vector<Tensor> results{y.detach()};
        for (auto& l : leaves) results.push_back(l.grad());
        return results;
      };
      const std::vector<Tensor> got = run(dt), want = run(DType::f32);
      const std::vector<Tensor> exact = run(DType::f64), magnitude = run(DType::f64, true);
      const char* names[] = {"output", "input grad", "weight grad", "bias grad"};
      for (size_t i = 0; i < got.size(); ++i) {
        INFO(names[i]);
        REQUIRE(got[i].dtype() == dt);
        const bool by_dot = dot && dt == DType::bf16 && !c.channels_last && i != 3;
        if (!by_dot) {
          CHECK(equal(got[i], want[i].to(dt)));
          continue;
        }
        const double terms = static_cast<double>(i == 0   ? c.k * c.k * c.ci / c.groups
                                                 : i == 1 ? c.k * c.k * c.co / c.groups
                                                          : c.n * oh * ow);
        const Tensor bound = add(mul(abs(exact[i]), std::ldexp(1.0, -8)),
                                 mul(magnitude[i], terms * std::ldexp(1.0, -23)));
        CHECK(all(le(abs(sub(got[i].to(DType::f64), exact[i])), bound)).item<bool>());
      }
    }
  }
}

TEST_CASE("rand and randn in f16 round the f32 draws", "[ops][lowp]") {
  for (DType dt : {DType::f16, DType::bf16}) {
    Generator a(11), b(11);
    CHECK(equal(rand({100}, dt, &a), rand({100}, DType::f32, &b).to(dt)));
    CHECK(equal(randn({100}, dt, &a), randn({100}, DType::f32, &b).to(dt)));
  }
}

TEST_CASE("var and std of f16 and bf16 keep the dtype, as torch's", "[lowp]") {
  // They divided by an f32 count, which made the result f32. The count stays f32 inside (70000
  // is past f16's range), the result is the input's dtype, the f32 result rounded.
  Generator g(3);
  const Tensor x = randn({70000}, DType::f32, &g).mul(3.0);
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO("dtype " << dt);
    const Tensor narrow = x.to(dt);
    const Tensor v = var(narrow), s = narrow.std(), rows = var(narrow.reshape({7, 10000}), {1});
    CHECK(v.dtype() == dt);
    CHECK(s.dtype() == dt);
    CHECK(rows.dtype() == dt);
    const double expected = var(narrow.to(DType::f64)).item<double>();
    CHECK(v.to(DType::f64).item<double>() ==
          Approx(expected).epsilon(dt == DType::f16 ? 2e-3 : 1e-2));
    CHECK(s.to(DType::f64).item<double>() ==
          Approx(std::sqrt(expected)).epsilon(dt == DType::f16 ? 2e-3 : 1e-2));
  }
}
