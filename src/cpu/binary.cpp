// CPU binary kernels: every functor of kernels/functors.hpp over the strided loop, per dtype.
#include "elementwise_loops.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

using elementwise::binary_loop;
using elementwise::dispatch_for_functor;
using elementwise::stored_t;

void binary(const Tensor& out, BinaryOp op, const OpArgs& args, const Tensor& a,
            const Tensor& b) {
  with_binary(op, args, [&](auto f) {
    auto body = [&](auto t) {
      using T = decltype(t);
      using A = acc_type<T>;
      using R = stored_t<decltype(f), T, decltype(f(A{}, A{}))>;
      binary_loop<R, T>(out, a, b, f);
    };
    dispatch_for_functor<decltype(f)>(a.dtype(), "binary (cpu)", body);
  });
}

}  // namespace

TANDEM_REGISTER_CPU(binary, binary);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
