// The mpi backend (Open MPI from Debian: libopenmpi-dev, openmpi-bin): CPU tensors across
// processes and nodes, and later the bootstrap that hands NCCL its unique id. Optional at build
// time (TANDEM_WITH_MPI); without it, make_mpi_communicator throws and everything else builds.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "tandem/comm/communicator.hpp"
#include "tandem/core/arg.hpp"

namespace tandem::comm {

/// Where a process sits in a job, from its launcher's environment.
struct LaunchEnv {
  int rank = 0, world = 1, local_rank = 0;
  std::string source;  // "torchrun", "openmpi" or "slurm"
};

/// The first complete set among torchrun's RANK / WORLD_SIZE / LOCAL_RANK, Open MPI's
/// OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK and SLURM's SLURM_PROCID / SLURM_NTASKS /
/// SLURM_LOCALID; nullopt when none is set. Never derived from rank % device count. A malformed
/// or inconsistent value (rank >= world) throws a ValueError naming the variable.
std::optional<LaunchEnv> launch_env();

/// True when this build has the mpi backend.
bool mpi_compiled();

struct MpiOptions {
  TANDEM_ARG(Duration, timeout) = default_timeout();
  TANDEM_ARG(bool, debug) = debug_mode_from_env();
};

/// Initializes MPI once per process (thread level SERIALIZED: only the communicator's progress
/// thread calls MPI) and returns this process's communicator over MPI_COMM_WORLD. Collectives run
/// as nonblocking MPI calls polled against the timeout. A timed-out or aborted communicator fails
/// every later call at once; the other processes learn of a failure through their own timeout
/// (Open MPI 4 offers no other notice short of MPI_Abort, which kills the job).
std::shared_ptr<Communicator> make_mpi_communicator(MpiOptions options = {});

}  // namespace tandem::comm
