// DistributedDataParallel: wraps a model so that every rank trains the same replica on its own
// part of the batch. After construction every rank holds rank 0's parameters and buffers; during
// backward each parameter's gradient lands in a slice of a flat bucket, and a bucket's allreduce
// starts as soon as its last gradient is ready, hidden behind the rest of backward; backward()
// returns with every gradient averaged over the ranks, the same bits on every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/comm/communicator.hpp"
#include "tandem/core/arg.hpp"
#include "tandem/nn/module.hpp"

namespace tandem::parallel {

struct ReductionTimes;
/// Picks the bucket cap (MiB) from the first reduced backward's gradient-ready times and the
/// communicator's measured allreduce latency (seconds per ring step) and bus bandwidth
/// (bytes/s) at `world` ranks. monitor::auto_bucket_cap() is the predictor's.
using BucketCapChooser = std::function<double(const ReductionTimes& first_backward, int world,
                                              double latency_s, double bus_bandwidth)>;

/// The largest bucket cap taken, MiB: 1 TiB, past every model's gradients (one bucket); a cap
/// must be finite, as it becomes a count of bytes.
inline constexpr double kMaxBucketMb = 1 << 20;

struct DDPOptions {
  /// Buckets close once they hold this many MiB of gradients (PyTorch's bucket_cap_mb).
  TANDEM_ARG(double, bucket_cap_mb) = 25.0;
  /// The first bucket (the last layers' gradients, ready first) closes sooner, so communication
  /// starts early.
  TANDEM_ARG(double, first_bucket_mb) = 1.0;
  /// Parameters that get no gradient in a backward are reduced as zeros instead of an error; one
  /// that no rank used keeps no gradient (as torch's reducer).
  TANDEM_ARG(bool, find_unused_parameters) = false;
  /// A forward first copies rank 0's buffers (batch-norm running statistics) to all when the
  /// forward before it ran with grad mode on outside no_sync (and the first forward), as
  /// torch's DDP: so an evaluation after training sees rank 0's statistics on every rank.
  TANDEM_ARG(bool, broadcast_buffers) = true;
  /// Allreduce gradients in f16 or bf16 (each rank divides by the world size first, so sums do
  /// not overflow; results are widened back). nullopt: in the gradients' own dtype.
  TANDEM_ARG(std::optional<DType>, compression) = std::nullopt;
  /// Set: the bucket cap is chosen after the first backward, when the buckets are rebuilt in
  /// ready order (rank 0 chooses, every rank takes its answer), instead of bucket_cap_mb.
  TANDEM_ARG(BucketCapChooser, bucket_cap_chooser) = nullptr;
  /// On a GPU, also time when each gradient is ready on the device (a CUDA event per parameter
  /// per backward on the compute stream): ReductionTimes::Ready::device_slack_s, what a GPU
  /// profile's overlap needs (the host queues a backward's kernels ahead of the device). Always
  /// on for the first backward when a bucket_cap_chooser is set.
  TANDEM_ARG(bool, time_on_device) = false;
};

/// Which parameters go in which bucket: `order` lists parameter indices in the order their
/// gradients are expected to become ready; each dtype fills its own buckets in that order, a bucket
/// closing once it holds >= `first_cap_bytes` (the first bucket closed) or `cap_bytes` (the rest).
/// Buckets come back ordered by their first parameter's place in `order`.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<Tensor>& params,
                                                const std::vector<size_t>& order,
                                                int64_t first_cap_bytes, int64_t cap_bytes);

/// When each bucket of the last reduced backward was launched and when the communicator completed
/// it, when each parameter's gradient became ready (in that order), and when backward's last op
/// ended: for tests, timelines and the scaling predictor's profile (monitor/predictor.hpp).
struct ReductionTimes {
  struct Bucket {
    int64_t bytes = 0;
    comm::Clock::time_point launched, done;
    comm::Work work;  // its allreduce: where it ran on a GPU (Work::device_span)
  };
  struct Ready {
    size_t param = 0;
    int64_t bytes = 0;
    comm::Clock::time_point at;
    /// On a GPU timed there (DDPOptions::time_on_device): seconds from this gradient being ready
    /// on the device to the backward's last kernel; else -1.
    double device_slack_s = -1;
  };
  comm::Clock::time_point backward_end;
  std::vector<Bucket> buckets;
  std::vector<Ready> ready;
};

/// A function that is true on every rank when `flag` is true on any (one allreduce of one
/// element): what amp::GradScaler::set_sync takes, so an inf on one rank skips the step on all.
std::function<bool(bool)> any_rank(comm::Communicator& comm);

/// SyncBatchNorm: makes every BatchNorm2d of `module` compute its training statistics (and
/// their gradients) over all ranks of `comm`, as PyTorch's convert_sync_batchnorm. Returns how
/// many it converted. `comm` must outlive the module's use of it.
int convert_sync_batchnorm(nn::Module& module, comm::Communicator& comm);

namespace detail {
class Reducer;
}

class DistributedDataParallel : public nn::Module {
 public:
  /// Checks on every rank that parameter and buffer names, shapes and dtypes agree (a ValueError
  /// naming the first difference and the rank), then copies rank 0's parameters and buffers to
  /// every rank. `comm` must outlive this object; `module` is registered as child "module", so
  /// state_dict() keys read "module.<name>", as PyTorch's.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, comm::Communicator& comm,
                          DDPOptions options = {});
  ~DistributedDataParallel() override;

  /// prepare_forward(), then the module's forward.
  Tensor forward(const Tensor& input) override;
  /// What forward does before running the module (broadcast_buffers), for modules whose forward
  /// takes other arguments: call it, then run the module yourself.
  void prepare_forward();

  const std::shared_ptr<nn::Module>& module() const { return module_; }
  comm::Communicator& communicator() const { return comm_; }

  /// Gradient accumulation: while the guard lives, backward only accumulates into the local
  /// gradients; the first backward after it reduces the accumulated sums.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// Parameter indices (into module()->parameters()) of each bucket, in reduction order.
  std::vector<std::vector<size_t>> bucket_indices() const;
  /// The flat buffer of bucket b, whose slices are the gradients.
  Tensor bucket_buffer(size_t b) const;
  /// The last reduced backward's times. On GPUs that backward ended with the compute stream
  /// waiting for the allreduces, not the host: reading this waits (host) for them to complete
  /// and throws the error of one that failed after that (the next backward does the same).
  const ReductionTimes& last_reduction() const;
  /// Waits on the host for the last backward's allreduces and throws the error of one that
  /// failed: call it before saving a checkpoint or exiting after the last step on GPUs.
  void synchronize() const { last_reduction(); }
  /// The bucket cap in use (the chooser's answer once the buckets were rebuilt).
  double bucket_cap_mb() const;
  /// Called at the end of each reduced backward, once its work is queued and every bucket's
  /// allreduce launched, just before the compute stream (GPUs) or the host (CPU ranks) is made
  /// to wait for them: where the exposed communication starts (monitor::StepTimer marks it
  /// there). An empty function removes it.
  void set_backward_end_hook(std::function<void()> hook);

 private:
  std::shared_ptr<nn::Module> module_;
  comm::Communicator& comm_;
  DDPOptions options_;
  std::shared_ptr<detail::Reducer> reducer_;
  bool require_forward_param_sync_ = true;  // torch's flag of the same name
};

}  // namespace tandem::parallel
