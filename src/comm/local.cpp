// The local backend: the ranks are threads of one process; collectives read every rank's buffer
// in shared memory and reduce in a fixed rank order.
#include "tandem/comm/local.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <sstream>
#include <thread>

#include "progress.hpp"
#include "tandem/core/dtype_dispatch.hpp"
#include "tandem/kernels/math.hpp"

namespace tandem::comm {
namespace {

// What a rank posts when it enters a collective; every rank reads every rank's post.
struct Call {
  uint64_t seq = 0;
  std::string op;
  DType dtype = DType::f32;
  std::vector<int64_t> counts;  // elements of each input tensor
  std::vector<void*> data;      // each input tensor's first element
  void* out = nullptr;          // allgather / reduce_scatter output

  std::string describe() const {
    std::ostringstream os;
    os << op << " #" << seq << " (" << dtype_name(dtype) << ", ";
    for (size_t i = 0; i < counts.size(); ++i) os << (i ? " + " : "") << counts[i];
    os << " elements)";
    return os.str();
  }
  bool same_as(const Call& o) const {
    return seq == o.seq && op == o.op && dtype == o.dtype && counts == o.counts;
  }
};

class LocalGroup {
 public:
  LocalGroup(int world, Duration timeout)
      : world(world), calls(world), timeout_ms(clamp_timeout(timeout).count()), passed_(world, 0) {}

  // Waits for every rank. Throws CommError when the group is aborted, or at `deadline` (and then
  // aborts the group, naming the ranks that did not arrive). The barrier that `opens` a
  // collective makes every rank a reader of the others' posts until it calls stop_reading.
  void barrier(int rank, Clock::time_point deadline, const std::string& what, bool opens = false) {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_) TANDEM_THROW(CommError, what, ": communicator aborted: ", reason_);
    const uint64_t generation = generation_;
    ++passed_[rank];
    if (++arrived_ == world) {
      arrived_ = 0;
      if (opens) readers_ = world;  // 0 before: every rank stopped reading the last collective
      ++generation_;
      cv_.notify_all();
      return;
    }
    // Spin briefly before sleeping: the other ranks usually arrive within microseconds, and a
    // futex sleep and wake-up costs tens of them.
    lock.unlock();
    const auto spin_until = Clock::now() + std::chrono::microseconds(kSpinMicros);
    for (int i = 0; generation_ == generation && !aborted_; ++i)
      if ((i & 255) == 255 && Clock::now() > spin_until) break;
    lock.lock();
    cv_.wait_until(lock, deadline, [&] { return generation_ != generation || aborted_; });
    if (generation_ != generation) return;
    if (!aborted_) {
      std::string missing;
      for (int q = 0; q < world; ++q)
        if (passed_[q] < passed_[rank])
          missing += (missing.empty() ? "" : ", ") + std::to_string(q);
      abort_locked(what + " timed out after " + std::to_string(timeout_ms.load()) +
                   " ms waiting for rank(s) " + missing);
      TANDEM_THROW(CommError, reason_);
    }
    TANDEM_THROW(CommError, what, ": communicator aborted: ", reason_);
  }

  // A rank no longer reads the posts of the collective opened last (calls[q], the buffers they
  // point to). A rank that fails in the middle of a collective passes `drain`: it then waits
  // until no rank reads its own post any more, because its caller frees or reuses the buffers as
  // soon as the collective fails. The wait is short: the group is aborted, so every other rank
  // stops at its next barrier, at the latest once the reduction it is in is done.
  void stop_reading(bool drain) {
    std::unique_lock<std::mutex> lock(mu_);
    if (--readers_ == 0 && draining_ > 0) drained_.notify_all();
    if (!drain) return;
    ++draining_;
    drained_.wait(lock, [&] { return readers_ == 0; });
    --draining_;
  }

  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    abort_locked(why);
  }
  bool aborted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }
  std::string reason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

  const int world;
  std::vector<Call>
      calls;  // calls[r] is written by rank r before the first barrier of a collective
  std::atomic<int64_t> timeout_ms;

 private:
  void abort_locked(const std::string& why) {
    if (!aborted_) {
      reason_ = why;
      aborted_ = true;
    }
    cv_.notify_all();
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  static constexpr int kSpinMicros = 100;
  int arrived_ = 0;
  std::atomic<uint64_t> generation_{0};  // read without the lock while spinning
  std::vector<uint64_t> passed_;         // barriers entered per rank, to name the missing ones
  std::atomic<bool> aborted_{false};     // written under mu_, read without it while spinning
  std::string reason_;
  int readers_ = 0;   // ranks reading the posts of the collective opened last
  int draining_ = 0;  // failed ranks waiting for readers_ to reach 0
  std::condition_variable drained_;
};

// dst[i] = reduce over q of srcs[q][i], q in rank order, accumulated in acc_type<S> (f32 for
// f16/bf16). The library is compiled for the x86-64 baseline: the loader picks the widest
// vector clone this CPU runs (GCC function multiversioning; the same results, summed in the
// same order, in every clone). Not under ThreadSanitizer: the clones' resolver runs while the
// library is relocated, before the sanitizer's runtime is up, and its instrumentation crashes.
template <typename S>
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void reduce_into(S* dst, const std::vector<const S*>& srcs, int64_t n, ReduceOp op) {
  using A = acc_type<S>;
  constexpr int64_t kBlock = 1024;
  A acc[kBlock];
  const A world = static_cast<A>(srcs.size());
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    for (int64_t j = 0; j < m; ++j) acc[j] = static_cast<A>(srcs[0][b + j]);
    for (size_t q = 1; q < srcs.size(); ++q) {
      const S* s = srcs[q] + b;
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          for (int64_t j = 0; j < m; ++j) acc[j] += static_cast<A>(s[j]);
          break;
        case ReduceOp::max:  // NaN wins, whichever rank holds it
          for (int64_t j = 0; j < m; ++j) acc[j] = kernels::max_nan(acc[j], static_cast<A>(s[j]));
          break;
        case ReduceOp::min:
          for (int64_t j = 0; j < m; ++j) acc[j] = kernels::min_nan(acc[j], static_cast<A>(s[j]));
          break;
      }
    }
    if (op == ReduceOp::avg)
      for (int64_t j = 0; j < m; ++j) acc[j] /= world;
    for (int64_t j = 0; j < m; ++j) dst[b + j] = static_cast<S>(acc[j]);
  }
}

// Reduces elements [lo, hi) of every rank's buffer k (byte pointers) into dst + lo.
void reduce_range(DType dtype, void* dst, const std::vector<void*>& bases, int64_t lo, int64_t hi,
                  ReduceOp op) {
  // u8 and bool never get here: detail::reduction_problem rejects them first.
  dispatch_dtype<DTypeSet::numeric>(dtype, "local reduction", [&](auto tag) {
    using S = decltype(tag);
    std::vector<const S*> srcs;
    for (void* b : bases) srcs.push_back(static_cast<const S*>(b) + lo);
    reduce_into(static_cast<S*>(dst) + lo, srcs, hi - lo, op);
  });
}

class LocalComm final : public Communicator {
 public:
  LocalComm(std::shared_ptr<LocalGroup> group, int rank)
      : group_(std::move(group)),
        rank_(rank),
        progress_(std::make_unique<detail::ProgressThread>(
            [this] { return timeout(); },
            [this](const std::string& what, const std::string& msg) {
              group_->abort(what + ": " + msg);
            })) {}

  ~LocalComm() override {
    // Whoever still waits on this rank learns it is gone instead of timing out.
    group_->abort("rank " + std::to_string(rank_) + " exited");
    progress_.reset();
  }

  int rank() const override { return rank_; }
  int size() const override { return group_->world; }
  int local_rank() const override { return rank_; }
  Device device() const override { return kCPU; }
  std::string backend() const override { return "local"; }
  void abort(const std::string& why) override {
    group_->abort("rank " + std::to_string(rank_) + " aborted: " + why);
  }
  void leave() override {
    progress_->wait_idle();  // what it called completes (or fails) first
    if (size() > 1) group_->abort("rank " + std::to_string(rank_) + " left: its function returned");
  }
  bool is_aborted() const override { return group_->aborted(); }
  Duration timeout() const override { return Duration(group_->timeout_ms.load()); }
  void set_timeout(Duration timeout) override {
    TANDEM_CHECK(timeout.count() > 0, "set_timeout: the timeout must be positive");
    group_->timeout_ms = clamp_timeout(timeout).count();
  }

  // In memory there is no wire to narrow: f16/bf16 accumulate in f32 whatever `acc` asks.
  Work reduce_all(std::vector<Tensor> tensors, ReduceOp op, Accumulate acc) override {
    const std::string name = detail::allreduce_name(op, acc);
    Call call = prepare(name, tensors);
    check_reducible(call, op);
    return submit(std::move(call), [this, tensors, op](Clock::time_point deadline, const Call& c) {
      const int w = size();
      for (size_t k = 0; k < c.counts.size(); ++k) {  // reduce-scatter: my slice of each tensor
        const int64_t n = c.counts[k];
        std::vector<void*> bases;
        for (int q = 0; q < w; ++q) bases.push_back(group_->calls[q].data[k]);
        reduce_range(c.dtype, c.data[k], bases, n * rank_ / w, n * (rank_ + 1) / w, op);
      }
      sync(deadline, c);
      const int64_t es = element_size(c.dtype);
      for (size_t k = 0; k < c.counts.size(); ++k) {  // allgather: everyone else's slices
        const int64_t n = c.counts[k];
        for (int q = 0; q < w; ++q) {
          if (q == rank_) continue;
          const int64_t lo = n * q / w, hi = n * (q + 1) / w;
          std::memcpy(static_cast<char*>(c.data[k]) + lo * es,
                      static_cast<const char*>(group_->calls[q].data[k]) + lo * es, (hi - lo) * es);
        }
      }
    });
  }

  Work broadcast(Tensor tensor, int root) override {
    Call call = prepare("broadcast(root " + std::to_string(root) + ")", {tensor});
    check(root >= 0 && root < size(), call, "root out of range");
    return submit(std::move(call), [this, tensor, root](Clock::time_point, const Call& c) {
      if (rank_ != root)
        std::memcpy(c.data[0], group_->calls[root].data[0], c.counts[0] * element_size(c.dtype));
    });
  }

  Work allgather(Tensor output, Tensor input) override {
    Call call = prepare("allgather", {input});
    check_output(call, output, input.numel() * size(), "size() x input's elements");
    return submit(std::move(call), [this, output, input](Clock::time_point, const Call& c) {
      const int64_t bytes = c.counts[0] * element_size(c.dtype);
      for (int q = 0; q < size(); ++q)
        std::memcpy(static_cast<char*>(c.out) + q * bytes, group_->calls[q].data[0], bytes);
    });
  }

  Work reduce_scatter(Tensor output, Tensor input, ReduceOp op) override {
    Call call = prepare(detail::reduce_scatter_name(op), {input});
    check(input.numel() % size() == 0, call, "input elements not divisible by size()");
    check_reducible(call, op);
    check_output(call, output, input.numel() / size(), "input's elements / size()");
    return submit(std::move(call), [this, output, input, op](Clock::time_point, const Call& c) {
      const int64_t n = c.counts[0] / size();
      std::vector<void*> bases;
      const int64_t offset = n * rank_ * element_size(c.dtype);
      for (int q = 0; q < size(); ++q)
        bases.push_back(static_cast<char*>(group_->calls[q].data[0]) + offset);
      reduce_range(c.dtype, c.out, bases, 0, n, op);
    });
  }

  Work barrier() override {
    return submit(prepare("barrier", {}), [](Clock::time_point, const Call&) {});
  }

 private:
  std::string what(const Call& c) const {
    return "rank " + std::to_string(rank_) + ": " + c.op + " #" + std::to_string(c.seq);
  }

  // Validates on the caller's thread. A bad call aborts the group too: the other ranks would
  // otherwise wait for this one until the timeout.
  void check(bool ok, const Call& c, const std::string& why) {
    if (ok) return;
    std::string msg = what(c) + ": " + why;
    group_->abort(msg);
    TANDEM_THROW(CommError, msg);
  }

  Call prepare(const std::string& op, const std::vector<Tensor>& tensors) {
    Call c;
    c.op = op;
    c.seq = ++seq_;
    for (const auto& t : tensors) {
      check(t.defined() && t.is_cpu() && t.is_contiguous(), c,
            "tensors must be defined, contiguous and on the CPU (the local backend)");
      check(c.counts.empty() || t.dtype() == c.dtype, c, "tensors of different dtypes");
      c.dtype = t.dtype();
      c.counts.push_back(t.numel());
      c.data.push_back(t.raw_data());
    }
    return c;
  }

  void check_reducible(const Call& c, ReduceOp op) {
    const std::string problem = detail::reduction_problem(c.dtype, op);
    check(problem.empty(), c, problem);
  }

  void check_output(Call& c, const Tensor& out, int64_t numel, const char* expected) {
    check(out.defined() && out.is_cpu() && out.is_contiguous() && out.dtype() == c.dtype, c,
          "output must be a contiguous CPU tensor of the input's dtype");
    check(out.numel() == numel, c,
          "output has " + std::to_string(out.numel()) + " elements, expected " + expected + " = " +
              std::to_string(numel));
    c.out = out.raw_data();
  }

  // Every rank at the same point of the same collective (or an error naming who is missing).
  void sync(Clock::time_point deadline, const Call& c, bool opens = false) {
    group_->barrier(rank_, deadline, what(c), opens);
  }

  Work submit(Call call, std::function<void(Clock::time_point, const Call&)> body) {
    auto state = std::make_shared<detail::WorkState>();
    state->what = what(call);
    if (group_->aborted()) return detail::aborted_work(state, group_->reason(), timeout());
    auto shared_call = std::make_shared<Call>(std::move(call));
    return progress_->enqueue(
        state, [this, shared_call, body = std::move(body)](Clock::time_point deadline) {
          const Call& c = *shared_call;
          group_->calls[rank_] = c;
          sync(deadline, c, /*opens=*/true);  // everyone has posted; all read all posts now
          try {
            for (int q = 0; q < size(); ++q) {
              if (group_->calls[q].same_as(group_->calls[0])) continue;
              std::string msg = detail::mismatch_message(rank_, group_->calls[0].describe(), q,
                                                         group_->calls[q].describe());
              group_->abort(msg);
              TANDEM_THROW(CommError, msg);
            }
            body(deadline, c);
            sync(deadline, c);  // nobody reuses a buffer another rank still reads
          } catch (const std::exception& e) {
            // Once this body ends, the Work fails and its caller may free or reuse the buffers,
            // and this rank's next call overwrites its post: not while another rank still reads
            // them (the group is aborted, so the others stop soon).
            group_->abort(what(c) + ": " + e.what());  // no-op when already aborted
            group_->stop_reading(/*drain=*/true);
            throw;
          }
          group_->stop_reading(/*drain=*/false);
        });
  }

  std::shared_ptr<LocalGroup> group_;
  const int rank_;
  uint64_t seq_ = 0;
  std::unique_ptr<detail::ProgressThread> progress_;  // last: its thread uses the members above
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_local_group(int world, LocalOptions options) {
  TANDEM_CHECK(world >= 1, "make_local_group: world size must be >= 1, got ", world);
  TANDEM_CHECK(options.timeout_.count() > 0, "make_local_group: the timeout must be positive");
  auto group = std::make_shared<LocalGroup>(world, options.timeout_);
  std::vector<std::shared_ptr<Communicator>> comms;
  for (int r = 0; r < world; ++r) comms.push_back(std::make_shared<LocalComm>(group, r));
  return comms;
}

void run_local(int world, const std::function<void(Communicator&)>& fn, LocalOptions options,
               GroupOptions group) {
  run_group(
      make_local_group(world, options),
      [&](Communicator& c) {
        fn(c);
        c.leave();
      },
      group);
}

}  // namespace tandem::comm
