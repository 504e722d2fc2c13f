// Where each rank's step time goes, and who holds the others back. Every rank adds its phase
// times step by step (StepBreakdown), timed where the work runs (StepTimer); `gather_report`
// collects every rank's sums over the communicator (one allgather, on every rank), and
// `StepReport::text()` says per rank: data wait, compute (forward and backward), exposed
// communication (the wait for the allreduce after backward), optimizer, img/s; then which rank
// is slowest, by how much, and in which phase its extra time went; and, when a rank waits for
// the loader more than a threshold, that the loader starves it and which setting to change.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/comm/communicator.hpp"
#include "tandem/core/arg.hpp"
#include "tandem/core/device.hpp"
#include "tandem/monitor/timeline.hpp"
#include "tandem/parallel/ddp.hpp"

namespace tandem::monitor {

enum class Phase : int { data = 0, compute = 1, exposed_comm = 2, optimizer = 3 };
constexpr int kPhases = 4;
/// "data wait", "compute", "exposed communication", "optimizer".
const char* phase_name(Phase p);

/// One rank's phase times since the last reset.
class StepBreakdown {
 public:
  void add(Phase p, double seconds) { seconds_[static_cast<int>(p)] += seconds; }
  /// The exposed communication of a reduced backward: from backward's last op to the last
  /// bucket's completion (0 when every bucket finished before backward did).
  void add_reduction(const parallel::ReductionTimes& t);
  /// `steps` finished steps of `images` images in all (this rank's share).
  void end_step(int64_t images, int64_t steps = 1) {
    steps_ += steps;
    images_ += images;
  }
  void reset() { *this = StepBreakdown(); }

  int64_t steps() const { return steps_; }
  int64_t images() const { return images_; }
  double seconds(Phase p) const { return seconds_[static_cast<int>(p)]; }
  double total_seconds() const;

 private:
  std::array<double, kPhases> seconds_{};
  int64_t steps_ = 0, images_ = 0;
};

/// Times each step's phases where their work runs, into a StepBreakdown. On the CPU a mark reads
/// the host's clock. On a GPU it records an event on the compute stream, and a phase lasts from
/// when the device reached its mark to when it reached the next: the backward the host queued
/// ahead counts as compute, not as a wait for the allreduces behind it, and the device's idle
/// time, waiting for the host, counts in the phase whose work it waited for. A GPU step's times
/// are added once the device has passed its end, so timing waits for nothing.
///
///     timer.mark(Phase::data);       // the loop's top
///     ... next batch ...; timer.mark(Phase::compute);
///     ... forward, backward (ddp.set_backward_end_hook marks Phase::exposed_comm) ...
///     timer.mark(Phase::optimizer); ... step ...; timer.end_step(images);
///     timer.collect(breakdown);      // before reading it: collect(breakdown, true)
class StepTimer {
 public:
  explicit StepTimer(Device device);
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  /// Phase p starts now, ending the phase marked before it in this step.
  void mark(Phase p);
  /// The step's last phase ends now; the step took `images` images (this rank's share).
  void end_step(int64_t images);
  /// Adds to `into` each ended step, in order, that the device has passed; with `wait`, every
  /// ended step (waiting for the device to pass the last).
  void collect(StepBreakdown& into, bool wait = false);
  /// On a GPU, collect() also draws each step's phases on `timeline`'s GPU row of `rank`, placed
  /// on the host's clock: an event recorded on the drained device marks where the two clocks
  /// meet, now and after each collect that waits (so the GPU's and the host's clocks drift apart
  /// for one report's time at most). On the CPU nothing: the compute row has the phases.
  void trace(Timeline* timeline, int rank);
  /// With trace() on a GPU, draws a reduced backward's bucket allreduces
  /// (`ddp.last_reduction()`) on the timeline's GPU communication row, as the device ran them.
  void trace_reduction(const parallel::ReductionTimes& times);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct ReportOptions {
  /// A rank whose data wait exceeds this fraction of its step is starved.
  TANDEM_ARG(double, starvation_threshold) = 0.1;
  /// A rank this much slower than the fastest (per step) is named a straggler.
  TANDEM_ARG(double, straggler_threshold) = 0.05;
  /// The loader setting the starvation advice names, with its value ("--workers 1").
  TANDEM_ARG(std::string, loader_setting) = "";
};

/// Every rank's breakdown, and what they say.
struct StepReport {
  std::vector<StepBreakdown> ranks;
  ReportOptions options;

  /// Milliseconds per step of rank r in phase p (0 for a rank without steps).
  double ms_per_step(int r, Phase p) const;
  double ms_per_step(int r) const;
  /// Rank r's own work per step: everything but the exposed communication. In synchronous data
  /// parallelism every rank's step lasts as long as the slowest rank's work; the others spend
  /// the difference waiting for the allreduce, so the straggler is the rank with the most work.
  double busy_ms_per_step(int r) const;
  /// The rank with the most work per step (the straggler), and the one with the least.
  int slowest() const;
  int fastest() const;
  /// (slowest - fastest) / fastest work per step.
  double spread() const;
  /// The phase (not communication) where the slowest rank spends the most more than the fastest.
  Phase straggler_phase() const;
  /// Ranks whose data wait exceeds the starvation threshold.
  std::vector<int> starved() const;
  /// The report as lines of text, as the example prints it.
  std::string text() const;
  /// One JSON object (per-rank phases in ms/step, img/s, slowest, spread, starved ranks).
  std::string json() const;
};

/// Every rank's `mine` over `comm` (an allgather of a few doubles, on the communicator's
/// device); called on every rank, returns the same report everywhere.
StepReport gather_report(comm::Communicator& comm, const StepBreakdown& mine,
                         ReportOptions options = {});

}  // namespace tandem::monitor
