// Optimizers and schedules: 20 steps against torch.optim (tests/golden/make_optim_golden.py),
// state-dict round trips, and bad hyper-parameters.
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "../util.hpp"

using namespace tandem;
using namespace tandem::optim;
using tandem::testing::error_of;
using tandem::testing::require_close;
using json = nlohmann::json;

namespace {

struct Problem {
  Tensor X, Y, W, b;
  Tensor loss() const { return mean(pow(sub(add(matmul(X, W.t()), b), Y), 2.0)); }
};

const json& golden() {
  static const json j = [] {
    std::ifstream in(std::string(TANDEM_GOLDEN_DIR) + "/optim.json");
    REQUIRE(in.good());
    return json::parse(in);
  }();
  return j;
}

Problem make_problem() {
  const json& j = golden();
  auto t = [&](const char* key, Shape shape) {
    return from_vector(j[key].get<std::vector<float>>(), shape);
  };
  Problem p{t("X", {8, 4}), t("Y", {8, 5}), t("W0", {5, 4}), t("b0", {5})};
  p.W.set_requires_grad(true);
  p.b.set_requires_grad(true);
  return p;
}

struct Setup {
  std::shared_ptr<Optimizer> opt;
  std::shared_ptr<LRScheduler> sched;
  double clip_norm = 0, clip_type = 2.0;
};

// The same constructions as make_optim_golden.py, by case name.
Setup make_case(const std::string& name, Problem& p) {
  Setup s;
  std::vector<ParamGroup> both{ParamGroup({p.W, p.b})};
  if (name == "sgd") {
    s.opt = std::make_shared<SGD>(both, SGDOptions().lr(0.1));
  } else if (name == "sgd_momentum_dampening_wd") {
    s.opt = std::make_shared<SGD>(
        both, SGDOptions().lr(0.05).momentum(0.9).dampening(0.1).weight_decay(1e-2));
  } else if (name == "sgd_nesterov_groups") {
    s.opt = std::make_shared<SGD>(
        std::vector<ParamGroup>{ParamGroup({p.W}, std::nullopt, 1e-2), ParamGroup({p.b}, 0.02, 0.0)},
        SGDOptions().lr(0.05).momentum(0.9).nesterov(true));
  } else if (name == "adamw") {
    s.opt = std::make_shared<AdamW>(both, AdamWOptions().lr(1e-2).betas(0.9, 0.99).weight_decay(0.05));
  } else if (name == "adamw_groups_clip2") {
    s.opt = std::make_shared<AdamW>(
        std::vector<ParamGroup>{ParamGroup({p.W}), ParamGroup({p.b}, std::nullopt, 0.0)},
        AdamWOptions().lr(2e-2));
    s.clip_norm = 0.5;
  } else if (name == "sgd_clip_inf") {
    s.opt = std::make_shared<SGD>(both, SGDOptions().lr(0.1).momentum(0.5));
    s.clip_norm = 0.3;
    s.clip_type = std::numeric_limits<double>::infinity();
  } else if (name == "sgd_onecycle") {
    s.opt = std::make_shared<SGD>(
        both, SGDOptions().lr(0.1).momentum(0.9).nesterov(true).weight_decay(5e-4));
    s.sched = std::make_shared<OneCycleLR>(*s.opt, 0.2, 20);
  } else if (name == "adamw_onecycle") {
    s.opt = std::make_shared<AdamW>(both, AdamWOptions().lr(1e-2));
    s.sched = std::make_shared<OneCycleLR>(*s.opt, 3e-2, 20, OneCycleOptions().pct_start(0.25));
  } else if (name == "sgd_warmup_cosine") {
    s.opt = std::make_shared<SGD>(both, SGDOptions().lr(0.1).momentum(0.9));
    s.sched = std::make_shared<SequentialLR>(*s.opt, std::make_shared<LinearWarmup>(*s.opt, 5, 0.1),
                                             std::make_shared<CosineAnnealing>(*s.opt, 15, 1e-3), 5);
  } else if (name == "sgd_step") {
    s.opt = std::make_shared<SGD>(both, SGDOptions().lr(0.1));
    s.sched = std::make_shared<StepLR>(*s.opt, 7, 0.5);
  } else if (name == "sgd_multistep") {
    s.opt = std::make_shared<SGD>(both, SGDOptions().lr(0.1).momentum(0.9));
    s.sched = std::make_shared<MultiStepLR>(*s.opt, std::vector<int64_t>{5, 12}, 0.3);
  } else if (name == "adam") {
    s.opt = std::make_shared<Adam>(both, AdamOptions(1e-2).betas({0.9, 0.99}).weight_decay(0.05));
  } else if (name == "adam_groups") {
    s.opt = std::make_shared<Adam>(
        std::vector<ParamGroup>{ParamGroup({p.W}, std::nullopt, 0.1), ParamGroup({p.b})},
        AdamOptions(2e-2));
  } else if (name == "adam_amsgrad") {
    s.opt = std::make_shared<Adam>(
        both, AdamOptions(5e-2).betas({0.9, 0.9}).weight_decay(0.05).amsgrad(true));
  } else if (name == "adamw_amsgrad") {
    s.opt = std::make_shared<AdamW>(both, AdamWOptions(5e-2).betas(0.9, 0.9).amsgrad(true));
  } else if (name == "rmsprop") {
    s.opt = std::make_shared<RMSprop>(both, RMSpropOptions(1e-2));
  } else if (name == "rmsprop_centered_momentum_wd") {
    s.opt = std::make_shared<RMSprop>(
        both,
        RMSpropOptions(5e-3).alpha(0.9).eps(1e-6).weight_decay(0.05).momentum(0.8).centered(true));
  } else if (name == "rmsprop_groups_onecycle") {
    s.opt = std::make_shared<RMSprop>(
        std::vector<ParamGroup>{ParamGroup({p.W}), ParamGroup({p.b}, 3e-3, std::nullopt)},
        RMSpropOptions(1e-2).momentum(0.9));
    s.sched = std::make_shared<OneCycleLR>(*s.opt, 2e-2, 20);
  } else if (name == "adagrad") {
    s.opt = std::make_shared<Adagrad>(both, AdagradOptions(0.1));
  } else if (name == "adagrad_decay_wd_initial") {
    s.opt = std::make_shared<Adagrad>(
        both,
        AdagradOptions(0.2).lr_decay(0.05).weight_decay(0.02).initial_accumulator_value(0.5).eps(
            1e-6));
  } else {
    FAIL("no construction for golden case " << name);
  }
  return s;
}

// One training step as in the golden script; returns the clipped norm (0 without clipping).
double train_step(Problem& p, Setup& s) {
  s.opt->zero_grad();
  p.loss().backward();
  double norm = s.clip_norm > 0 ? clip_grad_norm({p.W, p.b}, s.clip_norm, s.clip_type) : 0.0;
  s.opt->step();
  if (s.sched) s.sched->step();
  return norm;
}

}  // namespace

TEST_CASE("optimizers and schedules match torch.optim over 20 steps", "[optim][golden]") {
  for (const auto& c : golden()["cases"]) {
    const std::string name = c["name"];
    SECTION(name) {
      Problem p = make_problem();
      Setup s = make_case(name, p);
      auto lrs = c["lrs"].get<std::vector<double>>();
      auto momenta = c["momenta"].get<std::vector<double>>();
      auto norms = c["norms"].get<std::vector<double>>();
      for (int step = 0; step < golden()["steps"].get<int>(); ++step) {
        INFO("step " << step);
        // The schedules round as torch's Python does, to the bit: the same operations in the
        // same order, with no FMA contraction outside the kernels whatever the build's
        // instruction set.
        REQUIRE(s.opt->param_groups()[0].options().get_lr() == lrs[step]);
        REQUIRE(s.opt->param_groups()[0].options().get_momentum() == momenta[step]);
        double norm = train_step(p, s);
        if (!norms.empty()) REQUIRE(norm == Approx(norms[step]).epsilon(1e-5));
      }
      require_close(p.W, from_vector(c["W"].get<std::vector<float>>(), {5, 4}), 2e-5, 2e-6, "W");
      require_close(p.b, from_vector(c["b"].get<std::vector<float>>(), {5}), 2e-5, 2e-6, "b");
    }
  }
}

TEST_CASE("L-BFGS matches torch.optim.LBFGS step for step, closure calls included",
          "[optim][golden]") {
  for (const auto& c : golden()["lbfgs"]) {
    const std::string name = c["name"];
    SECTION(name) {
      Problem p = make_problem();
      LBFGSOptions options;
      if (name == "lbfgs") options = LBFGSOptions(0.5).max_iter(4).history_size(3);
      if (name == "lbfgs_strong_wolfe")
        options = LBFGSOptions(1).max_iter(3).line_search_fn("strong_wolfe");
      if (name == "lbfgs_max_eval")
        options = LBFGSOptions(0.8).max_iter(10).max_eval(4).history_size(2);
      LBFGS opt({p.W, p.b}, options);
      int calls = 0;
      auto closure = [&] {
        ++calls;
        opt.zero_grad();
        Tensor loss = p.loss();
        loss.backward();
        return loss;
      };
      const auto losses = c["losses"].get<std::vector<double>>();
      const auto params = c["params"].get<std::vector<std::vector<float>>>();
      for (size_t step = 0; step < losses.size(); ++step) {
        INFO("step " << step);
        CHECK(opt.step(closure).item<double>() == Approx(losses[step]).epsilon(1e-5));
        require_close(cat({p.W.flatten(), p.b}), from_vector(params[step]), 1e-4, 1e-5,
                      "parameters");
      }
      CHECK(calls == c["closure_calls"].get<int>());
    }
  }
}

TEST_CASE("L-BFGS refuses what torch refuses, before anything changes", "[optim][errors]") {
  Problem p = make_problem();
  CHECK_THROWS_WITH(LBFGS({p.W}, LBFGSOptions().line_search_fn("backtracking")),
                    Catch::Contains("\"strong_wolfe\" or none"));
  CHECK_THROWS_WITH(LBFGS({p.W}, LBFGSOptions().history_size(0)),
                    Catch::Contains("must be positive"));
  CHECK_THROWS_WITH(LBFGS({p.W, ones({2}, kFloat64).set_requires_grad(true)}),
                    Catch::Contains("the first one's device and dtype"));
  LBFGS opt({p.W, p.b});
  const Tensor before = p.W.clone();
  CHECK_THROWS_WITH(opt.step(), Catch::Contains("needs a closure"));
  CHECK_THROWS_WITH(opt.step([] { return ones({2}); }), Catch::Contains("one number"));
  CHECK(p.W.equal(before));
  // At a minimum already (zero gradient) it returns at once.
  int calls = 0;
  const Tensor loss = opt.step([&] {
    ++calls;
    opt.zero_grad();
    Tensor l = mul(sum(p.W), 0.0);
    l.backward();
    return l;
  });
  CHECK(calls == 1);
  CHECK(loss.item<double>() == 0.0);
  CHECK(p.W.equal(before));
}

TEST_CASE("L-BFGS's state dict carries its history: a loaded one goes on as the original",
          "[optim]") {
  for (const bool wolfe : {false, true}) {
    SECTION(wolfe ? "strong_wolfe" : "fixed step") {
      LBFGSOptions options = LBFGSOptions(0.5).max_iter(3).history_size(2);
      if (wolfe) options.line_search_fn("strong_wolfe");
      // Two steps, the state through an archive's bytes into a fresh LBFGS on a copy of the
      // parameters; then one more step each: bit-equal, as the same operations in the same order.
      Problem a = make_problem(), b = make_problem(), fresh = make_problem();
      LBFGS opt_a({a.W, a.b}, options), opt_b({b.W, b.b}, options),
          opt_fresh({fresh.W, fresh.b}, options);
      auto closure = [](LBFGS& opt, const Problem& p) {
        return [&opt, &p] {
          opt.zero_grad();
          Tensor loss = p.loss();
          loss.backward();
          return loss;
        };
      };
      opt_a.step(closure(opt_a, a));
      const int64_t first_iterations = opt_a.state_dict().at("extra.n_iter").item<int64_t>();
      opt_a.step(closure(opt_a, a));
      const nn::StateDict saved = opt_a.state_dict();
      // The counts go on across steps, as torch's state.
      CHECK(saved.at("extra.n_iter").item<int64_t>() > first_iterations);
      CHECK(saved.count("extra.old_dirs.1") == 1);  // the history is full (history_size 2)
      CHECK(saved.count("extra.old_dirs.2") == 0);
      std::stringstream bytes;
      serialize::OutputArchive out;
      opt_a.save(out);
      out.save_to(bytes);
      serialize::InputArchive in;
      in.load_from(bytes);
      {
        NoGradGuard no_grad;
        b.W.copy_(a.W);
        b.b.copy_(a.b);
        fresh.W.copy_(a.W);
        fresh.b.copy_(a.b);
      }
      opt_b.load(in);
      opt_a.step(closure(opt_a, a));
      opt_b.step(closure(opt_b, b));
      opt_fresh.step(closure(opt_fresh, fresh));
      CHECK(b.W.equal(a.W));
      CHECK(b.b.equal(a.b));
      // Without the history, the same start point steps elsewhere (steepest descent first).
      CHECK_FALSE(fresh.W.equal(a.W));

      // A damaged history is refused, naming the entry, and the optimizer keeps its own.
      const int64_t fresh_iterations = opt_fresh.state_dict().at("extra.n_iter").item<int64_t>();
      const Tensor fresh_direction = opt_fresh.state_dict().at("extra.d").clone();
      nn::StateDict damaged = opt_a.state_dict();
      damaged.erase("extra.ro");
      CHECK(error_of([&] {
              opt_fresh.load_state_dict(damaged);
            }).find("'extra.ro' must hold one number per curvature pair") != std::string::npos);
      damaged = opt_a.state_dict();
      damaged["extra.d"] = zeros({3}, kFloat64);
      CHECK(error_of([&] {
              opt_fresh.load_state_dict(damaged);
            }).find("'extra.d' must be a floating vector of 25 numbers") != std::string::npos);
      damaged = opt_a.state_dict();
      damaged["extra.old_dirs.7"] = zeros({25});
      CHECK(error_of([&] { opt_fresh.load_state_dict(damaged); }) ==
            "LBFGS.load_state_dict: unexpected key 'extra.old_dirs.7'");
      CHECK(opt_fresh.state_dict().at("extra.n_iter").item<int64_t>() == fresh_iterations);
      CHECK(opt_fresh.state_dict().at("extra.d").equal(fresh_direction));
    }
  }
}

TEST_CASE("optimizer and schedule state dicts resume bit-exactly", "[optim]") {
  for (const char* name :
       {"sgd_onecycle", "adamw_onecycle", "sgd_warmup_cosine", "rmsprop_groups_onecycle"}) {
    SECTION(name) {
      // Reference: 12 uninterrupted steps.
      Problem a = make_problem();
      Setup sa = make_case(name, a);
      for (int i = 0; i < 12; ++i) train_step(a, sa);
      // 5 steps, state saved, a fresh optimizer and schedule loaded, 7 more.
      Problem b = make_problem();
      Setup sb = make_case(name, b);
      for (int i = 0; i < 5; ++i) train_step(b, sb);
      nn::StateDict opt_state = sb.opt->state_dict(), sched_state = sb.sched->state_dict();
      for (auto& entry : opt_state) entry.second = entry.second.clone();
      Problem c = make_problem();
      {
        NoGradGuard no_grad;
        c.W.copy_(b.W);
        c.b.copy_(b.b);
      }
      Setup sc = make_case(name, c);
      sc.opt->load_state_dict(opt_state);
      sc.sched->load_state_dict(sched_state);
      for (int i = 0; i < 7; ++i) train_step(c, sc);
      REQUIRE(equal(a.W, c.W));
      REQUIRE(equal(a.b, c.b));
      REQUIRE(sa.opt->param_groups()[0].options().get_lr() ==
              sc.opt->param_groups()[0].options().get_lr());
    }
  }
}

TEST_CASE("optimizer state dicts from another layout are refused untouched", "[optim][errors]") {
  Problem p = make_problem();
  Setup s = make_case("adamw", p);
  train_step(p, s);
  nn::StateDict good = s.opt->state_dict();

  Problem q = make_problem();
  AdamW other({ParamGroup({q.W}), ParamGroup({q.b})}, AdamWOptions(0.1));
  CHECK_THAT(error_of([&] { other.load_state_dict(good); }),
             Catch::Contains("1 parameter groups, the optimizer 2"));
  // Another optimizer's dict would set this one's hyper-parameters from its own (SGD's momentum
  // as Adam's beta1): refused by the writer's mark, either way.
  SGD sgd({q.W, q.b}, SGDOptions().lr(0.5));
  CHECK(error_of([&] { sgd.load_state_dict(good); }) ==
        "SGD.load_state_dict: the state is a AdamW optimizer's, not a SGD's");
  Adam adam({q.W, q.b}, AdamOptions(0.1));
  CHECK_THAT(error_of([&] { adam.load_state_dict(sgd.state_dict()); }),
             Catch::Contains("the state is a SGD optimizer's, not a Adam's"));
  CHECK(adam.param_groups()[0].options().get_lr() == 0.1);
  // A dict written before the mark existed (none in it) still loads.
  nn::StateDict unmarked = sgd.state_dict();
  unmarked.erase("optimizer.SGD");
  SGD again({q.W, q.b}, SGDOptions().lr(0.2));
  again.load_state_dict(unmarked);
  CHECK(again.param_groups()[0].options().get_lr() == 0.5);

  nn::StateDict bad = good;
  bad["state.0.exp_avg"] = zeros({3});
  Setup t = make_case("adamw", q);
  CHECK_THAT(error_of([&] { t.opt->load_state_dict(bad); }),
             Catch::Contains("'state.0.exp_avg' has shape (3,) but parameter 0 has shape (5, 4)"));
  bad = good;
  bad["state.7.exp_avg"] = zeros({5});
  CHECK_THAT(error_of([&] { t.opt->load_state_dict(bad); }),
             Catch::Contains("state for parameter 7 but the optimizer has 2"));
  // Nothing was loaded: the lr is still the constructor's, the state still empty.
  CHECK(t.opt->state_dict().size() == 6);  // the group's five entries and the writer's mark
}

TEST_CASE("bad optimizer and schedule settings are clear errors", "[optim][errors]") {
  Problem p = make_problem();
  std::vector<ParamGroup> both{ParamGroup({p.W, p.b})};
  CHECK_THAT(error_of([&] { SGD(both, SGDOptions().lr(-1)); }),
             Catch::Contains("SGD: learning rate must be finite and >= 0, got -1"));
  CHECK_THAT(error_of([&] { SGD(both, SGDOptions().nesterov(true)); }),
             Catch::Contains("Nesterov momentum requires a momentum > 0"));
  CHECK_THAT(error_of([&] { AdamW(both, AdamWOptions().betas(0.9, 1.0)); }),
             Catch::Contains("betas must be in [0, 1)"));
  CHECK_THAT(error_of([&] { SGD({ParamGroup({zeros({2}, DType::i64)})}, SGDOptions()); }),
             Catch::Contains("must be a floating tensor"));
  {  // A frozen parameter is taken and left as it is (torch's optimizers skip it too).
    Tensor live = ones({2}), frozen = ones({2});
    live.set_requires_grad(true);
    SGD frozen_opt({ParamGroup({live, frozen})}, SGDOptions().lr(0.5).momentum(0.9));
    sum(mul(live, frozen)).backward();
    frozen_opt.step();
    CHECK(equal(live, full({2}, 0.5)));
    CHECK(equal(frozen, ones({2})));
  }
  CHECK_THAT(error_of([&] { RMSprop(both, RMSpropOptions().alpha(-0.5)); }),
             Catch::Contains("RMSprop: alpha, eps and momentum must be >= 0, got -0.5"));
  CHECK_THAT(error_of([&] { Adagrad(both, AdagradOptions().lr_decay(-1)); }),
             Catch::Contains("Adagrad: lr_decay, initial_accumulator_value and eps must be >= 0"));
  {  // One-cycle cycles momentum by default; Adagrad has none, so it says so.
    Adagrad adagrad(both, AdagradOptions(0.1));
    CHECK_THAT(error_of([&] { OneCycleLR(adagrad, 0.1, 10); }),
               Catch::Contains("OneCycleLR: Adagrad has no momentum to cycle; construct the "
                               "schedule with cycle_momentum(false)"));
    CHECK_THAT(error_of([&] { adagrad.param_groups()[0].options().set_momentum(0.9); }),
               Catch::Contains("Adagrad has no momentum to set"));
    CHECK(adagrad.param_groups()[0].options().get_lr() == 0.1);  // refused untouched
    CHECK(adagrad.param_groups()[0].initial_lr() == 0.1);
    OneCycleLR without(adagrad, 0.1, 10, OneCycleOptions().cycle_momentum(false));
    CHECK(adagrad.param_groups()[0].options().get_lr() == Approx(0.1 / 25));
  }
  SGD opt(both, SGDOptions());
  OneCycleLR sched(opt, 0.1, 3);
  for (int i = 0; i < 3; ++i) sched.step();
  CHECK_THAT(error_of([&] { sched.step(); }),
             Catch::Contains("OneCycleLR: stepped 4 times, but total_steps is 3"));
  CHECK_THAT(error_of([&] { StepLR(opt, 0); }), Catch::Contains("step_size must be positive"));
}

TEST_CASE("OneCycleLR with a warm-up of one step starts the cycle, with no NaN", "[optim]") {
  // pct_start x total_steps == 1: the warm-up phase ends at step 0 (PyTorch divides by zero).
  Tensor w = zeros({2});
  w.set_requires_grad(true);
  SGD opt({w}, SGDOptions(0.1).momentum(0.9));
  OneCycleLR sched(opt, 0.2, 4, OneCycleOptions().pct_start(0.25));
  std::vector<double> lrs{opt.param_groups()[0].options().get_lr()};
  for (int i = 0; i < 3; ++i) {
    sched.step();
    lrs.push_back(opt.param_groups()[0].options().get_lr());
  }
  CHECK(lrs[0] == Approx(0.2 / 25));  // the cycle's start
  for (double lr : lrs) CHECK(std::isfinite(lr));
  // Then the annealing from the peak: a third of the way at step 1 (cosine: 3/4 of the range).
  CHECK(lrs[1] == Approx(0.2 * 0.75 + (0.2 / 25 / 1e4) * 0.25).epsilon(0.05));
  CHECK(lrs[3] < lrs[2]);
}

TEST_CASE("weight_decay_groups puts biases and batch-norm parameters in a no-decay group",
          "[optim]") {
  auto model = nn::resnet20();
  auto groups = weight_decay_groups(*model, 5e-4);
  REQUIRE(groups.size() == 2);
  CHECK(*groups[0].weight_decay == 5e-4);
  CHECK(*groups[1].weight_decay == 0.0);
  for (auto& w : groups[0].params) CHECK(w.dim() >= 2);
  for (auto& w : groups[1].params) CHECK(w.dim() == 1);
  CHECK(groups[0].params.size() + groups[1].params.size() == model->parameters().size());
  // 19 convolutions + fc weight decay; 19 BN (gamma, beta) pairs + fc bias do not.
  CHECK(groups[0].params.size() == 20);
  CHECK(groups[1].params.size() == 39);
}

TEST_CASE("libtorch's optimizer forms: a parameter list and options that take the rate first",
          "[optim]") {
  // Three steps through each libtorch form land bit for bit where the group form with the same
  // hyper-parameters does (that form is checked against torch.optim above).
  auto three_steps = [](const std::function<std::shared_ptr<Optimizer>(Problem&)>& make) {
    Problem p = make_problem();
    auto opt = make(p);
    for (int i = 0; i < 3; ++i) {
      opt->zero_grad();
      p.loss().backward();
      opt->step();
    }
    return p;
  };
  auto same = [](const Problem& a, const Problem& b) {
    CHECK(equal(a.W, b.W));
    CHECK(equal(a.b, b.b));
  };
  same(three_steps([](Problem& p) {
         return std::make_shared<SGD>(std::vector<Tensor>{p.W, p.b}, SGDOptions(0.1).momentum(0.9));
       }),
       three_steps([](Problem& p) {
         return std::make_shared<SGD>(std::vector<ParamGroup>{ParamGroup({p.W, p.b})},
                                      SGDOptions().lr(0.1).momentum(0.9));
       }));
  same(three_steps([](Problem& p) {
         return std::make_shared<AdamW>(std::vector<Tensor>{p.W, p.b},
                                        AdamWOptions(1e-2).weight_decay(0.05).betas({0.8, 0.99}));
       }),
       three_steps([](Problem& p) {
         return std::make_shared<AdamW>(
             std::vector<ParamGroup>{ParamGroup({p.W, p.b})},
             AdamWOptions().lr(1e-2).weight_decay(0.05).betas(0.8, 0.99));
       }));

  // The lines a libtorch user types, on a model.
  auto model = std::make_shared<nn::Linear>(4, 5);
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::AdamW adamw(model->parameters(), optim::AdamWOptions(1e-3).weight_decay(0.01));
  optim::SGD plain(model->parameters(), /*lr=*/0.01);
  REQUIRE(sgd.param_groups().size() == 1);
  CHECK(sgd.param_groups()[0].params().size() == 2);
  CHECK(sgd.param_groups()[0].options().get_lr() == 0.1);
  CHECK(sgd.param_groups()[0].options().get_momentum() == 0.9);
  CHECK(adamw.param_groups()[0].options().get_lr() == 1e-3);
  CHECK(adamw.param_groups()[0].options().get_weight_decay() == 0.01);
  CHECK(static_cast<const AdamWOptions&>(adamw.defaults()).betas() == std::make_tuple(0.9, 0.999));
  CHECK(plain.param_groups()[0].options().get_lr() == 0.01);
  CHECK(static_cast<const SGDOptions&>(plain.defaults()).momentum() == 0.0);

  // A named options object is changed in place (as TORCH_ARG); a temporary's chain is a value,
  // so a reference to it does not dangle.
  SGDOptions named(0.5);
  named.nesterov(true).momentum(0.8);
  CHECK(named.nesterov_);
  CHECK(named.momentum() == 0.8);
  const SGDOptions& chained = SGDOptions(0.2).weight_decay(1e-4);
  CHECK(chained.lr() == 0.2);
  CHECK(chained.weight_decay() == 1e-4);
  OneCycleOptions cycle = OneCycleOptions().momentum_range(0.8, 0.9).pct_start(0.4);
  CHECK(cycle.base_momentum() == 0.8);
  CHECK(cycle.max_momentum() == 0.9);
  CHECK(cycle.pct_start() == 0.4);
}

TEST_CASE("optimizer updates over dense parameters equal the strided loop's, bit for bit",
          "[optim]") {
  // The CPU steps dense parameters in loops of their own (vectorized); a transposed leaf, whose
  // gradient is laid out otherwise, takes the strided loop. Same values, same bits, for every
  // branch of the update: weight decay, momentum (its first step and the later ones), dampening,
  // Nesterov, Adam's coupled and AdamW's decoupled decay, AMSGrad, RMSprop centered and with
  // momentum, Adagrad's rate decay. 2,310 elements: whole vectors and a remainder, over 4 steps.
  using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;
  const std::vector<std::pair<const char*, Make>> cases = {
      {"sgd", [](std::vector<Tensor> p) { return std::make_unique<SGD>(p, SGDOptions(0.1)); }},
      {"sgd nesterov wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(
             p, SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-2));
       }},
      {"sgd dampening",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(p, SGDOptions(0.05).momentum(0.8).dampening(0.3));
       }},
      {"adam wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<Adam>(p, AdamOptions(1e-2).weight_decay(1e-2));
       }},
      {"adamw amsgrad",
       [](std::vector<Tensor> p) {
         return std::make_unique<AdamW>(p, AdamWOptions(1e-2).amsgrad(true));
       }},
      {"rmsprop",
       [](std::vector<Tensor> p) { return std::make_unique<RMSprop>(p, RMSpropOptions(1e-2)); }},
      {"rmsprop centered momentum wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<RMSprop>(
             p, RMSpropOptions(1e-2).centered(true).momentum(0.9).weight_decay(1e-2));
       }},
      {"adagrad lr_decay wd", [](std::vector<Tensor> p) {
         return std::make_unique<Adagrad>(
             p,
             AdagradOptions(0.1).lr_decay(1e-2).weight_decay(1e-2).initial_accumulator_value(0.1));
       }}};
  auto randn_seeded = [](uint64_t seed) {
    Generator g(seed);
    return randn({33, 70}, {}, &g);
  };
  for (const auto& [name, make] : cases) {
    SECTION(name) {
      auto train = [&randn_seeded, make = make](bool transposed) {
        Tensor init = randn_seeded(7);
        // The transposed leaf holds the same values in the other order of memory.
        Tensor p = transposed ? init.t().contiguous().t() : init.clone();
        REQUIRE(p.is_contiguous() == !transposed);
        p.set_requires_grad(true);
        auto opt = make({p});
        for (int k = 0; k < 4; ++k) {
          opt->zero_grad();
          sum(mul(p, add(mul(p.detach(), 0.5), randn_seeded(20 + k))))
              .backward();
          opt->step();
        }
        return p.detach().contiguous();
      };
      Tensor dense = train(false), strided = train(true);
      REQUIRE(equal(dense, strided));
      REQUIRE(!equal(dense, randn_seeded(7)));  // it stepped
    }
  }
}

namespace {

// Every optimizer, each with state to keep (SGD with momentum), by name.
using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;
std::vector<std::pair<const char*, MakeOptimizer>> every_optimizer() {
  return {
      {"SGD",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(p, SGDOptions(0.1).momentum(0.9));
       }},
      {"Adam", [](std::vector<Tensor> p) { return std::make_unique<Adam>(p, AdamOptions(0.1)); }},
      {"AdamW",
       [](std::vector<Tensor> p) { return std::make_unique<AdamW>(p, AdamWOptions(0.1)); }},
      {"RMSprop",
       [](std::vector<Tensor> p) { return std::make_unique<RMSprop>(p, RMSpropOptions(0.1)); }},
      {"Adagrad",
       [](std::vector<Tensor> p) { return std::make_unique<Adagrad>(p, AdagradOptions(0.1)); }}};
}

}  // namespace

TEST_CASE("a gradient that does not match its parameter is refused before anything steps",
          "[optim][errors]") {
  // The second parameter's gradient is f64 on an f32 parameter: every optimizer refuses the
  // step with no parameter moved and no state made, so the step can be retried once fixed.
  // set_grad refuses such a gradient (as torch's grad assignment), so the test plants it
  // through the impl, as a kernel writing the wrong tensor would.
  for (const auto& [name, make] : every_optimizer()) {
    SECTION(name) {
      Tensor a = full({3}, 1.0).set_requires_grad(true), b = full({2}, 2.0).set_requires_grad(true);
      auto opt = make({a, b});
      a.set_grad(full({3}, 0.5));
      CHECK_THAT(error_of([&] { b.set_grad(full({2}, 0.5, DType::f64)); }),
                 Catch::Contains("set_grad: gradient of f64 on cpu for a tensor of f32 on cpu"));
      b.impl()->grad = full({2}, 0.5, DType::f64).impl_ptr();
      CHECK_THAT(
          error_of([&] { opt->step(); }),
          Catch::Contains("gradient (f64 on cpu) does not match its parameter (f32 on cpu)"));
      CHECK(equal(a, full({3}, 1.0)));
      CHECK(equal(b, full({2}, 2.0)));
      auto keys = [](const nn::StateDict& d) {
        std::vector<std::string> k;
        for (const auto& entry : d) k.push_back(entry.first);
        return k;
      };
      CHECK(keys(opt->state_dict()) == keys(make({a, b})->state_dict()));  // no state made
      // Fixed, the same optimizer steps both.
      b.set_grad(full({2}, 0.5));
      opt->step();
      CHECK(!equal(a, full({3}, 1.0)));
      CHECK(!equal(b, full({2}, 2.0)));
    }
  }
}

TEST_CASE("optimizer state made before its model was converted is refused, and loading converts it",
          "[optim][errors]") {
  // The fused updates read the state as the parameter's dtype: an f32 momentum under an f64
  // parameter was read (and written) past its end. torch.optim's load_state_dict casts floating
  // state to its parameter's dtype; so does this one.
  for (const auto& [name, make] : every_optimizer()) {
    SECTION(name) {
      auto lin = std::make_shared<nn::Linear>(3, 2);
      const Tensor x = ones({4, 3});
      auto step = [&](Optimizer& opt, DType dt) {
        opt.zero_grad();
        sum(lin->forward(x.to(dt))).backward();
        opt.step();
      };
      auto opt = make(lin->parameters());
      step(*opt, DType::f32);
      nn::StateDict saved;
      for (const auto& [k, v] : opt->state_dict()) saved[k] = v.clone();
      lin->to(DType::f64);
      const Tensor before = lin->weight.detach().clone();
      CHECK_THAT(error_of([&] { step(*opt, DType::f64); }),
                 Catch::Contains("of parameter 0 is f32 (2, 3) on cpu, its parameter f64 (2, 3) on "
                                 "cpu") &&
                     Catch::Contains("load_state_dict converts it"));
      CHECK(equal(lin->weight, before));
      // A new optimizer of the converted model takes the state as f64, the same values.
      auto fresh = make(lin->parameters());
      fresh->load_state_dict(saved);
      int converted = 0;
      for (const auto& [k, v] : fresh->state_dict()) {
        if (k.rfind("state.", 0) != 0 || k.size() < 5 || k.compare(k.size() - 5, 5, ".step") == 0)
          continue;
        CHECK(v.dtype() == DType::f64);
        CHECK(equal(v, saved.at(k).to(DType::f64)));
        ++converted;
      }
      CHECK(converted >= 2);  // the weight's and the bias's
      step(*fresh, DType::f64);
      CHECK(!equal(lin->weight, before));
    }
  }
}

TEST_CASE("gradient clipping refuses bad input before it changes any gradient", "[optim][errors]") {
  Tensor a = zeros({2}).set_requires_grad(), b = zeros({2}).set_requires_grad();
  a.set_grad(full({2}, 30.0));
  b.impl()->grad = full({2}, 40, DType::i64).impl_ptr();  // planted: set_grad refuses it
  CHECK_THAT(error_of([&] {
               clip_grad_norm({a, b}, 1.0);
             }),
             Catch::Contains("clip_grad_norm: gradient 1 is not floating point (i64)"));
  CHECK(equal(a.grad(), full({2}, 30.0)));
  CHECK_THAT(error_of([&] {
               clip_grad_value({a, Tensor()}, 1.0);
             }),
             Catch::Contains("clip_grad_value: parameter 1 is undefined"));
  CHECK(equal(a.grad(), full({2}, 30.0)));
  // Fixed: a's gradient (norm 50 with b's) is scaled to norm 1 together with b's.
  b.set_grad(full({2}, 40.0));
  CHECK(clip_grad_norm({a, b}, 1.0) == Approx(std::sqrt(2.0 * 2500)));
  CHECK(a.grad().to_vector<float>()[0] == Approx(30.0 / std::sqrt(5000.0)).epsilon(1e-5));
}

TEST_CASE("SGD and Adam step f16 and bf16 parameters on the CPU, in f32, rounded once", "[optim]") {
  // torch's CPU optimizers step them too. Each result is the f32 update of the widened values,
  // rounded once into the parameter's dtype: the f32 optimizer's step, rounded.
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO("dtype " << dt);
    Generator g(5);
    const Tensor start = randn({7}, DType::f32, &g).to(dt),
                 grad = randn({7}, DType::f32, &g).to(dt);
    auto one_step = [&](auto make) {
      Tensor narrow = start.clone().set_requires_grad(),
             wide = start.to(DType::f32).set_requires_grad();
      narrow.set_grad(grad.clone());
      wide.set_grad(grad.to(DType::f32));
      auto a = make(narrow);
      auto b = make(wide);
      a->step();
      b->step();
      CHECK(narrow.dtype() == dt);
      CHECK(equal(narrow.detach(), wide.detach().to(dt)));
    };
    one_step([](Tensor t) {
      return std::make_unique<SGD>(std::vector<Tensor>{t},
                                   SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
    });
    one_step([](Tensor t) {
      return std::make_unique<Adam>(std::vector<Tensor>{t}, AdamOptions(0.01).weight_decay(0.01));
    });
    one_step([](Tensor t) {
      return std::make_unique<AdamW>(std::vector<Tensor>{t}, AdamWOptions(0.01).amsgrad(true));
    });
  }
}

TEST_CASE("clip_grad_norm takes any order, scales by a NaN norm, and can refuse one", "[optim]") {
  // torch 1.13's clip_grad_norm_(p, 2.0, norm_type) for these gradients.
  Tensor a = zeros({3}).requires_grad_(), b = zeros({2}).requires_grad_();
  auto plant = [&] {
    a.set_grad(from_vector<float>({1, -2, 3}));
    b.set_grad(from_vector<float>({-4, 0.5f}));
  };
  plant();
  CHECK(clip_grad_norm({a, b}, 2.0, 1.0) == Approx(10.5));
  require_close(a.grad(), from_vector<float>({0.19047618f, -0.38095236f, 0.57142854f}), 1e-6, 0);
  require_close(b.grad(), from_vector<float>({-0.76190472f, 0.09523809f}), 1e-6, 0);
  plant();
  CHECK(clip_grad_norm({a, b}, 2.0, 3.0) == Approx(4.6435223).epsilon(1e-6));
  require_close(a.grad(), from_vector<float>({0.43070745f, -0.86141491f, 1.29212236f}), 1e-5, 0);
  require_close(b.grad(), from_vector<float>({-1.72282982f, 0.21535373f}), 1e-5, 0);
  // A NaN gradient: the norm is NaN and every gradient becomes NaN, as torch's.
  a.set_grad(from_vector<float>({1, NAN, 3}));
  b.set_grad(from_vector<float>({-4, 0.5f}));
  CHECK(std::isnan(clip_grad_norm({a, b}, 1.0)));
  CHECK(b.grad().isnan().all().item<bool>());
  // The infinity norm: the largest |g| (4), and NaN where a NaN comes before larger values.
  plant();
  CHECK(clip_grad_norm({a, b}, 8.0, INFINITY) == 4.0);
  a.set_grad(from_vector<float>({NAN, 1, 3}));
  b.set_grad(from_vector<float>({-4, 0.5f}));
  CHECK(std::isnan(clip_grad_norm({a, b}, 1.0, INFINITY)));
  // A channels-last gradient (dense in another order) counts each element once: 0, 1, ..., 23,
  // the norm sqrt(4324).
  std::vector<float> values(24);
  for (int k = 0; k < 24; ++k) values[k] = static_cast<float>(k);
  Tensor c = zeros({2, 3, 2, 2}).requires_grad_();
  c.set_grad(
      from_vector<float>(values).reshape({2, 3, 2, 2}).contiguous(MemoryFormat::ChannelsLast));
  CHECK(clip_grad_norm({c}, 1e9) == Approx(std::sqrt(4324.0)));
  // error_if_nonfinite refuses it and scales nothing.
  a.set_grad(from_vector<float>({1, INFINITY, 3}));
  b.set_grad(from_vector<float>({-4, 0.5f}));
  CHECK_THAT(error_of([&] {
               nn::utils::clip_grad_norm_({a, b}, 1.0, 2.0, true);
             }),
             Catch::Contains("cannot be clipped"));
  CHECK(b.grad().to_vector<float>() == std::vector<float>{-4, 0.5f});
  CHECK_THAT(error_of([&] {
               clip_grad_norm({a, b}, 1.0, 0.0);
             }),
             Catch::Contains("norm_type must be positive"));
}

TEST_CASE("schedules start from the rate when the first was built, as torch's", "[optim]") {
  // torch 1.13: a rate set by hand before StepLR is its base; MultiStepLR's milestones in any
  // order.
  Tensor p = zeros({2}).requires_grad_();
  SGD opt({p}, SGDOptions(0.1));
  opt.param_groups()[0].options().set_lr(0.2);
  StepLR step(opt, 3, 0.5);
  std::vector<double> lrs;
  for (int i = 0; i < 7; ++i) {
    lrs.push_back(opt.param_groups()[0].options().get_lr());
    step.step();
  }
  require_close(from_vector<double>(lrs), from_vector<double>({0.2, 0.2, 0.2, 0.1, 0.1, 0.1, 0.05}),
                1e-12, 0);
  // A second schedule starts from the rate now (torch 1.13: 0.05), its base still the first's,
  // as torch's setdefault("initial_lr").
  StepLR again(opt, 100, 0.5);
  CHECK(opt.param_groups()[0].options().get_lr() == 0.05);
  CHECK(opt.param_groups()[0].initial_lr() == 0.2);

  SGD fresh({p}, SGDOptions(0.1));
  MultiStepLR multi(fresh, {5, 2}, 0.5);
  lrs.clear();
  for (int i = 0; i < 7; ++i) {
    lrs.push_back(fresh.param_groups()[0].options().get_lr());
    multi.step();
  }
  require_close(from_vector<double>(lrs),
                from_vector<double>({0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025}), 1e-12, 0);
}
