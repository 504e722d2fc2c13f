// The local backend: the ranks are threads of one process (one thread per GPU, or N CPU ranks),
// sharing memory. A reduction is a reduce-scatter then an allgather done in place: rank r reduces
// slice r of every rank's buffer, in rank order 0, 1, ..., N-1 (bitwise reproducible run to run),
// then every rank copies the other slices. No copies beyond that.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tandem/comm/communicator.hpp"
#include "tandem/core/arg.hpp"

namespace tandem::comm {

/// The local backend always checks that every rank calls the same collective (sequence number,
/// op, dtype, element counts): in shared memory the check is free, and reading another rank's
/// buffer with the wrong count would be unsafe. TANDEM_COMM_DEBUG matters to the other backends.
struct LocalOptions {
  TANDEM_ARG(Duration, timeout) = default_timeout();
};

/// A group of `world` ranks in this process; element r is rank r's communicator, meant to be
/// used from one thread. Destroying a communicator while the others still call collectives
/// aborts the group ("rank r exited").
std::vector<std::shared_ptr<Communicator>> make_local_group(int world, LocalOptions options = {});

/// Runs fn(rank's communicator) on `world` threads and joins them, each under its own execution
/// context as `run_group` sets it up (`group`: the threads of each rank's pool). An exception on
/// a rank aborts the group so that no other rank waits for it; the first exception thrown is
/// rethrown here. A rank whose function returns leaves the group (Communicator::leave): the
/// others' later collectives fail at once, naming it.
void run_local(int world, const std::function<void(Communicator&)>& fn, LocalOptions options = {},
               GroupOptions group = {});

}  // namespace tandem::comm
