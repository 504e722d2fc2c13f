#include <cstdlib>
#include <string>

#include "tandem/comm/mpi.hpp"

namespace tandem::comm {

namespace {

std::optional<int> int_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  TANDEM_CHECK(*end == '\0' && x >= 0 && x < (1L << 30), "launch environment: ", name, "='", v,
               "' is not a non-negative integer");
  return static_cast<int>(x);
}

}  // namespace

std::optional<LaunchEnv> launch_env() {
  struct Source {
    const char *name, *rank, *world, *local;
  };
  static const Source kSources[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
  for (const auto& s : kSources) {
    auto rank = int_env(s.rank), world = int_env(s.world), local = int_env(s.local);
    if (!rank || !world) continue;
    TANDEM_CHECK(*world >= 1 && *rank < *world, "launch environment (", s.name, "): ", s.rank, "=",
                 *rank, " is not below ", s.world, "=", *world);
    return LaunchEnv{*rank, *world, local.value_or(0), s.name};
  }
  return std::nullopt;
}

}  // namespace tandem::comm
