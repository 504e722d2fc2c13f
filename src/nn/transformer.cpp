// The Transformer family from MultiheadAttention, Linear, Dropout and LayerNorm, as libtorch's
// (torch/csrc/api/src/nn/modules/transformer*.cpp, PyTorch 1.13's post-norm layers).
#include "tandem/nn/transformer.hpp"

#include <cstring>
#include <limits>

#include "tandem/ops.hpp"

namespace tandem::nn {

TransformerActivation::TransformerActivation(const char* name) : name_(name ? name : "") {
  if (name_ == "relu") {
    fn_ = [](const Tensor& x) { return relu(x); };
  } else if (name_ == "gelu") {
    fn_ = [](const Tensor& x) { return gelu(x); };
  } else {
    TANDEM_THROW(ValueError, "transformer activation: \"", name_,
                 "\" is not one (relu, gelu, or a function of a tensor)");
  }
}

namespace {

template <typename Options>
void check_layer_options(const Options& o, const char* name) {
  TANDEM_CHECK(o.d_model() > 0 && o.nhead() > 0 && o.d_model() % o.nhead() == 0, name,
               ": d_model (", o.d_model(), ") must split into nhead (", o.nhead(), ") equal heads");
  TANDEM_CHECK(o.dim_feedforward() > 0, name, ": dim_feedforward must be positive, got ",
               o.dim_feedforward());
  TANDEM_CHECK(o.dropout() >= 0 && o.dropout() <= 1, name, ": dropout must be in [0, 1], got ",
               o.dropout());
}

std::shared_ptr<MultiheadAttention> attention(int64_t d_model, int64_t nhead, double dropout) {
  return std::make_shared<MultiheadAttention>(
      MultiheadAttentionOptions(d_model, nhead).dropout(dropout));
}

// Attention of x over `over` without the weights: the output only.
Tensor attend(MultiheadAttention& attn, const Tensor& x, const Tensor& over, const Tensor& mask,
              const Tensor& key_padding_mask) {
  return std::get<0>(attn.forward(x, over, over, key_padding_mask, /*need_weights=*/false, mask));
}

// `count` clones of `layer`, as torch's _get_clones (the copies share no tensor with it or with
// each other).
template <typename Layer>
std::shared_ptr<ModuleList> clones(const std::shared_ptr<Layer>& layer, int64_t count,
                                   const char* name) {
  TANDEM_CHECK(layer != nullptr, name, ": the layer to repeat is null");
  TANDEM_CHECK(count >= 0, name, ": num_layers must be non-negative, got ", count);
  auto list = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < count; ++i) list->push_back(layer->clone());
  return list;
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerEncoderLayerOptions& o)
    : Module("TransformerEncoderLayer"), options(o) {
  check_layer_options(o, "TransformerEncoderLayer");
  self_attn = register_module("self_attn", attention(o.d_model(), o.nhead(), o.dropout()));
  linear1 = register_module("linear1", std::make_shared<Linear>(o.d_model(), o.dim_feedforward()));
  dropout = register_module("dropout", std::make_shared<Dropout>(DropoutOptions(o.dropout())));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward(), o.d_model()));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(LayerNormOptions({o.d_model()})));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(LayerNormOptions({o.d_model()})));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(DropoutOptions(o.dropout())));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(DropoutOptions(o.dropout())));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask,
                                        const Tensor& src_key_padding_mask) {
  Tensor x = norm1->forward(
      add(src, dropout1->forward(attend(*self_attn, src, src, src_mask, src_key_padding_mask))));
  Tensor ff = linear2->forward(dropout->forward(options.activation()(linear1->forward(x))));
  return norm2->forward(add(x, dropout2->forward(ff)));
}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerDecoderLayerOptions& o)
    : Module("TransformerDecoderLayer"), options(o) {
  check_layer_options(o, "TransformerDecoderLayer");
  self_attn = register_module("self_attn", attention(o.d_model(), o.nhead(), o.dropout()));
  multihead_attn =
      register_module("multihead_attn", attention(o.d_model(), o.nhead(), o.dropout()));
  linear1 = register_module("linear1", std::make_shared<Linear>(o.d_model(), o.dim_feedforward()));
  dropout = register_module("dropout", std::make_shared<Dropout>(DropoutOptions(o.dropout())));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward(), o.d_model()));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(LayerNormOptions({o.d_model()})));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(LayerNormOptions({o.d_model()})));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(LayerNormOptions({o.d_model()})));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(DropoutOptions(o.dropout())));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(DropoutOptions(o.dropout())));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(DropoutOptions(o.dropout())));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const Tensor& tgt_mask, const Tensor& memory_mask,
                                        const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask) {
  Tensor x = norm1->forward(
      add(tgt, dropout1->forward(attend(*self_attn, tgt, tgt, tgt_mask, tgt_key_padding_mask))));
  x = norm2->forward(add(x, dropout2->forward(attend(*multihead_attn, x, memory, memory_mask,
                                                     memory_key_padding_mask))));
  Tensor ff = linear2->forward(dropout->forward(options.activation()(linear1->forward(x))));
  return norm3->forward(add(x, dropout3->forward(ff)));
}

TransformerEncoder::TransformerEncoder(const TransformerEncoderOptions& o)
    : Module("TransformerEncoder"), num_layers(o.num_layers()), options(o) {
  layers =
      register_module("layers", clones(o.encoder_layer(), o.num_layers(), "TransformerEncoder"));
  if (o.norm()) norm = register_module("norm", o.norm());
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& src_mask,
                                   const Tensor& src_key_padding_mask) {
  Tensor x = src;
  for (const auto& layer : *layers)
    x = std::static_pointer_cast<TransformerEncoderLayer>(layer)->forward(x, src_mask,
                                                                          src_key_padding_mask);
  return norm ? norm->forward(x) : x;
}

TransformerDecoder::TransformerDecoder(const TransformerDecoderOptions& o)
    : Module("TransformerDecoder"), num_layers(o.num_layers()), options(o) {
  layers =
      register_module("layers", clones(o.decoder_layer(), o.num_layers(), "TransformerDecoder"));
  if (o.norm()) norm = register_module("norm", o.norm());
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask) {
  Tensor x = tgt;
  for (const auto& layer : *layers)
    x = std::static_pointer_cast<TransformerDecoderLayer>(layer)->forward(
        x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask);
  return norm ? norm->forward(x) : x;
}

Transformer::Transformer(const TransformerOptions& o) : Module("Transformer"), options(o) {
  auto encoder_layer = std::make_shared<TransformerEncoderLayer>(
      TransformerEncoderLayerOptions(o.d_model(), o.nhead())
          .dim_feedforward(o.dim_feedforward())
          .dropout(o.dropout())
          .activation(o.activation()));
  encoder = register_module(
      "encoder", std::make_shared<TransformerEncoder>(
                     TransformerEncoderOptions(encoder_layer, o.num_encoder_layers())
                         .norm(std::make_shared<LayerNorm>(LayerNormOptions({o.d_model()})))));
  auto decoder_layer = std::make_shared<TransformerDecoderLayer>(
      TransformerDecoderLayerOptions(o.d_model(), o.nhead())
          .dim_feedforward(o.dim_feedforward())
          .dropout(o.dropout())
          .activation(o.activation()));
  decoder = register_module(
      "decoder", std::make_shared<TransformerDecoder>(
                     TransformerDecoderOptions(decoder_layer, o.num_decoder_layers())
                         .norm(std::make_shared<LayerNorm>(LayerNormOptions({o.d_model()})))));
  // torch's _reset_parameters: every parameter of more than one dim Xavier-uniform
  for (Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask,
                            const Tensor& tgt_mask, const Tensor& memory_mask,
                            const Tensor& src_key_padding_mask, const Tensor& tgt_key_padding_mask,
                            const Tensor& memory_key_padding_mask) {
  TANDEM_CHECK(src.dim() == tgt.dim() && (src.dim() == 3 || src.dim() == 2),
               "Transformer: "
               "expected src and tgt both (S, N, E) or both unbatched (S, E), got ",
               shape_str(src.shape()), " and ", shape_str(tgt.shape()));
  TANDEM_CHECK(src.dim() == 2 || src.size(1) == tgt.size(1),
               "Transformer: src and tgt must have the same batch size, got ", src.size(1), " and ",
               tgt.size(1));
  TANDEM_CHECK(src.size(-1) == options.d_model() && tgt.size(-1) == options.d_model(),
               "Transformer: the feature size of src and tgt must be d_model (", options.d_model(),
               "), got ", src.size(-1), " and ", tgt.size(-1));
  Tensor memory = encoder->forward(src, src_mask, src_key_padding_mask);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                          memory_key_padding_mask);
}

Tensor Transformer::generate_square_subsequent_mask(int64_t sz) {
  TANDEM_CHECK(sz >= 0, "generate_square_subsequent_mask: size must be non-negative, got ", sz);
  return full({sz, sz}, -std::numeric_limits<double>::infinity()).triu(1);
}

}  // namespace tandem::nn
