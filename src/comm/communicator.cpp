#include "tandem/comm/communicator.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>
#include <tuple>

#include "tandem/core/context.hpp"
#include "tandem/core/env.hpp"
#include "tandem/core/thread_pool.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

Duration default_timeout() {
  if (auto ms = positive_env("TANDEM_COMM_TIMEOUT_MS")) return clamp_timeout(Duration(*ms));
  return std::chrono::minutes(5);
}

bool debug_mode_from_env() {
  const char* env = std::getenv("TANDEM_COMM_DEBUG");
  return env != nullptr && std::strcmp(env, "0") != 0 && env[0] != '\0';
}

namespace {
constexpr std::chrono::microseconds kSpin{50};
}  // namespace

std::vector<Tensor> Communicator::distinct(std::vector<Tensor> tensors) {
  // Contiguous tensors only (the backends refuse the rest, saying so): each is one byte range.
  // Sorted by where they start, a range that begins before the furthest end so far overlaps an
  // earlier one: a repeat of the range just before it is dropped, anything else is refused.
  struct Range {
    int device;
    const char* begin;
    const char* end;
    size_t index;
  };
  std::vector<Range> ranges;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined() || !t.is_contiguous() || t.numel() == 0) continue;
    const char* p = static_cast<const char*>(t.raw_data());
    const int device = t.device().is_cpu() ? -1 : t.device().index();
    ranges.push_back({device, p, p + t.numel() * element_size(t.dtype()), i});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return std::tie(a.device, a.begin, a.end, a.index) <
           std::tie(b.device, b.begin, b.end, b.index);
  });
  std::vector<bool> repeat(tensors.size(), false);
  for (size_t k = 1, reach = 0; k < ranges.size(); ++k) {
    const Range& r = ranges[k];
    const Range& furthest = ranges[reach];
    if (r.device == furthest.device && r.begin < furthest.end) {
      const Range& before = ranges[k - 1];
      if (r.begin == before.begin && r.end == before.end &&
          tensors[r.index].dtype() == tensors[before.index].dtype()) {
        repeat[r.index] = true;
        continue;
      }
      const std::string why =
          "rank " + std::to_string(rank()) + ": allreduce_grouped: tensors " +
          std::to_string(std::min(r.index, furthest.index)) + " and " +
          std::to_string(std::max(r.index, furthest.index)) +
          " share part of their memory (overlapping views of one buffer); their common "
          "elements would be reduced twice";
      abort(why);
      TANDEM_THROW(CommError, why);
    }
    if (r.device != furthest.device || r.end > furthest.end) reach = k;
  }
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!repeat[i]) out.push_back(std::move(tensors[i]));
  return out;
}

namespace detail {
void WorkState::complete(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return;
    error = std::move(e);
    completed_at = Clock::now();
    done = true;
  }
  cv.notify_all();
}
}  // namespace detail

void Work::wait(Duration timeout) const {
  TANDEM_CHECK_T(CommError, state_ != nullptr, "Work.wait: an empty Work handle");
  timeout = clamp_timeout(timeout);
  // Small collectives finish within microseconds: look for a moment before sleeping, which
  // costs a wake-up of tens of microseconds.
  const auto spin_until = Clock::now() + std::min<Clock::duration>(timeout, kSpin);
  while (!state_->done.load(std::memory_order_acquire) && Clock::now() < spin_until)
    std::this_thread::yield();
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done.load(); }))
    TANDEM_THROW(CommError, state_->what, ": not completed within ", timeout.count(), " ms");
  if (state_->error) std::rethrow_exception(state_->error);
}

void Work::wait_on_stream() const {
  TANDEM_CHECK_T(CommError, state_ != nullptr, "Work.wait_on_stream: an empty Work handle");
  const Duration limit = timeout_ + std::chrono::seconds(1);
  if (state_->on_stream && !state_->done.load(std::memory_order_acquire) &&
      state_->on_stream(*state_, limit))
    return;
  wait(limit);
}

Clock::time_point Work::completed_at() const {
  TANDEM_CHECK_T(CommError, state_ != nullptr, "Work.completed_at: an empty Work handle");
  std::lock_guard<std::mutex> lock(state_->mu);
  TANDEM_CHECK_T(CommError, state_->done.load(), "Work.completed_at: ", state_->what,
                 " has not completed");
  return state_->completed_at;
}

std::optional<std::pair<double, double>> Work::device_span(const cuda::Event& since) const {
  if (!state_ || !state_->device_span || !is_completed()) return std::nullopt;
  std::pair<double, double> span;
  if (!state_->device_span(since.handle(), span.first, span.second)) return std::nullopt;
  return span;
}

bool Work::is_completed() const {
  if (!state_) return false;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done.load();
}

void run_group(const std::vector<std::shared_ptr<Communicator>>& comms,
               const std::function<void(Communicator&)>& fn, GroupOptions options) {
  TANDEM_CHECK(options.threads_per_rank_ >= 0, "run_group: threads per rank must be >= 0, got ",
               options.threads_per_rank_);
  // Each rank gets its own slice of the cores, so that ranks do not oversubscribe them.
  const int world = std::max<int>(1, static_cast<int>(comms.size()));
  const int pool_threads = options.threads_per_rank_ > 0
                               ? options.threads_per_rank_
                               : std::max(1, default_num_threads() / world);
  for (size_t i = 0; i < comms.size(); ++i)
    TANDEM_CHECK(comms[i] != nullptr, "run_group: communicator ", i, " is null");
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  // A rank's failure, whatever it threw, ends the group: its communicator aborts, so the
  // others fail at their next collective instead of waiting for it.
  auto fail = [&](Communicator& comm, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!first) first = std::current_exception();
    }
    if (!comm.is_aborted()) comm.abort("failed: " + why);
  };
  for (const auto& comm : comms) {
    try {
      threads.emplace_back([&, comm] {
        try {
          ExecutionContext context(comm->device(), std::make_shared<ThreadPool>(pool_threads));
          ContextGuard guard(context);
          // A GPU rank's thread: its GPU current once, not switched to and back by every op.
          if (comm->device().is_cuda() && cuda::device_count() > 0)
            cuda::set_device(comm->device().index());
          fn(*comm);
        } catch (const std::exception& e) {
          fail(*comm, e.what());
        } catch (...) {
          fail(*comm, "an exception that is not a std::exception");
        }
      });
    } catch (const std::system_error& e) {  // the system's thread limit: the started ranks
      const std::string why = std::string("cannot start the thread of rank ") +
                              std::to_string(threads.size()) + " of " +
                              std::to_string(comms.size()) + " (" + e.what() + ")";
      for (const auto& c : comms)
        if (!c->is_aborted()) c->abort(why);  // fail, not wait, in their collectives
      for (auto& t : threads) t.join();
      TANDEM_THROW(Error, "run_group: ", why);
    }
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace tandem::comm
