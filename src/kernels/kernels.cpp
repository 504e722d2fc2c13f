// The kernel stubs (constant-initialized, filled by the backends' registrations) and the
// run-time choice of the CPU instruction set.
#include "kernels.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tandem/kernels/cpu_isa.hpp"

namespace tandem::kernels {

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::scalar: return "scalar";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512: return "avx512";
  }
  return "?";
}

namespace {
// Whether this build has kernels for `isa` (CMakeLists.txt, TANDEM_CPU_ISAS).
bool built(CpuIsa isa) {
  switch (isa) {
#ifdef TANDEM_CPU_ISA_BUILT_scalar
    case CpuIsa::scalar: return true;
#endif
#ifdef TANDEM_CPU_ISA_BUILT_avx2
    case CpuIsa::avx2: return true;
#endif
#ifdef TANDEM_CPU_ISA_BUILT_avx512
    case CpuIsa::avx512: return true;
#endif
    default: return false;
  }
}

std::string built_list() {
  std::string list;
  for (int i = 0; i < kCpuIsas; ++i)
    if (built(static_cast<CpuIsa>(i)))
      list += std::string(list.empty() ? "" : ", ") + cpu_isa_name(static_cast<CpuIsa>(i));
  return list;
}

// The best built instruction set no wider than `cap`; `why` names the cap in the error when
// there is none (a build without the scalar kernels, on a CPU without the ones it has).
CpuIsa best_built(CpuIsa cap, const char* why) {
  for (int i = static_cast<int>(cap); i >= 0; --i)
    if (built(static_cast<CpuIsa>(i))) return static_cast<CpuIsa>(i);
  TANDEM_THROW(NotImplementedError, "no CPU kernels for ", why, cpu_isa_name(cap),
               ": this build has kernels for ", built_list(),
               " only (configure with TANDEM_CPU_ISAS including scalar to run anywhere)");
}

// Exactly the extensions each ISA's kernel object is compiled with (CMakeLists.txt,
// TANDEM_CPU_ISA_FLAGS_*). libgcc also checks that the OS saves the AVX/AVX-512 registers.
CpuIsa cpu_isa_of_this_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C from cpuid itself (leaf 1, ECX): clang 14's __builtin_cpu_supports does not know it.
  unsigned eax, ebx, ecx, edx;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return CpuIsa::avx512;
  if (avx2) return CpuIsa::avx2;
#endif
  return CpuIsa::scalar;
}
}  // namespace

CpuIsa cpu_isa_supported() { return best_built(cpu_isa_of_this_cpu(), "this CPU, whose best is "); }

namespace {
CpuIsa choose_isa() {
  CpuIsa best = cpu_isa_supported();
  const char* env = std::getenv("TANDEM_CPU_ISA");
  if (!env || !*env) return best;
  for (int i = 0; i < kCpuIsas; ++i) {
    auto isa = static_cast<CpuIsa>(i);
    if (std::strcmp(env, cpu_isa_name(isa)) == 0)
      return best_built(isa < best ? isa : best, "TANDEM_CPU_ISA=");
  }
  TANDEM_THROW(ValueError, "TANDEM_CPU_ISA: expected scalar, avx2 or avx512, got \"", env, "\"");
}
}  // namespace

CpuIsa cpu_isa() {
  static const CpuIsa isa = choose_isa();
  return isa;
}

bool cpu_bf16_dot() {
  static const bool on = [] {
#if defined(__x86_64__) || defined(__i386__)
    // AVX512_BF16: cpuid leaf 7, sub-leaf 1, EAX bit 5.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return cpu_isa() == CpuIsa::avx512 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
           (eax & (1u << 5)) != 0;
#else
    return false;
#endif
  }();
  return on;
}

const char* cpu_isa_name() { return cpu_isa_name(cpu_isa()); }
const char* cpu_isa_supported_name() { return cpu_isa_name(cpu_isa_supported()); }

namespace detail {
void throw_missing_kernel(const char* name, const Tensor* key, bool cuda_built, const char* op) {
  if (!key) TANDEM_THROW(NotImplementedError, name, ": called without a defined tensor");
  std::string why = std::string(" (no ") + name + " kernel";
  if (key->is_cuda()) why += cuda_built ? " in the CUDA backend yet)" : "; this build has no CUDA backend)";
  else why += " in the CPU backend)";
  TANDEM_THROW(NotImplementedError, op ? op : name, ": not implemented for ", key->dtype(),
               " tensors on ", key->device(), why);
}
}  // namespace detail

#define TANDEM_STUB(name) decltype(name) name(#name)
TANDEM_STUB(unary);
TANDEM_STUB(binary);
TANDEM_STUB(where);
TANDEM_STUB(copy);
TANDEM_STUB(fill);
TANDEM_STUB(arange);
TANDEM_STUB(uniform);
TANDEM_STUB(normal);
TANDEM_STUB(randint);
TANDEM_STUB(reduce_rows);
TANDEM_STUB(sum_columns);
TANDEM_STUB(scan_rows);
TANDEM_STUB(sort_rows);
TANDEM_STUB(bmm);
TANDEM_STUB(conv2d_forward);
TANDEM_STUB(conv2d_backward);
TANDEM_STUB(batch_norm_stats);
TANDEM_STUB(batch_norm_update);
TANDEM_STUB(batch_norm_forward);
TANDEM_STUB(batch_norm_backward);
TANDEM_STUB(layer_norm_forward);
TANDEM_STUB(layer_norm_backward);
TANDEM_STUB(softmax_rows);
TANDEM_STUB(softmax_rows_backward);
TANDEM_STUB(max_pool2d_forward);
TANDEM_STUB(max_pool2d_backward);
TANDEM_STUB(avg_pool2d_forward);
TANDEM_STUB(avg_pool2d_backward);
TANDEM_STUB(adaptive_avg_pool2d_forward);
TANDEM_STUB(adaptive_avg_pool2d_backward);
TANDEM_STUB(crop_flip_normalize);
TANDEM_STUB(gather);
TANDEM_STUB(scatter);
TANDEM_STUB(pick_classes);
TANDEM_STUB(pick_classes_backward);
TANDEM_STUB(ctc_loss_forward);
TANDEM_STUB(ctc_loss_backward);
TANDEM_STUB(sgd_step);
TANDEM_STUB(sgd_steps);
TANDEM_STUB(adam_step);
TANDEM_STUB(adam_steps);
TANDEM_STUB(rmsprop_steps);
TANDEM_STUB(adagrad_steps);
TANDEM_STUB(scale_grads);
TANDEM_STUB(grad_norm_terms);
#undef TANDEM_STUB

std::vector<std::vector<Tensor>> by_device(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<Tensor>> lists;
  for (const Tensor& t : tensors) {
    auto d = std::find_if(lists.begin(), lists.end(),
                          [&](const auto& l) { return l.front().device() == t.device(); });
    if (d == lists.end()) d = lists.insert(lists.end(), std::vector<Tensor>());
    d->push_back(t);
  }
  return lists;
}

}  // namespace tandem::kernels
