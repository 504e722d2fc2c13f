// What the CPU kernel files share beyond loops.hpp: the GEMM (src/cpu/gemm.cpp) and the adapter
// that runs an f32 kernel on f16/bf16 tensors. Internal: kernels trust their callers.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <tuple>
#include <utility>

#include "../kernels/kernels.hpp"
#include "isa.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {

// --- GEMM (src/cpu/gemm.cpp): row-major C = alpha * op(A) op(B) + beta * C ----------------
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

#if defined(__AVX512F__)
/// Row-major C = op(A) op(B) of A and B in bf16 (given as their bits), products summed in f32
/// (two k per vdpbf16ps), C in f32. Only where cpu_bf16_dot() (kernels/dispatch.hpp).
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc);
#endif

// --- copies inside a kernel (src/cpu/elementwise.cpp) ---------------------------------------
void copy(const Tensor& dst, const Tensor& src);
/// A contiguous copy of t in `dtype` (t itself when it already is one).
Tensor contiguous_as(const Tensor& t, DType dtype);

// --- f16/bf16 through an f32 kernel -----------------------------------------------------------
/// Where the CPU has no native narrow kernel (convolution, batch norm, pooling, GEMM), the entry
/// registered for f16/bf16 widens each narrow tensor argument into f32 scratch, runs the f32
/// kernel, and narrows the arguments marked in kOutputs (bit i = argument i) back. The op layer
/// never sees the f32 copies: the narrow tensor reaches the kernel, as it does on CUDA.
/// The copies keep a channels-last argument's layout; with kRowMajor, tensors in another layout
/// reach the kernel as row-major copies instead (and f32/f64 ones are copied too).
template <auto kKernel, uint32_t kOutputs, bool kRowMajor>
struct ThroughF32;

template <typename... Args, void (*kKernel)(Args...), uint32_t kOutputs, bool kRowMajor>
struct ThroughF32<kKernel, kOutputs, kRowMajor> {
  static void run(Args... args) {
    bool copies = false;
    auto check = [&](const auto& a) {
      if constexpr (std::is_same_v<std::decay_t<decltype(a)>, Tensor>)
        copies = copies || needs_copy(a);
    };
    (check(args), ...);
    if (!copies) return kKernel(args...);
    call(std::index_sequence_for<Args...>{}, args...);
  }

 private:
  static bool needs_copy(const Tensor& a) {
    return a.defined() && (is_reduced_float(a.dtype()) || (kRowMajor && !a.is_contiguous()));
  }
  template <typename A>
  static std::decay_t<A> widen(const A& a, bool output) {
    if constexpr (std::is_same_v<std::decay_t<A>, Tensor>) {
      if (!needs_copy(a)) return a;
      const DType dtype = is_reduced_float(a.dtype()) ? DType::f32 : a.dtype();
      // A channels-last argument stays so (the kernel reads the layout off its arguments, and
      // one it does not copy, such as pooling's indices, keeps its own).
      Tensor wide = make_tensor(a.shape(), dtype, a.device(),
                                kRowMajor ? MemoryFormat::Contiguous : a.suggest_memory_format());
      if (!output) copy(wide, a);
      return wide;
    } else {
      return a;
    }
  }
  template <size_t... I>
  static void call(std::index_sequence<I...>, Args... args) {
    std::tuple<std::decay_t<Args>...> wide{widen(args, (kOutputs >> I) & 1u)...};
    kKernel(std::get<I>(wide)...);
    auto narrow_back = [](const auto& orig, const auto& w, bool output) {
      if constexpr (std::is_same_v<std::decay_t<decltype(orig)>, Tensor>)
        if (output && orig.defined() && !orig.is_same(w)) copy(orig, w);
    };
    (narrow_back(args, std::get<I>(wide), (kOutputs >> I) & 1u), ...);
  }
};

/// Whether a kernel may read f16/bf16 tensors as they are: every defined tensor of `narrow` (the
/// activations) of one f16/bf16 dtype in row-major order, every defined one of `wide` (statistics,
/// parameters) f32. Entries that answer no go through_f32.
inline bool reads_narrow(std::initializer_list<const Tensor*> narrow,
                         std::initializer_list<const Tensor*> wide = {}) {
  const DType dtype = (*narrow.begin())->dtype();
  if (!is_reduced_float(dtype)) return false;
  for (const Tensor* t : narrow)
    if (t->defined() && (t->dtype() != dtype || !t->is_contiguous())) return false;
  for (const Tensor* t : wide)
    if (t->defined() && t->dtype() != DType::f32) return false;
  return true;
}

/// The f16/bf16-capable entry for an f32/f64 kernel whose arguments in `kOutputs` are written.
template <auto kKernel, uint32_t kOutputs>
constexpr auto through_f32 = &ThroughF32<kKernel, kOutputs, false>::run;
/// The same for a kernel of row-major tensors, given any dense layout (channels-last).
template <auto kKernel, uint32_t kOutputs>
constexpr auto through_f32_row_major = &ThroughF32<kKernel, kOutputs, true>::run;

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
