// Times ResNet training steps (forward, backward, SGD with Nesterov momentum and weight decay, or
// Adam, RMSprop or Adagrad with the same weight decay groups: --optimizer) on
// random batches held in memory, and prints one JSON object. bench_resnet.py runs it next to the
// same loop in PyTorch and writes the comparison.
// Usage: bench_resnet [--model resnet20] [--batch 128] [--channels 1] [--size 28] [--threads 2]
//                     [--steps 30] [--warmup 5] [--device cpu|cuda] [--precision f32|bf16|f16]
//                     [--channels-last] [--cudnn-benchmark] [--profile-last-step]
//                     [--optimizer sgd|adam|rmsprop|adagrad]
// On a GPU it also reports the caching allocator's peak (bench_resnet_gpu.py compares it with
// PyTorch's max_memory_allocated).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "guarded_main.hpp"
#include "median.hpp"
#include "tandem/tandem.hpp"

using namespace tandem;

static int run(int argc, char** argv) {
  CLI::App app{"Time ResNet training steps in tandem"};
  std::string model_name = "resnet20";
  int64_t batch = 128, channels = 1, size = 28, steps = 30, warmup = 5;
  int threads = 2;
  std::string device_name = "cpu", precision = "f32", optimizer = "sgd";
  app.add_option("--model", model_name)->check(CLI::IsMember(nn::resnet_names()));
  app.add_option("--batch", batch)->check(CLI::PositiveNumber);
  app.add_option("--channels", channels)->check(CLI::PositiveNumber);
  app.add_option("--size", size)->check(CLI::PositiveNumber);
  app.add_option("--threads", threads)->check(CLI::PositiveNumber);
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--device", device_name)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--precision", precision, "f32, or autocast to bf16 or f16")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--optimizer", optimizer,
                 "sgd (lr 0.05, Nesterov momentum 0.9), adam (lr 1e-3), rmsprop (lr 1e-3) or "
                 "adagrad (lr 1e-2); weight decay 5e-4 on conv and linear weights in each")
      ->check(CLI::IsMember({"sgd", "adam", "rmsprop", "adagrad"}));
  bool channels_last = false;
  app.add_flag("--channels-last", channels_last,
               "batches and convolution weights laid out channels-last (NHWC), as PyTorch's fast path on tensor cores");
  bool benchmark = false, profile_last = false;
  app.add_flag(
      "--cudnn-benchmark", benchmark,
      "cuDNN algorithms chosen by timing each (torch.backends.cudnn.benchmark), not by heuristics");
  app.add_flag("--profile-last-step", profile_last,
               "an attached profiler (ncu --profile-from-start off) collects the last step alone");
  CLI11_PARSE(app, argc, argv);

  set_num_threads(threads);
  cuda::set_cudnn_benchmark(benchmark);
  manual_seed(0);
  const Device device = device_name == "cuda" ? Device("cuda:0") : kCPU;
  const bool low = precision != "f32";
  const DType low_dtype = precision == "f16" ? DType::f16 : DType::bf16;
  // 10 classes for every model, as the PyTorch peers (bench_resnet.py, bench_resnet_gpu.py).
  auto model =
      nn::resnet_by_name(model_name, nn::ResNetOptions().in_channels(channels).num_classes(10));
  model->to(device);
  if (channels_last) model->to(MemoryFormat::ChannelsLast);  // as the peer's model.to(memory_format=...)
  std::unique_ptr<optim::Optimizer> opt;
  if (optimizer == "adam")
    opt = std::make_unique<optim::Adam>(optim::weight_decay_groups(*model, 5e-4),
                                        optim::AdamOptions(1e-3));
  else if (optimizer == "rmsprop")
    opt = std::make_unique<optim::RMSprop>(optim::weight_decay_groups(*model, 5e-4),
                                           optim::RMSpropOptions(1e-3));
  else if (optimizer == "adagrad")
    opt = std::make_unique<optim::Adagrad>(optim::weight_decay_groups(*model, 5e-4),
                                           optim::AdagradOptions(1e-2));
  else
    opt = std::make_unique<optim::SGD>(optim::weight_decay_groups(*model, 5e-4),
                                       optim::SGDOptions().lr(0.05).momentum(0.9).nesterov(true));
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 4; ++i) {
    Tensor x = randn({batch, channels, size, size}).to(device);
    xs.push_back(channels_last ? x.contiguous(MemoryFormat::ChannelsLast) : x);
    ys.push_back(randint(0, 10, {batch}).to(device));
  }
  // ms per step; and until each phase had been queued (on a GPU the host runs ahead of the
  // device: a step whose queueing takes as long as the step is bound by the host).
  std::vector<double> ms, queued_forward, queued_backward, queued_step;
  int64_t after_forward = 0;
  using Ms = std::chrono::duration<double, std::milli>;
  // cudaMalloc and cudaFree calls during the timed steps: either one stalls the host until the
  // GPU is idle, so a steady state should make none.
  cuda::AllocatorStats before_timed;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    if (s == warmup && device.is_cuda()) before_timed = cuda::memory_stats(0);
    const bool profiled = profile_last && s + 1 == warmup + steps;
    if (profiled) cuda::profiler_start();
    auto t0 = std::chrono::steady_clock::now();
    opt->zero_grad();
    Tensor loss;
    {
      amp::autocast guard(low_dtype, low);
      loss = cross_entropy(model->forward(xs[s % 4]), ys[s % 4]);
    }
    const auto forward_queued = std::chrono::steady_clock::now();
    // What the forward keeps for backward (and the model, gradients and optimizer state).
    if (device.is_cuda()) after_forward = cuda::memory_stats(0).allocated_bytes;
    loss.backward();
    const auto backward_queued = std::chrono::steady_clock::now();
    opt->step();
    const auto step_queued = std::chrono::steady_clock::now();
    loss.item<float>();
    auto t1 = std::chrono::steady_clock::now();
    if (profiled) cuda::profiler_stop();
    if (s < warmup) continue;
    ms.push_back(Ms(t1 - t0).count());
    queued_forward.push_back(Ms(forward_queued - t0).count());
    queued_backward.push_back(Ms(backward_queued - forward_queued).count());
    queued_step.push_back(Ms(step_queued - backward_queued).count());
  }
  const double step_ms = median(ms);
  nlohmann::json out = {{"framework", "tandem"},
                        {"model", model_name},
                        {"batch", batch},
                        {"threads", threads},
                        {"steps", steps},
                        {"step_ms_median", step_ms},
                        {"img_per_s", batch * 1000.0 / step_ms},
                        {"device", device_name},
                        {"precision", precision},
                        {"optimizer", optimizer},
                        {"channels_last", channels_last},
                        {"cudnn_benchmark", benchmark},
                        {"host_forward_ms_median", median(queued_forward)},
                        {"host_backward_ms_median", median(queued_backward)},
                        {"host_optimizer_ms_median", median(queued_step)}};
  if (device.is_cuda()) {
    out["peak_allocated_bytes"] = cuda::memory_stats(0).peak_allocated_bytes;
    out["after_forward_bytes"] = after_forward;
    const cuda::AllocatorStats after = cuda::memory_stats(0);
    out["timed_device_allocs"] = after.device_allocs - before_timed.device_allocs;
    out["timed_device_frees"] = after.device_frees - before_timed.device_frees;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

int main(int argc, char** argv) { return bench::guarded_main("bench_resnet", argc, argv, run); }
