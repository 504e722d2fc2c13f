// The peer of bench_allreduce: Open MPI's own MPI_Allreduce (in place, f32, sum) over the same
// message sizes, run under mpirun. Rank 0 prints one JSON object with the median time per size.
// Usage: mpirun -np 2 bench_mpi_allreduce [max_mib] [iters]
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "guarded_main.hpp"
#include "peer_sweep.hpp"

static int run(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const long long max_bytes = (argc > 1 ? std::atoll(argv[1]) : 256) << 20;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20;
  // One buffer for every size, as the raw NCCL peer has; zeros, so that repeated sums stay finite.
  std::vector<float> buf(max_bytes / 4, 0.0f);
  const std::string rows = peer_sweep(max_bytes, iters, [&](long long bytes) {
    const int n = static_cast<int>(bytes / 4);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return MPI_Wtime() - t0;
  });
  if (rank == 0)
    std::printf("{\"backend\": \"openmpi\", \"world\": %d, \"sizes\": [%s]}\n", world,
                rows.c_str());
  MPI_Finalize();
  return 0;
}

int main(int argc, char** argv) {
  return bench::guarded_main("bench_mpi_allreduce", argc, argv, run);
}
