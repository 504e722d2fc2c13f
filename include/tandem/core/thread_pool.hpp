// The CPU thread pool behind every CPU kernel; each execution context owns (or shares) one.
// Chunk boundaries depend on the thread count, so kernels that combine partial results (sums) use
// their own fixed blocking: results are bitwise identical with 1 thread or 64.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace tandem {

/// The most threads a pool takes: past any machine's cores, and far below where asking the
/// system for threads would exhaust it for every other process.
inline constexpr int kMaxThreads = 4096;

/// A work-sharing pool of `num_threads()` threads: the calling thread plus num_threads() - 1
/// workers. Several threads may call parallel_for on one pool at once.
class ThreadPool {
 public:
  /// A pool of `threads` in [1, kMaxThreads] threads (threads - 1 workers).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const;
  /// Changes the thread count (in [1, kMaxThreads]); not from inside one of this pool's chunks.
  void resize(int threads);

  /// Runs fn(chunk_begin, chunk_end) over [begin, end) split into min(4 * num_threads(),
  /// ceil((end - begin) / grain)) chunks (taken dynamically, the caller working too), and waits.
  /// Called from inside a chunk of any pool it runs inline. The first exception thrown by any
  /// chunk is rethrown here after every chunk has finished. Chunks see the caller's context.
  void parallel_for(int64_t begin, int64_t end, int64_t grain,
                    const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// TANDEM_NUM_THREADS when set (> 0), else the hardware concurrency (at least 1): the size of the
/// default context's pool, and the cores `comm::run_group` slices among its ranks.
int default_num_threads();

/// Sets the number of threads of the CURRENT context's pool (>= 1). Every context sharing that
/// pool sees the change; a rank started by `comm::run_group` has a pool of its own.
void set_num_threads(int n);
/// The number of threads of the current context's pool.
int get_num_threads();

/// `current_context().pool().parallel_for(begin, end, grain, fn)`: see ThreadPool::parallel_for.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tandem
