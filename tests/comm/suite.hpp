// The collective suite every backend runs: each op x reduce op on inputs of one dtype and size,
// against a reference computed on one thread from every rank's inputs (inputs.hpp). Results are
// compared bit for bit where the backend promises it (the local backend; any backend at one or
// two ranks, where the reduction order cannot differ), else within the dtype's rounding. Then
// the faults every backend with ranks in one process must survive: a rank that throws, one that
// stops calling, one whose communicator goes away.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "../util.hpp"
#include "inputs.hpp"
#include "tandem/comm.hpp"

namespace tandem::testing {

/// Runs every collective on `comms` (one thread per rank) with `n` elements of `dtype` and
/// checks each rank's results.
inline void check_all_ops(const std::vector<std::shared_ptr<comm::Communicator>>& comms,
                          DType dtype, int64_t n, bool exact) {
  using comm::ReduceOp;
  const int world = static_cast<int>(comms.size());
  INFO(comms[0]->backend() << ", world " << world << ", " << dtype_name(dtype) << ", " << n
                           << " elements");
  // Inputs and expected results, computed once on this thread.
  const int64_t slice = (n + world - 1) / world;  // reduce_scatter: world x slice in, slice out
  std::vector<Tensor> ins, small, scatter_ins;
  for (int q = 0; q < world; ++q) {
    ins.push_back(comm_input(q, n, dtype));
    small.push_back(comm_input(q, 5, dtype, 3));
    scatter_ins.push_back(comm_input(q, slice * world, dtype, 7));
  }
  std::vector<ReduceOp> ops{ReduceOp::sum, ReduceOp::max, ReduceOp::min};
  if (is_floating(dtype)) ops.push_back(ReduceOp::avg);
  std::vector<Tensor> reduced;
  for (ReduceOp op : ops) reduced.push_back(comm_reference(ins, op));
  const Tensor small_sum = comm_reference(small, ReduceOp::sum), gathered = cat(ins);
  const Tensor scattered = comm_reference(scatter_ins, ReduceOp::sum);

  std::vector<std::string> failures(world);
  comm::run_group(comms, [&](comm::Communicator& c) {
    const int r = c.rank();
    // A private copy of a CPU input on this rank's device (each nccl rank has its own GPU).
    auto on_device = [&](const Tensor& t) { return t.clone().to(c.device()); };
    auto fresh = [&](int64_t numel) {
      return empty({numel}, TensorOptions(dtype).device(c.device()));
    };
    auto expect_as = [&](const Tensor& got, const Tensor& want, const std::string& what,
                         bool bitwise) {
      const Tensor host = got.cpu();
      if (failures[r].empty() && !(bitwise ? same_bits(host, want) : close_bits(host, want)))
        failures[r] = what;
    };
    auto expect = [&](const Tensor& got, const Tensor& want, const std::string& what) {
      expect_as(got, want, what, exact);
    };
    for (size_t i = 0; i < ops.size(); ++i) {
      Tensor t = on_device(ins[r]);
      c.allreduce(t, ops[i]).wait();
      expect(t, reduced[i], std::string("allreduce ") + comm::reduce_op_name(ops[i]));
    }
    // 16-bit accumulation: NCCL's native reduction on nccl, f32 on the other backends. At one
    // or two ranks a sum, max or min rounds alike either way (one operation); an average in 16
    // bits (NCCL scales each rank's value first) may not, for subnormal halves.
    for (size_t i = 0; is_reduced_float(dtype) && i < ops.size(); ++i) {
      Tensor t = on_device(ins[r]);
      c.allreduce(t, ops[i], comm::Accumulate::native).wait();
      expect_as(t, reduced[i],
                std::string("allreduce ") + comm::reduce_op_name(ops[i]) + ", native",
                exact && ops[i] != ReduceOp::avg);
    }
    // A NaN in the last rank's first element: max and min keep it on every backend (NCCL's float
    // max/min alone would drop it), and the other elements are reduced as without it.
    for (size_t i = 1; is_floating(dtype) && n >= 2 && i <= 2; ++i) {
      Tensor x = ins[r].clone();
      if (r == world - 1) x.narrow(0, 0, 1).fill_(std::nan(""));
      Tensor t = x.to(c.device());
      c.allreduce(t, ops[i]).wait();
      const std::string what = std::string("allreduce ") + comm::reduce_op_name(ops[i]) +
                               " with a NaN";
      if (failures[r].empty() && !std::isnan(t.narrow(0, 0, 1).cpu().to(DType::f64).item<double>()))
        failures[r] = what + ": the NaN was dropped";
      expect(t.narrow(0, 1, n - 1).contiguous(), reduced[i].narrow(0, 1, n - 1).contiguous(),
             what + ", the other elements");
    }
    Tensor a = on_device(ins[r]), b = on_device(small[r]);
    c.allreduce_grouped({a, b}, ReduceOp::sum).wait();
    expect(a, reduced[0], "grouped allreduce, tensor 0");
    expect(b, small_sum, "grouped allreduce, tensor 1");

    Tensor t = on_device(ins[r]);
    c.broadcast(t, world - 1).wait();
    expect(t, ins[world - 1], "broadcast");

    Tensor all = fresh(n * world);
    c.allgather(all, on_device(ins[r])).wait();
    expect(all, gathered, "allgather");

    Tensor mine = fresh(slice);
    c.reduce_scatter(mine, on_device(scatter_ins[r]), ReduceOp::sum).wait();
    expect(mine, scattered.narrow(0, slice * r, slice), "reduce_scatter");
    if (is_floating(dtype) && slice > 0) {
      // A max with the NaN in the last rank's first element: rank 0's slice keeps it, and the
      // input is left as it was.
      Tensor x = scatter_ins[r].clone();
      if (r == world - 1) x.narrow(0, 0, 1).fill_(std::nan(""));
      Tensor in = x.to(c.device());
      c.reduce_scatter(mine, in, ReduceOp::max).wait();
      if (failures[r].empty() && r == 0 &&
          !std::isnan(mine.narrow(0, 0, 1).cpu().to(DType::f64).item<double>()))
        failures[r] = "reduce_scatter max with a NaN: the NaN was dropped";
      expect_as(in, x, "reduce_scatter max with a NaN: its input", true);
    }
    c.barrier().wait();
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(failures[r] == "");
  }
}

using CommGroup = std::vector<std::shared_ptr<comm::Communicator>>;

inline double seconds_since(comm::Clock::time_point t0) {
  return std::chrono::duration<double>(comm::Clock::now() - t0).count();
}

/// Rank 1 throws after a first allreduce: every other rank's next allreduce fails with the root
/// cause, well inside the group's (long) timeout, and run_group rethrows the root cause. On a
/// GPU a rank's first allreduce may fail instead: rank 1 may see it complete and throw before
/// this rank's GPU finished it, and the abort then ends it (on the nccl backend).
inline void check_rank_throws(const CommGroup& comms) {
  const int world = static_cast<int>(comms.size());
  const bool on_gpu = comms[0]->device().is_cuda();
  const auto t0 = comm::Clock::now();
  std::vector<std::string> errors(world);
  const std::string thrown = error_of([&] {
    comm::run_group(comms, [&](comm::Communicator& c) {
      Tensor t = ones({8}, c.device());
      try {
        c.allreduce(t).wait();
        if (c.rank() == 1) TANDEM_THROW(ValueError, "rank 1 ran out of data");
        c.allreduce(t).wait();
      } catch (const comm::CommError& e) {
        errors[c.rank()] = e.message();
        throw;
      }
    });
  });
  CHECK_THAT(thrown, Catch::Contains("rank 1 ran out of data"));  // the root cause, not a symptom
  for (int r = 0; r < world; ++r) {
    if (r == 1) continue;
    INFO("rank " << r << ": " << errors[r]);
    const std::string which = "rank " + std::to_string(r) + ": allreduce(sum) #";
    const bool second = errors[r].find(which + "2") != std::string::npos;
    const bool first = on_gpu && errors[r].find(which + "1") != std::string::npos;
    CHECK((second || first));
    CHECK_THAT(errors[r], Catch::Contains("rank 1 aborted: failed: rank 1 ran out of data"));
  }
  CHECK(seconds_since(t0) < comms[0]->timeout().count() / 2000.0);
}

/// Rank 1 broadcasts while the others allreduce (or, with `accumulation`, it asks for 16-bit
/// accumulation while they ask for f32): every rank fails, naming both calls (the local backend
/// always checks; mpi and nccl in debug mode).
inline void check_mismatched_calls(const CommGroup& comms, bool accumulation = false) {
  const int world = static_cast<int>(comms.size());
  std::vector<std::string> errors(world);
  CHECK_THROWS(comm::run_group(comms, [&](comm::Communicator& c) {
    Tensor t =
        ones({10}, TensorOptions(accumulation ? DType::bf16 : DType::f32).device(c.device()));
    try {
      if (c.rank() == 1 && accumulation) {
        c.allreduce(t, comm::ReduceOp::sum, comm::Accumulate::native).wait();
      } else if (c.rank() == 1) {
        c.broadcast(t, 0).wait();
      } else {
        c.allreduce(t).wait();
      }
    } catch (const comm::CommError& e) {
      errors[c.rank()] = e.message();
      throw;
    }
  }));
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK_THAT(errors[r], Catch::Contains(
                              accumulation ? "mismatched collectives: rank 0 called allreduce(sum) "
                                             "#1 (bf16, 10 elements), rank 1 called allreduce(sum, "
                                             "native) #1 (bf16, 10 elements)"
                                           : "mismatched collectives: rank 0 called allreduce(sum) "
                                             "#1 (f32, 10 elements), rank 1 called broadcast(root "
                                             "0) #1 (f32, 10 elements)"));
  }
}

/// The last rank never calls: the others fail once the (short) timeout expires, naming the op and
/// its sequence number. Returns their messages for backend-specific checks.
inline std::vector<std::string> check_rank_stops(const CommGroup& comms) {
  const int world = static_cast<int>(comms.size());
  const auto t0 = comm::Clock::now();
  const auto timeout = comms[0]->timeout();
  std::vector<std::string> errors(world);
  CHECK_THROWS_AS(comm::run_group(comms,
                                  [&](comm::Communicator& c) {
                                    if (c.rank() == world - 1) return;  // never calls
                                    Tensor t = ones({8}, c.device());
                                    try {
                                      c.allreduce(t).wait();
                                    } catch (const comm::CommError& e) {
                                      errors[c.rank()] = e.message();
                                      throw;
                                    }
                                  }),
                  comm::CommError);
  for (int r = 0; r + 1 < world; ++r) {
    INFO("rank " << r);
    CHECK_THAT(errors[r], Catch::Contains("allreduce(sum) #1 timed out after " +
                                          std::to_string(timeout.count()) + " ms"));
  }
  CHECK(seconds_since(t0) < timeout.count() / 1000.0 + 5);
  return errors;
}

/// The last rank's communicator goes away while the others wait on it: they fail at once with
/// "rank N exited", and their later calls fail without waiting.
inline void check_rank_exits(CommGroup comms) {
  const int world = static_cast<int>(comms.size());
  const std::string exited = "rank " + std::to_string(world - 1) + " exited";
  const auto t0 = comm::Clock::now();
  std::vector<comm::Work> works;
  for (int r = 0; r + 1 < world; ++r) works.push_back(comms[r]->allreduce(ones({3}, comms[r]->device())));
  comms[world - 1].reset();  // goes away without calling
  for (auto& w : works) CHECK_THAT(error_of([&] { w.wait(); }), Catch::Contains(exited));
  CHECK_THAT(error_of([&] { comms[0]->barrier().wait(); }),
             Catch::Contains("rank 0: barrier #2: communicator aborted: " + exited));
  CHECK(comms[0]->is_aborted());
  CHECK(seconds_since(t0) < comms[0]->timeout().count() / 2000.0);
}

}  // namespace tandem::testing
