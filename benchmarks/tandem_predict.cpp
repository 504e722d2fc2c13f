// tandem-predict: what scaling efficiency a model would get on N data-parallel ranks over a given
// interconnect, before renting them. It profiles one rank of the model here (a few training
// steps on this machine's device: compute, optimizer, and when each gradient becomes ready),
// then predicts step time, exposed communication and efficiency at 1..N ranks, and the bucket
// size that minimizes the step (monitor/predictor.hpp).
//   tandem-predict --model resnet50 --batch 256 --size 224 --ranks 8 --interconnect nvlink-h200
// A profile taken on the CPU has CPU compute times; --compute-ms gives the step's compute time
// measured on the target GPU instead (the gradients' ready times scale with it).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "median.hpp"
#include "tandem/monitor/predictor.hpp"
#include "tandem/tandem.hpp"

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {
// A number that is finite and >= lo (> lo when `strict`): NaN passes CLI11's range checks.
CLI::Validator finite_at_least(double lo, bool strict) {
  return CLI::Validator(
      [=](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (!v.empty() && *end == '\0' && std::isfinite(x) && (strict ? x > lo : x >= lo))
          return "";
        char bound[32];
        std::snprintf(bound, sizeof(bound), "%s %g", strict ? ">" : ">=", lo);
        return "must be a finite number " + std::string(bound) + ", got " + v;
      },
      strict ? "POSITIVE" : "NONNEGATIVE");
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app("tandem-predict: scaling efficiency of data parallelism at N ranks, from a one-rank profile");
  std::string model_name = "resnet50", ic_name = "nvlink-h200", device_name = "auto", bucket = "25";
  int64_t batch = 32, size = 224, channels = 3, steps = 3;
  int ranks = 8, threads = 0, cores = 0;
  double latency_us = -1, bandwidth_gbs = -1, compute_ms = -1, first_bucket_mb = 1.0;
  bool json = false;
  std::string presets;
  for (const auto& ic : monitor::interconnect_presets()) presets += (presets.empty() ? "" : ", ") + ic.name;
  app.add_option("--model", model_name, "network")->check(CLI::IsMember(nn::resnet_names()))->capture_default_str();
  app.add_option("--batch", batch, "images per rank per step")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--size", size, "image height and width")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--channels", channels)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--ranks", ranks, "predict for 1..N ranks")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--interconnect", ic_name, "preset: " + presets)->capture_default_str();
  app.add_option("--latency-us", latency_us, "latency per ring step, us, in place of the preset's")
      ->check(finite_at_least(0, false));
  app.add_option("--bandwidth-gbs", bandwidth_gbs,
                 "allreduce bus bandwidth, GB/s, in place of the preset's")
      ->check(finite_at_least(0, true));
  app.add_option("--bucket-mb", bucket, "bucket cap, MiB, or auto (the predicted best)")->capture_default_str();
  app.add_option(
         "--compute-ms", compute_ms,
         "forward + backward time per step on the target device (default: as profiled here)")
      ->check(finite_at_least(0, true));
  app.add_option("--device", device_name, "where to profile: auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_option("--steps", steps, "profiled steps (after one warm-up)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", threads, "CPU threads for a CPU profile (0: all cores)")
      ->check(CLI::Range(0, kMaxThreads));
  app.add_option("--cpu-cores", cores,
                 "predict CPU ranks of --threads threads each sharing this many cores (compute "
                 "slows once they are oversubscribed)")
      ->check(CLI::Range(0, 1 << 20));
  std::vector<double> scales;
  app.add_option(
         "--compute-scale", scales,
         "measured slowdown of the slowest rank's step at 1, 2, ... ranks sharing this machine "
         "(e.g. N independent copies at once: the median over steps of the slowest copy's step, "
         "over one copy alone); the last covers larger counts; replaces --cpu-cores' model")
      ->delimiter(',')
      ->check(finite_at_least(0, true));
  app.add_flag("--json", json, "print one JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);
  try {
    const std::optional<double> bucket_mb = monitor::parse_bucket_mb(bucket);  // before profiling
    // A given latency or bandwidth replaces the preset's; the other stays the preset's.
    monitor::Interconnect ic = monitor::interconnect(ic_name);
    if (latency_us >= 0 || bandwidth_gbs > 0) {
      ic.name = ic_name + " (adjusted)";
      if (latency_us >= 0) ic.latency_s = latency_us * 1e-6;
      if (bandwidth_gbs > 0) ic.bus_bandwidth = bandwidth_gbs * 1e9;
      ic.description = "given";
    }
    if (threads > 0) set_num_threads(threads);
    const bool gpu = device_name == "cuda" || (device_name == "auto" && cuda::device_count() > 0);
    const Device device = gpu ? Device("cuda:0") : kCPU;

    // The profile: a few steps of one rank under DDP (world 1: its hooks record when each
    // gradient is ready; its one-rank allreduce is free).
    manual_seed(0);
    auto model = nn::resnet_by_name(model_name, nn::ResNetOptions().in_channels(channels));
    model->to(device);
    monitor::Profile profile;
    std::fprintf(stderr, "profiling %s, batch %lld of %lldx%lld on %s...\n", model_name.c_str(),
                 static_cast<long long>(batch), static_cast<long long>(size),
                 static_cast<long long>(size), gpu ? "cuda:0" : "the CPU");
    parallel::launch(parallel::Devices({device}), [&](parallel::Rank& r) {
      // On a GPU, gradients' ready times from the device's clock.
      parallel::DistributedDataParallel ddp(model, r.comm, parallel::DDPOptions().time_on_device(true));
      optim::SGD opt(ddp.parameters(), optim::SGDOptions(0.01).momentum(0.9));
      Tensor x = randn({batch, channels, size, size}).to(device);
      Tensor y = randint(0, 10, {batch}).to(device);
      std::vector<double> compute, optimizer;  // per step; medians, as the benchmarks quote
      parallel::ReductionTimes last;
      for (int64_t s = 0; s <= steps; ++s) {
        const auto t0 = Clock::now();
        opt.zero_grad();
        Tensor loss = cross_entropy(ddp.forward(x), y);
        loss.backward();
        loss.item<float>();  // the GPU's work done
        const auto t1 = Clock::now();
        opt.step();
        opt.param_groups()[0].params()[0].sum().item<float>();
        const auto t2 = Clock::now();
        if (s == 0) continue;  // warm-up
        compute.push_back(std::chrono::duration<double>(t1 - t0).count());
        optimizer.push_back(std::chrono::duration<double>(t2 - t1).count());
        last = ddp.last_reduction();
      }
      profile = monitor::Profile::from(last, 0.0, median(compute), median(optimizer));
    }, parallel::LaunchOptions().threads(threads));
    monitor::PredictOptions options = monitor::PredictOptions().first_bucket_mb(first_bucket_mb);
    if (compute_ms > 0) {
      // Another device's compute: the ready times move with it.
      const double k = compute_ms / 1000.0 / profile.compute_s;
      for (auto& g : profile.gradients) g.slack_s *= k;
      profile.optimizer_s *= k;
      profile.compute_s = compute_ms / 1000.0;
    }
    const bool auto_bucket = !bucket_mb;
    const double cap_mb = bucket_mb.value_or(25.0);
    // How much slower each rank computes at n ranks: measured, or CPU ranks oversubscribing the
    // cores, or (GPUs) not at all.
    auto scale_at = [&](int n) {
      if (!scales.empty()) return scales[std::min<size_t>(n, scales.size()) - 1];
      if (cores > 0) return std::max(1.0, static_cast<double>(n) * std::max(threads, 1) / cores);
      return 1.0;
    };
    const bool cpu_ranks = cores > 0 || !scales.empty();
    options.compute_scale(scale_at(ranks));
    const monitor::Prediction best = monitor::best_bucket_cap(profile, ic, ranks, options);
    options.bucket_cap_mb(auto_bucket ? best.bucket_cap_bytes / (1024.0 * 1024.0) : cap_mb);

    nlohmann::json out{{"model", model_name}, {"batch_per_rank", batch}, {"size", size},
                       {"profiled_on", gpu ? "cuda:0" : "cpu"},
                       {"interconnect", {{"name", ic.name}, {"latency_us", ic.latency_s * 1e6},
                                         {"bus_bandwidth_gbs", ic.bus_bandwidth / 1e9}}},
                       {"compute_ms", profile.compute_s * 1e3}, {"optimizer_ms", profile.optimizer_s * 1e3},
                       {"gradient_mb", profile.gradient_bytes() / (1024.0 * 1024.0)},
                       {"bucket_mb", options.bucket_cap_mb_},
                       {"best_bucket_mb", best.bucket_cap_bytes / (1024.0 * 1024.0)}};
    if (!json)
      std::printf("%s, batch %lld per rank, %s (%.0f us per ring step, %.0f GB/s bus bandwidth)\n"
                  "one rank: compute %.1f ms, optimizer %.1f ms, %.1f MiB of gradients; bucket cap %.1f MiB\n"
                  " ranks   step ms   allreduce ms   exposed ms   efficiency   img/s\n",
                  model_name.c_str(), static_cast<long long>(batch), ic.name.c_str(),
                  ic.latency_s * 1e6, ic.bus_bandwidth / 1e9, profile.compute_s * 1e3,
                  profile.optimizer_s * 1e3, profile.gradient_bytes() / (1024.0 * 1024.0),
                  options.bucket_cap_mb_);
    std::vector<int> worlds;
    if (cpu_ranks) {
      for (int n = 1; n <= ranks; ++n) worlds.push_back(n);  // CPU ranks: every count
    } else {
      for (int n = 1; n <= ranks; n *= 2) worlds.push_back(n);
      if (worlds.back() != ranks) worlds.push_back(ranks);
    }
    for (int n : worlds) {
      options.compute_scale(scale_at(n));
      const monitor::Prediction p = monitor::predict(profile, ic, n, options);
      out["per_ranks"].push_back({{"ranks", n}, {"step_ms", p.step_s * 1e3}, {"comm_ms", p.comm_s * 1e3},
                                  {"exposed_ms", p.exposed_s * 1e3}, {"efficiency", p.efficiency},
                                  {"buckets", p.buckets}, {"img_per_s", n * batch / p.step_s}});
      if (!json)
        std::printf("%6d %9.1f %14.1f %12.1f %11.1f%% %8.0f\n", n, p.step_s * 1e3, p.comm_s * 1e3,
                    p.exposed_s * 1e3, 100 * p.efficiency, n * batch / p.step_s);
    }
    if (json) {
      std::printf("%s\n", out.dump(1).c_str());
    } else {
      std::printf("best bucket cap at %d ranks: %.0f MiB (step %.1f ms, efficiency %.1f%%)\n", ranks,
                  best.bucket_cap_bytes / (1024.0 * 1024.0), best.step_s * 1e3, 100 * best.efficiency);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-predict: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
