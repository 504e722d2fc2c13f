// The CUDA caching allocator's bookkeeping, on a fake device: addresses without memory behind
// them, a capacity, and events a test completes by hand.
#include <stdexcept>
#include <map>

#include "../util.hpp"
#include "tandem/cuda/caching_allocator.hpp"

using namespace tandem;
using cuda::CachingAllocator;

namespace {

constexpr size_t kMiB = 1 << 20;

struct FakeDevice : cuda::DeviceMemory {
  size_t capacity, used = 0;
  uintptr_t next_address = 1 << 30;
  std::map<uintptr_t, size_t> live;
  std::map<uintptr_t, std::pair<cuda::StreamId, bool>> events;  // id -> (stream, done)
  uintptr_t next_event = 1;
  int* frees;  // counts DeviceMemory::free calls (outlives the allocator)

  FakeDevice(size_t cap, int* free_count) : capacity(cap), frees(free_count) {}
  void* allocate(size_t bytes) override {
    if (used + bytes > capacity) return nullptr;
    used += bytes;
    const uintptr_t a = next_address;
    next_address += bytes + 4096;  // segments never touch: a merge across them would show
    live[a] = bytes;
    return reinterpret_cast<void*>(a);
  }
  void free(void* p) override {
    auto it = live.find(reinterpret_cast<uintptr_t>(p));
    REQUIRE(it != live.end());
    used -= it->second;
    live.erase(it);
    ++*frees;
  }
  bool broken = false;  // a device in error: recording an event throws
  uintptr_t record_event(cuda::StreamId s) override {
    if (broken) throw std::runtime_error("CUDA error cudaErrorLaunchFailure");
    events[next_event] = {s, false};
    return next_event++;
  }
  bool event_done(uintptr_t e) override { return events.at(e).second; }
  void release_event(uintptr_t e) override { events.erase(e); }
  // Everything queued on `s` so far has finished.
  void finish(cuda::StreamId s) {
    for (auto& [id, ev] : events)
      if (ev.first == s) ev.second = true;
  }
};

struct Fixture {
  int frees = 0;
  FakeDevice* device;
  std::unique_ptr<CachingAllocator> alloc;
  explicit Fixture(size_t capacity = 64 * kMiB, bool caching = true) {
    auto d = std::make_unique<FakeDevice>(capacity, &frees);
    device = d.get();
    alloc = std::make_unique<CachingAllocator>(std::move(d), "cuda:0", caching);
  }
};

uintptr_t addr(void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

TEST_CASE("caching allocator: freed blocks are reused, small requests share a segment", "[cuda_alloc]") {
  Fixture f;
  void* a = f.alloc->allocate(1000, 0);
  f.alloc->free(a);
  CHECK(f.alloc->allocate(1000, 0) == a);  // the same block again, no new cudaMalloc
  void* b = f.alloc->allocate(100 * 1024, 0);
  // Both from one 2 MiB segment, rounded to 512 bytes: b right after a's 1024 bytes.
  CHECK(addr(b) == addr(a) + 1024);
  auto s = f.alloc->stats();
  CHECK(s.device_allocs == 1);
  CHECK(s.reserved_bytes == 2 * kMiB);
  CHECK(s.allocated_bytes == 1024 + 100 * 1024);
  CHECK(s.active_blocks == 2);
  CHECK(s.allocations == 3);  // a, a again, b
  CHECK_THROWS_AS(f.alloc->free(reinterpret_cast<void*>(12345)), ValueError);
}

TEST_CASE("caching allocator: large blocks split and merge back", "[cuda_alloc]") {
  Fixture f;
  void* whole = f.alloc->allocate(6 * kMiB, 0);
  f.alloc->free(whole);
  void* head = f.alloc->allocate(2 * kMiB, 0);  // from the cached 6 MiB: split 2 + 4
  void* tail = f.alloc->allocate(4 * kMiB, 0);
  CHECK(head == whole);
  CHECK(addr(tail) == addr(whole) + 2 * kMiB);
  CHECK(f.alloc->stats().device_allocs == 1);
  // A rest of 1 MiB or less stays with the block (no crumbs in the large pool).
  f.alloc->free(tail);
  void* most = f.alloc->allocate(3 * kMiB + 512, 0);
  CHECK(most == tail);
  CHECK(f.alloc->stats().allocated_bytes == static_cast<int64_t>(6 * kMiB));
  f.alloc->free(most);
  f.alloc->free(head);  // merges with its free neighbour: 6 MiB in one block again
  CHECK(f.alloc->allocate(6 * kMiB, 0) == whole);
  CHECK(f.alloc->stats().device_allocs == 1);
}

TEST_CASE("caching allocator: blocks belong to their stream", "[cuda_alloc]") {
  Fixture f;
  const cuda::StreamId compute = 7, comm = 9;
  void* a = f.alloc->allocate(4096, compute);
  f.alloc->free(a);
  void* b = f.alloc->allocate(4096, comm);  // not a's block: it is cached for `compute`
  CHECK(b != a);
  CHECK(f.alloc->stats().device_allocs == 2);
  CHECK(f.alloc->allocate(4096, compute) == a);
}

TEST_CASE("caching allocator: a block used on another stream waits for that stream's event",
          "[cuda_alloc]") {
  Fixture f;
  const cuda::StreamId compute = 7, comm = 9;
  void* bucket = f.alloc->allocate(8 * kMiB, compute);
  f.alloc->record_stream(bucket, comm);     // an allreduce reads it on the comm stream
  f.alloc->record_stream(bucket, compute);  // its own stream: nothing to wait for
  f.alloc->free(bucket);
  CHECK(f.device->events.size() == 1);
  CHECK(f.alloc->stats().pending_blocks == 1);
  void* other = f.alloc->allocate(8 * kMiB, compute);  // the comm stream may still read it
  CHECK(other != bucket);
  f.alloc->free(other);
  f.device->finish(comm);
  CHECK(f.alloc->allocate(8 * kMiB, compute) == bucket);  // back, and first: the lower address
  CHECK(f.alloc->allocate(8 * kMiB, compute) == other);
  CHECK(f.device->events.empty());
  CHECK(f.alloc->stats().pending_blocks == 0);
  CHECK(f.alloc->stats().device_allocs == 2);
}

TEST_CASE("caching allocator: out of memory releases the cache, retries, then says what it holds",
          "[cuda_alloc]") {
  Fixture f(10 * kMiB);
  void* a = f.alloc->allocate(4 * kMiB, 0);
  f.alloc->free(a);  // cached: 4 MiB reserved, none allocated
  void* b = f.alloc->allocate(8 * kMiB, 0);  // 4 + 8 > 10: release the cache, retry
  auto s = f.alloc->stats();
  CHECK(s.retries == 1);
  CHECK(s.device_frees == 1);
  CHECK(f.frees == 1);
  CHECK(s.reserved_bytes == static_cast<int64_t>(8 * kMiB));
  CHECK(s.peak_reserved_bytes == static_cast<int64_t>(8 * kMiB));
  try {
    f.alloc->allocate(6 * kMiB, 0);
    FAIL("no OutOfMemoryError");
  } catch (const OutOfMemoryError& e) {
    CHECK(e.requested_bytes() == 6 * kMiB);
    CHECK(e.held_bytes() == 8 * kMiB);
    CHECK(e.device() == "cuda:0");
    CHECK(std::string(e.what()).find("out of memory: asked for 6.00 MiB (6291456 bytes), the allocator holds 8.00 MiB") != std::string::npos);
  }
  CHECK(f.alloc->stats().ooms == 1);
  // Still usable: free b, and the 6 MiB fits in its cached segment.
  f.alloc->free(b);
  CHECK(f.alloc->allocate(6 * kMiB, 0) == b);
}

TEST_CASE("caching allocator: statistics and empty_cache", "[cuda_alloc]") {
  Fixture f;
  std::vector<void*> blocks;
  for (size_t n : {size_t{100}, size_t{3000}, 3 * kMiB, 5 * kMiB}) blocks.push_back(f.alloc->allocate(n, 0));
  auto s = f.alloc->stats();
  CHECK(s.allocated_bytes == static_cast<int64_t>(512 + 3072 + 4 * kMiB + 6 * kMiB));  // 3 MiB: rest of 1 MiB kept
  CHECK(s.reserved_bytes == static_cast<int64_t>(2 * kMiB + 4 * kMiB + 6 * kMiB));
  CHECK(s.device_allocs == 3);
  const int64_t peak = s.allocated_bytes;
  f.alloc->free(blocks[2]);
  f.alloc->empty_cache();  // the 4 MiB segment is wholly free: back to the device
  s = f.alloc->stats();
  CHECK(s.reserved_bytes == static_cast<int64_t>(2 * kMiB + 6 * kMiB));
  CHECK(s.peak_allocated_bytes == peak);
  for (void* p : {blocks[0], blocks[1], blocks[3]}) f.alloc->free(p);
  f.alloc->empty_cache();
  s = f.alloc->stats();
  CHECK(s.reserved_bytes == 0);
  CHECK(s.allocated_bytes == 0);
  CHECK(f.device->live.empty());
}

TEST_CASE("caching allocator as the pinned host cache: a staging buffer an async copy read is "
          "reused once the copy's stream is past it, and owns() knows its blocks",
          "[cuda_alloc]") {
  // As src/cuda/runtime.cpp uses it for pinned memory: every block allocated for the host
  // writer (stream 0), each copy to GPU d marking the block used on "stream" d + 1.
  Fixture f;
  const cuda::StreamId host = 0, gpu0 = 1;
  void* a = f.alloc->allocate(400 * 1024, host);
  CHECK(f.alloc->owns(a));
  CHECK_FALSE(f.alloc->owns(static_cast<char*>(a) + 512));  // inside a block, not its start
  f.alloc->record_stream(a, gpu0);  // the copy to cuda:0 reads it
  f.alloc->free(a);
  CHECK_FALSE(f.alloc->owns(a));
  void* b = f.alloc->allocate(400 * 1024, host);  // the next batch: not the block in flight
  CHECK(b != a);
  f.device->finish(gpu0);
  f.alloc->free(b);
  // Both back in the small pool's one segment: later batches cost no new host allocation.
  for (int i = 0; i < 10; ++i) {
    void* p = f.alloc->allocate(400 * 1024, host);
    f.alloc->record_stream(p, gpu0);
    f.alloc->free(p);
    f.device->finish(gpu0);
  }
  CHECK(f.alloc->stats().device_allocs == 1);
}

TEST_CASE("caching allocator: neighbours whose events finish together merge once", "[cuda_alloc]") {
  // Found by the CUDA emulation (the loader's pinned staging): two blocks of one segment, each
  // waiting for the same stream's event, both ready in one pass. Releasing the first merged the
  // second before the second's own release, which then worked on a deleted block.
  Fixture f;
  const cuda::StreamId host = 0, gpu0 = 1;
  void* a = f.alloc->allocate(400 * 1024, host);
  void* b = f.alloc->allocate(400 * 1024, host);
  void* c = f.alloc->allocate(400 * 1024, host);
  REQUIRE(addr(b) == addr(a) + 400 * 1024);
  for (void* p : {a, b, c}) f.alloc->record_stream(p, gpu0);
  for (void* p : {c, a, b}) f.alloc->free(p);
  CHECK(f.alloc->stats().pending_blocks == 3);
  f.device->finish(gpu0);
  // One pass over the events gives the whole segment back, as one block: two 1 MiB requests fit.
  CHECK(f.alloc->allocate(kMiB, host) == a);
  CHECK(f.alloc->stats().pending_blocks == 0);
  CHECK(f.alloc->allocate(kMiB, host) == static_cast<char*>(a) + kMiB);
  CHECK(f.alloc->stats().active_blocks == 2);
  CHECK(f.alloc->stats().device_allocs == 1);
}

TEST_CASE("caching allocator: a free on a broken device does not throw, and the block whose "
          "other-stream use cannot be ordered is never handed out again",
          "[cuda_alloc]") {
  Fixture f;
  void* a = f.alloc->allocate(8 * kMiB, 7);
  f.alloc->record_stream(a, 9);
  f.device->broken = true;
  CHECK_NOTHROW(f.alloc->free(a));
  f.device->broken = false;
  for (int i = 0; i < 3; ++i) {
    void* b = f.alloc->allocate(8 * kMiB, 7);
    CHECK(b != a);
    f.alloc->free(b);
  }
  CHECK(f.alloc->stats().pending_blocks == 0);
  CHECK(f.alloc->stats().active_blocks == 0);
}

TEST_CASE("caching allocator without caching (TANDEM_NO_CUDA_MEMORY_CACHING): each block its own "
          "device allocation of the bytes asked for (to 4), given back when freed, after the "
          "events of the streams that used it",
          "[cuda_alloc]") {
  Fixture f(64 * kMiB, /*caching=*/false);
  const cuda::StreamId compute = 7, comm = 8;
  void* a = f.alloc->allocate(1000, compute);
  void* b = f.alloc->allocate(3 * kMiB + 1, compute);
  // Not rounded to 512 bytes: an access past the tensor is past memory (to the 32-bit word).
  CHECK(f.device->live.at(addr(a)) == 1000);
  CHECK(f.device->live.at(addr(b)) == 3 * kMiB + 4);
  CHECK(f.alloc->allocate(0, compute) != nullptr);  // an empty tensor still gets an address
  auto s = f.alloc->stats();
  CHECK(s.device_allocs == 3);
  CHECK(s.allocated_bytes == static_cast<int64_t>(1000 + 3 * kMiB + 4 + 4));
  CHECK(s.reserved_bytes == s.allocated_bytes);
  f.alloc->free(a);
  CHECK(f.frees == 1);  // at once: no other stream used it
  CHECK(f.device->live.count(addr(a)) == 0);
  void* c = f.alloc->allocate(1000, compute);  // a new allocation, never the freed block's
  CHECK(f.alloc->stats().device_allocs == 4);
  (void)c;
  f.alloc->record_stream(b, comm);  // the communication stream reads it
  f.alloc->free(b);
  CHECK(f.frees == 1);  // held until the communication stream is past it
  CHECK(f.alloc->stats().pending_blocks == 1);
  f.alloc->allocate(10, compute);  // events are looked at when a block is asked for
  CHECK(f.frees == 1);
  f.device->finish(comm);
  f.alloc->allocate(10, compute);
  CHECK(f.frees == 2);
  CHECK(f.device->live.count(addr(b)) == 0);
  s = f.alloc->stats();
  CHECK(s.pending_blocks == 0);
  CHECK(s.device_frees == 2);
  CHECK(s.reserved_bytes == s.allocated_bytes);
  f.alloc->empty_cache();  // nothing cached: nothing changes
  CHECK(f.frees == 2);
}
