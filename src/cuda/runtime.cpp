// The CUDA runtime glue: device discovery (with the CPU fallback), the caching allocator, pinned
// memory, streams and copies. Links the runtime (cudart) only, never the driver stub, so a CUDA
// build starts on machines without a GPU.
#include "tandem/cuda/runtime.hpp"

#include <cublas_v2.h>
#include <cuda.h>  // driver types only: the driver is reached through cudaGetDriverEntryPoint
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "check.hpp"
#include "tandem/core/context.hpp"
#include "tandem/cuda/caching_allocator.hpp"

namespace tandem::cuda {
namespace {

// The events both kinds of cached memory (device and pinned host) are released by.
class EventMemory : public DeviceMemory {
 public:
  bool event_done(uintptr_t event) override {
    const cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    TANDEM_CUDA_CHECK(err);
    return true;
  }
  void release_event(uintptr_t event) override {
    cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event));
  }

 protected:
  // An event recorded now on `stream` of GPU `device`.
  static uintptr_t record_on(int device, cudaStream_t stream) {
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    const cudaError_t recorded = cudaEventRecord(e, stream);
    if (recorded != cudaSuccess) cudaEventDestroy(e);  // not left behind by the throw
    TANDEM_CUDA_CHECK(recorded);
    return reinterpret_cast<uintptr_t>(e);
  }
};

// The device side of the caching allocator (tandem/cuda/caching_allocator.hpp): cudaMalloc,
// cudaFree and events, each with the allocator's device current.
class CudaMemory final : public EventMemory {
 public:
  explicit CudaMemory(int device) : device_(device) {}
  void* allocate(size_t bytes) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: the device stays usable
      return nullptr;
    }
    if (err != cudaSuccess)
      throw CudaError("cuda:" + std::to_string(device_) + " allocator: cudaMalloc of " +
                          detail::describe_bytes(bytes),
                      error_text(err), detail::base_name(__FILE__), __LINE__);
    return p;
  }
  void free(void* ptr) override {
    DeviceGuard guard(device_);
    cudaFree(ptr);
  }
  uintptr_t record_event(StreamId stream) override {
    return record_on(device_, reinterpret_cast<cudaStream_t>(stream));
  }

 private:
  int device_;
};

// False when TANDEM_NO_CUDA_MEMORY_CACHING is set (and not 0): every block is then a cudaMalloc
// of its own (PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING), so compute-sanitizer (and, on the
// emulation, AddressSanitizer) sees an access past any tensor.
bool caching_from_env() {
  const char* env = std::getenv("TANDEM_NO_CUDA_MEMORY_CACHING");
  return env == nullptr || env[0] == '\0' || std::strcmp(env, "0") == 0;
}

// tandem's Allocator interface over a device's CachingAllocator. Storage is allocated for the
// legacy default stream, where tandem's kernels run until each device's compute stream carries
// them (docs/ARCHITECTURE.md); a block another stream reads is marked with record_stream.
class DeviceAllocator final : public Allocator {
 public:
  explicit DeviceAllocator(int device)
      : device_(device),
        cache_(std::make_unique<CudaMemory>(device), "cuda:" + std::to_string(device),
               caching_from_env()) {}
  void* allocate(size_t nbytes) override { return cache_.allocate(nbytes, 0); }
  void deallocate(void* ptr, size_t) override { cache_.free(ptr); }
  Device device() const override { return Device(DeviceType::cuda, device_); }
  CachingAllocator& cache() { return cache_; }

 private:
  int device_;
  CachingAllocator cache_;
};

// The host side of the pinned cache: cudaHostAlloc'd segments. Its "streams" are who last
// touched a block: kHost (the loader's threads writing it, the stream every block is allocated
// on) or d + 1 for the legacy stream of GPU d (an asynchronous copy reading it), so that a copy's
// use always counts as another stream's and the block waits for its event when freed.
constexpr StreamId kHost = 0;
class PinnedMemory final : public EventMemory {
 public:
  void* allocate(size_t bytes) override {
    // On the device of the calling thread's context (a loader worker's: its GPU), so that a
    // thread that never chose a device does not create a context on GPU 0 for it.
    const Device d = current_context().device();
    std::optional<DeviceGuard> guard;
    if (d.is_cuda()) guard.emplace(d.index());
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    if (err != cudaSuccess)
      throw CudaError("pinned allocator: cudaHostAlloc of " + detail::describe_bytes(bytes),
                      error_text(err), detail::base_name(__FILE__), __LINE__);
    return p;
  }
  void free(void* ptr) override { cudaFreeHost(ptr); }
  uintptr_t record_event(StreamId stream) override {
    return record_on(static_cast<int>(stream) - 1, current_stream());
  }
};

class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override { return cache_.allocate(nbytes, kHost); }
  void deallocate(void* ptr, size_t) override { cache_.free(ptr); }
  Device device() const override { return kCPU; }
  CachingAllocator& cache() { return cache_; }

 private:
  CachingAllocator cache_{std::make_unique<PinnedMemory>(), "cpu (pinned)"};
};

PinnedAllocator& pinned() {
  static auto* alloc = new PinnedAllocator;  // never destroyed, as the device allocators
  return *alloc;
}

void check_device(int index) {
  TANDEM_CHECK(is_available(), "cuda:", index, ": no CUDA device is available");
  TANDEM_CHECK_T(IndexError, index >= 0 && index < device_count(), "cuda:", index,
                 " does not exist (", device_count(), " visible devices)");
}

}  // namespace

bool primary_context_active(int device) {
  using GetState = CUresult (*)(CUdevice, unsigned int*, int*);
  static const GetState get_state = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return GetState(nullptr);
    }
    return reinterpret_cast<GetState>(fn);
  }();
  if (get_state == nullptr) return true;
  unsigned int flags = 0;
  int active = 0;
  return get_state(static_cast<CUdevice>(device), &flags, &active) != CUDA_SUCCESS || active != 0;
}

bool compiled_with_cuda() { return true; }

namespace {
// Why cudaGetDeviceCount failed (no driver, a driver older than the runtime...), for
// build_info(): a GPU machine on which tandem sees none says why. Empty when it answered.
std::string g_device_count_error;
}  // namespace

int device_count() {
  static const int count = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      g_device_count_error = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
      cudaGetLastError();  // clear the sticky "no driver" error
      return 0;
    }
    return n;
  }();
  return count;
}

void set_device(int device) {
  check_device(device);
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
}

int current_device() {
  TANDEM_CHECK(is_available(), "cuda current_device: no CUDA device is available");
  int device = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

void synchronize(int device) {
  const int previous = current_device();  // (throws without a GPU)
  const int target = device < 0 ? previous : device;
  check_device(target);
  if (target != previous) TANDEM_CUDA_CHECK(cudaSetDevice(target));
  const cudaError_t status = cudaDeviceSynchronize();
  if (target != previous) TANDEM_CUDA_CHECK(cudaSetDevice(previous));
  TANDEM_CUDA_CHECK(status);
}

std::string pci_bus_id(int device) {
  char id[32] = {};
  if (device < 0 || device >= device_count() ||
      cudaDeviceGetPCIBusId(id, sizeof(id), device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return id;
}

bool is_available() {
  static const bool available = [] {
    bool ok = device_count() > 0;
    if (!ok)
      std::fprintf(stderr, "tandem: built with CUDA but no GPU or driver found; running on the CPU\n");
    return ok;
  }();
  return available;
}

std::string build_info() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  int nccl = 0;
  ncclGetVersion(&nccl);
  // cuDNN 9 and NCCL 2.x both encode versions as major * 10000 + minor * 100 + patch.
  auto dotted = [](long v) {
    return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
           std::to_string(v % 100);
  };
  return "CUDA runtime " + std::to_string(runtime / 1000) + "." +
         std::to_string(runtime % 1000 / 10) + ", cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) +
         "." + std::to_string(CUBLAS_VER_MINOR) + ", cuDNN " +
         dotted(static_cast<long>(cudnnGetVersion())) + " (built against " +
         dotted(static_cast<long>(CUDNN_VERSION)) + "), NCCL " + dotted(nccl) + " (built against " +
         dotted(static_cast<long>(NCCL_VERSION_CODE)) + ")" +
         (device_count() == 0 && !g_device_count_error.empty()
              ? "; no GPU: cudaGetDeviceCount says " + g_device_count_error
              : "");
}

namespace {
DeviceAllocator& device_allocator(int index) {
  check_device(index);
  static std::mutex mu;
  // Never destroyed (nor the pinned one): a tensor freed during static destruction, or by a
  // thread still running then, must find its allocator alive.
  static auto* allocators = new std::unordered_map<int, std::unique_ptr<DeviceAllocator>>;
  std::lock_guard<std::mutex> lock(mu);
  auto& a = (*allocators)[index];
  if (!a) a = std::make_unique<DeviceAllocator>(index);
  return *a;
}
}  // namespace

Allocator& caching_allocator(int index) { return device_allocator(index); }
AllocatorStats memory_stats(int device) { return device_allocator(device).cache().stats(); }
void empty_cache(int device) { device_allocator(device).cache().empty_cache(); }
void record_stream(void* ptr, int device, const Stream& stream) {
  // An event of the block's GPU cannot be recorded on another GPU's stream (cudaEventRecord
  // refuses it when the block is freed, and the block would be lost).
  TANDEM_CHECK(stream.device() == device, "record_stream: the memory is on cuda:", device,
               ", the stream on cuda:", stream.device());
  device_allocator(device).cache().record_stream(ptr, reinterpret_cast<StreamId>(stream.handle()));
}

Allocator& pinned_host_allocator() { return pinned(); }
AllocatorStats pinned_memory_stats() { return pinned().cache().stats(); }
bool is_pinned(const void* block) { return is_available() && pinned().cache().owns(block); }

void profiler_start() {
  if (is_available()) TANDEM_CUDA_CHECK(cudaProfilerStart());
}
void profiler_stop() {
  if (is_available()) TANDEM_CUDA_CHECK(cudaProfilerStop());
}

namespace {

// The calling thread's deferred checks (each thread its own: ranks on threads report their
// own inputs' errors). Ones never checked are dropped with the thread, unreported.
struct DeferredCheck {
  void* host = nullptr;  // 8 page-locked bytes the verdict is copied to
  cudaEvent_t copied = nullptr;
  std::function<void(int64_t)> report;
};

struct DeferredChecks {
  std::vector<DeferredCheck> pending;
  ~DeferredChecks() {
    for (DeferredCheck& d : pending) release(d);
  }
  static void release(DeferredCheck& d) {
    if (cudaEventQuery(d.copied) == cudaErrorNotReady) {
      cudaGetLastError();
      cudaEventSynchronize(d.copied);  // the copy is done with the bytes
    }
    cudaEventDestroy(d.copied);
    pinned().deallocate(d.host, sizeof(int64_t));
  }
};

DeferredChecks& deferred_checks() {
  thread_local DeferredChecks checks;
  return checks;
}

// Past this many, a check waits at once: a loop that never reads a GPU value keeps no growing
// list of page-locked bytes and events.
constexpr size_t kMaxDeferred = 64;

}  // namespace

void defer_check(const void* verdict, int device, std::function<void(int64_t)> report) {
  check_device(device);
  DeviceGuard guard(device);
  DeferredCheck d;
  d.report = std::move(report);
  d.host = pinned().allocate(sizeof(int64_t));
  const cudaError_t copy =
      cudaMemcpyAsync(d.host, verdict, sizeof(int64_t), cudaMemcpyDeviceToHost, current_stream());
  const cudaError_t event =
      copy == cudaSuccess ? cudaEventCreateWithFlags(&d.copied, cudaEventDisableTiming) : copy;
  const cudaError_t record =
      event == cudaSuccess ? cudaEventRecord(d.copied, current_stream()) : event;
  if (record != cudaSuccess) {
    if (d.copied) cudaEventDestroy(d.copied);
    if (copy == cudaSuccess) cudaStreamSynchronize(current_stream());  // the copy is done
    pinned().deallocate(d.host, sizeof(int64_t));
    TANDEM_CUDA_CHECK(record);
  }
  DeferredChecks& checks = deferred_checks();
  checks.pending.push_back(std::move(d));
  if (checks.pending.size() > kMaxDeferred) check_deferred();
}

void check_deferred() {
  DeferredChecks& checks = deferred_checks();
  if (checks.pending.empty()) return;
  // Taken off first: a report that reads the GPU (the bad value) comes back here to nothing.
  std::vector<DeferredCheck> due;
  due.swap(checks.pending);
  std::exception_ptr first;
  for (DeferredCheck& d : due) {
    // Asked first: a copy long done (the usual case) costs no call that waits.
    cudaError_t err = cudaEventQuery(d.copied);
    if (err == cudaErrorNotReady) {
      cudaGetLastError();  // not ready is this thread's last error too
      err = cudaEventSynchronize(d.copied);
    }
    int64_t value = 0;
    std::memcpy(&value, d.host, sizeof value);
    DeferredChecks::release(d);
    if (first) continue;
    try {
      TANDEM_CUDA_CHECK(err);
      d.report(value);
    } catch (...) {
      first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  int device = dst_device.is_cuda() ? dst_device.index() : src_device.index();
  check_device(device);
  DeviceGuard guard(device);
  if (src_device.is_cuda() && dst_device.is_cuda() && src_device != dst_device) {
    // Between GPUs: cudaMemcpyPeer is ordered after the work queued on both of them, and before
    // what is queued next (a cudaMemcpy goes on the destination's stream alone, and could read
    // a source the other GPU has not finished writing).
    check_device(src_device.index());
    TANDEM_CUDA_CHECK(cudaMemcpyPeer(dst, dst_device.index(), src, src_device.index(), nbytes));
    return;
  }
  TANDEM_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault));
  if (dst_device.is_cpu()) check_deferred();  // the host read the GPU: the checks' copies are done
}

void copy_to_device_async(void* dst, Device dst_device, const void* src, const void* src_block,
                          size_t nbytes) {
  if (nbytes == 0) return;
  if (!dst_device.is_cuda() || !pinned().cache().owns(src_block))
    return copy_bytes(dst, dst_device, src, kCPU, nbytes);
  const int device = dst_device.index();
  check_device(device);
  DeviceGuard guard(device);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, current_stream()));
  pinned().cache().record_stream(const_cast<void*>(src_block), static_cast<StreamId>(device) + 1);
}

Stream::Stream(int device) : device_(device) {
  check_device(device);
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  handle_ = {s, [](void* p) { cudaStreamDestroy(static_cast<cudaStream_t>(p)); }};
}

void Stream::synchronize() const {
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle())));
  check_deferred();
}

Event::Event(int device) : device_(device) {
  check_device(device);
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  TANDEM_CUDA_CHECK(cudaEventCreate(&e));
  handle_ = {e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); }};
}

void Event::record() {
  DeviceGuard guard(device_);
  TANDEM_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_.get()), current_stream()));
}

bool Event::query() const {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(handle_.get()));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // not ready is this thread's last error too
    return false;
  }
  TANDEM_CUDA_CHECK(err);
  return true;
}

double Event::seconds_since(const Event& earlier) const {
  TANDEM_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_.get())));
  float ms = 0;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(earlier.handle_.get()),
                                         static_cast<cudaEvent_t>(handle_.get())));
  return ms * 1e-3;
}

}  // namespace tandem::cuda
