// Which CPU instruction set the kernels run with (for logs and benchmark records).
#pragma once

namespace tandem::kernels {

/// The instruction set the CPU kernels run with in this process: "scalar", "avx2" or "avx512".
/// It is the best one this CPU supports and the build has, capped by the environment variable
/// TANDEM_CPU_ISA=scalar|avx2|avx512, and chosen once, at the first call of this function or of
/// a CPU kernel. Throws ValueError when TANDEM_CPU_ISA holds anything else.
const char* cpu_isa_name();
/// The best instruction set this CPU supports among those the build has kernels for (the CMake
/// option TANDEM_CPU_ISAS; all three on x86-64 by default), whatever TANDEM_CPU_ISA says.
const char* cpu_isa_supported_name();
/// Whether bf16 matrix products on the CPU use its bf16 dot products (vdpbf16ps: f32 sums of
/// exact products, two at a time): the AVX-512 kernels run and the CPU has AVX512_BF16.
/// Otherwise they run the f32 GEMM on widened copies. Either way the result is rounded once.
bool cpu_bf16_dot();

}  // namespace tandem::kernels
