// Host allocators and Storage.
#include "tandem/core/storage.hpp"

#include <cstdlib>

#include "tandem/cuda/runtime.hpp"

namespace tandem {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    // Round up to whole cache lines: aligned_alloc wants a multiple of the alignment.
    size_t rounded = ((nbytes + 63) / 64) * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    TANDEM_CHECK(p != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
  Device device() const override { return kCPU; }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator alloc;
  return alloc;
}

Allocator& pinned_allocator() {
  return cuda::is_available() ? cuda::pinned_host_allocator() : cpu_allocator();
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  return cuda::caching_allocator(device.index());
}

Storage::Storage(size_t nbytes, Device device) {
  Allocator& alloc = allocator_for(device);
  impl_ = std::make_shared<Impl>();
  impl_->data = alloc.allocate(nbytes);
  impl_->nbytes = nbytes;
  impl_->device = device;
  impl_->deleter = [&alloc, nbytes](void* p) { alloc.deallocate(p, nbytes); };
}

Storage Storage::from_blob(void* data, size_t nbytes, Device device,
                           std::function<void(void*)> deleter) {
  Storage s;
  s.impl_ = std::make_shared<Impl>();
  s.impl_->data = data;
  s.impl_->nbytes = nbytes;
  s.impl_->device = device;
  s.impl_->deleter = std::move(deleter);
  return s;
}

}  // namespace tandem
