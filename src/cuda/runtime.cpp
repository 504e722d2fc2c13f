// The CUDA runtime glue: device discovery (with the CPU fallback), the caching allocator, pinned
// memory, streams and copies. Links the runtime (cudart) only, never the driver stub, so a CUDA
// build starts on machines without a GPU.
#include "tandem/cuda/runtime.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "check.hpp"

namespace tandem::cuda {
namespace {

// Keeps freed blocks by exact (rounded) size and hands them out again: training allocates the
// same sizes every step, so after the first step cudaMalloc is not called at all.
class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  ~CachingAllocator() override { release_cached(); }

  void* allocate(size_t nbytes) override {
    size_t size = round(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return p;
      }
    }
    DeviceGuard guard(device_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {  // give the cache back and retry once
      cudaGetLastError();
      release_cached();
      err = cudaMalloc(&p, size);
    }
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: the device stays usable
      throw OutOfMemoryError(nbytes, held_.load(), "cuda:" + std::to_string(device_),
                             detail::base_name(__FILE__), __LINE__);
    }
    if (err != cudaSuccess)
      throw CudaError("cuda:" + std::to_string(device_) + " allocator: cudaMalloc of " +
                          detail::describe_bytes(size),
                      error_text(err), detail::base_name(__FILE__), __LINE__);
    held_ += size;
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    free_[round(nbytes)].push_back(ptr);
  }
  Device device() const override { return Device(DeviceType::cuda, device_); }

 private:
  static size_t round(size_t n) { return n <= 512 ? 512 : (n + 511) / 512 * 512; }
  void release_cached() {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) cudaFree(p);
      held_ -= size * blocks.size();
    }
    free_.clear();
  }

  int device_;
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  std::atomic<size_t> held_{0};  // from cudaMalloc, in use and cached: the out-of-memory message
};

class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, nbytes == 0 ? 1 : nbytes, cudaHostAllocDefault);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw OutOfMemoryError(nbytes, held_.load(), "cpu (pinned)", detail::base_name(__FILE__),
                             __LINE__);
    }
    if (err != cudaSuccess)
      throw CudaError("pinned allocator: cudaHostAlloc of " + detail::describe_bytes(nbytes),
                      error_text(err), detail::base_name(__FILE__), __LINE__);
    held_ += nbytes;
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    cudaFreeHost(ptr);
    held_ -= nbytes;
  }
  Device device() const override { return kCPU; }

 private:
  std::atomic<size_t> held_{0};  // for the out-of-memory message
};

void check_device(int index) {
  TANDEM_CHECK(is_available(), "cuda:", index, ": no CUDA device is available");
  TANDEM_CHECK_T(IndexError, index >= 0 && index < device_count(), "cuda:", index,
                 " does not exist (", device_count(), " visible devices)");
}

}  // namespace

bool compiled_with_cuda() { return true; }

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no driver" error
      return 0;
    }
    return n;
  }();
  return count;
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
         dotted(static_cast<long>(cudnnGetVersion())) + ", NCCL " + dotted(nccl);
}

Allocator& caching_allocator(int index) {
  check_device(index);
  static std::mutex mu;
  static std::unordered_map<int, std::unique_ptr<CachingAllocator>> allocators;
  std::lock_guard<std::mutex> lock(mu);
  auto& a = allocators[index];
  if (!a) a = std::make_unique<CachingAllocator>(index);
  return *a;
}

Allocator& pinned_host_allocator() {
  static PinnedAllocator alloc;
  return alloc;
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
  TANDEM_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault));
}

Stream::Stream(int device) : device_(device) {
  check_device(device);
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  handle_ = s;
}

Stream::~Stream() {
  if (handle_) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
}

Stream::Stream(Stream&& other) noexcept : handle_(other.handle_), device_(other.device_) {
  other.handle_ = nullptr;
}

Stream& Stream::operator=(Stream&& other) noexcept {
  std::swap(handle_, other.handle_);
  std::swap(device_, other.device_);
  return *this;
}

void Stream::synchronize() const {
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
}

}  // namespace tandem::cuda
