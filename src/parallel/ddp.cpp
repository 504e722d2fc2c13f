// DistributedDataParallel's reducer: buckets of gradients, their allreduce launched in bucket order
// from the gradient-ready hooks, and the end-of-backward callback that waits for them.
#include "tandem/parallel/ddp.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>

#include "tandem/autograd/grad_mode.hpp"
#include "tandem/autograd/node.hpp"
#include "tandem/cuda/runtime.hpp"
#include "tandem/nn/layers.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/shape_ops.hpp"

namespace tandem::parallel {

namespace {
// A bucket cap, MiB: positive and finite (NaN and inf fail), at most kMaxBucketMb.
bool valid_cap(double mb) { return mb > 0 && mb <= kMaxBucketMb; }
}  // namespace

std::vector<std::vector<size_t>> assign_buckets(const std::vector<Tensor>& params,
                                                const std::vector<size_t>& order,
                                                int64_t first_cap_bytes, int64_t cap_bytes) {
  struct Open {
    std::vector<size_t> params;
    int64_t bytes = 0;
  };
  std::map<DType, Open> open;
  std::vector<std::vector<size_t>> closed;
  for (size_t i : order) {
    TANDEM_CHECK(i < params.size(), "assign_buckets: parameter index ", i, " out of range");
    Open& b = open[params[i].dtype()];
    b.params.push_back(i);
    b.bytes += params[i].numel() * element_size(params[i].dtype());
    if (b.bytes >= (closed.empty() ? first_cap_bytes : cap_bytes)) {
      closed.push_back(std::move(b.params));
      b = Open();
    }
  }
  for (auto& [dtype, b] : open)
    if (!b.params.empty()) closed.push_back(std::move(b.params));
  std::vector<size_t> place(params.size());
  for (size_t k = 0; k < order.size(); ++k) place[order[k]] = k;
  std::stable_sort(closed.begin(), closed.end(),
                   [&](const auto& a, const auto& b) { return place[a[0]] < place[b[0]]; });
  return closed;
}

std::function<bool(bool)> any_rank(comm::Communicator& comm) {
  return [&comm](bool flag) {
    Tensor t = full({1}, flag ? 1.0 : 0.0, TensorOptions(DType::f32).device(comm.device()));
    comm.allreduce(t, comm::ReduceOp::max).wait();
    return t.item<float>() > 0.0f;
  };
}

int convert_sync_batchnorm(nn::Module& module, comm::Communicator& comm) {
  int converted = 0;
  module.apply([&](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm*>(&m)) {
      // On GPUs the compute stream waits for the sums, not the host (wait_on_stream): the
      // statistics and the group's count stay on the device.
      bn->set_stats_allreduce(
          [&comm](const Tensor& t) { comm.allreduce(t, comm::ReduceOp::sum).wait_on_stream(); });
      ++converted;
    }
  });
  return converted;
}

namespace detail {

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  Reducer(const nn::StateDict& named, comm::Communicator& comm, const DDPOptions& options)
      : comm_(comm), options_(options) {
    for (const auto& [name, p] : named)
      if (p.requires_grad()) {
        names_.push_back(name);
        params_.push_back(p);
      }
    std::vector<size_t> reverse(params_.size());
    std::iota(reverse.rbegin(), reverse.rend(), size_t{0});
    build(reverse);
  }

  // Registered once, after construction (a hook holds a weak reference: a hook of a destroyed
  // DDP does nothing).
  void register_hooks() {
    std::weak_ptr<Reducer> self = shared_from_this();
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].register_grad_ready_hook([self, i](const Tensor&) {
        if (auto r = self.lock()) r->on_ready(i);
      });
  }

  bool sync = true;
  std::function<void()> backward_end_hook;  // DistributedDataParallel::set_backward_end_hook

  std::vector<std::vector<size_t>> bucket_indices() const {
    std::vector<std::vector<size_t>> out;
    for (const Bucket& b : buckets_) out.push_back(b.params);
    return out;
  }
  Tensor buffer(size_t b) const {
    TANDEM_CHECK(b < buckets_.size(), "bucket_buffer: bucket ", b, " of ", buckets_.size());
    return buckets_[b].buffer;
  }
  // On GPUs a pass ends with the compute stream, not the host, waiting for the allreduces: their
  // completion times are waited for here, when someone asks.
  const ReductionTimes& times() const {
    for (size_t b = 0; b < pass_works_.size(); ++b) {
      pass_works_[b].wait();
      times_.buckets[b].done = pass_works_[b].completed_at();
      times_.buckets[b].work = pass_works_[b];
    }
    pass_works_.clear();
    if (device_times_pending_) {  // the events, waited for once the backward's work is done
      device_times_pending_ = false;
      for (size_t k = 0; k < times_.ready.size(); ++k)
        times_.ready[k].device_slack_s = std::max(0.0, end_event_->seconds_since(ready_events_[k]));
    }
    return times_;
  }
  double cap_mb() const { return options_.bucket_cap_mb_; }
  void set_link(double latency_s, double bandwidth) {
    link_latency_s_ = latency_s;
    link_bandwidth_ = bandwidth;
  }

 private:
  struct Bucket {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;  // element offset of each parameter in the buffer
    Tensor buffer;                 // flat; its slices are the parameters' gradients
    Tensor wire;                   // the compressed copy on the wire (compression only)
    int pending = 0;               // gradients not ready yet in this backward
    comm::Work work;
  };

  // Buckets in `order`, each parameter's gradient a view into its bucket; gradients the
  // parameters hold now are carried over.
  void build(const std::vector<size_t>& order) {
    const auto mib = [](double m) { return static_cast<int64_t>(m * 1024 * 1024); };
    auto assignment = assign_buckets(params_, order, mib(options_.first_bucket_mb_),
                                     mib(options_.bucket_cap_mb_));
    std::vector<Bucket> buckets(assignment.size());
    bucket_of_.assign(params_.size(), 0);
    for (size_t b = 0; b < assignment.size(); ++b) {
      Bucket& bucket = buckets[b];
      bucket.params = std::move(assignment[b]);
      int64_t total = 0;
      for (size_t i : bucket.params) {
        bucket.offsets.push_back(total);
        total += params_[i].numel();
        bucket_of_[i] = b;
      }
      const Tensor& first = params_[bucket.params[0]];
      bucket.buffer = zeros({total}, TensorOptions().dtype(first.dtype()).device(first.device()));
      for (size_t k = 0; k < bucket.params.size(); ++k) {
        Tensor& p = params_[bucket.params[k]];
        // Laid out as the parameter (torch's layout contract), so a channels-last gradient
        // lands in its slot as one dense copy.
        Tensor view = make_tensor(bucket.buffer.storage(), p.shape(),
                                  strides_of(p.shape(), p.suggest_memory_format()),
                                  bucket.buffer.storage_offset() + bucket.offsets[k], p.dtype());
        Tensor held = p.grad();
        if (held.defined()) view.copy_(held);
        p.set_grad_buffer(view);
        if (held.defined()) p.set_grad(view);
      }
    }
    buckets_ = std::move(buckets);
  }

  // A gradient-ready hook: parameter i's gradient for this backward is complete.
  void on_ready(size_t i) {
    if (!sync) return;
    if (!in_backward_) start_backward();
    TANDEM_CHECK(!ready_[i], "DistributedDataParallel: parameter '", names_[i],
                 "' became ready twice in one backward");
    ready_[i] = true;
    times_.ready.push_back({i, params_[i].numel() * static_cast<int64_t>(element_size(params_[i].dtype())),
                            comm::Clock::now()});
    if (timing_on_device_) {
      const size_t k = times_.ready.size() - 1;
      if (k == ready_events_.size()) ready_events_.emplace_back(comm_.device().index());
      ready_events_[k].record();
    }
    if (!rebuilt_) ready_order_.push_back(i);
    if (--buckets_[bucket_of_[i]].pending == 0) launch_ready();
  }

  void start_backward() {
    // First, before this pass changes any state: the last pass's allreduces ended long ago on
    // the device (its optimizer ran after them), so waiting for them costs nothing and throws an
    // error one of them met after the compute stream was ordered behind it.
    times();
    if (unfinished_) abandon_failed_backward();
    in_backward_ = unfinished_ = true;
    ready_.assign(params_.size(), false);
    for (Bucket& b : buckets_) b.pending = static_cast<int>(b.params.size());
    next_launch_ = 0;
    times_ = ReductionTimes();
    // Events on the device's compute stream: when a gradient is ready there, not when the host
    // queued its kernels (a GPU profile's overlap; the auto cap's first backward).
    timing_on_device_ = comm_.device().is_cuda() &&
                        (options_.time_on_device_ || (options_.bucket_cap_chooser_ && !rebuilt_));
    device_times_pending_ = false;
    times_.buckets.resize(buckets_.size());
    times_.ready.reserve(params_.size());
    // A failed pass drops its callbacks unrun: its allreduces in flight are waited for at once
    // (they write into the gradients, which the caller may zero next), and the next hook
    // starts a new pass.
    struct PassEnd {
      std::weak_ptr<Reducer> reducer;
      bool ran = false;
      ~PassEnd() {
        auto r = reducer.lock();
        if (!r || ran) return;
        r->in_backward_ = false;
        try {
          r->abandon_failed_backward();
        } catch (...) {  // unwinding already: the next backward waits again and throws it
        }
      }
    };
    auto end = std::make_shared<PassEnd>();
    end->reducer = shared_from_this();
    autograd::queue_callback([end] {
      end->ran = true;
      if (auto r = end->reducer.lock()) r->finish_backward();
    });
  }

  // A backward that failed (an exception from a node, a hook or the unused-parameter check):
  // its launched allreduces are waited for (every rank that failed at the same point launched
  // the same ones; a rank left behind aborts the group through its timeout) and the pass is
  // forgotten. The gradients keep what the failed pass accumulated, as PyTorch's do: zero them
  // before the next step.
  void abandon_failed_backward() {
    for (size_t b = 0; b < next_launch_; ++b) {
      buckets_[b].work.wait();
      buckets_[b].wire = Tensor();
    }
    next_launch_ = 0;
    if (!rebuilt_) ready_order_.clear();
    unfinished_ = false;
  }

  // Launches every bucket whose turn has come: buckets go out in bucket order on every rank, so
  // a bucket that is ready early waits for the ones before it.
  void launch_ready() {
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
      Bucket& b = buckets_[next_launch_];
      auto& t = times_.buckets[next_launch_];
      t.launched = comm::Clock::now();
      if (options_.compression_ && *options_.compression_ != b.buffer.dtype()) {
        // As PyTorch's compression hooks: 16 bits on the wire (on nccl; see comm::Accumulate).
        b.wire = (b.buffer / static_cast<double>(comm_.size())).to(*options_.compression_);
        b.work = comm_.allreduce(b.wire, comm::ReduceOp::sum, comm::Accumulate::native);
      } else {
        b.wire = Tensor();
        b.work = comm_.allreduce(b.buffer, comm::ReduceOp::avg);
      }
      const Tensor& sent = b.wire.defined() ? b.wire : b.buffer;
      t.bytes = sent.numel() * element_size(sent.dtype());
      ++next_launch_;
    }
  }

  // The end-of-backward callback: unused parameters, then wait for every bucket.
  void finish_backward() {
    in_backward_ = false;
    times_.backward_end = comm::Clock::now();
    if (timing_on_device_) {
      if (!end_event_) end_event_.emplace(comm_.device().index());
      end_event_->record();
      device_times_pending_ = true;
    }
    std::vector<size_t> unused;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) unused.push_back(i);
    // With find_unused_parameters, which parameters any rank used (torch's local_used_map,
    // allreduced by every rank after its buckets, unused parameters or not): a parameter no rank
    // used keeps no gradient, as PyTorch's reducer leaves it, so an optimizer skips it.
    Tensor used;
    comm::Work used_work;
    if (options_.find_unused_parameters_ && comm_.size() > 1) {
      std::vector<float> mine(params_.size());
      for (size_t i = 0; i < params_.size(); ++i) mine[i] = ready_[i] ? 1.0f : 0.0f;
      used = from_vector<float>(mine).to(comm_.device());
    }
    std::vector<size_t> without_grad;  // unused here, and no gradient held before
    if (!unused.empty()) {
      if (!options_.find_unused_parameters_) {
        abandon_failed_backward();
        std::ostringstream os;
        for (size_t k = 0; k < unused.size() && k < 10; ++k) os << (k ? ", " : "") << names_[unused[k]];
        if (unused.size() > 10) os << " and " << unused.size() - 10 << " more";
        TANDEM_THROW(Error, "DistributedDataParallel: rank ", comm_.rank(), ": ", unused.size(),
                     " parameter(s) got no gradient in this backward: ", os.str(),
                     ". Every parameter must take part in the loss, or construct with "
                     "DDPOptions().find_unused_parameters(true)");
      }
      // An unused parameter's slot takes what its gradient holds (sums of no_sync passes, or of
      // an earlier backward of this step), zeros when it has none, as PyTorch's reducer.
      for (size_t i : unused) {
        Tensor& p = params_[i];
        const Tensor held = p.grad();
        Tensor slot = p.grad_buffer();
        if (!held.defined()) {
          slot.zero_();
          without_grad.push_back(i);
        } else if (!held.is_same(slot))
          slot.copy_(held);
        p.set_grad(slot);
        ready_[i] = true;
        --buckets_[bucket_of_[i]].pending;
      }
      launch_ready();
    }
    if (used.defined()) used_work = comm_.allreduce(used, comm::ReduceOp::max);
    if (backward_end_hook) backward_end_hook();
    // The optimizer's kernels must come after the allreduces, the host need not: on GPUs the
    // compute stream waits for each bucket (CPU ranks: the host waits).
    for (Bucket& b : buckets_) {
      b.work.wait_on_stream();
      if (b.wire.defined()) b.buffer.copy_(b.wire);
      b.wire = Tensor();
      pass_works_.push_back(b.work);
    }
    std::vector<float> any_used;  // empty at world 1: this rank's use is everyone's
    if (used.defined()) {
      used_work.wait();
      any_used = used.cpu().to_vector<float>();
    }
    for (size_t i : without_grad)
      if (any_used.empty() || any_used[i] == 0.0f) params_[i].set_grad(Tensor());
    unfinished_ = false;
    if (!rebuilt_) rebuild();
  }

  // Once, after the first reduced backward: buckets in the order gradients became ready on rank
  // 0 (broadcast, so every rank builds the same buckets), unused parameters last; with a bucket
  // cap chooser, rank 0's choice goes along (the last element, in bytes).
  void rebuild() {
    rebuilt_ = true;
    std::vector<int64_t> order(params_.size() + 1, 0);
    std::vector<bool> seen(params_.size(), false);
    size_t n = 0;
    for (size_t i : ready_order_) {
      order[n++] = static_cast<int64_t>(i);
      seen[i] = true;
    }
    for (size_t i = params_.size(); i-- > 0;)
      if (!seen[i]) order[n++] = static_cast<int64_t>(i);
    if (options_.bucket_cap_chooser_ && comm_.rank() == 0) {
      const double mb = options_.bucket_cap_chooser_(times(), comm_.size(), link_latency_s_,
                                                     link_bandwidth_);
      TANDEM_CHECK_T(ValueError, valid_cap(mb),
                     "DistributedDataParallel: the bucket cap chooser "
                     "gave ",
                     mb, " MiB (a cap is in (0, ", static_cast<int64_t>(kMaxBucketMb), "] MiB)");
      order.back() = static_cast<int64_t>(mb * 1024 * 1024);
    }
    Tensor t = from_vector(order).to(comm_.device());
    comm_.broadcast(t, 0).wait();
    const std::vector<int64_t> got = t.to_vector<int64_t>();
    if (got.back() > 0) options_.bucket_cap_mb_ = static_cast<double>(got.back()) / (1024 * 1024);
    std::vector<size_t> agreed;
    for (size_t k = 0; k < params_.size(); ++k) agreed.push_back(static_cast<size_t>(got[k]));
    build(agreed);
    ready_order_.clear();
  }

  comm::Communicator& comm_;
  DDPOptions options_;
  std::vector<std::string> names_;
  std::vector<Tensor> params_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> ready_;
  size_t next_launch_ = 0;
  double link_latency_s_ = 0, link_bandwidth_ = 0;  // the communicator's, measured (chooser)
  bool in_backward_ = false;  // this backward's hooks are arriving
  bool unfinished_ = false;   // a pass started and its buckets were not all waited for
  bool rebuilt_ = false;
  std::vector<size_t> ready_order_;
  mutable ReductionTimes times_;
  mutable std::vector<comm::Work> pass_works_;  // the last pass's, until times() reads them
  bool timing_on_device_ = false;
  std::vector<cuda::Event> ready_events_;  // the k-th ready gradient's, reused pass to pass
  std::optional<cuda::Event> end_event_;
  mutable bool device_times_pending_ = false;  // recorded, not yet read into times_
};

}  // namespace detail

namespace {

// Broadcasts `tensors` from rank 0 in one collective per (dtype, device) and 256 MiB: each group
// packed into one flat tensor, unpacked after (a ResNet-50's buffers are 160 tensors: 160
// collectives, each with its own launch and wait, became two; the cap bounds the packed copies of
// a large model's parameters, as torch's). On GPUs the compute stream, not the host, waits.
void broadcast_coalesced(comm::Communicator& comm, const std::vector<Tensor>& tensors) {
  if (comm.size() == 1) return;
  constexpr int64_t kCapBytes = int64_t{256} << 20;
  NoGradGuard no_grad;
  std::vector<std::vector<Tensor>> groups;
  std::vector<int64_t> bytes;
  for (const Tensor& t : tensors) {
    const int64_t size = t.numel() * static_cast<int64_t>(t.element_size());
    size_t g = 0;
    while (g < groups.size() && (groups[g].front().dtype() != t.dtype() ||
                                 groups[g].front().device() != t.device() ||
                                 bytes[g] + size > kCapBytes))
      ++g;
    if (g == groups.size()) {
      groups.emplace_back();
      bytes.push_back(0);
    }
    groups[g].push_back(t);
    bytes[g] += size;
  }
  std::vector<Tensor> flats;
  std::vector<comm::Work> works;
  for (const auto& group : groups) {
    std::vector<Tensor> parts;
    for (const Tensor& t : group) parts.push_back(t.reshape({t.numel()}));
    flats.push_back(cat(parts));
    works.push_back(comm.broadcast(flats.back(), 0));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    works[g].wait_on_stream();
    int64_t offset = 0;
    for (Tensor t : groups[g]) {  // a handle: the buffer's data is written
      t.copy_(flats[g].narrow(0, offset, t.numel()).reshape(t.shape()));
      offset += t.numel();
    }
  }
}

// FNV-1a: the same on every process of a job, unlike std::hash.
int64_t fingerprint(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

// The layout is part of it: a gradient bucket's slot lies as its parameter, so ranks whose
// parameters' bytes lie differently would add up different elements (where size-1 dims make
// both layouts the same bytes, they agree whatever their strides say).
std::string describe(const std::string& kind, const std::string& name, const Tensor& t) {
  const bool nhwc_bytes = t.is_contiguous(MemoryFormat::ChannelsLast) && !t.is_contiguous();
  return kind + " '" + name + "' " + shape_str(t.shape()) + " " + dtype_name(t.dtype()) +
         (nhwc_bytes ? " channels-last" : "");
}

// The communicator's allreduce as the ring model sees it (2 (N - 1) latency + 2 (N - 1) / N x
// bytes / bus bandwidth): the median of a few allreduces of 1 Ki and 1 Mi gradients, every
// rank, sent as the buckets are (`compression`: 16 bits on the wire where the backend has one).
// The bandwidth counts f32 gradient bytes, as the predictor does, whatever crossed the wire.
std::pair<double, double> measure_link(comm::Communicator& comm,
                                       std::optional<DType> compression) {
  const int n = comm.size();
  const auto acc = compression ? comm::Accumulate::native : comm::Accumulate::f32;
  auto median_seconds = [&](int64_t elements) {
    Tensor t = zeros({elements}, TensorOptions(compression.value_or(DType::f32)).device(comm.device()));
    comm.allreduce(t, comm::ReduceOp::sum, acc).wait();  // warm-up
    std::vector<double> s;
    for (int k = 0; k < 5; ++k) {
      const auto t0 = comm::Clock::now();
      comm.allreduce(t, comm::ReduceOp::sum, acc).wait();
      s.push_back(std::chrono::duration<double>(comm::Clock::now() - t0).count());
    }
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  };
  const int64_t small = 1024, large = 1024 * 1024;  // f32 elements
  const double ts = median_seconds(small), tl = median_seconds(large);
  const double steps = 2.0 * (n - 1);
  const double latency = ts / steps;
  const double bandwidth = steps / n * 4.0 * static_cast<double>(large - small) / std::max(tl - ts, 1e-9);
  return {latency, bandwidth};
}

// Every rank gets the same verdict: the first rank and entry that differ from rank 0's.
void check_same_model(comm::Communicator& comm, const std::vector<std::string>& entries) {
  const int world = comm.size();
  const TensorOptions on_comm = TensorOptions(DType::i64).device(comm.device());
  Tensor count = from_vector(std::vector<int64_t>{static_cast<int64_t>(entries.size())}).to(comm.device());
  Tensor counts = zeros({world}, on_comm);
  comm.allgather(counts, count).wait();
  const auto n = counts.to_vector<int64_t>();
  for (int r = 1; r < world; ++r)
    TANDEM_CHECK_T(ValueError, n[r] == n[0], "DistributedDataParallel: rank ", r, " has ", n[r],
                   " parameters and buffers, rank 0 has ", n[0], " (this is rank ", comm.rank(),
                   ")");
  std::vector<int64_t> mine;
  for (const auto& e : entries) mine.push_back(fingerprint(e));
  Tensor all = zeros({world * n[0]}, on_comm);
  if (n[0] > 0) comm.allgather(all, from_vector(mine).to(comm.device())).wait();
  const auto h = all.to_vector<int64_t>();
  for (int64_t k = 0; k < n[0]; ++k)
    for (int r = 1; r < world; ++r)
      TANDEM_CHECK_T(ValueError, h[r * n[0] + k] == h[k], "DistributedDataParallel: entry ", k,
                     " differs between rank 0 and rank ", r, "; on this rank (", comm.rank(),
                     ") it is ", entries[k], ". Every rank must build the same model: the same "
                     "parameter and buffer names, shapes, dtypes and layouts (channels-last)");
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 comm::Communicator& comm, DDPOptions options)
    : nn::Module("DistributedDataParallel"), module_(std::move(module)), comm_(comm),
      options_(options) {
  TANDEM_CHECK_T(ValueError, module_ != nullptr, "DistributedDataParallel: no module");
  TANDEM_CHECK_T(
      ValueError, valid_cap(options.bucket_cap_mb_) && valid_cap(options.first_bucket_mb_),
      "DistributedDataParallel: bucket caps must be in (0, ", static_cast<int64_t>(kMaxBucketMb),
      "] MiB, got ", options.bucket_cap_mb_, " and ", options.first_bucket_mb_, " MiB");
  if (options.compression_)
    TANDEM_CHECK_T(ValueError,
                   *options.compression_ == DType::f16 || *options.compression_ == DType::bf16,
                   "DistributedDataParallel: compression must be f16 or bf16, got ",
                   dtype_name(*options.compression_));
  register_module("module", module_);
  const auto params = module_->named_parameters();
  const auto buffers = module_->named_buffers();
  std::vector<std::string> entries;
  for (const auto& [name, p] : params) {
    TANDEM_CHECK_T(ValueError, p.device() == comm.device(), "DistributedDataParallel: parameter '",
                   name, "' is on ", p.device(), " but rank ", comm.rank(), "'s device is ",
                   comm.device());
    entries.push_back(describe("parameter", name, p));
  }
  for (const auto& [name, b] : buffers) entries.push_back(describe("buffer", name, b));
  check_same_model(comm, entries);
  // Rank 0's values everywhere, packed (any layout; broadcast_coalesced's groups).
  std::vector<Tensor> states;
  for (const auto& entry : params) states.push_back(entry.second);
  for (const auto& entry : buffers) states.push_back(entry.second);
  broadcast_coalesced(comm, states);
  reducer_ = std::make_shared<detail::Reducer>(params, comm, options);
  reducer_->register_hooks();
  if (options.bucket_cap_chooser_ && comm.size() > 1) {
    const auto [latency, bandwidth] = measure_link(comm, options.compression_);
    reducer_->set_link(latency, bandwidth);
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::prepare_forward() {
  // torch's rule: this forward syncs the buffers when the one before it ran with grad mode on
  // and gradients synchronized (not under no_sync), whether training or evaluating.
  const bool sync = require_forward_param_sync_;
  require_forward_param_sync_ = grad_mode_enabled() && reducer_->sync;
  if (!sync || !options_.broadcast_buffers_ || comm_.size() == 1) return;
  broadcast_coalesced(comm_, module_->buffers());
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  prepare_forward();
  return module_->forward(input);
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.reducer_->sync) {
  ddp.reducer_->sync = false;
}
DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.reducer_->sync = previous_; }

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_indices() const {
  return reducer_->bucket_indices();
}
Tensor DistributedDataParallel::bucket_buffer(size_t b) const { return reducer_->buffer(b); }
const ReductionTimes& DistributedDataParallel::last_reduction() const { return reducer_->times(); }
double DistributedDataParallel::bucket_cap_mb() const { return reducer_->cap_mb(); }
void DistributedDataParallel::set_backward_end_hook(std::function<void()> hook) {
  reducer_->backward_end_hook = std::move(hook);
}

}  // namespace tandem::parallel
