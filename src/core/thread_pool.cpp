// A small work-sharing pool: the caller and the workers each run their own share of a call's
// chunks, then grab the rest from a shared counter, so a caller never waits on workers that are
// busy with another caller's work.
#include "tandem/core/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "tandem/core/context.hpp"
#include "tandem/core/env.hpp"
#include "tandem/core/error.hpp"

namespace tandem {
namespace {

// How long a worker looks for the next task, and a caller for its job's last chunk, before
// sleeping: a training step runs hundreds of parallel_for calls microseconds apart, and a
// wake-up through the kernel costs tens of microseconds each time (more under a hypervisor).
constexpr std::chrono::microseconds kSpin{100};

// Calls done() until it is true or kSpin has passed; true when done() became true.
template <typename F>
bool spin_until(F&& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (done()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

// True on pool workers, and on a caller while it works on its own chunks: a parallel_for from
// inside a chunk (of any pool) runs inline, so no chunk ever waits on another pool's work.
thread_local bool t_in_pool = false;

// Shared by the caller and the pool tasks of one parallel_for. Participant p (the caller is 0)
// runs its own share of the chunks first, the same share of the range in every call of the
// same size, so data one call leaves in a core's cache is read there by the next (OpenMP's
// static schedule gives PyTorch that); then it takes any chunk still left, so a participant
// that starts late, or a worker busy with another caller's job, holds nobody up.
struct Job {
  const std::function<void(int64_t, int64_t)>* fn;
  ExecutionContext* context;  // the caller's explicit context (null: the default)
  int64_t begin, end, chunks, participants;
  std::unique_ptr<std::atomic<bool>[]> taken;  // value-initialized: none taken
  std::atomic<int64_t> next{0};                // where the search for chunks left goes on
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable cv;
  std::exception_ptr error;

  void work(int64_t p) {
    for (int64_t c = p * chunks / participants; c < (p + 1) * chunks / participants; ++c) run(c);
    // The rest from the last chunk back: each share's owner runs it from its front.
    for (int64_t k; (k = next.fetch_add(1)) < chunks;) run(chunks - 1 - k);
  }

 private:
  void run(int64_t c) {
    if (taken[c].exchange(true, std::memory_order_acq_rel)) return;
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
};

}  // namespace

struct ThreadPool::Impl {
  std::atomic<int> threads{1};
  std::mutex resize_mu;  // serializes resize()
  std::mutex mu;         // guards stopping and queue
  std::condition_variable cv;
  bool stopping = false;
  std::deque<std::function<void()>> queue;
  std::atomic<size_t> queued{0};  // queue.size() (and 1 when stopping), for the spinning look
  std::vector<std::thread> workers;

  void start(int n) {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = false;
      queued = queue.size();
    }
    threads = n;
    for (int i = 0; i + 1 < n; ++i) {
      try {
        workers.emplace_back([this] { run(); });
      } catch (const std::system_error& e) {  // the system's thread limit: none left behind
        stop();
        threads = 1;
        TANDEM_THROW(Error, "ThreadPool: cannot start worker ", i + 1, " of ", n - 1, " (",
                     e.what(), "); ask for fewer threads");
      }
    }
  }
  // Workers drain the queue before they exit; a task queued after that finds its job done,
  // because the caller works on its own chunks until none is left.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
      queued.fetch_add(1);
    }
    cv.notify_all();
    for (auto& w : workers) w.join();
    workers.clear();
  }
  void submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(std::move(task));
      queued.fetch_add(1, std::memory_order_release);
    }
    cv.notify_one();
  }
  void run() {
    t_in_pool = true;
    for (;;) {
      std::function<void()> task;
      spin_until([this] { return queued.load(std::memory_order_acquire) > 0; });
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [this] { return stopping || !queue.empty(); });
        if (queue.empty()) return;  // stopping and drained
        task = std::move(queue.front());
        queue.pop_front();
        queued.fetch_sub(1, std::memory_order_relaxed);
      }
      task();
    }
  }
};

ThreadPool::ThreadPool(int threads) : impl_(std::make_unique<Impl>()) {
  TANDEM_CHECK(threads >= 1 && threads <= kMaxThreads, "ThreadPool: expected 1 to ", kMaxThreads,
               " threads, got ", threads);
  impl_->start(threads);
}

ThreadPool::~ThreadPool() { impl_->stop(); }

int ThreadPool::num_threads() const { return impl_->threads.load(std::memory_order_relaxed); }

void ThreadPool::resize(int threads) {
  TANDEM_CHECK(threads >= 1 && threads <= kMaxThreads, "set_num_threads: expected 1 to ",
               kMaxThreads, " threads, got ", threads);
  TANDEM_CHECK(!t_in_pool, "set_num_threads: called from inside a parallel_for chunk");
  std::lock_guard<std::mutex> lock(impl_->resize_mu);
  if (num_threads() == threads) return;
  impl_->stop();
  impl_->start(threads);
}

void ThreadPool::parallel_for(int64_t begin, int64_t end, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t threads = num_threads();
  // Up to 4 chunks per thread, grabbed dynamically: uneven chunks still balance.
  const int64_t chunks = std::min<int64_t>(4 * threads, (n + grain - 1) / grain);
  if (chunks <= 1 || threads <= 1 || t_in_pool) {
    fn(begin, end);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->context = detail::current_context_or_null();
  job->begin = begin;
  job->end = end;
  job->chunks = chunks;
  job->participants = std::min(chunks, threads);
  job->taken.reset(new std::atomic<bool>[static_cast<size_t>(chunks)]());
  for (int64_t i = 1; i < job->participants; ++i)
    impl_->submit([job, i] {
      // The caller's context is current while its chunks run (it outlives them: the caller
      // waits for every chunk; a task that finds none left runs nothing under it).
      ExecutionContext* previous = detail::exchange_current_context(job->context);
      job->work(i);
      detail::exchange_current_context(previous);
    });
  // The caller works too; flagged as in-pool so nested parallel_for calls run inline.
  t_in_pool = true;
  job->work(0);
  t_in_pool = false;
  if (!spin_until([&] { return job->done.load(std::memory_order_acquire) == job->chunks; })) {
    std::unique_lock<std::mutex> lock(job->mu);
    job->cv.wait(lock, [&] { return job->done.load() == job->chunks; });
  }
  // Taken out of the job, which a worker may be the last to release: the exception is this
  // thread's alone (ThreadSanitizer cannot see libstdc++'s count of its owners).
  if (std::exception_ptr error = std::move(job->error)) std::rethrow_exception(error);
}

int default_num_threads() {
  if (auto n = positive_env("TANDEM_NUM_THREADS", kMaxThreads)) return static_cast<int>(*n);
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

void set_num_threads(int n) { current_context().pool().resize(n); }

int get_num_threads() { return current_context().pool().num_threads(); }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  current_context().pool().parallel_for(begin, end, grain, fn);
}

}  // namespace tandem
