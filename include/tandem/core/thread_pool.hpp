// The CPU thread pool behind every CPU kernel. Chunk boundaries depend on the thread count, so
// kernels that combine partial results (sums) use their own fixed blocking: results are bitwise
// identical with 1 thread or 64.
#pragma once

#include <cstdint>
#include <functional>

namespace tandem {

/// Sets the number of threads CPU kernels use (>= 1). Default: the hardware concurrency.
void set_num_threads(int n);
int get_num_threads();

/// Runs fn(chunk_begin, chunk_end) over [begin, end) split into chunks of at least `grain`
/// indices (at most 4 per thread, taken dynamically), on the pool, and waits. Called from inside
/// a pool task it runs inline. The first exception thrown by any chunk is rethrown here after
/// every chunk has finished.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tandem
