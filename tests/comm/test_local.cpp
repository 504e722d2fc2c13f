// The local backend: every op x dtype x size x world size 1..8 against a reference computed on
// one thread with tandem's elementwise ops in rank order (so results must match bit for bit),
// asynchronous Work handles, and faults: a rank that throws, stops calling or exits, mismatched
// collectives (with another queued behind), a timeout in the middle of a reduction, bad
// arguments. Each fault is detected well inside the timeout, never a hang.
#include <atomic>
#include <chrono>
#include <thread>

#include "../util.hpp"
#include "suite.hpp"
#include "tandem/comm.hpp"

using namespace tandem;
using namespace tandem::comm;
using tandem::testing::comm_dtypes;
using tandem::testing::error_of;

namespace {

void check_all_ops(int world, DType dtype, int64_t n) {
  tandem::testing::check_all_ops(make_local_group(world), dtype, n, /*exact=*/true);
}

}  // namespace

TEST_CASE("local collectives match a one-thread reference bit for bit", "[comm][local]") {
  for (int world = 1; world <= 8; ++world)
    for (DType dtype : comm_dtypes())
      for (int64_t n : {0, 1, 7, 1000}) check_all_ops(world, dtype, n);
}

TEST_CASE("local collectives on 1 Mi + 3 elements", "[comm][local][large]") {
  // Every world size in f32, every dtype at 2 and 3 ranks: an 8-rank allgather of 1 Mi f64
  // elements alone moves half a gigabyte, and the small sizes above cover every combination.
  const int64_t n = (int64_t{1} << 20) + 3;
  for (int world = 1; world <= 8; ++world) check_all_ops(world, DType::f32, n);
  for (int world : {2, 3})
    for (DType dtype : comm_dtypes())
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

TEST_CASE("Work::wait_on_stream: on CPU ranks a host wait, a backend's stream hook spares the host",
          "[comm][local]") {
  // CPU ranks have no device stream: wait_on_stream waits and rethrows like wait.
  auto comms = make_local_group(2, LocalOptions().timeout(Duration(5000)));
  Tensor a = ones({3}), b = full({3}, 2.0);
  Work w0 = comms[0]->allreduce(a);
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    comms[1]->allreduce(b).wait();
  });
  w0.wait_on_stream();
  CHECK(w0.is_completed());  // returned only once done
  CHECK(a.to_vector<float>() == std::vector<float>{3, 3, 3});
  late.join();
  comms[0]->abort("stop");
  CHECK_THAT(error_of([&] { comms[0]->allreduce(a).wait_on_stream(); }),
             Catch::Contains("communicator aborted: rank 0 aborted: stop"));

  // The hook a GPU backend sets: when it ordered the stream, the host does not wait for the
  // collective; when it could not, the host waits and sees the error.
  auto state = std::make_shared<comm::detail::WorkState>();
  state->what = "rank 0: allreduce #1";
  int hooked = 0;
  state->on_stream = [&](comm::detail::WorkState&, Duration) { return ++hooked > 0; };
  Work pending(state, Duration(50));
  pending.wait_on_stream();
  CHECK(hooked == 1);
  CHECK_FALSE(pending.is_completed());
  state->on_stream = [&](comm::detail::WorkState&, Duration) { return false; };
  CHECK_THAT(error_of([&] { pending.wait_on_stream(); }),
             Catch::Contains("rank 0: allreduce #1: not completed within 1050 ms"));
  state->complete(std::make_exception_ptr(CommError("failed before it was issued", __FILE__, __LINE__)));
  state->on_stream = [&](comm::detail::WorkState&, Duration) { return ++hooked > 0; };
  CHECK_THAT(error_of([&] { pending.wait_on_stream(); }),
             Catch::Contains("failed before it was issued"));
  CHECK(hooked == 1);  // a completed collective needs no stream wait
}

TEST_CASE("a rank that throws aborts the group: the others fail fast", "[comm][local][faults]") {
  tandem::testing::check_rank_throws(make_local_group(3, LocalOptions().timeout(Duration(20000))));
}

TEST_CASE("a rank that stops calling is named when the timeout expires", "[comm][local][faults]") {
  const auto errors =
      tandem::testing::check_rank_stops(make_local_group(3, LocalOptions().timeout(Duration(300))));
  for (int r : {0, 1}) CHECK_THAT(errors[r], Catch::Contains("waiting for rank(s) 2"));
}

TEST_CASE("a rank that exits aborts the group", "[comm][local][faults]") {
  tandem::testing::check_rank_exits(make_local_group(3, LocalOptions().timeout(Duration(20000))));
}

TEST_CASE("mismatched collectives are an error on every rank, with both calls",
          "[comm][local][faults]") {
  tandem::testing::check_mismatched_calls(
      make_local_group(3, LocalOptions().timeout(Duration(20000))));
  tandem::testing::check_mismatched_calls(
      make_local_group(3, LocalOptions().timeout(Duration(20000))), true);
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

TEST_CASE("a mismatch with a second collective queued: no rank's post changes while read",
          "[comm][local][faults]") {
  // A rank that found the mismatch went on to its queued call and overwrote its post (op name,
  // counts) while the others still compared it: a data race (ThreadSanitizer reports it), and a
  // rank could name the second call instead of the first. Repeated for the interleavings.
  for (int round = 0; round < 20; ++round) {
    std::vector<std::string> first(3), second(3);
    run_local(
        3,
        [&](Communicator& c) {
          Tensor a = ones({10}), b = ones({10});
          Work mismatched = c.rank() == 1 ? c.broadcast(a, 0) : c.allreduce(a);
          Work queued = c.allreduce(b, ReduceOp::max);
          first[c.rank()] = error_of([&] { mismatched.wait(); });
          second[c.rank()] = error_of([&] { queued.wait(); });
        },
        LocalOptions().timeout(Duration(20000)));
    for (int r = 0; r < 3; ++r) {
      INFO("round " << round << ", rank " << r);
      CHECK(first[r] == "rank " + std::to_string(r) +
                            ": mismatched collectives: rank 0 called allreduce(sum) #1 (f32, 10 "
                            "elements), rank 1 called broadcast(root 0) #1 (f32, 10 elements)");
      CHECK_THAT(second[r], Catch::StartsWith("rank " + std::to_string(r) +
                                              ": allreduce(max) #2: communicator aborted: rank ") &&
                                Catch::Contains(": mismatched collectives: rank 0 called "
                                                "allreduce(sum) #1"));
    }
  }
}

TEST_CASE("a rank that times out mid-reduction gets its buffers back once no rank reads them",
          "[comm][local][faults]") {
  // A grouped allreduce on 2 ranks of `count` one-element tensors: rank 1 reduces every entry
  // (the slice of a one-element tensor), rank 0 none, so rank 0 waits at the barrier between the
  // reduce-scatter and the allgather and times out there while rank 1 still reads its buffers.
  // Rank 0 then overwrites its buffers at once, as a caller reusing them would. Rank 1 adds rank
  // 0's element into each of its own and ends at 2 per entry; reading a reused buffer (2) it
  // ended higher: rank 0's Work had failed while its buffers were being read (a data race to
  // ThreadSanitizer; a use-after-free had the caller freed them).
  struct Outcome {
    std::string errors[2];
    float result = 0;  // the sum of rank 1's elements
    double ms = 0;     // rank 0's wait: as long as rank 1's reduce-scatter, when no timeout cut it
  };
  // Each rank's tensors, kept from run to run: making a million of them took most of the time.
  std::vector<Tensor> made[2];
  auto run = [&made](int64_t count, Duration timeout) {
    Outcome out;
    std::atomic<bool> posted{false};
    run_local(
        2,
        [&](Communicator& c) {
          std::vector<Tensor>& all = made[c.rank()];
          while (static_cast<int64_t>(all.size()) < count) all.push_back(ones({1}));
          std::vector<Tensor> entries(all.begin(), all.begin() + count);
          for (Tensor& e : entries) *e.data_ptr<float>() = 1;
          if (c.rank() == 1) {
            Work work = c.allreduce_grouped(entries);  // under the long timeout
            posted = true;
            out.errors[1] = error_of([&] { work.wait(Duration(60000)); });
            for (const Tensor& e : entries) out.result += *e.data_ptr<float>();
            return;
          }
          // Rank 0 comes to the opening barrier once rank 1 waits there, under the short
          // timeout, which can then only expire at the next barrier.
          while (!posted) std::this_thread::yield();
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          c.set_timeout(timeout);
          Work work = c.allreduce_grouped(entries);
          const auto start = Clock::now();
          out.errors[0] = error_of([&] { work.wait(Duration(60000)); });
          out.ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
          for (Tensor& e : entries) *e.data_ptr<float>() = 2;
        },
        LocalOptions().timeout(Duration(60000)));
    return out;
  };
  // Enough entries to keep rank 1 reducing for 80 ms (sanitizer builds need fewer), and a timeout
  // of an eighth of that: room for a noisy machine on both sides.
  int64_t count = 4096;
  Outcome calibration = run(count, Duration(60000));
  while (calibration.ms < 80 && count < (int64_t{1} << 21)) {
    count *= 2;
    calibration = run(count, Duration(60000));
  }
  REQUIRE(calibration.errors[0] == "");
  REQUIRE(calibration.errors[1] == "");
  REQUIRE(calibration.result == 2 * count);
  const Duration timeout(std::max<int64_t>(1, static_cast<int64_t>(calibration.ms / 8)));
  const std::string expired = "rank 0: allreduce(sum) #1 timed out after " +
                              std::to_string(timeout.count()) + " ms waiting for rank(s) 1";
  int mid_reduction = 0;
  for (int round = 0; round < 5 && mid_reduction < 2; ++round) {
    INFO(count << " entries, " << calibration.ms << " ms to reduce, timeout " << timeout.count()
               << " ms, round " << round);
    Outcome out = run(count, timeout);
    // Every entry reduced from the buffer before its reuse, or none (the collective never opened).
    CHECK((out.result == 2 * count || out.result == count));
    if (out.errors[0] == expired && out.result == 2 * count) {
      CHECK(out.errors[1] == "rank 1: allreduce(sum) #1: communicator aborted: " + expired);
      ++mid_reduction;
    }
  }
  // A round can miss on a loaded machine (rank 1 done within the timeout, or its progress thread
  // later than rank 0 to the opening barrier); not most.
  CHECK(mid_reduction >= 1);
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

TEST_CASE("max and min propagate a NaN whichever rank holds it", "[comm][local]") {
  // std::max(acc, x) keeps acc when x is NaN and std::min likewise: a NaN on rank 1 was dropped
  // and one on rank 0 kept. Element 1 is NaN on one rank; the others reduce as usual.
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (int nan_rank : {0, 1})
      for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
        INFO(dtype_name(dtype) << ", NaN on rank " << nan_rank << ", " << reduce_op_name(op));
        std::vector<std::vector<float>> allreduced(2), scattered(2);
        run_local(2, [&](Communicator& c) {
          const float r = static_cast<float>(c.rank());
          std::vector<float> v{1 + r, 2 + r, 4 - r, 3 - r};
          if (c.rank() == nan_rank) v[1] = NAN;
          Tensor t = from_vector<float>(v).to(dtype);
          c.allreduce(t, op).wait();
          allreduced[c.rank()] = t.to(DType::f32).to_vector<float>();
          Tensor in = from_vector<float>(v).to(dtype), out = empty({2}, dtype);
          c.reduce_scatter(out, in, op).wait();
          scattered[c.rank()] = out.to(DType::f32).to_vector<float>();
        });
        const bool is_max = op == ReduceOp::max;
        for (int rank : {0, 1}) {
          INFO("rank " << rank);
          const auto& a = allreduced[rank];
          REQUIRE(a.size() == 4);
          CHECK(a[0] == (is_max ? 2.f : 1.f));
          CHECK(std::isnan(a[1]));
          CHECK(a[2] == (is_max ? 4.f : 3.f));
          CHECK(a[3] == (is_max ? 3.f : 2.f));
        }
        CHECK(std::isnan(scattered[0][1]));  // rank 0 holds elements 0 and 1
        CHECK(scattered[1][0] == (is_max ? 4.f : 3.f));
      }
}

TEST_CASE(
    "edge input a second probe found: null communicators, non-std throws, huge timeouts, "
    "malformed environment",
    "[comm][local][faults]") {
  // A null communicator was dereferenced; a rank throwing what is not a std::exception ended
  // the process (terminate); both are errors now, and the other ranks fail instead of waiting.
  CHECK(error_of([] { run_group({nullptr}, [](Communicator&) {}); }) ==
        "run_group: communicator 0 is null");
  bool threw = false;
  try {
    parallel::launch(2, [](parallel::Rank& r) {
      if (r.rank() == 1) throw 42;
      r.comm.barrier().wait();
    });
  } catch (...) {
    threw = true;
  }
  CHECK(threw);
  // A timeout of Duration::max() means never: its deadline overflowed, and every collective
  // failed at once.
  std::vector<char> summed(2, 0);  // one element per rank; checked here (Catch is not thread-safe)
  parallel::launch(
      2,
      [&](parallel::Rank& r) {
        Tensor t = full({4}, static_cast<double>(r.rank() + 1));
        r.comm.allreduce(t).wait();
        summed[r.rank()] = equal(t, full({4}, 3.0));
      },
      parallel::LaunchOptions().timeout(Duration::max()));
  CHECK(summed == std::vector<char>{1, 1});
  CHECK(clamp_timeout(Duration::max()) == kMaxTimeout);
  // Settings in the environment parse strictly (atol took "1s" as 1 ms, "abc" as unset).
  struct Env {
    const char* name;
    explicit Env(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
    ~Env() { unsetenv(name); }
  };
  for (const char* bad : {"1s", "abc", "0", "-5", "99999999999999999999"}) {
    Env env("TANDEM_COMM_TIMEOUT_MS", bad);
    CHECK(error_of([] { default_timeout(); }) == std::string("TANDEM_COMM_TIMEOUT_MS='") + bad +
                                                     "' is not a whole number in [1, " +
                                                     std::to_string(INT64_MAX) + "]");
  }
  {
    Env env("TANDEM_COMM_TIMEOUT_MS", "2500");
    CHECK(default_timeout() == Duration(2500));
  }
  CHECK(default_timeout() == std::chrono::minutes(5));
  {
    Env env("TANDEM_NUM_THREADS", "0");
    CHECK_THROWS_AS(default_num_threads(), ValueError);
  }
  // A pool past any machine's cores (100000 threads exhausted the system's for everyone).
  CHECK_THROWS_AS(ThreadPool(kMaxThreads + 1), ValueError);
}

TEST_CASE("allreduce_grouped reduces a tensor named twice once and refuses partial overlaps",
          "[comm][local]") {
  // torch's all_reduce_coalesced([a, a]) over ranks holding 1 and 2: 3 everywhere. (Checked
  // after the ranks' threads: Catch's assertions are not thread-safe.)
  std::vector<float> a_after[2], other_after[2], overlapped_after[2];
  run_local(2, [&](Communicator& c) {
    Tensor a = full({4}, c.rank() + 1.0);
    Tensor other = full({2}, c.rank() + 1.0);
    c.allreduce_grouped({a, other, a}).wait();
    a_after[c.rank()] = a.to_vector<float>();
    other_after[c.rank()] = other.to_vector<float>();
  });
  std::string errors[2];
  run_local(2, [&](Communicator& c) {
    Tensor a = full({6}, c.rank() + 1.0);
    errors[c.rank()] = error_of([&] { c.allreduce_grouped({a.slice(0, 0, 4), a.slice(0, 2, 6)}); });
    overlapped_after[c.rank()] = a.to_vector<float>();
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(a_after[r] == std::vector<float>(4, 3.0f));
    CHECK(other_after[r] == std::vector<float>(2, 3.0f));
    CHECK(overlapped_after[r] == std::vector<float>(6, r + 1.0f));  // nothing reduced
  }
  for (int r = 0; r < 2; ++r)
    CHECK(errors[r] == "rank " + std::to_string(r) +
                           ": allreduce_grouped: tensors 0 and 1 share part of their memory "
                           "(overlapping views of one buffer); their common elements would be "
                           "reduced twice");
}
