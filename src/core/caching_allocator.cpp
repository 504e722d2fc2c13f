#include "tandem/cuda/caching_allocator.hpp"

#include <algorithm>
#include <tuple>
#include <vector>

#include "tandem/core/error.hpp"

namespace tandem::cuda {

struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  StreamId stream = 0;
  bool small = false;  // from the small pool's segments (2 MiB, requests up to 1 MiB)
  bool allocated = false;
  int pending_events = 0;
  bool lost = false;  // freed, but a stream's use of it could not be ordered: never reused
  Block* prev = nullptr;  // neighbours within the segment (same stream)
  Block* next = nullptr;
  std::set<StreamId> used_on;  // other streams that use it (record_stream)
};

// Best fit: the smallest block of the stream that is large enough, then the lowest address.
bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  return std::make_tuple(a->stream, a->size, reinterpret_cast<uintptr_t>(a->ptr)) <
         std::make_tuple(b->stream, b->size, reinterpret_cast<uintptr_t>(b->ptr));
}

CachingAllocator::Pool& CachingAllocator::pool_of(const Block* block) {
  return block->small ? small_ : large_;
}

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceMemory> memory, std::string device,
                                   bool caching)
    : memory_(std::move(memory)), device_(std::move(device)), caching_(caching) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<Block*> rest;  // the bookkeeping of segments still (partly) in use
  for (auto& [event, block] : pending_) {
    memory_->release_event(event);
    rest.insert(block);
  }
  pending_.clear();
  release_cached();
  for (Pool* pool : {&small_, &large_}) rest.insert(pool->begin(), pool->end());
  for (auto& [ptr, block] : active_) rest.insert(block);
  rest.insert(lost_.begin(), lost_.end());
  for (Block* b : rest) delete b;
}

void* CachingAllocator::allocate(size_t bytes, StreamId stream) {
  const size_t round = caching_ ? kRound : kWord;
  const size_t size = std::max(round, (bytes + round - 1) / round * round);
  std::lock_guard<std::mutex> lock(mu_);
  process_events();
  Block* block = caching_ ? take_from_pool(size, stream) : nullptr;
  if (!block) {
    const bool small = size <= kSmallRequest;
    const size_t segment = !caching_ ? size
                           : small   ? kSmallSegment
                                     : (size + kLargeRound - 1) / kLargeRound * kLargeRound;
    void* ptr = new_segment(segment, bytes);
    block = new Block;
    block->ptr = static_cast<char*>(ptr);
    block->size = segment;
    block->stream = stream;
    block->small = small;
  }
  split(block, size);
  block->allocated = true;
  active_[block->ptr] = block;
  stats_.allocated_bytes += static_cast<int64_t>(block->size);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.active_blocks;
  ++stats_.allocations;
  return block->ptr;
}

CachingAllocator::Block* CachingAllocator::take_from_pool(size_t size, StreamId stream) {
  Pool& pool = size <= kSmallRequest ? small_ : large_;
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

// A segment from the device; out of memory, the cache goes back first and the request is tried
// once more.
void* CachingAllocator::new_segment(size_t segment, size_t requested) {
  void* ptr = memory_->allocate(segment);
  if (!ptr) {
    ++stats_.retries;
    release_cached();
    ptr = memory_->allocate(segment);
  }
  if (!ptr) {
    ++stats_.ooms;
    throw OutOfMemoryError(requested, static_cast<size_t>(stats_.reserved_bytes), device_,
                           __FILE__, __LINE__);
  }
  ++stats_.device_allocs;
  stats_.reserved_bytes += static_cast<int64_t>(segment);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return ptr;
}

// Cuts `block` to `size` when the rest is worth keeping: any rest in the small pool, more than
// a small request's worth in the large one (smaller rests stay with the block: a large segment
// cut into crumbs would serve only small requests, which have their own pool).
void CachingAllocator::split(Block* block, size_t size) {
  const size_t rest = block->size - size;
  if (block->small ? rest < kRound : rest <= kSmallRequest) return;
  Block* tail = new Block;
  tail->ptr = block->ptr + size;
  tail->size = rest;
  tail->stream = block->stream;
  tail->small = block->small;
  tail->prev = block;
  tail->next = block->next;
  if (block->next) block->next->prev = tail;
  block->next = tail;
  block->size = size;
  pool_of(tail).insert(tail);
}

void CachingAllocator::free(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(ptr);
  TANDEM_CHECK_T(ValueError, it != active_.end(), device_,
                 " allocator: free of a pointer it did not allocate (or freed twice)");
  Block* block = it->second;
  active_.erase(it);
  block->allocated = false;
  stats_.allocated_bytes -= static_cast<int64_t>(block->size);
  --stats_.active_blocks;
  if (block->used_on.empty()) return release(block);
  // A device error does not make a free throw (it runs in destructors): when an event cannot be
  // recorded, nothing says when that stream is done with the block, and it is never reused.
  for (StreamId s : block->used_on) {
    try {
      pending_.emplace_back(memory_->record_event(s), block);
      ++block->pending_events;
    } catch (const std::exception&) {
      block->lost = true;
    }
  }
  block->used_on.clear();
  if (block->lost) lost_.push_back(block);
  if (block->pending_events > 0) ++stats_.pending_blocks;
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(ptr);
  TANDEM_CHECK_T(ValueError, it != active_.end(), device_,
                 " allocator: record_stream on a pointer it did not allocate");
  if (stream != it->second->stream) it->second->used_on.insert(stream);
}

bool CachingAllocator::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_.count(const_cast<void*>(ptr)) > 0;
}

void CachingAllocator::release(Block* block) {
  if (!caching_) {  // a segment of its own: back to the device
    memory_->free(block->ptr);
    stats_.reserved_bytes -= static_cast<int64_t>(block->size);
    ++stats_.device_frees;
    delete block;
    return;
  }
  // A neighbour merges when it is free and in its pool: not in use, not waiting for events.
  auto mergeable = [](const Block* b) {
    return b && !b->allocated && b->pending_events == 0 && !b->lost;
  };
  if (mergeable(block->prev)) {
    Block* prev = block->prev;
    pool_of(prev).erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (mergeable(block->next)) {
    Block* next = block->next;
    pool_of(next).erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next) next->next->prev = block;
    delete next;
  }
  pool_of(block).insert(block);
}

// Each block goes back as soon as its last event is done: collected first and released after,
// two neighbours ready together would each look free to the other's merge, and the second
// release would work on a block the first had merged and deleted.
void CachingAllocator::process_events() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (!memory_->event_done(it->first)) {
      ++it;
      continue;
    }
    memory_->release_event(it->first);
    Block* block = it->second;
    it = pending_.erase(it);
    if (--block->pending_events > 0) continue;
    --stats_.pending_blocks;
    if (!block->lost) release(block);
  }
}

void CachingAllocator::release_cached() {
  for (Pool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev || b->next) {  // part of a segment that is partly in use
        ++it;
        continue;
      }
      memory_->free(b->ptr);
      stats_.reserved_bytes -= static_cast<int64_t>(b->size);
      ++stats_.device_frees;
      it = pool->erase(it);
      delete b;
    }
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  process_events();
  release_cached();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace tandem::cuda
