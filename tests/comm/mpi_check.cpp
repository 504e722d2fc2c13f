// The mpi backend under mpirun (ctest runs it with -np 2 and -np 3). Modes:
//   collectives  every op x dtype x size against a reference built from every rank's inputs
//   mismatch     debug mode: rank 1 calls broadcast while the others call allreduce
//   stall        the last rank never calls; the others must fail within the 500 ms timeout
//   exit, throw  the last rank exits (or dies of an uncaught exception) before its collective:
//                the job must end, not hang (Open MPI's mpirun then kills the others)
// Prints one line per rank; exits non-zero when a check fails.
#include <cstdio>
#include <cstring>
#include <thread>

#include "inputs.hpp"
#include "tandem/comm.hpp"
#include "tandem/tandem.hpp"

using namespace tandem;
using namespace tandem::comm;
using tandem::testing::comm_input;

namespace {

// MPI may reduce in any order: floating results are compared with a tolerance of the dtype.
bool close_to(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) return false;
  if (!is_floating(got.dtype())) return equal(got, want);
  const double rtol = got.dtype() == DType::f64   ? 1e-12
                      : got.dtype() == DType::f32 ? 1e-5
                      : got.dtype() == DType::f16 ? 4e-3
                                                  : 2e-2;
  return allclose(got.to(DType::f64), want.to(DType::f64), rtol, rtol * 20);
}

Tensor reference(const std::vector<Tensor>& ins, ReduceOp op) {
  Tensor r = ins[0].to(DType::f64);
  for (size_t q = 1; q < ins.size(); ++q) {
    Tensor x = ins[q].to(DType::f64);
    r = op == ReduceOp::max ? maximum(r, x) : op == ReduceOp::min ? minimum(r, x) : add(r, x);
  }
  if (op == ReduceOp::avg) r = div(r, full({}, static_cast<double>(ins.size()), DType::f64));
  return r.to(ins[0].dtype());
}

int collectives(Communicator& c) {
  const int w = c.size(), r = c.rank();
  int checks = 0, failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    ++checks;
    if (!ok && failures++ < 5) std::printf("rank %d: FAILED %s\n", r, what.c_str());
  };
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, (int64_t{1} << 20) + 3}) {
      const std::string tag = std::string(dtype_name(dtype)) + " x " + std::to_string(n);
      std::vector<Tensor> ins;
      for (int q = 0; q < w; ++q) ins.push_back(comm_input(q, n, dtype));
      std::vector<ReduceOp> ops{ReduceOp::sum, ReduceOp::max, ReduceOp::min};
      if (is_floating(dtype)) ops.push_back(ReduceOp::avg);
      for (ReduceOp op : ops) {
        Tensor t = ins[r].clone();
        c.allreduce(t, op).wait();
        expect(close_to(t, reference(ins, op)),
               std::string("allreduce ") + reduce_op_name(op) + " " + tag);
      }
      Tensor a = ins[r].clone(), b = comm_input(r, 5, dtype, 3);
      std::vector<Tensor> bs;
      for (int q = 0; q < w; ++q) bs.push_back(comm_input(q, 5, dtype, 3));
      c.allreduce_grouped({a, b}).wait();
      expect(
          close_to(a, reference(ins, ReduceOp::sum)) && close_to(b, reference(bs, ReduceOp::sum)),
          "grouped allreduce " + tag);
      Tensor t = ins[r].clone();
      c.broadcast(t, w - 1).wait();
      expect(equal(t, ins[w - 1]), "broadcast " + tag);
      Tensor all = empty({n * w}, dtype);
      c.allgather(all, ins[r]).wait();
      expect(equal(all, cat(ins)), "allgather " + tag);
      const int64_t slice = (n + w - 1) / w;
      std::vector<Tensor> big;
      for (int q = 0; q < w; ++q) big.push_back(comm_input(q, slice * w, dtype, 7));
      Tensor mine = empty({slice}, dtype);
      c.reduce_scatter(mine, big[r]).wait();
      expect(close_to(mine, reference(big, ReduceOp::sum).narrow(0, slice * r, slice)),
             "reduce_scatter " + tag);
      c.barrier().wait();
    }
  }
  std::printf("rank %d of %d (local rank %d): %d checks, %d failed\n", r, w, c.local_rank(), checks,
              failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  try {
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
      } else {
        Tensor t = ones({10});
        try {
          c->allreduce(t).wait();
          std::printf("rank %d: the stalled allreduce completed\n", c->rank());
        } catch (const CommError& e) {
          const double s = std::chrono::duration<double>(Clock::now() - t0).count();
          std::printf("%s [after %.1f s]\n", e.message().c_str(), s);
        }
      }
      std::fflush(stdout);
      std::_Exit(0);  // a collective is still pending inside MPI: no finalize
    }
    if (mode == "exit" || mode == "throw") {
      auto c = make_mpi_communicator(MpiOptions().timeout(Duration(20000)));
      if (c->rank() == c->size() - 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (mode == "exit") std::_Exit(3);
        throw std::runtime_error("the last rank failed");  // escapes main: std::terminate
      }
      Tensor t = ones({10});
      c->allreduce(t).wait();
      std::printf("rank %d: the allreduce with a dead rank completed\n", c->rank());
      return 1;
    }
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  } catch (const CommError& e) {
    std::printf("error: %s\n", e.what());
  }
  return 1;
}
