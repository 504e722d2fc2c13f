// The floating types the emulated cuBLAS and cuDNN compute on: read as double, written rounded
// once to nearest even (f16 and bf16 through cuda_fp16.h's and cuda_bf16.h's host conversions).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <vector>

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

// v (an f32 value) rounded to TF32, the 10 mantissa bits a tensor core takes of an f32 operand
// (to nearest even): what cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32 and cuDNN's f32 convolutions
// under any math type but FMA do to their inputs. Infinities and NaN pass as they are.
inline double tf32(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline void round_to_tf32(std::vector<double>& values) {
  for (double& v : values) v = tf32(v);
}

}  // namespace tandem_emu
