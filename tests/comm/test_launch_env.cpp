// Rank, world size and local rank come from the launcher's environment: torchrun, Open MPI or
// SLURM variables, in that order; malformed values are errors.
#include <cstdlib>
#include <map>

#include "../util.hpp"
#include "tandem/comm.hpp"

using namespace tandem;
using tandem::testing::error_of;

namespace {

const char* const kVars[] = {"RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "OMPI_COMM_WORLD_RANK",
                             "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK",
                             "SLURM_PROCID",
                             "SLURM_NTASKS",
                             "SLURM_LOCALID"};

// Sets exactly `vars` among the launcher variables for its lifetime, then restores them.
class EnvScope {
 public:
  explicit EnvScope(const std::map<std::string, std::string>& vars) {
    for (const char* v : kVars) {
      if (const char* old = std::getenv(v)) saved_[v] = old;
      unsetenv(v);
    }
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  }
  ~EnvScope() {
    for (const char* v : kVars) unsetenv(v);
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

}  // namespace

TEST_CASE("launch_env reads torchrun, Open MPI and SLURM variables", "[comm]") {
  {
    EnvScope env({});
    CHECK_FALSE(comm::launch_env().has_value());
  }
  {
    EnvScope env({{"RANK", "3"},
                  {"WORLD_SIZE", "8"},
                  {"LOCAL_RANK", "1"},
                  {"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "2"}});
    auto e = comm::launch_env();
    REQUIRE(e.has_value());
    CHECK(e->source == "torchrun");  // first complete set wins
    CHECK(e->rank == 3);
    CHECK(e->world == 8);
    CHECK(e->local_rank == 1);
  }
  {
    EnvScope env({{"OMPI_COMM_WORLD_RANK", "5"},
                  {"OMPI_COMM_WORLD_SIZE", "6"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}});
    auto e = comm::launch_env();
    REQUIRE(e.has_value());
    CHECK(e->source == "openmpi");
    CHECK(e->local_rank == 2);
  }
  {
    EnvScope env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}});
    CHECK(comm::launch_env()->source == "slurm");
  }
  {
    EnvScope env({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
    CHECK_THAT(error_of([] { comm::launch_env(); }),
               Catch::Contains("(torchrun): RANK=4 is not below WORLD_SIZE=4"));
  }
  {
    EnvScope env({{"RANK", "two"}, {"WORLD_SIZE", "4"}});
    CHECK_THAT(error_of([] { comm::launch_env(); }),
               Catch::Contains("RANK='two' is not a non-negative integer"));
  }
}
