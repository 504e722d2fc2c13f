// Losses as modules, as libtorch's torch::nn::MSELoss and friends: options as their functional
// forms take them, forward(input, target) (and the call operator) forwarding to those.
#pragma once

#include "tandem/nn/functional.hpp"
#include "tandem/nn/module.hpp"

namespace tandem::nn {

using MSELossOptions = functional::MSELossFuncOptions;
using L1LossOptions = functional::L1LossFuncOptions;
using SmoothL1LossOptions = functional::SmoothL1LossFuncOptions;
using CrossEntropyLossOptions = functional::CrossEntropyFuncOptions;
using NLLLossOptions = functional::NLLLossFuncOptions;
using BCELossOptions = functional::BinaryCrossEntropyFuncOptions;
using BCEWithLogitsLossOptions = functional::BinaryCrossEntropyWithLogitsFuncOptions;
using HuberLossOptions = functional::HuberLossFuncOptions;
using KLDivLossOptions = functional::KLDivFuncOptions;
using MarginRankingLossOptions = functional::MarginRankingLossFuncOptions;
using TripletMarginLossOptions = functional::TripletMarginLossFuncOptions;
using CosineEmbeddingLossOptions = functional::CosineEmbeddingLossFuncOptions;
using HingeEmbeddingLossOptions = functional::HingeEmbeddingLossFuncOptions;
using SoftMarginLossOptions = functional::SoftMarginLossFuncOptions;
using MultiLabelSoftMarginLossOptions = functional::MultilabelSoftMarginLossFuncOptions;
using MultiLabelMarginLossOptions = functional::MultilabelMarginLossFuncOptions;
using CTCLossOptions = functional::CTCLossFuncOptions;
using MultiMarginLossOptions = functional::MultiMarginLossFuncOptions;
using GaussianNLLLossOptions = functional::GaussianNLLLossFuncOptions;
using PoissonNLLLossOptions = functional::PoissonNLLLossFuncOptions;

namespace detail {
/// A loss module: its options and the functional form it forwards to. It has no parameters
/// (class weights, pos_weight are options, as in libtorch, and are not trained).
template <typename Options, Tensor (*Loss)(const Tensor&, const Tensor&, const Options&)>
class LossModule : public Module {
 public:
  LossModule(const char* name, const Options& options) : Module(name), options(options) {}
  using Module::forward;  // one input: refused, as for every module of two
  Tensor forward(const Tensor& input, const Tensor& target) {
    return Loss(input, target, options);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  Options options;
};
/// The same for the losses of three tensors (two inputs and a target; anchor, positive and
/// negative; input, target and variance).
template <typename Options,
          Tensor (*Loss)(const Tensor&, const Tensor&, const Tensor&, const Options&)>
class Loss3Module : public Module {
 public:
  Loss3Module(const char* name, const Options& options) : Module(name), options(options) {}
  using Module::forward;  // one input: refused, as for every module of two
  Tensor forward(const Tensor& a, const Tensor& b, const Tensor& c) {
    return Loss(a, b, c, options);
  }
  Tensor operator()(const Tensor& a, const Tensor& b, const Tensor& c) { return forward(a, b, c); }
  Options options;
};
}  // namespace detail

#define TANDEM_LOSS_MODULE(Name, Options, fn)                                  \
  class Name : public detail::LossModule<Options, &functional::fn> {           \
   public:                                                                     \
    TANDEM_MODULE_CLONE(Name, options)                                         \
    explicit Name(const Options& options = {}) : LossModule(#Name, options) {} \
  }

TANDEM_LOSS_MODULE(MSELoss, MSELossOptions, mse_loss);
TANDEM_LOSS_MODULE(L1Loss, L1LossOptions, l1_loss);
TANDEM_LOSS_MODULE(SmoothL1Loss, SmoothL1LossOptions, smooth_l1_loss);
TANDEM_LOSS_MODULE(HuberLoss, HuberLossOptions, huber_loss);
TANDEM_LOSS_MODULE(KLDivLoss, KLDivLossOptions, kl_div);
TANDEM_LOSS_MODULE(CrossEntropyLoss, CrossEntropyLossOptions, cross_entropy);
TANDEM_LOSS_MODULE(NLLLoss, NLLLossOptions, nll_loss);
TANDEM_LOSS_MODULE(BCELoss, BCELossOptions, binary_cross_entropy);
TANDEM_LOSS_MODULE(BCEWithLogitsLoss, BCEWithLogitsLossOptions, binary_cross_entropy_with_logits);
TANDEM_LOSS_MODULE(HingeEmbeddingLoss, HingeEmbeddingLossOptions, hinge_embedding_loss);
TANDEM_LOSS_MODULE(SoftMarginLoss, SoftMarginLossOptions, soft_margin_loss);
TANDEM_LOSS_MODULE(MultiLabelSoftMarginLoss, MultiLabelSoftMarginLossOptions,
                   multilabel_soft_margin_loss);
TANDEM_LOSS_MODULE(MultiLabelMarginLoss, MultiLabelMarginLossOptions, multilabel_margin_loss);
TANDEM_LOSS_MODULE(PoissonNLLLoss, PoissonNLLLossOptions, poisson_nll_loss);
TANDEM_LOSS_MODULE(MultiMarginLoss, MultiMarginLossOptions, multi_margin_loss);

#undef TANDEM_LOSS_MODULE

#define TANDEM_LOSS3_MODULE(Name, Options, fn)                                  \
  class Name : public detail::Loss3Module<Options, &functional::fn> {           \
   public:                                                                      \
    TANDEM_MODULE_CLONE(Name, options)                                          \
    explicit Name(const Options& options = {}) : Loss3Module(#Name, options) {} \
  }

TANDEM_LOSS3_MODULE(MarginRankingLoss, MarginRankingLossOptions, margin_ranking_loss);
TANDEM_LOSS3_MODULE(TripletMarginLoss, TripletMarginLossOptions, triplet_margin_loss);
TANDEM_LOSS3_MODULE(CosineEmbeddingLoss, CosineEmbeddingLossOptions, cosine_embedding_loss);
TANDEM_LOSS3_MODULE(GaussianNLLLoss, GaussianNLLLossOptions, gaussian_nll_loss);

#undef TANDEM_LOSS3_MODULE

/// The connectionist temporal classification loss of (T, N, C) log-probabilities, the targets
/// and each sample's input and target lengths (ctc_loss).
class CTCLoss : public Module {
 public:
  TANDEM_MODULE_CLONE(CTCLoss, options)
  explicit CTCLoss(const CTCLossOptions& options = {}) : Module("CTCLoss"), options(options) {}
  using Module::forward;  // one input: refused, as for every module of two
  Tensor forward(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                 const Tensor& target_lengths) {
    return functional::ctc_loss(log_probs, targets, input_lengths, target_lengths, options);
  }
  Tensor operator()(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                    const Tensor& target_lengths) {
    return forward(log_probs, targets, input_lengths, target_lengths);
  }
  CTCLossOptions options;
};

}  // namespace tandem::nn
