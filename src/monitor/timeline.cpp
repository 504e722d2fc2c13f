#include "tandem/monitor/timeline.hpp"

#include <algorithm>
#include <fstream>
#include <set>

#include "tandem/io/safetensors.hpp"
#include "tandem/monitor/json.hpp"

// NVTX 3 is header-only (no library to link); a toolkit put together from wheels may lack it,
// and then the ranges are not marked (the Chrome trace has them all the same).
#if defined(TANDEM_WITH_CUDA) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define TANDEM_NVTX 1
#endif

namespace tandem::monitor {

#ifdef TANDEM_NVTX
NvtxRange::NvtxRange(const char* name) { nvtxRangePushA(name); }
NvtxRange::~NvtxRange() { nvtxRangePop(); }
#else
NvtxRange::NvtxRange(const char*) {}
NvtxRange::~NvtxRange() = default;
#endif

void Timeline::add(int rank, Row row, const std::string& name, Clock::time_point start,
                   Clock::time_point end, const std::string& args) {
  using std::chrono::duration_cast;
  using us = std::chrono::microseconds;
  const int64_t s = duration_cast<us>(start - origin_).count();
  const int64_t d = std::max<int64_t>(0, duration_cast<us>(end - start).count());
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({name, rank, row, s, d, args});
}

void Timeline::add_reduction(int rank, const parallel::ReductionTimes& times) {
  // A communicator runs its collectives one after another, in call order: a bucket launched
  // while the one before is still reducing waits in line. Its span is the time it ran; the wait
  // is an argument.
  Clock::time_point last = times.backward_end, free = Clock::time_point::min();
  for (size_t b = 0; b < times.buckets.size(); ++b) {
    const auto& t = times.buckets[b];
    const auto start = std::min(std::max(t.launched, free), t.done);
    const auto queued = std::chrono::duration_cast<std::chrono::microseconds>(start - t.launched);
    add(rank, communication, "allreduce bucket " + std::to_string(b), start, t.done,
        "\"bytes\": " + std::to_string(t.bytes) + ", \"queued_us\": " +
            std::to_string(queued.count()));
    free = t.done;
    last = std::max(last, t.done);
  }
  if (!times.buckets.empty()) add(rank, compute, "allreduce wait", times.backward_end, last);
}

std::vector<Timeline::Event> Timeline::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

void Timeline::write_chrome_trace(const std::string& path) const {
  const auto events = this->events();
  std::ofstream f(path, std::ios::trunc);
  TANDEM_CHECK_T(io::IoError, f.good(), "cannot write the trace ", path);
  f << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  std::set<int> ranks;
  std::set<std::pair<int, int>> used;  // (rank, row): the GPU rows are named where they have spans
  for (const Event& e : events) {
    ranks.insert(e.rank);
    used.insert({e.rank, e.row});
  }
  static const char* kRows[] = {"compute", "communication", "GPU", "GPU communication"};
  static const char* kCategories[] = {"compute", "communication", "gpu", "gpu communication"};
  bool first = true;
  auto sep = [&] {
    f << (first ? "" : ",\n");
    first = false;
  };
  for (int r : ranks) {
    sep();
    f << "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " << r
      << ", \"args\": {\"name\": " << json_string("rank " + std::to_string(r)) << "}}";
    for (int t = compute; t <= gpu_communication; ++t) {
      if (t >= gpu && !used.count({r, t})) continue;
      sep();
      f << "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " << r << ", \"tid\": " << t
        << ", \"args\": {\"name\": \"" << kRows[t] << "\"}}";
    }
  }
  for (const Event& e : events) {
    sep();
    f << "{\"ph\": \"X\", \"name\": " << json_string(e.name) << ", \"cat\": \""
      << kCategories[e.row] << "\", \"pid\": " << e.rank << ", \"tid\": " << static_cast<int>(e.row)
      << ", \"ts\": " << e.start_us << ", \"dur\": " << e.duration_us << ", \"args\": {" << e.args
      << "}}";
  }
  f << "\n]}\n";
  f.close();
  TANDEM_CHECK_T(io::IoError, !f.fail(), "cannot write the trace ", path);
}

}  // namespace tandem::monitor
