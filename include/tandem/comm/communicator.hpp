// Communicators: collectives over the ranks of a data-parallel job, each call asynchronous and
// returning a Work handle. Every communicator has a timeout: past it, or when any rank failed,
// the communicator is aborted and every pending and later call throws a CommError naming the
// rank, the op, its sequence number and what happened. Nothing hangs silently.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/arg.hpp"
#include "tandem/core/error.hpp"
#include "tandem/core/tensor.hpp"

namespace tandem::cuda {
class Event;
}

namespace tandem::comm {

/// A collective failed, timed out, or the communicator was aborted.
class CommError : public Error {
  using Error::Error;
};

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

/// How an allreduce accumulates f16/bf16 tensors (other dtypes ignore it).
enum class Accumulate {
  /// Widened to f32, reduced, rounded once (the default).
  f32,
  /// A sum or avg in the tensor's own 16 bits on a backend with a 16-bit wire (nccl): half the
  /// bytes of f32,
  /// and NCCL rounds to 16 bits at every step of its reduction, as with PyTorch's f16/bf16
  /// compression hooks. The local and mpi backends accumulate in f32 either way.
  native,
};

using Clock = std::chrono::steady_clock;
using Duration = std::chrono::milliseconds;

/// The longest timeout kept: longer ones, up to Duration::max(), mean "never" and are cut to it
/// (100 years), since a deadline of now + Duration::max() overflows the clock and expires at once.
inline constexpr Duration kMaxTimeout = std::chrono::hours(24 * 365 * 100);
inline Duration clamp_timeout(Duration t) { return t < kMaxTimeout ? t : kMaxTimeout; }

/// The default timeout: 5 minutes (PyTorch's NCCL default is 10), or TANDEM_COMM_TIMEOUT_MS (a
/// positive whole number of milliseconds; anything else is a ValueError).
Duration default_timeout();
/// True when TANDEM_COMM_DEBUG=1: every collective first checks that all ranks are calling the
/// same collective (sequence number, op, dtype, element count).
bool debug_mode_from_env();

namespace detail {
/// What a Work handle waits on; the backend completes it (the first completion counts).
struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};  // set under mu; read without it by a waiter's first looks
  std::exception_ptr error;
  std::string what;  // "rank 1: allreduce #7" for timeout messages
  std::chrono::steady_clock::time_point completed_at;  // set with done
  /// Set by a backend whose collectives run on a device stream (nccl), before the Work is handed
  /// out: makes the caller's compute stream wait for the collective without blocking the host.
  /// Returns false when it could not (the collective completed or failed before it was issued,
  /// or was not issued within the time given): Work::wait_on_stream then waits on the host.
  std::function<bool(WorkState& self, std::chrono::milliseconds timeout)> on_stream;
  /// Set by the same backends: the collective's start and end on its device, in seconds after
  /// the CUDA event `since` (a cudaEvent_t of that device, passed); false until it completed.
  std::function<bool(void* since, double& start_s, double& end_s)> device_span;

  void complete(std::exception_ptr e = nullptr);
};
}  // namespace detail

/// The handle of one asynchronous collective.
class Work {
 public:
  Work() = default;
  Work(std::shared_ptr<detail::WorkState> state, Duration timeout)
      : state_(std::move(state)), timeout_(clamp_timeout(timeout)) {}
  /// Waits for the collective, which the backend completes or fails within the communicator's
  /// timeout (the wait gives up a second after that, as a safety net); rethrows its error.
  void wait() const { wait(timeout_ + std::chrono::seconds(1)); }
  /// Waits up to `timeout`; throws CommError when the collective is not done by then (the
  /// communicator's own deadline then aborts it) and rethrows its error.
  void wait(Duration timeout) const;
  /// Orders the caller's later device work after the collective without blocking the host, as
  /// PyTorch's ProcessGroupNCCL work.wait(): on GPUs the device's compute stream waits for the
  /// collective's completion event (the host waits only until the collective is issued, which
  /// the progress thread does at once). Where there is no device stream (CPU ranks) and for a
  /// collective that already completed, the same as wait(). A failure after this returns is not
  /// thrown here: the communicator is aborted and its next wait() or call throws it.
  void wait_on_stream() const;
  bool is_completed() const;
  /// When the backend completed it (for timelines); only after it completed.
  Clock::time_point completed_at() const;
  /// Where the collective ran on a GPU (the nccl backend): its start and end in seconds of the
  /// device's time after `since`, an event of the same device that has passed; nullopt where
  /// it ran on no device stream (CPU backends) or has not completed.
  std::optional<std::pair<double, double>> device_span(const cuda::Event& since) const;

 private:
  std::shared_ptr<detail::WorkState> state_;
  Duration timeout_{0};
};

/// One rank's view of a group. Collectives on the same communicator run in call order; every
/// rank must issue the same collectives in the same order (debug mode checks it).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Rank among the ranks of this node (this process, for the local backend).
  virtual int local_rank() const = 0;
  /// The device this rank's tensors live on.
  virtual Device device() const = 0;
  virtual std::string backend() const = 0;

  /// In place: every rank's `tensor` becomes the reduction over all ranks.
  Work allreduce(Tensor tensor, ReduceOp op = ReduceOp::sum, Accumulate acc = Accumulate::f32) {
    return allreduce_grouped({std::move(tensor)}, op, acc);
  }
  /// Several tensors reduced as one collective (one rendezvous, one sequence number). A tensor
  /// named twice is reduced once, as torch's coalesced allreduce; tensors that share only part
  /// of their memory are refused (their elements would be reduced twice).
  Work allreduce_grouped(std::vector<Tensor> tensors, ReduceOp op = ReduceOp::sum,
                         Accumulate acc = Accumulate::f32) {
    // native only where it changes anything (an f16/bf16 sum or avg): ranks that differ only
    // where it does not make the same call.
    const DType dtype = tensors.empty() ? DType::f32 : tensors[0].dtype();
    if (!is_reduced_float(dtype) || op == ReduceOp::max || op == ReduceOp::min)
      acc = Accumulate::f32;
    return reduce_all(distinct(std::move(tensors)), op, acc);
  }
  /// Every rank's `tensor` becomes root's.
  virtual Work broadcast(Tensor tensor, int root = 0) = 0;
  /// `output` (size() x input's elements) gets every rank's `input`, in rank order.
  virtual Work allgather(Tensor output, Tensor input) = 0;
  /// `output` (input's elements / size()) gets this rank's slice of the reduction of `input`.
  virtual Work reduce_scatter(Tensor output, Tensor input, ReduceOp op = ReduceOp::sum) = 0;
  virtual Work barrier() = 0;

  /// Aborts the whole group: pending and later calls on every rank throw CommError with `why`.
  virtual void abort(const std::string& why) = 0;
  /// This rank makes no more calls (launch calls it when a rank's function returns): once its
  /// queued collectives have run, every collective that waits for it, or that another rank
  /// calls later, fails at once naming it, instead of waiting out the timeout. The local
  /// backend does so; elsewhere it does nothing (an mpi rank's exit is seen by its peers).
  virtual void leave() {}
  virtual bool is_aborted() const = 0;
  virtual Duration timeout() const = 0;
  virtual void set_timeout(Duration timeout) = 0;

 protected:
  /// allreduce and allreduce_grouped: what each backend implements.
  virtual Work reduce_all(std::vector<Tensor> tensors, ReduceOp op, Accumulate acc) = 0;

 private:
  /// tensors without repeats of one buffer; a partial overlap aborts the group and throws.
  std::vector<Tensor> distinct(std::vector<Tensor> tensors);
};

/// How run_group sets up each rank's thread.
struct GroupOptions {
  /// CPU threads in each rank's pool; 0 (the default): max(1, T / world), where T is
  /// TANDEM_NUM_THREADS when set, else the hardware concurrency. A positive count is used as is.
  TANDEM_ARG(int, threads_per_rank) = 0;
};

/// Runs fn(comms[r]) on one thread per rank and joins them. Each rank's thread runs under its own
/// ExecutionContext (core/context.hpp): the device comms[r]->device(), a pool of its own with its
/// slice of the cores (see GroupOptions), grad mode on. An exception on a rank aborts the group
/// so that no other rank waits for it; the first exception thrown is rethrown here.
void run_group(const std::vector<std::shared_ptr<Communicator>>& comms,
               const std::function<void(Communicator&)>& fn, GroupOptions options = {});

}  // namespace tandem::comm
