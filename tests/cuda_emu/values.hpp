// The floating types the emulated cuBLAS and cuDNN compute on: read as double, written rounded
// once to nearest even (f16 and bf16 through cuda_fp16.h's and cuda_bf16.h's host conversions).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace tandem_emu {

enum class Real { f32, f64, f16, bf16 };

inline double load(const void* p, int64_t i, Real t) {
  switch (t) {
    case Real::f32: return static_cast<const float*>(p)[i];
    case Real::f64: return static_cast<const double*>(p)[i];
    case Real::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case Real::bf16: break;
  }
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

inline void store(void* p, int64_t i, Real t, double v) {
  switch (t) {
    case Real::f32: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case Real::f64: static_cast<double*>(p)[i] = v; return;
    case Real::f16: static_cast<__half*>(p)[i] = __double2half(v); return;
    case Real::bf16: break;
  }
  static_cast<__nv_bfloat16*>(p)[i] = __double2bfloat16(v);
}

}  // namespace tandem_emu
