// The CUDA emulation's runtime: the kernel scheduler behind emu.hpp, the streams, and the CUDA
// runtime API calls tandem makes, on the CPU. Device memory is host memory (exact-size
// allocations, so AddressSanitizer sees a kernel's access past a cudaMalloc'd segment; not one
// inside a segment the caching allocator carves into blocks, unless
// TANDEM_NO_CUDA_MEMORY_CACHING=1 makes every tensor a cudaMalloc of its own), and
// TANDEM_CUDA_EMU_DEVICES (default 1) devices of TANDEM_CUDA_EMU_MEMORY_MB (default 4096) MiB
// each are visible (with 0, every call that needs a device fails with cudaErrorNoDevice).
//
// A stream runs its work in issue order. Work given to an idle stream runs at once on the
// calling thread (kernels, copies and events mostly do); work behind something still running or
// waiting queues, and the stream's own thread runs it in order. What waits for another thread
// (cudaStreamWaitEvent on an event not yet reached, an NCCL collective waiting for its peers)
// always queues, so the host goes on while the stream's later work waits behind it, as on a GPU:
// events are done when the stream reaches them, and a copy into pageable memory, a synchronous
// cudaMemcpy, cudaStreamSynchronize and cudaFree wait for the stream(s) they must. Simpler than
// CUDA: the legacy default stream does not wait for other streams (tandem creates non-blocking
// ones only).
//
// A block runs on the thread that runs its launch, each of its threads on a fiber: a thread runs
// until it reaches a barrier (__syncthreads, or a warp shuffle's exchange), then the next thread
// runs; a barrier opens when every thread it waits for is there. A block whose first thread to
// run finishes without reaching a barrier runs its other threads as plain calls, one after
// another (no fibers: elementwise kernels run fast); one of them reaching a barrier is a
// divergent barrier. Stricter than CUDA, which none of tandem's kernels needs: lanes of a warp
// shuffling with different masks, a mask naming a lane that exited, a shuffle after the first
// thread ended without one.
//
// The order the threads of a block, and the blocks of a grid, take their turns in is
// TANDEM_CUDA_EMU_ORDER: ascending (the default), descending, or shuffled (the blocks in a
// random order, the threads in a new one for every stretch between barriers; seeded by
// TANDEM_CUDA_EMU_SEED, default 1). A GPU promises no order, so a kernel whose result depends on
// it (a thread reading shared memory another wrote without a barrier between, a block counting
// on the blocks before it) gives other results, or other bugs, in another order.
//
// TANDEM_CUDA_EMU_PRINT_LAUNCHES=1 prints the host waits and the kernel launches by name on
// stderr at exit (a program's count: a benchmark's, with a step more or less, gives a step's).
// TANDEM_CUDA_EMU_TRACE=<kernel name, as printed> prints the call stack of each of its launches
// (which op launched it; c++filt reads the names).
#include <cuda_profiler_api.h>
#include <execinfo.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "emu.hpp"  // first: its definitions of __host__ and the like stand
#include "streams.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_EMU_ASAN 1
#endif
#ifdef TANDEM_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#error "the CUDA emulation switches fibers with x86-64 code (tandem_emu_switch)"
#endif

// Saves the callee-saved registers on the current stack and its pointer in *from, then resumes
// the stack `to` (saved the same way, or prepared by start()). A function call, so the compiler
// keeps every other register it needs across it. The floating-point control words (MXCSR, x87)
// are not switched: no kernel changes them. (With ucontext's swapcontext, a system call per
// switch, the reduction test took 158 s instead of 4.6 s.) Its `ret` to another stack is why CMake builds this file
// without -fcf-protection: a shadow stack would refuse it.
extern "C" void tandem_emu_switch(void** from, void* to);
asm(R"(
  .text
  .globl tandem_emu_switch
  .type tandem_emu_switch, @function
tandem_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tandem_emu_switch, .-tandem_emu_switch
  .section .note.GNU-stack, "", @progbits
  .text
)");

// The runtime's error state, per thread as CUDA's: a failed call (or launch) sets it,
// cudaGetLastError reads and clears it.
namespace {
thread_local cudaError_t g_last_error = cudaSuccess;

cudaError_t fail(cudaError_t error) {
  g_last_error = error;
  return error;
}
}  // namespace

// --- devices, memory, streams and events ------------------------------------------------------
namespace {

thread_local int g_device = 0;

int device_count() {
  static const int count = [] {
    const char* v = std::getenv("TANDEM_CUDA_EMU_DEVICES");
    return v ? std::atoi(v) : 1;
  }();
  return count;
}

size_t device_capacity() {
  static const size_t bytes = [] {
    const char* v = std::getenv("TANDEM_CUDA_EMU_MEMORY_MB");
    return static_cast<size_t>(v ? std::atoll(v) : 4096) << 20;
  }();
  return bytes;
}

// Allocations by address: cudaMalloc'd ones (device >= 0) and cudaHostAlloc'd ones (kPinned),
// and each device's bytes in use.
constexpr int kPinned = -1;
struct Allocation {
  int device;
  size_t bytes;
};
struct Memory {
  std::mutex mu;
  std::map<const char*, Allocation> blocks;
  std::map<int, size_t> used;

  // The allocation holding all of [p, p + bytes), or null. Called with mu held.
  const Allocation* holding(const void* p, size_t bytes) const {
    const char* c = static_cast<const char*>(p);
    auto it = blocks.upper_bound(c);
    if (it == blocks.begin()) return nullptr;
    --it;
    const size_t offset = static_cast<size_t>(c - it->first);
    return offset + bytes <= it->second.bytes ? &it->second : nullptr;
  }
};
Memory& memory() {
  static auto* m = new Memory;
  return *m;
}

// Host memory a copy may read or write after the call returns: a GPU's DMA engine reaches pinned
// memory only, so copies from or to pageable memory are synchronous (as CUDA makes them).
bool pageable(const void* p, size_t bytes) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  return m.holding(p, bytes) == nullptr;
}

// A stream: its work in issue order (see the top of the file).
class Queue {
 public:
  explicit Queue(int device) : device_(device) {}
  ~Queue() {
    wait_idle();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  int device() const { return device_; }

  // Runs `op` after the work submitted before it: at once on this thread when the stream is idle
  // and `waits` is false (unless TANDEM_CUDA_EMU_QUEUE_ALL=1), else on the stream's thread.
  void submit(std::function<void()> op, bool waits) {
    static const bool queue_all = [] {
      const char* v = std::getenv("TANDEM_CUDA_EMU_QUEUE_ALL");
      return v != nullptr && std::string(v) == "1";
    }();
    std::unique_lock<std::mutex> lock(mu_);
    if (!waits && !queue_all && !busy_ && ops_.empty()) {
      busy_ = true;
      lock.unlock();
      op();
      lock.lock();
      busy_ = false;
      cv_.notify_all();
      return;
    }
    ops_.push_back(std::move(op));
    if (!thread_.joinable()) thread_ = std::thread([this] { work(); });
    cv_.notify_all();
  }

  // Returns once everything submitted so far ran.
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !busy_ && ops_.empty(); });
  }

 private:
  void work() {
    g_device = device_;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return (!busy_ && !ops_.empty()) || (stop_ && ops_.empty()); });
      if (ops_.empty()) return;
      std::function<void()> op = std::move(ops_.front());
      ops_.pop_front();
      busy_ = true;
      lock.unlock();
      op();
      op = nullptr;  // what it holds goes before the stream counts as idle
      lock.lock();
      busy_ = false;
      cv_.notify_all();
    }
  }

  const int device_;
  std::mutex mu_;
  std::condition_variable cv_;  // new work, work done, stop
  std::deque<std::function<void()>> ops_;
  bool busy_ = false;  // an op is running
  bool stop_ = false;
  std::thread thread_;  // started when work first queues
};

// The streams cudaStreamCreateWithFlags made, for cudaDeviceSynchronize (shared: one being
// waited for outlives its cudaStreamDestroy until the wait ends).
struct Streams {
  std::mutex mu;
  std::map<Queue*, std::shared_ptr<Queue>> created;
};
Streams& streams() {
  static auto* s = new Streams;
  return *s;
}

// Each device's legacy default stream (never destroyed: a thread may use it during exit).
Queue& legacy_stream(int device) {
  static const auto* queues = [] {
    auto* q = new std::vector<Queue*>;
    for (int d = 0; d < device_count(); ++d) q->push_back(new Queue(d));
    return q;
  }();
  return *queues->at(static_cast<size_t>(device));
}

Queue& queue_of(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread)
    return legacy_stream(g_device);
  return *reinterpret_cast<Queue*>(s);
}

// Waits for every stream of `device` (not holding the registry's lock meanwhile: another device's
// thread may create or destroy a stream while this one waits for a collective).
void synchronize_device(int device) {
  legacy_stream(device).wait_idle();
  std::vector<std::shared_ptr<Queue>> queues;
  {
    Streams& all = streams();
    std::lock_guard<std::mutex> lock(all.mu);
    for (const auto& entry : all.created)
      if (entry.second->device() == device) queues.push_back(entry.second);
  }
  for (const auto& q : queues) q->wait_idle();
}

// An event: its records (cudaEventRecord calls, numbered from 1) and which of them their streams
// reached, possibly out of order when it was recorded on several streams. A query looks at the
// latest record, a wait at the latest when the wait was queued, as with CUDA. Shared by the work
// that completes or waits for it, which may outlive cudaEventDestroy.
struct EventState {
  uint64_t recorded = 0;
  uint64_t done_below = 1;          // every record before this one is done
  std::set<uint64_t> done_after;    // records done out of order, each >= done_below
  uint64_t when_record = 0;         // the latest record done, and when
  std::chrono::steady_clock::time_point when{};
  bool timing = true;

  bool done(uint64_t record) const { return record < done_below || done_after.count(record); }
  void complete(uint64_t record) {
    done_after.insert(record);
    while (done_after.erase(done_below) != 0) ++done_below;
    if (record > when_record) {
      when_record = record;
      when = std::chrono::steady_clock::now();
    }
  }
};
struct Event {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};
// Guards every EventState (never destroyed: a stream's thread may wait on it during exit).
std::mutex& events_mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::condition_variable& events_cv() {
  static auto* cv = new std::condition_variable;
  return *cv;
}

}  // namespace

namespace tandem_emu {

void run_on_stream(cudaStream_t stream, const std::function<void()>& op) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  queue_of(stream).submit([&] {
    op();
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_all();
  }, false);
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
}

void enqueue_waiting(cudaStream_t stream, std::function<void()> op) {
  queue_of(stream).submit(std::move(op), true);
}

int device_of_stream(cudaStream_t stream) { return queue_of(stream).device(); }

int device_of_memory(const void* p, size_t bytes) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  const Allocation* a = m.holding(p, bytes);
  return a != nullptr ? a->device : -1;
}

}  // namespace tandem_emu

namespace tandem_emu {
namespace {

[[noreturn]] void kernel_bug(const char* fmt, ...) {
  std::va_list args;
  va_start(args, fmt);
  std::fprintf(stderr, "cuda emulation: ");
  std::vfprintf(stderr, fmt, args);
  std::fprintf(stderr, "\n");
  va_end(args);
  std::abort();
}

constexpr size_t kStackBytes = size_t{256} << 10;
constexpr unsigned kWarp = 32;

enum class State { ready, at_block_barrier, at_warp_barrier, done };

enum class Order { ascending, descending, shuffled };

Order thread_order() {
  static const Order order = [] {
    const char* v = std::getenv("TANDEM_CUDA_EMU_ORDER");
    const std::string s = v != nullptr ? v : "ascending";
    if (s == "ascending") return Order::ascending;
    if (s == "descending") return Order::descending;
    if (s == "shuffled") return Order::shuffled;
    std::fprintf(stderr, "TANDEM_CUDA_EMU_ORDER=%s: not ascending, descending or shuffled\n",
                 s.c_str());
    std::exit(2);
  }();
  return order;
}

// The random turns of TANDEM_CUDA_EMU_ORDER=shuffled, per OS thread (each runs its own blocks).
std::mt19937_64& order_random() {
  static const uint64_t seed = [] {
    const char* v = std::getenv("TANDEM_CUDA_EMU_SEED");
    return v != nullptr ? std::strtoull(v, nullptr, 10) : uint64_t{1};
  }();
  static std::atomic<uint64_t> streams{0};
  thread_local std::mt19937_64 random(seed * 0x9e3779b97f4a7c15u + streams++);
  return random;
}

// Puts a block's threads (ascending in `order`) in the order of their turns.
void arrange(std::vector<unsigned>& order) {
  if (thread_order() == Order::descending) {
    std::reverse(order.begin(), order.end());
  } else if (thread_order() == Order::shuffled) {
    std::shuffle(order.begin(), order.end(), order_random());
  }
}

// The k-th block of a grid to run, k -> (a k + c) mod blocks with a coprime to blocks: a
// permutation that needs no table, however large the grid.
class BlockOrder {
 public:
  explicit BlockOrder(uint64_t blocks) : blocks_(blocks) {
    if (thread_order() == Order::descending) {
      a_ = blocks - 1;  // -(k + 1) mod blocks
      c_ = blocks - 1;
    } else if (thread_order() == Order::shuffled && blocks > 1) {
      auto& random = order_random();
      do a_ = random() % blocks; while (std::gcd(a_, blocks) != 1);
      c_ = random() % blocks;
    }
  }
  uint64_t operator()(uint64_t k) const {
    if (a_ == 1 && c_ == 0) return k;
    return static_cast<uint64_t>((static_cast<unsigned __int128>(a_) * k + c_) % blocks_);
  }

 private:
  uint64_t blocks_, a_ = 1, c_ = 0;
};

struct Fiber {
  void* sp = nullptr;  // its saved stack pointer while it is not running
  char* stack = nullptr;  // kStackBytes above a guard page
  ThreadIds ids;
  State state = State::done;
  unsigned mask = 0;  // the lanes a warp barrier waits for
  void* fake_stack = nullptr;
};

// The block running on this OS thread.
struct Block {
  std::vector<Fiber> fibers;  // grown to the largest block, stacks kept
  void* scheduler_sp = nullptr;
  const void* scheduler_bottom = nullptr;
  size_t scheduler_size = 0;
  int current = -1;            // the fiber running, or -1
  bool plain = false;          // threads run as plain calls
  bool saw_barrier = false;    // the first thread to run reached one
  unsigned first = 0;          // that thread
  std::vector<unsigned> order;  // the threads' turns, by index
  ThreadIds plain_ids;
  void (*body)(void*) = nullptr;
  void* state = nullptr;
  const char* name = "";
  std::vector<uint64_t> slots[2];  // shuffle values by parity, per thread of the block
  std::vector<unsigned> parity;    // per warp
  ~Block() {  // a rank's thread that ends gives its stacks back
    for (Fiber& f : fibers)
      if (f.stack != nullptr) munmap(f.stack - 4096, kStackBytes + 4096);
  }
};
// One per OS thread, made at its first kernel and freed when it ends. Reached through a plain
// pointer: a thread_local with a destructor is read through a wrapper that checks its
// initialization on every access (a third of the time of an emulated ResNet step under ASan).
thread_local std::unique_ptr<Block> g_block_owner;
thread_local Block* g_block_ptr = nullptr;
inline Block& this_block() {
  if (g_block_ptr == nullptr) {
    g_block_owner = std::make_unique<Block>();
    g_block_ptr = g_block_owner.get();
  }
  return *g_block_ptr;
}

Fiber& running() { return this_block().fibers[static_cast<size_t>(this_block().current)]; }

void switch_to_scheduler(Fiber& f, bool finished) {
#ifdef TANDEM_EMU_ASAN
  __sanitizer_start_switch_fiber(finished ? nullptr : &f.fake_stack, this_block().scheduler_bottom,
                                 this_block().scheduler_size);
#else
  (void)finished;
#endif
  tandem_emu_switch(&f.sp, this_block().scheduler_sp);
#ifdef TANDEM_EMU_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &this_block().scheduler_bottom,
                                  &this_block().scheduler_size);
#endif
}

[[noreturn]] void fiber_main() {
  Fiber& f = running();
#ifdef TANDEM_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &this_block().scheduler_bottom,
                                  &this_block().scheduler_size);
#endif
  try {
    this_block().body(this_block().state);
  } catch (...) {  // nothing to unwind to: the launcher's frames are on another stack
    kernel_bug("%s: a kernel threw", this_block().name);
  }
  f.state = State::done;
  switch_to_scheduler(f, true);
  kernel_bug("a finished thread was resumed");
}

void resume(int index) {
  this_block().current = index;
  Fiber& f = running();
#ifdef TANDEM_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
  tandem_emu_switch(&this_block().scheduler_sp, f.sp);
#ifdef TANDEM_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  this_block().current = -1;
}

void start(int index, const ThreadIds& ids) {
  Fiber& f = this_block().fibers[static_cast<size_t>(index)];
  if (f.stack == nullptr) {
    void* p = mmap(nullptr, kStackBytes + 4096, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) kernel_bug("no memory for a thread's stack");
    mprotect(p, 4096, PROT_NONE);  // an overflow faults instead of corrupting
    f.stack = static_cast<char*>(p) + 4096;
  }
  // A stack tandem_emu_switch resumes into fiber_main: six zeroed registers, then fiber_main as
  // the return address, placed so that it starts with the alignment a call gives.
  auto* top = reinterpret_cast<void**>(f.stack + kStackBytes);  // 16-byte aligned
  void** sp = top - 2 - 6;
  std::memset(sp, 0, 6 * sizeof(void*));
  sp[6] = reinterpret_cast<void*>(&fiber_main);
  f.sp = sp;
  f.ids = ids;
  f.state = State::ready;
  resume(index);
}

// Opens the barriers every thread they wait for has reached; false when none could open.
bool open_barriers(unsigned threads) {
  auto& fibers = this_block().fibers;
  bool opened = false;
  for (unsigned w = 0; w * kWarp < threads; ++w) {
    const unsigned first = w * kWarp, lanes = std::min(kWarp, threads - first);
    unsigned waiting = 0, mask = 0;
    for (unsigned l = 0; l < lanes; ++l) {
      const Fiber& f = fibers[first + l];
      if (f.state != State::at_warp_barrier) continue;
      if (waiting != 0 && f.mask != mask)
        kernel_bug("%s: lanes of warp %u shuffle with different masks (%#x, %#x)",
                   this_block().name, w, mask, f.mask);
      mask = f.mask;
      waiting |= 1u << l;
    }
    if (waiting == 0) continue;
    for (unsigned l = 0; l < kWarp; ++l) {
      if (!(mask >> l & 1u)) continue;
      if (l >= lanes)
        kernel_bug("%s: a shuffle's mask %#x names lane %u of warp %u, past the block's %u threads",
                   this_block().name, mask, l, w, threads);
      const State s = fibers[first + l].state;
      if (s == State::done)
        kernel_bug("%s: a shuffle's mask %#x names lane %u of warp %u, which has exited",
                   this_block().name, mask, l, w);
      if (s == State::at_block_barrier)
        kernel_bug("%s: lane %u of warp %u waits at __syncthreads while its warp shuffles",
                   this_block().name, l, w);
    }
    if ((waiting & mask) != mask) continue;  // lanes of the mask still running
    for (unsigned l = 0; l < lanes; ++l)
      if (waiting >> l & 1u) fibers[first + l].state = State::ready;
    this_block().parity[w] ^= 1u;
    opened = true;
  }
  if (opened) return true;
  unsigned at_barrier = 0, done = 0;
  for (unsigned t = 0; t < threads; ++t) {
    at_barrier += fibers[t].state == State::at_block_barrier;
    done += fibers[t].state == State::done;
  }
  if (at_barrier == 0) return false;
  if (done != 0)
    kernel_bug(
        "%s: block (%u, %u, %u): %u threads wait at __syncthreads, %u have exited "
        "(a divergent barrier)",
        this_block().name, fibers[0].ids.block.x, fibers[0].ids.block.y, fibers[0].ids.block.z,
        at_barrier, done);
  for (unsigned t = 0; t < threads; ++t) fibers[t].state = State::ready;
  return true;
}

void run_block(const ThreadIds& block_ids, unsigned threads) {
  const dim3 bd = block_ids.block_dim;
  auto ids_of = [&](unsigned t) {
    ThreadIds ids = block_ids;
    ids.thread = make_uint3(t % bd.x, t / bd.x % bd.y, t / (bd.x * bd.y));
    return ids;
  };
  std::vector<unsigned>& order = this_block().order;
  order.resize(threads);
  for (unsigned t = 0; t < threads; ++t) order[t] = t;
  arrange(order);
  this_block().saw_barrier = false;
  this_block().first = order[0];
  start(static_cast<int>(order[0]), ids_of(order[0]));
  if (this_block().fibers[order[0]].state == State::done && !this_block().saw_barrier) {
    this_block().plain = true;
    try {
      for (unsigned k = 1; k < threads; ++k) {
        this_block().plain_ids = ids_of(order[k]);
        this_block().body(this_block().state);
      }
    } catch (...) {
      kernel_bug("%s: a kernel threw", this_block().name);
    }
    this_block().plain = false;
    return;
  }
  for (unsigned k = 1; k < threads; ++k) start(static_cast<int>(order[k]), ids_of(order[k]));
  for (;;) {
    for (unsigned t : order)
      if (this_block().fibers[t].state == State::ready) resume(static_cast<int>(t));
    if (!open_barriers(threads)) break;
    if (thread_order() == Order::shuffled) arrange(order);
  }
  for (unsigned t = 0; t < threads; ++t)
    if (this_block().fibers[t].state != State::done)
      kernel_bug("%s: thread %u never finished (a barrier that cannot open)", this_block().name, t);
}

}  // namespace

const ThreadIds& ids() {
  if (this_block().plain) return this_block().plain_ids;
  if (this_block().current < 0) kernel_bug("threadIdx read outside a kernel");
  return running().ids;
}

void sync_threads() {
  if (this_block().plain)
    kernel_bug(
        "%s: thread (%u, %u, %u) reached __syncthreads, which thread %u of its block, the "
        "first to run, did not (a divergent barrier)",
        this_block().name, this_block().plain_ids.thread.x, this_block().plain_ids.thread.y,
        this_block().plain_ids.thread.z, this_block().first);
  this_block().saw_barrier = true;
  Fiber& f = running();
  f.state = State::at_block_barrier;
  switch_to_scheduler(f, false);
}

uint64_t shuffle_down(unsigned mask, uint64_t bits, unsigned delta) {
  if (this_block().plain)
    kernel_bug(
        "%s: thread %u shuffles, which thread %u of its block, the first to run, did not "
        "(a divergent shuffle)",
        this_block().name, this_block().plain_ids.thread.x, this_block().first);
  this_block().saw_barrier = true;
  Fiber& f = running();
  const dim3 bd = f.ids.block_dim;
  const unsigned t = f.ids.thread.x + bd.x * (f.ids.thread.y + bd.y * f.ids.thread.z);
  const unsigned warp = t / kWarp, lane = t % kWarp;
  if (!(mask >> lane & 1u))
    kernel_bug("%s: lane %u shuffles with mask %#x, which does not name it", this_block().name,
               lane, mask);
  const unsigned parity = this_block().parity[warp];
  this_block().slots[parity][t] = bits;
  f.state = State::at_warp_barrier;
  f.mask = mask;
  switch_to_scheduler(f, false);
  if (delta >= kWarp)
    kernel_bug("%s: a shuffle by %u lanes (a GPU takes its low five bits)", this_block().name,
               delta);
  const unsigned source = lane + delta;
  if (source >= kWarp) return bits;
  if (!(mask >> source & 1u))
    kernel_bug("%s: lane %u reads lane %u, outside the shuffle's mask %#x", this_block().name, lane,
               source, mask);
  return this_block().slots[parity][warp * kWarp + source];
}

void count_launch(const char* name);  // below, with the other counts

bool host_only() {
  static const bool on = [] {
    const char* v = std::getenv("TANDEM_CUDA_EMU_HOST_ONLY");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

void run(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, const char* name,
         void (*body)(void*), std::shared_ptr<void> state) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 || threads > 1024 ||
      block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x > 0x7fffffffu ||
      grid.y > 65535 || grid.z > 65535) {
    fail(cudaErrorInvalidConfiguration);  // the launch's error, as a GPU's
    return;
  }
  if (device_count() == 0) {
    fail(cudaErrorNoDevice);
    return;
  }
  if (shared_bytes != 0) kernel_bug("%s: dynamic shared memory is not emulated", name);
  if (this_block().current >= 0 || this_block().plain)
    kernel_bug("%s: launched from a kernel", name);
  count_launch(name);
  if (host_only()) return;
  // On whichever thread runs the stream's work: this_block() is that thread's.
  queue_of(stream).submit(
      [=] {
        if (this_block().fibers.size() < threads) this_block().fibers.resize(threads);
        for (auto& s : this_block().slots) s.assign(threads, 0);
        this_block().parity.assign((threads + kWarp - 1) / kWarp, 0);
        this_block().body = body;
        this_block().state = state.get();
        this_block().name = name;
        ThreadIds ids{};
        ids.block_dim = block;
        ids.grid_dim = grid;
        const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
        const BlockOrder turns(blocks);
        for (uint64_t k = 0; k < blocks; ++k) {
          const uint64_t b = turns(k);
          ids.block = make_uint3(static_cast<unsigned>(b % grid.x),
                                 static_cast<unsigned>(b / grid.x % grid.y),
                                 static_cast<unsigned>(b / grid.x / grid.y));
          run_block(ids, static_cast<unsigned>(threads));
        }
      },
      false);
}

}  // namespace tandem_emu

// --- calls that make the host wait for a GPU, counted for the tests -----------------------------
// Counted by what they do on a GPU, not by how long the emulation took: a synchronize, a
// synchronous copy that touches host memory, a copy into pageable memory, a free. And
// cudaMalloc calls (slow on a GPU, and a caching allocator's steady state makes none).
namespace {
std::atomic<long> g_host_waits{0}, g_device_mallocs{0};
void host_waits() { g_host_waits.fetch_add(1, std::memory_order_relaxed); }
// Kernel launches, by kernel name (library calls, emulated cuBLAS and cuDNN, are not counted).
struct Launches {
  std::mutex mu;
  std::map<std::string, long> by_name;
};
void print_launches_at_exit();
Launches& launches() {
  static Launches l;
  // Registered after l is made, so it runs before l is destroyed.
  static const bool at_exit = [] {
    const char* v = std::getenv("TANDEM_CUDA_EMU_PRINT_LAUNCHES");
    if (v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0)
      std::atexit(print_launches_at_exit);
    return true;
  }();
  (void)at_exit;
  return l;
}
bool device_memory(const void* p, size_t bytes) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  const Allocation* a = m.holding(p, bytes);
  return a != nullptr && a->device != kPinned;
}
}  // namespace

void tandem_emu::count_launch(const char* name) {
  static const char* trace = std::getenv("TANDEM_CUDA_EMU_TRACE");
  if (trace && std::strcmp(trace, name) == 0) {
    void* frames[24];
    const int n = backtrace(frames, 24);
    std::fprintf(stderr, "--- %s\n", name);
    backtrace_symbols_fd(frames, n, 2);
  }
  Launches& l = launches();
  std::lock_guard<std::mutex> lock(l.mu);
  ++l.by_name[name];
}

extern "C" long tandem_emu_launches();
extern "C" long tandem_emu_host_waits();
extern "C" void tandem_emu_print_launches(FILE* out);
namespace {
void print_launches_at_exit() {
  std::fprintf(stderr, "%ld host waits for a stream or device, %ld kernel launches (emulated):\n",
               tandem_emu_host_waits(), tandem_emu_launches());
  tandem_emu_print_launches(stderr);
}
}  // namespace

extern "C" {
long tandem_emu_host_waits() { return g_host_waits.load(); }
long tandem_emu_device_mallocs() { return g_device_mallocs.load(); }
long tandem_emu_launches() {
  Launches& l = launches();
  std::lock_guard<std::mutex> lock(l.mu);
  long total = 0;
  for (const auto& [name, count] : l.by_name) total += count;
  return total;
}
long tandem_emu_launches_of(const char* prefix) {
  Launches& l = launches();
  std::lock_guard<std::mutex> lock(l.mu);
  long total = 0;
  for (const auto& [name, count] : l.by_name)
    if (name.rfind(prefix, 0) == 0) total += count;
  return total;
}
void tandem_emu_print_launches(FILE* out) {
  Launches& l = launches();
  std::lock_guard<std::mutex> lock(l.mu);
  std::vector<std::pair<long, std::string>> rows;
  for (const auto& [name, count] : l.by_name) rows.emplace_back(count, name);
  std::sort(rows.rbegin(), rows.rend());
  for (const auto& [count, name] : rows) std::fprintf(out, "%6ld  %s\n", count, name.c_str());
}
void tandem_emu_reset_counts() {
  g_host_waits = 0;
  g_device_mallocs = 0;
  Launches& l = launches();
  std::lock_guard<std::mutex> lock(l.mu);
  l.by_name.clear();
}
}

// --- the runtime API ---------------------------------------------------------------------------
extern "C" {

cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return g_last_error; }
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "unknown error";
  }
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown";
  }
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v) return fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* n) {
  if (!n) return fail(cudaErrorInvalidValue);
  *n = device_count();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= device_count()) return fail(cudaErrorInvalidDevice);
  g_device = d;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  if (!d) return fail(cudaErrorInvalidValue);
  *d = g_device;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int d) {
  if (!id || len <= 0) return fail(cudaErrorInvalidValue);
  if (d < 0 || d >= device_count()) return fail(cudaErrorInvalidDevice);
  std::snprintf(id, static_cast<size_t>(len), "0000:%02x:00.0", d + 1);
  return cudaSuccess;
}
cudaError_t cudaGetDriverEntryPointByVersion(const char*, void** fn, unsigned int,
                                             unsigned long long,
                                             cudaDriverEntryPointQueryResult* found) {
  if (fn) *fn = nullptr;
  if (found) *found = cudaDriverEntryPointSymbolNotFound;
  return fail(cudaErrorNotSupported);  // no driver behind the emulation
}
// No profiler attaches to the emulation: collecting nothing is what cudaProfilerStart does then.
cudaError_t cudaProfilerStart() { return cudaSuccess; }
cudaError_t cudaProfilerStop() { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  host_waits();
  synchronize_device(g_device);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  if (!p) return fail(cudaErrorInvalidValue);
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  size_t& used = m.used[g_device];
  if (bytes > device_capacity() - used) return fail(cudaErrorMemoryAllocation);
  if (posix_memalign(p, 256, bytes) != 0) return fail(cudaErrorMemoryAllocation);
  std::memset(*p, 0xa5, bytes);  // what the device holds is not zeros
  g_device_mallocs.fetch_add(1, std::memory_order_relaxed);
  m.blocks[static_cast<const char*>(*p)] = {g_device, bytes};
  used += bytes;
  return cudaSuccess;
}
// Both frees wait for the device's work first, as CUDA's do.
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  Memory& m = memory();
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    auto it = m.blocks.find(static_cast<const char*>(p));
    if (it == m.blocks.end() || it->second.device == kPinned) return fail(cudaErrorInvalidValue);
    device = it->second.device;
  }
  host_waits();
  synchronize_device(device);
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.blocks.find(static_cast<const char*>(p));
  if (it == m.blocks.end()) return fail(cudaErrorInvalidValue);  // freed meanwhile
  m.used[device] -= it->second.bytes;
  m.blocks.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  if (!p) return fail(cudaErrorInvalidValue);
  if (posix_memalign(p, 256, bytes ? bytes : 1) != 0) return fail(cudaErrorMemoryAllocation);
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  m.blocks[static_cast<const char*>(*p)] = {kPinned, bytes};
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  Memory& m = memory();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    auto it = m.blocks.find(static_cast<const char*>(p));
    if (it == m.blocks.end() || it->second.device != kPinned) return fail(cudaErrorInvalidValue);
  }
  host_waits();
  for (int d = 0; d < device_count(); ++d) synchronize_device(d);  // copies of any device
  std::lock_guard<std::mutex> lock(m.mu);
  m.blocks.erase(static_cast<const char*>(p));
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t stream) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  auto copy = [=] { std::memmove(dst, src, bytes); };
  if (pageable(dst, bytes) || pageable(src, bytes)) {
    if (pageable(dst, bytes)) host_waits();  // into pageable memory: synchronous on a GPU
    tandem_emu::run_on_stream(stream, copy);
  } else {
    queue_of(stream).submit(copy, false);
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  if (!device_memory(dst, bytes) || !device_memory(src, bytes)) host_waits();  // not device-device
  tandem_emu::run_on_stream(cudaStreamLegacy, [=] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}
// Ordered after everything queued on both GPUs (and before what comes next: it returns when done).
cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device,
                           size_t bytes) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  if (dst_device < 0 || dst_device >= device_count() || src_device < 0 ||
      src_device >= device_count())
    return fail(cudaErrorInvalidDevice);
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  host_waits();
  synchronize_device(src_device);
  synchronize_device(dst_device);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  if (bytes == 0) return cudaSuccess;
  if (!p) return fail(cudaErrorInvalidValue);
  queue_of(stream).submit([=] { std::memset(p, value, bytes); }, false);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  if (bytes == 0) return cudaSuccess;
  if (!p) return fail(cudaErrorInvalidValue);
  tandem_emu::run_on_stream(cudaStreamLegacy, [=] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  if (!s) return fail(cudaErrorInvalidValue);
  auto q = std::make_shared<Queue>(g_device);
  {
    Streams& all = streams();
    std::lock_guard<std::mutex> lock(all.mu);
    all.created[q.get()] = q;
  }
  *s = reinterpret_cast<cudaStream_t>(q.get());
  return cudaSuccess;
}
// Waits for the stream's work (CUDA would return at once and release it later).
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  std::shared_ptr<Queue> q;
  {
    Streams& all = streams();
    std::lock_guard<std::mutex> lock(all.mu);
    auto it = all.created.find(reinterpret_cast<Queue*>(s));
    if (it == all.created.end()) return fail(cudaErrorInvalidResourceHandle);
    q = std::move(it->second);
    all.created.erase(it);
  }
  q.reset();  // waits for its work, unless a synchronize still holds it
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  host_waits();
  queue_of(s).wait_idle();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  if (!e) return fail(cudaErrorInvalidValue);
  std::shared_ptr<EventState> state = reinterpret_cast<Event*>(e)->state;
  uint64_t until = 0;
  {
    std::lock_guard<std::mutex> lock(events_mu());
    if (state->done(state->recorded)) return cudaSuccess;  // nothing to wait for
    until = state->recorded;
  }
  queue_of(s).submit([state, until] {
    std::unique_lock<std::mutex> lock(events_mu());
    events_cv().wait(lock, [&] { return state->done(until); });
  }, true);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  if (!e) return fail(cudaErrorInvalidValue);
  auto* ev = new Event;
  ev->state->timing = !(flags & cudaEventDisableTiming);
  *e = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<Event*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  if (!e) return fail(cudaErrorInvalidValue);
  std::shared_ptr<EventState> state = reinterpret_cast<Event*>(e)->state;
  uint64_t mark = 0;
  {
    std::lock_guard<std::mutex> lock(events_mu());
    mark = ++state->recorded;
  }
  queue_of(s).submit([state, mark] {
    std::lock_guard<std::mutex> lock(events_mu());
    state->complete(mark);
    events_cv().notify_all();
  }, false);
  return cudaSuccess;
}
// Not ready is also this thread's last error, as with CUDA.
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidValue);
  const EventState& state = *reinterpret_cast<Event*>(e)->state;
  std::lock_guard<std::mutex> lock(events_mu());
  return state.done(state.recorded) ? cudaSuccess : fail(cudaErrorNotReady);
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidValue);
  host_waits();
  const EventState& state = *reinterpret_cast<Event*>(e)->state;
  std::unique_lock<std::mutex> lock(events_mu());
  const uint64_t until = state.recorded;
  events_cv().wait(lock, [&] { return state.done(until); });
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms || !start || !end) return fail(cudaErrorInvalidValue);
  const EventState& a = *reinterpret_cast<Event*>(start)->state;
  const EventState& b = *reinterpret_cast<Event*>(end)->state;
  if (!a.timing || !b.timing) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(events_mu());
  if (a.recorded == 0 || b.recorded == 0) return fail(cudaErrorInvalidResourceHandle);
  if (!a.done(a.recorded) || !b.done(b.recorded)) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(b.when - a.when).count();
  return cudaSuccess;
}

}  // extern "C"
