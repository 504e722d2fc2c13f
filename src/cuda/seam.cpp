// The CUDA entries of the kernel stubs that exist before the CUDA ops do: filling a contiguous
// tensor of any dtype and copying between contiguous tensors of one dtype. Everything else on a GPU tensor throws
// NotImplementedError from its stub, naming the kernel.
#include "../kernels/kernels.hpp"
#include <cstring>

#include "tandem/core/dtype_dispatch.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem::kernels::cuda_backend {
namespace {

void fill(const Tensor& dst, double value) {
  TANDEM_CHECK_T(NotImplementedError, dst.is_contiguous(),
                 "fill: the CUDA backend fills contiguous tensors only so far");
  // The value's bytes in dst's dtype, converted on the host as the CPU kernel converts it.
  uint64_t pattern = 0;
  dispatch_dtype(dst.dtype(), "fill (cuda)", [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, bool>) {
      v = value != 0.0;
    } else if constexpr (std::is_same_v<acc_type<T>, T>) {
      v = static_cast<T>(value);
    } else {
      v = T(static_cast<float>(value));
    }
    std::memcpy(&pattern, &v, sizeof v);
  });
  cuda::fill_pattern(dst.raw_data(), static_cast<size_t>(dst.numel()), pattern,
                     static_cast<int>(dst.element_size()), dst.device().index());
}

void copy(const Tensor& dst, const Tensor& src) {
  TANDEM_CHECK_T(NotImplementedError,
                 dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() &&
                     dst.shape() == src.shape(),
                 "copy: the CUDA backend copies contiguous tensors of one dtype only so far, got ",
                 src.dtype(), " to ", dst.dtype());
  cuda::copy_bytes(dst.raw_data(), dst.device(), src.raw_data(), src.device(),
                   static_cast<size_t>(dst.numel() * dst.element_size()));
}

}  // namespace

TANDEM_REGISTER_CUDA(fill, fill);
TANDEM_REGISTER_CUDA(copy, copy);

}  // namespace tandem::kernels::cuda_backend
