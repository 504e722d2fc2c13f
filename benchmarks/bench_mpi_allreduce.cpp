// The peer of bench_allreduce: Open MPI's own MPI_Allreduce (in place, f32, sum) over the same
// message sizes, run under mpirun. Rank 0 prints one JSON object with the median time per size.
// Usage: mpirun -np 2 bench_mpi_allreduce [max_mib] [iters]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const long long max_bytes = (argc > 1 ? std::atoll(argv[1]) : 256) << 20;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20;
  std::string rows;
  for (long long bytes = 8; bytes <= max_bytes; bytes *= 2) {
    const int n = static_cast<int>(bytes / 4);
    std::vector<float> buf(n, 1.0f);
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);  // warm-up
    const int reps = bytes >= (64ll << 20) ? std::max(5, iters / 4) : iters;
    std::vector<double> times;
    for (int i = 0; i < reps; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times.push_back(MPI_Wtime() - t0);
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    char row[160];
    std::snprintf(row, sizeof row, "%s{\"bytes\": %lld, \"time_us\": %.3f, \"algbw_gbps\": %.4f}",
                  rows.empty() ? "" : ", ", bytes, t * 1e6, bytes / t / 1e9);
    rows += row;
  }
  if (rank == 0)
    std::printf("{\"backend\": \"openmpi\", \"world\": %d, \"sizes\": [%s]}\n", world,
                rows.c_str());
  MPI_Finalize();
  return 0;
}
