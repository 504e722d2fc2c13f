// DistributedDataParallel and launch on CPU ranks (the local backend). Ranks are threads: they
// record what they see into per-rank slots and the checks run on the test's thread (Catch2's
// assertions are not thread-safe).
#include <mutex>
#include <thread>
#include <utility>

#include "../util.hpp"

using namespace tandem;
using tandem::testing::error_of;
using tandem::testing::require_close;

namespace {

// Linear(8, 16) - ReLU - Linear(16, 4): no batch norm, so the per-rank batches are independent.
std::shared_ptr<nn::Sequential> mlp() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16),
                                          std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(16, 4));
}

// Deterministic weights: every parameter drawn from `seed` in registration order.
void fill(nn::Module& m, uint64_t seed) {
  Generator g(seed);
  NoGradGuard no_grad;
  for (Tensor& p : m.parameters()) p.copy_(randn(p.shape(), DType::f32, &g) * 0.5);
}

struct Batch {
  Tensor x, y;
};
// Step k's global batch of `rows` rows.
Batch global_batch(int k, int64_t rows) {
  Generator g(1000 + k);
  return {randn({rows, 8}, DType::f32, &g), randn({rows, 4}, DType::f32, &g)};
}

std::vector<Tensor> snapshot(nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

// K steps of SGD on one rank with the whole batch: the reference.
std::vector<Tensor> train_single(int steps, int64_t rows) {
  auto model = mlp();
  fill(*model, 7);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  for (int k = 0; k < steps; ++k) {
    Batch b = global_batch(k, rows);
    opt.zero_grad();
    mse_loss(model->forward(b.x), b.y).backward();
    opt.step();
  }
  return snapshot(*model);
}

}  // namespace

TEST_CASE("assign_buckets: closed buckets, per dtype, in ready order", "[parallel][ddp]") {
  // f32 sizes in bytes: 400, 400, 4000, 40, 4000; one f64 of 800.
  std::vector<Tensor> p{zeros({100}), zeros({100}), zeros({1000}), zeros({10}), zeros({1000}),
                        zeros({100}, DType::f64)};
  std::vector<size_t> reverse{5, 4, 3, 2, 1, 0};
  // First cap 500: [5] alone? f64 800 >= 500 closes it first; then cap 4400 for the rest.
  auto b = parallel::assign_buckets(p, reverse, 500, 4400);
  REQUIRE(b == std::vector<std::vector<size_t>>{{5}, {4, 3, 2}, {1, 0}});
  // A cap every parameter exceeds: one bucket each, in the given order.
  REQUIRE(parallel::assign_buckets(p, {0, 1, 2, 3, 4, 5}, 1, 1) ==
          std::vector<std::vector<size_t>>{{0}, {1}, {2}, {3}, {4}, {5}});
  // Caps larger than everything: one bucket per dtype, ordered by first parameter.
  REQUIRE(parallel::assign_buckets(p, reverse, 1 << 20, 1 << 20) ==
          std::vector<std::vector<size_t>>{{5}, {4, 3, 2, 1, 0}});
  REQUIRE(parallel::assign_buckets(p, {3, 0}, 1 << 20, 1 << 20) ==
          std::vector<std::vector<size_t>>{{3, 0}});
}

namespace {

struct DdpRun {
  std::vector<std::vector<Tensor>> params;  // each rank's parameters at the end, on the CPU
  std::vector<std::vector<float>> grads;    // each rank's gradients of the last step
};

// `steps` steps of DDP with one rank per device in `devices`, rank r training on its slice of
// each global batch, from weights that differ per rank (DDP copies rank 0's); caps small enough
// for several buckets.
DdpRun train_ddp(const parallel::Devices& devices, int steps, int64_t per_rank) {
  const int world = static_cast<int>(devices.list().size());
  DdpRun run{std::vector<std::vector<Tensor>>(world), std::vector<std::vector<float>>(world)};
  parallel::launch(devices, [&](parallel::Rank& r) {
    auto model = mlp();
    fill(*model, 7 + 100 * r.rank());
    model->to(r.device());
    parallel::DistributedDataParallel ddp(model, r.comm,
                                          parallel::DDPOptions().bucket_cap_mb(1e-4).first_bucket_mb(1e-4));
    optim::SGD opt(ddp.parameters(), optim::SGDOptions(0.1).momentum(0.9));
    for (int k = 0; k < steps; ++k) {
      Batch b = global_batch(k, per_rank * world);
      opt.zero_grad();
      Tensor x = b.x.narrow(0, r.rank() * per_rank, per_rank).to(r.device());
      Tensor y = b.y.narrow(0, r.rank() * per_rank, per_rank).to(r.device());
      mse_loss(ddp.forward(x), y).backward();
      if (k == steps - 1)
        for (const Tensor& p : model->parameters())
          for (float v : p.grad().to_vector<float>()) run.grads[r.rank()].push_back(v);
      opt.step();
    }
    for (const Tensor& p : snapshot(*model)) run.params[r.rank()].push_back(p.cpu());
  });
  return run;
}

}  // namespace

TEST_CASE("DDP at world 1..4 trains like one rank with the whole batch", "[parallel][ddp]") {
  const int steps = 3;
  const int64_t per_rank = 6;
  for (int world : {1, 2, 3, 4}) {
    INFO("world " << world);
    const auto expected = train_single(steps, per_rank * world);
    const DdpRun run = train_ddp(parallel::Devices::cpu(world), steps, per_rank);
    for (int r = 0; r < world; ++r) {
      REQUIRE(run.params[r].size() == expected.size());
      for (size_t i = 0; i < expected.size(); ++i)
        require_close(run.params[r][i], expected[i], 1e-5, 1e-6, "parameter " + std::to_string(i));
      // The averaged gradients are the same bits on every rank.
      REQUIRE(run.grads[r] == run.grads[0]);
    }
  }
}

TEST_CASE("DDP on every GPU (nccl) trains like one rank with the whole batch",
          "[parallel][ddp][cuda]") {
  if (!tandem::testing::nccl_present("DDP on every GPU")) return;
  const int steps = 3;
  const int64_t per_rank = 6;
  const int world = cuda::device_count();
  const auto expected = train_single(steps, per_rank * world);
  const DdpRun run = train_ddp(parallel::Devices::all(), steps, per_rank);
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < expected.size(); ++i)
      require_close(run.params[r][i], expected[i], 1e-4, 1e-5, "parameter " + std::to_string(i));
}

TEST_CASE("DDP times each gradient's readiness on the GPU when asked", "[parallel][ddp][cuda]") {
  if (!tandem::testing::nccl_present("DDP device times")) return;
  for (const bool on : {false, true}) {
    INFO("time_on_device " << on);
    std::vector<parallel::ReductionTimes> got(cuda::device_count());
    parallel::launch(parallel::Devices::all(), [&](parallel::Rank& r) {
      auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(16, 32),
                                                    std::make_shared<nn::ReLU>(),
                                                    std::make_shared<nn::Linear>(32, 32),
                                                    std::make_shared<nn::ReLU>(),
                                                    std::make_shared<nn::Linear>(32, 4));
      model->to(r.device());
      parallel::DistributedDataParallel ddp(model, r.comm,
                                            parallel::DDPOptions().time_on_device(on));
      Tensor x = randn({8, 16}, DType::f32, &r.generator).to(r.device());
      for (int step = 0; step < 2; ++step) {  // the second pass reuses the first's events
        ddp.forward(x).sum().backward();
        got[r.rank()] = ddp.last_reduction();
      }
    });
    for (const auto& t : got) {
      REQUIRE(t.ready.size() == 6);
      for (size_t k = 0; k < t.ready.size(); ++k) {
        if (!on) {
          CHECK(t.ready[k].device_slack_s == -1);
          continue;
        }
        // Events on one stream pass in the order they were recorded: the gradients ready
        // first (the last layer's) have the most time left to the backward's end.
        CHECK(t.ready[k].device_slack_s >= 0);
        if (k > 0) CHECK(t.ready[k].device_slack_s <= t.ready[k - 1].device_slack_s);
      }
    }
  }
}

TEST_CASE("DDP gradients are views of the bucket buffers, buckets follow the ready order",
          "[parallel][ddp]") {
  // Registered b then a, run a then b: reverse registration order is not the ready order.
  struct Swapped : nn::Module {
    std::shared_ptr<nn::Linear> b, a;
    Swapped() {
      b = register_module("b", std::make_shared<nn::Linear>(6, 3));
      a = register_module("a", std::make_shared<nn::Linear>(5, 6));
    }
    Tensor forward(const Tensor& x) override { return b->forward(relu(a->forward(x))); }
  };
  std::vector<std::vector<size_t>> before(2), after(2), hook_order(2);
  std::vector<int> views(2, 0);
  parallel::launch(2, [&](parallel::Rank& r) {
    auto model = std::make_shared<Swapped>();
    auto params = model->parameters();
    parallel::DistributedDataParallel ddp(model, r.comm,
                                          parallel::DDPOptions().bucket_cap_mb(1e-6).first_bucket_mb(1e-6));
    for (size_t i = 0; i < params.size(); ++i)
      params[i].register_grad_ready_hook([&, i, rank = r.rank()](const Tensor&) {
        hook_order[rank].push_back(i);
      });
    Generator g(3);
    Tensor x = randn({4, 5}, DType::f32, &g);
    before[r.rank()].clear();
    for (auto& b : ddp.bucket_indices()) before[r.rank()].insert(before[r.rank()].end(), b.begin(), b.end());
    ddp.forward(x).sum().backward();
    for (auto& b : ddp.bucket_indices()) after[r.rank()].insert(after[r.rank()].end(), b.begin(), b.end());
    // Every gradient lies inside its bucket's buffer, after the rebuild too.
    ddp.forward(x).sum().backward();
    auto buckets = ddp.bucket_indices();
    for (size_t b = 0; b < buckets.size(); ++b) {
      Tensor buf = ddp.bucket_buffer(b);
      const char* lo = static_cast<const char*>(buf.raw_data());
      const char* hi = lo + buf.numel() * 4;
      for (size_t i : buckets[b]) {
        const char* at = static_cast<const char*>(params[i].grad().raw_data());
        if (at >= lo && at < hi && params[i].grad().storage().data() == buf.storage().data()) ++views[r.rank()];
      }
    }
  });
  for (int r = 0; r < 2; ++r) {
    REQUIRE(before[r] == std::vector<size_t>{3, 2, 1, 0});  // reverse registration
    // After the first iteration: the order the hooks fired in (b's parameters first).
    REQUIRE(std::vector<size_t>(hook_order[r].begin(), hook_order[r].begin() + 4) == after[r]);
    REQUIRE(after[r] != before[r]);
    REQUIRE(views[r] == 4);
  }
}

TEST_CASE("DDP overlaps: the first bucket's allreduce starts before backward's last op ends",
          "[parallel][ddp]") {
  std::vector<int64_t> lead_us(2);
  std::vector<size_t> nbuckets(2);
  parallel::launch(2, [&](parallel::Rank& r) {
    auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(64, 256));
    for (int i = 0; i < 6; ++i) {
      model->push_back(std::make_shared<nn::ReLU>());
      model->push_back(std::make_shared<nn::Linear>(256, 256));
    }
    parallel::DistributedDataParallel ddp(model, r.comm,
                                          parallel::DDPOptions().bucket_cap_mb(0.25).first_bucket_mb(0.25));
    Generator g(5);
    Tensor x = randn({64, 64}, DType::f32, &g);
    ddp.forward(x).sum().backward();
    const auto& t = ddp.last_reduction();
    nbuckets[r.rank()] = t.buckets.size();
    lead_us[r.rank()] = std::chrono::duration_cast<std::chrono::microseconds>(
                            t.backward_end - t.buckets.front().launched).count();
  });
  for (int r = 0; r < 2; ++r) {
    REQUIRE(nbuckets[r] >= 4);
    CHECK(lead_us[r] > 0);
  }
}

TEST_CASE("DDP no_sync accumulates locally, the next step reduces the sums", "[parallel][ddp]") {
  // Two micro-batches per rank, the first under no_sync: the gradient is the sum over both
  // micro-batches averaged over ranks = one rank's gradient of (loss(m0) + loss(m1)) summed
  // the same way over the whole global batch.
  const int64_t per = 3;
  auto ref = mlp();
  fill(*ref, 11);
  Batch b0 = global_batch(0, 2 * per), b1 = global_batch(1, 2 * per);
  // Rank r's micro-batch j: rows r*per.. of batch j. Average over ranks of sum over j.
  for (int rank = 0; rank < 2; ++rank)
    for (const Batch* b : {&b0, &b1}) {
      Tensor x = b->x.narrow(0, rank * per, per), y = b->y.narrow(0, rank * per, per);
      (mse_loss(ref->forward(x), y) * 0.5).backward();
    }
  std::vector<std::vector<Tensor>> got(2);
  std::vector<int> synced_early(2, 0);
  parallel::launch(2, [&](parallel::Rank& r) {
    auto model = mlp();
    fill(*model, 11);
    parallel::DistributedDataParallel ddp(model, r.comm);
    {
      auto guard = ddp.no_sync();
      Tensor x = b0.x.narrow(0, r.rank() * per, per), y = b0.y.narrow(0, r.rank() * per, per);
      mse_loss(ddp.forward(x), y).backward();
      // Not reduced yet: rank 0's and rank 1's local gradients differ.
      synced_early[r.rank()] = ddp.last_reduction().buckets.empty() ? 0 : 1;
    }
    Tensor x = b1.x.narrow(0, r.rank() * per, per), y = b1.y.narrow(0, r.rank() * per, per);
    mse_loss(ddp.forward(x), y).backward();
    for (const Tensor& p : model->parameters()) got[r.rank()].push_back(p.grad().clone());
  });
  auto expected = ref->parameters();
  for (int r = 0; r < 2; ++r) {
    REQUIRE(synced_early[r] == 0);
    for (size_t i = 0; i < expected.size(); ++i)
      require_close(got[r][i], expected[i].grad(), 1e-5, 1e-6, "gradient " + std::to_string(i));
  }
}

TEST_CASE(
    "DDP: a parameter without gradient is an error naming it, or on request none when no rank "
    "used it and the reduction of zeros when another rank did",
    "[parallel][ddp]") {
  struct Partly : nn::Module {
    std::shared_ptr<nn::Linear> used, spare;
    int spare_on_rank = -1;  // the rank whose forward also uses spare
    int rank = 0;
    Partly() {
      used = register_module("used", std::make_shared<nn::Linear>(4, 2));
      spare = register_module("spare", std::make_shared<nn::Linear>(4, 2));
    }
    Tensor forward(const Tensor& x) override {
      return rank == spare_on_rank ? add(used->forward(x), spare->forward(x)) : used->forward(x);
    }
  };
  Tensor x = ones({3, 4});
  std::string message;
  try {
    parallel::launch(2, [&](parallel::Rank& r) {
      parallel::DistributedDataParallel ddp(std::make_shared<Partly>(), r.comm);
      ddp.forward(x).sum().backward();
    });
  } catch (const parallel::RankError& e) {
    message = e.what();
  }
  CHECK(message.find("spare.weight") != std::string::npos);
  CHECK(message.find("spare.bias") != std::string::npos);
  CHECK(message.find("find_unused_parameters") != std::string::npos);

  // No rank uses spare: it keeps no gradient, so SGD's weight decay leaves it as it is (torch's
  // reducer leaves a globally unused parameter's gradient alone). Used on rank 0 only: every
  // rank gets the average of rank 0's gradient and zeros.
  for (int spare_on_rank : {-1, 0}) {
    INFO("spare used on rank " << spare_on_rank);
    std::vector<int> spare_defined(2, 1);  // not vector<bool>: ranks write their own element
    std::vector<double> spare_moved(2, -1), spare_grad(2, -1), used_grad(2, 0);
    parallel::launch(2, [&](parallel::Rank& r) {
      auto model = std::make_shared<Partly>();
      model->spare_on_rank = spare_on_rank;
      model->rank = r.rank();
      parallel::DistributedDataParallel ddp(model, r.comm,
                                            parallel::DDPOptions().find_unused_parameters(true));
      optim::SGD sgd(ddp.parameters(), optim::SGDOptions(0.1).weight_decay(0.5));
      const Tensor before = model->spare->weight.detach().clone();
      for (int k = 0; k < 2; ++k) {  // and after the rebuild
        sgd.zero_grad();
        ddp.forward(x).sum().backward();
        spare_defined[r.rank()] = model->spare->weight.grad().defined();
        sgd.step();
      }
      spare_moved[r.rank()] = sub(model->spare->weight, before).abs().sum().item<double>();
      if (spare_defined[r.rank()])
        spare_grad[r.rank()] = model->spare->weight.grad().sum().item<double>();
      used_grad[r.rank()] = model->used->weight.grad().abs().sum().item<double>();
    });
    for (int r = 0; r < 2; ++r) {
      CHECK(used_grad[r] > 0.0);
      if (spare_on_rank < 0) {
        CHECK_FALSE(spare_defined[r]);
        CHECK(spare_moved[r] == 0.0);
      } else {
        CHECK(spare_defined[r]);
        CHECK(spare_grad[r] == Approx(12.0));  // rank 0: 2 x 4 entries of 3 (rows of ones); / 2
        CHECK(spare_moved[r] > 0.0);
      }
    }
  }
}

TEST_CASE(
    "DDP find_unused_parameters reduces what an unused parameter's gradient holds (its "
    "no_sync sums)",
    "[parallel][ddp]") {
  // Head b takes part in the no_sync pass only: the synced pass must average its sums, not
  // zero them (PyTorch's reducer zeroes the slot of a parameter without a gradient only).
  struct TwoHeads : nn::Module {
    std::shared_ptr<nn::Linear> a, b;
    bool use_b = true;
    TwoHeads() {
      a = register_module("a", std::make_shared<nn::Linear>(8, 4));
      b = register_module("b", std::make_shared<nn::Linear>(8, 4));
    }
    Tensor forward(const Tensor& x) override {
      return use_b ? add(a->forward(x), b->forward(x)) : a->forward(x);
    }
  };
  const int world = 2;
  const Batch batch = global_batch(0, 4 * world);
  // One rank with the whole batch: the average of the ranks' sums is the whole batch's / world.
  TwoHeads ref;
  fill(ref, 3);
  sum(ref.forward(batch.x)).backward();
  ref.use_b = false;
  sum(ref.forward(batch.x)).backward();
  std::vector<std::vector<Tensor>> got(world);
  parallel::launch(world, [&](parallel::Rank& r) {
    auto model = std::make_shared<TwoHeads>();
    fill(*model, 3);
    parallel::DistributedDataParallel ddp(model, r.comm,
                                          parallel::DDPOptions().find_unused_parameters(true));
    const Tensor x = batch.x.narrow(0, 4 * r.rank(), 4);
    {
      auto guard = ddp.no_sync();
      sum(ddp.forward(x)).backward();
    }
    model->use_b = false;
    sum(ddp.forward(x)).backward();
    for (const Tensor& p : model->parameters()) got[r.rank()].push_back(p.grad().clone());
  });
  const std::vector<Tensor> params = ref.parameters();
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < params.size(); ++i)
      require_close(got[r][i], params[i].grad() / world, 1e-5, 1e-6,
                    "rank " + std::to_string(r) + ", gradient " + std::to_string(i));
}

TEST_CASE("DDP recovers from a backward that failed on every rank with buckets in flight",
          "[parallel][ddp]") {
  const int steps = 3;
  const int64_t per_rank = 4;
  const auto expected = train_single(steps, per_rank * 2);
  std::vector<std::vector<Tensor>> got(2);
  std::vector<std::string> errors(2);
  parallel::launch(2, [&](parallel::Rank& r) {
    auto model = mlp();
    fill(*model, 7);
    parallel::DistributedDataParallel ddp(model, r.comm,
                                          parallel::DDPOptions().bucket_cap_mb(1e-4).first_bucket_mb(1e-4));
    optim::SGD opt(ddp.parameters(), optim::SGDOptions(0.1).momentum(0.9));
    // The first layer's weight is ready last: the later buckets are in flight when it throws,
    // once on every rank (in the first pass, before the rebuild, and after it).
    bool armed = false;
    model->parameters().front().register_grad_ready_hook([&](const Tensor&) {
      if (std::exchange(armed, false)) TANDEM_THROW(ValueError, "injected failure");
    });
    for (int k = 0; k < steps; ++k) {
      Batch b = global_batch(k, per_rank * 2);
      Tensor x = b.x.narrow(0, r.rank() * per_rank, per_rank);
      Tensor y = b.y.narrow(0, r.rank() * per_rank, per_rank);
      if (k < 2) {
        armed = true;
        try {
          mse_loss(ddp.forward(x), y).backward();
        } catch (const ValueError& e) {
          errors[r.rank()] += e.what();
        }
      }
      opt.zero_grad();
      mse_loss(ddp.forward(x), y).backward();
      opt.step();
    }
    got[r.rank()] = snapshot(*model);
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(errors[r].find("injected failure") != std::string::npos);
    for (size_t i = 0; i < expected.size(); ++i)
      require_close(got[r][i], expected[i], 1e-5, 1e-6, "parameter " + std::to_string(i));
  }
}

TEST_CASE("DDP refuses ranks whose models differ, naming the rank", "[parallel][ddp]") {
  std::string message;
  try {
    parallel::launch(2, [&](parallel::Rank& r) {
      auto model = std::make_shared<nn::Linear>(4, r.rank() == 1 ? 3 : 2);
      parallel::DistributedDataParallel ddp(model, r.comm);
    });
  } catch (const parallel::RankError& e) {
    message = e.what();
  }
  CHECK(message.find("rank 1") != std::string::npos);
  CHECK(message.find("weight") != std::string::npos);
}

TEST_CASE(
    "DDP broadcasts rank 0's buffers when the forward before ran with grad mode on outside "
    "no_sync, as torch's (so an evaluation after training sees rank 0's statistics)",
    "[parallel][ddp]") {
  // Rank 1's running mean after each forward, with a mark written into it before: a forward
  // that broadcasts replaces the mark with rank 0's mean.
  std::vector<float> eval_first, eval_second, after_no_sync, after_that, rank0;
  parallel::launch(2, [&](parallel::Rank& r) {
    auto bn = std::make_shared<nn::BatchNorm1d>(2);
    parallel::DistributedDataParallel ddp(bn, r.comm);
    const Tensor x = from_vector<float>({1, 2, 3, 5}, {2, 2}) * (r.rank() + 1.0);
    auto step = [&] { ddp.forward(x).sum().backward(); };
    auto mark_then = [&](const std::function<void()>& f) {
      if (r.rank() == 1) bn->running_mean.fill_(-7);
      f();
      return bn->running_mean.to_vector<float>();
    };
    step();
    if (r.rank() == 0) rank0 = bn->running_mean.to_vector<float>();
    r.comm.barrier().wait();
    bn->eval();
    {
      NoGradGuard no_grad;
      auto first = mark_then([&] { ddp.forward(x); });   // after a synced training forward
      auto second = mark_then([&] { ddp.forward(x); });  // after one under no_grad
      if (r.rank() == 1) eval_first = first, eval_second = second;
    }
    bn->train();
    step();  // after the no_grad forward: no broadcast; sets the flag again
    {
      auto guard = ddp.no_sync();
      step();  // broadcasts (the forward before synced), then clears the flag
    }
    auto next = mark_then([&] { ddp.forward(x).sum().backward(); });  // after no_sync: none
    auto last = mark_then([&] { ddp.forward(x); });                   // after a synced one
    if (r.rank() == 1) after_no_sync = next, after_that = last;
  });
  CHECK(eval_first == rank0);
  CHECK(eval_second == std::vector<float>{-7, -7});
  // Training forwards update the statistics after any broadcast: from the mark, or from rank
  // 0's, which differ.
  const float momentum = 0.1f;
  CHECK(after_no_sync[0] == Approx(-7 * (1 - momentum) + momentum * 2 * 2));
  CHECK(after_that[0] != Approx(-7 * (1 - momentum) + momentum * 2 * 2));
  CHECK(after_that[0] != -7.0f);
}

TEST_CASE("DDP broadcasts rank 0's buffers at every training forward", "[parallel][ddp]") {
  // Packed by dtype into one broadcast each: running mean and variance (f32) and the batch count
  // (i64); each comes back where it was.
  std::vector<std::vector<float>> before_second(2), var(2), own_var(2);
  std::vector<int64_t> batches(2);  // checked after: Catch's assertions are not thread-safe
  parallel::launch(2, [&](parallel::Rank& r) {
    auto bn = std::make_shared<nn::BatchNorm2d>(3);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(2, 3, 3), bn);
    parallel::DistributedDataParallel ddp(model, r.comm);
    Generator g(20 + r.rank());
    ddp.forward(randn({2, 2, 5, 5}, DType::f32, &g)).sum().backward();
    // Each rank updated its running statistics with its own batch; the next training forward
    // first makes them rank 0's.
    own_var[r.rank()] = bn->running_var.to_vector<float>();
    ddp.prepare_forward();
    before_second[r.rank()] = bn->running_mean.to_vector<float>();
    var[r.rank()] = bn->running_var.to_vector<float>();
    batches[r.rank()] = bn->num_batches_tracked.item<int64_t>();
  });
  CHECK(batches == std::vector<int64_t>{1, 1});
  REQUIRE(before_second[0] == before_second[1]);
  REQUIRE(before_second[0] != std::vector<float>(3, 0.0f));
  REQUIRE(own_var[0] != own_var[1]);
  CHECK(var[0] == own_var[0]);
  CHECK(var[1] == own_var[0]);
}

#ifdef TANDEM_TEST_CUDA_EMULATION
// The NCCL stand-in's count of the bytes this process's ranks passed to ncclAllReduce.
extern "C" uint64_t tandem_emu_nccl_allreduce_bytes();
#endif

namespace {

// Each rank's gradients after one backward of DDP on `devices`, 4 samples a rank, with bf16
// compression or without; then the check that compression only rounded them.
void check_compression(const parallel::Devices& devices) {
  const int world = static_cast<int>(devices.list().size());
  std::vector<std::vector<float>> plain(world), packed(world);
  for (bool compress : {false, true})
    parallel::launch(devices, [&](parallel::Rank& r) {
      auto model = mlp();
      fill(*model, 3);
      model->to(r.device());
      parallel::DDPOptions o;
      if (compress) o.compression(DType::bf16);
      parallel::DistributedDataParallel ddp(model, r.comm, o);
      Batch b = global_batch(0, 4 * world);
      Tensor x = b.x.narrow(0, 4 * r.rank(), 4).to(r.device());
      mse_loss(ddp.forward(x), b.y.narrow(0, 4 * r.rank(), 4).to(r.device())).backward();
      auto& out = compress ? packed[r.rank()] : plain[r.rank()];
      for (const Tensor& p : model->parameters())
        for (float v : p.grad().to_vector<float>()) out.push_back(v);
    });
  for (int r = 0; r < world; ++r) {
    REQUIRE(packed[r].size() == plain[r].size());
    REQUIRE(packed[r] == packed[0]);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < plain[r].size(); ++i) {
      worst = std::max(worst, std::fabs(double(packed[r][i]) - plain[r][i]));
      scale = std::max(scale, std::fabs(double(plain[r][i])));
    }
    CHECK(worst <= scale * 1e-2);  // bf16 keeps 8 bits of mantissa
    CHECK(worst > 0);              // and it did round
  }
}

}  // namespace

TEST_CASE("DDP with bf16 compression tracks the uncompressed gradients", "[parallel][ddp]") {
  check_compression(parallel::Devices::cpu(2));
}

// On nccl the buckets go over the wire in bf16 (Accumulate::native; tests/comm/test_nccl.cpp
// counts the bytes).
TEST_CASE("DDP with bf16 compression on every GPU (nccl) tracks the uncompressed gradients",
          "[parallel][ddp][cuda]") {
  if (!tandem::testing::nccl_present("DDP compression on every GPU")) return;
#ifdef TANDEM_TEST_CUDA_EMULATION
  const uint64_t before = tandem_emu_nccl_allreduce_bytes();
#endif
  check_compression(parallel::Devices::all());
#ifdef TANDEM_TEST_CUDA_EMULATION
  // At most 4 bytes a gradient element and rank for the uncompressed run plus 2 for the
  // compressed one (and a few for DDP's setup): with f32 on the wire both would take 4.
  int64_t grads = 0;
  for (const Tensor& p : mlp()->parameters()) grads += p.numel();
  const uint64_t world = static_cast<uint64_t>(cuda::device_count());
  CHECK(tandem_emu_nccl_allreduce_bytes() - before < (4 + 2 + 1) * grads * world);
#endif
}

TEST_CASE("launch: a rank that throws is rethrown naming it, nothing hangs", "[parallel][launch]") {
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  int rank = -1;
  try {
    parallel::launch(3, [&](parallel::Rank& r) {
      if (r.rank() == 2) TANDEM_THROW(ValueError, "bad batch");
      // The other ranks wait in a collective rank 2 never joins.
      r.comm.allreduce(zeros({4})).wait();
    }, parallel::LaunchOptions().timeout(std::chrono::seconds(60)));
  } catch (const parallel::RankError& e) {
    message = e.what();
    rank = e.rank();
    CHECK_THROWS_AS(std::rethrow_exception(e.original()), ValueError);
  }
  CHECK(rank == 2);
  CHECK(message.find("rank 2 of 3") != std::string::npos);
  CHECK(message.find("bad batch") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
}

TEST_CASE("launch: a rank that returns while others still call ends their calls at once",
          "[parallel][launch]") {
  // Ranks that run different numbers of steps: rank 0 stops after one allreduce, rank 1 calls a
  // second, which nobody will join. It fails naming rank 0 (it waited out the whole timeout).
  // (Catch's checks are made on this thread: they are not thread-safe.)
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  std::vector<std::vector<float>> sums(3);
  try {
    parallel::launch(
        2,
        [&](parallel::Rank& r) {
          Tensor t = ones({4});
          r.comm.allreduce(t).wait();
          sums[r.rank()] = t.to_vector<float>();
          if (r.rank() == 1) r.comm.allreduce(t).wait();
        },
        parallel::LaunchOptions().timeout(std::chrono::seconds(60)));
  } catch (const parallel::RankError& e) {
    message = e.what();
    CHECK(e.rank() == 1);
  }
  CHECK_THAT(message,
             Catch::Contains("rank 1 of 2 failed") &&
                 Catch::Contains("communicator aborted: rank 0 left: its function returned"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  CHECK(sums[0] == std::vector<float>(4, 2));
  CHECK(sums[1] == std::vector<float>(4, 2));
  // Ranks that finish at different times after the same calls end without an error, and a
  // collective rank 0 queued but did not wait for completes before it leaves.
  parallel::launch(3, [&](parallel::Rank& r) {
    Tensor t = full({64}, static_cast<double>(r.rank()));
    comm::Work w = r.comm.allreduce(t);
    if (r.rank() != 0) {
      w.wait();
      sums[r.rank()] = t.to_vector<float>();
    }
    if (r.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  });
  CHECK(sums[1] == std::vector<float>(64, 3));
  CHECK(sums[2] == std::vector<float>(64, 3));
  std::string later;
  comm::run_local(2, [&](comm::Communicator& c) {
    if (c.rank() == 1) later = error_of([&] { c.allreduce(ones({2})).wait(); });
  });
  CHECK_THAT(later, Catch::Contains("rank 0 left: its function returned"));
}

TEST_CASE("launch: each rank has its own context, threads and random stream", "[parallel][launch]") {
  std::vector<int> threads(2), ranks(2);
  std::vector<std::vector<float>> draws(2);
  parallel::launch(2, [&](parallel::Rank& r) {
    threads[r.rank()] = current_context().pool().num_threads();
    ranks[r.rank()] = r.world_size();
    draws[r.rank()] = randn({4}, DType::f32, &r.generator).to_vector<float>();
  }, parallel::LaunchOptions().threads(4).seed(9));
  CHECK(threads == std::vector<int>{2, 2});
  CHECK(ranks == std::vector<int>{2, 2});
  CHECK(draws[0] != draws[1]);
  Generator again(parallel::rank_seed(9, 1));
  CHECK(randn({4}, DType::f32, &again).to_vector<float>() == draws[1]);
  CHECK_THROWS_AS(parallel::launch(0, [](parallel::Rank&) {}), ValueError);
}

TEST_CASE("sync_batch_norm: finite-difference gradients (one rank)", "[parallel][gradcheck]") {
  // With a one-rank group the allreduce is the identity: the formula's backward is checked
  // against central differences, with and without residual and relu.
  const StatsAllreduce identity = [](const Tensor&) {};
  Generator g(8);
  for (bool relu_on : {false, true}) {
    Tensor x = randn({3, 2, 3, 2}, DType::f64, &g), w = randn({2}, DType::f64, &g);
    Tensor b = randn({2}, DType::f64, &g), r = randn({3, 2, 3, 2}, DType::f64, &g);
    std::vector<Tensor> inputs{x, w, b};
    if (relu_on) inputs.push_back(r);
    tandem::testing::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return sync_batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], 0.1, 1e-5,
                                 relu_on ? in[3] : Tensor(), relu_on, identity);
        },
        inputs);
  }
}

TEST_CASE("sync_batch_norm in a group of one is batch_norm_relu, forward and backward",
          "[parallel]") {
  // The same kernels with the group's sums in between: with the identity for the allreduce, the
  // values and every gradient are batch_norm_relu's (the statistics go through f64 sums of
  // count * mean and count * (var + mean^2): the same values but for the last bit).
  Generator g(9);
  Tensor x = randn({4, 3, 5, 5}, DType::f32, &g) * 2.0 + 1.0;
  Tensor r = randn({4, 3, 5, 5}, DType::f32, &g);
  Tensor w = randn({3}, DType::f32, &g), b = randn({3}, DType::f32, &g);
  Tensor dy = randn({4, 3, 5, 5}, DType::f32, &g);
  auto run = [&](bool sync) {
    std::vector<Tensor> in{x.clone().set_requires_grad(true), w.clone().set_requires_grad(true),
                           b.clone().set_requires_grad(true), r.clone().set_requires_grad(true)};
    Tensor rm = zeros({3}), rv = ones({3});
    Tensor y = sync ? sync_batch_norm(in[0], rm, rv, in[1], in[2], 0.1, 1e-5, in[3], true,
                                      [](const Tensor&) {})
                    : batch_norm_relu(in[0], rm, rv, in[1], in[2], true, 0.1, 1e-5, in[3]);
    sum(mul(y, dy)).backward();
    return std::vector<Tensor>{y, rm, rv, in[0].grad(), in[1].grad(), in[2].grad(), in[3].grad()};
  };
  const auto local = run(false), group = run(true);
  const char* names[] = {"output", "running mean", "running var", "input gradient",
                         "weight gradient", "bias gradient", "residual gradient"};
  for (size_t i = 0; i < local.size(); ++i) require_close(group[i], local[i], 1e-6, 1e-6, names[i]);
}

namespace {

// sync_batch_norm over a group whose count is 1 (one value per channel, a group of one): the
// error names it, and the running statistics are as they were. On a GPU the count is not read
// when the forward runs (the host would wait for the group): the error comes at the thread's next
// check point, here cuda::check_deferred(), which an optimizer step calls first.
void check_one_value_group(Device device) {
  Generator g(12);
  Tensor x = randn({1, 3, 1, 1}, DType::f32, &g).to(device);
  Tensor rm = zeros({3}).to(device), rv = ones({3}).to(device);
  auto forward = [&] {
    sync_batch_norm(x, rm, rv, Tensor(), Tensor(), 0.1, 1e-5, Tensor(), false,
                    [](const Tensor&) {});
    cuda::check_deferred();
  };
  CHECK_THROWS_WITH(forward(), Catch::Contains("sync_batch_norm: expected more than 1 value per "
                                               "channel over all ranks, got 1"));
  CHECK(equal(rm.cpu(), zeros({3})));
  CHECK(equal(rv.cpu(), ones({3})));
}

// SyncBatchNorm + DDP at world 2 where rank 1's batch is empty (0 rows): a step equals one rank
// with rank 0's rows (the sum loss's gradients halved by DDP's average over 2 ranks), and the
// running statistics are rank 0's batch's.
void check_sync_batchnorm_empty_rank(const parallel::Devices& devices) {
  auto make = [] {
    auto m = std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(2, 3, 3),
                                              std::make_shared<nn::BatchNorm2d>(3));
    fill(*m, 21);
    return m;
  };
  Generator g(22);
  const Tensor x = randn({4, 2, 5, 5}, DType::f32, &g);
  auto ref = make();
  Tensor y = ref->forward(x);
  sum(mul(y, y)).backward();
  std::vector<nn::StateDict> state(2);
  std::vector<std::vector<Tensor>> grads(2);
  parallel::launch(devices, [&](parallel::Rank& r) {
    auto model = make();
    model->to(r.device());
    parallel::convert_sync_batchnorm(*model, r.comm);
    parallel::DistributedDataParallel ddp(model, r.comm);
    Tensor out = ddp.forward((r.rank() == 0 ? x : x.narrow(0, 0, 0)).to(r.device()));
    sum(mul(out, out)).backward();
    for (const Tensor& p : model->parameters()) grads[r.rank()].push_back(p.grad().cpu());
    for (const auto& [k, v] : model->state_dict()) state[r.rank()][k] = v.cpu();
  });
  const std::vector<Tensor> params = ref->parameters();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    for (size_t i = 0; i < params.size(); ++i)
      require_close(grads[r][i], params[i].grad() / 2.0, 1e-4, 1e-5,
                    "gradient " + std::to_string(i));
    for (const auto& [k, v] : ref->state_dict())
      if (v.dtype() != DType::i64) require_close(state[r].at(k), v, 1e-5, 1e-6, k);
  }
}

}  // namespace

TEST_CASE("SyncBatchNorm with an empty batch on one rank: the group's statistics are the others'",
          "[parallel][ddp]") {
  check_sync_batchnorm_empty_rank(parallel::Devices::cpu(2));
}

TEST_CASE(
    "SyncBatchNorm on two GPUs with an empty batch on one: the group's statistics are the "
    "other's",
    "[parallel][ddp][cuda]") {
  if (!tandem::testing::nccl_present("SyncBatchNorm with an empty rank")) return;
  if (cuda::device_count() < 2) {
    WARN("one GPU: SyncBatchNorm with an empty rank needs two");
    return;
  }
  tandem::testing::NoTf32 no_tf32;  // f32 convolutions in f32, as the CPU reference's
  check_sync_batchnorm_empty_rank(parallel::Devices({Device("cuda:0"), Device("cuda:1")}));
}

TEST_CASE("sync_batch_norm: a group with one value per channel is an error that changes nothing",
          "[parallel]") {
  check_one_value_group(kCPU);
}

TEST_CASE(
    "CUDA sync_batch_norm: a group with one value per channel is an error that changes "
    "nothing (reported later)",
    "[parallel][cuda]") {
  if (!tandem::testing::gpu_present("CUDA sync_batch_norm's count check")) return;
  check_one_value_group(Device(DeviceType::cuda, 0));
}

namespace {

// SyncBatchNorm + DDP on `devices` (one rank each) for `steps` SGD steps of a ResNet-20, each rank
// a slice of the global batch, against one CPU rank with the whole batch: every rank's state
// (parameters, running statistics) within rtol/atol. The ranks' count of converted layers must
// be 19.
void check_sync_batchnorm_ddp(const parallel::Devices& devices, int steps, double rtol,
                              double atol) {
  const int world = static_cast<int>(devices.list().size());
  const int64_t per_rank = 4;
  auto make = [] {
    auto m = nn::resnet20(nn::ResNetOptions().in_channels(1));
    Generator g(5);
    NoGradGuard no_grad;
    for (Tensor& p : m->parameters()) p.copy_(randn(p.shape(), DType::f32, &g) * 0.2);
    return m;
  };
  auto batch = [](int k, int64_t rows) {
    Generator g(300 + k);
    return Batch{randn({rows, 1, 8, 8}, DType::f32, &g),
                 randint(0, 10, {rows}, DType::i64, &g)};
  };
  auto ref = make();
  optim::SGD ref_opt(ref->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  for (int k = 0; k < steps; ++k) {
    Batch b = batch(k, per_rank * world);
    ref_opt.zero_grad();
    cross_entropy(ref->forward(b.x), b.y).backward();
    ref_opt.step();
  }
  auto expected = ref->state_dict();
  std::vector<nn::StateDict> got(world);
  std::vector<int> converted(world);
  parallel::launch(devices, [&](parallel::Rank& r) {
    auto model = make();
    model->to(r.device());
    converted[r.rank()] = parallel::convert_sync_batchnorm(*model, r.comm);
    parallel::DistributedDataParallel ddp(model, r.comm);
    optim::SGD opt(ddp.parameters(), optim::SGDOptions(0.05).momentum(0.9));
    for (int k = 0; k < steps; ++k) {
      Batch b = batch(k, per_rank * world);
      opt.zero_grad();
      cross_entropy(ddp.forward(b.x.narrow(0, r.rank() * per_rank, per_rank).to(r.device())),
                    b.y.narrow(0, r.rank() * per_rank, per_rank).to(r.device()))
          .backward();
      opt.step();
    }
    nn::StateDict copy;
    for (const auto& [k, v] : model->state_dict()) copy[k] = v.cpu();
    got[r.rank()] = copy;
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(converted[r] == 19);
    for (const auto& [key, value] : expected) {
      if (value.dtype() == DType::i64) continue;  // num_batches_tracked
      require_close(got[r].at(key), value, rtol, atol, key);
    }
  }
}

}  // namespace

TEST_CASE("SyncBatchNorm + DDP at world 2 and 3 train a ResNet like one rank with the whole batch",
          "[parallel][ddp]") {
  for (int world : {2, 3}) {
    INFO("world " << world);
    check_sync_batchnorm_ddp(parallel::Devices::cpu(world), 2, 2e-4, 2e-5);
  }
}

TEST_CASE(
    "SyncBatchNorm + DDP on every GPU (nccl) train a ResNet like one rank with the whole "
    "batch",
    "[parallel][ddp][cuda]") {
  if (!tandem::testing::nccl_present("SyncBatchNorm on every GPU")) return;
  tandem::testing::NoTf32 no_tf32;  // f32 convolutions in f32, as the CPU reference's
  check_sync_batchnorm_ddp(parallel::Devices::all(), 2, 1e-3, 1e-4);
}

TEST_CASE("launch: a rank that throws in the middle of backward ends the job, nothing hangs",
          "[parallel][launch]") {
  const auto start = std::chrono::steady_clock::now();
  int failed = -1;
  try {
    parallel::launch(2, [&](parallel::Rank& r) {
      auto model = mlp();
      parallel::DistributedDataParallel ddp(model, r.comm,
                                            parallel::DDPOptions().bucket_cap_mb(1e-4).first_bucket_mb(1e-4));
      if (r.rank() == 1)  // the first layer's weight is ready last: buckets are already in flight
        model->parameters().front().register_grad_ready_hook(
            [](const Tensor&) { TANDEM_THROW(ValueError, "failed mid-backward"); });
      Batch b = global_batch(0, 8);
      for (int k = 0; k < 3; ++k)
        mse_loss(ddp.forward(b.x.narrow(0, 4 * r.rank(), 4)), b.y.narrow(0, 4 * r.rank(), 4)).backward();
    }, parallel::LaunchOptions().timeout(std::chrono::seconds(60)));
  } catch (const parallel::RankError& e) {
    failed = e.rank();
  }
  CHECK(failed == 1);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
}

TEST_CASE("DDP lays a channels-last parameter's bucket slot out as the parameter, and trains as "
          "row-major",
          "[parallel][ddp]") {
  const int world = 2, steps = 2;
  const int64_t per_rank = 3;
  struct Result {
    nn::StateDict state;
    int nhwc_slots = 0, slots = 0;  // 4-d gradients laid out NHWC inside their bucket
  };
  auto run = [&](bool channels_last) {
    std::vector<Result> out(world);
    parallel::launch(world, [&](parallel::Rank& r) {
      auto model = nn::resnet20(nn::ResNetOptions().in_channels(1));
      if (channels_last) model->to(MemoryFormat::ChannelsLast);
      {  // ranks start apart: DDP broadcasts rank 0's values
        Generator g(11 + r.rank());
        NoGradGuard no_grad;
        for (Tensor& p : model->parameters()) p.copy_(randn(p.shape(), DType::f32, &g) * 0.2);
      }
      parallel::DistributedDataParallel ddp(model, r.comm);
      optim::SGD opt(ddp.parameters(), optim::SGDOptions(0.05).momentum(0.9));
      for (int k = 0; k < steps; ++k) {
        Generator g(400 + k);
        Tensor x = randn({per_rank * world, 1, 8, 8}, DType::f32, &g);
        Tensor y = randint(0, 10, {per_rank * world}, DType::i64, &g);
        opt.zero_grad();
        cross_entropy(ddp.forward(x.narrow(0, r.rank() * per_rank, per_rank)),
                      y.narrow(0, r.rank() * per_rank, per_rank))
            .backward();
        opt.step();
      }
      Result& res = out[r.rank()];
      for (const Tensor& p : model->parameters()) {
        if (p.dim() != 4) continue;
        ++res.slots;
        const Tensor g = p.grad();
        if (g.is_same(p.grad_buffer()) && g.strides() == channels_last_strides(g.shape())) ++res.nhwc_slots;
      }
      for (const auto& [k, v] : model->state_dict()) res.state[k] = v.clone();
    });
    return out;
  };
  const std::vector<Result> row_major = run(false), channels_last = run(true);
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(channels_last[r].slots == 19);
    CHECK(channels_last[r].nhwc_slots == 19);
    CHECK(row_major[r].nhwc_slots == 0);
    for (const auto& [key, value] : row_major[r].state) {
      if (value.dtype() == DType::i64) continue;
      require_close(channels_last[r].state.at(key), value, 1e-5, 1e-6, key);
      // Parameters agree across ranks (buffers are each rank's own batch statistics).
      if (key.find("running") == std::string::npos)
        require_close(channels_last[r].state.at(key), channels_last[0].state.at(key), 0, 0,
                      key + ": the same on every rank");
    }
  }
  // Ranks whose parameters lie differently would add up different elements: refused, by name.
  std::string message;
  try {
    parallel::launch(2, [&](parallel::Rank& r) {
      // Three input channels: the stem's bytes differ between the layouts (with one they do not).
      auto model = nn::resnet20(nn::ResNetOptions().in_channels(3));
      if (r.rank() == 1) model->to(MemoryFormat::ChannelsLast);
      parallel::DistributedDataParallel ddp(model, r.comm);
    });
  } catch (const parallel::RankError& e) {
    message = e.what();
  }
  // Either rank may be the one reported; both name the first parameter that differs.
  CHECK(message.find("differs between rank 0 and rank 1") != std::string::npos);
  CHECK(message.find("'conv1.weight'") != std::string::npos);
  CHECK(message.find("layouts") != std::string::npos);
}

TEST_CASE("DDP refuses bucket caps that are not finite", "[parallel][ddp]") {
  // An infinite cap became a count of bytes through an undefined conversion (two buckets where
  // one was meant); a chooser's inf was ignored.
  auto comm = comm::make_local_group(1)[0];
  auto model = std::make_shared<nn::Linear>(4, 2);
  for (double cap : {double(INFINITY), 1e30, double(NAN), 0.0}) {
    INFO("cap " << cap);
    CHECK_THROWS_AS(parallel::DistributedDataParallel(model, *comm,
                                                      parallel::DDPOptions().first_bucket_mb(cap)),
                    ValueError);
    CHECK_THROWS_AS(
        parallel::DistributedDataParallel(model, *comm, parallel::DDPOptions().bucket_cap_mb(cap)),
        ValueError);
  }
}
