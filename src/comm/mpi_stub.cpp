// The mpi backend in a build without MPI.
#include "tandem/comm/mpi.hpp"

namespace tandem::comm {

bool mpi_compiled() { return false; }

std::shared_ptr<Communicator> make_mpi_communicator(MpiOptions) {
  TANDEM_THROW(NotImplementedError,
               "this tandem was built without MPI (install Debian's "
               "libopenmpi-dev and reconfigure with -DTANDEM_WITH_MPI=ON)");
}

}  // namespace tandem::comm
