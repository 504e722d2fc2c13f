// The collective suite every backend runs: each op x reduce op on inputs of one dtype and size,
// against a reference computed on one thread from every rank's inputs (inputs.hpp). Results are
// compared bit for bit where the backend promises it (the local backend; any backend at one or
// two ranks, where the reduction order cannot differ), else within the dtype's rounding.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "inputs.hpp"
#include "tandem/comm.hpp"

namespace tandem::testing {

/// Runs every collective on `comms` (one thread per rank) with `n` elements of `dtype` and
/// checks each rank's results.
inline void check_all_ops(const std::vector<std::shared_ptr<comm::Communicator>>& comms,
                          DType dtype, int64_t n, bool exact) {
  using comm::ReduceOp;
  const int world = static_cast<int>(comms.size());
  const Device device = comms[0]->device();
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

  // A private copy of a CPU input on this rank's device.
  auto on_device = [&](const Tensor& t) { return t.clone().to(device); };
  auto fresh = [&](int64_t numel) { return empty({numel}, TensorOptions(dtype).device(device)); };
  std::vector<std::string> failures(world);
  comm::run_group(comms, [&](comm::Communicator& c) {
    const int r = c.rank();
    auto expect = [&](const Tensor& got, const Tensor& want, const std::string& what) {
      const Tensor host = got.cpu();
      if (failures[r].empty() && !(exact ? same_bits(host, want) : close_bits(host, want)))
        failures[r] = what;
    };
    for (size_t i = 0; i < ops.size(); ++i) {
      Tensor t = on_device(ins[r]);
      c.allreduce(t, ops[i]).wait();
      expect(t, reduced[i], std::string("allreduce ") + comm::reduce_op_name(ops[i]));
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
    c.barrier().wait();
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(failures[r] == "");
  }
}

}  // namespace tandem::testing
