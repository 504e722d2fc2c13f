#include "tandem/parallel/launch.hpp"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "tandem/comm/local.hpp"
#include "tandem/comm/mpi.hpp"
#include "tandem/comm/nccl.hpp"
#include "tandem/core/context.hpp"
#include "tandem/core/thread_pool.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem::parallel {

uint64_t rank_seed(uint64_t seed, int rank) {
  // Philox keys that differ in many bits: the golden-ratio increment of splitmix64.
  return seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank);
}

Devices Devices::cpu(int ranks) {
  TANDEM_CHECK_T(ValueError, ranks >= 1, "launch: the number of CPU ranks must be >= 1, got ",
                 ranks);
  return Devices(std::vector<Device>(ranks, kCPU));
}

Devices Devices::all() {
  const int gpus = cuda::device_count();
  if (gpus == 0) return cpu(1);
  std::vector<Device> devices;
  for (int i = 0; i < gpus; ++i) devices.emplace_back(DeviceType::cuda, i);
  return Devices(std::move(devices));
}

Devices::Devices(std::vector<Device> devices) : devices_(std::move(devices)) {
  TANDEM_CHECK_T(ValueError, !devices_.empty(), "launch: no devices to run on");
  const bool cpu = devices_.front().is_cpu();
  for (const Device& d : devices_)
    TANDEM_CHECK_T(ValueError, d.is_cpu() == cpu,
                   "launch: the ranks must be all CPU or all GPUs, got ", devices_.front(),
                   " and ", d);
}

namespace {

// Runs fn for one rank under its own generator; a failure becomes a RankError naming the rank,
// and a return leaves the group (Communicator::leave).
void run_rank(comm::Communicator& c, const std::function<void(Rank&)>& fn, uint64_t seed) {
  Generator generator(rank_seed(seed, c.rank()));
  Rank rank{c, generator};
  try {
    fn(rank);
    c.leave();  // the ranks still calling collectives fail at once, not at the timeout
  } catch (const RankError&) {
    throw;
  } catch (const std::exception& e) {
    throw RankError(c.rank(), "rank " + std::to_string(c.rank()) + " of " +
                                  std::to_string(c.size()) + " failed: " + e.what(),
                    std::current_exception());
  }
}

}  // namespace

void launch(const Devices& devices, const std::function<void(Rank&)>& fn, LaunchOptions options) {
  TANDEM_CHECK_T(ValueError, options.threads_ >= 0, "launch: threads must be >= 0, got ",
                 options.threads_);
  const auto& list = devices.list();
  const int world = static_cast<int>(list.size());
  std::vector<std::shared_ptr<comm::Communicator>> comms;
  if (list.front().is_cpu()) {
    comms = comm::make_local_group(world, comm::LocalOptions().timeout(options.timeout_));
  } else {
    std::vector<int> ids;
    for (const Device& d : list) ids.push_back(d.index());
    comms = comm::make_nccl_group(ids, comm::NcclOptions().timeout(options.timeout_));
  }
  const int total = options.threads_ > 0 ? options.threads_ : default_num_threads();
  comm::run_group(
      comms, [&](comm::Communicator& c) { run_rank(c, fn, options.seed_); },
      comm::GroupOptions().threads_per_rank(std::max(1, total / world)));
}

void launch(int cpu_ranks, const std::function<void(Rank&)>& fn, LaunchOptions options) {
  launch(Devices::cpu(cpu_ranks), fn, options);
}

void launch_env(const std::function<void(Rank&)>& fn, LaunchOptions options) {
  const auto env = comm::launch_env();
  if (!env) return launch(Devices::all(), fn, options);
  // One rank per process: its share of the node's cores among the launcher's local processes.
  int local = 1;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE"})
    if (const char* v = std::getenv(name); v && std::atoi(v) > 0) {
      local = std::atoi(v);
      break;
    }
  const int total = options.threads_ > 0 ? options.threads_ : default_num_threads();
  std::shared_ptr<comm::Communicator> c =
      cuda::device_count() > 0
          ? comm::make_nccl_communicator(comm::NcclOptions().timeout(options.timeout_))
          : comm::make_mpi_communicator(comm::MpiOptions().timeout(options.timeout_));
  ExecutionContext context(c->device(), std::make_shared<ThreadPool>(std::max(1, total / local)));
  ContextGuard guard(context);
  try {
    if (c->device().is_cuda()) cuda::set_device(c->device().index());  // once, for every op
    run_rank(*c, fn, options.seed_);
  } catch (...) {
    if (!c->is_aborted()) c->abort("rank " + std::to_string(c->rank()) + " failed");
    throw;
  }
}

}  // namespace tandem::parallel
