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

// NVTX's types and constants, without its implementation (the mode NVTX offers tools): the
// functions NVTX calls are then of exactly the types it calls them through.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

namespace {

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
    NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (callbacks == nullptr ||
      !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) ||
      size <= NVTX_CBID_CORE_RangePop)
    return 0;
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}
