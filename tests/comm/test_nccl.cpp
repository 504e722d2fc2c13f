// The nccl backend. Anywhere: the refusals that need no GPU (two ranks on one GPU, no GPU, a
// build without CUDA). On a GPU machine ([gpu], run by scripts/gpu-check.sh): the collective
// suite on all visible GPUs (one GPU: world size 1), Work handles, debug mode, bad arguments,
// abort; with two or more GPUs also the faults (a rank that throws, stops calling or exits).

#include <cstdlib>

#include "../util.hpp"
#include "suite.hpp"
#include "tandem/comm.hpp"
#include "tandem/cuda/runtime.hpp"

using namespace tandem;
using namespace tandem::comm;
using tandem::testing::comm_dtypes;
using tandem::testing::error_of;

#ifdef TANDEM_TEST_CUDA_EMULATION
// The NCCL stand-in's count of the bytes this process's ranks passed to ncclAllReduce.
extern "C" uint64_t tandem_emu_nccl_allreduce_bytes();
#endif

namespace {

std::vector<int> all_gpus() {
  std::vector<int> devices;
  for (int d = 0; d < cuda::device_count(); ++d) devices.push_back(d);
  return devices;
}

Tensor gpu_ones(int64_t n, int device) { return ones({n}, Device(DeviceType::cuda, device)); }

}  // namespace

TEST_CASE("nccl refuses two ranks on one GPU, and says when it cannot run", "[comm][nccl]") {
  if (!nccl_compiled()) {
    CHECK_THAT(error_of([] { make_nccl_group({0}); }),
               Catch::Contains("make_nccl_group: this tandem was built without NCCL"));
    CHECK_THAT(error_of([] { make_nccl_communicator(); }),
               Catch::Contains("make_nccl_communicator: this tandem was built without"));
    return;
  }
  // Checked before any GPU is touched, so on every machine.
  CHECK_THAT(error_of([] { make_nccl_group({0, 1, 0}); }),
             Catch::Contains("make_nccl_group: ranks 0 and 2 both name cuda:0: NCCL forbids two "
                             "ranks on one GPU"));
  CHECK_THAT(error_of([] { make_nccl_group({}); }), Catch::Contains("no devices given"));
  CHECK_THAT(error_of([] { make_nccl_group({0}, NcclOptions().timeout(Duration(0))); }),
             Catch::Contains("the timeout must be positive"));
  if (!cuda::is_available()) {
    CHECK_THAT(error_of([] { make_nccl_group({0}); }),
               Catch::Contains("make_nccl_group: no GPU is visible"));
  } else {
    const int n = cuda::device_count();
    CHECK_THAT(error_of([n] { make_nccl_group({n}); }),
               Catch::Contains("cuda:" + std::to_string(n) + " does not exist"));
  }
}

TEST_CASE("nccl collectives on every visible GPU match the one-thread reference",
          "[comm][nccl][gpu]") {
  if (!tandem::testing::nccl_present("the nccl suite")) return;
  const auto devices = all_gpus();
  // Any two ranks reduce in one order; more may reduce in NCCL's ring order.
  const bool exact = devices.size() <= 2;
#ifdef TANDEM_TEST_CUDA_EMULATION
  const int64_t large = (int64_t{1} << 14) + 3;  // the emulated NCCL does not split large calls
#else
  const int64_t large = (int64_t{1} << 20) + 3;
#endif
  // One group for every case: each NCCL communicator costs a setup (bootstrap, topology, proxy).
  const auto comms = make_nccl_group(devices);
  for (DType dtype : comm_dtypes())
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, large})
      tandem::testing::check_all_ops(comms, dtype, n, exact);
  // A smaller group too, when there are several GPUs.
  if (devices.size() > 2)
    tandem::testing::check_all_ops(make_nccl_group({0, 1}), DType::f32, 1000, true);
}

TEST_CASE("nccl: Accumulate::native reduces f16/bf16 in 16 bits on the wire, f32 widens",
          "[comm][nccl][gpu]") {
  if (!tandem::testing::nccl_present("nccl 16-bit accumulation")) return;
  const auto comms = make_nccl_group(all_gpus());
  const int world = static_cast<int>(comms.size());
  const int64_t n = 1000;
  for (DType dtype : {DType::bf16, DType::f16})
    for (Accumulate acc : {Accumulate::native, Accumulate::f32}) {
      INFO(dtype_name(dtype) << (acc == Accumulate::native ? ", native" : ", f32"));
#ifdef TANDEM_TEST_CUDA_EMULATION
      const uint64_t before = tandem_emu_nccl_allreduce_bytes();
#endif
      // Rank q holds q + 0.5: every partial sum is exact in 16 bits, so both ways give the sum
      // of the ranks' values, world^2 / 2.
      std::vector<float> got(world);
      run_group(comms, [&](Communicator& c) {
        Tensor t = full({n}, c.rank() + 0.5, TensorOptions(dtype).device(c.device()));
        c.allreduce(t, ReduceOp::sum, acc).wait();
        got[c.rank()] = t.cpu().to_vector<float>()[n - 1];
      });
      for (float v : got) CHECK(v == 0.5f * static_cast<float>(world * world));
#ifdef TANDEM_TEST_CUDA_EMULATION
      // What went to NCCL: the tensor's 2 bytes an element, or a widened f32 copy's 4.
      const uint64_t element = acc == Accumulate::native ? 2 : 4;
      CHECK(tandem_emu_nccl_allreduce_bytes() - before == element * n * world);
#endif
    }
}

TEST_CASE("nccl Work handles, debug mode, bad arguments and abort", "[comm][nccl][gpu]") {
  if (!tandem::testing::nccl_present("nccl Work handles")) return;
  auto comms = make_nccl_group({0}, NcclOptions().timeout(Duration(20000)).debug(true));
  Communicator& c = *comms[0];
  CHECK(c.backend() == "nccl");
  CHECK(c.device() == Device("cuda:0"));
  CHECK(c.size() == 1);

  // Several collectives in flight on the stream, completed in order.
  std::vector<Tensor> ts;
  std::vector<Work> works;
  for (int i = 0; i < 8; ++i) {
    ts.push_back(full({1 << 20}, i, Device("cuda:0")));
    works.push_back(c.allreduce(ts.back(), ReduceOp::max));
  }
  for (auto& w : works) w.wait();
  for (int i = 0; i < 8; ++i) {
    CHECK(works[i].is_completed());
    CHECK(ts[i].cpu().to_vector<float>()[12345] == static_cast<float>(i));
  }

  // A stream-side wait: the host goes on, and the kernels queued after it see what the collective
  // wrote. An allgather into zeros (at one rank NCCL copies the input there; an in-place
  // reduction would move nothing), so a kernel ordered before NCCL's copy reads zeros.
  Tensor big = zeros({1 << 22}, TensorOptions().device(Device("cuda:0")));
  Work on_stream = c.allgather(big, full({1 << 22}, 3.0, Device("cuda:0")));
  on_stream.wait_on_stream();
  Tensor doubled = big * 2.0;
  CHECK(doubled.cpu().to_vector<float>()[(1 << 22) - 1] == 6.0f);
  on_stream.wait();
  CHECK(on_stream.is_completed());

  CHECK_THAT(error_of([&] { c.allreduce(ones({4})); }),
             Catch::Contains("rank 0: allreduce(sum) #10: tensors must be defined, contiguous and "
                             "on cuda:0"));
  CHECK(c.is_aborted());  // a bad call aborts the group, like the local backend
  CHECK_THAT(error_of([&] { c.barrier().wait(); }),
             Catch::Contains("rank 0: barrier #11: communicator aborted: rank 0: allreduce(sum) #10"));

  auto fresh = make_nccl_group({0});
  fresh[0]->abort("stop");
  CHECK_THAT(error_of([&] { fresh[0]->allreduce(gpu_ones(4, 0)).wait(); }),
             Catch::Contains("rank 0: allreduce(sum) #1: communicator aborted: rank 0 aborted: stop"));
  // NCCL_COMM_BLOCKING=1 would override the non-blocking configuration: refused, not obeyed.
  setenv("NCCL_COMM_BLOCKING", "1", 1);
  const std::string blocking = error_of([] { make_nccl_group({0}); });
  unsetenv("NCCL_COMM_BLOCKING");
  CHECK_THAT(blocking, Catch::Contains("NCCL_COMM_BLOCKING=1 makes NCCL's calls blocking"));
  auto avg = make_nccl_group({0});
  CHECK_THAT(error_of([&] { avg[0]->allreduce(ones({4}, TensorOptions(DType::i32).device(Device("cuda:0"))), ReduceOp::avg); }),
             Catch::Contains("avg needs a floating dtype"));
}

TEST_CASE("nccl faults: a rank that throws, stops calling or exits", "[comm][nccl][gpu][faults]") {
  if (!nccl_compiled() || cuda::device_count() < 2) {
    WARN("fewer than 2 GPUs with NCCL: the nccl fault tests need two ranks");
    return;
  }
  tandem::testing::check_rank_throws(make_nccl_group({0, 1}, NcclOptions().timeout(Duration(20000))));
  tandem::testing::check_rank_stops(make_nccl_group({0, 1}, NcclOptions().timeout(Duration(500))));
  tandem::testing::check_rank_exits(make_nccl_group({0, 1}, NcclOptions().timeout(Duration(20000))));
}

TEST_CASE("nccl debug mode: ranks that call different collectives fail, naming both calls",
          "[comm][nccl][gpu][faults]") {
  if (!nccl_compiled() || cuda::device_count() < 2) {
    WARN("fewer than 2 GPUs with NCCL: the mismatch check needs two ranks");
    return;
  }
  // Without debug mode NCCL would hang or mix the buffers up; with it, the descriptions every
  // rank gathers on its GPU before the collective differ, and every rank says how.
  tandem::testing::check_mismatched_calls(
      make_nccl_group({0, 1}, NcclOptions().timeout(Duration(20000)).debug(true)));
  tandem::testing::check_mismatched_calls(
      make_nccl_group({0, 1}, NcclOptions().timeout(Duration(20000)).debug(true)), true);
}
