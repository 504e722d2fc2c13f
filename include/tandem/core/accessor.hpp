// TensorAccessor: libtorch's `t.accessor<float, 2>()`, indexed element access to a CPU tensor
// through its strides (`a[i][j]`), for loops written by hand.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem {

/// A view of N dims of a CPU tensor's elements. It points into the tensor's sizes and strides,
/// so it must not outlive the tensor (as libtorch's; `accessor()` on a temporary does not
/// compile).
template <typename T, size_t N>
class TensorAccessor {
 public:
  TensorAccessor(T* data, const int64_t* sizes, const int64_t* strides)
      : data_(data), sizes_(sizes), strides_(strides) {}
  /// The (N - 1)-dim slice at index i of the first dim (no bounds check, as libtorch's).
  TensorAccessor<T, N - 1> operator[](int64_t i) const {
    return TensorAccessor<T, N - 1>(data_ + strides_[0] * i, sizes_ + 1, strides_ + 1);
  }
  int64_t size(size_t d) const { return sizes_[d]; }
  int64_t stride(size_t d) const { return strides_[d]; }
  T* data() const { return data_; }

 private:
  T* data_;
  const int64_t* sizes_;
  const int64_t* strides_;
};

template <typename T>
class TensorAccessor<T, 1> {
 public:
  TensorAccessor(T* data, const int64_t* sizes, const int64_t* strides)
      : data_(data), sizes_(sizes), strides_(strides) {}
  T& operator[](int64_t i) const { return data_[strides_[0] * i]; }
  int64_t size(size_t d) const { return sizes_[d]; }
  int64_t stride(size_t d) const { return strides_[d]; }
  T* data() const { return data_; }

 private:
  T* data_;
  const int64_t* sizes_;
  const int64_t* strides_;
};

}  // namespace tandem
