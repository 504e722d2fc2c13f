// An allreduce sweep like nccl-tests' all_reduce_perf: message sizes 8 B ... 256 MiB of f32, the
// median time of several iterations, algorithm bandwidth (bytes / time) and bus bandwidth
// (algbw x 2(n-1)/n; with --op reduce_scatter, (n-1)/n). Also measures this machine's memory-copy bandwidth (one thread, 64 MiB
// memcpy), the ceiling a shared-memory allreduce is measured against. Prints a table (progress on
// stderr) and, with --json FILE, writes the figures.
// Usage: bench_allreduce [--backend local] [--op allreduce|reduce_scatter] [--world 2]
//                        [--max-mib 256] [--iters 20] [--json FILE]
//        mpirun -np 2 bench_allreduce --backend mpi ...   (rank 0 prints and writes)
//        bench_allreduce --backend nccl [--world N]   (GPUs 0..N-1, default all; a thread each)
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "guarded_main.hpp"
#include "median.hpp"
#include "tandem/comm.hpp"
#include "tandem/tandem.hpp"

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

// GB/s of one thread copying 64 MiB (median of 9).
double memcpy_gbps() {
  const size_t bytes = size_t{64} << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::vector<double> t;
  for (int i = 0; i < 9; ++i) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return bytes / median(t) / 1e9;
}

}  // namespace

struct Options {
  std::string backend = "local", op = "allreduce", json_path;
  int world = 2, iters = 20;
  bool world_given = false;
  int64_t max_mib = 256;
};

int run(Options o);

static int run(int argc, char** argv) {
  CLI::App app{"Allreduce (or reduce-scatter) sweep of a tandem backend"};
  Options o;
  app.add_option("--backend", o.backend,
                 "local (threads), mpi (under mpirun) or nccl (one thread per GPU)")
      ->check(CLI::IsMember({"local", "mpi", "nccl"}));
  app.add_option("--op", o.op, "the collective timed")
      ->check(CLI::IsMember({"allreduce", "reduce_scatter"}));
  auto* world_opt = app.add_option("--world", o.world, "ranks (threads; nccl: GPUs, default all)")
                        ->check(CLI::Range(1, 64));
  app.add_option("--max-mib", o.max_mib, "largest message in MiB")->check(CLI::Range(1, 1 << 20));
  app.add_option("--iters", o.iters, "timed iterations per size")->check(CLI::PositiveNumber);
  app.add_option("--json", o.json_path, "write the results here");
  CLI11_PARSE(app, argc, argv);
  o.world_given = world_opt->count() > 0;
  try {
    return run(o);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_allreduce: %s\n", e.message().c_str());
    return 1;
  }
}

int run(Options o) {
  const std::string& backend = o.backend;
  int world = o.world;
  const int iters = o.iters;
  const bool scatter = o.op == "reduce_scatter";

  std::shared_ptr<comm::Communicator> mpi;
  std::vector<std::shared_ptr<comm::Communicator>> group;  // local or nccl: one thread per rank
  if (backend == "mpi") {
    mpi = comm::make_mpi_communicator();
    world = mpi->size();
  } else if (backend == "nccl") {
    if (!o.world_given) world = cuda::device_count();
    std::vector<int> devices(std::max(world, 1));
    for (int d = 0; d < world; ++d) devices[d] = d;
    group = comm::make_nccl_group(devices);
  }
  const bool printer = !mpi || mpi->rank() == 0;
  const double copy = memcpy_gbps();
  if (printer) {
    std::fprintf(stderr, "memcpy (1 thread, 64 MiB): %.2f GB/s\n", copy);
    std::printf("%12s %10s %12s %12s\n", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
  }
  nlohmann::json rows = nlohmann::json::array();
  // Bus bandwidth as nccl-tests count it: allreduce 2(n-1)/n, reduce-scatter (n-1)/n.
  const double bus_factor = (scatter ? 1.0 : 2.0) * (world - 1) / world;
  for (int64_t bytes = 8; bytes <= (o.max_mib << 20); bytes *= 2) {
    // Reduce-scatter: whole slices only.
    const int64_t n = scatter ? bytes / 4 / world * world : bytes / 4;
    if (n == 0) continue;
    const int reps = bytes >= (int64_t{64} << 20) ? std::max(5, iters / 4) : iters;
    std::vector<double> times;
    auto sweep = [&](comm::Communicator& c) {
      Tensor t = full({n}, 1.0, c.device());
      Tensor mine = scatter ? empty({n / world}, c.device()) : Tensor();
      auto once = [&] { (scatter ? c.reduce_scatter(mine, t) : c.allreduce(t)).wait(); };
      once();  // warm-up (first touch of the pages)
      for (int i = 0; i < reps; ++i) {
        c.barrier().wait();
        auto t0 = Clock::now();
        once();
        double s = std::chrono::duration<double>(Clock::now() - t0).count();
        if (c.rank() == 0) times.push_back(s);
      }
    };
    if (mpi) {
      sweep(*mpi);
    } else if (!group.empty()) {
      comm::run_group(group, sweep);
    } else {
      comm::run_local(world, sweep);
    }
    if (!printer) continue;
    const double t = median(times);
    const double algbw = bytes / t / 1e9, busbw = algbw * bus_factor;
    std::printf("%12lld %10.1f %12.3f %12.3f\n", static_cast<long long>(bytes), t * 1e6, algbw,
                busbw);
    std::fflush(stdout);
    rows.push_back(
        {{"bytes", bytes}, {"time_us", t * 1e6}, {"algbw_gbps", algbw}, {"busbw_gbps", busbw}});
  }
  if (printer && !o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << nlohmann::json{{"backend", backend}, {"op", o.op},          {"world", world},
                        {"dtype", "f32"},     {"memcpy_gbps", copy}, {"sizes", rows}}
             .dump(1);
    f.close();
    if (f.fail()) {  // the figures are the run's point: losing them is a failure
      std::fprintf(stderr, "bench_allreduce: error: cannot write %s\n", o.json_path.c_str());
      return 1;
    }
  }
  return 0;
}

int main(int argc, char** argv) { return bench::guarded_main("bench_allreduce", argc, argv, run); }
