#include "tandem/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "../kernels/kernels.hpp"
#include "../kernels/optim_update.hpp"
#include "tandem/autograd/grad_mode.hpp"
#include "tandem/core/error.hpp"
#include "tandem/cuda/runtime.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/elementwise.hpp"
#include "tandem/ops/reduction.hpp"
#include "tandem/ops/shape_ops.hpp"

namespace tandem::optim {
namespace {
// The state_dict's mark of the optimizer that wrote it: "optimizer.SGD" (a 0-dim 1).
const std::string kWriterKey = "optimizer.";
}  // namespace

std::vector<ParamGroup> weight_decay_groups(const nn::Module& module, double weight_decay) {
  std::vector<Tensor> decay, no_decay;
  for (const auto& p : module.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  return {ParamGroup(decay, std::nullopt, weight_decay), ParamGroup(no_decay, std::nullopt, 0.0)};
}

OptimizerParamGroup::OptimizerParamGroup(const OptimizerParamGroup& other)
    : params_(other.params_),
      options_(other.options_ ? other.options_->clone() : nullptr),
      initial_lr_(other.initial_lr_) {}

OptimizerParamGroup& OptimizerParamGroup::operator=(const OptimizerParamGroup& other) {
  if (this != &other) *this = OptimizerParamGroup(other);
  return *this;
}

OptimizerOptions& OptimizerParamGroup::options() {
  TANDEM_CHECK(options_ != nullptr,
               "OptimizerParamGroup: this group has no options (it takes "
               "the optimizer's defaults once an optimizer holds it)");
  return *options_;
}

const OptimizerOptions& OptimizerParamGroup::options() const {
  return const_cast<OptimizerParamGroup&>(*this).options();
}

Optimizer::Optimizer(const char* name, std::unique_ptr<OptimizerOptions> defaults)
    : name_(name), defaults_(std::move(defaults)) {}

void Optimizer::add_param_groups(std::vector<OptimizerParamGroup> groups) {
  TANDEM_CHECK(!groups.empty(), name_, ": no parameter groups");
  for (const auto& g : groups) add_param_group(g);
  TANDEM_CHECK(!state_.empty(), name_, ": got an empty parameter list");
}

void Optimizer::add_param_groups(std::vector<ParamGroup> groups) {
  std::vector<OptimizerParamGroup> full;
  for (auto& g : groups) {
    auto options = defaults_->clone();
    if (g.lr) options->set_lr(*g.lr);
    if (g.weight_decay) options->set_weight_decay(*g.weight_decay);
    full.emplace_back(std::move(g.params), std::move(options));
  }
  add_param_groups(std::move(full));
}

void Optimizer::add_param_group(const OptimizerParamGroup& group) {
  const OptimizerOptions& options = group.has_options() ? group.options() : *defaults_;
  check_options(options);
  const double lr = options.get_lr(), wd = options.get_weight_decay();
  TANDEM_CHECK(lr >= 0 && std::isfinite(lr), name_, ": learning rate must be finite and >= 0, got ",
               lr);
  TANDEM_CHECK(wd >= 0 && std::isfinite(wd), name_, ": weight decay must be finite and >= 0, got ",
               wd);
  const auto& params = group.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    // A frozen parameter (requires_grad false, as model->parameters() hands over) is taken
    // and skipped while it has no gradient, as torch's optimizers do.
    TANDEM_CHECK(p.defined() && p.is_floating_point(), name_,
                 ": every parameter must be a floating tensor");
    // A computed tensor never receives a .grad (backward fills leaves only), as torch's
    // "can't optimize a non-leaf Tensor".
    TANDEM_CHECK(p.is_leaf(), name_,
                 ": can't optimize a non-leaf tensor (one computed from "
                 "others); pass the leaf parameters");
    auto same = [&](const Tensor& q) { return q.is_same(p); };
    TANDEM_CHECK(
        std::none_of(params.begin(), params.begin() + static_cast<std::ptrdiff_t>(i), same), name_,
        ": parameter ", i,
        " of a group appears in it twice (it would be stepped twice); pass "
        "each once (Module::parameters() lists a tied weight once)");
    bool seen = false;
    for (const auto& g : groups_)
      seen = seen || std::any_of(g.params().begin(), g.params().end(), same);
    TANDEM_CHECK(!seen, name_, ": some parameters appear in more than one parameter group");
  }
  OptimizerParamGroup adopted(params, options.clone());
  groups_.push_back(std::move(adopted));
  state_.resize(state_.size() + params.size());
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& g : groups_)
    for (auto& p : g.params()) {
      if (set_to_none) {
        p.set_grad(Tensor());
      } else if (p.grad().defined()) {
        p.grad().zero_();
      }
    }
}

nn::StateDict Optimizer::state_dict() const {
  nn::StateDict out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::string prefix = "group." + std::to_string(g) + ".";
    // Hyper-parameters are host values, kept on the CPU whatever the current device.
    const TensorOptions f64 = TensorOptions(DType::f64).device(kCPU);
    const OptimizerOptions& o = groups_[g].options();
    out[prefix + "lr"] = scalar_tensor(o.get_lr(), f64);
    out[prefix + "weight_decay"] = scalar_tensor(o.get_weight_decay(), f64);
    out[prefix + "momentum"] = scalar_tensor(o.get_momentum(), f64);
    out[prefix + "initial_lr"] = scalar_tensor(groups_[g].initial_lr(), f64);
    out[prefix + "size"] = scalar_tensor(static_cast<double>(groups_[g].params().size()),
                                         TensorOptions(DType::i64).device(kCPU));
  }
  for (size_t k = 0; k < state_.size(); ++k)
    for (const auto& [name, t] : state_[k]) out["state." + std::to_string(k) + "." + name] = t;
  write_extra_state(out);
  // Which optimizer wrote it: another's hyper-parameters would be read as this one's (SGD's
  // momentum as Adam's beta1).
  out[kWriterKey + name_] = scalar_tensor(1, TensorOptions(DType::i64).device(kCPU));
  return out;
}

void Optimizer::write_extra_state(nn::StateDict&) const {}

std::function<void()> Optimizer::read_extra_state(const nn::StateDict& state) {
  for (const auto& entry : state)
    TANDEM_CHECK(entry.first.rfind("extra.", 0) != 0, name_, ".load_state_dict: unexpected key '",
                 entry.first, "'");
  return [] {};
}

void Optimizer::load_state_dict(const nn::StateDict& state) {
  // Validate everything first: a bad dict leaves the optimizer untouched.
  std::vector<const Tensor*> params;
  for (const auto& g : groups_)
    for (const auto& p : g.params()) params.push_back(&p);
  auto scalar = [&](const std::string& key) {
    auto it = state.find(key);
    TANDEM_CHECK(it != state.end() && it->second.numel() == 1, name_,
                 ".load_state_dict: missing or non-scalar entry '", key, "'");
    return it->second.item<double>();
  };
  for (const auto& entry : state)  // a dict saved before the mark existed has none
    TANDEM_CHECK(entry.first.rfind(kWriterKey, 0) != 0 || entry.first == kWriterKey + name_, name_,
                 ".load_state_dict: the state is a ", entry.first.substr(kWriterKey.size()),
                 " optimizer's, not a ", name_, "'s");
  std::vector<std::map<std::string, Tensor>> new_state(state_.size());
  size_t group_entries = 0;
  for (const auto& entry : state)
    if (entry.first.rfind("group.", 0) == 0) ++group_entries;
  TANDEM_CHECK(group_entries == 5 * groups_.size(), name_, ".load_state_dict: the state has ",
               group_entries / 5, " parameter groups, the optimizer ", groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::string prefix = "group." + std::to_string(g) + ".";
    TANDEM_CHECK(scalar(prefix + "size") == static_cast<double>(groups_[g].params().size()), name_,
                 ".load_state_dict: group ", g, " holds ", scalar(prefix + "size"),
                 " parameters in the state but ", groups_[g].params().size(), " here");
    for (const char* key : {"lr", "weight_decay", "momentum", "initial_lr"}) scalar(prefix + key);
  }
  for (const auto& [key, t] : state) {
    if (key.rfind("group.", 0) == 0 || key.rfind("extra.", 0) == 0 || key.rfind(kWriterKey, 0) == 0)
      continue;
    size_t dot = key.find('.', 6);
    TANDEM_CHECK(key.rfind("state.", 0) == 0 && dot != std::string::npos, name_,
                 ".load_state_dict: unexpected key '", key, "'");
    size_t k = 0;
    try {
      k = std::stoul(key.substr(6, dot - 6));
    } catch (const std::exception&) {
      TANDEM_THROW(ValueError, name_, ".load_state_dict: unexpected key '", key, "'");
    }
    TANDEM_CHECK(k < params.size(), name_, ".load_state_dict: state for parameter ", k,
                 " but the optimizer has ", params.size());
    std::string field = key.substr(dot + 1);
    bool per_element = field != "step";
    TANDEM_CHECK(!per_element || t.shape() == params[k]->shape(), name_, ".load_state_dict: '",
                 key, "' has shape ", shape_str(t.shape()), " but parameter ", k, " has shape ",
                 shape_str(params[k]->shape()));
    // A copy of its own, laid out as the parameter (a channels-last model's momentum stays
    // channels-last, whatever layout the file had).
    const Tensor& p = *params[k];
    // Floating state takes the parameter's dtype too, as torch.optim's load_state_dict casts it.
    const DType dtype = per_element && is_floating(t.dtype()) ? p.dtype() : t.dtype();
    Tensor own = make_tensor(t.shape(), dtype, p.device(),
                             per_element ? p.suggest_memory_format() : MemoryFormat::Contiguous);
    own.copy_(t);  // from any device and dtype
    new_state[k][field] = own;
  }
  const std::function<void()> adopt_extra = read_extra_state(state);
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::string prefix = "group." + std::to_string(g) + ".";
    OptimizerOptions& o = groups_[g].options();
    o.set_lr(scalar(prefix + "lr"));
    o.set_weight_decay(scalar(prefix + "weight_decay"));
    if (o.has_momentum()) o.set_momentum(scalar(prefix + "momentum"));  // Adagrad has none
    groups_[g].set_initial_lr(scalar(prefix + "initial_lr"));
  }
  state_ = std::move(new_state);
  adopt_extra();
}

// Every gradient and every state tensor checked before a step changes anything: a refused one
// leaves no parameter stepped and no state made or advanced. So are the GPU's deferred checks of
// the inputs that made them (a target out of range). The fused updates read the state as the
// parameter's dtype, on its device: a model converted or moved after its optimizer made state
// would have them read past a buffer's end, or host memory on the GPU.
void Optimizer::check_step() {
  cuda::check_deferred();
  size_t k = 0;
  for (const auto& g : groups_)
    for (const auto& p : g.params()) {
      const Tensor grad = p.grad();
      TANDEM_CHECK(!grad.defined() || (grad.device() == p.device() && grad.dtype() == p.dtype()),
                   name_, ": gradient (", grad.dtype(), " on ", grad.device(),
                   ") does not match its parameter (", p.dtype(), " on ", p.device(), ")");
      for (const auto& [field, t] : state_[k]) {
        if (field == "step") continue;  // a host count
        TANDEM_CHECK(t.dtype() == p.dtype() && t.device() == p.device() && t.shape() == p.shape(),
                     name_, ": state '", field, "' of parameter ", k, " is ", t.dtype(), " ",
                     shape_str(t.shape()), " on ", t.device(), ", its parameter ", p.dtype(), " ",
                     shape_str(p.shape()), " on ", p.device(),
                     ". The state does not follow a model converted or moved after it was made: "
                     "convert the model before constructing its optimizer, or load the state "
                     "into an optimizer of the converted model (load_state_dict converts it)");
      }
      ++k;
    }
}

namespace {

// The options of a group as the optimizer's type, or a clear refusal.
template <typename Options>
const Options& options_as(const char* name, const char* type, const OptimizerOptions& o) {
  const auto* typed = dynamic_cast<const Options*>(&o);
  TANDEM_CHECK(typed != nullptr, name, ": a parameter group's options must be ", type);
  return *typed;
}

// A group's parameters of one device, stepped by one call of `steps` (a kernels::*_steps stub:
// on a GPU the dense ones go in few launches). add() hands the batch over when the device
// changes, flush() at the group's end. Every parameter stepped has its version bumped: graphs
// that saved it refuse to backward (node.hpp).
template <typename Entry, typename Steps, typename Args>
class DeviceBatch {
 public:
  DeviceBatch(Steps& steps, const Args& args) : steps_(steps), args_(args) {}
  void add(Entry e) {
    if (!entries_.empty() && entries_.front().param.device() != e.param.device()) flush();
    entries_.push_back(std::move(e));
  }
  void flush() {
    if (entries_.empty()) return;
    steps_(entries_.front().param, entries_, args_);
    for (auto& e : entries_) e.param.storage().bump_version();
    entries_.clear();
  }

 private:
  Steps& steps_;
  const Args args_;
  std::vector<Entry> entries_;
};
template <typename Entry, typename Steps, typename Args>
DeviceBatch<Entry, Steps, Args> device_batch(Steps& steps, const Args& args) {
  return DeviceBatch<Entry, Steps, Args>(steps, args);
}

}  // namespace

SGD::SGD(std::vector<OptimizerParamGroup> groups, SGDOptions defaults)
    : Optimizer("SGD", defaults.clone()) {
  add_param_groups(std::move(groups));
}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions defaults) : Optimizer("SGD", defaults.clone()) {
  add_param_groups(std::move(groups));
}

SGD::SGD(std::vector<Tensor> params, SGDOptions defaults)
    : SGD(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

void SGD::check_options(const OptimizerOptions& options) const {
  const auto& o = options_as<SGDOptions>(name_, "SGDOptions", options);
  TANDEM_CHECK(o.momentum_ >= 0 && o.dampening_ >= 0, "SGD: momentum and dampening must be >= 0, got ",
               o.momentum_, " and ", o.dampening_);
  TANDEM_CHECK(!o.nesterov_ || (o.momentum_ > 0 && o.dampening_ == 0),
               "SGD: Nesterov momentum requires a momentum > 0 and zero dampening");
}

void SGD::step() {
  NoGradGuard no_grad;
  size_t k = 0;
  check_step();
  for (auto& g : groups_) {
    const auto& o = static_cast<const SGDOptions&>(g.options());  // checked when adopted
    auto batch = device_batch<kernels::SgdEntry>(
        kernels::sgd_steps,
        kernels::SgdArgs{o.lr_, o.weight_decay_, o.momentum_, o.dampening_, o.nesterov_, false});
    for (auto& p : g.params()) {
      auto& st = state(k++);
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      Tensor buffer;
      bool first = false;
      if (o.momentum_ != 0) {
        auto it = st.find("momentum_buffer");
        first = it == st.end();
        if (first) it = st.emplace("momentum_buffer", empty_like(p)).first;
        buffer = it->second;
      }
      batch.add({p, buffer, grad, first});
    }
    batch.flush();
  }
}

namespace {

// The state tensor `name`, made as `init` on first use.
template <typename Init>
Tensor& state_entry(std::map<std::string, Tensor>& st, const char* name, Init init) {
  auto it = st.find(name);
  if (it == st.end()) it = st.emplace(name, init()).first;
  return it->second;
}

// The step counter (a host scalar, as Adam's), advanced; returns the new count.
int64_t advance_step(std::map<std::string, Tensor>& st) {
  Tensor& count =
      state_entry(st, "step", [] { return zeros({}, TensorOptions(DType::i64).device(kCPU)); });
  const int64_t step = count.item<int64_t>() + 1;
  count.fill_(static_cast<double>(step));
  return step;
}

// What Adam and AdamW share: the moments, their bias correction, AMSGrad's running maximum,
// one fused update per parameter. They differ only in how weight decay enters (`decoupled`).
template <typename Options>
void check_adam(const char* name, const char* type, const OptimizerOptions& options) {
  const auto& o = options_as<Options>(name, type, options);
  TANDEM_CHECK(o.beta1_ >= 0 && o.beta1_ < 1 && o.beta2_ >= 0 && o.beta2_ < 1, name,
               ": betas must be in [0, 1), got (", o.beta1_, ", ", o.beta2_, ")");
  TANDEM_CHECK(o.eps_ >= 0, name, ": eps must be >= 0, got ", o.eps_);
}

template <typename Options, typename State>
void adam_update(std::vector<OptimizerParamGroup>& groups, State&& state, bool decoupled) {
  NoGradGuard no_grad;
  size_t k = 0;
  for (auto& g : groups) {
    const auto& o = static_cast<const Options&>(g.options());  // checked when adopted
    // The bias corrections (1 here) are each parameter's: its AdamEntry's.
    auto batch = device_batch<kernels::AdamEntry>(
        kernels::adam_steps,
        kernels::AdamArgs{o.lr_, o.weight_decay_, o.beta1_, o.beta2_, o.eps_, 1, 1, decoupled});
    for (auto& p : g.params()) {
      std::map<std::string, Tensor>& st = state(k++);
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      auto zeros_like_p = [&] { return zeros_like(p); };
      Tensor& exp_avg = state_entry(st, "exp_avg", zeros_like_p);
      Tensor& exp_avg_sq = state_entry(st, "exp_avg_sq", zeros_like_p);
      // Also where a state saved without AMSGrad was loaded: the maximum starts at 0.
      const Tensor max_exp_avg_sq =
          o.amsgrad_ ? state_entry(st, "max_exp_avg_sq", zeros_like_p) : Tensor();
      const int64_t step = advance_step(st);
      batch.add({p, exp_avg, exp_avg_sq, max_exp_avg_sq, grad, 1.0 - std::pow(o.beta1_, step),
                 1.0 - std::pow(o.beta2_, step)});
    }
    batch.flush();
  }
}

}  // namespace

Adam::Adam(std::vector<OptimizerParamGroup> groups, AdamOptions defaults)
    : Optimizer("Adam", defaults.clone()) {
  add_param_groups(std::move(groups));
}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions defaults)
    : Optimizer("Adam", defaults.clone()) {
  add_param_groups(std::move(groups));
}

Adam::Adam(std::vector<Tensor> params, AdamOptions defaults)
    : Adam(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

void Adam::check_options(const OptimizerOptions& options) const {
  check_adam<AdamOptions>(name_, "AdamOptions", options);
}

void Adam::step() {
  check_step();
  adam_update<AdamOptions>(
      groups_, [this](size_t k) -> auto& { return state(k); },
      /*decoupled=*/false);
}

AdamW::AdamW(std::vector<OptimizerParamGroup> groups, AdamWOptions defaults)
    : Optimizer("AdamW", defaults.clone()) {
  add_param_groups(std::move(groups));
}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults)
    : Optimizer("AdamW", defaults.clone()) {
  add_param_groups(std::move(groups));
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions defaults)
    : AdamW(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

void AdamW::check_options(const OptimizerOptions& options) const {
  check_adam<AdamWOptions>(name_, "AdamWOptions", options);
}

void AdamW::step() {
  check_step();
  adam_update<AdamWOptions>(
      groups_, [this](size_t k) -> auto& { return state(k); },
      /*decoupled=*/true);
}

RMSprop::RMSprop(std::vector<OptimizerParamGroup> groups, RMSpropOptions defaults)
    : Optimizer("RMSprop", defaults.clone()) {
  add_param_groups(std::move(groups));
}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions defaults)
    : Optimizer("RMSprop", defaults.clone()) {
  add_param_groups(std::move(groups));
}

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions defaults)
    : RMSprop(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

void RMSprop::check_options(const OptimizerOptions& options) const {
  const auto& o = options_as<RMSpropOptions>(name_, "RMSpropOptions", options);
  TANDEM_CHECK(o.alpha_ >= 0 && o.eps_ >= 0 && o.momentum_ >= 0, name_,
               ": alpha, eps and momentum must be >= 0, got ", o.alpha_, ", ", o.eps_, " and ",
               o.momentum_);
}

// RMSprop and Adagrad step f32/f64 parameters in one fused pass each (kernels/optim_update.hpp),
// a group's dense ones on a GPU in few launches; f16/bf16 ones through the same update made of
// tensor ops (in place, no history), as before the fused one existed.
void RMSprop::step() {
  NoGradGuard no_grad;
  check_step();
  size_t k = 0;
  for (auto& g : groups_) {
    const auto& o = static_cast<const RMSpropOptions&>(g.options());
    auto batch = device_batch<kernels::RmspropEntry>(
        kernels::rmsprop_steps,
        kernels::RmspropArgs{o.lr_, o.weight_decay_, o.alpha_, o.eps_, o.momentum_, o.centered_});
    for (auto& p : g.params()) {
      auto& st = state(k++);
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      advance_step(st);
      auto zeros_like_p = [&] { return zeros_like(p); };
      Tensor& square_avg = state_entry(st, "square_avg", zeros_like_p);
      const Tensor grad_avg = o.centered_ ? state_entry(st, "grad_avg", zeros_like_p) : Tensor();
      const Tensor buffer =
          o.momentum_ > 0 ? state_entry(st, "momentum_buffer", zeros_like_p) : Tensor();
      if (p.dtype() == DType::f32 || p.dtype() == DType::f64) {  // fused (batched on a GPU)
        batch.add({p, square_avg, grad_avg, buffer, grad});
        continue;
      }
      // f16/bf16 parameters: the same update from tensor ops.
      const Tensor d = o.weight_decay_ != 0 ? add(grad, p, o.weight_decay_) : grad;
      square_avg.mul_(o.alpha_).add_(mul(d, d), 1.0 - o.alpha_);
      Tensor avg;
      if (o.centered_) {
        Tensor ga = grad_avg;
        ga.mul_(o.alpha_).add_(d, 1.0 - o.alpha_);
        avg = sqrt(sub(square_avg, mul(ga, ga))).add_(o.eps_);
      } else {
        avg = sqrt(square_avg).add_(o.eps_);
      }
      if (o.momentum_ > 0) {
        Tensor b = buffer;
        b.mul_(o.momentum_).add_(div(d, avg));
        p.add_(b, -o.lr_);
      } else {
        p.add_(div(d, avg), -o.lr_);
      }
    }
    batch.flush();
  }
}

void AdagradOptions::set_momentum(double) {
  TANDEM_THROW(ValueError,
               "Adagrad has no momentum to set (a one-cycle schedule on it needs "
               "cycle_momentum(false))");
}

Adagrad::Adagrad(std::vector<OptimizerParamGroup> groups, AdagradOptions defaults)
    : Optimizer("Adagrad", defaults.clone()) {
  add_param_groups(std::move(groups));
}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions defaults)
    : Optimizer("Adagrad", defaults.clone()) {
  add_param_groups(std::move(groups));
}

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions defaults)
    : Adagrad(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

void Adagrad::check_options(const OptimizerOptions& options) const {
  const auto& o = options_as<AdagradOptions>(name_, "AdagradOptions", options);
  TANDEM_CHECK(o.lr_decay_ >= 0 && o.initial_accumulator_value_ >= 0 && o.eps_ >= 0, name_,
               ": lr_decay, initial_accumulator_value and eps must be >= 0, got ", o.lr_decay_,
               ", ", o.initial_accumulator_value_, " and ", o.eps_);
}

void Adagrad::step() {
  NoGradGuard no_grad;
  check_step();
  size_t k = 0;
  for (auto& g : groups_) {
    const auto& o = static_cast<const AdagradOptions&>(g.options());
    auto batch = device_batch<kernels::AdagradEntry>(kernels::adagrad_steps,
                                                     kernels::AdagradArgs{o.weight_decay_, o.eps_});
    for (auto& p : g.params()) {
      auto& st = state(k++);
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      const int64_t step = advance_step(st);
      Tensor& sum =
          state_entry(st, "sum", [&] { return zeros_like(p).fill_(o.initial_accumulator_value_); });
      const double clr = o.lr_ / (1.0 + static_cast<double>(step - 1) * o.lr_decay_);
      if (p.dtype() == DType::f32 || p.dtype() == DType::f64) {  // fused (batched on a GPU)
        batch.add({p, sum, grad, clr});
        continue;
      }
      // f16/bf16 parameters: the same update from tensor ops.
      const Tensor d = o.weight_decay_ != 0 ? add(grad, p, o.weight_decay_) : grad;
      sum.add_(mul(d, d));
      p.add_(div(d, sqrt(sum).add_(o.eps_)), -clr);
    }
    batch.flush();
  }
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type,
                      bool error_if_nonfinite) {
  TANDEM_CHECK(norm_type > 0, "clip_grad_norm: norm_type must be positive or infinity, got ",
               norm_type);
  TANDEM_CHECK(max_norm >= 0, "clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  const bool inf_norm = std::isinf(norm_type);
  // Each gradient's max |g| or sum of |g|^p in f64, the gradients of a device in one call (on a
  // GPU a few launches), read by the host once per device: one wait per call, not one per
  // gradient.
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    TANDEM_CHECK(params[i].defined(), "clip_grad_norm: parameter ", i, " is undefined");
    Tensor g = params[i].grad();
    if (!g.defined() || g.numel() == 0) continue;  // an empty gradient adds nothing to the norm
    // Refused here, before any gradient is scaled.
    TANDEM_CHECK(is_floating(g.dtype()), "clip_grad_norm: gradient ", i, " is not floating point (",
                 g.dtype(), ")");
    kernels::grad_norm_terms.at(g, "clip_grad_norm");
    grads.push_back(g);
  }
  const std::vector<std::vector<Tensor>> by_device = kernels::by_device(grads);
  const kernels::NormTerm term(norm_type);
  double total = 0;
  for (const auto& on_device : by_device) {
    Tensor terms = empty({static_cast<int64_t>(on_device.size())},
                         TensorOptions(DType::f64).device(on_device.front().device()));
    kernels::grad_norm_terms(terms, on_device, norm_type);
    for (const double t : terms.to_vector<double>()) total = term.join(total, t);
  }
  if (!inf_norm) total = norm_type == 2.0 ? std::sqrt(total) : std::pow(total, 1.0 / norm_type);
  TANDEM_CHECK(!error_if_nonfinite || std::isfinite(total),
               "clip_grad_norm: the total norm of "
               "order ",
               norm_type, " of the gradients is ", total,
               ", so it cannot be clipped; "
               "error_if_nonfinite=false scales the gradients by it anyway");
  const double coef = max_norm / (total + 1e-6);
  if (!(coef >= 1.0))  // NaN too: torch's multiplies every gradient by it
    for (const auto& on_device : by_device) {
      std::vector<Tensor> locations;  // an expanded gradient's locations once
      for (const Tensor& g : on_device) locations.push_back(unexpand(g));
      kernels::scale_grads(locations.front(), locations, coef, Tensor());
    }
  return total;
}

void clip_grad_value(const std::vector<Tensor>& params, double clip_value) {
  TANDEM_CHECK(clip_value >= 0 && !std::isnan(clip_value),
               "clip_grad_value: clip_value must be >= 0, got ", clip_value);
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i)  // all checked before any gradient is clamped
    TANDEM_CHECK(params[i].defined(), "clip_grad_value: parameter ", i, " is undefined");
  for (const Tensor& p : params)
    if (Tensor g = p.grad(); g.defined() && g.numel() > 0)
      unexpand(g).clamp_(-clip_value, clip_value);  // an expanded gradient's locations once
}

}  // namespace tandem::optim
