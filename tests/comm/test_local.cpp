// The local backend: every op x dtype x size x world size 1..8 against a reference computed on
// one thread with tandem's elementwise ops in rank order (so results must match bit for bit),
// asynchronous Work handles, and faults: a rank that throws, stops calling or exits, mismatched
// collectives, bad arguments. Each fault is detected well inside the timeout, never a hang.
#include <chrono>
#include <cstring>
#include <thread>

#include "../util.hpp"
#include "inputs.hpp"
#include "tandem/comm.hpp"

using namespace tandem;
using namespace tandem::comm;
using tandem::testing::comm_input;
using tandem::testing::error_of;

namespace {

const DType kDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};

// The accumulation dtype: f16/bf16 reduce in f32.
DType acc_of(DType d) { return d == DType::f16 || d == DType::bf16 ? DType::f32 : d; }

Tensor reference(const std::vector<Tensor>& ins, ReduceOp op) {
  const DType dtype = ins[0].dtype(), acc = acc_of(dtype);
  Tensor r = ins[0].to(acc);
  for (size_t q = 1; q < ins.size(); ++q) {
    Tensor x = ins[q].to(acc);
    r = op == ReduceOp::max ? maximum(r, x) : op == ReduceOp::min ? minimum(r, x) : add(r, x);
  }
  if (op == ReduceOp::avg) r = div(r, full({}, static_cast<double>(ins.size()), acc));
  return r.to(dtype);
}

// Same shape, dtype and bytes (stricter than equal(), and without its conversion to double).
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), x.numel() * x.element_size()) == 0;
}

int64_t seconds_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - t0).count();
}

void check_all_ops(int world, DType dtype, int64_t n) {
  INFO("world " << world << ", " << dtype_name(dtype) << ", " << n << " elements");
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
  for (ReduceOp op : ops) reduced.push_back(reference(ins, op));
  const Tensor small_sum = reference(small, ReduceOp::sum), gathered = cat(ins);
  const Tensor scattered = reference(scatter_ins, ReduceOp::sum);

  std::vector<std::string> failures(world);
  run_local(world, [&](Communicator& c) {
    const int r = c.rank();
    auto expect = [&](const Tensor& got, const Tensor& want, const std::string& what) {
      if (failures[r].empty() && !same_bits(got, want)) failures[r] = what;
    };
    for (size_t i = 0; i < ops.size(); ++i) {
      Tensor t = ins[r].clone();
      c.allreduce(t, ops[i]).wait();
      expect(t, reduced[i], std::string("allreduce ") + reduce_op_name(ops[i]));
    }
    Tensor a = ins[r].clone(), b = small[r].clone();
    c.allreduce_grouped({a, b}, ReduceOp::sum).wait();
    expect(a, reduced[0], "grouped allreduce, tensor 0");
    expect(b, small_sum, "grouped allreduce, tensor 1");

    Tensor t = ins[r].clone();
    c.broadcast(t, world - 1).wait();
    expect(t, ins[world - 1], "broadcast");

    Tensor all = empty({n * world}, dtype);
    c.allgather(all, ins[r]).wait();
    expect(all, gathered, "allgather");

    Tensor mine = empty({slice}, dtype);
    c.reduce_scatter(mine, scatter_ins[r], ReduceOp::sum).wait();
    expect(mine, scattered.narrow(0, slice * r, slice), "reduce_scatter");
    c.barrier().wait();
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(failures[r] == "");
  }
}

}  // namespace

TEST_CASE("local collectives match a one-thread reference bit for bit", "[comm][local]") {
  for (int world = 1; world <= 8; ++world)
    for (DType dtype : kDtypes)
      for (int64_t n : {0, 1, 7, 1000}) check_all_ops(world, dtype, n);
}

TEST_CASE("local collectives on 1 Mi + 3 elements", "[comm][local]") {
  // Every world size in f32, every dtype at 2 and 3 ranks: an 8-rank allgather of 1 Mi f64
  // elements alone moves half a gigabyte, and the small sizes above cover every combination.
  const int64_t n = (int64_t{1} << 20) + 3;
  for (int world = 1; world <= 8; ++world) check_all_ops(world, DType::f32, n);
  for (int world : {2, 3})
    for (DType dtype : kDtypes)
      if (dtype != DType::f32) check_all_ops(world, dtype, n);
}

TEST_CASE("collectives are asynchronous and Work reports completion", "[comm][local]") {
  auto comms = make_local_group(2, LocalOptions().timeout(Duration(5000)));
  Tensor a = ones({4}), b = ones({4});
  Work w0 = comms[0]->allreduce(a);
  // Rank 1 has not called yet: rank 0's collective cannot finish, and a short wait says so.
  CHECK_FALSE(w0.is_completed());
  CHECK_THAT(error_of([&] { w0.wait(Duration(50)); }),
             Catch::Contains("rank 0: allreduce(sum) #1: not completed within 50 ms"));
  Work w1 = comms[1]->allreduce(b);
  w0.wait();
  w1.wait();
  CHECK(w0.is_completed());
  CHECK(a.to_vector<float>() == std::vector<float>{2, 2, 2, 2});
  CHECK(comms[0]->backend() == "local");
  CHECK(comms[1]->rank() == 1);
  CHECK(comms[1]->size() == 2);
}

TEST_CASE("a rank that throws aborts the group: the others fail fast", "[comm][local][faults]") {
  const auto t0 = Clock::now();
  std::vector<std::string> errors(3);
  std::string thrown = error_of([&] {
    run_local(
        3,
        [&](Communicator& c) {
          Tensor t = ones({8});
          c.allreduce(t).wait();
          if (c.rank() == 1) TANDEM_THROW(ValueError, "rank 1 ran out of data");
          try {
            c.allreduce(t).wait();
          } catch (const CommError& e) {
            errors[c.rank()] = e.message();
            throw;
          }
        },
        LocalOptions().timeout(Duration(20000)));
  });
  CHECK_THAT(thrown, Catch::Contains("rank 1 ran out of data"));  // the root cause, not a symptom
  for (int r : {0, 2}) {
    INFO("rank " << r);
    CHECK_THAT(errors[r], Catch::Contains("rank " + std::to_string(r) + ": allreduce(sum) #2"));
    CHECK_THAT(errors[r], Catch::Contains("rank 1 aborted: failed: rank 1 ran out of data"));
  }
  CHECK(seconds_since(t0) < 10);  // far inside the 20 s timeout
}

TEST_CASE("a rank that stops calling is named when the timeout expires", "[comm][local][faults]") {
  const auto t0 = Clock::now();
  std::vector<std::string> errors(3);
  CHECK_THROWS_AS(run_local(
                      3,
                      [&](Communicator& c) {
                        if (c.rank() == 2) return;  // never calls
                        Tensor t = ones({8});
                        try {
                          c.allreduce(t).wait();
                        } catch (const CommError& e) {
                          errors[c.rank()] = e.message();
                          throw;
                        }
                      },
                      LocalOptions().timeout(Duration(300))),
                  CommError);
  for (int r : {0, 1}) {
    CHECK_THAT(errors[r],
               Catch::Contains("allreduce(sum) #1 timed out after 300 ms waiting for rank(s) 2"));
  }
  CHECK(seconds_since(t0) < 10);
}

TEST_CASE("a rank that exits aborts the group", "[comm][local][faults]") {
  auto comms = make_local_group(3, LocalOptions().timeout(Duration(20000)));
  const auto t0 = Clock::now();
  Tensor a = ones({3}), b = ones({3});
  Work w0 = comms[0]->allreduce(a), w1 = comms[1]->allreduce(b);
  comms[2].reset();  // rank 2 goes away without calling
  CHECK_THAT(error_of([&] { w0.wait(); }), Catch::Contains("rank 2 exited"));
  CHECK_THAT(error_of([&] { w1.wait(); }), Catch::Contains("rank 2 exited"));
  CHECK(seconds_since(t0) < 10);
  // Later calls fail at once.
  CHECK_THAT(error_of([&] { comms[0]->barrier().wait(); }),
             Catch::Contains("rank 0: barrier #2: communicator aborted: rank 2 exited"));
  CHECK(comms[0]->is_aborted());
}

TEST_CASE("mismatched collectives are an error on every rank, with both calls",
          "[comm][local][faults]") {
  std::vector<std::string> errors(3);
  CHECK_THROWS(run_local(
      3,
      [&](Communicator& c) {
        Tensor t = ones({10});
        try {
          if (c.rank() == 1) {
            c.broadcast(t, 0).wait();
          } else {
            c.allreduce(t).wait();
          }
        } catch (const CommError& e) {
          errors[c.rank()] = e.message();
          throw;
        }
      },
      LocalOptions().timeout(Duration(20000))));
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK_THAT(errors[r], Catch::Contains("mismatched collectives: rank 0 called allreduce(sum) #1 "
                                          "(f32, 10 elements), rank 1 called broadcast(root 0) #1 "
                                          "(f32, 10 elements)"));
  }
  // Same op, different sizes.
  CHECK_THROWS_WITH(
      run_local(2,
                [&](Communicator& c) {
                  Tensor t = ones({c.rank() == 0 ? 4 : 5});
                  c.allreduce(t).wait();
                }),
      Catch::Contains("rank 0 called allreduce(sum) #1 (f32, 4 elements), rank 1 called "
                      "allreduce(sum) #1 (f32, 5 elements)"));
}

TEST_CASE("bad collective arguments are clear errors", "[comm][local][errors]") {
  auto bad = [](const std::function<void(Communicator&)>& f) {
    auto comms = make_local_group(2, LocalOptions().timeout(Duration(2000)));
    return error_of([&] { f(*comms[0]); });
  };
  CHECK_THAT(bad([](Communicator& c) {
               c.allreduce(ones({4, 4}).t());
             }),
             Catch::Contains("rank 0: allreduce(sum) #1: tensors must be defined, contiguous"));
  CHECK_THAT(bad([](Communicator& c) { c.allreduce(ones({4}, DType::i32), ReduceOp::avg); }),
             Catch::Contains("avg needs a floating dtype"));
  CHECK_THAT(bad([](Communicator& c) { c.allgather(ones({7}), ones({4})); }),
             Catch::Contains("output has 7 elements, expected size() x input's elements = 8"));
  CHECK_THAT(bad([](Communicator& c) { c.reduce_scatter(ones({2}), ones({5})); }),
             Catch::Contains("input elements not divisible by size()"));
  CHECK_THAT(bad([](Communicator& c) { c.broadcast(ones({2}), 2); }),
             Catch::Contains("root out of range"));
  CHECK_THAT(bad([](Communicator& c) { c.allreduce(ones({2}, DType::u8)); }),
             Catch::Contains("rank 0: allreduce(sum) #1: cannot reduce u8 tensors"));
  CHECK_THAT(error_of([] { make_local_group(0); }), Catch::Contains("world size must be >= 1"));
}
