// launch: one rank per device (N CPU ranks, or GPUs), each on its own thread with its own
// execution context, communicator and random stream; and launch_env, the same under mpirun,
// srun or a torchrun-style launcher, one rank per process.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "tandem/comm/communicator.hpp"
#include "tandem/core/arg.hpp"
#include "tandem/core/device.hpp"
#include "tandem/core/error.hpp"
#include "tandem/core/generator.hpp"

namespace tandem::parallel {

/// What a rank's function gets: its communicator, place in the job and random stream. The
/// execution context (device, CPU threads) is already current on the rank's thread.
struct Rank {
  comm::Communicator& comm;
  Generator& generator;  // seeded with rank_seed(options.seed, rank)
  int rank() const { return comm.rank(); }
  int world_size() const { return comm.size(); }
  int local_rank() const { return comm.local_rank(); }
  Device device() const { return comm.device(); }
};

/// The seed of rank r's generator: distinct per rank, the same for a rank run to run.
uint64_t rank_seed(uint64_t seed, int rank);

/// The ranks to run: N CPU ranks, a list of devices (one rank each), or every visible GPU.
class Devices {
 public:
  static Devices cpu(int ranks);
  /// Every visible GPU; when there is none, one CPU rank.
  static Devices all();
  explicit Devices(std::vector<Device> devices);
  const std::vector<Device>& list() const { return devices_; }

 private:
  std::vector<Device> devices_;
};

struct LaunchOptions {
  /// CPU threads of all ranks together, split equally (at least 1 each); 0: TANDEM_NUM_THREADS,
  /// else the hardware concurrency.
  TANDEM_ARG(int, threads) = 0;
  TANDEM_ARG(uint64_t, seed) = 0x5eed;
  TANDEM_ARG(comm::Duration, timeout) = comm::default_timeout();
};

/// A rank's function threw; launch rethrows this on the caller's thread. `original()` is what
/// the rank threw (rethrow it to catch it by type).
class RankError : public Error {
 public:
  RankError(int rank, const std::string& what, std::exception_ptr original)
      : Error(what, __FILE__, __LINE__), rank_(rank), original_(std::move(original)) {}
  int rank() const { return rank_; }
  const std::exception_ptr& original() const { return original_; }

 private:
  int rank_;
  std::exception_ptr original_;
};

/// Runs fn on one thread per rank and returns when all are done. CPU ranks talk through the local
/// backend, GPUs through nccl. An exception on any rank aborts the communicator (the other ranks'
/// collectives fail at once instead of waiting) and is rethrown here as a RankError naming the
/// rank that failed first.
void launch(const Devices& devices, const std::function<void(Rank&)>& fn,
            LaunchOptions options = {});
/// N CPU ranks.
void launch(int cpu_ranks, const std::function<void(Rank&)>& fn, LaunchOptions options = {});

/// Under a launcher (comm::launch_env() finds RANK/WORLD_SIZE, OMPI_COMM_WORLD_* or SLURM_*):
/// this process is one rank, fn runs on the calling thread over the mpi backend. Without a
/// launcher: launch(Devices::all(), fn). Errors are rethrown as by launch.
void launch_env(const std::function<void(Rank&)>& fn, LaunchOptions options = {});

}  // namespace tandem::parallel
