// A stand-in for an NVTX tool (what Nsight Systems injects): the library NVTX loads from
// NVTX_INJECTION64_PATH, through NVTX 3's documented injection interface (nvtxDetail/nvtxInit.h:
// InitializeInjectionNvtx2 gets the core module's function table and fills in its entries). It
// counts the ranges tandem pushes and pops, per name, and at exit writes them on stderr:
//   nvtx stand-in: backward x2, data wait x2, forward x2, optimizer x2; every range closed
// so that a test can prove, without a GPU or Nsight, that the ranges reach a tool.
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

namespace {

using FunctionPointer = void (*)();
using FunctionTable = FunctionPointer**;
struct ExportTableCallbacks {  // NvtxExportTableCallbacks
  size_t struct_size;
  int (*get_module_function_table)(int module, FunctionTable* table, unsigned* size);
};
constexpr uint32_t kExportTableCallbacks = 1;  // NVTX_ETID_CALLBACKS
constexpr int kModuleCore = 1;                 // NVTX_CB_MODULE_CORE
constexpr unsigned kRangePushA = 9, kRangePop = 11;  // NVTX_CBID_CORE_RangePushA, _RangePop

struct Record {
  std::mutex mu;
  std::map<std::string, int> pushed;
  int64_t open = 0;  // pushes not yet popped, over every thread
  int64_t underflow = 0;  // pops without a push on their thread
  ~Record() {
    std::string line = "nvtx stand-in: ";
    bool first = true;
    for (const auto& [name, count] : pushed) {
      line += (first ? "" : ", ") + name + " x" + std::to_string(count);
      first = false;
    }
    if (first) line += "no range";
    line += open == 0 && underflow == 0 ? "; every range closed"
                                        : "; " + std::to_string(open) + " ranges left open, " +
                                              std::to_string(underflow) + " pops without a push";
    std::fprintf(stderr, "%s\n", line.c_str());
  }
};
Record g_record;
thread_local int t_depth = 0;

int push(const char* message) {
  std::lock_guard<std::mutex> lock(g_record.mu);
  ++g_record.pushed[message ? message : "(null)"];
  ++g_record.open;
  return t_depth++;
}

int pop() {
  std::lock_guard<std::mutex> lock(g_record.mu);
  if (t_depth == 0) {
    ++g_record.underflow;
    return -1;
  }
  --g_record.open;
  return --t_depth;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    const void* (*get_export_table)(uint32_t)) {
  const auto* callbacks =
      static_cast<const ExportTableCallbacks*>(get_export_table(kExportTableCallbacks));
  FunctionTable table = nullptr;
  unsigned size = 0;
  if (callbacks == nullptr ||
      !callbacks->get_module_function_table(kModuleCore, &table, &size) || size <= kRangePop)
    return 0;
  *table[kRangePushA] = reinterpret_cast<FunctionPointer>(&push);
  *table[kRangePop] = reinterpret_cast<FunctionPointer>(&pop);
  return 1;
}
