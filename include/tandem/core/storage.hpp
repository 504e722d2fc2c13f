// Storage: a reference-counted byte buffer on a device, and the allocators behind it
// (CPU 64-byte aligned, CPU pinned, CUDA caching).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "tandem/core/device.hpp"

namespace tandem {

/// Allocates raw bytes on one device. Implementations are thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;
};

/// 64-byte aligned host memory (one cache line; what AVX-512 loads like best).
Allocator& cpu_allocator();
/// Page-locked host memory for fast, asynchronous host-device copies; plain aligned memory
/// when CUDA is absent.
Allocator& pinned_allocator();
/// The allocator for `device` (CPU, or the CUDA caching allocator of that GPU).
Allocator& allocator_for(Device device);

/// A byte buffer shared by every tensor that views it.
class Storage {
 public:
  Storage() = default;
  /// Allocates `nbytes` on `device`.
  Storage(size_t nbytes, Device device);
  /// Wraps memory the caller owns; `deleter` (may be empty) runs when the last view goes.
  static Storage from_blob(void* data, size_t nbytes, Device device,
                           std::function<void(void*)> deleter = {});

  void* data() const { return impl_ ? impl_->data : nullptr; }
  size_t nbytes() const { return impl_ ? impl_->nbytes : 0; }
  Device device() const { return impl_ ? impl_->device : kCPU; }
  bool defined() const { return static_cast<bool>(impl_); }
  bool is_same(const Storage& other) const { return impl_ == other.impl_; }
  /// How many tensors (views) share this buffer.
  long use_count() const { return impl_.use_count(); }
  /// How many in-place writes through the Tensor API (and optimizer steps) this buffer has
  /// seen, as PyTorch's version counter: autograd compares it with the count a saved tensor
  /// had when its op ran.
  uint32_t version() const { return impl_ ? impl_->version.load(std::memory_order_relaxed) : 0; }
  void bump_version() const {
    if (impl_) impl_->version.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  struct Impl {
    void* data = nullptr;
    size_t nbytes = 0;
    Device device;
    std::function<void(void*)> deleter;
    std::atomic<uint32_t> version{0};
    ~Impl() {
      if (deleter) deleter(data);
    }
  };
  std::shared_ptr<Impl> impl_;
};

}  // namespace tandem
