// A timeline of spans per rank, written as a Chrome trace (`{"traceEvents": [...]}`: open it in
// chrome://tracing or ui.perfetto.dev). Each rank is a process row with two threads: "compute"
// (data wait, forward, backward, the allreduce wait, optimizer, as the host lived them) and
// "communication" (each bucket's allreduce, with its bytes), so overlap shows as spans side by
// side; on GPUs two more, "GPU" and "GPU communication": the same phases and allreduces as the
// device ran them (StepTimer::trace).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/parallel/ddp.hpp"

namespace tandem::monitor {

/// An NVTX range around a scope, so Nsight Systems shows tandem's phases on GPU machines (CUDA
/// builds; NVTX costs next to nothing when no tool listens, and elsewhere this does nothing).
class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  enum Row : int { compute = 0, communication = 1, gpu = 2, gpu_communication = 3 };

  struct Event {
    std::string name;
    int rank;
    Row row;
    int64_t start_us, duration_us;  // since the timeline's origin
    std::string args;               // a JSON object's members ("\"bytes\": 1024"), or empty
  };

  /// Times are measured from now.
  Timeline() : origin_(Clock::now()) {}

  /// Records a span (thread-safe: every rank records into one timeline).
  void add(int rank, Row row, const std::string& name, Clock::time_point start,
           Clock::time_point end, const std::string& args = "");
  /// One span per bucket allreduce of `ddp`'s last reduced backward (communication row), and
  /// the wait for them after backward's last op (compute row, "allreduce wait").
  void add_reduction(int rank, const parallel::ReductionTimes& times);

  /// Records [construction, destruction) of the span on the compute row; with a null timeline,
  /// nothing (so a scope can be timed only when tracing is on). An NVTX range either way.
  class Span {
   public:
    Span(Timeline* timeline, int rank, std::string name)
        : nvtx_(name.c_str()), timeline_(timeline), rank_(rank), name_(std::move(name)),
          start_(Clock::now()) {}
    ~Span() {
      if (timeline_) timeline_->add(rank_, compute, name_, start_, Clock::now());
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    NvtxRange nvtx_;
    Timeline* timeline_;
    int rank_;
    std::string name_;
    Clock::time_point start_;
  };

  std::vector<Event> events() const;
  /// Writes the Chrome trace; throws IoError when the file cannot be written.
  void write_chrome_trace(const std::string& path) const;

 private:
  Clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

}  // namespace tandem::monitor
