// The mpi backend under mpirun (ctest runs it with -np 2 and -np 3). Modes:
//   collectives  every op x dtype x size against a reference built from every rank's inputs
//   nccl         the same on the nccl backend (one GPU per rank), or the refusal this machine
//                calls for (no GPU; fewer GPUs than ranks)
//   nccl_shared_gpu  every rank asks for GPU 0: refused on every rank
//   mismatch     debug mode: rank 1 calls broadcast while the others call allreduce
//   stall        the last rank never calls; the others must fail within the 500 ms timeout
//   abort        the last rank aborts its communicator: the others' allreduce fails at once with
//                its reason (an abort notice), far inside their 20 s timeout
//   abort_idle   the last rank aborts; the others make no call, yet see their communicator
//                aborted with its reason within a second (the progress thread reads notices
//                while idle: what the nccl backend's watchdog relies on across processes)
//   exit, throw  the last rank exits (or dies of an uncaught exception) before its collective:
//                the job must end, not hang. By default mpirun kills the others; when it lets
//                them run (orte_abort_on_non_zero_status 0) each gets a CommError at its 3 s
//                timeout naming its rank, op and sequence number
//   ddp          three DistributedDataParallel steps through parallel::launch_env (the mpi
//                backend), then the same steps on the local backend at the same world size in
//                this process: the weights must agree
//   ddp_throw    the last rank throws in the middle of backward: launch_env rethrows it there,
//                the job ends (mpirun kills the others), no hang
// Prints one line per rank; exits non-zero when a check fails.
#include <cstdio>
#include <cmath>
#include <cstring>
#include <thread>

#include "inputs.hpp"
#include "tandem/comm.hpp"
#include "tandem/tandem.hpp"

using namespace tandem;
using namespace tandem::comm;
using tandem::testing::close_bits;
using tandem::testing::comm_input;
using tandem::testing::comm_reference;

namespace {

// Every op x dtype x size on `c`, with tensors on the communicator's device.
int collectives(Communicator& c) {
  const int w = c.size(), r = c.rank();
  const Device dev = c.device();
  int checks = 0, failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    ++checks;
    if (!ok && failures++ < 5) std::printf("rank %d: FAILED %s\n", r, what.c_str());
  };
  auto on_device = [&](const Tensor& t) { return t.clone().to(dev); };
  for (DType dtype : tandem::testing::comm_dtypes()) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, (int64_t{1} << 20) + 3}) {
      const std::string tag = std::string(dtype_name(dtype)) + " x " + std::to_string(n);
      auto fresh = [&](int64_t numel) { return empty({numel}, TensorOptions(dtype).device(dev)); };
      std::vector<Tensor> ins;
      for (int q = 0; q < w; ++q) ins.push_back(comm_input(q, n, dtype));
      std::vector<ReduceOp> ops{ReduceOp::sum, ReduceOp::max, ReduceOp::min};
      if (is_floating(dtype)) ops.push_back(ReduceOp::avg);
      for (ReduceOp op : ops) {
        Tensor t = on_device(ins[r]);
        c.allreduce(t, op).wait();
        expect(close_bits(t.cpu(), comm_reference(ins, op)),
               std::string("allreduce ") + reduce_op_name(op) + " " + tag);
      }
      // 16-bit sums and averages asked for natively: NCCL's own reduction on nccl (rounded at
      // each step), f32 on mpi; within the 16-bit tolerance of the reference either way.
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        if (!is_reduced_float(dtype)) break;
        Tensor t = on_device(ins[r]);
        c.allreduce(t, op, Accumulate::native).wait();
        expect(close_bits(t.cpu(), comm_reference(ins, op)),
               std::string("allreduce ") + reduce_op_name(op) + ", native " + tag);
      }
      // A NaN in the last rank's first element: max and min keep it, as the local backend does
      // (NCCL's float max/min alone would drop it), and reduce the other elements as without it.
      for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
        if (!is_floating(dtype) || n < 2) break;
        Tensor x = ins[r].clone();
        if (r == w - 1) x.narrow(0, 0, 1).fill_(std::nan(""));
        Tensor t = on_device(x);
        c.allreduce(t, op).wait();
        const Tensor host = t.cpu();
        expect(std::isnan(host.narrow(0, 0, 1).to(DType::f64).item<double>()) &&
                   close_bits(host.narrow(0, 1, n - 1).contiguous(),
                              comm_reference(ins, op).narrow(0, 1, n - 1).contiguous()),
               std::string("allreduce ") + reduce_op_name(op) + " with a NaN " + tag);
      }
      std::vector<Tensor> bs;
      for (int q = 0; q < w; ++q) bs.push_back(comm_input(q, 5, dtype, 3));
      Tensor a = on_device(ins[r]), b = on_device(bs[r]);
      c.allreduce_grouped({a, b}).wait();
      expect(close_bits(a.cpu(), comm_reference(ins, ReduceOp::sum)) &&
                 close_bits(b.cpu(), comm_reference(bs, ReduceOp::sum)),
             "grouped allreduce " + tag);
      Tensor t = on_device(ins[r]);
      c.broadcast(t, w - 1).wait();
      expect(equal(t.cpu(), ins[w - 1]), "broadcast " + tag);
      Tensor all = fresh(n * w);
      c.allgather(all, on_device(ins[r])).wait();
      expect(equal(all.cpu(), cat(ins)), "allgather " + tag);
      const int64_t slice = (n + w - 1) / w;
      std::vector<Tensor> big;
      for (int q = 0; q < w; ++q) big.push_back(comm_input(q, slice * w, dtype, 7));
      Tensor mine = fresh(slice);
      c.reduce_scatter(mine, on_device(big[r])).wait();
      expect(close_bits(mine.cpu(), comm_reference(big, ReduceOp::sum).narrow(0, slice * r, slice)),
             "reduce_scatter " + tag);
      c.barrier().wait();
    }
  }
  std::printf("rank %d of %d (%s, local rank %d): %d checks, %d failed\n", r, w,
              c.backend().c_str(), c.local_rank(), checks, failures);
  return failures == 0 ? 0 : 1;
}

// The nccl backend over the mpi bootstrap. What must happen depends on the machine: without a
// GPU every rank refuses with the same error; with fewer GPUs than ranks on the node (or, with
// `shared`, every rank asking for GPU 0) every rank refuses two ranks on one GPU; otherwise the
// collectives run. Returns 0 when this rank saw what it should.
int nccl(bool shared) {
  const int gpus = cuda::device_count();
  const auto env = launch_env();
  const int per_node = env ? env->world : 1;  // mpirun on one machine in ctest
  std::string expected;
  if (!nccl_compiled()) {
    expected = "built without NCCL";
  } else if (gpus == 0) {
    expected = "sees no GPU (the nccl backend needs one GPU per rank)";
  } else if (shared && per_node > 1) {
    expected = "NCCL forbids two ranks on one GPU";
  } else if (per_node > gpus) {
    expected = "start at most " + std::to_string(gpus) + " rank(s) per node";
  }
  NcclOptions options = NcclOptions().timeout(Duration(60000));
  if (shared) options = options.device(0);
  try {
    auto c = make_nccl_communicator(options);
    if (!expected.empty()) {
      std::printf("rank %d: no error, expected one containing \"%s\"\n", c->rank(),
                  expected.c_str());
      return 1;
    }
    return collectives(*c);
  } catch (const Error& e) {
    const bool ok = !expected.empty() && e.message().find(expected) != std::string::npos;
    std::printf("%s: %s\n", ok ? "refused as expected" : "UNEXPECTED error", e.what());
    return ok ? 0 : 1;
  }
}

// A surviving rank's allreduce while another rank misbehaves: prints the CommError it gets, with
// the seconds since t0, and leaves without MPI_Finalize (the allreduce is still pending inside
// MPI). Returns 1 when the allreduce completes instead.
int survivor_allreduce(Communicator& c, Clock::time_point t0) {
  Tensor t = ones({10});
  try {
    c.allreduce(t).wait();
  } catch (const CommError& e) {
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("%s [after %.1f s]\n", e.message().c_str(), s);
    std::fflush(stdout);
    std::_Exit(0);
  }
  std::printf("rank %d: the allreduce completed although a rank misbehaved\n", c.rank());
  return 1;
}

// Three DDP steps of a small MLP on rank r's slice of fixed batches; returns the weights.
std::vector<float> ddp_steps(parallel::Rank& r, bool throw_mid_backward = false) {
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16),
                                                std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(16, 4));
  {
    Generator g(7 + r.rank());  // different per rank: DDP copies rank 0's
    NoGradGuard no_grad;
    for (Tensor& p : model->parameters()) p.copy_(randn(p.shape(), DType::f32, &g));
  }
  parallel::DistributedDataParallel ddp(model, r.comm,
                                        parallel::DDPOptions().bucket_cap_mb(1e-4).first_bucket_mb(1e-4));
  if (throw_mid_backward && r.rank() == r.world_size() - 1)
    model->parameters().front().register_grad_ready_hook(
        [](const Tensor&) { throw std::runtime_error("failed in the middle of backward"); });
  optim::SGD opt(ddp.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  const int64_t per = 4, rows = per * r.world_size();
  for (int k = 0; k < 3; ++k) {
    Generator g(100 + k);
    Tensor x = randn({rows, 8}, DType::f32, &g), y = randn({rows, 4}, DType::f32, &g);
    opt.zero_grad();
    mse_loss(ddp.forward(x.narrow(0, r.rank() * per, per)), y.narrow(0, r.rank() * per, per))
        .backward();
    opt.step();
  }
  std::vector<float> out;
  for (const Tensor& p : model->parameters())
    for (float v : p.to_vector<float>()) out.push_back(v);
  return out;
}

int ddp_check() {
  std::vector<float> over_mpi, local;
  int rank = -1, world = 0;
  parallel::launch_env([&](parallel::Rank& r) {
    rank = r.rank(), world = r.world_size();
    over_mpi = ddp_steps(r);
  }, parallel::LaunchOptions().threads(1).timeout(Duration(60000)));
  parallel::launch(world, [&](parallel::Rank& r) {
    auto w = ddp_steps(r);
    if (r.rank() == rank) local = w;
  }, parallel::LaunchOptions().threads(world));
  double worst = 0;
  for (size_t i = 0; i < local.size() && i < over_mpi.size(); ++i)
    worst = std::max(worst, std::fabs(double(local[i]) - over_mpi[i]));
  const bool ok = !local.empty() && local.size() == over_mpi.size() && worst <= 1e-6;
  std::printf("rank %d: ddp over mpi %s the local backend (%zu weights, largest difference %g)\n",
              rank, ok ? "matches" : "DIFFERS FROM", local.size(), worst);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  try {
    if (mode == "nccl" || mode == "nccl_shared_gpu") return nccl(mode == "nccl_shared_gpu");
    if (mode == "ddp") return ddp_check();
    if (mode == "ddp_throw") {
      parallel::launch_env([](parallel::Rank& r) { ddp_steps(r, true); },
                           parallel::LaunchOptions().threads(1).timeout(Duration(3000)));
      return 0;
    }
    if (mode == "collectives") {
      auto c = make_mpi_communicator(MpiOptions().timeout(Duration(60000)));
      return collectives(*c);
    }
    if (mode == "mismatch") {
      auto c = make_mpi_communicator(MpiOptions().timeout(Duration(20000)).debug(true));
      Tensor t = ones({10});
      try {
        if (c->rank() == 1) {
          c->broadcast(t, 0).wait();
        } else {
          c->allreduce(t).wait();
        }
      } catch (const CommError& e) {
        std::printf("%s\n", e.message().c_str());
        return 0;
      }
      std::printf("rank %d: no error for mismatched collectives\n", c->rank());
      return 1;
    }
    if (mode == "stall") {
      auto c = make_mpi_communicator(MpiOptions().timeout(Duration(500)));
      const auto t0 = Clock::now();
      if (c->rank() == c->size() - 1) {
        std::this_thread::sleep_for(std::chrono::seconds(3));  // never calls
        std::_Exit(0);  // the others' allreduce is pending inside MPI: no finalize
      }
      return survivor_allreduce(*c, t0);
    }
    if (mode == "abort") {
      auto c = make_mpi_communicator(MpiOptions().timeout(Duration(20000)));
      const auto t0 = Clock::now();
      if (c->rank() == c->size() - 1) {
        c->abort("it gave up");
        std::this_thread::sleep_for(std::chrono::seconds(2));  // alive, but never calls
        return 0;
      }
      return survivor_allreduce(*c, t0);
    }
    if (mode == "abort_idle") {
      auto c = make_mpi_communicator(MpiOptions().timeout(Duration(20000)));
      if (c->rank() == c->size() - 1) {
        c->abort("it gave up");
        std::this_thread::sleep_for(std::chrono::seconds(2));
        return 0;
      }
      const auto t0 = Clock::now();
      while (!c->is_aborted() && Clock::now() - t0 < std::chrono::seconds(5))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!c->is_aborted()) {
        std::printf("rank %d: no abort seen in %.1f s without a call\n", c->rank(), s);
        return 1;
      }
      try {
        c->barrier().wait();
      } catch (const CommError& e) {
        std::printf("rank %d: aborted while idle [after %.1f s]: %s\n", c->rank(), s, e.message().c_str());
        return s < 1.0 && e.message().find("it gave up") != std::string::npos ? 0 : 1;
      }
      return 1;
    }
    if (mode == "exit" || mode == "throw") {
      auto c = make_mpi_communicator(MpiOptions().timeout(Duration(3000)));
      const auto t0 = Clock::now();
      if (c->rank() == c->size() - 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (mode == "exit") std::_Exit(3);
        throw std::runtime_error("the last rank failed");  // escapes main: std::terminate
      }
      return survivor_allreduce(*c, t0);
    }
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  } catch (const CommError& e) {
    std::printf("error: %s\n", e.what());
  }
  return 1;
}
