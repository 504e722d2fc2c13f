// CPU kernels of the classification losses: picking each row's target class and scattering its
// gradient back.
#include "kernels.hpp"
#include "loops.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

void pick_classes(const Tensor& out, const Tensor& x, const Tensor& target, int64_t ignore_index,
                  const char* op) {
  const int64_t rows = x.size(0), classes = x.size(1);
  const int64_t* t = ptr<const int64_t>(target);
  for (int64_t i = 0; i < rows; ++i)
    TANDEM_CHECK_INDEX(t[i] == ignore_index || (t[i] >= 0 && t[i] < classes), op, ": target ",
                       t[i], " is out of bounds for ", classes, " classes (at position ", i, ")");
  dispatch_dtype<DTypeSet::floating>(x.dtype(), "pick_classes (cpu)", [&](auto tag) {
    using T = decltype(tag);
    const T* px = ptr<const T>(x);
    T* po = ptr<T>(out);
    parallel_for(0, rows, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = t[i] == ignore_index ? T(0) : px[i * classes + t[i]];
    });
  });
}

void pick_classes_backward(const Tensor& grad_x, const Tensor& grad, const Tensor& target,
                           int64_t ignore_index) {
  const int64_t rows = grad_x.size(0), classes = grad_x.size(1);
  const int64_t* t = ptr<const int64_t>(target);
  dispatch_dtype<DTypeSet::floating>(grad_x.dtype(), "pick_classes_backward (cpu)", [&](auto tag) {
    using T = decltype(tag);
    T* pg = ptr<T>(grad_x);
    const T* pgo = ptr<const T>(grad);
    parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(classes, 1)),
                 [&](int64_t lo, int64_t hi) {
                   std::fill(pg + lo * classes, pg + hi * classes, T(0));
                   for (int64_t i = lo; i < hi; ++i)
                     if (t[i] != ignore_index) pg[i * classes + t[i]] = pgo[i];
                 });
  });
}

}  // namespace

TANDEM_REGISTER_CPU(pick_classes, pick_classes);
TANDEM_REGISTER_CPU(pick_classes_backward, pick_classes_backward);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
