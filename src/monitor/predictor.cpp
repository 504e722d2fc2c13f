#include "tandem/monitor/predictor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "tandem/core/error.hpp"

namespace tandem::monitor {

const std::vector<Interconnect>& interconnect_presets() {
  constexpr double kGB = 1e9;
  static const std::vector<Interconnect> presets{
      {"pcie4", 10e-6, 20 * kGB, "GPUs over PCIe 4.0 x16 (no NVLink)"},
      {"pcie5", 10e-6, 40 * kGB, "GPUs over PCIe 5.0 x16 (no NVLink)"},
      {"nvlink-a100", 6e-6, 230 * kGB, "8 x A100 SXM, NVLink 3 through NVSwitch"},
      {"nvlink-h100", 6e-6, 470 * kGB, "8 x H100 SXM, NVLink 4 through NVSwitch"},
      {"nvlink-h200", 6e-6, 470 * kGB, "8 x H200 SXM, NVLink 4 through NVSwitch"},
      {"ib-hdr", 10e-6, 23 * kGB, "between nodes, one HDR InfiniBand port (200 Gb/s) per node"},
      {"ib-ndr", 10e-6, 46 * kGB, "between nodes, one NDR InfiniBand port (400 Gb/s) per node"},
  };
  return presets;
}

Interconnect interconnect(const std::string& name) {
  std::string names;
  for (const Interconnect& ic : interconnect_presets()) {
    if (ic.name == name) return ic;
    names += (names.empty() ? "" : ", ") + ic.name;
  }
  TANDEM_THROW(ValueError, "interconnect: no preset named '", name, "' (presets: ", names,
               "; or give latency and bandwidth)");
}

double ring_allreduce_seconds(double bytes, int ranks, const Interconnect& ic) {
  if (ranks <= 1) return 0.0;
  const double steps = 2.0 * (ranks - 1);
  return steps * ic.latency_s + steps / ranks * bytes / ic.bus_bandwidth;
}

Profile Profile::from(const parallel::ReductionTimes& times, double data_s, double compute_s,
                      double optimizer_s) {
  Profile p;
  p.data_s = data_s, p.compute_s = compute_s, p.optimizer_s = optimizer_s;
  // The device's times where the GPU was timed (the host queues kernels ahead of it).
  for (const auto& r : times.ready)
    p.gradients.push_back(
        {r.bytes, r.device_slack_s >= 0
                      ? r.device_slack_s
                      : std::max(0.0, std::chrono::duration<double>(times.backward_end - r.at).count())});
  return p;
}

int64_t Profile::gradient_bytes() const {
  int64_t b = 0;
  for (const Gradient& g : gradients) b += g.bytes;
  return b;
}

Prediction predict(const Profile& profile, const Interconnect& ic, int ranks,
                   PredictOptions options) {
  TANDEM_CHECK_T(ValueError, ranks >= 1, "predict: ranks must be >= 1, got ", ranks);
  TANDEM_CHECK_T(ValueError, ic.bus_bandwidth > 0 && ic.latency_s >= 0, "predict: interconnect '",
                 ic.name, "' needs a positive bandwidth and a latency >= 0");
  TANDEM_CHECK_T(ValueError, std::isfinite(ic.bus_bandwidth) && std::isfinite(ic.latency_s),
                 "predict: interconnect '", ic.name, "' needs finite bandwidth and latency");
  // NaN passes no comparison: each must be finite, positive where it divides or scales.
  auto non_negative = [](double v) { return std::isfinite(v) && v >= 0; };
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  TANDEM_CHECK_T(ValueError, positive(options.compute_scale_),
                 "predict: compute_scale must be finite and positive, got ",
                 options.compute_scale_);
  TANDEM_CHECK_T(ValueError, positive(options.bucket_cap_mb_) && positive(options.first_bucket_mb_),
                 "predict: bucket caps must be finite and positive, got ", options.bucket_cap_mb_,
                 " and ", options.first_bucket_mb_, " MiB (first bucket)");
  TANDEM_CHECK_T(ValueError,
                 non_negative(profile.data_s) && non_negative(profile.compute_s) &&
                     non_negative(profile.optimizer_s),
                 "predict: the profile's data, compute and optimizer times must be finite and "
                 ">= 0, got ",
                 profile.data_s, ", ", profile.compute_s, " and ", profile.optimizer_s, " s");
  for (const Profile::Gradient& g : profile.gradients)
    TANDEM_CHECK_T(ValueError, g.bytes >= 0 && non_negative(g.slack_s), "predict: a gradient of ",
                   g.bytes, " bytes ready ", g.slack_s,
                   " s before backward's end (sizes and times must be finite and >= 0)");
  const double scale = options.compute_scale_;
  const double first_cap = options.first_bucket_mb_ * 1024 * 1024;
  const double cap = options.bucket_cap_mb_ * 1024 * 1024;
  // Times relative to backward's end at this scale: a gradient ready `slack` before it.
  double comm_end = -1e300, total_comm = 0;
  int buckets = 0;
  double bytes = 0, ready = -1e300;
  auto close = [&] {
    if (bytes <= 0) return;
    const double t = ring_allreduce_seconds(bytes, ranks, ic);
    comm_end = std::max(comm_end, ready) + t;
    total_comm += t;
    ++buckets;
    bytes = 0;
    ready = -1e300;
  };
  for (const Profile::Gradient& g : profile.gradients) {
    bytes += static_cast<double>(g.bytes);
    ready = std::max(ready, -g.slack_s * scale);
    if (bytes >= (buckets == 0 ? first_cap : cap)) close();
  }
  close();
  Prediction p;
  p.ranks = ranks;
  p.bucket_cap_bytes = cap;
  p.buckets = buckets;
  p.comm_s = total_comm;
  p.exposed_s = ranks > 1 && buckets > 0 ? std::max(0.0, comm_end) : 0.0;
  p.step_s = profile.step_s() * scale + p.exposed_s;
  p.efficiency = p.step_s > 0 ? profile.step_s() / p.step_s : 1.0;
  return p;
}

Prediction best_bucket_cap(const Profile& profile, const Interconnect& ic, int ranks,
                           PredictOptions options, std::vector<double> caps_mb) {
  if (caps_mb.empty()) caps_mb = {1, 2, 5, 10, 25, 50, 100, 200};
  Prediction best;
  bool first = true;
  for (double mb : caps_mb) {
    Prediction p = predict(profile, ic, ranks, PredictOptions(options).bucket_cap_mb(mb));
    // Ties (all hidden, or one bucket either way): the cap nearer PyTorch's 25 MiB default.
    const auto off_default = [](double bytes) { return std::abs(std::log(bytes / (25.0 * 1024 * 1024))); };
    if (first || p.step_s < best.step_s * (1 - 1e-9) ||
        (p.step_s <= best.step_s * (1 + 1e-9) &&
         off_default(p.bucket_cap_bytes) < off_default(best.bucket_cap_bytes)))
      best = p;
    first = false;
  }
  return best;
}

parallel::BucketCapChooser auto_bucket_cap(std::vector<double> caps_mb) {
  return [caps_mb](const parallel::ReductionTimes& times, int world, double latency_s,
                   double bus_bandwidth) {
    if (world <= 1 || bus_bandwidth <= 0) return 25.0;
    const Interconnect measured{"measured", latency_s, bus_bandwidth, "the communicator"};
    const Prediction best = best_bucket_cap(Profile::from(times, 0, 0, 0), measured, world, {},
                                            caps_mb);
    return best.bucket_cap_bytes / (1024.0 * 1024.0);
  };
}

std::optional<double> parse_bucket_mb(const std::string& mib_or_auto) {
  if (mib_or_auto == "auto") return std::nullopt;
  char* end = nullptr;
  const double mb = std::strtod(mib_or_auto.c_str(), &end);
  TANDEM_CHECK_T(ValueError,
                 !mib_or_auto.empty() && *end == '\0' && std::isfinite(mb) && mb > 0 &&
                     mb * 1024 * 1024 >= 1 && mb <= parallel::kMaxBucketMb,
                 "bucket size '", mib_or_auto, "' is not a number of MiB in (0, ",
                 static_cast<int64_t>(parallel::kMaxBucketMb), "] or auto");
  return mb;
}

parallel::DDPOptions bucket_cap_options(const std::string& mib_or_auto) {
  const std::optional<double> mb = parse_bucket_mb(mib_or_auto);
  if (!mb) return parallel::DDPOptions().bucket_cap_chooser(auto_bucket_cap());
  return parallel::DDPOptions().bucket_cap_mb(*mb);
}

}  // namespace tandem::monitor
