// The strided N-d loop every CPU elementwise kernel runs on: it merges dims that are contiguous
// for all operands, then hands runs along the innermost dim to a callback, in parallel.
#pragma once

#include <Eigen/Core>
#if defined(__F16C__)
#include <immintrin.h>
#endif
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../kernels/collapse.hpp"
#include "isa.hpp"
#include "tandem/core/dtype_dispatch.hpp"
#include "tandem/core/tensor.hpp"
#include "tandem/core/thread_pool.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {

/// Elements per parallel chunk: big enough that scheduling costs nothing next to the work.
constexpr int64_t kElementwiseGrain = 32768;

/// f(plane) for `planes` consecutive planes of `cost` loads or stores each, in parallel, in
/// memory order: each task streams a contiguous run of planes, which the hardware prefetches
/// (batch norm and pooling; reading a channel's planes one sample apart each stalled on every one).
template <typename F>
void for_each_plane(int64_t planes, int64_t cost, F&& f) {
  parallel_for(0, planes, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(cost, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t plane = lo; plane < hi; ++plane) f(plane);
               });
}

/// Rows per tile and elements per run in a tile, when an operand reads across the rows (below):
/// 16 columns of a transposed operand are 16 pages, few enough for the first-level TLB. A 4096 x
/// 1024 transpose copy took 4.5 ms a thread in tiles of 128 x 16 and 256 x 16, 7 ms in 128 x 32,
/// 11 ms in 64 x 64 and 32 x 256 (an ad hoc sweep on this machine's EPYC).
constexpr int64_t kTileRows = 128, kTileCols = 16;

/// Calls run(offsets, n, inner_strides) for runs of n elements along the innermost dim, where
/// offsets[k] is operand k's element offset of the run's first element. A single long run (a
/// dense tensor) is cut into parts of kElementwiseGrain elements or more, run in parallel.
/// `tile_width`: the runs' length in a tile (below); a kernel whose run has a cost of its own (a
/// vector function's constants) asks for longer ones.
template <size_t N, typename F>
void for_each_run(const Shape& shape, const std::array<Shape, N>& strides, F&& run,
                  int64_t tile_width = kTileCols) {
  const CollapsedDims<N> c = collapse_dims(shape, strides);
  const Shape& sh = c.sizes;
  const std::array<Shape, N>& st = c.strides;
  int64_t numel = numel_of(shape);
  if (numel == 0) return;
  const int64_t nd = static_cast<int64_t>(sh.size());
  const int64_t inner = sh.back();
  const int64_t rows = numel / inner;
  std::array<int64_t, N> inner_st;
  for (size_t k = 0; k < N; ++k) inner_st[k] = st[k].back();
  if (rows == 1) {  // one run (a dense tensor, collapsed whole): split it along its length
    parallel_for(0, inner, kElementwiseGrain, [&](int64_t i0, int64_t i1) {
      std::array<int64_t, N> off;
      for (size_t k = 0; k < N; ++k) off[k] = i0 * inner_st[k];
      run(off, i1 - i0, inner_st);
    });
    return;
  }
  // An operand whose elements along the run lie a cache line or more apart, while its rows lie
  // closer (a transposed input of a row-major result), would miss the cache on each element of
  // a long run. The rows then go in tiles: kTileCols elements of kTileRows rows in turn, so each
  // line read serves every row that shares it (as a blocked transpose does).
  bool tiled = false;
  if (inner > tile_width)
    for (size_t k = 0; k < N; ++k)
      tiled |= std::abs(inner_st[k]) >= 16 && std::abs(st[k][nd - 2]) < std::abs(inner_st[k]);
  const int64_t tile_rows = tiled ? kTileRows : 1, tile_cols = tiled ? tile_width : inner;
  // (chunks as before: a chunk's rows are tiled as far as they go)
  int64_t grain = std::max<int64_t>(1, kElementwiseGrain / inner);
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    // Multi-index of row r0 over the outer dims, and each operand's offset there.
    Shape idx(nd, 0);
    std::array<int64_t, N> off{};
    int64_t r = r0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      idx[d] = r % sh[d];
      r /= sh[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx[d] * st[k][d];
    }
    std::array<std::array<int64_t, N>, kTileRows> tile;
    for (int64_t row = r0; row < r1;) {
      const int64_t count = std::min(tile_rows, r1 - row);
      for (int64_t j = 0; j < count; ++j, ++row) {
        tile[j] = off;
        for (int64_t d = nd - 2; d >= 0; --d) {  // odometer step
          for (size_t k = 0; k < N; ++k) off[k] += st[k][d];
          if (++idx[d] < sh[d]) break;
          for (size_t k = 0; k < N; ++k) off[k] -= st[k][d] * sh[d];
          idx[d] = 0;
        }
      }
      for (int64_t col = 0; col < inner; col += tile_cols)
        for (int64_t j = 0; j < count; ++j) {
          std::array<int64_t, N> at = tile[j];
          for (size_t k = 0; k < N; ++k) at[k] += col * inner_st[k];
          run(at, std::min(tile_cols, inner - col), inner_st);
        }
    }
  });
}

/// Converts between element types; f16/bf16 go through float (round to nearest even).
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (std::is_same_v<From, Eigen::half> || std::is_same_v<From, Eigen::bfloat16>)
      return static_cast<float>(v) != 0.0f;
    else
      return v != From(0);  // in From's own type: an f64 of 1e-300 is true
  } else if constexpr (std::is_same_v<From, Eigen::half> || std::is_same_v<From, Eigen::bfloat16>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, Eigen::half> || std::is_same_v<To, Eigen::bfloat16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, uint8_t> && std::is_floating_point_v<From>) {
    // Through int64, as PyTorch's c10::convert (-1.0 is 255): a negative float converted to an
    // unsigned type directly is undefined, and CPUs and GPUs differ (a wrap, a clamp to 0).
    return static_cast<To>(convert<int64_t>(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // NaN and values outside To's range give To's minimum: what x86's conversion instruction
    // gives (so torch's result on x86), and defined here (a plain cast of them is undefined
    // behaviour). The bounds, -2^31 or -2^63 and their negations, are exact in From.
    constexpr From lo = static_cast<From>(std::numeric_limits<To>::min());
    return v >= lo && v < -lo ? static_cast<To>(v) : std::numeric_limits<To>::min();
  } else {
    return static_cast<To>(v);
  }
}

/// One element in the type it is computed in (acc_type): a bf16 by shifting its bits up (a bf16
/// is the top half of an f32), which the compiler vectorizes in a loop; others by their cast.
template <typename T>
inline acc_type<T> widen_one(T v) {
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    uint32_t bits = static_cast<uint32_t>(Eigen::numext::bit_cast<uint16_t>(v)) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  } else {
    return static_cast<acc_type<T>>(v);
  }
}

/// v rounded to T; for bf16 to nearest even on the bits, as Eigen's conversion does (NaN keeps
/// its sign, quiet), in a form the compiler vectorizes.
template <typename T>
inline T narrow_one(acc_type<T> v) {
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return Eigen::numext::bit_cast<Eigen::bfloat16>(
        static_cast<uint16_t>(nan ? ((u >> 16) & 0x8000u) | 0x7fc0u : rounded));
  } else {
    return static_cast<T>(v);
  }
}

/// Widens n elements of src (every `stride`-th) into f32 dst. f16 with F16C converts eight at a
/// time; the loops below vectorize otherwise.
template <typename T>
inline void widen_block(float* dst, const T* src, int64_t stride, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  if constexpr (std::is_same_v<T, Eigen::half>) {
    if (stride == 1)
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                      reinterpret_cast<const __m128i*>(src + i))));
  }
#endif
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    if (stride == 1)
      for (; i < n; ++i) dst[i] = widen_one(src[i]);
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i * stride]);
}

/// Rounds n f32 values of src to nearest even into dst (every `stride`-th element).
template <typename T>
inline void narrow_block(T* dst, int64_t stride, const float* src, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  if constexpr (std::is_same_v<T, Eigen::half>) {
    if (stride == 1)
      for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    if (stride == 1)
      for (; i < n; ++i) dst[i] = narrow_one<T>(src[i]);
  }
  for (; i < n; ++i) dst[i * stride] = T(src[i]);
}

/// Elements per block when narrow floats are computed in f32: small enough for L1.
constexpr int64_t kNarrowBlock = 256;

/// A per-thread scratch vector that keeps its memory between calls: fresh large allocations come
/// from mmap and cost a page fault per 4 KiB on first touch, every call. Distinct kSlot values
/// for buffers that are live at the same time on one thread. Contents are left from earlier use:
/// callers initialize what they read.
template <typename T, int kSlot>
std::vector<T>& scratch(size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer;
}

/// 16 floats on one cache line. A std::vector of it is 64-byte aligned (C++17 aligned new), so
/// `scratch<CacheLine, slot>` gives buffers that AVX-512 aligned loads can read.
struct alignas(64) CacheLine {
  float v[16];
};

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
