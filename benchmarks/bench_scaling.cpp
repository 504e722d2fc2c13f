// Times data-parallel ResNet training on CPU ranks (threads of this process, the local backend),
// or with --device cuda on GPUs 0..ranks-1 (nccl; each step ends when its GPU work has): each
// rank trains its own batch of random images held in memory through DistributedDataParallel,
// one thread per rank by default. Prints one JSON object with the
// median step time and its split into compute (forward and backward up to their last op) and
// exposed communication (the wait for the allreduce after backward's last op; on GPUs the
// device's, monitor::StepTimer: the host queues a backward ahead and would count it as the wait),
// and img/s.
// bench_scaling.py runs it at several world sizes next to PyTorch's DDP and writes the plot.
// Usage: bench_scaling [--ranks 2] [--batch 64 (per rank)] [--threads 1 (per rank)]
//                      [--steps 20] [--warmup 3] [--no-ddp (no wrapper: independent ranks)]
//                      [--bucket-mb 25|auto (the scaling predictor's choice after the first step)]
//                      [--device cpu|cuda] [--size 28] [--channels 1]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>

#include "guarded_main.hpp"
#include "median.hpp"
#include "tandem/monitor/predictor.hpp"
#include "tandem/monitor/step_report.hpp"
#include "tandem/tandem.hpp"

using namespace tandem;

namespace {
using Ms = std::chrono::duration<double, std::milli>;
}  // namespace

static int run(int argc, char** argv) {
  CLI::App app{"Time data-parallel ResNet training on CPU ranks or GPUs"};
  std::string model_name = "resnet20";
  int64_t batch = 64, channels = 1, size = 28, steps = 20, warmup = 3;
  int ranks = 2, threads = 1;
  std::string bucket_mb = "25";
  bool no_ddp = false;
  std::string device_name = "cpu";
  app.add_option("--model", model_name)->check(CLI::IsMember(nn::resnet_names()));
  app.add_option("--ranks", ranks)->check(CLI::Range(1, 64));
  app.add_option("--batch", batch, "images per rank per step")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "threads per rank")->check(CLI::PositiveNumber);
  app.add_option("--channels", channels)->check(CLI::PositiveNumber);
  app.add_option("--size", size)->check(CLI::PositiveNumber);
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--bucket-mb", bucket_mb, "MiB, or auto")
      ->check(CLI::PositiveNumber | CLI::IsMember({"auto"}));
  app.add_flag("--no-ddp", no_ddp,
               "train without the DDP wrapper (with --ranks N: N independent models in this process)");
  app.add_option("--device", device_name, "cpu ranks, or one rank per GPU")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  CLI11_PARSE(app, argc, argv);
  const bool gpu = device_name == "cuda";
  TANDEM_CHECK_T(ValueError, !gpu || ranks <= cuda::device_count(), "--ranks ", ranks, " on ",
                 cuda::device_count(), " visible GPU(s)");
  std::vector<Device> devices;
  if (gpu)
    for (int r = 0; r < ranks; ++r) devices.push_back(Device(DeviceType::cuda, r));

  std::vector<std::shared_ptr<nn::Module>> models;
  manual_seed(0);
  for (int r = 0; r < ranks; ++r)
    models.push_back(nn::resnet_by_name(model_name, nn::ResNetOptions().in_channels(channels)));
  std::vector<double> step_ms, compute_ms, exposed_ms;  // rank 0's
  std::vector<std::vector<double>> rank_step_ms(ranks);  // every rank's, per step
  double cap_mb = 0;  // the cap in use at the end (auto: the one chosen)
  parallel::launch(
      gpu ? parallel::Devices(devices) : parallel::Devices::cpu(ranks),
      [&](parallel::Rank& r) {
        auto model = models[r.rank()];
        model->to(r.device());
        std::unique_ptr<parallel::DistributedDataParallel> ddp;
        if (!no_ddp)
          ddp = std::make_unique<parallel::DistributedDataParallel>(
              model, r.comm, monitor::bucket_cap_options(bucket_mb));
        optim::SGD opt(optim::weight_decay_groups(*model, 5e-4),
                       optim::SGDOptions().lr(0.05).momentum(0.9).nesterov(true));
        monitor::StepTimer timer(r.device());
        if (ddp) ddp->set_backward_end_hook([&timer] { timer.mark(monitor::Phase::exposed_comm); });
        std::vector<Tensor> xs, ys;
        for (int i = 0; i < 4; ++i) {
          xs.push_back(
              randn({batch, channels, size, size}, DType::f32, &r.generator).to(r.device()));
          ys.push_back(randint(0, 10, {batch}, DType::i64, &r.generator).to(r.device()));
        }
        for (int64_t s = 0; s < warmup + steps; ++s) {
          const auto t0 = std::chrono::steady_clock::now();
          timer.mark(monitor::Phase::compute);
          opt.zero_grad();
          Tensor out = ddp ? ddp->forward(xs[s % 4]) : model->forward(xs[s % 4]);
          Tensor loss = cross_entropy(out, ys[s % 4]);
          loss.backward();
          timer.mark(monitor::Phase::optimizer);
          opt.step();
          timer.end_step(batch);
          if (gpu) loss.item<float>();  // the step's GPU work done (queued after it on one stream)
          const auto t2 = std::chrono::steady_clock::now();
          monitor::StepBreakdown phases;
          timer.collect(phases, /*wait=*/true);  // the device is past it: no wait
          if (s >= warmup) rank_step_ms[r.rank()].push_back(Ms(t2 - t0).count());
          if (r.rank() != 0 || s < warmup) continue;
          const double exposed = 1e3 * phases.seconds(monitor::Phase::exposed_comm);
          step_ms.push_back(Ms(t2 - t0).count());
          exposed_ms.push_back(exposed);
          compute_ms.push_back(Ms(t2 - t0).count() - exposed);
        }
        if (ddp && r.rank() == 0) cap_mb = ddp->bucket_cap_mb();
      },
      parallel::LaunchOptions().threads(threads * ranks));
  const double step = median(step_ms);
  nlohmann::json out = {{"framework", "tandem"},
                        {"model", model_name},
                        {"device", device_name},
                        {"world", ranks},
                        {"ddp", !no_ddp},
                        {"batch_per_rank", batch},
                        {"threads_per_rank", threads},
                        {"steps", steps},
                        {"step_ms_median", step},
                        {"compute_ms_median", median(compute_ms)},
                        {"exposed_comm_ms_median", median(exposed_ms)},
                        {"data_wait_ms_median", 0.0},  // batches are in memory
                        {"img_per_s", ranks * batch * 1000.0 / step},
                        {"bucket_mb", cap_mb},
                        {"rank_step_ms", rank_step_ms}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

int main(int argc, char** argv) { return bench::guarded_main("bench_scaling", argc, argv, run); }
