// The scaling predictor: from a one-rank profile of a model's training step (compute, data and
// optimizer time, and when each gradient becomes ready before backward ends, with its size) and
// an interconnect (latency and bus bandwidth), the step time, exposed communication and scaling
// efficiency of N data-parallel ranks, and the bucket size that minimizes the step.
//
// The model: buckets are formed as DistributedDataParallel forms them (gradient-ready order, a
// small first bucket, then a cap); bucket b's allreduce can start once its last gradient is ready
// and the previous bucket's allreduce is done (one communication stream); a ring allreduce of B
// bytes over N ranks takes 2 (N - 1) latency + 2 (N - 1) / N x B / bus bandwidth (NCCL's bus
// bandwidth convention). Compute per rank is the profile's, times `compute_scale` (1 on GPUs,
// one each; CPU ranks that share cores run slower, see predict()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/arg.hpp"
#include "tandem/parallel/ddp.hpp"

namespace tandem::monitor {

struct Interconnect {
  std::string name;
  double latency_s = 0;        // per ring step
  double bus_bandwidth = 0;    // bytes per second, NCCL's "bus bandwidth"
  std::string description;
};

/// Presets: "pcie4", "pcie5", "nvlink-a100" (8 x A100, NVLink 3), "nvlink-h100" and
/// "nvlink-h200" (8 GPUs, NVLink 4), "ib-hdr" and "ib-ndr" (one 200/400 Gb/s InfiniBand port per
/// node). Approximate: the order of the bus bandwidths nccl-tests reach on such systems for
/// large messages; measure yours (benchmarks/bench_allreduce.py) and pass it instead.
const std::vector<Interconnect>& interconnect_presets();
/// A preset by name; throws ValueError listing the names.
Interconnect interconnect(const std::string& name);

/// Seconds of one ring allreduce of `bytes` over `ranks` ranks (0 for one rank).
double ring_allreduce_seconds(double bytes, int ranks, const Interconnect& ic);

/// One rank's step: where its time goes, and its gradients in the order they become ready.
struct Profile {
  struct Gradient {
    int64_t bytes = 0;
    double slack_s = 0;  // how long before backward's end it was ready
  };
  double data_s = 0, compute_s = 0, optimizer_s = 0;  // compute: forward and backward
  std::vector<Gradient> gradients;                     // in ready order

  /// The gradients of a reduced backward (its ready times and sizes), with the phase times.
  static Profile from(const parallel::ReductionTimes& times, double data_s, double compute_s,
                      double optimizer_s);
  double step_s() const { return data_s + compute_s + optimizer_s; }
  int64_t gradient_bytes() const;
};

struct Prediction {
  int ranks = 1;
  double bucket_cap_bytes = 0;
  int buckets = 0;
  double step_s = 0, exposed_s = 0, comm_s = 0;  // comm: all allreduces, hidden or not
  double efficiency = 1;                          // one rank's step / this step
};

struct PredictOptions {
  TANDEM_ARG(double, bucket_cap_mb) = 25.0;
  TANDEM_ARG(double, first_bucket_mb) = 1.0;
  /// Compute (and data, optimizer) time per rank relative to the profile's: 1 for ranks with a
  /// device each; CPU ranks sharing `cores` run at max(1, ranks x threads / cores).
  TANDEM_ARG(double, compute_scale) = 1.0;
};

Prediction predict(const Profile& profile, const Interconnect& ic, int ranks,
                   PredictOptions options = {});

/// The bucket cap among `caps_mb` (default 1, 2, 5, 10, 25, 50, 100, 200) with the shortest
/// predicted step (ties: the one nearest PyTorch's default 25 MiB).
Prediction best_bucket_cap(const Profile& profile, const Interconnect& ic, int ranks,
                           PredictOptions options = {}, std::vector<double> caps_mb = {});

/// `--bucket-mb auto`: a DDPOptions::bucket_cap_chooser that profiles the first backward's
/// gradient-ready times and picks best_bucket_cap() over the communicator's measured latency and
/// bandwidth (25 MiB at one rank, where nothing is reduced).
parallel::BucketCapChooser auto_bucket_cap(std::vector<double> caps_mb = {});

/// A `--bucket-mb` value: a number of MiB in (0, parallel::kMaxBucketMb] (at least a byte), or
/// nullopt for "auto"; anything else ("abc", "5abc", "1e999", "-3") is a ValueError naming it.
std::optional<double> parse_bucket_mb(const std::string& mib_or_auto);

/// DDPOptions for a `--bucket-mb` value: a number of MiB, or "auto" (auto_bucket_cap()).
parallel::DDPOptions bucket_cap_options(const std::string& mib_or_auto);

}  // namespace tandem::monitor
