// What the backends share: the thread that runs one rank's collectives in call order (a call
// enqueues a body and gets a Work handle; the body runs with its deadline, start + timeout, and
// completes the Work with its outcome), and the checks and messages every backend gives alike.
#pragma once

#include <array>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "tandem/comm/communicator.hpp"

namespace tandem::comm::detail {

/// Why `dtype` cannot be reduced with `op`, or "" when it can.
inline std::string reduction_problem(DType dtype, ReduceOp op) {
  if (dtype == DType::u8 || dtype == DType::boolean)
    return std::string("cannot reduce ") + dtype_name(dtype) + " tensors";
  if (op == ReduceOp::avg && !is_floating(dtype)) return "avg needs a floating dtype";
  return "";
}

/// What every rank throws when rank `other` called another collective than rank 0.
inline std::string mismatch_message(int rank, const std::string& first, int other,
                                    const std::string& call) {
  return "rank " + std::to_string(rank) + ": mismatched collectives: rank 0 called " + first +
         ", rank " + std::to_string(other) + " called " + call;
}

/// "allreduce(sum)", or "allreduce(sum, native)" for 16-bit accumulation (Accumulate::native).
inline std::string allreduce_name(ReduceOp op, Accumulate acc) {
  return std::string("allreduce(") + reduce_op_name(op) +
         (acc == Accumulate::native ? ", native)" : ")");
}

/// "reduce_scatter(sum)".
inline std::string reduce_scatter_name(ReduceOp op) {
  return std::string("reduce_scatter(") + reduce_op_name(op) + ")";
}

/// What debug mode compares across ranks before a collective: (sequence number, kind, reduce op
/// (plus kNativeFlag for Accumulate::native) or broadcast root, dtype, elements).
enum CallKind : int64_t { kAllreduce = 1, kBroadcast, kAllgather, kReduceScatter, kBarrier };
constexpr int64_t kNativeFlag = 16;
using CallDesc = std::array<int64_t, 5>;

/// "allreduce(sum) #3 (f32, 10 elements)".
inline std::string describe_call(const CallDesc& d) {
  static const char* kNames[] = {"?",         "allreduce",      "broadcast",
                                 "allgather", "reduce_scatter", "barrier"};
  std::string s = kNames[d[1] >= 1 && d[1] <= 5 ? d[1] : 0];
  const auto op = static_cast<ReduceOp>(d[2] & (kNativeFlag - 1));
  if (d[1] == kAllreduce)
    s = allreduce_name(op, d[2] & kNativeFlag ? Accumulate::native : Accumulate::f32);
  if (d[1] == kReduceScatter) s = reduce_scatter_name(op);
  if (d[1] == kBroadcast) s += "(root " + std::to_string(d[2]) + ")";
  return s + " #" + std::to_string(d[0]) + " (" + dtype_name(static_cast<DType>(d[3])) + ", " +
         std::to_string(d[4]) + " elements)";
}

/// Checks a call's arguments on the caller's thread, alike on every backend that takes tensors
/// anywhere in memory (mpi, nccl), and returns what debug mode compares. `placed` says whether a
/// tensor is where the backend needs it, `placement` says where that is ("on the CPU (the mpi
/// backend)"); `reject(why)` reports a problem and must throw.
class CallCheck {
 public:
  using Reject = std::function<void(const std::string& why)>;
  CallCheck(std::function<bool(const Tensor&)> placed, std::string placement)
      : placed_(std::move(placed)), placement_(std::move(placement)) {}

  CallDesc allreduce(uint64_t seq, const std::vector<Tensor>& tensors, ReduceOp op, Accumulate acc,
                     const Reject& reject) const {
    int64_t total = 0;
    for (const auto& t : tensors) {
      tensor(t, reject);
      if (t.dtype() != tensors[0].dtype()) reject("tensors of different dtypes");
      total += t.numel();
    }
    const DType dtype = tensors.empty() ? DType::f32 : tensors[0].dtype();
    reducible(dtype, op, reject);
    return {static_cast<int64_t>(seq), kAllreduce,
            static_cast<int64_t>(op) | (acc == Accumulate::native ? kNativeFlag : 0),
            static_cast<int64_t>(dtype), total};
  }

  CallDesc broadcast(uint64_t seq, const Tensor& t, int root, int size,
                     const Reject& reject) const {
    tensor(t, reject);
    if (root < 0 || root >= size) reject("root out of range");
    return {static_cast<int64_t>(seq), kBroadcast, root, static_cast<int64_t>(t.dtype()),
            t.numel()};
  }

  CallDesc allgather(uint64_t seq, const Tensor& output, const Tensor& input, int size,
                     const Reject& reject) const {
    tensor(input, reject);
    tensor(output, reject);
    if (output.dtype() != input.dtype() || output.numel() != input.numel() * size)
      reject("output has " + std::to_string(output.numel()) +
             " elements, expected size() x input's elements = " +
             std::to_string(input.numel() * size));
    return {static_cast<int64_t>(seq), kAllgather, 0, static_cast<int64_t>(input.dtype()),
            input.numel()};
  }

  CallDesc reduce_scatter(uint64_t seq, const Tensor& output, const Tensor& input, ReduceOp op,
                          int size, const Reject& reject) const {
    tensor(input, reject);
    tensor(output, reject);
    reducible(input.dtype(), op, reject);
    if (input.numel() % size != 0) reject("input elements not divisible by size()");
    if (output.dtype() != input.dtype() || output.numel() != input.numel() / size)
      reject("output has " + std::to_string(output.numel()) +
             " elements, expected input's elements / size() = " +
             std::to_string(input.numel() / size));
    return {static_cast<int64_t>(seq), kReduceScatter, static_cast<int64_t>(op),
            static_cast<int64_t>(input.dtype()), input.numel()};
  }

  static CallDesc barrier(uint64_t seq) {
    return {static_cast<int64_t>(seq), kBarrier, 0, static_cast<int64_t>(DType::f32), 0};
  }

 private:
  void tensor(const Tensor& t, const Reject& reject) const {
    if (!t.defined() || !t.is_contiguous() || !placed_(t))
      reject("tensors must be defined, contiguous and " + placement_);
  }
  static void reducible(DType d, ReduceOp op, const Reject& reject) {
    const std::string problem = reduction_problem(d, op);
    if (!problem.empty()) reject(problem);
  }

  std::function<bool(const Tensor&)> placed_;
  std::string placement_;
};

/// The error of call `what` ("rank 0: allreduce(sum) #7") on an aborted communicator: the reason
/// itself when it is about this call ("rank 0: allreduce(sum) #7 timed out ..."; #7, not #70),
/// else "<what>: communicator aborted: <reason>".
inline std::string aborted_message(const std::string& what, const std::string& reason) {
  const bool own = reason.compare(0, what.size(), what) == 0 &&
                   (reason.size() == what.size() ||
                    !std::isdigit(static_cast<unsigned char>(reason[what.size()])));
  return own ? reason : what + ": communicator aborted: " + reason;
}

/// The Work of a call made after the communicator was aborted: already failed.
inline Work aborted_work(std::shared_ptr<WorkState> state, const std::string& reason,
                         Duration timeout) {
  state->complete(std::make_exception_ptr(
      CommError(aborted_message(state->what, reason), __FILE__, __LINE__)));
  return Work(std::move(state), timeout);
}

class ProgressThread {
 public:
  using Body = std::function<void(Clock::time_point deadline)>;

  /// `timeout` gives the current timeout when a body starts; `on_failure(what, message)` runs when
  /// a body throws something other than a CommError (the backend aborts the group there).
  /// `idle`, when given, runs on this thread every kIdlePoll while nothing is queued (the mpi
  /// backend looks for other ranks' abort notices there, as MPI is only called from here).
  ProgressThread(std::function<Duration()> timeout,
                 std::function<void(const std::string&, const std::string&)> on_failure,
                 std::function<void()> idle = nullptr)
      : timeout_(std::move(timeout)),
        on_failure_(std::move(on_failure)),
        idle_(std::move(idle)),
        thread_([this] { run(); }) {}
  static constexpr Duration kIdlePoll{20};

  /// Runs what is queued (each body fails fast once the backend is aborted), then stops.
  ~ProgressThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  /// Waits until every queued body has run (each ends by its deadline at the latest).
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }

  /// Queues `body`. When it returns, the Work completes, unless `completes_later`: then the
  /// backend completes it (the nccl backend, once the GPU is done); a throw fails it either way.
  Work enqueue(std::shared_ptr<WorkState> state, Body body, bool completes_later = false) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({state, std::move(body), completes_later});
      queued_.fetch_add(1, std::memory_order_release);
      wake = sleeping_;
    }
    if (wake) cv_.notify_all();
    return Work(std::move(state), timeout_());
  }

 private:
  struct Task {
    std::shared_ptr<WorkState> state;
    Body body;
    bool completes_later = false;
  };

  void run() {
    for (;;) {
      // Collectives often come back to back: look for the next one for a moment before sleeping
      // (a wake-up costs tens of microseconds).
      const auto spin_until = Clock::now() + std::chrono::microseconds(50);
      while (queued_.load(std::memory_order_acquire) == 0 && Clock::now() < spin_until)
        std::this_thread::yield();
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        sleeping_ = true;
        const auto ready = [&] { return stopping_ || !queue_.empty(); };
        if (!idle_) {
          cv_.wait(lock, ready);
        } else if (!cv_.wait_for(lock, kIdlePoll, ready)) {
          sleeping_ = false;
          lock.unlock();
          try {
            idle_();
          } catch (const std::exception& e) {
            on_failure_("progress thread", e.what());
          }
          continue;
        }
        sleeping_ = false;
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
        queued_.fetch_sub(1, std::memory_order_relaxed);
        busy_ = true;
      }
      run_task(task);
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
      }
      idle_cv_.notify_all();
    }
  }

  void run_task(Task& task) {
    try {
      task.body(Clock::now() + timeout_());
      if (!task.completes_later) task.state->complete();
    } catch (const CommError&) {
      task.state->complete(std::current_exception());
    } catch (const std::exception& e) {
      on_failure_(task.state->what, e.what());
      task.state->complete(std::current_exception());
    }
  }

  std::function<Duration()> timeout_;
  std::function<void(const std::string&, const std::string&)> on_failure_;
  std::function<void()> idle_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), for the spinning look without the lock
  bool sleeping_ = false;          // the thread waits on cv_ (under mu_)
  bool stopping_ = false;
  bool busy_ = false;                // a body runs (under mu_)
  std::condition_variable idle_cv_;  // wait_idle's: busy_ became false
  std::thread thread_;  // last: started once everything it uses exists
};

}  // namespace tandem::comm::detail
