// The execution context: ranks as threads with their own pools compute the bits one rank does,
// pools never deadlock, grad mode and the thread count are per context, guards restore.
// Catch2 assertions are not thread-safe: rank threads record what they see, the test checks it.
#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "../util.hpp"
#include "tandem/comm.hpp"

using namespace tandem;

namespace {

// A conv2d forward + backward, a GEMM and a long sum, from fixed random inputs.
std::vector<Tensor> workload() {
  Generator g(7);
  Tensor x = randn({6, 4, 14, 14}, {}, &g).set_requires_grad();
  Tensor w = mul(randn({12, 4, 3, 3}, {}, &g), 0.2).detach().set_requires_grad();
  Tensor y = conv2d(x, w, Tensor(), 1, 1);
  Tensor loss = sum(mul(y, y));
  loss.backward();
  Tensor gemm = matmul(randn({200, 300}, {}, &g), randn({300, 260}, {}, &g));
  Tensor big = sum(randn({200000}, {}, &g));
  return {y.detach(), loss.detach(), x.grad(), w.grad(), gemm, big};
}

// Runs fn on a thread and waits up to `limit`: a hang fails the test instead of hanging ctest
// (the stuck thread is left behind). Rethrows what fn threw.
bool finishes_within(std::chrono::seconds limit, std::function<void()> fn) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> future = done->get_future();
  std::thread thread([done, fn = std::move(fn)] {
    try {
      fn();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  if (future.wait_for(limit) != std::future_status::ready) {
    thread.detach();
    return false;
  }
  thread.join();
  future.get();
  return true;
}

// Many parallel_for calls, each chunk running a nested parallel_for; returns the cells visited.
int64_t hammer(int rounds) {
  std::atomic<int64_t> visited{0};
  for (int r = 0; r < rounds; ++r)
    parallel_for(0, 64, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        parallel_for(0, 10, 1, [&](int64_t a, int64_t b) { visited += b - a; });
    });
  return visited.load();
}

}  // namespace

TEST_CASE("ranks with one thread each compute the bits of one rank alone", "[context][threads]") {
  const auto alone = workload();  // the main thread, on the default context's pool
  for (int threads : {1, 2}) {
    INFO(threads << " thread(s) per rank");
    std::vector<std::vector<Tensor>> results(2);
    std::vector<int> pool_sizes(2);
    comm::run_group(
        comm::make_local_group(2),
        [&](comm::Communicator& c) {
          pool_sizes[c.rank()] = get_num_threads();
          results[c.rank()] = workload();
        },
        comm::GroupOptions().threads_per_rank(threads));
    for (int r = 0; r < 2; ++r) {
      CHECK(pool_sizes[r] == threads);
      REQUIRE(results[r].size() == alone.size());
      for (size_t i = 0; i < alone.size(); ++i) {
        INFO("rank " << r << ", result " << i);
        CHECK(equal(results[r][i], alone[i]));
      }
    }
  }
}

TEST_CASE("concurrent parallel_for on separate and shared pools never deadlocks",
          "[context][threads]") {
  const int rounds = 1000;
  const int64_t expected = int64_t{rounds} * 64 * 10;
  // Two ranks, each with a 2-thread pool of its own.
  std::vector<int64_t> visited(2, 0);
  REQUIRE(finishes_within(std::chrono::seconds(60), [&] {
    comm::run_group(
        comm::make_local_group(2),
        [&](comm::Communicator& c) { visited[c.rank()] = hammer(rounds); },
        comm::GroupOptions().threads_per_rank(2));
  }));
  CHECK(visited == std::vector<int64_t>{expected, expected});
  // Two threads whose contexts share ONE 2-thread pool.
  auto pool = std::make_shared<ThreadPool>(2);
  std::vector<int64_t> shared(2, 0);
  REQUIRE(finishes_within(std::chrono::seconds(60), [&] {
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
      threads.emplace_back([&, t] {
        ExecutionContext context(kCPU, pool);
        ContextGuard guard(context);
        shared[t] = hammer(rounds);
      });
    for (auto& th : threads) th.join();
  }));
  CHECK(shared == std::vector<int64_t>{expected, expected});
}

TEST_CASE("set_num_threads on one thread while another runs parallel_for on the same pool",
          "[context][threads]") {
  // The thread count was a plain int that resize wrote while parallel_for read it: a data race
  // that ThreadSanitizer reports (the CI job runs this under it). Every call still covers its
  // range exactly once, whatever size the pool has when it starts.
  auto pool = std::make_shared<ThreadPool>(2);
  const int rounds = 300;
  std::atomic<bool> stop{false};
  int64_t visited = 0;
  REQUIRE(finishes_within(std::chrono::seconds(60), [&] {
    std::thread resizer([&] {
      ExecutionContext context(kCPU, pool);
      ContextGuard guard(context);
      for (int i = 0; !stop.load(); ++i) set_num_threads(1 + i % 3);
    });
    {
      ExecutionContext context(kCPU, pool);
      ContextGuard guard(context);
      visited = hammer(rounds);
    }
    stop = true;
    resizer.join();
  }));
  CHECK(visited == int64_t{rounds} * 64 * 10);
}

TEST_CASE("each context has its own grad mode", "[context]") {
  // Rank 0 turns grad mode off while rank 1 records a graph.
  std::vector<int> mode_inside(2, -1), mode_after(2, -1), records(2, -1);
  comm::run_group(comm::make_local_group(2), [&](comm::Communicator& c) {
    const int r = c.rank();
    {
      std::unique_ptr<NoGradGuard> guard;
      if (r == 0) guard = std::make_unique<NoGradGuard>();
      c.barrier().wait();  // rank 0's guard is up
      mode_inside[r] = grad_mode_enabled();
      records[r] = mul(ones({3}).set_requires_grad(), 2.0).requires_grad();
      c.barrier().wait();
    }
    mode_after[r] = grad_mode_enabled();
  });
  CHECK(mode_inside == std::vector<int>{0, 1});
  CHECK(records == std::vector<int>{0, 1});
  CHECK(mode_after == std::vector<int>{1, 1});
  CHECK(grad_mode_enabled());

  // Threads without a context share the default one but not its grad mode.
  {
    NoGradGuard guard;
    bool other = false;
    std::thread([&] { other = grad_mode_enabled(); }).join();
    CHECK(other);
    CHECK_FALSE(grad_mode_enabled());
  }
  CHECK(grad_mode_enabled());

  // Pool workers running a chunk see the caller's context, so its grad mode too.
  ExecutionContext context(kCPU, std::make_shared<ThreadPool>(2));
  ContextGuard guard(context);
  NoGradGuard no_grad;
  std::atomic<int> chunks_with_grad{0}, chunks_elsewhere{0};
  for (int round = 0; round < 20; ++round)
    parallel_for(0, 8, 1, [&](int64_t, int64_t) {
      if (grad_mode_enabled()) ++chunks_with_grad;
      if (&current_context() != &context) ++chunks_elsewhere;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
  CHECK(chunks_with_grad == 0);
  CHECK(chunks_elsewhere == 0);
}

TEST_CASE("a thread without a context sees the default, ContextGuard restores",
          "[context][gpu]") {
  ExecutionContext* seen = nullptr;
  std::thread([&] { seen = &current_context(); }).join();
  CHECK(seen == &default_context());
  CHECK(&current_context() == &default_context());
  CHECK(default_context().is_default());
  CHECK(default_context().device() == kCPU);
  CHECK(default_context().pool().num_threads() == get_num_threads());

  ExecutionContext outer(kCPU, std::make_shared<ThreadPool>(1));
  ExecutionContext inner;  // shares the default pool
  CHECK(&inner.pool() == &default_context().pool());
  CHECK_FALSE(inner.is_default());
  {
    ContextGuard g1(outer);
    CHECK(&current_context() == &outer);
    CHECK(get_num_threads() == 1);
    {
      ContextGuard g2(inner);
      CHECK(&current_context() == &inner);
    }
    CHECK(&current_context() == &outer);
  }
  CHECK(&current_context() == &default_context());

  // No CUDA stream exists on a CPU context; nothing CUDA is made until a stream is asked for.
  CHECK_THROWS_AS(outer.compute_stream(), ValueError);
  ExecutionContext gpu(Device("cuda:0"), std::make_shared<ThreadPool>(1));
  CHECK(gpu.device() == Device("cuda:0"));
  if (!cuda::is_available()) CHECK_THROWS_AS(gpu.comm_stream(), Error);
  CHECK_THROWS_AS(ThreadPool(0), ValueError);
}

TEST_CASE("run_group slices the cores, set_num_threads changes only this rank's pool",
          "[context][comm]") {
  const int main_threads = get_num_threads();
  const int world = 2;
  std::vector<int> sliced(world), after(world);
  std::vector<Device> devices(world);
  comm::run_group(comm::make_local_group(world), [&](comm::Communicator& c) {
    sliced[c.rank()] = get_num_threads();
    devices[c.rank()] = current_context().device();
  });
  const int slice = std::max(1, default_num_threads() / world);
  CHECK(sliced == std::vector<int>{slice, slice});
  CHECK(devices == std::vector<Device>{kCPU, kCPU});

  comm::run_group(
      comm::make_local_group(world),
      [&](comm::Communicator& c) {
        if (c.rank() == 0) set_num_threads(3);
        c.barrier().wait();
        after[c.rank()] = get_num_threads();
      },
      comm::GroupOptions().threads_per_rank(1));
  CHECK(after == std::vector<int>{3, 1});
  CHECK(get_num_threads() == main_threads);
  // run_local passes the same options on.
  std::vector<int> local_sizes(world);
  comm::run_local(
      world, [&](comm::Communicator& c) { local_sizes[c.rank()] = get_num_threads(); }, {},
      comm::GroupOptions().threads_per_rank(3));
  CHECK(local_sizes == std::vector<int>{3, 3});
  CHECK_THROWS_AS(comm::run_group(
                      comm::make_local_group(1), [](comm::Communicator&) {},
                      comm::GroupOptions().threads_per_rank(-1)),
                  ValueError);
}

TEST_CASE("new tensors take the current context's device unless one is asked for",
          "[context][gpu]") {
  ExecutionContext gpu_rank(Device("cuda:0"), std::make_shared<ThreadPool>(1));
  {
    ContextGuard guard(gpu_rank);
    CHECK(TensorOptions().device() == Device("cuda:0"));
    CHECK(TensorOptions(DType::f64).device() == Device("cuda:0"));
    CHECK(TensorOptions().device(kCPU).device() == kCPU);
    CHECK(zeros({2}, TensorOptions().device(kCPU)).device() == kCPU);
    if (!cuda::is_available()) {
      // No GPU here: the factory tried the context's device, not an implicit CPU.
      CHECK_THROWS_AS(zeros({2}), Error);
    } else {
      CHECK(zeros({2}).device() == Device("cuda:0"));
    }
  }
  CHECK(TensorOptions().device() == kCPU);
  CHECK(zeros({2}).device() == kCPU);
}

TEST_CASE("from_vector builds on the CPU whatever the context's device", "[core]") {
  // A GPU rank's thread runs under a CUDA context; from_vector writes its values from the host,
  // so its tensor must not follow the context there (no GPU is touched: streams are lazy).
  ExecutionContext on_gpu(Device(DeviceType::cuda, 0));
  ContextGuard guard(on_gpu);
  REQUIRE(TensorOptions().device() == Device(DeviceType::cuda, 0));  // what the others follow
  Tensor f = from_vector<float>({1.5f, -2.0f});
  CHECK(f.device() == kCPU);
  CHECK(f.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  Tensor b = from_vector<bool>({true, false, true});
  CHECK(b.device() == kCPU);
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, false, true});
}
