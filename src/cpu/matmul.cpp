// CPU batched matrix product on the GEMM of gemm.cpp: transposed operands are read through
// their strides (a GEMM flag), not copied; other layouts are made contiguous first.
#include "kernels.hpp"
#include "loops.hpp"
#include "tandem/kernels/cpu_isa.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

// How GEMM reads one (batch, rows, cols) operand without a copy: row-major or transposed.
struct MatLayout {
  bool ok = false, trans = false;
  int64_t ld = 0;
};

MatLayout layout_of(const Tensor& t) {
  int64_t rows = t.shape()[1], cols = t.shape()[2];
  int64_t s_r = t.strides()[1], s_c = t.strides()[2];
  if ((s_c == 1 || cols == 1) && (s_r >= std::max<int64_t>(cols, 1) || rows == 1))
    return {true, false, rows == 1 ? std::max<int64_t>(cols, 1) : s_r};
  if ((s_r == 1 || rows == 1) && (s_c >= std::max<int64_t>(rows, 1) || cols == 1))
    return {true, true, cols == 1 ? std::max<int64_t>(rows, 1) : s_c};
  return {};
}

// a and b (batch, rows, cols), each made contiguous unless GEMM can read it as it is, with
// their layouts.
struct Operands {
  Tensor a, b;
  MatLayout la, lb;
};

Operands gemm_operands(Tensor a, Tensor b) {
  MatLayout la = layout_of(a), lb = layout_of(b);
  if (!la.ok) {
    a = contiguous_as(a, a.dtype());
    la = layout_of(a);
  }
  if (!lb.ok) {
    b = contiguous_as(b, b.dtype());
    lb = layout_of(b);
  }
  return {a, b, la, lb};
}

template <typename T>
void bmm_typed(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  const Operands ops = gemm_operands(a_in, b_in);
  const Tensor &a = ops.a, &b = ops.b;
  const MatLayout la = ops.la, lb = ops.lb;
  const int64_t batch = out.shape()[0], m = out.shape()[1], n = out.shape()[2], k = a.shape()[2];
  const T* pa = ptr<const T>(a);
  const T* pb = ptr<const T>(b);
  T* pc = ptr<T>(out);
  const int64_t sa = a.strides()[0], sb = b.strides()[0];
  parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      gemm<T>(la.trans, lb.trans, m, n, k, T(1), pa + i * sa, la.ld, pb + i * sb, lb.ld, T(0),
              pc + i * m * n, n);
  });
}

void bmm(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_dtype<DTypeSet::wide>(out.dtype(), "bmm (cpu)",
                                 [&](auto t) { bmm_typed<decltype(t)>(out, a, b); });
}

// bf16 products on a CPU with AVX512_BF16 read the bf16 operands as they are (no f32 copies):
// vdpbf16ps sums the products in f32, into scratch, rounded once into `out`. Elsewhere, and for
// other dtypes, the f32 GEMM on widened copies.
void bmm_entry(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
#if defined(__AVX512F__)
  if (out.dtype() == DType::bf16 && a_in.dtype() == DType::bf16 && b_in.dtype() == DType::bf16 &&
      out.is_contiguous() && cpu_bf16_dot()) {
    const Operands ops = gemm_operands(a_in, b_in);
    const Tensor &a = ops.a, &b = ops.b;
    const MatLayout la = ops.la, lb = ops.lb;
    const int64_t batch = out.shape()[0], m = out.shape()[1], n = out.shape()[2], k = a.shape()[2];
    const auto* pa = ptr<const uint16_t>(a);
    const auto* pb = ptr<const uint16_t>(b);
    Tensor sums = make_tensor(out.shape(), DType::f32, out.device());
    float* pc = ptr<float>(sums);
    const int64_t sa = a.strides()[0], sb = b.strides()[0];
    parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        gemm_bf16(la.trans, lb.trans, m, n, k, pa + i * sa, la.ld, pb + i * sb, lb.ld,
                  pc + i * m * n, n);
    });
    copy(out, sums);
    return;
  }
#endif
  through_f32<&bmm, 0b1>(out, a_in, b_in);
}

}  // namespace

TANDEM_REGISTER_CPU(bmm, bmm_entry);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
