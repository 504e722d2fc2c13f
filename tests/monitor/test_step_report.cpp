// The step breakdown and its report: a rank made slow on purpose is named the straggler, with
// the phase its delay was injected in, timed by hand on CPU ranks and by a StepTimer on CPU
// ranks and GPUs; work a GPU runs behind its host counts where it runs; a loader made slow on
// purpose is called out as starving its rank; the report is the same on every rank.
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "../util.hpp"
#include "tandem/monitor/step_report.hpp"

using namespace tandem;
using monitor::Phase;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A dataset whose every sample takes `delay` to read: a loader that cannot keep up.
struct SlowDataset : data::ImageDataset {
  std::chrono::milliseconds delay;
  explicit SlowDataset(std::chrono::milliseconds d) : delay(d) {}
  int64_t size() const override { return 64; }
  Shape sample_shape() const override { return {1, 4, 4}; }
  int64_t num_classes() const override { return 2; }
  int64_t get(int64_t index, float* out) const override {
    std::this_thread::sleep_for(delay);
    for (int i = 0; i < 16; ++i) out[i] = static_cast<float>(index % 3);
    return index % 2;
  }
};

// How a rank times its phases: by hand with the host's clock (right on CPU ranks), or with a
// StepTimer (where the work runs: a GPU's events).
enum class Timing { by_hand, timer };

// `steps` DDP steps of a small model, a rank per device; rank `slow` (if any) spends `delay`
// more per step in phase `where` (data: before its batch; compute: inside forward, on the
// host, so a GPU idles then). Returns every rank's copy of the gathered report.
std::vector<monitor::StepReport> run(const parallel::Devices& devices, Timing timing, int steps,
                                     int slow, Phase where, std::chrono::milliseconds delay) {
  std::vector<monitor::StepReport> reports(devices.list().size());
  parallel::launch(devices, [&](parallel::Rank& r) {
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(16, 32),
                                                  std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(32, 2));
    model->to(r.device());
    parallel::DistributedDataParallel ddp(model, r.comm);
    optim::SGD opt(ddp.parameters(), optim::SGDOptions(0.01));
    Generator g(r.rank());
    monitor::StepBreakdown b;
    monitor::StepTimer timer(r.device());
    if (timing == Timing::timer)
      ddp.set_backward_end_hook([&timer] { timer.mark(Phase::exposed_comm); });
    for (int k = 0; k < steps; ++k) {
      auto t = Clock::now();
      timer.mark(Phase::data);
      if (r.rank() == slow && where == Phase::data) std::this_thread::sleep_for(delay);
      Tensor x = randn({8, 16}, DType::f32, &g).to(r.device());
      b.add(Phase::data, seconds_since(t));
      t = Clock::now();
      timer.mark(Phase::compute);
      opt.zero_grad();
      Tensor loss = ddp.forward(x).sum();
      if (r.rank() == slow && where == Phase::compute) std::this_thread::sleep_for(delay);
      loss.backward();
      timer.mark(Phase::optimizer);
      const auto& red = ddp.last_reduction();
      b.add(Phase::compute, std::chrono::duration<double>(red.backward_end - t).count());
      b.add_reduction(red);
      t = Clock::now();
      opt.step();
      b.add(Phase::optimizer, seconds_since(t));
      b.end_step(8);
      timer.end_step(8);
    }
    if (timing == Timing::timer) {
      b.reset();
      timer.collect(b, /*wait=*/true);
    }
    reports[r.rank()] = monitor::gather_report(r.comm, b);
  });
  return reports;
}

// Rank 1 made slow in `where` by `delay_ms` a step: the reports name it and that phase, rank 0
// spends the delay in the allreduce, and every rank gathered the same report.
void check_straggler(const std::vector<monitor::StepReport>& reports, Phase where,
                     double delay_ms) {
  const monitor::StepReport& rep = reports[0];
  REQUIRE(rep.ranks.size() == 2);
  CHECK(rep.slowest() == 1);
  CHECK(rep.straggler_phase() == where);
  CHECK(rep.spread() > 0.05);
  // Rank 0 waited for it in the allreduce: its exposed communication is most of the injected
  // delay, and more than the straggler's own.
  CHECK(rep.ms_per_step(0, Phase::exposed_comm) > 0.6 * delay_ms);
  CHECK(rep.ms_per_step(1, Phase::exposed_comm) < rep.ms_per_step(0, Phase::exposed_comm));
  const std::string text = rep.text();
  CHECK_THAT(text, Catch::Contains("straggler: rank 1's own work"));
  CHECK_THAT(text, Catch::Contains(std::string("most of the difference is ") +
                                   monitor::phase_name(where)));
  for (const auto& other : reports) CHECK(other.text() == text);
  const auto j = nlohmann::json::parse(rep.json());
  CHECK(j["slowest"] == 1);
  CHECK(j["ranks"].size() == 2);
  CHECK(j["ranks"][0]["steps"] == 6);
}

}  // namespace

TEST_CASE("step report: the rank made slow is the straggler, blamed on the right phase",
          "[monitor]") {
  for (Timing timing : {Timing::by_hand, Timing::timer})
    for (Phase where : {Phase::data, Phase::compute}) {
      INFO("delay in " << monitor::phase_name(where) << (timing == Timing::timer ? ", timer" : ""));
      // Two ranks on this 2-core machine (more would share cores and add noise of their own).
      check_straggler(
          run(parallel::Devices::cpu(2), timing, 6, 1, where, std::chrono::milliseconds(40)), where,
          40);
    }
  // Without a delay nobody is named (the threshold is 5%; scheduling noise on a loaded machine
  // can exceed it, so only the wording is checked when it does not).
  const auto calm = run(parallel::Devices::cpu(2), Timing::by_hand, 4, -1, Phase::data,
                        std::chrono::milliseconds(0));
  if (calm[0].spread() <= 0.05) CHECK_THAT(calm[0].text(), Catch::Contains("ranks balanced"));
}

// [gpu], not [cuda]: CI runs the [cuda] tests without the caching allocator too, where each
// cudaFree makes the host wait for the device, allreduces included, and the device idles
// meanwhile (in compute) for part of the time it would otherwise wait in the allreduce.
TEST_CASE("step report on GPUs: the device's phases name the straggler and its phase",
          "[monitor][gpu]") {
  if (!tandem::testing::nccl_present("step report on GPUs")) return;
  if (cuda::device_count() < 2) {
    WARN("one GPU: the straggler needs two ranks");
    return;
  }
  // 100 ms: the emulated GPUs' own work (on the CPU, under sanitizers in CI) takes longer than
  // the CPU ranks', and rank 0's shortens its wait.
  const parallel::Devices two({Device("cuda:0"), Device("cuda:1")});
  for (Phase where : {Phase::data, Phase::compute}) {
    INFO("delay in " << monitor::phase_name(where));
    check_straggler(run(two, Timing::timer, 6, 1, where, std::chrono::milliseconds(100)), where,
                    100);
  }
}

TEST_CASE(
    "step timer on GPUs: work the device runs behind the host is compute, not "
    "communication",
    "[monitor][cuda][gpu]") {
  if (!tandem::testing::nccl_present("step timer backlog")) return;
  if (cuda::device_count() < 2) {
    WARN("one GPU: holding a GPU back takes a second rank");
    return;
  }
  // Each rank's compute stream first waits for an allreduce that rank 1 joins 200 ms late (its
  // host sleeps): the forward and backward queued behind it run 200 ms after the host queued
  // them, as on a GPU the host runs ahead of. The host waits for the gradients' allreduces
  // (reading last_reduction), so its clock puts those 200 ms in exposed communication on rank
  // 0; the device's time puts them in compute, where the work ran. (Elementwise kernels only:
  // the emulated cuBLAS returns once its stream has run the product, which a GPU's does not.
  // Run with and without the caching allocator: each cudaFree makes the host wait.)
  struct Elementwise : nn::Module {
    Tensor w = register_parameter("w", full({16}, 0.5));
    Tensor forward(const Tensor& x) override { return relu(x * w) * w; }
  };
  std::vector<monitor::StepBreakdown> device(2), host(2);
  double queued_s = 0;  // rank 0's host: the longest a step's forward and backward took to queue
  monitor::Timeline timeline;
  parallel::launch(parallel::Devices({Device("cuda:0"), Device("cuda:1")}), [&](parallel::Rank& r) {
    auto model = std::make_shared<Elementwise>();
    model->to(r.device());
    parallel::DistributedDataParallel ddp(model, r.comm);
    monitor::StepTimer timer(r.device());
    ddp.set_backward_end_hook([&timer] { timer.mark(Phase::exposed_comm); });
    timer.trace(&timeline, r.rank());
    Tensor x = randn({8, 16}, DType::f32, &r.generator).to(r.device());
    Tensor gate = zeros({1}).to(r.device());
    for (int k = 0; k < 3; ++k) {
      timer.mark(Phase::compute);
      const auto t = Clock::now();
      if (r.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      r.comm.allreduce(gate, comm::ReduceOp::sum).wait_on_stream();
      ddp.forward(x).sum().backward();
      timer.mark(Phase::optimizer);
      if (r.rank() == 0) queued_s = std::max(queued_s, seconds_since(t));
      const auto& red = ddp.last_reduction();
      timer.trace_reduction(red);
      host[r.rank()].add(Phase::compute,
                         std::chrono::duration<double>(red.backward_end - t).count());
      host[r.rank()].add_reduction(red);
      host[r.rank()].end_step(8);
      timer.end_step(8);
      timer.collect(device[r.rank()]);  // the steps the device has passed
    }
    timer.collect(device[r.rank()], /*wait=*/true);
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(device[r].steps() == 3);
    const double compute = device[r].seconds(Phase::compute) / 3;
    const double exposed = device[r].seconds(Phase::exposed_comm) / 3;
    CHECK(compute > 0.15);
    CHECK(exposed < 0.5 * compute);
  }
  // The trace's GPU rows: each rank's steps' phases in order, where the device ran them (each
  // compute 200 ms long), one after another on the host's clock.
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    std::vector<monitor::Timeline::Event> row;
    for (const auto& e : timeline.events())
      if (e.rank == r && e.row == monitor::Timeline::gpu) row.push_back(e);
    REQUIRE(row.size() == 9);
    for (size_t i = 0; i < row.size(); ++i) {
      const Phase expected[] = {Phase::compute, Phase::exposed_comm, Phase::optimizer};
      CHECK(row[i].name == monitor::phase_name(expected[i % 3]));
      if (i % 3 == 0) CHECK(row[i].duration_us > 150000);
      // Marks of one stream pass in order: each span starts where the one before ended (the
      // steps' ends and starts, about a host loop's time apart).
      if (i > 0) CHECK(row[i].start_us >= row[i - 1].start_us + row[i - 1].duration_us - 1);
      if (i > 0 && i % 3 != 0)
        CHECK(row[i].start_us <= row[i - 1].start_us + row[i - 1].duration_us + 1);
    }
  }
  // The GPU communication rows: each step's allreduce (one bucket) ran on the device after the
  // step's compute started, and the compute stream's wait for it ended the exposed
  // communication no sooner than it ended (one device's clock: events in stream order).
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    std::vector<monitor::Timeline::Event> phases, buckets;
    for (const auto& e : timeline.events())
      if (e.rank == r && e.row == monitor::Timeline::gpu)
        phases.push_back(e);
      else if (e.rank == r && e.row == monitor::Timeline::gpu_communication)
        buckets.push_back(e);
    REQUIRE(buckets.size() == 3);
    for (size_t k = 0; k < 3; ++k) {
      const auto& compute = phases[3 * k];
      const auto& exposed = phases[3 * k + 1];
      CHECK(buckets[k].name == "allreduce bucket 0");
      CHECK(buckets[k].start_us >= compute.start_us - 1);
      CHECK(buckets[k].start_us + buckets[k].duration_us <=
            exposed.start_us + exposed.duration_us + 1);
    }
  }
  tandem::testing::TempDir dir;
  const std::string path = (dir.path / "trace.json").string();
  timeline.write_chrome_trace(path);
  std::ifstream f(path);
  const auto trace = nlohmann::json::parse(f);
  int gpu_rows = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" &&
        (e["args"]["name"] == "GPU" || e["args"]["name"] == "GPU communication"))
      ++gpu_rows;
  CHECK(gpu_rows == 4);  // two a rank
  // The host's clock, where rank 0's host queued its steps at once (it ran ahead of the device,
  // as with the caching allocator, whose frees do not wait): it waited for the allreduces, and
  // put the device's backlog there.
  if (queued_s < 0.05) {
    CHECK(host[0].seconds(Phase::exposed_comm) / 3 > 0.15);
    CHECK(host[0].seconds(Phase::compute) < host[0].seconds(Phase::exposed_comm));
  }
}

TEST_CASE("step report: a loader that cannot keep up is called out with its setting",
          "[monitor]") {
  auto slow = std::make_shared<SlowDataset>(std::chrono::milliseconds(2));
  data::DataLoader loader(slow, data::DistributedSampler(slow->size(), 0, 1, false),
                          data::LoaderOptions().batch_size(8).workers(1).prefetch(1));
  monitor::StepBreakdown b;
  loader.start_epoch(0);
  for (int k = 0; k < 6; ++k) {
    auto t = Clock::now();
    std::optional<data::Batch> batch = loader.next();
    REQUIRE(batch.has_value());
    b.add(Phase::data, seconds_since(t));  // about 16 ms: 8 samples of 2 ms
    t = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a quick "compute"
    b.add(Phase::compute, seconds_since(t));
    b.end_step(8);
  }
  auto comm = comm::make_local_group(1)[0];
  const auto rep = monitor::gather_report(*comm, b, monitor::ReportOptions().loader_setting("--workers 1"));
  REQUIRE(rep.starved() == std::vector<int>{0});
  CHECK_THAT(rep.text(), Catch::Contains("data starvation: rank 0 waits for the loader"));
  CHECK_THAT(rep.text(), Catch::Contains("(now --workers 1)"));

  // A loader that keeps up is not called out.
  monitor::StepBreakdown fed;
  fed.add(Phase::data, 0.001);
  fed.add(Phase::compute, 0.1);
  fed.end_step(8);
  CHECK(monitor::gather_report(*comm, fed).starved().empty());
}

TEST_CASE("step report: an empty report or a rank out of range is a clear error",
          "[monitor][errors]") {
  monitor::StepReport empty;
  CHECK_THAT(tandem::testing::error_of([&] { empty.slowest(); }),
             Catch::Contains("StepReport: the report has no ranks"));
  CHECK_THAT(tandem::testing::error_of([&] { empty.spread(); }),
             Catch::Contains("StepReport: the report has no ranks"));
  CHECK_THAT(tandem::testing::error_of([&] { empty.ms_per_step(0); }),
             Catch::Contains("StepReport: rank 0 out of range for a report of 0 rank(s)"));
}
