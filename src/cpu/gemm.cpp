// Row-major GEMM on Eigen. C is split into fixed 256-wide panels (along the larger of M and N),
// each one single-threaded Eigen product, run in parallel (or inline when the caller is already
// a pool task): panel shapes never depend on the thread count, so neither do the results.
#include <Eigen/Core>

#include "loops.hpp"
#include "tandem/kernels/cpu.hpp"

namespace tandem::kernels::cpu {
namespace {

constexpr int64_t kPanel = 256;

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMap = Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using MutMap = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  MutMap<T> C(c, m, n, Eigen::OuterStride<>(ldc));
  if (k == 0) {
    if (beta == T(0)) C.setZero(); else C *= beta;
    return;
  }
  // op(A) is (m, k): stored (m, k) row-major, or (k, m) row-major when transposed.
  ConstMap<T> A(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  ConstMap<T> B(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  if (beta == T(0)) {
    C.setZero();
  } else if (beta != T(1)) {
    C *= beta;
  }
  if (!trans_a && !trans_b) C.noalias() += alpha * A * B;
  else if (trans_a && !trans_b) C.noalias() += alpha * A.transpose() * B;
  else if (!trans_a && trans_b) C.noalias() += alpha * A * B.transpose();
  else C.noalias() += alpha * A.transpose() * B.transpose();
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  bool split_n = n >= m;
  int64_t extent = split_n ? n : m;
  int64_t panels = (extent + kPanel - 1) / kPanel;
  if (panels <= 1) {
    gemm_serial(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Small products stay on one thread; the panels (and so the bits) are the same either way.
  int64_t grain = m * n * k < (int64_t{1} << 20) ? panels : 1;
  parallel_for(0, panels, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      int64_t start = p * kPanel, len = std::min(kPanel, extent - start);
      if (split_n) {  // columns [start, start + len) of op(B) and C
        const T* bp = trans_b ? b + start * ldb : b + start;
        gemm_serial(trans_a, trans_b, m, len, k, alpha, a, lda, bp, ldb, beta, c + start, ldc);
      } else {  // rows [start, start + len) of op(A) and C
        const T* ap = trans_a ? a + start : a + start * lda;
        gemm_serial(trans_a, trans_b, len, n, k, alpha, ap, lda, b, ldb, beta, c + start * ldc,
                    ldc);
      }
    }
  });
}

#define TANDEM_INSTANTIATE_GEMM(T)                                                          \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, \
                        int64_t, T, T*, int64_t);                                             \

TANDEM_INSTANTIATE_GEMM(float)
TANDEM_INSTANTIATE_GEMM(double)
#undef TANDEM_INSTANTIATE_GEMM

}  // namespace tandem::kernels::cpu
