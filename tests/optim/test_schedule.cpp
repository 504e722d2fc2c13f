// Learning-rate schedules against torch.optim.lr_scheduler (tests/golden/make_schedule_golden.py),
// to the bit: alone, two on one optimizer, chained, in sequence, with a rate set by hand;
// libtorch's LRScheduler interface for a user's own schedule; state dicts; bad settings.
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "../util.hpp"

using namespace tandem;
using namespace tandem::optim;
using tandem::testing::error_of;
using json = nlohmann::json;

namespace {

const json& golden() {
  static const json j = [] {
    std::ifstream in(std::string(TANDEM_GOLDEN_DIR) + "/schedules.json");
    REQUIRE(in.good());
    return json::parse(in);
  }();
  return j;
}

// The script's optimizer: two groups (rates 0.1 and 0.02), momentum 0.9.
struct Groups {
  Tensor p0 = zeros({2}).requires_grad_(), p1 = zeros({3}).requires_grad_();
  SGD opt{std::vector<ParamGroup>{ParamGroup({p0}), ParamGroup({p1}, 0.02, std::nullopt)},
          SGDOptions(0.1).momentum(0.9)};
  std::vector<double> lrs() const {
    return {opt.param_groups()[0].options().get_lr(), opt.param_groups()[1].options().get_lr()};
  }
};

using Schedules = std::vector<std::shared_ptr<LRScheduler>>;

// The same constructions as make_schedule_golden.py's CASES, by name.
Schedules make_case(const std::string& name, SGD& o) {
  auto one = [](auto s) { return Schedules{std::move(s)}; };
  if (name == "lambda")
    return one(std::make_shared<LambdaLR>(
        o, std::vector<LambdaLR::Lambda>{[](int64_t e) { return std::pow(0.95, double(e)); },
                                         [](int64_t e) { return 1 / (1 + double(e)); }}));
  if (name == "lambda_one")
    return one(
        std::make_shared<LambdaLR>(o, [](int64_t e) { return std::pow(0.9, double(e / 2)); }));
  if (name == "multiplicative")
    return one(std::make_shared<MultiplicativeLR>(o, [](int64_t e) { return e % 3 ? 0.9 : 1.05; }));
  if (name == "step") return one(std::make_shared<StepLR>(o, 3, 0.5));
  if (name == "multistep")
    return one(std::make_shared<MultiStepLR>(o, std::vector<int64_t>{7, 2, 7, 12}, 0.5));
  if (name == "constant") return one(std::make_shared<ConstantLR>(o, 0.5, 4));
  if (name == "linear") return one(std::make_shared<LinearLR>(o, 0.25, 1.0, 6));
  if (name == "linear_decay") return one(std::make_shared<LinearLR>(o, 1.0, 0.1, 10));
  if (name == "exponential") return one(std::make_shared<ExponentialLR>(o, 0.9));
  if (name == "polynomial") return one(std::make_shared<PolynomialLR>(o, 8, 2.0));
  if (name == "cosine") return one(std::make_shared<CosineAnnealingLR>(o, 6, 0.001));
  if (name == "warm_restarts")
    return one(std::make_shared<CosineAnnealingWarmRestarts>(o, 3, 2, 0.001));
  if (name == "warm_restarts_flat") return one(std::make_shared<CosineAnnealingWarmRestarts>(o, 4));
  if (name == "cyclic_triangular")
    return one(std::make_shared<CyclicLR>(o, CyclicLROptions(0.01, 0.1).step_size_up(4)));
  if (name == "cyclic_triangular2")
    return one(std::make_shared<CyclicLR>(
        o, CyclicLROptions(0.01, 0.1).step_size_up(3).step_size_down(5).mode(
               CyclicMode::triangular2)));
  if (name == "cyclic_exp_range")
    return one(std::make_shared<CyclicLR>(o, CyclicLROptions(0.01, 0.1)
                                                 .step_size_up(4)
                                                 .mode(CyclicMode::exp_range)
                                                 .gamma(0.9)
                                                 .cycle_momentum(false)));
  const int64_t steps = golden()["steps"];
  if (name == "onecycle")
    return one(std::make_shared<OneCycleLR>(o, 0.3, steps, OneCycleOptions().pct_start(0.4)));
  if (name == "onecycle_linear_three_phase")
    return one(std::make_shared<OneCycleLR>(
        o, 0.5, steps,
        OneCycleOptions().anneal_strategy(AnnealStrategy::linear).three_phase(true)));
  if (name == "chained_two")
    return {std::make_shared<StepLR>(o, 3, 0.5), std::make_shared<ExponentialLR>(o, 0.9)};
  if (name == "chained_scheduler")
    return one(std::make_shared<ChainedScheduler>(Schedules{
        std::make_shared<ConstantLR>(o, 0.5, 4), std::make_shared<ExponentialLR>(o, 0.95)}));
  if (name == "sequential_three")
    return one(std::make_shared<SequentialLR>(
        o,
        std::vector<std::shared_ptr<Schedule>>{std::make_shared<LinearLR>(o, 0.1, 1.0, 4),
                                               std::make_shared<ExponentialLR>(o, 0.9),
                                               std::make_shared<StepLR>(o, 2, 0.5)},
        std::vector<int64_t>{4, 10}));
  if (name == "sequential_warmup_cosine")
    return one(std::make_shared<SequentialLR>(o, std::make_shared<LinearWarmup>(o, 5, 0.1),
                                              std::make_shared<CosineAnnealingLR>(o, 15, 1e-3), 5));
  if (name == "sequential_multiplicative")
    return one(std::make_shared<SequentialLR>(
        o, std::make_shared<StepLR>(o, 2, 0.5),
        std::make_shared<MultiplicativeLR>(o, [](int64_t) { return 0.9; }), 5));
  if (name == "by_hand" || name == "second_later") return one(std::make_shared<StepLR>(o, 3, 0.5));
  FAIL("no construction for golden case " << name);
  return {};
}

std::shared_ptr<ReduceLROnPlateau> make_plateau(const std::string& name, SGD& o) {
  if (name == "plateau_min_rel")
    return std::make_shared<ReduceLROnPlateau>(o, ReduceLROnPlateau::min, 0.5, 2, 0.01,
                                               ReduceLROnPlateau::rel, 1,
                                               std::vector<double>{0.0, 0.004});
  REQUIRE(name == "plateau_max_abs");
  return std::make_shared<ReduceLROnPlateau>(o, ReduceLROnPlateau::max, 0.3, 1, 0.05,
                                             ReduceLROnPlateau::abs, 0, std::vector<double>{0.001},
                                             1e-3);
}

// Runs a golden case for `steps` steps (all of them by default), checking every rate on the way.
void run_case(const json& c, Groups& g, Schedules& s, int64_t from = 0, int64_t to = -1) {
  const std::string name = c["name"];
  const auto lrs = c["lrs"].get<std::vector<std::vector<double>>>();
  const auto momenta = c["momenta"].get<std::vector<double>>();
  if (to < 0) to = static_cast<int64_t>(lrs.size()) - 1;
  for (int64_t step = from;; ++step) {
    INFO(name << ", step " << step);
    if (name == "by_hand" && step == 5) g.opt.param_groups()[0].options().set_lr(0.3);
    if (name == "second_later" && step == 7)
      s.push_back(std::make_shared<CosineAnnealingLR>(g.opt, 10));
    // The same operations in the same order as torch's Python: the same bits.
    REQUIRE(g.lrs() == lrs[step]);
    REQUIRE(g.opt.param_groups()[0].options().get_momentum() == momenta[step]);
    if (step == to) break;
    for (auto& one : s) one->step();
  }
}

}  // namespace

TEST_CASE("schedules equal torch.optim.lr_scheduler's rates to the bit, alone and composed",
          "[optim][golden]") {
  for (const auto& c : golden()["cases"]) {
    const std::string name = c["name"];
    if (name.rfind("plateau", 0) == 0) continue;
    SECTION(name) {
      Groups g;
      Schedules s = make_case(name, g.opt);
      run_case(c, g, s);
    }
  }
}

TEST_CASE("ReduceLROnPlateau equals torch's, by mode, threshold, cooldown and min_lr",
          "[optim][golden]") {
  const auto metrics = golden()["metrics"].get<std::vector<double>>();
  for (const auto& c : golden()["cases"]) {
    const std::string name = c["name"];
    if (name.rfind("plateau", 0) != 0) continue;
    SECTION(name) {
      Groups g;
      auto s = make_plateau(name, g.opt);
      const auto lrs = c["lrs"].get<std::vector<std::vector<double>>>();
      for (size_t i = 0; i < metrics.size(); ++i) {
        INFO("step " << i);
        s->step(metrics[i]);
        REQUIRE(g.lrs() == lrs[i]);
        REQUIRE(s->get_last_lr() == lrs[i]);
      }
      // Resumed from its state dict after 9 metrics, a fresh one goes on as the original.
      Groups h;
      auto r = make_plateau(name, h.opt);
      Groups k;
      auto first = make_plateau(name, k.opt);
      for (size_t i = 0; i < 9; ++i) first->step(metrics[i]);
      h.opt.load_state_dict(k.opt.state_dict());
      r->load_state_dict(first->state_dict());
      for (size_t i = 9; i < metrics.size(); ++i) {
        r->step(metrics[i]);
        REQUIRE(h.lrs() == lrs[i]);
      }
    }
  }
}

TEST_CASE("a schedule resumed from its state dict and the optimizer's goes on as the original",
          "[optim]") {
  for (const char* name : {"sequential_three", "chained_scheduler", "cyclic_triangular2",
                           "onecycle_linear_three_phase", "warm_restarts", "chained_two"}) {
    SECTION(name) {
      const json* c = nullptr;
      for (const auto& each : golden()["cases"])
        if (each["name"] == name) c = &each;
      REQUIRE(c != nullptr);
      Groups a;
      Schedules sa = make_case(name, a.opt);
      run_case(*c, a, sa, 0, 11);
      Groups b;
      Schedules sb = make_case(name, b.opt);
      b.opt.load_state_dict(a.opt.state_dict());
      for (size_t i = 0; i < sa.size(); ++i) sb[i]->load_state_dict(sa[i]->state_dict());
      CHECK(sb[0]->last_step() == 11);
      run_case(*c, b, sb, 11);
    }
  }
}

namespace {
// A user's schedule written against libtorch's interface: libtorch 1.13's own StepLR, verbatim
// in substance (get_lrs from get_current_lrs and step_count_).
class UserStepLR : public LRScheduler {
 public:
  UserStepLR(Optimizer& optimizer, unsigned step_size, double gamma)
      : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {}

 private:
  std::vector<double> get_lrs() override {
    if (step_count_ == 0 || step_count_ % step_size_ != 0) return get_current_lrs();
    std::vector<double> lrs = get_current_lrs();
    for (double& v : lrs) v *= gamma_;
    return lrs;
  }
  unsigned step_size_;
  double gamma_;
};
}  // namespace

TEST_CASE("a libtorch LRScheduler subclass steps as under libtorch, and composes", "[optim]") {
  // libtorch 1.13's StepLR(sgd, 3, 0.5), printed by a program linked against Debian's libtorch:
  // 0.1 0.1 0.1 0.1 0.05 0.05 0.05 0.025 (it decays a step later than torch's Python StepLR).
  Groups g;
  UserStepLR user(g.opt, 3, 0.5);
  std::vector<double> lrs;
  for (int i = 0; i < 8; ++i) {
    lrs.push_back(g.lrs()[0]);
    user.step();
  }
  CHECK(lrs == std::vector<double>{0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025});
  CHECK(user.last_step() == 8);
  CHECK(user.get_last_lr() == g.lrs());
  // Beside a built-in schedule, each multiplies what the other left.
  Groups h;
  UserStepLR halve(h.opt, 1, 0.5);
  ExponentialLR tenth(h.opt, 0.1);
  for (int i = 0; i < 3; ++i) {
    halve.step();
    tenth.step();
  }
  CHECK(h.lrs()[0] == Approx(0.1 * 0.25 * 1e-3).epsilon(1e-14));  // halved twice (not at step 0)
}

TEST_CASE("bad schedule settings and state dicts are clear errors that change nothing",
          "[optim][errors]") {
  Groups g;
  const auto before = g.lrs();
  CHECK_THAT(error_of([&] { LinearLR(g.opt, 0.0); }), Catch::Contains("LinearLR: need"));
  CHECK_THAT(error_of([&] { ConstantLR(g.opt, 1.5); }), Catch::Contains("ConstantLR: need factor"));
  CHECK_THAT(error_of([&] { PolynomialLR(g.opt, 0); }), Catch::Contains("total_iters must be"));
  CHECK_THAT(error_of([&] { CosineAnnealingWarmRestarts(g.opt, 0); }),
             Catch::Contains("need T_0 > 0 and T_mult >= 1, got 0 and 1"));
  CHECK_THAT(error_of([&] { CyclicLR(g.opt, CyclicLROptions(0.01, 0.1).step_size_up(0)); }),
             Catch::Contains("CyclicLR: need step sizes > 0"));
  CHECK_THAT(error_of([&] {
               LambdaLR(g.opt, std::vector<LambdaLR::Lambda>{[](int64_t) { return 1.0; }});
             }),
             Catch::Contains("LambdaLR: expected 2 lambdas (one per group), got 1"));
  CHECK_THAT(error_of([&] { MultiplicativeLR(g.opt, MultiplicativeLR::Lambda()); }),
             Catch::Contains("MultiplicativeLR: a lambda is empty"));
  CHECK_THAT(error_of([&] { ReduceLROnPlateau(g.opt, ReduceLROnPlateau::min, 1.0); }),
             Catch::Contains("factor must be in [0, 1), got 1"));
  CHECK_THAT(error_of([&] {
               ReduceLROnPlateau(g.opt, ReduceLROnPlateau::min, 0.1, 10, 1e-4,
                                 ReduceLROnPlateau::rel, 0, std::vector<double>{1, 2, 3});
             }),
             Catch::Contains("expected 2 min_lr values (one per group), got 3"));
  CHECK_THAT(error_of([&] { ChainedScheduler(Schedules{}); }),
             Catch::Contains("ChainedScheduler: needs at least one schedule"));
  Groups other;
  auto mine = std::make_shared<StepLR>(g.opt, 2);
  CHECK_THAT(error_of([&] {
               ChainedScheduler(Schedules{mine, std::make_shared<StepLR>(other.opt, 2)});
             }),
             Catch::Contains("every schedule must belong to the same optimizer"));
  CHECK_THAT(error_of([&] {
               SequentialLR(g.opt, std::vector<std::shared_ptr<Schedule>>{mine, mine},
                            std::vector<int64_t>{});
             }),
             Catch::Contains("expected one milestone fewer than schedules, got 2 schedules and 0"));
  CHECK_THAT(error_of([&] {
               SequentialLR(g.opt, std::vector<std::shared_ptr<Schedule>>{mine, mine, mine},
                            std::vector<int64_t>{5, 2});
             }),
             Catch::Contains("milestones must be >= 0 and in increasing order"));
  CHECK(g.lrs() == before);  // StepLR at step 0 leaves the rates; the refused ones touched none

  StepLR step(g.opt, 2);
  CHECK_THAT(error_of([&] { step.load_state_dict({}); }),
             Catch::Contains("expected one 'last_step' entry, got 0 entries"));
  nn::StateDict negative{{"last_step", full(Shape{}, -1.0, TensorOptions(DType::i64))}};
  CHECK_THAT(error_of([&] { step.load_state_dict(negative); }),
             Catch::Contains("'last_step' must be >= 0, got -1"));
  SequentialLR seq(g.opt, std::make_shared<StepLR>(g.opt, 2), std::make_shared<StepLR>(g.opt, 3),
                   4);
  auto state = seq.state_dict();
  CHECK(state.size() == 3);  // its own count and each schedule's
  state.erase("1.last_step");
  CHECK_THAT(error_of([&] { seq.load_state_dict(state); }),
             Catch::Contains("expected one 'last_step' entry, got 0 entries"));
}
