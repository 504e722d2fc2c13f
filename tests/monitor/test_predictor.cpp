// The scaling predictor: the ring cost is the closed form; the step simulation gives the hand-
// computed exposed communication for hidden, partly hidden and unhidden buckets; the best
// bucket cap moves the way latency and overlap say; a real DDP backward gives a usable profile.
#include <mutex>

#include "../util.hpp"
#include "tandem/monitor/json.hpp"
#include "tandem/monitor/predictor.hpp"
#include "tandem/monitor/step_report.hpp"

using namespace tandem;
using monitor::Interconnect;
using monitor::Profile;
using tandem::testing::error_of;

namespace {
const Interconnect kIc{"test", 1e-5, 1e9, ""};
constexpr double kMiB = 1024.0 * 1024.0;
}  // namespace

TEST_CASE("predictor: ring allreduce cost is the closed form", "[monitor][predictor]") {
  // 2 (N - 1) latency + 2 (N - 1) / N x bytes / bus bandwidth.
  CHECK(monitor::ring_allreduce_seconds(1e8, 4, kIc) == Approx(6e-5 + 1.5 * 0.1));
  CHECK(monitor::ring_allreduce_seconds(1e8, 2, kIc) == Approx(2e-5 + 0.1));
  CHECK(monitor::ring_allreduce_seconds(1e8, 1, kIc) == 0.0);
  CHECK(monitor::interconnect("nvlink-h200").bus_bandwidth > monitor::interconnect("pcie4").bus_bandwidth);
  CHECK_THAT(error_of([] { monitor::interconnect("carrier-pigeon"); }),
             Catch::Contains("no preset named 'carrier-pigeon' (presets: pcie4, pcie5"));
}

TEST_CASE("predictor: exposed communication of unhidden, hidden and partly hidden buckets",
          "[monitor][predictor]") {
  Profile p;
  p.data_s = 0.01, p.compute_s = 0.2, p.optimizer_s = 0.01;
  const double mb8 = 8 * kMiB;
  const double t8 = monitor::ring_allreduce_seconds(mb8, 2, kIc);  // about 8.4 ms
  // One gradient ready at backward's very end: all of its allreduce shows.
  p.gradients = {{static_cast<int64_t>(mb8), 0.0}};
  auto r = monitor::predict(p, kIc, 2);
  CHECK(r.buckets == 1);
  CHECK(r.exposed_s == Approx(t8));
  CHECK(r.step_s == Approx(0.22 + t8));
  CHECK(r.efficiency == Approx(0.22 / (0.22 + t8)));
  // Ready 50 ms before the end: hidden.
  p.gradients = {{static_cast<int64_t>(mb8), 0.05}};
  CHECK(monitor::predict(p, kIc, 2).exposed_s == 0.0);
  // Two buckets (first bucket 1 MiB closes after the first gradient): the first ready 5 ms
  // before the end, the second at the end. Comm: first ends at -5 ms + t8, the second starts
  // at max(that, 0) and runs t8.
  p.gradients = {{static_cast<int64_t>(mb8), 0.005}, {static_cast<int64_t>(mb8), 0.0}};
  r = monitor::predict(p, kIc, 2);
  CHECK(r.buckets == 2);
  CHECK(r.exposed_s == Approx(std::max(-0.005 + t8, 0.0) + t8));
  CHECK(r.comm_s == Approx(2 * t8));
  // One rank: nothing to reduce.
  CHECK(monitor::predict(p, kIc, 1).exposed_s == 0.0);
  CHECK(monitor::predict(p, kIc, 1).efficiency == 1.0);
  // CPU ranks sharing cores: compute scales, and so does the slack.
  r = monitor::predict(p, kIc, 2, monitor::PredictOptions().compute_scale(2.0));
  CHECK(r.step_s == Approx(0.44 + std::max(-0.010 + t8, 0.0) + t8));
}

TEST_CASE("predictor: the best bucket cap follows latency and overlap", "[monitor][predictor]") {
  // 100 gradients of 1 MiB, ready evenly over a 100 ms backward.
  Profile p;
  p.compute_s = 0.15;
  for (int i = 0; i < 100; ++i) p.gradients.push_back({static_cast<int64_t>(kMiB), 0.1 - 0.001 * i});
  // Cheap messages, slow wire: small buckets overlap best.
  const Interconnect slow_wire{"slow", 1e-6, 2e9, ""};
  const auto a = monitor::best_bucket_cap(p, slow_wire, 8);
  // Expensive messages (a millisecond each), fast wire: few big buckets.
  const Interconnect high_latency{"latent", 1e-3, 200e9, ""};
  const auto b = monitor::best_bucket_cap(p, high_latency, 8);
  CHECK(a.bucket_cap_bytes < b.bucket_cap_bytes);
  for (double mb : {1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0}) {
    CHECK(monitor::predict(p, slow_wire, 8, monitor::PredictOptions().bucket_cap_mb(mb)).step_s >=
          a.step_s);
    CHECK(monitor::predict(p, high_latency, 8, monitor::PredictOptions().bucket_cap_mb(mb)).step_s >=
          b.step_s);
  }
}

TEST_CASE("predictor: a DDP backward gives a profile of every gradient", "[monitor][predictor]") {
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(32, 64),
                                                std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(64, 4));
  int64_t bytes = 0;
  for (const Tensor& t : model->parameters()) bytes += t.numel() * 4;
  Profile prof;
  parallel::launch(1, [&](parallel::Rank& r) {
    parallel::DistributedDataParallel ddp(model, r.comm);
    ddp.forward(ones({8, 32})).sum().backward();
    prof = Profile::from(ddp.last_reduction(), 0.001, 0.01, 0.001);
  });
  REQUIRE(prof.gradients.size() == 4);
  CHECK(prof.gradient_bytes() == bytes);
  for (const auto& g : prof.gradients) CHECK(g.slack_s >= 0.0);
  // Ready order: the last layer's gradients first, with the most slack.
  CHECK(prof.gradients.front().slack_s >= prof.gradients.back().slack_s);
  CHECK(prof.step_s() == Approx(0.012));
}

TEST_CASE("predictor: a profile takes the device's ready times where the GPU was timed",
          "[monitor][predictor]") {
  // Host times say 3 ms and 1 ms before the backward's end; the device said 8 ms for the first
  // (its kernels ran after the host queued them), and nothing for the second.
  parallel::ReductionTimes t;
  t.backward_end = comm::Clock::now();
  t.ready.push_back({0, 400, t.backward_end - std::chrono::milliseconds(3), 0.008});
  t.ready.push_back({1, 100, t.backward_end - std::chrono::milliseconds(1)});
  const Profile prof = Profile::from(t, 0, 0.02, 0.001);
  REQUIRE(prof.gradients.size() == 2);
  CHECK(prof.gradients[0].slack_s == 0.008);
  CHECK(prof.gradients[1].slack_s == Approx(0.001).margin(1e-9));
}

TEST_CASE("DDP bucket cap chooser: rank 0 chooses from the first backward, every rank follows",
          "[monitor][predictor][ddp]") {
  auto make = [] {
    return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(32, 64),
                                            std::make_shared<nn::ReLU>(),
                                            std::make_shared<nn::Linear>(64, 64),
                                            std::make_shared<nn::ReLU>(),
                                            std::make_shared<nn::Linear>(64, 4));
  };
  std::mutex mu;
  int calls = 0;
  size_t ready_seen = 0;
  int world_seen = 0;
  double latency_seen = -1, bandwidth_seen = -1;
  const double chosen = 0.01;  // MiB: about 10 KiB, several buckets
  std::vector<double> caps(2);
  std::vector<size_t> buckets(2);
  std::vector<std::vector<float>> grads(2);
  parallel::launch(2, [&](parallel::Rank& r) {
    auto model = make();
    parallel::DDPOptions options = parallel::DDPOptions().first_bucket_mb(0.001).bucket_cap_chooser(
        [&](const parallel::ReductionTimes& t, int world, double latency, double bandwidth) {
          std::lock_guard<std::mutex> lock(mu);
          ++calls;
          ready_seen = t.ready.size();
          world_seen = world, latency_seen = latency, bandwidth_seen = bandwidth;
          return chosen;
        });
    parallel::DistributedDataParallel ddp(model, r.comm, options);
    Generator g(r.rank());
    for (int k = 0; k < 2; ++k) {
      ddp.zero_grad();
      ddp.forward(randn({8, 32}, DType::f32, &g)).sum().backward();
    }
    caps[r.rank()] = ddp.bucket_cap_mb();
    buckets[r.rank()] = ddp.bucket_indices().size();
    for (const Tensor& p : model->parameters())
      for (float v : p.grad().to_vector<float>()) grads[r.rank()].push_back(v);
  });
  CHECK(calls == 1);
  CHECK(ready_seen == 6);
  CHECK(world_seen == 2);
  CHECK(latency_seen > 0);
  CHECK(bandwidth_seen > 0);
  for (int r = 0; r < 2; ++r) {
    CHECK(caps[r] == Approx(chosen).epsilon(1e-4));
    CHECK(buckets[r] > 2);  // 10 KiB buckets over 4 x 4 KiB+ of weights
  }
  CHECK(grads[0] == grads[1]);

  // The predictor's chooser picks one of its candidates.
  std::vector<double> auto_caps(2);
  parallel::launch(2, [&](parallel::Rank& r) {
    auto model = make();
    parallel::DistributedDataParallel ddp(
        model, r.comm, parallel::DDPOptions().bucket_cap_chooser(monitor::auto_bucket_cap({0.01, 0.1, 25})));
    for (int k = 0; k < 2; ++k) ddp.forward(ones({8, 32})).sum().backward();
    auto_caps[r.rank()] = ddp.bucket_cap_mb();
  });
  CHECK(auto_caps[0] == auto_caps[1]);
  const bool candidate = std::abs(auto_caps[0] - 0.01) < 1e-4 || std::abs(auto_caps[0] - 0.1) < 1e-4 ||
                         std::abs(auto_caps[0] - 25) < 1e-4;
  CHECK(candidate);
}

TEST_CASE("predictor and reports refuse values that are not numbers, write JSON that parses",
          "[monitor][predictor]") {
  // Bucket sizes: std::stod threw a bare "stod", took "5abc" as 5 and 1e999 past the limits.
  CHECK(!monitor::parse_bucket_mb("auto"));
  CHECK(*monitor::parse_bucket_mb("25") == 25.0);
  for (const char* bad : {"abc", "5abc", "", "1e999", "-3", "0", "nan", "1e-320", "inf"})
    CHECK(error_of([&] { monitor::parse_bucket_mb(bad); }) ==
          std::string("bucket size '") + bad + "' is not a number of MiB in (0, 1048576] or auto");
  // The predictor: NaN passed every comparison (efficiency 1 for a NaN compute time), a zero or
  // negative compute scale gave negative step times, a -1 MiB cap was chosen.
  Profile p;
  p.compute_s = 0.1;
  p.gradients = {{1 << 20, 0.05}};
  Profile nan_compute = p;
  nan_compute.compute_s = NAN;
  CHECK_THROWS_AS(monitor::predict(nan_compute, kIc, 4), ValueError);
  for (double scale : {0.0, -1.0, double(NAN), double(INFINITY)})
    CHECK_THROWS_AS(monitor::predict(p, kIc, 4, monitor::PredictOptions().compute_scale(scale)),
                    ValueError);
  for (double cap : {0.0, -1.0, double(NAN)})
    CHECK_THROWS_AS(monitor::best_bucket_cap(p, kIc, 4, {}, {cap}), ValueError);
  CHECK_THROWS_AS(monitor::predict(p, Interconnect{"nan", NAN, 1e9, ""}, 4), ValueError);
  CHECK(monitor::predict(p, kIc, 4).efficiency > 0);
  // A report from no ranks threw from json(); NaN times wrote nan, which no parser takes.
  CHECK(monitor::StepReport{}.json() ==
        "{\"ranks\": [], \"slowest\": null, \"spread\": 0, \"straggler_phase\": null, "
        "\"starved\": []}");
  CHECK(monitor::json_number(NAN) == "null");
  CHECK(monitor::json_number(-INFINITY) == "null");
  CHECK(monitor::json_number(2.5) == "2.5");
  CHECK(monitor::json_string("a\"b\\c\nd\te\x01") == "\"a\\\"b\\\\c\\u000ad\\u0009e\\u0001\"");
}
