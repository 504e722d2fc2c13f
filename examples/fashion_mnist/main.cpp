// Trains a small CNN on Fashion-MNIST (Debian's dataset-fashion-mnist) with tandem's CPU
// backend: conv-BN-ReLU-pool twice, then a linear classifier, SGD with momentum and a linearly
// decaying learning rate.
// Usage: tandem-fashion-mnist [--epochs N] [--batch-size B] [--lr LR] [--threads T] ...
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "tandem/data/idx.hpp"
#include "tandem/monitor/progress.hpp"
#include "tandem/tandem.hpp"

using namespace tandem;

namespace {

struct Model {
  // Parameters and batch-norm buffers, shapes as torch's Conv2d/BatchNorm2d/Linear.
  Tensor c1w, c1b, bn1w, bn1b, bn1m, bn1v;
  Tensor c2w, c2b, bn2w, bn2b, bn2m, bn2v;
  Tensor fcw, fcb;

  explicit Model(Generator& gen) {
    // torch's default init: kaiming_uniform(a = sqrt(5)) == U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    auto uniform = [&](const Shape& s, int64_t fan_in) {
      double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      return add(mul(rand(s, {}, &gen), 2 * bound), -bound).set_requires_grad();
    };
    c1w = uniform({16, 1, 3, 3}, 9);
    c1b = uniform({16}, 9);
    c2w = uniform({32, 16, 3, 3}, 144);
    c2b = uniform({32}, 144);
    fcw = uniform({10, 32 * 7 * 7}, 32 * 7 * 7);
    fcb = uniform({10}, 32 * 7 * 7);
    bn1w = ones({16}).set_requires_grad();
    bn1b = zeros({16}).set_requires_grad();
    bn2w = ones({32}).set_requires_grad();
    bn2b = zeros({32}).set_requires_grad();
    bn1m = zeros({16}), bn1v = ones({16}), bn2m = zeros({32}), bn2v = ones({32});
  }

  std::vector<Tensor> parameters() const {
    return {c1w, c1b, bn1w, bn1b, c2w, c2b, bn2w, bn2b, fcw, fcb};
  }

  Tensor forward(const Tensor& x, bool training) const {  // x (N, 1, 28, 28)
    Tensor h = conv2d(x, c1w, c1b, 1, 1);
    h = max_pool2d(relu(batch_norm(h, bn1m, bn1v, bn1w, bn1b, training)), 2);  // (N, 16, 14, 14)
    h = conv2d(h, c2w, c2b, 1, 1);
    h = max_pool2d(relu(batch_norm(h, bn2m, bn2v, bn2w, bn2b, training)), 2);  // (N, 32, 7, 7)
    return linear(flatten(h, 1), fcw, fcb);
  }
};

double accuracy(const Model& model, const data::MnistSplit& split, int64_t batch) {
  NoGradGuard no_grad;
  int64_t correct = 0, n = split.images.size(0);
  for (int64_t i = 0; i < n; i += batch) {
    int64_t b = std::min(batch, n - i);
    Tensor pred = argmax(model.forward(split.images.narrow(0, i, b), false), 1);
    correct += sum(eq(pred, split.labels.narrow(0, i, b))).item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

// A CLI11 check with a readable message ("--lr: must be positive, got -1").
CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        try {
          if (std::stod(v) > 0) return "";
        } catch (const std::exception&) {
        }
        return "must be positive, got " + v;
      },
      "POSITIVE");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a small CNN on Fashion-MNIST with tandem"};
  std::string data_dir = data::kFashionMnistDir;
  int epochs = 3, threads = 0;
  int64_t batch = 64, max_steps = -1;
  double lr = 0.05, momentum = 0.9;
  uint64_t seed = 0;
  app.add_option("--data-dir", data_dir, "folder with the IDX files")->capture_default_str();
  app.add_option("--epochs", epochs, "passes over the training set")->check(positive())->capture_default_str();
  app.add_option("--batch-size", batch, "images per step")->check(positive())->capture_default_str();
  app.add_option("--lr", lr, "initial learning rate (decays linearly to 0)")->check(positive())->capture_default_str();
  app.add_option("--momentum", momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--max-steps", max_steps, "stop each epoch after this many steps (smoke runs)");
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    if (threads > 0) set_num_threads(threads);
    data::MnistSplit train = data::load_mnist(data_dir, true);
    data::MnistSplit test = data::load_mnist(data_dir, false);
    Generator gen(seed);
    Model model(gen);
    std::vector<Tensor> velocity;
    for (const auto& p : model.parameters()) velocity.push_back(zeros_like(p));

    const int64_t n = train.images.size(0);
    int64_t steps = n / batch;
    if (max_steps > 0) steps = std::min(steps, max_steps);
    // This example runs on the CPU backend (CUDA ops arrive with their own issue); say what the
    // build has.
    std::printf("tandem-fashion-mnist on the CPU (%s; %d GPU(s) visible)\n",
                cuda::build_info().c_str(), cuda::device_count());
    std::printf("tandem-fashion-mnist: %lld train / %lld test images, %d epochs of %lld steps, "
                "batch %lld, %d threads\n",
                static_cast<long long>(n), static_cast<long long>(test.images.size(0)), epochs,
                static_cast<long long>(steps), static_cast<long long>(batch), get_num_threads());
    double acc = 0, total_seconds = 0;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      // A fresh permutation each epoch, from (seed, epoch): argsort of Philox uniforms.
      Generator perm_gen(seed * 1000003 + epoch);
      std::vector<float> keys = rand({n}, {}, &perm_gen).to_vector<float>();
      std::vector<int64_t> order(n);
      for (int64_t i = 0; i < n; ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });

      monitor::ProgressBar bar("epoch " + std::to_string(epoch) + "/" + std::to_string(epochs), steps,
                               stdout);
      double loss_avg = 0;
      Tensor xb = empty({batch, 1, 28, 28}), yb = empty({batch}, DType::i64);
      for (int64_t step = 0; step < steps; ++step) {
        const float* src = train.images.data_ptr<float>();
        const int64_t* lab = train.labels.data_ptr<int64_t>();
        float* dst = xb.data_ptr<float>();
        int64_t* ydst = yb.data_ptr<int64_t>();
        for (int64_t i = 0; i < batch; ++i) {
          int64_t k = order[step * batch + i];
          std::copy(src + k * 784, src + (k + 1) * 784, dst + i * 784);
          ydst[i] = lab[k];
        }
        Tensor loss = cross_entropy(model.forward(xb, true), yb);
        for (const auto& p : model.parameters()) Tensor(p).set_grad(Tensor());
        loss.backward();
        {
          // SGD with momentum; the rate decays linearly to zero over the whole run.
          NoGradGuard no_grad;
          const double progress = static_cast<double>((epoch - 1) * steps + step) / (epochs * steps);
          const double rate = lr * (1.0 - progress);
          auto params = model.parameters();
          for (size_t i = 0; i < params.size(); ++i) {
            velocity[i].mul_(momentum).add_(params[i].grad());
            params[i].add_(velocity[i], -rate);
          }
        }
        double l = loss.item<double>();
        loss_avg = step == 0 ? l : 0.98 * loss_avg + 0.02 * l;
        char suffix[64];
        std::snprintf(suffix, sizeof suffix, "loss %.4f", loss_avg);
        bar.update(step + 1, (step + 1) * batch, suffix);
      }
      bar.finish();
      double seconds = bar.seconds();
      total_seconds += seconds;
      acc = accuracy(model, test, 500);
      std::printf("epoch %d: train loss %.4f, test accuracy %.2f%%, %.0f img/s\n", epoch, loss_avg,
                  100 * acc, steps * batch / seconds);
    }
    std::printf("done: %d epochs in %.1f s, test accuracy %.2f%%\n", epochs, total_seconds, 100 * acc);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
