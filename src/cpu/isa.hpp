// The instruction set a CPU kernel file is compiled for, and the inline namespace that keeps the
// build's three copies of every kernel (one object per instruction set, CMakeLists.txt) apart.
#pragma once

#include "../kernels/dispatch.hpp"  // TANDEM_CPU_CAPABILITY: scalar unless the build sets it

// Every src/cpu file wraps its contents in
//   namespace tandem::kernels::cpu { inline namespace TANDEM_CPU_NAMESPACE { ... } }
// so that cpu::gemm compiled for AVX-512 is cpu::avx512::gemm, a different symbol from the
// scalar build's cpu::scalar::gemm, while the code reads the same in every file.
#define TANDEM_CPU_NAMESPACE TANDEM_CPU_CAPABILITY
