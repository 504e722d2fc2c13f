// A small work-sharing pool: the caller and the workers grab chunks from a shared counter, so a
// caller never waits on workers that are busy with another caller's work.
#include "tandem/core/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tandem/core/error.hpp"

namespace tandem {
namespace {

thread_local bool t_in_pool = false;

class Pool {
 public:
  explicit Pool(int threads) { start(threads); }
  ~Pool() { stop(); }

  int threads() const { return threads_; }
  void resize(int threads) {
    stop();
    start(threads);
  }
  void submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void start(int threads) {
    threads_ = threads;
    stopping_ = false;
    for (int i = 0; i + 1 < threads; ++i) workers_.emplace_back([this] { run(); });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }
  void run() {
    t_in_pool = true;
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  int threads_ = 1;
  bool stopping_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> workers_;
};

int default_threads() {
  if (const char* env = std::getenv("TANDEM_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

std::mutex g_pool_mu;
Pool& pool() {
  static Pool p(default_threads());
  return p;
}

// Shared by the caller and the pool tasks of one parallel_for.
struct Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t begin, end, chunks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable cv;
  std::exception_ptr error;

  void work() {
    for (int64_t c; (c = next.fetch_add(1)) < chunks;) {
      int64_t n = end - begin;
      int64_t lo = begin + n * c / chunks, hi = begin + n * (c + 1) / chunks;
      try {
        (*fn)(lo, hi);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
      if (done.fetch_add(1) + 1 == chunks) {
        std::lock_guard<std::mutex> lock(mu);
        cv.notify_all();
      }
    }
  }
};

}  // namespace

void set_num_threads(int n) {
  TANDEM_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (pool().threads() != n) pool().resize(n);
}

int get_num_threads() { return pool().threads(); }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t threads = get_num_threads();
  // Up to 4 chunks per thread, grabbed dynamically: uneven chunks still balance.
  const int64_t chunks = std::min<int64_t>(4 * threads, (n + grain - 1) / grain);
  if (chunks <= 1 || threads <= 1 || t_in_pool) {
    fn(begin, end);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->begin = begin;
  job->end = end;
  job->chunks = chunks;
  for (int64_t i = 1; i < std::min(chunks, threads); ++i) pool().submit([job] { job->work(); });
  // The caller works too; flagged as in-pool so nested parallel_for calls run inline.
  t_in_pool = true;
  job->work();
  t_in_pool = false;
  {
    std::unique_lock<std::mutex> lock(job->mu);
    job->cv.wait(lock, [&] { return job->done.load() == job->chunks; });
  }
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace tandem
