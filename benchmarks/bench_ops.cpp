// Op benchmark: f32 GEMM 1024^3 against the machine's measured FMA peak, and the convolutions of
// a ResNet (forward, forward + backward), each checked against and timed beside libtorch in the
// same process (f32, and bf16 1024^3); then f16/bf16 elementwise ops, a convolution and a matrix
// product, narrow tensors straight into the kernels against the copy-widen-copy they replaced.
// Prints a table and writes JSON (--json FILE).
// With --convs resnet50: only the convolutions, every distinct one of ResNet-50's, and the sum of
// their forward + backward times as a step runs them.
// With --ops: only a sweep of common layers (activations, pooling, linear, softmax and losses,
// normalization, dropout, reductions, copies, embedding, bmm), forward + backward.
// --peer none times tandem alone (benchmarks/ops_compare.py runs the sweep so, beside PyTorch in
// a process of its own).
// Usage: bench_ops [--threads T] [--repeats R] [--json FILE] [--quick] [--convs resnet20|resnet50]
//                  [--ops] [--peer libtorch|none]
#include <immintrin.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "guarded_main.hpp"
#include "median.hpp"
#include "tandem/kernels/cpu_isa.hpp"
#include "tandem/tandem.hpp"

#ifdef TANDEM_BENCH_LIBTORCH
#include <torch/torch.h>
#endif

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_of(const std::function<void()>& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Peak f32 FLOP/s: independent FMA chains on every thread (enough chains to cover the FMA
// latency on two pipes), with the vector width of the instruction set tandem's kernels run with
// (chosen at run time, so the probe is compiled for each with target attributes).
// The chains loops are unrolled by pragma (12 = kChains), so that the chains stay in registers
// at the benchmarks' -O1 too (benchmarks/CMakeLists.txt).
constexpr int kChains = 12;
constexpr int64_t kPeakIters = 20000000;

__attribute__((target("avx512f"))) float fma_chains_avx512() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + c * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < kPeakIters; ++i)
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
  float s = 0;
  for (int c = 0; c < kChains; ++c) s += _mm512_reduce_add_ps(acc[c]);
  return s;
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2() {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.0f + c * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < kPeakIters; ++i)
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], m, a);
  float s = 0;
  for (int c = 0; c < kChains; ++c) s += _mm256_cvtss_f32(acc[c]);
  return s;
}

double measure_peak_flops(int threads) {
  const std::string isa = kernels::cpu_isa_name();
  float (*chains)() = isa == "avx512" ? fma_chains_avx512 : isa == "avx2" ? fma_chains_avx2 : nullptr;
  if (!chains) return 0.0;
  const int lanes = isa == "avx512" ? 16 : 8;
  std::atomic<float> sink{0};
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double t = seconds_of([&] {
      std::vector<std::thread> pool;
      for (int i = 0; i < threads; ++i) pool.emplace_back([&] { sink = sink + chains(); });
      for (auto& th : pool) th.join();
    });
    best = std::max(best, 2.0 * lanes * kChains * kPeakIters * threads / t);
  }
  return best;
}

struct Row {
  std::string name;
  double flops;  // per call
  double tandem_s = 0, torch_s = 0, max_rel_err = -1;
  double steady_s = 0;  // GEMM only: back-to-back calls, caches warm (how BLAS is usually timed)
};

void print_row(const Row& r) {
  std::printf("%-34s %9.3f ms %8.1f GFLOP/s", r.name.c_str(), 1e3 * r.tandem_s, r.flops / r.tandem_s / 1e9);
  if (r.torch_s > 0)
    std::printf(" | libtorch %9.3f ms %8.1f GFLOP/s | ratio %.2f | max rel err %.1e", 1e3 * r.torch_s,
                r.flops / r.torch_s / 1e9, r.tandem_s / r.torch_s, r.max_rel_err);
  std::printf("\n");
  std::fflush(stdout);
}

#ifdef TANDEM_BENCH_LIBTORCH
torch::Tensor to_torch(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<int64_t> shape(c.shape().begin(), c.shape().end());
  return torch::from_blob(c.raw_data(), shape, torch::kFloat32).clone();
}
double max_rel_err(const Tensor& ours, const torch::Tensor& theirs) {
  auto a = ours.to_vector<float>();
  auto b = theirs.contiguous();
  const float* pb = b.data_ptr<float>();
  double scale = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) scale = std::max(scale, std::fabs(double(pb[i])));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - pb[i]));
  return scale > 0 ? worst / scale : worst;
}
#endif

// Times tandem and the peer alternately, `repeats` times after a warm-up, and keeps medians.
void time_pair(Row& row, int repeats, const std::function<void()>& ours,
               const std::function<void()>& theirs) {
  ours();
  if (theirs) theirs();
  std::vector<double> a, b;
  for (int i = 0; i < repeats; ++i) {
    a.push_back(seconds_of(ours));
    if (theirs) b.push_back(seconds_of(theirs));
  }
  row.tandem_s = median(a);
  row.torch_s = theirs ? median(b) : 0;
}

struct ConvCase {
  std::string name;
  int64_t n, cin, cout, hw, k, stride, pad;
  int count = 1;  // how many times a step of the model runs this shape
};

// The convolutions of torchvision's ResNet-50 on 64x64 images, batch 32 (bench_resnet.py
// --model resnet50 --channels 3 --size 64 --batch 32), one case per distinct shape.
std::vector<ConvCase> resnet50_convs() {
  std::vector<ConvCase> v = {{"r50 stem 3->64 7x7 s2 64x64", 32, 3, 64, 64, 7, 2, 3, 1}};
  const int64_t widths[] = {64, 128, 256, 512}, blocks[] = {3, 4, 6, 3};
  int64_t in = 64, hw = 16;
  for (int s = 0; s < 4; ++s) {
    const int64_t w = widths[s], out = 4 * w, stride = s == 0 ? 1 : 2, ho = hw / stride;
    auto add = [&](int64_t ci, int64_t co, int64_t k, int64_t st, int64_t size, int count) {
      v.push_back({"r50 " + std::to_string(ci) + "->" + std::to_string(co) + " " +
                       std::to_string(k) + "x" + std::to_string(k) + (st == 2 ? " s2 " : " ") +
                       std::to_string(size) + "x" + std::to_string(size) +
                       (count > 1 ? " (x" + std::to_string(count) + ")" : ""),
                   32, ci, co, size, k, st, k / 2, count});
    };
    add(in, w, 1, 1, hw, 1);                                // first block: reduce
    add(w, w, 3, stride, hw, stride == 1 ? blocks[s] : 1);  // 3x3 (strided from stage 2 on)
    add(w, out, 1, 1, ho, blocks[s]);                       // expand (every block)
    add(in, out, 1, stride, hw, 1);                         // downsample
    add(out, w, 1, 1, ho, blocks[s] - 1);                   // other blocks: reduce
    if (stride == 2) add(w, w, 3, 1, ho, blocks[s] - 1);    // and their 3x3
    in = out;
    hw = ho;
  }
  return v;
}

// A layer's forward + backward in both libraries: f32 leaves of the given shapes (randn, the same
// values on both sides), the output's gradient randn too.
// Without libtorch (or with --peer none) only tandem's side is built and timed.
#ifdef TANDEM_BENCH_LIBTORCH
using TV = std::vector<torch::Tensor>;
using PeerOp = std::function<torch::Tensor(const TV&)>;
#define TORCH_SIDE(...) __VA_ARGS__
#else
using PeerOp = std::nullptr_t;
#define TORCH_SIDE(...) nullptr
#endif
struct OpCase {
  std::string name;
  std::vector<Shape> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> ours;
  PeerOp theirs;
};

// Common layers at the sizes of a small CNN or MLP step, forward + backward beside libtorch;
// rows at 2x libtorch's time or more are marked (such a row was max pooling's backward, 50x).
void op_sweep(int repeats, bool peer, Generator& gen, std::vector<Row>& rows) {
  using V = std::vector<Tensor>;
  const Shape act{128, 64, 28, 28};
  Tensor target = randint(0, 1000, {128}, DType::i64, &gen);
  Tensor ids = randint(0, 10000, {128, 64}, DType::i64, &gen);
  // CTC: 16 targets of 10 labels in 1..19 (ops_torch.py draws the same), 50 frames each.
  std::vector<int64_t> labels;
  for (int64_t n = 0; n < 16; ++n)
    for (int64_t s = 0; s < 10; ++s) labels.push_back(1 + (n * 7 + s * 3) % 19);
  const Tensor ctc_targets = from_vector(labels, {16, 10});
  const std::vector<int64_t> ctc_frames(16, 50), ctc_lengths(16, 10);
#ifdef TANDEM_BENCH_LIBTORCH
  torch::Tensor tctc = torch::tensor(labels).reshape({16, 10});
  torch::Tensor tframes = torch::full({16}, 50, torch::kInt64),
                tlengths = torch::full({16}, 10, torch::kInt64);
  torch::Tensor ttarget = torch::from_blob(target.to_vector<int64_t>().data(), {128}, torch::kInt64).clone();
  torch::Tensor tids =
      torch::from_blob(ids.to_vector<int64_t>().data(), {128, 64}, torch::kInt64).clone();
  namespace F = torch::nn::functional;
#endif
  const std::vector<OpCase> cases = {
      {"relu (128,64,28,28)",
       {act},
       [](const V& v) { return relu(v[0]); },
       TORCH_SIDE([](const TV& v) { return torch::relu(v[0]); })},
      {"add (128,64,28,28)",
       {act, act},
       [](const V& v) { return add(v[0], v[1]); },
       TORCH_SIDE([](const TV& v) { return v[0] + v[1]; })},
      {"mul (128,64,28,28)",
       {act, act},
       [](const V& v) { return mul(v[0], v[1]); },
       TORCH_SIDE([](const TV& v) { return v[0] * v[1]; })},
      {"sigmoid (128,4096)",
       {{128, 4096}},
       [](const V& v) { return sigmoid(v[0]); },
       TORCH_SIDE([](const TV& v) { return torch::sigmoid(v[0]); })},
      {"tanh (128,4096)",
       {{128, 4096}},
       [](const V& v) { return tanh(v[0]); },
       TORCH_SIDE([](const TV& v) { return torch::tanh(v[0]); })},
      {"gelu (128,4096)",
       {{128, 4096}},
       [](const V& v) { return gelu(v[0]); },
       TORCH_SIDE([](const TV& v) { return F::gelu(v[0]); })},
      {"silu (128,4096)",
       {{128, 4096}},
       [](const V& v) { return silu(v[0]); },
       TORCH_SIDE([](const TV& v) { return torch::silu(v[0]); })},
      {"elu (128,4096)",
       {{128, 4096}},
       [](const V& v) { return elu(v[0]); },
       TORCH_SIDE([](const TV& v) { return torch::elu(v[0]); })},
      {"softplus (128,4096)",
       {{128, 4096}},
       [](const V& v) { return softplus(v[0]); },
       TORCH_SIDE([](const TV& v) { return torch::softplus(v[0]); })},
      {"mish (128,4096)",
       {{128, 4096}},
       [](const V& v) { return mish(v[0]); },
       TORCH_SIDE([](const TV& v) { return torch::mish(v[0]); })},
      {"leaky_relu (128,4096)",
       {{128, 4096}},
       [](const V& v) { return leaky_relu(v[0], 0.2); },
       TORCH_SIDE([](const TV& v) { return torch::leaky_relu(v[0], 0.2); })},
      {"hardswish (128,4096)",
       {{128, 4096}},
       [](const V& v) { return hardswish(v[0]); },
       TORCH_SIDE([](const TV& v) { return torch::hardswish(v[0]); })},
      {"hardsigmoid (128,4096)",
       {{128, 4096}},
       [](const V& v) { return hardsigmoid(v[0]); },
       TORCH_SIDE([](const TV& v) { return torch::hardsigmoid(v[0]); })},
      {"log_sigmoid (128,4096)",
       {{128, 4096}},
       [](const V& v) { return log_sigmoid(v[0]); },
       TORCH_SIDE([](const TV& v) { return torch::log_sigmoid(v[0]); })},
      {"relu6 (128,4096)",
       {{128, 4096}},
       [](const V& v) { return relu6(v[0]); },
       TORCH_SIDE([](const TV& v) { return torch::nn::functional::relu6(v[0]); })},
      {"softsign (128,4096)",
       {{128, 4096}},
       [](const V& v) { return softsign(v[0]); },
       TORCH_SIDE([](const TV& v) { return torch::nn::functional::softsign(v[0]); })},
      {"prelu (128,64,28,28)",
       {act, {64}},
       [](const V& v) { return prelu(v[0], v[1]); },
       TORCH_SIDE([](const TV& v) { return torch::prelu(v[0], v[1]); })},
      {"cumsum dim 1 (128,4096)",
       {{128, 4096}},
       [](const V& v) { return cumsum(v[0], 1); },
       TORCH_SIDE([](const TV& v) { return torch::cumsum(v[0], 1); })},
      {"sort dim 1 (128,4096)",
       {{128, 4096}},
       [](const V& v) { return sort(v[0], 1).first; },
       TORCH_SIDE([](const TV& v) { return std::get<0>(torch::sort(v[0], 1)); })},
      {"topk 5 (128,1000)",
       {{128, 1000}},
       [](const V& v) { return topk(v[0], 5).first; },
       TORCH_SIDE([](const TV& v) { return std::get<0>(torch::topk(v[0], 5)); })},
      {"logsumexp dim 1 (128,1000)",
       {{128, 1000}},
       [](const V& v) { return logsumexp(v[0], 1); },
       TORCH_SIDE([](const TV& v) { return torch::logsumexp(v[0], 1); })},
      {"einsum bhqd,bhkd (8,8,128,64)",
       {{8, 8, 128, 64}, {8, 8, 128, 64}},
       [](const V& v) {
         return einsum("bhqd,bhkd->bhqk", {v[0], v[1]});
       },
       TORCH_SIDE([](const TV& v) {
         return torch::einsum("bhqd,bhkd->bhqk", {v[0], v[1]});
       })},
      {"multihead attention self (128,16,256) 8 heads",
       {{128, 16, 256}, {768, 256}, {768}, {256, 256}, {256}},
       [](const V& v) {
         return std::get<0>(nn::functional::multi_head_attention_forward(
             v[0], v[0], v[0],
             nn::functional::MultiheadAttentionForwardFuncOptions(256, 8, v[1], v[2], {}, {}, false,
                                                                  0.0, v[3], v[4])
                 .need_weights(false)));
       },
       TORCH_SIDE([](const TV& v) {
         return std::get<0>(
             F::multi_head_attention_forward(v[0], v[0], v[0],
                                             F::MultiheadAttentionForwardFuncOptions(
                                                 256, 8, v[1], v[2], {}, {}, false, 0.0, v[3], v[4])
                                                 .need_weights(false)));
       })},
      {"max_pool2d 2/2 (128,64,28,28)",
       {act},
       [](const V& v) { return max_pool2d(v[0], 2, 2); },
       TORCH_SIDE([](const TV& v) { return torch::max_pool2d(v[0], 2, 2); })},
      {"max_pool2d 3/2 pad 1 (128,64,28,28)",
       {act},
       [](const V& v) { return max_pool2d(v[0], 3, 2, 1); },
       TORCH_SIDE([](const TV& v) { return torch::max_pool2d(v[0], 3, 2, 1); })},
      {"avg_pool2d 2/2 (128,64,28,28)",
       {act},
       [](const V& v) { return avg_pool2d(v[0], 2, 2); },
       TORCH_SIDE([](const TV& v) { return torch::avg_pool2d(v[0], 2, 2); })},
      {"adaptive_avg_pool2d 1 (128,512,7,7)",
       {{128, 512, 7, 7}},
       [](const V& v) { return adaptive_avg_pool2d(v[0], 1); },
       TORCH_SIDE([](const TV& v) {
         return torch::adaptive_avg_pool2d(v[0], {1, 1});
       })},
      {"conv3d 3x3x3 16->32 pad 1 (4,16,16,32,32)",
       {{4, 16, 16, 32, 32}, {32, 16, 3, 3, 3}},
       [](const V& v) { return conv3d(v[0], v[1], {}, 1, 1); },
       TORCH_SIDE([](const TV& v) { return torch::conv3d(v[0], v[1], {}, 1, 1); })},
      {"max_pool3d 2/2 (8,32,16,32,32)",
       {{8, 32, 16, 32, 32}},
       [](const V& v) { return max_pool3d(v[0], 2, 2); },
       TORCH_SIDE([](const TV& v) { return torch::max_pool3d(v[0], 2, 2); })},
      {"avg_pool3d 3/2 pad 1 (8,32,16,32,32)",
       {{8, 32, 16, 32, 32}},
       [](const V& v) { return avg_pool3d(v[0], 3, 2, 1); },
       TORCH_SIDE([](const TV& v) { return torch::avg_pool3d(v[0], 3, 2, 1); })},
      {"linear 512->1000 (128)",
       {{128, 512}, {1000, 512}, {1000}},
       [](const V& v) { return linear(v[0], v[1], v[2]); },
       TORCH_SIDE([](const TV& v) { return torch::linear(v[0], v[1], v[2]); })},
      {"log_softmax (128,1000)",
       {{128, 1000}},
       [](const V& v) { return log_softmax(v[0], 1); },
       TORCH_SIDE([](const TV& v) { return torch::log_softmax(v[0], 1); })},
      {"softmax (128,1000)",
       {{128, 1000}},
       [](const V& v) { return softmax(v[0], 1); },
       TORCH_SIDE([](const TV& v) { return torch::softmax(v[0], 1); })},
      {"cross_entropy (128,1000)",
       {{128, 1000}},
       [&](const V& v) { return cross_entropy(v[0], target); },
       TORCH_SIDE([&](const TV& v) { return F::cross_entropy(v[0], ttarget); })},
      {"ctc_loss (T 50, N 16, C 20, S 10)",
       {{50, 16, 20}},
       [&](const V& v) {
         return ctc_loss(log_softmax(v[0], 2), ctc_targets, ctc_frames, ctc_lengths);
       },
       TORCH_SIDE([&](const TV& v) {
         return F::ctc_loss(torch::log_softmax(v[0], 2), tctc, tframes, tlengths);
       })},
      {"layer_norm 512 (4096,512)",
       {{4096, 512}, {512}, {512}},
       [](const V& v) { return layer_norm(v[0], {512}, v[1], v[2]); },
       TORCH_SIDE([](const TV& v) { return torch::layer_norm(v[0], {512}, v[1], v[2]); })},
      {"dropout 0.5 (128,4096)",
       {{128, 4096}},
       [](const V& v) { return dropout(v[0], 0.5); },
       TORCH_SIDE([](const TV& v) { return torch::dropout(v[0], 0.5, true); })},
      {"sum over h,w (128,64,28,28)",
       {act},
       [](const V& v) {
         return sum(v[0], {2, 3});
       },
       TORCH_SIDE([](const TV& v) {
         return v[0].sum({2, 3});
       })},
      {"transpose + contiguous (128,64,784)",
       {{128, 64, 784}},
       [](const V& v) { return transpose(v[0], 1, 2).contiguous(); },
       TORCH_SIDE([](const TV& v) { return v[0].transpose(1, 2).contiguous(); })},
      {"cat dim 1 (128,64,28,28) x2",
       {act, act},
       [](const V& v) {
         return cat({v[0], v[1]}, 1);
       },
       TORCH_SIDE([](const TV& v) {
         return torch::cat({v[0], v[1]}, 1);
       })},
      {"embedding 10000x256 (128,64)",
       {{10000, 256}},
       [&](const V& v) { return embedding(v[0], ids); },
       TORCH_SIDE([&](const TV& v) { return torch::embedding(v[0], tids); })},
      // Per-op cost: 96 ops on 8 elements, where dispatch, autograd and allocation are the
      // time (on a GPU, the host's share of each kernel launch). In-process libtorch is its peer;
      // ops_torch.py leaves it out, as its time would be the Python interpreter's.
      {"96 ops on (8): per-op overhead",
       {{8}, {8}, {8}},
       [](const V& v) {
         Tensor x = v[0];
         for (int i = 0; i < 32; ++i) x = relu(add(mul(x, v[1]), v[2]));
         return x;
       },
       TORCH_SIDE([](const TV& v) {
         torch::Tensor x = v[0];
         for (int i = 0; i < 32; ++i) x = torch::relu(x * v[1] + v[2]);
         return x;
       })},
      {"bmm (64,128,64)x(64,64,128)",
       {{64, 128, 64}, {64, 64, 128}},
       [](const V& v) { return bmm(v[0], v[1]); },
       TORCH_SIDE([](const TV& v) { return torch::bmm(v[0], v[1]); })},
      {"matmul 1024^3",
       {{1024, 1024}, {1024, 1024}},
       [](const V& v) { return matmul(v[0], v[1]); },
       TORCH_SIDE([](const TV& v) { return torch::matmul(v[0], v[1]); })},
      {"lstm 128->256 (T 32, N 64)",
       {{32, 64, 128}, {1024, 128}, {1024, 256}, {1024}, {1024}},
       [](const V& v) {
         return std::get<0>(
             lstm(v[0], {}, {v.begin() + 1, v.end()}, true, 1, 0.0, true, false, false));
       },
       TORCH_SIDE([](const TV& v) {
         torch::Tensor zero = torch::zeros({1, 64, 256});
         return std::get<0>(torch::lstm(v[0], {zero, zero}, torch::TensorList(v).slice(1), true, 1,
                                        0.0, true, false, false));
       })},
  };
  std::printf("\nop sweep, f32 forward + backward%s:\n",
              peer ? " (tandem / libtorch time; <== at 2x or more)" : "");
  for (const OpCase& oc : cases) {
    V leaves;
    for (const Shape& shape : oc.inputs)
      leaves.push_back(randn(shape, {}, &gen).set_requires_grad(true));
    Tensor gy = randn(oc.ours(leaves).shape(), {}, &gen);
    Row row{oc.name, 0};
    auto ours = [&] {
      for (Tensor& t : leaves) t.set_grad(Tensor());
      oc.ours(leaves).backward(gy);
    };
    std::function<void()> theirs;
#ifdef TANDEM_BENCH_LIBTORCH
    TV tleaves;
    for (const Tensor& t : leaves) tleaves.push_back(to_torch(t).set_requires_grad(true));
    torch::Tensor tgy = to_torch(gy);
    if (peer)
      theirs = [&] {
        torch::AutoGradMode mode(true);
        for (torch::Tensor& t : tleaves) t.mutable_grad() = torch::Tensor();
        oc.theirs(tleaves).backward(tgy);
      };
#endif
    time_pair(row, repeats, ours, theirs);
    std::printf("%-40s %9.3f ms", row.name.c_str(), 1e3 * row.tandem_s);
    if (theirs) {
      const double ratio = row.tandem_s / row.torch_s;
      std::printf(" | libtorch %9.3f ms | ratio %.2f%s", 1e3 * row.torch_s, ratio,
                  ratio >= 2 ? "  <==" : "");
    }
    std::printf("\n");
    std::fflush(stdout);
    rows.push_back(row);
  }
}

}  // namespace

static int run(int argc, char** argv) {
#ifdef TANDEM_BENCH_LIBTORCH
  // libtorch's OpenMP threads spin after each parallel region and would steal the cores from
  // the tandem run that follows; passive waiting keeps the alternating timings independent.
  // libgomp reads the variable when it loads, so the process restarts itself once with it set.
  bool no_peer = false;  // nothing of libtorch runs: no restart
  for (int i = 1; i < argc; ++i)
    no_peer |= std::string(argv[i]) == "--peer=none" ||
               (std::string(argv[i]) == "none" && std::string(argv[i - 1]) == "--peer");
  if (!std::getenv("OMP_WAIT_POLICY") && !no_peer) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);
  }
#endif
  CLI::App app{"tandem op benchmark (GEMM and convolutions, beside libtorch)"};
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  int repeats = 7;
  std::string json_path;
  bool quick = false;
  std::string conv_set = "resnet20";
  bool ops = false;
  bool gemm_shapes = false;
#ifdef TANDEM_BENCH_LIBTORCH
  std::string peer_name = "libtorch";
#else
  std::string peer_name = "none";
#endif
  app.add_option("--threads", threads, "CPU threads for tandem and libtorch")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed repetitions per case (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "write the results to this JSON file");
  app.add_flag("--quick", quick, "small sizes (a smoke run)");
  app.add_option("--convs", conv_set,
                 "whose convolutions: resnet20's (28x28, batch 128), or every distinct one of "
                 "resnet50's on 64x64 at batch 32 with a step's total (and nothing else)")
      ->check(CLI::IsMember({"resnet20", "resnet50"}));
  app.add_flag("--ops", ops,
               "only the op sweep: common layers' forward + backward beside libtorch, rows at 2x "
               "libtorch's time or more marked");
  app.add_flag("--gemm-shapes", gemm_shapes,
               "only the f32 GEMMs of ResNet-50's convolutions (64x64 images, batch 32), each "
               "operand laid out as the convolutions pass it: tandem alone, best and median "
               "GFLOP/s of --repeats calls");
  app.add_option("--peer", peer_name,
                 "libtorch in this process (its OpenMP threads waiting passively, which slows it), "
                 "or none: tandem alone, as benchmarks/ops_compare.py runs it beside PyTorch in a "
                 "process of its own")
      ->check(CLI::IsMember({"libtorch", "none"}));
  CLI11_PARSE(app, argc, argv);

  set_num_threads(threads);
  const bool peer = peer_name == "libtorch";
#ifdef TANDEM_BENCH_LIBTORCH
  if (peer) torch::set_num_threads(threads);
  torch::NoGradGuard torch_no_grad_default;  // re-enabled per case where gradients are timed
#else
  if (peer) {
    std::fprintf(stderr, "bench_ops: built without libtorch (install libtorch-dev and rebuild)\n");
    return 1;
  }
#endif
  std::printf("bench_ops: %d threads, %d repeats, peer: %s\n", threads, repeats,
              peer ? "libtorch (same process)" : "none");
  double peak = measure_peak_flops(threads);
  std::printf("CPU kernels: %s (TANDEM_CPU_ISA caps it); measured f32 FMA peak at that width: "
              "%.1f GFLOP/s\n", kernels::cpu_isa_name(), peak / 1e9);

  std::vector<Row> rows;
  Generator gen(1);
  struct NarrowRow {
    std::string name;
    double narrow_s, widen_s;
  };
  std::vector<NarrowRow> narrow_rows;
  auto write_json = [&] {
    if (json_path.empty()) return;
    nlohmann::json j;
    j["threads"] = threads;
    j["repeats"] = repeats;
    j["peak_gflops"] = peak / 1e9;
    j["cpu_isa"] = kernels::cpu_isa_name();
    j["peer"] = peer ? "libtorch" : "none";
    for (const auto& r : rows) {
      nlohmann::json e = {{"name", r.name},
                          {"gflop", r.flops / 1e9},
                          {"tandem_ms", 1e3 * r.tandem_s},
                          {"tandem_gflops", r.flops / r.tandem_s / 1e9}};
      if (r.torch_s > 0) {
        e["libtorch_ms"] = 1e3 * r.torch_s;
        e["ratio_tandem_over_libtorch"] = r.tandem_s / r.torch_s;
        e["max_rel_err"] = r.max_rel_err;
      }
      if (r.steady_s > 0 && peak > 0) {
        e["steady_ms"] = 1e3 * r.steady_s;
        e["steady_gflops"] = r.flops / r.steady_s / 1e9;
        e["steady_fraction_of_peak"] = r.flops / r.steady_s / peak;
        e["alternating_fraction_of_peak"] = r.flops / r.tandem_s / peak;
      }
      j["results"].push_back(e);
    }
    for (const auto& r : narrow_rows)
      j["narrow"].push_back({{"name", r.name},
                             {"narrow_ms", 1e3 * r.narrow_s},
                             {"widen_copy_ms", 1e3 * r.widen_s},
                             {"speedup", r.widen_s / r.narrow_s}});
    std::ofstream out(json_path);
    out << j.dump(2) << "\n";
    TANDEM_CHECK(out.good(), "bench_ops: could not write ", json_path);
    std::printf("wrote %s\n", json_path.c_str());
  };
  if (ops) {
    op_sweep(repeats, peer, gen, rows);
    write_json();
    return 0;
  }
  if (gemm_shapes) {
    struct Shape3 {
      bool ta, tb;
      int64_t m, n, k;
    };
    for (Shape3 s : {Shape3{false, true, 256, 64, 1024}, Shape3{true, false, 64, 1024, 256},
                     Shape3{false, false, 256, 512, 2304}, Shape3{false, true, 256, 2304, 512},
                     Shape3{true, false, 2304, 512, 256}, Shape3{false, true, 64, 147, 1024},
                     Shape3{false, false, 512, 128, 4608}, Shape3{true, false, 128, 1024, 512}}) {
      Tensor a = s.ta ? randn({s.k, s.m}, {}, &gen).t() : randn({s.m, s.k}, {}, &gen);
      Tensor b = s.tb ? randn({s.n, s.k}, {}, &gen).t() : randn({s.k, s.n}, {}, &gen);
      Tensor c = matmul(a, b);  // warm-up
      std::vector<double> t;
      for (int i = 0; i < repeats; ++i) t.push_back(seconds_of([&] { c = matmul(a, b); }));
      const double flops = 2.0 * s.m * s.n * s.k;
      std::printf("gemm %4ldx%4ldx%4ld%s%s  best %6.1f GFLOP/s  median %6.1f GFLOP/s\n",
                  static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.k),
                  s.ta ? ", A transposed" : "", s.tb ? ", B transposed" : "",
                  flops / *std::min_element(t.begin(), t.end()) / 1e9, flops / median(t) / 1e9);
    }
    return 0;
  }
  const bool r50 = conv_set == "resnet50";
  // --- GEMM -------------------------------------------------------------------------------
  if (!r50) {
    int64_t n = quick ? 256 : 1024;
    Row row{"gemm f32 " + std::to_string(n) + "^3", 2.0 * n * n * n};
    Tensor a = randn({n, n}, {}, &gen), b = randn({n, n}, {}, &gen);
    Tensor c;
    std::function<void()> theirs;
#ifdef TANDEM_BENCH_LIBTORCH
    torch::Tensor ta = to_torch(a), tb = to_torch(b), tc;
    if (peer) {
      theirs = [&] { tc = torch::mm(ta, tb); };
      theirs();
      row.max_rel_err = max_rel_err(matmul(a, b), tc);
    }
#endif
    time_pair(row, repeats, [&] { c = matmul(a, b); }, theirs);
    print_row(row);
    std::vector<double> steady;
    for (int i = 0; i < 2 * repeats; ++i) steady.push_back(seconds_of([&] { c = matmul(a, b); }));
    row.steady_s = median(steady);
    std::printf("%-34s %9.3f ms %8.1f GFLOP/s", "gemm, steady state", 1e3 * row.steady_s,
                row.flops / row.steady_s / 1e9);
    if (peak > 0)  // no FMA peak to measure with the scalar kernels
      std::printf(" = %.0f%% of the measured peak (back-to-back; alternating with libtorch: %.0f%%)",
                  100 * row.flops / row.steady_s / peak, 100 * row.flops / row.tandem_s / peak);
    std::printf("\n");
    rows.push_back(row);
  }

  // --- bf16 GEMM: the CPU's bf16 dot products where it has them --------------------------------
  if (!r50) {
    int64_t n = quick ? 256 : 1024;
    Row row{"gemm bf16 " + std::to_string(n) + "^3" +
                (kernels::cpu_bf16_dot() ? " (vdpbf16ps)" : " (f32 GEMM)"),
            2.0 * n * n * n};
    Tensor a32 = randn({n, n}, {}, &gen), b32 = randn({n, n}, {}, &gen);
    Tensor a = a32.to(DType::bf16), b = b32.to(DType::bf16), c;
    std::function<void()> theirs;
#ifdef TANDEM_BENCH_LIBTORCH
    torch::Tensor ta = to_torch(a32).to(torch::kBFloat16), tb = to_torch(b32).to(torch::kBFloat16);
    torch::Tensor tc;
    if (peer) {
      theirs = [&] { tc = torch::mm(ta, tb); };
      theirs();
      row.max_rel_err = max_rel_err(matmul(a, b).to(DType::f32), tc.to(torch::kFloat32));
    }
#endif
    time_pair(row, repeats, [&] { c = matmul(a, b); }, theirs);
    print_row(row);
    rows.push_back(row);
  }

  // --- convolutions ---------------------------------------------------------------------------
  std::vector<ConvCase> convs =
      r50 ? resnet50_convs()
          : std::vector<ConvCase>{
                {"conv3x3 64->64 (64,64,32,32)", 64, 64, 64, 32, 3, 1, 1},
                {"resnet20 conv 16->16 28x28", 128, 16, 16, 28, 3, 1, 1},
                {"resnet20 conv 16->32 s2 28x28", 128, 16, 32, 28, 3, 2, 1},
                {"resnet20 conv 32->32 14x14", 128, 32, 32, 14, 3, 1, 1},
                {"resnet20 conv 32->64 s2 14x14", 128, 32, 64, 14, 3, 2, 1},
                {"resnet20 conv 64->64 7x7", 128, 64, 64, 7, 3, 1, 1},
            };
  if (quick) convs.resize(2);
  double step_s[2] = {0, 0};  // tandem, libtorch: fwd+bwd times the shape's count
  for (auto& cc : convs) {
    if (quick) cc.n = 4;
    int64_t ho = (cc.hw + 2 * cc.pad - cc.k) / cc.stride + 1;
    double fwd_flops = 2.0 * cc.n * cc.cout * ho * ho * cc.cin * cc.k * cc.k;
    Tensor x = randn({cc.n, cc.cin, cc.hw, cc.hw}, {}, &gen);
    Tensor w = mul(randn({cc.cout, cc.cin, cc.k, cc.k}, {}, &gen), 0.1).detach();
    Tensor gy = randn({cc.n, cc.cout, ho, ho}, {}, &gen);
    for (bool backward : {false, true}) {
      Row row{cc.name + (backward ? " fwd+bwd" : " fwd"), backward ? 3 * fwd_flops : fwd_flops};
      Tensor xg = x.detach().set_requires_grad(backward), wg = w.detach().set_requires_grad(backward);
      Tensor y;
      auto ours = [&] {
        y = conv2d(xg, wg, Tensor(), cc.stride, cc.pad);
        if (backward) {
          xg.set_grad(Tensor());
          wg.set_grad(Tensor());
          y.backward(gy);
        }
      };
      std::function<void()> theirs;
#ifdef TANDEM_BENCH_LIBTORCH
      torch::Tensor tx = to_torch(x).set_requires_grad(backward);
      torch::Tensor tw = to_torch(w).set_requires_grad(backward);
      torch::Tensor tgy = to_torch(gy), ty;
      if (peer) {
        theirs = [&] {
          torch::AutoGradMode mode(backward);
          ty = torch::conv2d(tx, tw, {}, cc.stride, cc.pad);
          if (backward) {
            tx.mutable_grad() = torch::Tensor();
            tw.mutable_grad() = torch::Tensor();
            ty.backward(tgy);
          }
        };
        ours();
        theirs();
        row.max_rel_err = backward ? std::max(max_rel_err(xg.grad(), tx.grad()),
                                              max_rel_err(wg.grad(), tw.grad()))
                                   : max_rel_err(y, ty);
      }
#endif
      time_pair(row, repeats, ours, theirs);
      print_row(row);
      rows.push_back(row);
      if (backward) step_s[0] += cc.count * row.tandem_s, step_s[1] += cc.count * row.torch_s;
    }
  }
  if (r50) {
    std::printf("%-34s %9.3f ms", "a step's convolutions, fwd+bwd", 1e3 * step_s[0]);
    if (step_s[1] > 0)
      std::printf(" | libtorch %9.3f ms | ratio %.2f", 1e3 * step_s[1], step_s[0] / step_s[1]);
    std::printf("\n");
  }

  // --- f16/bf16: narrow tensors straight into the kernels, against what ops did before (copy
  // the whole tensor to f32, run the f32 op, copy the result back). Same inputs, alternating.
  if (!r50) {
    const int64_t elems = quick ? (1 << 16) : (1 << 22);
    Tensor a32 = randn({elems}, {}, &gen), b32 = randn({elems}, {}, &gen);
    ConvCase cc = convs[1];
    Tensor x32 = randn({cc.n, cc.cin, cc.hw, cc.hw}, {}, &gen);
    Tensor w32 = mul(randn({cc.cout, cc.cin, cc.k, cc.k}, {}, &gen), 0.1).detach();
    const int64_t mn = quick ? 128 : 1024;
    Tensor m32 = randn({mn, mn}, {}, &gen), n32 = randn({mn, mn}, {}, &gen);
    for (DType dt : {DType::f16, DType::bf16}) {
      const std::string suffix = std::string(" ") + dtype_name(dt);
      Tensor a = a32.to(dt), b = b32.to(dt), x = x32.to(dt), w = w32.to(dt), ma = m32.to(dt),
             mb = n32.to(dt);
      auto widened = [dt](const std::function<Tensor(const Tensor&, const Tensor&)>& op) {
        return [dt, op](const Tensor& u, const Tensor& v) {
          return op(u.to(DType::f32), v.to(DType::f32)).to(dt);
        };
      };
      std::vector<std::pair<std::string, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
          {"add" + suffix + " (" + std::to_string(elems) + ")", [](const Tensor& u, const Tensor& v) { return add(u, v); }},
          {"gelu" + suffix + " (" + std::to_string(elems) + ")", [](const Tensor& u, const Tensor&) { return gelu(u); }},
          {"conv 16->16 28x28" + suffix + " fwd",
           [cc](const Tensor& u, const Tensor& v) { return conv2d(u, v, Tensor(), cc.stride, cc.pad); }},
          {"matmul" + suffix + " " + std::to_string(mn) + "^3",
           [](const Tensor& u, const Tensor& v) { return matmul(u, v); }},
      };
      for (auto& [name, op] : ops) {
        const bool conv = name.rfind("conv", 0) == 0, mm = name.rfind("matmul", 0) == 0;
        const Tensor& u = conv ? x : mm ? ma : a;
        const Tensor& v = conv ? w : mm ? mb : b;
        auto wide = widened(op);
        Tensor r1 = op(u, v), r2 = wide(u, v);
        // bf16 products on the CPU's bf16 dot products (matmul, convolution) sum in another order.
        const bool same_order = !((mm || conv) && dt == DType::bf16 && kernels::cpu_bf16_dot());
        if (same_order && !equal(r1, r2))
          std::printf("%s: results differ from the widened computation\n", name.c_str());
        Row row{name, 0};
        time_pair(row, repeats, [&] { r1 = op(u, v); }, [&] { r2 = wide(u, v); });
        std::printf("%-34s %9.3f ms narrow kernels | %9.3f ms copy-widen-copy | %.2fx\n",
                    name.c_str(), 1e3 * row.tandem_s, 1e3 * row.torch_s, row.torch_s / row.tandem_s);
        std::fflush(stdout);
        narrow_rows.push_back({name, row.tandem_s, row.torch_s});
      }
    }
  }

  write_json();
  return 0;
}

int main(int argc, char** argv) { return bench::guarded_main("bench_ops", argc, argv, run); }
