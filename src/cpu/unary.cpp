// CPU unary kernels: every functor of kernels/functors.hpp over the strided loop, per dtype.
#include "elementwise_loops.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

using elementwise::dispatch_for_functor;
using elementwise::stored_t;
using elementwise::unary_loop;

void unary(const Tensor& out, UnaryOp op, const OpArgs& args, const Tensor& in) {
  with_unary(op, args, [&](auto f) {
    auto body = [&](auto t) {
      using T = decltype(t);
      using R = stored_t<decltype(f), T, decltype(f(acc_type<T>{}))>;
      unary_loop<R, T>(out, in, f);
    };
    dispatch_for_functor<decltype(f)>(in.dtype(), "unary (cpu)", body);
  });
}

}  // namespace

TANDEM_REGISTER_CPU(unary, unary);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
