// The CUDA runtime API of a build without the CUDA backend: nothing is available, and asking
// for a GPU says how to get one.
#include <cstring>

#include "tandem/cuda/runtime.hpp"

namespace tandem::cuda {
namespace {
[[noreturn]] void unavailable(const char* what) {
  TANDEM_THROW(NotImplementedError, what, ": tandem was built without its CUDA backend "
               "(configure on a machine with nvcc, cuBLAS, cuDNN and NCCL)");
}
}  // namespace

bool compiled_with_cuda() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
std::string pci_bus_id(int) { return ""; }
void set_device(int) { unavailable("cuda set_device"); }
int current_device() { unavailable("cuda current_device"); }
void synchronize(int) { unavailable("cuda synchronize"); }
std::string build_info() { return "built without CUDA"; }
Allocator& caching_allocator(int) { unavailable("cuda allocator"); }
Allocator& pinned_host_allocator() { unavailable("pinned allocator"); }
AllocatorStats pinned_memory_stats() { unavailable("pinned memory_stats"); }
bool is_pinned(const void*) { return false; }
AllocatorStats memory_stats(int) { unavailable("cuda memory_stats"); }
void empty_cache(int) { unavailable("cuda empty_cache"); }
void record_stream(void*, int, const Stream&) { unavailable("cuda record_stream"); }

// Settings without a GPU to apply them to: kept, so code that sets them runs on any build.
namespace {
bool g_tf32_matmul = false, g_tf32_conv = true, g_cudnn_benchmark = false, g_vectorized = true;
int64_t g_cudnn_max_elements = 0x7fffffff;
}
void set_allow_tf32_matmul(bool allow) { g_tf32_matmul = allow; }
bool allow_tf32_matmul() { return g_tf32_matmul; }
void set_allow_tf32_conv(bool allow) { g_tf32_conv = allow; }
bool allow_tf32_conv() { return g_tf32_conv; }
void set_cudnn_benchmark(bool on) { g_cudnn_benchmark = on; }
bool cudnn_benchmark() { return g_cudnn_benchmark; }
void set_cudnn_max_elements(int64_t elements) { g_cudnn_max_elements = elements; }
int64_t cudnn_max_elements() { return g_cudnn_max_elements; }
void set_vectorized_elementwise(bool on) { g_vectorized = on; }
bool vectorized_elementwise() { return g_vectorized; }

void profiler_start() {}
void profiler_stop() {}

void defer_check(const void*, int, std::function<void(int64_t)>) {
  unavailable("cuda defer_check");
}
void check_deferred() {}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    if (nbytes) std::memcpy(dst, src, nbytes);
    return;
  }
  unavailable("copy to or from a GPU");
}

void copy_to_device_async(void* dst, Device dst_device, const void* src, const void*,
                          size_t nbytes) {
  copy_bytes(dst, dst_device, src, kCPU, nbytes);
}

Stream::Stream(int) { unavailable("cuda::Stream"); }
Event::Event(int) { unavailable("cuda::Event"); }
void Event::record() {}
bool Event::query() const { return true; }
double Event::seconds_since(const Event&) const { return 0; }
void Stream::synchronize() const {}

}  // namespace tandem::cuda
