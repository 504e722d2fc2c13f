// The mpi backend: nonblocking MPI collectives run by a progress thread and polled against the
// communicator's deadline, so that a rank that stops calling, fails or exits surfaces as a
// CommError on the others instead of a hang.
#include "tandem/comm/mpi.hpp"

#include <mpi.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstring>
#include <thread>

#include "progress.hpp"
#include "tandem/kernels/math.hpp"
#include "tandem/ops/creation.hpp"

namespace tandem::comm {

bool mpi_compiled() { return true; }

namespace {

// The largest piece one MPI allreduce or reduce-scatter is given: Open MPI's shared-memory
// collectives drop from GB/s to a few hundred MB/s above a few MiB, and 1 MiB pieces one after
// another measured best here (docs/PERFORMANCE.md).
constexpr int64_t kChunkBytes = int64_t{1} << 20;

// The dtype a reduction runs in: f16/bf16 travel as f32.
DType wire_dtype(DType d) { return d == DType::f16 || d == DType::bf16 ? DType::f32 : d; }

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: TANDEM_THROW(CommError, "mpi: cannot reduce ", dtype_name(d), " tensors");
  }
}

// MPI_MAX and MPI_MIN on floats drop a NaN or keep it depending on which rank holds it (Open
// MPI computes `a > b ? a : b`); these keep it, as the local backend and torch.maximum do.
// MPI's contract: inout[i] = in[i] op inout[i].
template <bool kMax>
void nan_extreme(void* in, void* inout, int* len, MPI_Datatype* type) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* a = static_cast<const T*>(in);
    T* b = static_cast<T*>(inout);
    for (int i = 0; i < *len; ++i)
      b[i] = kMax ? kernels::max_nan(a[i], b[i]) : kernels::min_nan(a[i], b[i]);
  };
  if (*type == MPI_FLOAT) run(float{});
  if (*type == MPI_DOUBLE) run(double{});  // the only wire dtypes these ops are given
}

int int_count(int64_t n, const std::string& what) {
  TANDEM_CHECK_T(CommError, n <= INT_MAX, what, ": ", n, " elements exceed MPI's int count");
  return static_cast<int>(n);
}

// mpi communicators alive in this process.
std::atomic<int> g_live_comms{0};

class MpiComm final : public Communicator {
 public:
  explicit MpiComm(MpiOptions o)
      : timeout_ms_(clamp_timeout(o.timeout_).count()), debug_(o.debug_) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      TANDEM_CHECK_T(CommError, provided >= MPI_THREAD_SERIALIZED,
                     "mpi: the MPI library does not support MPI_THREAD_SERIALIZED");
      owns_mpi_ = true;
    }
    MPI_Op_create(&nan_extreme<true>, /*commute=*/1, &max_nan_);
    MPI_Op_create(&nan_extreme<false>, /*commute=*/1, &min_nan_);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // A second communicator for abort notices, with one receive always posted.
    MPI_Comm_dup(MPI_COMM_WORLD, &notices_);
    MPI_Comm_set_errhandler(notices_, MPI_ERRORS_RETURN);
    MPI_Irecv(notice_, sizeof(notice_), MPI_CHAR, MPI_ANY_SOURCE, 0, notices_, &notice_req_);
    if (auto env = launch_env()) {
      TANDEM_CHECK_T(CommError, env->rank == rank_ && env->world == size_, "mpi: the launcher (",
                     env->source, ") says rank ", env->rank, " of ", env->world, ", MPI says ",
                     rank_, " of ", size_);
      local_rank_ = env->local_rank;
    }
    progress_ = std::make_unique<detail::ProgressThread>(
        [this] { return timeout(); },
        [this](const std::string& what, const std::string& msg) { fail(what + ": " + msg); },
        // Idle: another rank's notice aborts this communicator even when it makes no call (a
        // nccl communicator bootstrapped here watches is_aborted()). Only while it is the
        // process's one mpi communicator: MPI is initialized for one caller at a time, and
        // another's progress thread may be inside MPI now.
        [this] {
          int finalized = 0;
          MPI_Finalized(&finalized);
          if (!aborted_ && !finalized && g_live_comms.load() == 1) noticed();
        });
    ++g_live_comms;
  }

  ~MpiComm() override {
    --g_live_comms;
    progress_.reset();  // runs what is queued (abort notices too): each fails fast once aborted
    if (notice_req_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&notice_req_);
      MPI_Wait(&notice_req_, MPI_STATUS_IGNORE);
    }
    int sent = 1;
    if (!told_.empty()) MPI_Testall(static_cast<int>(told_.size()), told_.data(), &sent,
                                    MPI_STATUSES_IGNORE);
    // A timed-out collective, or a notice to a dead rank, may still be pending inside MPI:
    // finalizing would wait for it.
    if (!pending_ && sent) {
      MPI_Op_free(&max_nan_);
      MPI_Op_free(&min_nan_);
      MPI_Comm_free(&notices_);
      MPI_Comm_free(&comm_);
      if (owns_mpi_) MPI_Finalize();
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  Device device() const override { return kCPU; }
  std::string backend() const override { return "mpi"; }
  void abort(const std::string& why) override {
    fail("rank " + std::to_string(rank_) + " aborted: " + why);
  }
  bool is_aborted() const override { return aborted_; }
  Duration timeout() const override { return Duration(timeout_ms_.load()); }
  void set_timeout(Duration timeout) override {
    TANDEM_CHECK(timeout.count() > 0, "set_timeout: the timeout must be positive");
    timeout_ms_ = clamp_timeout(timeout).count();
  }

  // f16/bf16 travel as f32 whatever `acc` asks (MPI has no 16-bit float reduction).
  Work reduce_all(std::vector<Tensor> tensors, ReduceOp op, Accumulate acc) override {
    const uint64_t seq = ++seq_;
    const std::string what = name(seq, detail::allreduce_name(op, acc));
    const detail::CallDesc desc = checks_.allreduce(seq, tensors, op, acc, rejecter(what));
    const DType dtype = static_cast<DType>(desc[3]);
    const int64_t total = desc[4];
    return submit(what, desc, [this, tensors, op, dtype, total, what](Clock::time_point deadline) {
      // One contiguous buffer in the wire dtype: the tensor itself when it already is one.
      const DType wire = wire_dtype(dtype);
      const bool direct = tensors.size() == 1 && wire == dtype;
      Tensor buf = direct ? tensors[0] : empty({total}, wire);
      if (!direct) {
        int64_t at = 0;
        for (const auto& t : tensors) {
          buf.narrow(0, at, t.numel()).copy_(t.reshape({t.numel()}));
          at += t.numel();
        }
      }
      allreduce_in_place(buf, op, deadline, what);
      if (op == ReduceOp::avg) buf.mul_(1.0 / size_);
      if (!direct) {
        int64_t at = 0;
        for (const auto& t : tensors) {
          Tensor(t).copy_(buf.narrow(0, at, t.numel()).reshape(t.shape()));
          at += t.numel();
        }
      }
    });
  }

  Work broadcast(Tensor tensor, int root) override {
    const uint64_t seq = ++seq_;
    const std::string what = name(seq, "broadcast(root " + std::to_string(root) + ")");
    const detail::CallDesc desc = checks_.broadcast(seq, tensor, root, size_, rejecter(what));
    return submit(what, desc, [this, tensor, root, what](Clock::time_point deadline) {
      MPI_Request req;
      MPI_Ibcast(tensor.raw_data(), int_count(tensor.numel() * tensor.element_size(), what),
                 MPI_BYTE, root, comm_, &req);
      wait(req, deadline, what);
    });
  }

  Work allgather(Tensor output, Tensor input) override {
    const uint64_t seq = ++seq_;
    const std::string what = name(seq, "allgather");
    const detail::CallDesc desc = checks_.allgather(seq, output, input, size_, rejecter(what));
    return submit(what, desc, [this, output, input, what](Clock::time_point deadline) {
      const int bytes = int_count(input.numel() * input.element_size(), what);
      MPI_Request req;
      MPI_Iallgather(input.raw_data(), bytes, MPI_BYTE, output.raw_data(), bytes, MPI_BYTE, comm_,
                     &req);
      wait(req, deadline, what);
    });
  }

  Work reduce_scatter(Tensor output, Tensor input, ReduceOp op) override {
    const uint64_t seq = ++seq_;
    const std::string what = name(seq, detail::reduce_scatter_name(op));
    const detail::CallDesc desc =
        checks_.reduce_scatter(seq, output, input, op, size_, rejecter(what));
    return submit(what, desc, [this, output, input, op, what](Clock::time_point deadline) {
      // In pieces, like allreduce: piece j gathers elements [j*c, (j+1)*c) of every rank's block
      // into one small contiguous buffer, which MPI reduce-scatters (Open MPI's reduce-scatter
      // drops from several GB/s to 0.2 GB/s from 16 MiB up here; docs/PERFORMANCE.md).
      const DType wire = wire_dtype(input.dtype());
      Tensor in = input.dtype() == wire ? input : input.to(wire);
      Tensor out = output.dtype() == wire ? output : empty(output.shape(), wire);
      const int64_t block = out.numel(), esize = element_size(wire);
      const int64_t step = std::max<int64_t>(1, kChunkBytes / (esize * size_));
      const char* src = static_cast<const char*>(in.raw_data());
      char* dst = static_cast<char*>(out.raw_data());
      // One piece needs no gathering: the input is already laid out that way.
      std::vector<char> piece(block > step ? static_cast<size_t>(step * size_ * esize) : 0);
      for (int64_t at = 0; at < block; at += step) {
        const int64_t c = std::min(step, block - at);
        for (int q = 0; q < size_ && block > step; ++q)
          std::memcpy(piece.data() + q * c * esize, src + (q * block + at) * esize, c * esize);
        MPI_Request req;
        MPI_Ireduce_scatter_block(block > step ? piece.data() : src, dst + at * esize,
                                  int_count(c, what), mpi_type(wire), mpi_op(op, wire), comm_,
                                  &req);
        wait(req, deadline, what);
      }
      if (op == ReduceOp::avg) out.mul_(1.0 / size_);
      if (!out.is_same(output)) Tensor(output).copy_(out);
    });
  }

  Work barrier() override {
    const uint64_t seq = ++seq_;
    const std::string what = name(seq, "barrier");
    const detail::CallDesc desc = detail::CallCheck::barrier(seq);
    return submit(what, desc, [this, what](Clock::time_point deadline) {
      MPI_Request req;
      MPI_Ibarrier(comm_, &req);
      wait(req, deadline, what);
    });
  }

 private:
  std::string name(uint64_t seq, const std::string& op) const {
    return "rank " + std::to_string(rank_) + ": " + op + " #" + std::to_string(seq);
  }

  // A bad call throws on the caller; the other ranks learn of it through their timeout.
  detail::CallCheck::Reject rejecter(const std::string& what) const {
    return [what](const std::string& why) { TANDEM_THROW(CommError, what, ": ", why); };
  }

  // Aborts this communicator with `reason` (the first reason stays) and, unless the reason came
  // from another rank's notice, has the progress thread tell every other rank, whose pending
  // and later collectives then fail with it instead of waiting for their timeout.
  void fail(const std::string& reason, bool tell = true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return;
      reason_ = reason;
      aborted_ = true;
    }
    if (!tell || size_ == 1) return;
    auto state = std::make_shared<detail::WorkState>();
    state->what = "rank " + std::to_string(rank_) + ": abort notice";
    progress_->enqueue(state, [this](Clock::time_point) {
      told_text_ = reason_.substr(0, sizeof(notice_) - 1);
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        told_.emplace_back();
        MPI_Isend(told_text_.c_str(), static_cast<int>(told_text_.size()) + 1, MPI_CHAR, q, 0,
                  notices_, &told_.back());
      }
    });
  }

  // The MPI reduction for `op` on `wire` elements; max and min on floats keep a NaN.
  MPI_Op mpi_op(ReduceOp op, DType wire) const {
    const bool floating = is_floating(wire);
    switch (op) {
      case ReduceOp::max: return floating ? max_nan_ : MPI_MAX;
      case ReduceOp::min: return floating ? min_nan_ : MPI_MIN;
      default: return MPI_SUM;  // avg divides afterwards
    }
  }

  // Another rank's abort notice, if one came: this communicator is then aborted with it.
  bool noticed() {
    if (notice_req_ == MPI_REQUEST_NULL) return false;
    int got = 0;
    MPI_Test(&notice_req_, &got, MPI_STATUS_IGNORE);
    if (!got) return false;
    notice_[sizeof(notice_) - 1] = '\0';
    fail(notice_, /*tell=*/false);
    return true;
  }

  // Allreduces the contiguous tensor `buf` (a wire dtype) in place, in pieces of at most
  // kChunkBytes one after another (avg is left to the caller: it sums).
  void allreduce_in_place(const Tensor& buf, ReduceOp op, Clock::time_point deadline,
                          const std::string& what) {
    const DType wire = buf.dtype();
    const int64_t total = buf.numel();
    const int64_t step = std::max<int64_t>(1, kChunkBytes / element_size(wire));
    char* base = static_cast<char*>(buf.raw_data());
    for (int64_t at = 0; at < total; at += step) {
      MPI_Request req;
      MPI_Iallreduce(MPI_IN_PLACE, base + at * element_size(wire),
                     int_count(std::min(step, total - at), what), mpi_type(wire), mpi_op(op, wire),
                     comm_, &req);
      wait(req, deadline, what);
    }
  }

  // Polls `req` until it completes. Past the deadline, on an MPI error, or once this
  // communicator is aborted (here, on another thread, or by another rank's notice) the request
  // is abandoned and the call throws.
  void wait(MPI_Request& req, Clock::time_point deadline, const std::string& what) {
    for (int i = 0;; ++i) {
      int done = 0;
      int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fail(what + ": MPI error: " + std::string(msg, len));
        throw_aborted(what);
      }
      if (done) return;
      if (aborted_ || noticed()) {
        pending_ = true;
        throw_aborted(what);
      }
      if (Clock::now() > deadline) {
        pending_ = true;
        fail(what + " timed out after " + std::to_string(timeout_ms_.load()) +
             " ms (a rank stopped calling, failed or exited)");
        throw_aborted(what);
      }
      if (i > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // This call's error once the communicator is aborted.
  [[noreturn]] void throw_aborted(const std::string& what) {
    std::string reason;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reason = reason_;
    }
    TANDEM_THROW(CommError, detail::aborted_message(what, reason));
  }

  Work submit(const std::string& what, const detail::CallDesc& d,
              detail::ProgressThread::Body body) {
    auto state = std::make_shared<detail::WorkState>();
    state->what = what;
    if (aborted_) return detail::aborted_work(state, reason_, timeout());
    if (!debug_) return progress_->enqueue(state, std::move(body));
    return progress_->enqueue(
        state, [this, d, what, body = std::move(body)](Clock::time_point deadline) {
          // Debug mode: everyone's (seq, kind, op/root, dtype, count) first.
          std::vector<int64_t> all(5 * size_);
          MPI_Request req;
          MPI_Iallgather(d.data(), 5, MPI_INT64_T, all.data(), 5, MPI_INT64_T, comm_, &req);
          wait(req, deadline, what);
          for (int q = 0; q < size_; ++q) {
            if (std::equal(all.begin() + 5 * q, all.begin() + 5 * q + 5, all.begin())) continue;
            detail::CallDesc first, other;
            std::copy_n(all.begin(), 5, first.begin());
            std::copy_n(all.begin() + 5 * q, 5, other.begin());
            std::string msg = detail::mismatch_message(rank_, detail::describe_call(first), q,
                                                       detail::describe_call(other));
            fail(msg, /*tell=*/false);  // every rank sees the same mismatch
            TANDEM_THROW(CommError, msg);
          }
          body(deadline);
        });
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm notices_ = MPI_COMM_NULL;  // abort notices between ranks
  MPI_Op max_nan_ = MPI_OP_NULL;      // see nan_extreme
  MPI_Op min_nan_ = MPI_OP_NULL;
  char notice_[512] = {};
  MPI_Request notice_req_ = MPI_REQUEST_NULL;
  std::string told_text_;            // what this rank sent (alive until the sends complete)
  std::vector<MPI_Request> told_;    // its sends
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  bool owns_mpi_ = false;
  std::atomic<int64_t> timeout_ms_;
  const bool debug_;
  uint64_t seq_ = 0;
  std::mutex mu_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> pending_{false};  // a request left inside MPI by a timeout
  std::string reason_;
  const detail::CallCheck checks_{[](const Tensor& t) { return t.is_cpu(); },
                                  "on the CPU (the mpi backend)"};
  std::unique_ptr<detail::ProgressThread> progress_;  // last: its thread uses the members above
};

}  // namespace

std::shared_ptr<Communicator> make_mpi_communicator(MpiOptions options) {
  TANDEM_CHECK(options.timeout_.count() > 0, "make_mpi_communicator: the timeout must be positive");
  return std::make_shared<MpiComm>(options);
}

}  // namespace tandem::comm
