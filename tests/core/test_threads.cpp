// Results are bitwise identical whatever the thread count; worker exceptions reach the caller.
#include <atomic>

#include "../util.hpp"

using namespace tandem;

namespace {
// A small training-like computation touching every kernel family.
std::vector<Tensor> workload() {
  Generator g(11);
  Tensor x = randn({8, 3, 12, 12}, {}, &g).set_requires_grad();
  Tensor w = mul(randn({16, 3, 3, 3}, {}, &g), 0.2).detach().set_requires_grad();
  Tensor fc = mul(randn({10, 16 * 6 * 6}, {}, &g), 0.05).detach().set_requires_grad();
  Tensor h = relu(batch_norm(conv2d(x, w, Tensor(), 1, 1), Tensor(), Tensor(), Tensor(), Tensor(), true));
  h = max_pool2d(h, 2);
  Tensor logits = linear(flatten(h, 1), fc);
  Tensor target = randint(0, 10, {8}, DType::i64, &g);
  Tensor loss = cross_entropy(logits, target);
  Tensor big = sum(mul(randn({300000}, {}, &g), 1.0001));
  add(loss, mul(big, 1e-6)).backward();
  Tensor gemm = matmul(randn({300, 700}, {}, &g), randn({700, 520}, {}, &g));
  // 32 channels on 7x7 maps, 20 samples: Winograd on AVX-512 too, several samples per GEMM in
  // groups that follow the threads' shares of the batch; forward and input gradient.
  Tensor x2 = randn({20, 32, 7, 7}, {}, &g).set_requires_grad();
  Tensor w2 = mul(randn({32, 32, 3, 3}, {}, &g), 0.1).detach().set_requires_grad();
  Tensor y2 = conv2d(x2, w2, Tensor(), 1, 1);
  sum(mul(y2, randn({20, 32, 7, 7}, {}, &g))).backward();
  return {loss.detach(), big, x.grad(), w.grad(), fc.grad(), gemm, y2.detach(), x2.grad(), w2.grad()};
}
}  // namespace

TEST_CASE("results do not depend on the thread count", "[threads]") {
  int saved = get_num_threads();
  set_num_threads(1);
  auto one = workload();
  set_num_threads(2);
  auto two = workload();
  set_num_threads(5);
  auto five = workload();
  set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("result " << i);
    CHECK(equal(one[i], two[i]));
    CHECK(equal(one[i], five[i]));
  }
}

TEST_CASE("parallel_for covers the range once and rethrows on the caller", "[threads]") {
  std::vector<std::atomic<int>> hits(10000);
  parallel_for(0, 10000, 7, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) hits[i]++;
  });
  for (auto& h : hits) REQUIRE(h.load() == 1);
  CHECK_THROWS_WITH(parallel_for(0, 1000, 1,
                                 [](int64_t, int64_t hi) {
                                   if (hi == 1000) throw std::runtime_error("chunk failed");
                                 }),
                    "chunk failed");
  CHECK_THROWS_AS(set_num_threads(0), Error);
}
