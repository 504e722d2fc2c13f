// The CUDA entries of the kernel stubs that exist before the CUDA ops do: filling an f32 tensor
// and copying between contiguous tensors of one dtype. Everything else on a GPU tensor throws
// NotImplementedError from its stub, naming the kernel.
#include "../kernels/kernels.hpp"
#include "tandem/cuda/runtime.hpp"

namespace tandem::kernels::cuda_backend {
namespace {

void fill(const Tensor& dst, double value) {
  TANDEM_CHECK_T(NotImplementedError, dst.dtype() == DType::f32 && dst.is_contiguous(),
                 "fill: the CUDA backend fills contiguous f32 tensors only so far, got ",
                 dst.dtype());
  cuda::fill_f32(static_cast<float*>(dst.raw_data()), static_cast<size_t>(dst.numel()),
                 static_cast<float>(value), dst.device().index());
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
