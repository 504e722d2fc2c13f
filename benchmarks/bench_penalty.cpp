// A WGAN-GP critic step on the CPU, timed for benchmarks/bench_penalty.py (which runs the same
// step in PyTorch in its own process beside it): a DCGAN-style critic on 32x32 images, its
// Wasserstein loss on real and generated batches, and the gradient penalty, whose input
// gradient is taken with create_graph and differentiated again; then an Adam step. Prints one
// JSON object with the median milliseconds per step.
// Usage: bench_penalty [--threads T] [--steps N] [--batch B]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "guarded_main.hpp"
#include "median.hpp"
#include "tandem/tandem.hpp"

using namespace tandem;

static int run(int argc, char** argv) {
  CLI::App app{"tandem gradient-penalty (WGAN-GP) critic step"};
  int threads = static_cast<int>(std::thread::hardware_concurrency()), steps = 20;
  int64_t batch = 64;
  app.add_option("--threads", threads, "CPU threads")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "images per batch")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);
  manual_seed(1);

  auto critic = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 64, 4).stride(2).padding(1)),
      std::make_shared<nn::LeakyReLU>(nn::LeakyReLUOptions().negative_slope(0.2)),
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(64, 128, 4).stride(2).padding(1)),
      std::make_shared<nn::LeakyReLU>(nn::LeakyReLUOptions().negative_slope(0.2)),
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(128, 256, 4).stride(2).padding(1)),
      std::make_shared<nn::LeakyReLU>(nn::LeakyReLUOptions().negative_slope(0.2)),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(256 * 4 * 4, 1));
  optim::Adam optimizer(critic->parameters(), optim::AdamOptions(1e-4).betas({0.5, 0.9}));
  Generator gen(2);
  const Tensor real = randn({batch, 3, 32, 32}, {}, &gen);
  const Tensor fake = randn({batch, 3, 32, 32}, {}, &gen);

  auto step = [&] {
    optimizer.zero_grad();
    Tensor eps = rand({batch, 1, 1, 1}, {}, &gen);
    Tensor x_hat = (eps * real + (1.0 - eps) * fake).requires_grad_(true);
    Tensor d_hat = critic->forward(x_hat);
    Tensor g = autograd::grad({d_hat.sum()}, {x_hat}, {}, {}, /*create_graph=*/true)[0];
    Tensor penalty = pow(g.reshape({batch, -1}).norm(2, 1) - 1.0, 2.0).mean();
    Tensor loss = critic->forward(fake).mean() - critic->forward(real).mean() + penalty * 10.0;
    loss.backward();
    optimizer.step();
    return loss.item<double>();
  };
  for (int i = 0; i < 2; ++i) step();  // warm-up: the allocator's cache, the pool's threads
  std::vector<double> ms;
  double loss = 0;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    loss = step();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  nlohmann::json out = {{"framework", "tandem"}, {"threads", threads}, {"batch", batch},
                        {"step_ms", median(ms)}, {"last_loss", loss}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

int main(int argc, char** argv) { return bench::guarded_main("bench_penalty", argc, argv, run); }
