// TensorAccessor: libtorch's `t.accessor<float, 2>()`, indexed element access to a CPU tensor
// through its strides (`a[i][j]`), for loops written by hand.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem {

/// What accessors of every rank hold: the first element, and the sizes and strides from there.
template <typename T>
class AccessorBase {
 public:
  AccessorBase(T* data, const int64_t* sizes, const int64_t* strides)
      : data_(data), sizes_(sizes), strides_(strides) {}
  int64_t size(size_t d) const { return sizes_[d]; }
  int64_t stride(size_t d) const { return strides_[d]; }
  T* data() const { return data_; }

 protected:
  T* data_;
  const int64_t* sizes_;
  const int64_t* strides_;
};

/// A view of N dims of a CPU tensor's elements. It points into the tensor's sizes and strides,
/// so it must not outlive the tensor (as libtorch's; `accessor()` on a temporary does not
/// compile).
template <typename T, size_t N>
class TensorAccessor : public AccessorBase<T> {
 public:
  using AccessorBase<T>::AccessorBase;
  /// The (N - 1)-dim slice at index i of the first dim (no bounds check, as libtorch's).
  TensorAccessor<T, N - 1> operator[](int64_t i) const {
    return TensorAccessor<T, N - 1>(this->data_ + this->strides_[0] * i, this->sizes_ + 1,
                                    this->strides_ + 1);
  }
};

template <typename T>
class TensorAccessor<T, 1> : public AccessorBase<T> {
 public:
  using AccessorBase<T>::AccessorBase;
  T& operator[](int64_t i) const { return this->data_[this->strides_[0] * i]; }
};

}  // namespace tandem
