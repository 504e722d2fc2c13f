// Indexing by tensors of indices on the CPU, timed for benchmarks/bench_index.py (which runs
// PyTorch's same cases in its own process beside it): an embedding lookup (forward, and forward
// + backward into a dense weight gradient) and index_add of rows. Prints one JSON object of
// median milliseconds per case.
// Usage: bench_index [--threads T] [--steps N] [--table N] [--dim D] [--tokens K]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "guarded_main.hpp"
#include "median.hpp"
#include "tandem/tandem.hpp"

using namespace tandem;

static int run(int argc, char** argv) {
  CLI::App app{"tandem indexing benchmark (embedding, index_add)"};
  int threads = static_cast<int>(std::thread::hardware_concurrency()), steps = 30;
  int64_t table = 50000, dim = 128, tokens = 16384;
  app.add_option("--threads", threads, "CPU threads")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed calls per case (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--table", table, "embedding rows")->check(CLI::PositiveNumber);
  app.add_option("--dim", dim, "embedding width")->check(CLI::PositiveNumber);
  app.add_option("--tokens", tokens, "indices per call")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);

  Generator gen(1);
  Tensor weight = randn({table, dim}, {}, &gen);
  weight.set_requires_grad(true);
  const Tensor ids = randint(0, table, {tokens}, DType::i64, &gen);
  const Tensor grad = randn({tokens, dim}, {}, &gen);
  Tensor rows = zeros({table, dim});
  auto time_ms = [&](const std::function<void()>& f) {
    for (int i = 0; i < 3; ++i) f();  // warm-up: the allocator's cache, the pool's threads
    std::vector<double> ms;
    for (int i = 0; i < steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return median(ms);
  };
  nlohmann::json out = {{"framework", "tandem"}, {"threads", threads}, {"table", table},
                        {"dim", dim}, {"tokens", tokens}};
  {
    NoGradGuard no_grad;
    out["embedding_fwd_ms"] = time_ms([&] { embedding(weight, ids); });
  }
  out["embedding_fwd_bwd_ms"] = time_ms([&] {
    weight.set_grad(Tensor());
    embedding(weight, ids).backward(grad);
  });
  out["index_add_ms"] = time_ms([&] { rows.index_add_(0, ids, grad); });
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

int main(int argc, char** argv) { return bench::guarded_main("bench_index", argc, argv, run); }
