// Row-major GEMM, C = alpha * op(A) op(B) + beta * C.
//
// f32 on AVX-512 machines runs a packed GEMM in the style of BLIS/GotoBLAS: for each KC-deep
// slice of K, op(A) and op(B) are packed once (shared by all threads) into MR-row and NR-column
// micro-panels, then an 8x48 register-blocked micro-kernel (24 zmm accumulators) computes C tiles
// in parallel. Block sizes were tuned on the 2-core Zen 5 CI machine (docs/PERFORMANCE.md).
// Every element of C is summed in the same order (KC slices in sequence, k in order within a
// slice) whichever thread computes it, so results do not depend on the thread count.
// Other types and instruction sets use Eigen, with C split into fixed 256-wide panels for the
// same reason.
#include <Eigen/Core>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "loops.hpp"
#include "kernels.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

// --- Eigen path ------------------------------------------------------------------------------

constexpr int64_t kPanel = 256;

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMap = Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using MutMap = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <typename T>
void scale_c(T* c, int64_t m, int64_t n, int64_t ldc, T beta) {
  if (beta == T(1)) return;
  MutMap<T> C(c, m, n, Eigen::OuterStride<>(ldc));
  if (beta == T(0)) {
    C.setZero();  // overwrite: NaN in C must not survive beta = 0
  } else {
    C *= beta;
  }
}

template <typename T>
void eigen_gemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
                       const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
                       int64_t ldc) {
  if (m == 0 || n == 0) return;
  scale_c(c, m, n, ldc, beta);
  if (k == 0) return;
  MutMap<T> C(c, m, n, Eigen::OuterStride<>(ldc));
  // op(A) is (m, k): stored (m, k) row-major, or (k, m) row-major when transposed.
  ConstMap<T> A(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  ConstMap<T> B(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  if (!trans_a && !trans_b)
    C.noalias() += alpha * A * B;
  else if (trans_a && !trans_b)
    C.noalias() += alpha * A.transpose() * B;
  else if (!trans_a && trans_b)
    C.noalias() += alpha * A * B.transpose();
  else
    C.noalias() += alpha * A.transpose() * B.transpose();
}

template <typename T>
void eigen_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  bool split_n = n >= m;
  int64_t extent = split_n ? n : m;
  int64_t panels = (extent + kPanel - 1) / kPanel;
  // Small products stay on one thread; the panels (and so the bits) are the same either way.
  int64_t grain = m * n * k < (int64_t{1} << 20) ? panels : 1;
  parallel_for(0, panels, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      int64_t start = p * kPanel, len = std::min(kPanel, extent - start);
      if (split_n) {  // columns [start, start + len) of op(B) and C
        const T* bp = trans_b ? b + start * ldb : b + start;
        eigen_gemm_serial(trans_a, trans_b, m, len, k, alpha, a, lda, bp, ldb, beta, c + start,
                          ldc);
      } else {  // rows [start, start + len) of op(A) and C
        const T* ap = trans_a ? a + start : a + start * lda;
        eigen_gemm_serial(trans_a, trans_b, len, n, k, alpha, ap, lda, b, ldb, beta,
                          c + start * ldc, ldc);
      }
    }
  });
}

#if defined(__AVX512F__)
// --- packed AVX-512 paths -----------------------------------------------------------------------
// One driver (packed_gemm) for two element kinds: f32 (vfmadd, one k per step) and bf16 pairs
// (vdpbf16ps, two k per step: each 32-bit lane of a packed panel holds op(A) or op(B) at k and
// k + 1, and one instruction adds both products). A Kind gives the packed word, the k per word,
// the slice depth, the two packers and the micro-kernel; tiles, tasks and order are shared.

constexpr int64_t kMR = 8;         // rows of a micro-tile: channel counts are multiples of 8
constexpr int kNV = 3;             // zmm registers per row of a micro-tile
constexpr int64_t kNR = 16 * kNV;  // columns of a micro-tile (24 accumulators in all)
constexpr int64_t kMC = 128;       // rows per task (A block 512 KB)
constexpr int64_t kNC = 192;       // columns per task (B micro-panels of 192 KB stream from L2)

// Element (i, k) of op(A) and (k, j) of op(B), from row-major storage.
template <typename T>
struct Operand {
  const T* data;
  int64_t row_stride, col_stride;
};

// dst[q * dst_stride + r] = alpha * src[r * src_stride + q] for an 8 x 8 block: eight rows of
// the source become eight rows of the destination.
inline void transpose8x8(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                         float alpha) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  for (int i = 0; i < 8; i += 2) {  // pairs of rows interleaved
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // quads: 64-bit lanes of two pairs
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  const __m256 scale = _mm256_set1_ps(alpha);
  for (int i = 0; i < 4; ++i) {  // 128-bit halves of the two quads
    t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * dst_stride, _mm256_mul_ps(scale, t[i]));
}

// The f32 kind: C[0:MR, 0:NR] (row stride ldc) = or += Ap (kc x MR) * Bp (kc x NR), both packed
// k-major, alpha folded into Ap.
struct F32Kind {
  using In = float;
  using Word = float;
  static constexpr int64_t kPerWord = 1;
  static constexpr int64_t kKC =
      1024;  // depth of a packed slice (A micro-panel 32 KB: stays in L1)

  // NV < kNV: only the first 16 * NV columns of the panel (a narrow edge of C).
  template <int NV = kNV>
  static void micro(int64_t words, const float* __restrict ap, const float* __restrict bp,
                    float* __restrict c, int64_t ldc, bool accumulate) {
    __m512 acc[kMR][NV];
    for (int i = 0; i < kMR; ++i)
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < words; ++p) {
      __m512 b[NV];
      for (int v = 0; v < NV; ++v) b[v] = _mm512_load_ps(bp + 16 * v);
      for (int i = 0; i < kMR; ++i) {
        __m512 a = _mm512_set1_ps(ap[i]);
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(a, b[v], acc[i][v]);
      }
      ap += kMR;
      bp += kNR;
    }
    store(acc, c, ldc, accumulate);
  }

  template <int NV>
  static void store(__m512 (&acc)[kMR][NV], float* c, int64_t ldc, bool accumulate) {
    for (int i = 0; i < kMR; ++i) {
      float* row = c + i * ldc;
      for (int v = 0; v < NV; ++v) {
        if (accumulate) acc[i][v] = _mm512_add_ps(_mm512_loadu_ps(row + 16 * v), acc[i][v]);
        _mm512_storeu_ps(row + 16 * v, acc[i][v]);
      }
    }
  }

  // op(A)[r0:r0+MR, k0:k0+kc] into dst (kc x MR, alpha folded in, zero padded). Both packers
  // read their source along its contiguous direction: rows of a row-major operand, columns of a
  // transposed one (reading across rows would touch a new cache line per element).
  static void pack_a(float* dst, const Operand<float>& A, int64_t r0, int64_t rows, int64_t k0,
                     int64_t kc, float alpha) {
    if (rows == kMR) {  // whole panels, 8 x 8 blocks at a time; the scalar loops do the rest
      const float* src = A.data + r0 * A.row_stride + k0 * A.col_stride;
      if (A.col_stride == 1) {
        const int64_t whole = kc / 8 * 8;
        for (int64_t kk = 0; kk < whole; kk += 8)
          transpose8x8(src + kk, A.row_stride, dst + kk * kMR, kMR, alpha);
        for (int64_t r = 0; r < kMR; ++r)
          for (int64_t kk = whole; kk < kc; ++kk)
            dst[kk * kMR + r] = alpha * src[r * A.row_stride + kk];
      } else {
        const __m256 scale = _mm256_set1_ps(alpha);
        for (int64_t kk = 0; kk < kc; ++kk)
          _mm256_storeu_ps(dst + kk * kMR,
                           _mm256_mul_ps(scale, _mm256_loadu_ps(src + kk * A.col_stride)));
      }
      return;
    }
    std::fill(dst, dst + kMR * kc, 0.0f);
    if (A.col_stride == 1) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* src = A.data + (r0 + r) * A.row_stride + k0;
        for (int64_t kk = 0; kk < kc; ++kk) dst[kk * kMR + r] = alpha * src[kk];
      }
    } else {
      for (int64_t kk = 0; kk < kc; ++kk) {
        const float* src = A.data + (k0 + kk) * A.col_stride + r0 * A.row_stride;
        for (int64_t r = 0; r < rows; ++r) dst[kk * kMR + r] = alpha * src[r * A.row_stride];
      }
    }
  }

  // op(B)[k0:k0+kc, c0:c0+NR] into dst (kc x NR, zero padded).
  static void pack_b(float* dst, const Operand<float>& B, int64_t c0, int64_t cols, int64_t k0,
                     int64_t kc) {
    if (cols == kNR) {  // whole panels, as pack_a's
      const float* src = B.data + k0 * B.row_stride + c0 * B.col_stride;
      if (B.col_stride == 1) {
        for (int64_t kk = 0; kk < kc; ++kk)
          for (int v = 0; v < kNV; ++v)
            _mm512_store_ps(dst + kk * kNR + 16 * v,
                            _mm512_loadu_ps(src + kk * B.row_stride + 16 * v));
        return;
      }
      const int64_t whole = kc / 8 * 8;
      for (int64_t j = 0; j < kNR; j += 8) {
        for (int64_t kk = 0; kk < whole; kk += 8)
          transpose8x8(src + j * B.col_stride + kk, B.col_stride, dst + kk * kNR + j, kNR, 1.0f);
        for (int64_t kk = whole; kk < kc; ++kk)
          for (int64_t jj = j; jj < j + 8; ++jj) dst[kk * kNR + jj] = src[jj * B.col_stride + kk];
      }
      return;
    }
    if (B.col_stride == 1) {
      for (int64_t kk = 0; kk < kc; ++kk) {
        const float* src = B.data + (k0 + kk) * B.row_stride + c0;
        int64_t j = 0;
        for (; j < cols; ++j) dst[kk * kNR + j] = src[j];
        for (; j < kNR; ++j) dst[kk * kNR + j] = 0.0f;
      }
      return;
    }
    if (cols < kNR) std::fill(dst, dst + kNR * kc, 0.0f);
    for (int64_t j = 0; j < cols; ++j) {
      const float* src = B.data + (c0 + j) * B.col_stride + k0 * B.row_stride;
      for (int64_t kk = 0; kk < kc; ++kk) dst[kk * kNR + j] = src[kk * B.row_stride];
    }
  }
};

// The bf16 kind: words of two bf16 (k even in the low half, k + 1 in the high half; an odd
// depth's last high half is zero), products summed in f32 by vdpbf16ps. alpha must be 1.
struct Bf16Kind {
  using In = uint16_t;  // bf16 bits
  using Word = uint32_t;
  static constexpr int64_t kPerWord = 2;
  static constexpr int64_t kKC = 2048;  // the same 32 KB A micro-panel as f32's

  template <int NV = kNV>
  __attribute__((target("avx512bf16"))) static void micro(int64_t words,
                                                          const uint32_t* __restrict ap,
                                                          const uint32_t* __restrict bp,
                                                          float* __restrict c, int64_t ldc,
                                                          bool accumulate) {
    __m512 acc[kMR][NV];
    for (int i = 0; i < kMR; ++i)
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < words; ++p) {
      __m512bh b[NV];
      for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_load_si512(bp + 16 * v);
      for (int i = 0; i < kMR; ++i) {
        const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(ap[i]));
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], a, b[v]);
      }
      ap += kMR;
      bp += kNR;
    }
    F32Kind::store(acc, c, ldc, accumulate);
  }

  // Two bf16 of a contiguous source as one word; an odd depth's last word has only the first.
  static uint32_t load_pair(const uint16_t* p, bool both) {
    if (!both) return *p;
    uint32_t w;
    std::memcpy(&w, p, sizeof w);
    return w;
  }

  // Element i of rows p0 (low half) and p1 (high half; none at an odd depth's end) as one word.
  static uint32_t word(const uint16_t* p0, const uint16_t* p1, int64_t i) {
    return p0[i] | (p1 ? static_cast<uint32_t>(p1[i]) << 16 : 0u);
  }

  // 16 words of rows p0 (low halves) and p1 (high halves; none at an odd depth's end).
  static __m512i interleave16(const uint16_t* p0, const uint16_t* p1) {
    const __m512i lo =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0)));
    if (p1 == nullptr) return lo;
    const __m512i hi =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1)));
    return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
  }

  // As F32Kind's packers, each reads its source along the contiguous direction: a row-major
  // operand's pairs are adjacent (one 32-bit load); a transposed one's are two rows apart
  // (interleaved 16 at a time).
  static void pack_a(uint32_t* dst, const Operand<uint16_t>& A, int64_t r0, int64_t rows,
                     int64_t k0, int64_t kc, float) {
    const int64_t words = (kc + 1) / 2;
    if (rows < kMR) std::fill(dst, dst + kMR * words, 0u);
    if (A.col_stride == 1) {
      for (int64_t r = 0; r < rows; ++r) {
        const uint16_t* src = A.data + (r0 + r) * A.row_stride + k0;
        for (int64_t w = 0; w < words; ++w)
          dst[w * kMR + r] = load_pair(src + 2 * w, 2 * w + 1 < kc);
      }
      return;
    }
    for (int64_t w = 0; w < words; ++w) {
      const uint16_t* p0 = A.data + (k0 + 2 * w) * A.col_stride + r0;
      const uint16_t* p1 = 2 * w + 1 < kc ? p0 + A.col_stride : nullptr;
      for (int64_t r = 0; r < rows; ++r) dst[w * kMR + r] = word(p0, p1, r);
    }
  }

  static void pack_b(uint32_t* dst, const Operand<uint16_t>& B, int64_t c0, int64_t cols,
                     int64_t k0, int64_t kc) {
    const int64_t words = (kc + 1) / 2;
    if (cols < kNR) std::fill(dst, dst + kNR * words, 0u);
    if (B.col_stride == 1) {
      for (int64_t w = 0; w < words; ++w) {
        const uint16_t* p0 = B.data + (k0 + 2 * w) * B.row_stride + c0;
        const uint16_t* p1 = 2 * w + 1 < kc ? p0 + B.row_stride : nullptr;
        uint32_t* out = dst + w * kNR;
        if (cols == kNR) {
          for (int v = 0; v < kNV; ++v)
            _mm512_store_si512(out + 16 * v, interleave16(p0 + 16 * v, p1 ? p1 + 16 * v : nullptr));
        } else {
          for (int64_t j = 0; j < cols; ++j) out[j] = word(p0, p1, j);
        }
      }
      return;
    }
    for (int64_t j = 0; j < cols; ++j) {
      const uint16_t* src = B.data + (c0 + j) * B.col_stride + k0;
      for (int64_t w = 0; w < words; ++w) dst[w * kNR + j] = load_pair(src + 2 * w, 2 * w + 1 < kc);
    }
  }
};

// A tile at the edge of C, on as many of the panel's 16-column vectors as it has columns: stored
// in place when it has whole rows and vectors, otherwise computed into a scratch tile and its
// valid part stored.
template <typename Kind>
void edge_kernel(int64_t words, const typename Kind::Word* ap, const typename Kind::Word* bp,
                 float* c, int64_t ldc, int64_t mr, int64_t nr, bool accumulate) {
  const int64_t vectors = (nr + 15) / 16;
  auto micro = [&](float* out, int64_t ld, bool acc) {  // on `vectors` of the panel's vectors
    if (vectors == 1) return Kind::template micro<1>(words, ap, bp, out, ld, acc);
    if (vectors == 2) return Kind::template micro<2>(words, ap, bp, out, ld, acc);
    Kind::micro(words, ap, bp, out, ld, acc);
  };
  if (mr == kMR && nr % 16 == 0) return micro(c, ldc, accumulate);
  alignas(64) float tile[kMR * kNR];
  micro(tile, kNR, false);
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j)
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + tile[i * kNR + j] : tile[i * kNR + j];
}

// C = alpha * op(A) op(B) + beta * C, C in f32, A and B of Kind::In.
template <typename Kind>
void packed_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const typename Kind::In* a, int64_t lda, const typename Kind::In* b, int64_t ldb,
                 float beta, float* c, int64_t ldc) {
  using Word = typename Kind::Word;
  if (m == 0 || n == 0) return;
  const Operand<typename Kind::In> A{a, trans_a ? 1 : lda, trans_a ? lda : 1};
  const Operand<typename Kind::In> B{b, trans_b ? 1 : ldb, trans_b ? ldb : 1};
  const int64_t m_panels = (m + kMR - 1) / kMR, n_panels = (n + kNR - 1) / kNR;
  const int64_t slice_words = Kind::kKC / Kind::kPerWord;
  // Packing buffers of the calling thread (64-byte aligned), shared read-only by the tasks below.
  auto lines = [](int64_t words) { return static_cast<size_t>((words + 15) / 16); };
  static_assert(sizeof(Word) == sizeof(float));
  Word* ap_all =
      reinterpret_cast<Word*>(scratch<CacheLine, 6>(lines(m_panels * kMR * slice_words)).data()->v);
  Word* bp_all =
      reinterpret_cast<Word*>(scratch<CacheLine, 7>(lines(n_panels * kNR * slice_words)).data()->v);

  const int64_t work = m * n * std::max<int64_t>(k, 1);
  const bool small = work < (int64_t{1} << 21);  // one thread: scheduling would cost more
  const int64_t row_tasks = (m + kMC - 1) / kMC, col_tasks = (n + kNC - 1) / kNC;

  // beta = 0: the first K slice stores instead of adding (C is never read, so NaNs in it do
  // not survive, and fresh memory is written once); otherwise scale, then accumulate.
  if (beta != 0.0f && beta != 1.0f) {
    parallel_for(0, m, small ? m : 64, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] *= beta;
    });
  }
  if (k == 0 && beta == 0.0f) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
  }

  for (int64_t k0 = 0; k0 < k; k0 += Kind::kKC) {
    const int64_t kc = std::min(Kind::kKC, k - k0);
    const int64_t words = (kc + Kind::kPerWord - 1) / Kind::kPerWord;
    const bool accumulate = k0 > 0 || beta != 0.0f;
    // Pack op(A)[:, k0:k0+kc] into panels of kMR rows and op(B)[k0:k0+kc, :] into panels of kNR
    // columns, in one parallel pass.
    const int64_t panels = m_panels + n_panels;
    parallel_for(0, panels, small ? panels : 4, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        if (p < m_panels) {
          Kind::pack_a(ap_all + p * kMR * slice_words, A, p * kMR, std::min(kMR, m - p * kMR), k0,
                       kc, alpha);
        } else {
          const int64_t q = p - m_panels;
          Kind::pack_b(bp_all + q * kNR * slice_words, B, q * kNR, std::min(kNR, n - q * kNR), k0,
                       kc);
        }
      }
    });
    // C tiles: tasks of kMC rows x kNC columns; within a task each B micro-panel is reused by
    // every A micro-panel of the task's rows before the next one is read.
    parallel_for(
        0, row_tasks * col_tasks, small ? row_tasks * col_tasks : 1, [&](int64_t lo, int64_t hi) {
          for (int64_t t = lo; t < hi; ++t) {
            const int64_t i_begin = (t / col_tasks) * kMC, j_begin = (t % col_tasks) * kNC;
            const int64_t i_end = std::min(m, i_begin + kMC), j_end = std::min(n, j_begin + kNC);
            for (int64_t j0 = j_begin; j0 < j_end; j0 += kNR) {
              const Word* bp = bp_all + (j0 / kNR) * kNR * slice_words;
              const int64_t nr = std::min(kNR, j_end - j0);
              for (int64_t i0 = i_begin; i0 < i_end; i0 += kMR) {
                const Word* ap = ap_all + (i0 / kMR) * kMR * slice_words;
                const int64_t mr = std::min(kMR, i_end - i0);
                float* ct = c + i0 * ldc + j0;
                if (mr == kMR && nr == kNR) {
                  Kind::micro(words, ap, bp, ct, ldc, accumulate);
                } else {
                  edge_kernel<Kind>(words, ap, bp, ct, ldc, mr, nr, accumulate);
                }
              }
            }
          }
        });
  }
}
#endif

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    packed_gemm<F32Kind>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#endif
  eigen_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#if defined(__AVX512F__)
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  packed_gemm<Bf16Kind>(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}
#endif

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
