// The stream-aware caching allocator behind every CUDA device (PyTorch's CUDACachingAllocator,
// reduced to what tandem needs): device memory is taken in segments and kept; a request is served
// by the best-fitting cached block of its stream, split when much larger; freed blocks merge with
// free neighbours; a block used on another stream (record_stream: the communication stream reading
// a gradient bucket) is not reused until an event on that stream says it is done; out of memory,
// the cache is released and the request tried once more. The device side is an interface, so the
// bookkeeping is tested on the CPU with a fake device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace tandem::cuda {

/// A stream as the allocator sees it: a cudaStream_t's value (0: the legacy default stream).
using StreamId = uintptr_t;

/// What the allocator needs of a device: raw memory and stream events. The CUDA backend
/// implements it with cudaMalloc, cudaFree and cudaEvent*.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  /// `bytes` of device memory, or nullptr when the device has no more.
  virtual void* allocate(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  /// An event recorded now on `stream`, done once the work queued on it so far has finished.
  virtual uintptr_t record_event(StreamId stream) = 0;
  virtual bool event_done(uintptr_t event) = 0;
  virtual void release_event(uintptr_t event) = 0;
};

struct AllocatorStats {
  int64_t allocated_bytes = 0;       // in blocks handed out (rounded sizes)
  int64_t reserved_bytes = 0;        // held from the device: allocated + cached
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t device_allocs = 0;         // successful DeviceMemory::allocate calls (cudaMalloc)
  int64_t device_frees = 0;
  int64_t retries = 0;               // requests that released the cache and tried again
  int64_t ooms = 0;                  // requests that failed after that
  int64_t active_blocks = 0;
  int64_t pending_blocks = 0;        // freed, waiting for another stream's event
  int64_t allocations = 0;           // blocks handed out, ever (cached or new: every request)
};

class CachingAllocator {
 public:
  static constexpr size_t kRound = 512;               // every block a multiple of this
  static constexpr size_t kSmallRequest = 1 << 20;    // up to 1 MiB: from the small pool
  static constexpr size_t kSmallSegment = 2 << 20;    // whose segments are 2 MiB
  static constexpr size_t kLargeRound = 2 << 20;      // large segments: multiples of 2 MiB
  /// Without caching, blocks are multiples of this: a byte-wide atomic (u8 index_add) works on
  /// the aligned 32-bit word that holds its byte, which must lie inside the allocation.
  static constexpr size_t kWord = 4;

  /// `device` names the device in errors ("cuda:0"). With `caching` false, every block is a
  /// device allocation of its own, of the bytes asked for (rounded up to kWord), given back to
  /// the device when freed (once the streams it was used on are done with it): PyTorch's
  /// PYTORCH_NO_CUDA_MEMORY_CACHING, for compute-sanitizer and AddressSanitizer, which then see
  /// an access past any block, not only past a segment. A cudaMalloc and a cudaFree per block.
  CachingAllocator(std::unique_ptr<DeviceMemory> memory, std::string device, bool caching = true);
  /// Gives back every cached segment (blocks still in use are the process's to end with).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `bytes` for use on `stream`. Throws OutOfMemoryError (what was asked
  /// for, what the allocator holds) when the device has no room even after the cache is released.
  void* allocate(size_t bytes, StreamId stream);
  /// Returns a block: cached for its stream at once, or, when record_stream named other streams,
  /// once events recorded now on each of them have completed.
  void free(void* ptr);
  /// Marks the block at `ptr` as used on `stream` too (besides the one it was allocated on).
  void record_stream(void* ptr, StreamId stream);
  /// True when `ptr` is the start of a block this allocator handed out and not yet freed.
  bool owns(const void* ptr) const;
  /// Gives every cached segment that holds no block in use back to the device.
  void empty_cache();
  AllocatorStats stats() const;

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySize>;

  Pool& pool_of(const Block* block);
  Block* take_from_pool(size_t size, StreamId stream);
  void* new_segment(size_t bytes, size_t size);
  void split(Block* block, size_t size);
  void release(Block* block);  // back to its pool, merged with free neighbours
  void process_events();
  void release_cached();

  std::unique_ptr<DeviceMemory> memory_;
  std::string device_;
  bool caching_;
  mutable std::mutex mu_;
  Pool small_, large_;
  std::unordered_map<void*, Block*> active_;
  std::deque<std::pair<uintptr_t, Block*>> pending_;  // (event, block it holds back)
  std::vector<Block*> lost_;  // freed on a device in error: never reused (their bookkeeping)
  AllocatorStats stats_;
};

}  // namespace tandem::cuda
