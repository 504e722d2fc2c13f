#include "tandem/monitor/step_report.hpp"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <optional>
#include <sstream>
#include <string>

#include "tandem/cuda/runtime.hpp"
#include "tandem/monitor/json.hpp"
#include "tandem/ops/creation.hpp"

namespace tandem::monitor {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::data: return "data wait";
    case Phase::compute: return "compute";
    case Phase::exposed_comm: return "exposed communication";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

void StepBreakdown::add_reduction(const parallel::ReductionTimes& t) {
  comm::Clock::time_point last = t.backward_end;
  for (const auto& b : t.buckets) last = std::max(last, b.done);
  add(Phase::exposed_comm, std::chrono::duration<double>(last - t.backward_end).count());
}

// A mark: its phase, and when it was reached (a GPU's event, or the host's clock). The last of
// a step is its end (Phase of no use there).
struct StepTimer::Impl {
  struct Mark {
    Phase phase;
    std::optional<cuda::Event> event;
    std::chrono::steady_clock::time_point host;
  };
  struct Step {
    std::vector<Mark> marks;
    int64_t images = 0;
  };
  Device device;
  Step current;
  std::deque<Step> ended;
  std::vector<cuda::Event> spare;  // events of collected steps, recorded again
  // trace(): the GPU row, and where the device's clock meets the host's.
  Timeline* timeline = nullptr;
  int rank = 0;
  std::optional<cuda::Event> anchor;
  std::chrono::steady_clock::time_point anchor_host;

  void add_mark(Phase p) {
    Mark m{p, std::nullopt, std::chrono::steady_clock::now()};
    if (device.is_cuda()) {
      if (spare.empty()) {
        m.event.emplace(device.index());
      } else {
        m.event.emplace(std::move(spare.back()));
        spare.pop_back();
      }
      m.event->record();
    }
    current.marks.push_back(std::move(m));
  }
  static double seconds(const Mark& from, const Mark& to) {
    if (to.event) return to.event->seconds_since(*from.event);
    return std::chrono::duration<double>(to.host - from.host).count();
  }
  // Where the device's clock meets the host's: an event on the drained device passes at once.
  void set_anchor() {
    cuda::synchronize(device.index());
    if (!anchor) anchor.emplace(device.index());
    anchor->record();
    anchor_host = std::chrono::steady_clock::now();
  }
  // The host's time of a point `s` seconds of the device's time after the anchor, or of a mark.
  std::chrono::steady_clock::time_point on_host(double s) const {
    return anchor_host + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(s));
  }
  std::chrono::steady_clock::time_point on_host(const Mark& m) const {
    return on_host(m.event->seconds_since(*anchor));
  }
};

StepTimer::StepTimer(Device device) : impl_(std::make_unique<Impl>()) { impl_->device = device; }
StepTimer::~StepTimer() = default;

void StepTimer::mark(Phase p) { impl_->add_mark(p); }

void StepTimer::end_step(int64_t images) {
  impl_->add_mark(Phase::data);
  impl_->current.images = images;
  impl_->ended.push_back(std::move(impl_->current));
  impl_->current = Impl::Step();
}

void StepTimer::collect(StepBreakdown& into, bool wait) {
  auto& ended = impl_->ended;
  while (!ended.empty()) {
    Impl::Step& s = ended.front();
    const Impl::Mark& end = s.marks.back();
    if (!wait && end.event && !end.event->query()) return;
    std::vector<std::chrono::steady_clock::time_point> at;  // traced: each mark on the host's clock
    if (impl_->anchor)
      for (const Impl::Mark& m : s.marks) at.push_back(impl_->on_host(m));
    for (size_t i = 0; i + 1 < s.marks.size(); ++i) {
      into.add(s.marks[i].phase, Impl::seconds(s.marks[i], s.marks[i + 1]));
      if (!at.empty())
        impl_->timeline->add(impl_->rank, Timeline::gpu, phase_name(s.marks[i].phase), at[i],
                             at[i + 1]);
    }
    into.end_step(s.images);
    for (Impl::Mark& m : s.marks)
      if (m.event) impl_->spare.push_back(std::move(*m.event));
    ended.pop_front();
  }
  if (wait && impl_->anchor) impl_->set_anchor();
}

void StepTimer::trace_reduction(const parallel::ReductionTimes& times) {
  if (!impl_->anchor) return;
  for (size_t b = 0; b < times.buckets.size(); ++b) {
    const auto span = times.buckets[b].work.device_span(*impl_->anchor);
    if (span)
      impl_->timeline->add(impl_->rank, Timeline::gpu_communication,
                           "allreduce bucket " + std::to_string(b), impl_->on_host(span->first),
                           impl_->on_host(span->second),
                           "\"bytes\": " + std::to_string(times.buckets[b].bytes));
  }
}

void StepTimer::trace(Timeline* timeline, int rank) {
  impl_->timeline = timeline;
  impl_->rank = rank;
  impl_->anchor.reset();
  if (timeline && impl_->device.is_cuda()) impl_->set_anchor();
}

double StepBreakdown::total_seconds() const {
  double s = 0;
  for (double v : seconds_) s += v;
  return s;
}

double StepReport::ms_per_step(int r, Phase p) const {
  TANDEM_CHECK_INDEX(r >= 0 && r < static_cast<int>(ranks.size()), "StepReport: rank ", r,
                     " out of range for a report of ", ranks.size(), " rank(s)");
  const StepBreakdown& b = ranks[r];
  return b.steps() > 0 ? 1000.0 * b.seconds(p) / static_cast<double>(b.steps()) : 0.0;
}

double StepReport::ms_per_step(int r) const {
  double s = 0;
  for (int p = 0; p < kPhases; ++p) s += ms_per_step(r, static_cast<Phase>(p));
  return s;
}

double StepReport::busy_ms_per_step(int r) const {
  return ms_per_step(r) - ms_per_step(r, Phase::exposed_comm);
}

int StepReport::slowest() const {
  TANDEM_CHECK(!ranks.empty(), "StepReport: the report has no ranks (no slowest or fastest)");
  int best = 0;
  for (int r = 1; r < static_cast<int>(ranks.size()); ++r)
    if (busy_ms_per_step(r) > busy_ms_per_step(best)) best = r;
  return best;
}

int StepReport::fastest() const {
  TANDEM_CHECK(!ranks.empty(), "StepReport: the report has no ranks (no slowest or fastest)");
  int best = 0;
  for (int r = 1; r < static_cast<int>(ranks.size()); ++r)
    if (busy_ms_per_step(r) < busy_ms_per_step(best)) best = r;
  return best;
}

double StepReport::spread() const {
  const double fast = busy_ms_per_step(fastest());
  return fast > 0 ? (busy_ms_per_step(slowest()) - fast) / fast : 0.0;
}

Phase StepReport::straggler_phase() const {
  const int s = slowest(), f = fastest();
  Phase worst = Phase::compute;
  double most = -1;
  for (Phase p : {Phase::data, Phase::compute, Phase::optimizer}) {
    const double extra = ms_per_step(s, p) - ms_per_step(f, p);
    if (extra > most) most = extra, worst = p;
  }
  return worst;
}

std::vector<int> StepReport::starved() const {
  std::vector<int> out;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const double total = ms_per_step(r);
    if (total > 0 && ms_per_step(r, Phase::data) / total > options.starvation_threshold_)
      out.push_back(r);
  }
  return out;
}

namespace {
std::string fixed(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}
}  // namespace

std::string StepReport::text() const {
  std::ostringstream os;
  const int n = static_cast<int>(ranks.size());
  os << "step breakdown over " << (n ? ranks[0].steps() : 0) << " step(s), ms per step:\n";
  os << "  rank   data wait    compute   exposed comm   optimizer     total    img/s\n";
  for (int r = 0; r < n; ++r) {
    char line[160];
    const double secs = ranks[r].total_seconds();
    std::snprintf(line, sizeof line, "  %4d %11.1f %10.1f %14.1f %11.1f %9.1f %8.0f\n", r,
                  ms_per_step(r, Phase::data), ms_per_step(r, Phase::compute),
                  ms_per_step(r, Phase::exposed_comm), ms_per_step(r, Phase::optimizer),
                  ms_per_step(r), secs > 0 ? static_cast<double>(ranks[r].images()) / secs : 0.0);
    os << line;
  }
  if (n > 1) {
    const int s = slowest(), f = fastest();
    const Phase p = straggler_phase();
    if (spread() > options.straggler_threshold_) {
      os << "  straggler: rank " << s << "'s own work (all but communication) takes "
         << fixed(100 * spread(), 0) << "% longer per step than rank " << f
         << "'s; most of the difference is " << phase_name(p) << " (+"
         << fixed(ms_per_step(s, p) - ms_per_step(f, p), 1)
         << " ms per step), which the other ranks spend waiting in the allreduce\n";
    } else {
      os << "  ranks balanced: the busiest (rank " << s << ") is within "
         << fixed(100 * spread(), 0) << "% of the least busy\n";
    }
  }
  for (int r : starved())
    os << "  data starvation: rank " << r << " waits for the loader "
       << fixed(100 * ms_per_step(r, Phase::data) / ms_per_step(r), 0)
       << "% of its step; give the loader more threads"
       << (options.loader_setting_.empty() ? "" : " (now " + options.loader_setting_ + ")")
       << " or make its transforms cheaper\n";
  return os.str();
}

std::string StepReport::json() const {
  std::ostringstream os;
  os << "{\"ranks\": [";
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const double secs = ranks[r].total_seconds();
    os << (r ? ", " : "") << "{\"rank\": " << r << ", \"steps\": " << ranks[r].steps();
    for (int p = 0; p < kPhases; ++p) {
      static const char* keys[kPhases] = {"data_ms", "compute_ms", "exposed_comm_ms",
                                          "optimizer_ms"};
      os << ", \"" << keys[p] << "\": " << json_number(ms_per_step(r, static_cast<Phase>(p)));
    }
    os << ", \"step_ms\": " << json_number(ms_per_step(r)) << ", \"img_per_s\": "
       << json_number(secs > 0 ? static_cast<double>(ranks[r].images()) / secs : 0.0) << "}";
  }
  // No ranks (a report gathered from none): no slowest rank and no straggler to name.
  const bool any = !ranks.empty();
  os << "], \"slowest\": " << (any ? std::to_string(slowest()) : "null")
     << ", \"spread\": " << json_number(any ? spread() : 0.0)
     << ", \"straggler_phase\": " << (any ? json_string(phase_name(straggler_phase())) : "null")
     << ", \"starved\": [";
  const auto s = starved();
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]}";
  return os.str();
}

StepReport gather_report(comm::Communicator& comm, const StepBreakdown& mine,
                         ReportOptions options) {
  constexpr int kFields = kPhases + 2;  // the phases, steps, images
  std::vector<double> v;
  for (int p = 0; p < kPhases; ++p) v.push_back(mine.seconds(static_cast<Phase>(p)));
  v.push_back(static_cast<double>(mine.steps()));
  v.push_back(static_cast<double>(mine.images()));
  const int world = comm.size();
  Tensor all = zeros({world * kFields}, TensorOptions(DType::f64).device(comm.device()));
  comm.allgather(all, from_vector(v).to(comm.device())).wait();
  const std::vector<double> got = all.to_vector<double>();
  StepReport report;
  report.options = std::move(options);
  for (int r = 0; r < world; ++r) {
    StepBreakdown b;
    for (int p = 0; p < kPhases; ++p) b.add(static_cast<Phase>(p), got[r * kFields + p]);
    b.end_step(static_cast<int64_t>(got[r * kFields + kPhases + 1]),
               static_cast<int64_t>(got[r * kFields + kPhases]));
    report.ranks.push_back(b);
  }
  return report;
}

}  // namespace tandem::monitor
