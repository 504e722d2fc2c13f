// Library handles (cuBLAS, cuDNN): made once per (thread, device) and given back to a pool when
// the thread ends, for the next thread (ranks are threads; the pool keeps their number bounded).
#pragma once

#include <mutex>
#include <unordered_map>
#include <vector>

#include "check.hpp"

namespace tandem::cuda {

/// The calling thread's handle for `device`, made by create() with the device current the first
/// time (or taken from the pool of ended threads'). Handles are never destroyed: threads may
/// end after main, when the libraries are gone.
template <typename H>
H thread_handle(int device, H (*create)()) {
  struct Pool {
    std::mutex mu;
    std::unordered_map<int, std::vector<H>> free;
  };
  static Pool* pool = new Pool();
  struct Mine {
    std::unordered_map<int, H> by_device;
    ~Mine() {
      std::lock_guard<std::mutex> lock(pool->mu);
      for (auto& [d, h] : by_device) pool->free[d].push_back(h);
    }
  };
  thread_local Mine mine;
  auto it = mine.by_device.find(device);
  if (it != mine.by_device.end()) return it->second;
  H h{};
  {
    std::lock_guard<std::mutex> lock(pool->mu);
    auto& free = pool->free[device];
    if (!free.empty()) {
      h = free.back();
      free.pop_back();
    }
  }
  if (!h) {
    DeviceGuard guard(device);
    h = create();
  }
  mine.by_device.emplace(device, h);
  return h;
}

}  // namespace tandem::cuda
