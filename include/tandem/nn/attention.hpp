// Multi-head attention as libtorch's: nn::MultiheadAttention and
// F::multi_head_attention_forward, sequence-first (L, N, E) or unbatched (L, E), with torch's
// masks (boolean: true is left out; floating: added to the scores), extra key/value biases, a
// zero attention slot and separate projection weights for other key/value sizes.
#pragma once

#include <memory>
#include <string>
#include <tuple>

#include "tandem/core/arg.hpp"
#include "tandem/nn/layers.hpp"

namespace tandem::nn {

namespace functional {

/// The weights and switches of one attention call, in libtorch's order.
struct MultiheadAttentionForwardFuncOptions {
  MultiheadAttentionForwardFuncOptions(int64_t embed_dim_to_check, int64_t num_heads,
                                       Tensor in_proj_weight, Tensor in_proj_bias, Tensor bias_k,
                                       Tensor bias_v, bool add_zero_attn, double dropout_p,
                                       Tensor out_proj_weight, Tensor out_proj_bias)
      : embed_dim_to_check_(embed_dim_to_check),
        num_heads_(num_heads),
        in_proj_weight_(std::move(in_proj_weight)),
        in_proj_bias_(std::move(in_proj_bias)),
        bias_k_(std::move(bias_k)),
        bias_v_(std::move(bias_v)),
        add_zero_attn_(add_zero_attn),
        dropout_p_(dropout_p),
        out_proj_weight_(std::move(out_proj_weight)),
        out_proj_bias_(std::move(out_proj_bias)) {}
  TANDEM_ARG(int64_t, embed_dim_to_check);
  TANDEM_ARG(int64_t, num_heads);
  /// (3E, E): the query, key and value projections stacked (unless use_separate_proj_weight).
  TANDEM_ARG(Tensor, in_proj_weight);
  /// (3E) or undefined.
  TANDEM_ARG(Tensor, in_proj_bias);
  /// (1, 1, E) each, appended to the keys and values as one more position; both or neither.
  TANDEM_ARG(Tensor, bias_k);
  TANDEM_ARG(Tensor, bias_v);
  /// A position of zero keys and values appended after the projections.
  TANDEM_ARG(bool, add_zero_attn);
  /// Dropout on the attention weights while training.
  TANDEM_ARG(double, dropout_p);
  TANDEM_ARG(Tensor, out_proj_weight);
  TANDEM_ARG(Tensor, out_proj_bias);
  TANDEM_ARG(bool, training) = true;
  /// (N, S) or (S) unbatched: true (or non-zero) leaves that key out; a floating mask is added.
  TANDEM_ARG(Tensor, key_padding_mask);
  TANDEM_ARG(bool, need_weights) = true;
  /// (L, S) or (N * num_heads, L, S): boolean (true is left out) or added to the scores.
  TANDEM_ARG(Tensor, attn_mask);
  /// Keys and values of other sizes: q_proj_weight (E, E), k_proj_weight (E, kdim),
  /// v_proj_weight (E, vdim); in_proj_bias still holds the three biases.
  TANDEM_ARG(bool, use_separate_proj_weight) = false;
  TANDEM_ARG(Tensor, q_proj_weight);
  TANDEM_ARG(Tensor, k_proj_weight);
  TANDEM_ARG(Tensor, v_proj_weight);
  /// Projected keys and values given as they are, (N * num_heads, S, E / num_heads).
  TANDEM_ARG(Tensor, static_k);
  TANDEM_ARG(Tensor, static_v);
  /// The weights averaged over the heads (N, L, S), or per head (N, num_heads, L, S).
  TANDEM_ARG(bool, average_attn_weights) = true;
};

/// The attention output (L, N, E) and, if need_weights, the attention weights (after dropout,
/// as torch 1.13's); an undefined tensor otherwise.
std::tuple<Tensor, Tensor> multi_head_attention_forward(
    const Tensor& query, const Tensor& key, const Tensor& value,
    const MultiheadAttentionForwardFuncOptions& options);

}  // namespace functional

struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads), kdim_(embed_dim), vdim_(embed_dim) {}
  TANDEM_ARG(int64_t, embed_dim);
  TANDEM_ARG(int64_t, num_heads);
  TANDEM_ARG(double, dropout) = 0.0;
  TANDEM_ARG(bool, bias) = true;
  TANDEM_ARG(bool, add_bias_kv) = false;
  TANDEM_ARG(bool, add_zero_attn) = false;
  /// The keys' and values' feature sizes (embed_dim by default).
  TANDEM_ARG(int64_t, kdim);
  TANDEM_ARG(int64_t, vdim);
};

/// torch.nn.MultiheadAttention. Parameters as torch registers them (state_dict: in_proj_weight
/// or q/k/v_proj_weight, in_proj_bias, bias_k, bias_v, out_proj.weight, out_proj.bias) and
/// initialized as torch's (Xavier-uniform projections, zero biases, Xavier-normal bias_k/v).
class MultiheadAttention : public Module {
 public:
  TANDEM_MODULE_CLONE(MultiheadAttention, options)
  explicit MultiheadAttention(const MultiheadAttentionOptions& options);
  MultiheadAttention(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttention(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  using Module::forward;  // one input: refused, as for every module of two
  /// (attention output, attention weights), as F::multi_head_attention_forward.
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {},
                                     bool average_attn_weights = true);
  std::string extra_repr() const override;
  /// Draws the projections and bias_k/v again and zeroes the biases, as the constructor did
  /// (torch's _reset_parameters; out_proj's weight keeps its draw, as there).
  void reset_parameters();
  void _reset_parameters() { reset_parameters(); }  // libtorch's name

  Tensor in_proj_weight, in_proj_bias, bias_k, bias_v;
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // when kdim or vdim differ
  std::shared_ptr<Linear> out_proj;
  const MultiheadAttentionOptions options;
  const int64_t head_dim;
};

}  // namespace tandem::nn
