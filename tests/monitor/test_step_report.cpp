// The step breakdown and its report: a rank made slow on purpose is named the straggler, with
// the phase its delay was injected in; a loader made slow on purpose is called out as starving
// its rank; the report is the same on every rank.
#include <chrono>
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

// `steps` DDP steps of a small model on `world` CPU ranks; rank `slow` (if any) spends
// `delay` more per step in phase `where` (data: before its batch; compute: inside forward).
// Returns every rank's copy of the gathered report.
std::vector<monitor::StepReport> run(int world, int steps, int slow, Phase where,
                                     std::chrono::milliseconds delay) {
  std::vector<monitor::StepReport> reports(world);
  parallel::launch(world, [&](parallel::Rank& r) {
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(16, 32),
                                                  std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(32, 2));
    parallel::DistributedDataParallel ddp(model, r.comm);
    optim::SGD opt(ddp.parameters(), optim::SGDOptions(0.01));
    Generator g(r.rank());
    monitor::StepBreakdown b;
    for (int k = 0; k < steps; ++k) {
      auto t = Clock::now();
      if (r.rank() == slow && where == Phase::data) std::this_thread::sleep_for(delay);
      Tensor x = randn({8, 16}, DType::f32, &g);
      b.add(Phase::data, seconds_since(t));
      t = Clock::now();
      opt.zero_grad();
      Tensor loss = ddp.forward(x).sum();
      if (r.rank() == slow && where == Phase::compute) std::this_thread::sleep_for(delay);
      loss.backward();
      const auto& red = ddp.last_reduction();
      b.add(Phase::compute, std::chrono::duration<double>(red.backward_end - t).count());
      b.add_reduction(red);
      t = Clock::now();
      opt.step();
      b.add(Phase::optimizer, seconds_since(t));
      b.end_step(8);
    }
    reports[r.rank()] = monitor::gather_report(r.comm, b);
  });
  return reports;
}

}  // namespace

TEST_CASE("step report: the rank made slow is the straggler, blamed on the right phase",
          "[monitor]") {
  for (Phase where : {Phase::data, Phase::compute}) {
    INFO("delay in " << monitor::phase_name(where));
    // Two ranks on this 2-core machine (more would share cores and add noise of their own).
    const auto reports = run(2, 6, 1, where, std::chrono::milliseconds(40));
    const monitor::StepReport& rep = reports[0];
    REQUIRE(rep.ranks.size() == 2);
    CHECK(rep.slowest() == 1);
    CHECK(rep.straggler_phase() == where);
    CHECK(rep.spread() > 0.05);
    // Rank 0 waited for it in the allreduce: its exposed communication is most of the injected
    // 40 ms, and more than the straggler's own.
    CHECK(rep.ms_per_step(0, Phase::exposed_comm) > 25);
    CHECK(rep.ms_per_step(1, Phase::exposed_comm) < rep.ms_per_step(0, Phase::exposed_comm));
    const std::string text = rep.text();
    CHECK_THAT(text, Catch::Contains("straggler: rank 1's own work"));
    CHECK_THAT(text, Catch::Contains(std::string("most of the difference is ") +
                                     monitor::phase_name(where)));
    // Every rank gathered the same report.
    for (const auto& other : reports) CHECK(other.text() == text);
    const auto j = nlohmann::json::parse(rep.json());
    CHECK(j["slowest"] == 1);
    CHECK(j["ranks"].size() == 2);
    CHECK(j["ranks"][0]["steps"] == 6);
  }
  // Without a delay nobody is named (the threshold is 5%; scheduling noise on a loaded machine
  // can exceed it, so only the wording is checked when it does not).
  const auto calm = run(2, 4, -1, Phase::data, std::chrono::milliseconds(0));
  if (calm[0].spread() <= 0.05) CHECK_THAT(calm[0].text(), Catch::Contains("ranks balanced"));
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
