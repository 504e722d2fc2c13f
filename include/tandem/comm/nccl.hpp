// The nccl backend: one communicator per GPU, collectives on CUDA tensors enqueued on a
// communication stream of each rank's GPU. Built with the CUDA backend; without it the factories
// throw and everything else builds.
//
// Every communicator is created non-blocking (ncclConfig_t::blocking = 0), so no NCCL call can
// block its caller: a watchdog thread per communicator polls the collectives' completion events
// and ncclCommGetAsyncError against the timeout, and on a failure, a timeout or an abort it calls
// ncclCommAbort (never ncclCommDestroy on a broken communicator) and fails every pending and
// later call with a CommError. A Work completes when its collective has finished on the GPU.
#pragma once

#include <memory>
#include <vector>

#include "tandem/comm/communicator.hpp"
#include "tandem/core/arg.hpp"

namespace tandem::comm {

/// True when this build has the nccl backend (the CUDA backend with NCCL).
bool nccl_compiled();

struct NcclOptions {
  TANDEM_ARG(Duration, timeout) = default_timeout();
  TANDEM_ARG(bool, debug) = debug_mode_from_env();
  TANDEM_ARG(int, device) = -1;  // make_nccl_communicator: the GPU; -1 = the launcher's local rank
};

/// All ranks in this process: rank r drives GPU devices[r] (meant for one thread per rank, e.g.
/// through run_group). The communicators are created together (one unique id, one NCCL group
/// call: what ncclCommInitAll does, with the non-blocking config). Two ranks on one GPU are
/// refused: NCCL forbids it. A rank whose communicator is destroyed while the others still call
/// collectives aborts the group ("rank r exited"), like the local backend.
std::vector<std::shared_ptr<Communicator>> make_nccl_group(const std::vector<int>& devices,
                                                           NcclOptions options = {});

/// This process's rank of a job started by mpirun (or another launcher MPI understands): the GPU
/// is the launcher's local rank (never rank % device count) unless options.device says
/// otherwise, and the unique id travels over the mpi backend. Before NCCL is touched, every rank
/// checks it has its own GPU; when any rank has none, or two ranks share one, every rank throws
/// the same error naming them.
std::shared_ptr<Communicator> make_nccl_communicator(NcclOptions options = {});

}  // namespace tandem::comm
