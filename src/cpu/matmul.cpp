// CPU batched matrix product on the GEMM of gemm.cpp: transposed operands are read through
// their strides (a GEMM flag), not copied; other layouts are made contiguous first.
#include "kernels.hpp"
#include "loops.hpp"
#include "tandem/kernels/cpu_isa.hpp"
#include "tandem/kernels/functors.hpp"

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

// c[i] = a[i] @ b[i] for every batch index i (all (batch, rows, cols)), through
// product(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc); a and b are read through their
// strides, or made contiguous first where GEMM cannot.
template <typename In, typename Out, typename Product>
void batched(const Tensor& c, Tensor a, Tensor b, Product product) {
  MatLayout la = layout_of(a), lb = layout_of(b);
  if (!la.ok) {
    a = contiguous_as(a, a.dtype());
    la = layout_of(a);
  }
  if (!lb.ok) {
    b = contiguous_as(b, b.dtype());
    lb = layout_of(b);
  }
  const int64_t batch = c.shape()[0], m = c.shape()[1], n = c.shape()[2], k = a.shape()[2];
  const In* pa = ptr<const In>(a);
  const In* pb = ptr<const In>(b);
  Out* pc = ptr<Out>(c);
  const int64_t sa = a.strides()[0], sb = b.strides()[0];
  parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      product(la.trans, lb.trans, m, n, k, pa + i * sa, la.ld, pb + i * sb, lb.ld, pc + i * m * n,
              n);
  });
}

// Integer products, as torch's CPU computes them: sums in the dtype itself, wrapping on
// overflow. A row of c takes a[r, kk] * b[kk, :] for each kk in turn (no GEMM: rare and small).
template <typename T>
void integer_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* pa, int64_t lda,
                     const T* pb, int64_t ldb, T* pc, int64_t ldc) {
  for (int64_t r = 0; r < m; ++r) {
    T* row = pc + r * ldc;
    std::fill(row, row + n, T(0));
    for (int64_t kk = 0; kk < k; ++kk) {
      const T av = ta ? pa[kk * lda + r] : pa[r * lda + kk];
      for (int64_t j = 0; j < n; ++j)
        row[j] = wrap_add(row[j], wrap_mul(av, tb ? pb[j * ldb + kk] : pb[kk * ldb + j]));
    }
  }
}

void bmm(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (!is_floating(out.dtype())) {
    dispatch_dtype<DTypeSet::numeric>(out.dtype(), "bmm (cpu)", [&](auto t) {
      using T = decltype(t);
      if constexpr (std::is_integral_v<T>) batched<T, T>(out, a, b, integer_product<T>);
    });
    return;
  }
  dispatch_dtype<DTypeSet::wide>(out.dtype(), "bmm (cpu)", [&](auto t) {
    using T = decltype(t);
    batched<T, T>(out, a, b,
                  [](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* pa, int64_t lda,
                     const T* pb, int64_t ldb, T* pc, int64_t ldc) {
                    gemm<T>(ta, tb, m, n, k, T(1), pa, lda, pb, ldb, T(0), pc, ldc);
                  });
  });
}

// bf16 products on a CPU with AVX512_BF16 read the bf16 operands as they are (no f32 copies):
// vdpbf16ps sums the products in f32, into scratch, rounded once into `out`. Elsewhere, and for
// other dtypes, the f32 GEMM on widened copies.
void bmm_entry(const Tensor& out, const Tensor& a, const Tensor& b) {
#if defined(__AVX512F__)
  if (out.dtype() == DType::bf16 && a.dtype() == DType::bf16 && b.dtype() == DType::bf16 &&
      out.is_contiguous() && cpu_bf16_dot()) {
    Tensor sums = make_tensor(out.shape(), DType::f32, out.device());
    batched<uint16_t, float>(sums, a, b, gemm_bf16);
    copy(out, sums);
    return;
  }
#endif
  through_f32<&bmm, 0b1>(out, a, b);
}

}  // namespace

TANDEM_REGISTER_CPU(bmm, bmm_entry);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
