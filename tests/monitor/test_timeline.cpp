// The Chrome trace of data-parallel steps: valid JSON, the expected spans per rank, the buckets'
// bytes, and no two spans of one row that overlap without nesting.
#include <nlohmann/json.hpp>

#include "../util.hpp"
#include "tandem/monitor/timeline.hpp"

using namespace tandem;
using Clock = monitor::Timeline::Clock;

TEST_CASE("timeline: a Chrome trace of DDP steps, one process row per rank", "[monitor]") {
  monitor::Timeline tl;
  const int steps = 2;
  std::vector<int64_t> param_bytes(2);
  parallel::launch(2, [&](parallel::Rank& r) {
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(32, 64),
                                                  std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(64, 64),
                                                  std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(64, 4));
    parallel::DistributedDataParallel ddp(
        model, r.comm, parallel::DDPOptions().bucket_cap_mb(0.01).first_bucket_mb(0.01));
    for (const Tensor& p : model->parameters()) param_bytes[r.rank()] += p.numel() * 4;
    optim::SGD opt(ddp.parameters(), optim::SGDOptions(0.1));
    Generator g(r.rank());
    for (int k = 0; k < steps; ++k) {
      Tensor x = randn({16, 32}, DType::f32, &g);
      opt.zero_grad();
      Tensor loss;
      {
        monitor::Timeline::Span span(&tl, r.rank(), "forward");
        loss = ddp.forward(x).sum();
      }
      const auto b0 = Clock::now();
      loss.backward();
      tl.add(r.rank(), monitor::Timeline::compute, "backward", b0, ddp.last_reduction().backward_end);
      tl.add_reduction(r.rank(), ddp.last_reduction());
      monitor::Timeline::Span span(&tl, r.rank(), "optimizer");
      opt.step();
    }
  });
  const std::string path = (std::filesystem::temp_directory_path() / "tandem_trace_test.json").string();
  tl.write_chrome_trace(path);
  std::ifstream f(path);
  const nlohmann::json trace = nlohmann::json::parse(f);  // throws on invalid JSON
  const auto& events = trace.at("traceEvents");
  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> rows;
  std::map<std::pair<int, std::string>, int> count;
  std::map<int, int64_t> bytes;
  std::set<std::string> names;
  for (const auto& e : events) {
    if (e.at("ph") == "M") {
      names.insert(e.at("args").at("name").get<std::string>());
      continue;
    }
    REQUIRE(e.at("ph") == "X");
    const int pid = e.at("pid"), tid = e.at("tid");
    const std::string name = e.at("name");
    const std::string kind = name.rfind("allreduce bucket", 0) == 0 ? "bucket" : name;
    ++count[{pid, kind}];
    if (kind == "bucket") bytes[pid] += e.at("args").at("bytes").get<int64_t>();
    rows[{pid, tid}].emplace_back(e.at("ts").get<int64_t>(), e.at("dur").get<int64_t>());
  }
  for (const char* n : {"rank 0", "rank 1", "compute", "communication"}) CHECK(names.count(n) == 1);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    for (const char* n : {"forward", "backward", "optimizer", "allreduce wait"})
      CHECK(count[{r, n}] == steps);
    CHECK(count[{r, "bucket"}] >= 2 * steps);
    CHECK(bytes[r] == steps * param_bytes[r]);  // every gradient byte went through a bucket once
  }
  // Within a row, spans are disjoint or nested (a trace viewer cannot draw anything else);
  // allow 1 us of rounding at the edges.
  for (auto& [row, spans] : rows) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      const auto [s0, d0] = spans[i - 1];
      const auto [s1, d1] = spans[i];
      const bool disjoint = s1 + 1 >= s0 + d0, nested = s1 + d1 <= s0 + d0 + 1;
      INFO("row " << row.first << "/" << row.second << ": [" << s0 << ", +" << d0 << "] and ["
                  << s1 << ", +" << d1 << "]");
      CHECK((disjoint || nested));
    }
  }
  CHECK_THROWS_AS(tl.write_chrome_trace("/nonexistent-dir/trace.json"), io::IoError);
}
