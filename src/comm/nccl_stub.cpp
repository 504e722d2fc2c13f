// The nccl backend in a build without NCCL: without the CUDA backend, or with it emulated
// (tests/cuda_emu).
#include "tandem/comm/nccl.hpp"

namespace tandem::comm {
namespace {
[[noreturn]] void no_nccl(const char* who) {
  TANDEM_THROW(NotImplementedError, who,
               ": this tandem was built without NCCL (reconfigure with -DTANDEM_WITH_CUDA=ON on a "
               "machine with the CUDA toolkit, cuDNN and NCCL)");
}
}  // namespace

bool nccl_compiled() { return false; }

std::vector<std::shared_ptr<Communicator>> make_nccl_group(const std::vector<int>&, NcclOptions) {
  no_nccl("make_nccl_group");
}

std::shared_ptr<Communicator> make_nccl_communicator(NcclOptions) {
  no_nccl("make_nccl_communicator");
}

}  // namespace tandem::comm
