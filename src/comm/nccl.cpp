// The nccl backend (see nccl.hpp). Three threads touch a rank's communicator:
//   the caller   validates, orders the collective after its own work on the default stream
//                (an event the communication stream waits on) and queues it;
//   progress     issues the NCCL calls in call order on the communication stream (non-blocking
//                communicator: a call may return ncclInProgress, polled against the deadline),
//                records a completion event and hands the collective to the watchdog;
//   watchdog     completes collectives whose event has fired, in issue order, and watches for
//                failures: the group aborted, ncclCommGetAsyncError, the oldest deadline passed.
//                Any of them ends in ncclCommAbort and every pending Work failing.
// NCCL calls on the communicator are serialized by comm_mu_; ncclCommAbort takes it too, so the
// handle is never used after it is gone.
#include "tandem/comm/nccl.hpp"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "../cuda/check.hpp"
#include "progress.hpp"
#include "tandem/comm/mpi.hpp"
#include "tandem/cuda/runtime.hpp"
#include "tandem/ops/creation.hpp"

namespace tandem::comm {

bool nccl_compiled() { return true; }

namespace {

using detail::CallDesc;

std::string nccl_error(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  // One buffer for the whole process, never cleared, written by any thread's warning: NCCL's
  // documentation says it may be unrelated to this call.
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += std::string(" (NCCL's last warning: ") + last + ")";
  return s;
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    default: TANDEM_THROW(CommError, "nccl: cannot reduce ", dtype_name(d), " tensors");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// The non-blocking configuration every communicator is created with. NCCL_COMM_BLOCKING=1 in
// the environment would override it (NCCL's environment wins over the configuration) and make
// every call blocking, which no deadline or abort could then end: refused.
ncclConfig_t nonblocking_config() {
  const char* blocking = std::getenv("NCCL_COMM_BLOCKING");
  TANDEM_CHECK_T(CommError, blocking == nullptr || std::string(blocking) != "1",
                 "nccl: NCCL_COMM_BLOCKING=1 makes NCCL's calls blocking, which tandem's timeouts "
                 "and aborts cannot end: unset it");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// One look at a non-blocking communicator: ncclSuccess (idle), ncclInProgress (a call is still
// being carried out), or the error it failed with.
ncclResult_t comm_state(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  return r != ncclSuccess ? r : state;
}

// Polling loops spin for the first couple of thousand looks (collectives often finish within
// microseconds), then sleep between looks so that a long wait does not burn a core.
void pause_after(int looks) {
  if (looks > 2000) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  } else {
    std::this_thread::yield();
  }
}

// Polls until `comm` has no NCCL call in progress. Returns "" or what went wrong.
std::string settle(ncclComm_t comm, Clock::time_point deadline) {
  for (int i = 0;; ++i) {
    const ncclResult_t state = comm_state(comm);
    if (state == ncclSuccess) return "";
    if (state != ncclInProgress) return nccl_error(state, comm);
    if (Clock::now() > deadline) return "timed out";
    pause_after(i);
  }
}

// What the communicators of one make_nccl_group share (a cross-process rank has its own): the
// abort flag every watchdog watches, and the timeout.
struct GroupState {
  explicit GroupState(int ranks_here, Duration timeout)
      : ranks_in_process(ranks_here), timeout_ms(clamp_timeout(timeout).count()) {}
  const int ranks_in_process;
  std::atomic<int64_t> timeout_ms;

  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_) reason_ = why;
    aborted_ = true;
  }
  bool aborted() const { return aborted_; }
  std::string reason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

 private:
  mutable std::mutex mu_;
  std::atomic<bool> aborted_{false};
  std::string reason_;
};

// A collective issued on the GPU and not yet known to be complete.
using Event = std::shared_ptr<CUevent_st>;  // destroyed with its last owner

// A collective's completion event once the progress thread recorded it, for Work::wait_on_stream,
// and the event before it on the communication stream, for Work::device_span.
struct Issued {
  std::mutex mu;
  std::condition_variable cv;
  Event start, done;
};

// Work::device_span: seconds of the device's time from `since` to the collective's start and
// end; false before both have passed.
bool span_after(Issued& issued, void* since, double& start_s, double& end_s) {
  Event start, done;
  {
    std::lock_guard<std::mutex> lock(issued.mu);
    start = issued.start;
    done = issued.done;
  }
  if (!start || !done) return false;
  float a = 0, b = 0;
  if (cudaEventElapsedTime(&a, static_cast<cudaEvent_t>(since), start.get()) != cudaSuccess ||
      cudaEventElapsedTime(&b, static_cast<cudaEvent_t>(since), done.get()) != cudaSuccess) {
    cudaGetLastError();  // not ready, or not timed: no span, and no error left behind
    return false;
  }
  start_s = a * 1e-3;
  end_s = b * 1e-3;
  return true;
}

struct Pending {
  std::shared_ptr<detail::WorkState> state;
  Event done;
  Clock::time_point deadline;
  std::vector<Tensor> keep;  // inputs, outputs and scratch: alive until the GPU is done
};

// The error a pending Work fails with.
std::exception_ptr failure_of(const std::string& what, const std::string& reason) {
  return std::make_exception_ptr(
      CommError(detail::aborted_message(what, reason), __FILE__, __LINE__));
}

// Work::wait_on_stream (caller's thread): once the progress thread has recorded the collective's
// completion event, the device's compute stream (the legacy default stream, where tandem's
// kernels run) waits on it; the host does not wait for the collective itself. False when the
// collective completed or failed before that, or was not issued within `timeout`.
bool order_after(Issued& issued, detail::WorkState& work, int device, Duration timeout) {
  const auto until = Clock::now() + timeout;
  std::unique_lock<std::mutex> lock(issued.mu);
  while (!issued.done) {
    if (work.done.load(std::memory_order_acquire) || Clock::now() >= until) return false;
    // The progress thread notifies when it records the event; a collective that fails first
    // completes the Work without notifying here, hence the short waits.
    issued.cv.wait_for(lock, std::chrono::milliseconds(1));
  }
  const Event done = issued.done;
  lock.unlock();
  cuda::DeviceGuard guard(device);
  TANDEM_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(), done.get(), 0));
  return true;
}

class NcclComm final : public Communicator {
 public:
  NcclComm(ncclComm_t comm, std::shared_ptr<GroupState> group, int rank, int size,
           int local_rank, int device, bool debug, std::shared_ptr<Communicator> bootstrap)
      : comm_(comm),
        group_(std::move(group)),
        rank_(rank),
        size_(size),
        local_rank_(local_rank),
        device_(device),
        debug_(debug),
        bootstrap_(std::move(bootstrap)),
        stream_(device),
        barrier_buf_(zeros({1}, Device(DeviceType::cuda, device))) {
    watchdog_ = std::thread([this] { watch(); });
    progress_ = std::make_unique<detail::ProgressThread>(
        [this] { return timeout(); },
        [this](const std::string& what, const std::string& msg) {
          group_->abort(what + ": " + msg);
        });
  }

  ~NcclComm() override {
    // In one process, whoever still waits on this rank learns it is gone instead of timing out.
    if (group_->ranks_in_process > 1) group_->abort("rank " + std::to_string(rank_) + " exited");
    progress_.reset();  // issues (or fails) what is queued
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    watchdog_.join();  // returns once nothing is pending
    release_comm();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  Device device() const override { return Device(DeviceType::cuda, device_); }
  std::string backend() const override { return "nccl"; }
  void abort(const std::string& why) override {
    group_->abort("rank " + std::to_string(rank_) + " aborted: " + why);
    cv_.notify_all();
  }
  bool is_aborted() const override { return group_->aborted(); }
  Duration timeout() const override { return Duration(group_->timeout_ms.load()); }
  void set_timeout(Duration timeout) override {
    TANDEM_CHECK(timeout.count() > 0, "set_timeout: the timeout must be positive");
    group_->timeout_ms = clamp_timeout(timeout).count();
  }

  Work reduce_all(std::vector<Tensor> tensors, ReduceOp op, Accumulate acc) override {
    const uint64_t seq = ++seq_;
    const std::string what = name(seq, detail::allreduce_name(op, acc));
    const CallDesc desc = checks_.allreduce(seq, tensors, op, acc, rejecter(what));
    const Wire w = wire_for(static_cast<DType>(desc[3]), op, acc);
    // The tensors themselves, or scratch: widened, or encoded (so that a failed call leaves the
    // caller's values as they were).
    std::vector<Tensor> wire = tensors, held = tensors;
    for (size_t i = 0; w.converts() && i < wire.size(); ++i)
      held.push_back(wire[i] = scratch(w.dtype, tensors[i].numel()));
    return submit(what, desc, std::move(held), [this, tensors, wire, op, w](
                                                   std::function<void()>& after) {
      for (size_t i = 0; i < wire.size(); ++i) to_wire(w, wire[i], tensors[i]);
      // One NCCL group: the first failure is reported after the group is closed.
      ncclResult_t r = ncclGroupStart();
      for (auto& t : wire)
        if (t.numel() > 0 && (r == ncclSuccess || r == ncclInProgress))
          r = ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), w.type, nccl_op(op), comm_,
                            stream());
      const ncclResult_t end = ncclGroupEnd();
      nccl_call("ncclAllReduce", r);
      nccl_call("ncclGroupEnd", end);
      if (w.converts())
        after = [this, tensors, wire, w] {
          for (size_t i = 0; i < wire.size(); ++i) from_wire(w, wire[i], tensors[i]);
        };
    });
  }

  Work broadcast(Tensor tensor, int root) override {
    const uint64_t seq = ++seq_;
    const std::string what = name(seq, "broadcast(root " + std::to_string(root) + ")");
    const CallDesc desc = checks_.broadcast(seq, tensor, root, size_, rejecter(what));
    return submit(what, desc, {tensor}, [this, tensor, root](auto&) {
      if (tensor.numel() == 0) return;
      nccl_call("ncclBroadcast",
                ncclBroadcast(tensor.raw_data(), tensor.raw_data(), bytes(tensor), ncclUint8,
                              root, comm_, stream()));
    });
  }

  Work allgather(Tensor output, Tensor input) override {
    const uint64_t seq = ++seq_;
    const std::string what = name(seq, "allgather");
    const CallDesc desc = checks_.allgather(seq, output, input, size_, rejecter(what));
    return submit(what, desc, {output, input}, [this, output, input](auto&) {
      if (input.numel() == 0) return;
      nccl_call("ncclAllGather", ncclAllGather(input.raw_data(), output.raw_data(), bytes(input),
                                               ncclUint8, comm_, stream()));
    });
  }

  Work reduce_scatter(Tensor output, Tensor input, ReduceOp op) override {
    const uint64_t seq = ++seq_;
    const std::string what = name(seq, detail::reduce_scatter_name(op));
    const CallDesc desc = checks_.reduce_scatter(seq, output, input, op, size_, rejecter(what));
    const Wire w = wire_for(input.dtype(), op, Accumulate::f32);
    Tensor in = input, out = output;  // scratch where the wire needs other bits than the tensors
    if (output.numel() > 0 && w.converts()) in = scratch(w.dtype, input.numel());
    if (output.numel() > 0 && w.widen) out = scratch(w.dtype, output.numel());
    return submit(what, desc, {output, input, in, out}, [this, output, input, in, out, op,
                                                         w](std::function<void()>& after) {
      if (output.numel() == 0) return;
      to_wire(w, in, input);
      nccl_call("ncclReduceScatter", ncclReduceScatter(in.raw_data(), out.raw_data(), out.numel(),
                                                       w.type, nccl_op(op), comm_, stream()));
      if (w.converts()) after = [this, output, out, w] { from_wire(w, out, output); };
    });
  }

  Work barrier() override {
    const uint64_t seq = ++seq_;
    const std::string what = name(seq, "barrier");
    const CallDesc desc = detail::CallCheck::barrier(seq);
    // NCCL has no barrier: a one-element allreduce every rank must join.
    return submit(what, desc, {}, [this](auto&) {
      nccl_call("ncclAllReduce", ncclAllReduce(barrier_buf_.raw_data(), barrier_buf_.raw_data(), 1,
                                               ncclFloat32, ncclSum, comm_, stream()));
    });
  }

 private:
  // How a collective goes on the stream: with comm_mu_ held, `issue` launches what must precede
  // the NCCL calls (f16/bf16 widening), makes them, and may leave in `after` the kernels that
  // follow them; those run once NCCL has enqueued its part (a non-blocking communicator's stream
  // takes no other work while a call is in progress). Every tensor it touches, scratch included,
  // is among submit's `tensors`, kept alive until the GPU is done.
  using Issue = std::function<void(std::function<void()>& after)>;

  cudaStream_t stream() const { return static_cast<cudaStream_t>(stream_.handle()); }
  static size_t bytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

  std::string name(uint64_t seq, const std::string& op) const {
    return "rank " + std::to_string(rank_) + ": " + op + " #" + std::to_string(seq);
  }

  // A bad call throws on the caller and aborts the group: the other ranks would otherwise wait
  // for this one until the timeout.
  detail::CallCheck::Reject rejecter(const std::string& what) {
    return [this, what](const std::string& why) {
      group_->abort(what + ": " + why);
      cv_.notify_all();
      TANDEM_THROW(CommError, what, ": ", why);
    };
  }

  // Scratch for widened or encoded data (cuda::ordered_bits), taken on the caller's thread
  // before submit records its event: the allocator may hand out a block the caller's stream
  // still reads, and that event orders the communication stream after every such use.
  Tensor scratch(DType dtype, int64_t n) const {
    return empty({n}, TensorOptions(dtype).device(device()));
  }

  // How a reduction's data goes to NCCL. f16/bf16 are widened to f32 (accumulation in f32, as on
  // the other backends) unless Accumulate::native asks for NCCL's 16-bit sum. The floats of a
  // max or min go as integers ordered as they are (cuda::ordered_bits), since NCCL's float
  // max/min (fmaxf/fminf) drop a NaN that the other backends keep: exact, and a NaN wins.
  struct Wire {
    bool widen = false, ordered = false, nan_is_max = false;
    DType dtype = DType::f32;  // of the data NCCL reduces: f32 when widened
    ncclDataType_t type = ncclFloat32;
    // Whether NCCL needs other bits than the caller's tensors hold (scratch, and work after).
    bool converts() const { return widen || ordered; }
  };
  static Wire wire_for(DType dtype, ReduceOp op, Accumulate acc) {
    Wire w;
    w.ordered = is_floating(dtype) && (op == ReduceOp::max || op == ReduceOp::min);
    w.nan_is_max = op == ReduceOp::max;
    w.widen = is_reduced_float(dtype) && (acc == Accumulate::f32 || w.ordered);
    w.dtype = w.widen ? DType::f32 : dtype;
    w.type = !w.ordered ? nccl_type(w.dtype) : w.dtype == DType::f64 ? ncclInt64 : ncclInt32;
    return w;
  }
  // Before the NCCL call, on the stream: `src` widened and/or encoded into `wire` (which may be
  // `src` itself).
  void to_wire(const Wire& w, const Tensor& wire, const Tensor& src) const {
    if (w.widen)
      cuda::widen_to_f32(wire.data_ptr<float>(), src.raw_data(), src.dtype() == DType::bf16,
                         src.numel(), stream());
    if (w.ordered)
      cuda::ordered_bits(wire.raw_data(), (w.widen ? wire : src).raw_data(),
                         w.dtype == DType::f64, wire.numel(), w.nan_is_max, false, stream());
  }
  // After it: `wire` decoded (into `dst` unless it is to be narrowed) and/or rounded back into
  // `dst`.
  void from_wire(const Wire& w, const Tensor& wire, const Tensor& dst) const {
    if (w.ordered)
      cuda::ordered_bits((w.widen ? wire : dst).raw_data(), wire.raw_data(),
                         w.dtype == DType::f64, wire.numel(), w.nan_is_max, true, stream());
    if (w.widen)
      cuda::narrow_from_f32(dst.raw_data(), dst.dtype() == DType::bf16, wire.data_ptr<float>(),
                            wire.numel(), stream());
  }

  // On the progress thread: runs `launch` (NCCL calls, kernels on the communication stream)
  // with comm_mu_ held, as an abort (which then drains the stream) takes it, so the
  // communicator is alive throughout. A call NCCL or CUDA refused leaves the communicator in an
  // unknown state: the group is aborted and this call fails.
  void launch_locked(const std::function<void()>& launch, const std::string& what) {
    std::string error;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (comm_ == nullptr) throw_aborted(what);
      try {
        launch();
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    if (!error.empty()) fail(what + ": " + error, what);
  }

  // On the progress thread, with comm_mu_ held: an NCCL call that failed outright aborts.
  void nccl_call(const char* fn, ncclResult_t r) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    TANDEM_THROW(CommError, fn, " failed: ", nccl_error(r, comm_));
  }

  // The caller's thread: validate (done by the op), order after the caller's work, queue.
  Work submit(const std::string& what, const CallDesc& desc, std::vector<Tensor> tensors,
              Issue issue) {
    auto state = std::make_shared<detail::WorkState>();
    state->what = what;
    if (group_->aborted()) return detail::aborted_work(state, group_->reason(), timeout());
    // Everything the caller queued on the default stream so far (tensors written by kernels or
    // copies) happens before the collective: the communication stream waits on this event.
    cudaEvent_t ready = nullptr;
    {
      cuda::DeviceGuard guard(device_);
      TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
      TANDEM_CUDA_CHECK(cudaEventRecord(ready, cudaStreamLegacy));
    }
    auto issued = std::make_shared<Issued>();
    state->on_stream = [issued, device = device_](detail::WorkState& self, Duration timeout) {
      return order_after(*issued, self, device, timeout);
    };
    state->device_span = [issued](void* since, double& start_s, double& end_s) {
      return span_after(*issued, since, start_s, end_s);
    };
    return progress_->enqueue(
        state,
        [this, state, issued, what, desc, ready, tensors = std::move(tensors),
         issue = std::move(issue)](Clock::time_point deadline) mutable {
          cuda::DeviceGuard guard(device_);
          cudaError_t err = cudaStreamWaitEvent(stream(), ready, 0);
          cudaEventDestroy(ready);
          if (err != cudaSuccess)
            fail(what + ": ordering it after the caller's work: " + cuda::error_text(err), what);
          // Where it starts on the device (a timing event; without one, no span, no failure).
          Event start;
          cudaEvent_t begun = nullptr;
          if (cudaEventCreate(&begun) != cudaSuccess) {
            cudaGetLastError();
          } else {
            start = Event(begun, [](cudaEvent_t e) { cudaEventDestroy(e); });
            if (cudaEventRecord(begun, stream()) != cudaSuccess) {
              cudaGetLastError();
              start = nullptr;
            }
          }
          if (debug_) check_same_call(desc, what, deadline);
          Pending p{state, nullptr, deadline, std::move(tensors)};
          std::function<void()> after;
          if (group_->aborted()) throw_aborted(what);
          launch_locked([&] { issue(after); }, what);
          settle_or_abort(what, deadline);
          // The narrowing kernels are locked too: an abort comes before them (they are not
          // queued) or after, and its drain covers them before their scratch goes back.
          if (after) launch_locked(after, what);
          cudaEvent_t done = nullptr;
          err = cudaEventCreate(&done);  // timed: Work::device_span
          if (err == cudaSuccess) {
            p.done = Event(done, [](cudaEvent_t e) { cudaEventDestroy(e); });
            err = cudaEventRecord(done, stream());
          }
          if (err != cudaSuccess)
            fail(what + ": recording its completion: " + cuda::error_text(err), what);
          {
            std::lock_guard<std::mutex> lock(issued->mu);
            issued->start = std::move(start);
            issued->done = p.done;
          }
          issued->cv.notify_all();
          {
            std::lock_guard<std::mutex> lock(mu_);
            pending_.push_back(std::move(p));
          }
          cv_.notify_all();
        },
        /*completes_later=*/true);
  }

  // Waits (progress thread) until the NCCL calls just issued are enqueued; past the deadline or
  // on an error the group is aborted.
  void settle_or_abort(const std::string& what, Clock::time_point deadline) {
    for (int i = 0;; ++i) {
      ncclResult_t state;
      std::string error;
      {
        std::lock_guard<std::mutex> lock(comm_mu_);
        if (comm_ == nullptr)
          throw_aborted(what);
        state = comm_state(comm_);
        if (state != ncclSuccess && state != ncclInProgress) error = nccl_error(state, comm_);
      }
      if (!error.empty()) fail(what + ": NCCL error: " + error, what);
      if (state == ncclSuccess) return;
      if (Clock::now() > deadline)
        fail(what + " timed out after " + std::to_string(timeout().count()) +
                 " ms while NCCL enqueued it (a rank stopped calling, failed or exited)",
             what);
      pause_after(i);
    }
  }

  // Aborts the group with `msg` (unless it already was) and the NCCL communicator, so that no
  // kernel outlives the buffers it uses, and throws this call's error. Not with comm_mu_ held.
  [[noreturn]] void fail(const std::string& msg, const std::string& what) {
    group_->abort(msg);
    abort_comm();
    cv_.notify_all();
    if (group_->reason() == msg) TANDEM_THROW(CommError, msg);
    throw_aborted(what);
  }

  // This call's error once the group is aborted.
  [[noreturn]] void throw_aborted(const std::string& what) {
    TANDEM_THROW(CommError, detail::aborted_message(what, group_->reason()));
  }

  // Debug mode (progress thread): every rank's call description, gathered on the GPU, must
  // match rank 0's before the collective is issued.
  void check_same_call(const CallDesc& desc, const std::string& what, Clock::time_point deadline) {
    Tensor mine = from_vector(std::vector<int64_t>(desc.begin(), desc.end())).to(device());
    Tensor all = empty({5 * size_}, TensorOptions(DType::i64).device(device()));
    // That copy ran on the default stream and may still be in flight (a copy from pageable
    // memory returns once staged): the communication stream waits for it.
    cudaEvent_t copied = nullptr, gathered = nullptr;
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    TANDEM_CUDA_CHECK(cudaEventRecord(copied, cudaStreamLegacy));
    const cudaError_t waited = cudaStreamWaitEvent(stream(), copied, 0);
    cudaEventDestroy(copied);
    TANDEM_CUDA_CHECK(waited);
    launch_locked([&] {
      nccl_call("ncclAllGather (debug-mode check)",
                ncclAllGather(mine.raw_data(), all.raw_data(), 5, ncclInt64, comm_, stream()));
    }, what);
    settle_or_abort(what, deadline);
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&gathered, cudaEventDisableTiming));
    TANDEM_CUDA_CHECK(cudaEventRecord(gathered, stream()));
    cudaError_t q;
    for (int i = 0; (q = cudaEventQuery(gathered)) == cudaErrorNotReady; ++i) {
      if (group_->aborted() || Clock::now() > deadline) break;
      pause_after(i);
    }
    // A query that found the event not ready leaves cudaErrorNotReady as this thread's last
    // error, which the next kernel launch's check (the f16/bf16 widening) would report: q holds
    // the outcome, so clear it.
    (void)cudaGetLastError();
    cudaEventDestroy(gathered);
    if (q != cudaSuccess) {
      // `mine` and `all` must outlive the gather: stop the communicator before they go.
      fail(q == cudaErrorNotReady
               ? what + " timed out after " + std::to_string(timeout().count()) +
                     " ms in the debug-mode check (a rank stopped calling, failed or exited)"
               : what + ": in the debug-mode check: " + cuda::error_text(q),
           what);
    }
    const std::vector<int64_t> got = all.cpu().to_vector<int64_t>();
    for (int q2 = 0; q2 < size_; ++q2) {
      if (std::equal(got.begin() + 5 * q2, got.begin() + 5 * q2 + 5, got.begin())) continue;
      CallDesc first, other;
      std::copy_n(got.begin(), 5, first.begin());
      std::copy_n(got.begin() + 5 * q2, 5, other.begin());
      fail(detail::mismatch_message(rank_, detail::describe_call(first), q2,
                                    detail::describe_call(other)),
           what);
    }
  }

  // A communicator nothing failed on is finalized, then destroyed: finalize flushes what this
  // rank issued (over a network, its proxy's last sends, which ncclCommAbort drops, so that a
  // peer's last collective would never complete). It is non-blocking, so it is polled, for at
  // most 10 s (or the timeout, if shorter). A failed or aborted one, or one whose finalize fails
  // or does not settle in time, is aborted: freed without waiting on anyone.
  void release_comm() {
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (comm_ == nullptr) return;
      if (!group_->aborted()) {
        const ncclResult_t r = ncclCommFinalize(comm_);
        const Clock::time_point deadline =
            Clock::now() + std::min<Duration>(timeout(), std::chrono::seconds(10));
        if ((r == ncclSuccess || r == ncclInProgress) && settle(comm_, deadline).empty() &&
            ncclCommDestroy(comm_) == ncclSuccess) {
          comm_ = nullptr;
          return;
        }
      }
    }
    abort_comm();
  }

  // ncclCommAbort, once; comm_mu_ keeps the progress thread off the handle meanwhile. Then the
  // communication stream is drained (the abort ends NCCL's kernels), so the scratch and
  // outputs pending collectives keep go back to the allocator only once nothing reads them.
  void abort_comm() {
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (comm_ == nullptr) return;
    ncclCommAbort(comm_);
    comm_ = nullptr;
    cuda::DeviceGuard guard(device_);
    if (cudaStreamSynchronize(stream()) != cudaSuccess) cudaGetLastError();
  }

  bool communicator_aborted() {
    std::lock_guard<std::mutex> lock(comm_mu_);
    return comm_ == nullptr;
  }

  // Why this communicator must stop now, or "": the group aborted, an asynchronous NCCL error,
  // or the oldest pending collective past its deadline. Called with mu_ held.
  std::string failure() {
    // Across processes (an mpi bootstrap), an abort goes both ways through the bootstrap's
    // notices: this group's to the other processes, theirs to this group.
    if (group_->aborted()) {
      if (bootstrap_ && !bootstrap_->is_aborted()) bootstrap_->abort(group_->reason());
      return group_->reason();
    }
    if (bootstrap_ && bootstrap_->is_aborted()) {
      group_->abort("rank " + std::to_string(rank_) + ": " + bootstrap_reason());
      return group_->reason();
    }
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (comm_ != nullptr) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
        if (r == ncclSuccess && state != ncclSuccess && state != ncclInProgress) r = state;
        if (r != ncclSuccess) {
          group_->abort("rank " + std::to_string(rank_) + ": NCCL error: " + nccl_error(r, comm_));
          return group_->reason();
        }
      }
    }
    if (!pending_.empty() && Clock::now() > pending_.front().deadline) {
      group_->abort(pending_.front().state->what + " timed out after " +
                    std::to_string(timeout().count()) +
                    " ms (a rank stopped calling, failed or exited)");
      return group_->reason();
    }
    return "";
  }

  // Why the bootstrap was aborted: a call on an aborted communicator fails at once with it.
  std::string bootstrap_reason() {
    try {
      bootstrap_->barrier().wait();
    } catch (const CommError& e) {
      return e.message();
    }
    return "the mpi bootstrap communicator was aborted";
  }

  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    for (int spins = 0;;) {
      // Finished collectives complete in issue order.
      while (!pending_.empty()) {
        const cudaError_t q = cudaEventQuery(pending_.front().done.get());
        if (q == cudaErrorNotReady) break;
        Pending p = std::move(pending_.front());
        pending_.pop_front();
        if (q != cudaSuccess) {
          group_->abort(p.state->what + ": " + cuda::error_text(q));
          p.state->complete(failure_of(p.state->what, group_->reason()));
        } else if (group_->aborted() && communicator_aborted()) {
          // This rank's abort may have ended its kernels (the event fires on the drained stream
          // too): it cannot be called done, though it may have finished first. One seen done
          // while this rank's communicator is alive did complete, though the group aborted
          // meanwhile (another rank failed after it). Every path that aborts the communicator
          // aborts the group first.
          p.state->complete(failure_of(p.state->what, group_->reason()));
        } else {
          p.state->complete();
        }
        spins = 0;
      }
      const std::string reason = failure();
      if (!reason.empty()) {
        abort_comm();  // the kernels of pending collectives exit
        for (auto& p : pending_) {
          p.state->complete(failure_of(p.state->what, reason));
        }
        pending_.clear();
      }
      if (pending_.empty()) {
        if (stopping_) return;
        // Idle: wake for new work, or now and then to notice the group being aborted.
        cv_.wait_for(lock, std::chrono::milliseconds(10));
        continue;
      }
      lock.unlock();
      pause_after(++spins);
      lock.lock();
    }
  }

  ncclComm_t comm_;  // null once aborted
  std::mutex comm_mu_;
  std::shared_ptr<GroupState> group_;
  const int rank_, size_, local_rank_, device_;
  const bool debug_;
  std::shared_ptr<Communicator> bootstrap_;  // the mpi communicator that handed out the id
  cuda::Stream stream_;
  Tensor barrier_buf_;
  uint64_t seq_ = 0;

  std::mutex mu_;  // guards pending_ and stopping_
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  bool stopping_ = false;
  std::thread watchdog_;
  const detail::CallCheck checks_{
      [this](const Tensor& t) { return t.device() == device(); },
      "on cuda:" + std::to_string(device_) + " (this rank's GPU; the nccl backend)"};
  std::unique_ptr<detail::ProgressThread> progress_;  // last: its thread uses the members above
};

// Waits until every communicator in `comms` finished initializing; on a failure or past the
// deadline all of them are aborted and the error names the first rank that failed.
void settle_init(std::vector<ncclComm_t>& comms, const std::vector<int>& ranks,
                 const std::vector<int>& devices, Clock::time_point deadline,
                 const std::string& who) {
  for (size_t i = 0; i < comms.size(); ++i) {
    const std::string problem = settle(comms[i], deadline);
    if (problem.empty()) continue;
    for (auto c : comms) ncclCommAbort(c);
    TANDEM_THROW(CommError, who, ": NCCL initialization of rank ", ranks[i], " (cuda:", devices[i],
                 ") ", problem == "timed out" ? "timed out (a rank never joined)" : "failed: " + problem);
  }
}

Duration checked_timeout(const NcclOptions& options, const char* who) {
  TANDEM_CHECK(options.timeout_.count() > 0, who, ": the timeout must be positive");
  return options.timeout_;
}

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_nccl_group(const std::vector<int>& devices,
                                                           NcclOptions options) {
  const Duration timeout = checked_timeout(options, "make_nccl_group");
  const int n = static_cast<int>(devices.size());
  TANDEM_CHECK(n >= 1, "make_nccl_group: no devices given");
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      TANDEM_CHECK(devices[i] != devices[j], "make_nccl_group: ranks ", i, " and ", j,
                   " both name cuda:", devices[i],
                   ": NCCL forbids two ranks on one GPU (give each rank its own GPU; for "
                   "several ranks on the CPU use the local backend)");
  TANDEM_CHECK(cuda::device_count() > 0,
               "make_nccl_group: no GPU is visible (the nccl backend needs one GPU per rank; on "
               "the CPU use the local or mpi backend)");
  for (int d : devices)
    TANDEM_CHECK_INDEX(d >= 0 && d < cuda::device_count(), "make_nccl_group: cuda:", d,
                       " does not exist (", cuda::device_count(), " visible GPUs)");

  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  TANDEM_CHECK_T(CommError, r == ncclSuccess, "make_nccl_group: ncclGetUniqueId failed: ",
                 nccl_error(r, nullptr));
  // What ncclCommInitAll does (one id, every rank inside one group call), non-blocking.
  std::vector<ncclComm_t> comms(n, nullptr);
  std::vector<int> ranks(n);
  ncclConfig_t config = nonblocking_config();
  ncclGroupStart();
  for (int i = 0; i < n; ++i) {
    ranks[i] = i;
    cuda::DeviceGuard guard(devices[i]);
    r = ncclCommInitRankConfig(&comms[i], n, id, i, &config);
    if (r != ncclSuccess && r != ncclInProgress) break;
  }
  ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess || r == ncclInProgress) r = end;
  if (r != ncclSuccess && r != ncclInProgress) {
    for (auto c : comms)
      if (c != nullptr) ncclCommAbort(c);
    TANDEM_THROW(CommError, "make_nccl_group: NCCL initialization failed: ", nccl_error(r, nullptr));
  }
  settle_init(comms, ranks, devices, Clock::now() + timeout, "make_nccl_group");

  auto group = std::make_shared<GroupState>(n, timeout);
  std::vector<std::shared_ptr<Communicator>> out;
  for (int i = 0; i < n; ++i)
    out.push_back(std::make_shared<NcclComm>(comms[i], group, i, n, i, devices[i], options.debug_,
                                             nullptr));
  return out;
}

std::shared_ptr<Communicator> make_nccl_communicator(NcclOptions options) {
  const Duration timeout = checked_timeout(options, "make_nccl_communicator");
  std::shared_ptr<Communicator> boot;
  try {
    boot = make_mpi_communicator(MpiOptions().timeout(timeout).debug(false));
  } catch (const NotImplementedError& e) {
    TANDEM_THROW(NotImplementedError,
                 "make_nccl_communicator: the unique id travels over the mpi backend, and ",
                 e.message(), "; for the GPUs of one process use make_nccl_group");
  }
  const int rank = boot->rank(), world = boot->size();
  const int device = options.device_ >= 0 ? options.device_ : boot->local_rank();

  // Every rank's view before NCCL is touched, so that all fail alike: a problem, the host and
  // the GPU's PCI bus id.
  struct Record {
    char problem[256];
    char host[64];
    char bus[32];
  };
  Record mine{};
  gethostname(mine.host, sizeof(mine.host) - 1);
  const int count = cuda::device_count();
  std::string problem;
  if (count == 0) {
    problem = "rank " + std::to_string(rank) + " (" + mine.host +
              ") sees no GPU (the nccl backend needs one GPU per rank)";
  } else if (device >= count) {
    problem = "rank " + std::to_string(rank) + " (" + mine.host + ", local rank " +
              std::to_string(boot->local_rank()) + ") needs cuda:" + std::to_string(device) +
              " but the node shows " + std::to_string(count) + " GPU(s): start at most " +
              std::to_string(count) + " rank(s) per node (NCCL forbids two ranks on one GPU)";
  } else if (cudaDeviceGetPCIBusId(mine.bus, sizeof(mine.bus), device) != cudaSuccess) {
    cudaGetLastError();
    problem = "rank " + std::to_string(rank) + ": cannot read the PCI bus id of cuda:" +
              std::to_string(device);
  }
  std::strncpy(mine.problem, problem.c_str(), sizeof(mine.problem) - 1);
  const TensorOptions host = TensorOptions(DType::u8).device(kCPU);  // written and read here
  Tensor mine_t = empty({int64_t{sizeof(Record)}}, host);
  std::memcpy(mine_t.raw_data(), &mine, sizeof(Record));
  Tensor all_t = empty({int64_t{sizeof(Record)} * world}, host);
  boot->allgather(all_t, mine_t).wait();
  std::vector<Record> all(world);
  std::memcpy(all.data(), all_t.raw_data(), sizeof(Record) * world);
  for (const auto& rec : all)
    TANDEM_CHECK_T(CommError, rec.problem[0] == '\0', "make_nccl_communicator: ",
                   std::string(rec.problem, strnlen(rec.problem, sizeof(rec.problem))));
  for (int a = 0; a < world; ++a)
    for (int b = a + 1; b < world; ++b)
      TANDEM_CHECK_T(CommError,
                     std::strncmp(all[a].host, all[b].host, sizeof(Record::host)) != 0 ||
                         std::strncmp(all[a].bus, all[b].bus, sizeof(Record::bus)) != 0,
                     "make_nccl_communicator: ranks ", a, " and ", b, " both use the GPU at ",
                     all[a].bus, " on ", all[a].host, ": NCCL forbids two ranks on one GPU");

  // Rank 0's unique id, over MPI.
  ncclUniqueId id;
  Tensor id_t = zeros({int64_t{sizeof(id)}}, DType::u8);
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    TANDEM_CHECK_T(CommError, r == ncclSuccess, "make_nccl_communicator: ncclGetUniqueId failed: ",
                   nccl_error(r, nullptr));
    std::memcpy(id_t.raw_data(), &id, sizeof(id));
  }
  boot->broadcast(id_t, 0).wait();
  std::memcpy(&id, id_t.raw_data(), sizeof(id));

  std::vector<ncclComm_t> comm(1, nullptr);
  ncclConfig_t config = nonblocking_config();
  {
    cuda::DeviceGuard guard(device);
    ncclResult_t r = ncclCommInitRankConfig(&comm[0], world, id, rank, &config);
    TANDEM_CHECK_T(CommError, r == ncclSuccess || r == ncclInProgress,
                   "make_nccl_communicator: rank ", rank, ": ncclCommInitRankConfig failed: ",
                   nccl_error(r, comm[0]));
  }
  settle_init(comm, {rank}, {device}, Clock::now() + timeout, "make_nccl_communicator");
  return std::make_shared<NcclComm>(comm[0], std::make_shared<GroupState>(1, timeout), rank, world,
                                    boot->local_rank(), device, options.debug_, boot);
}

}  // namespace tandem::comm
