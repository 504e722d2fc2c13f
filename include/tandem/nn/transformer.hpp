// The Transformer family as libtorch's: TransformerEncoderLayer, TransformerDecoderLayer,
// TransformerEncoder, TransformerDecoder and Transformer, sequence-first (S, N, E), post-norm
// (norm after each residual add, libtorch 1.13's only form), with its submodule names, so
// state_dict keys are torch's ("layers.0.self_attn.in_proj_weight").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "tandem/core/arg.hpp"
#include "tandem/nn/attention.hpp"
#include "tandem/nn/init.hpp"
#include "tandem/nn/layers.hpp"

namespace tandem {
/// libtorch's name for the GELU activation of the transformer layers (kReLU is in init.hpp).
inline constexpr const char* kGELU = "gelu";
}  // namespace tandem

namespace tandem::nn {

/// A transformer layer's activation: torch::kReLU, torch::kGELU, or any function of a tensor.
class TransformerActivation {
 public:
  TransformerActivation(const char* name);  // NOLINT(google-explicit-constructor)
  template <typename F,
            typename = std::enable_if_t<std::is_invocable_r_v<Tensor, F, const Tensor&> &&
                                        !std::is_convertible_v<F, const char*>>>
  TransformerActivation(F fn)  // NOLINT(google-explicit-constructor)
      : name_("function"), fn_(std::move(fn)) {}
  Tensor operator()(const Tensor& x) const { return fn_(x); }
  /// "relu", "gelu" or "function".
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::function<Tensor(const Tensor&)> fn_;
};

namespace detail {
/// What both transformer layers take; two types (kWhich), as libtorch's two options structs.
template <int kWhich>
struct TransformerLayerOptions {
  TransformerLayerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  TANDEM_ARG(int64_t, d_model);
  TANDEM_ARG(int64_t, nhead);
  TANDEM_ARG(int64_t, dim_feedforward) = 2048;
  TANDEM_ARG(double, dropout) = 0.1;
  TANDEM_ARG(TransformerActivation, activation) = kReLU;
};
}  // namespace detail
using TransformerEncoderLayerOptions = detail::TransformerLayerOptions<0>;
using TransformerDecoderLayerOptions = detail::TransformerLayerOptions<1>;

/// Self-attention, then a two-layer feedforward network, each followed by dropout, the
/// residual add and layer norm.
class TransformerEncoderLayer : public Module {
 public:
  TANDEM_MODULE_CLONE(TransformerEncoderLayer, options)
  explicit TransformerEncoderLayer(const TransformerEncoderLayerOptions& options);
  TransformerEncoderLayer(int64_t d_model, int64_t nhead)
      : TransformerEncoderLayer(TransformerEncoderLayerOptions(d_model, nhead)) {}
  Tensor forward(const Tensor& src) override { return forward(src, {}, {}); }
  /// src (S, N, E); src_mask (S, S) or (N * nhead, S, S); src_key_padding_mask (N, S): as
  /// MultiheadAttention's attn_mask and key_padding_mask.
  Tensor forward(const Tensor& src, const Tensor& src_mask,
                 const Tensor& src_key_padding_mask = {});

  const TransformerEncoderLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;
};

/// Self-attention, attention over the encoder's output (memory), then the feedforward network,
/// each followed by dropout, the residual add and layer norm.
class TransformerDecoderLayer : public Module {
 public:
  TANDEM_MODULE_CLONE(TransformerDecoderLayer, options)
  explicit TransformerDecoderLayer(const TransformerDecoderLayerOptions& options);
  TransformerDecoderLayer(int64_t d_model, int64_t nhead)
      : TransformerDecoderLayer(TransformerDecoderLayerOptions(d_model, nhead)) {}
  using Module::forward;  // one input: refused, as for every module of two
  /// tgt (T, N, E), memory (S, N, E); the masks as MultiheadAttention's: tgt_mask (T, T),
  /// memory_mask (T, S), the key padding masks (N, T) and (N, S).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {});

  const TransformerDecoderLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  std::shared_ptr<Dropout> dropout1, dropout2, dropout3;
};

struct TransformerEncoderOptions {
  /// num_layers copies of `encoder_layer`, each starting from its weights (as torch's clones).
  TransformerEncoderOptions(std::shared_ptr<TransformerEncoderLayer> encoder_layer,
                            int64_t num_layers)
      : encoder_layer_(std::move(encoder_layer)), num_layers_(num_layers) {}
  TransformerEncoderOptions(const TransformerEncoderLayerOptions& layer, int64_t num_layers)
      : TransformerEncoderOptions(std::make_shared<TransformerEncoderLayer>(layer), num_layers) {}
  TANDEM_ARG(std::shared_ptr<TransformerEncoderLayer>, encoder_layer);
  TANDEM_ARG(int64_t, num_layers);
  /// Applied to the last layer's output (a LayerNorm in nn::Transformer); none by default.
  TANDEM_ARG(std::shared_ptr<Module>, norm);
};

/// A stack of encoder layers ("layers.0", "layers.1", ...) and an optional final norm.
class TransformerEncoder : public Module {
 public:
  // A clone repeats the same layer (then takes every layer's values) and its own norm.
  TANDEM_MODULE_CLONE(TransformerEncoder,
                      TransformerEncoderOptions(options).norm(norm ? norm->clone() : nullptr))
  explicit TransformerEncoder(const TransformerEncoderOptions& options);
  Tensor forward(const Tensor& src) override { return forward(src, {}, {}); }
  Tensor forward(const Tensor& src, const Tensor& src_mask,
                 const Tensor& src_key_padding_mask = {});

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<Module> norm;
  const int64_t num_layers;
  const TransformerEncoderOptions options;
};

struct TransformerDecoderOptions {
  TransformerDecoderOptions(std::shared_ptr<TransformerDecoderLayer> decoder_layer,
                            int64_t num_layers)
      : decoder_layer_(std::move(decoder_layer)), num_layers_(num_layers) {}
  TransformerDecoderOptions(const TransformerDecoderLayerOptions& layer, int64_t num_layers)
      : TransformerDecoderOptions(std::make_shared<TransformerDecoderLayer>(layer), num_layers) {}
  TANDEM_ARG(std::shared_ptr<TransformerDecoderLayer>, decoder_layer);
  TANDEM_ARG(int64_t, num_layers);
  TANDEM_ARG(std::shared_ptr<Module>, norm);
};

/// A stack of decoder layers and an optional final norm.
class TransformerDecoder : public Module {
 public:
  // A clone repeats the same layer (then takes every layer's values) and its own norm.
  TANDEM_MODULE_CLONE(TransformerDecoder,
                      TransformerDecoderOptions(options).norm(norm ? norm->clone() : nullptr))
  explicit TransformerDecoder(const TransformerDecoderOptions& options);
  using Module::forward;  // one input: refused, as for every module of two
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {});

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<Module> norm;
  const int64_t num_layers;
  const TransformerDecoderOptions options;
};

struct TransformerOptions {
  TransformerOptions() = default;
  TransformerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  TransformerOptions(int64_t d_model, int64_t nhead, int64_t num_encoder_layers,
                     int64_t num_decoder_layers)
      : d_model_(d_model),
        nhead_(nhead),
        num_encoder_layers_(num_encoder_layers),
        num_decoder_layers_(num_decoder_layers) {}
  TANDEM_ARG(int64_t, d_model) = 512;
  TANDEM_ARG(int64_t, nhead) = 8;
  TANDEM_ARG(int64_t, num_encoder_layers) = 6;
  TANDEM_ARG(int64_t, num_decoder_layers) = 6;
  TANDEM_ARG(int64_t, dim_feedforward) = 2048;
  TANDEM_ARG(double, dropout) = 0.1;
  TANDEM_ARG(TransformerActivation, activation) = kReLU;
};

/// The encoder-decoder of "Attention Is All You Need", as torch.nn.Transformer: an encoder and
/// a decoder, each with a final LayerNorm, every matrix initialized Xavier-uniform.
class Transformer : public Module {
 public:
  TANDEM_MODULE_CLONE(Transformer, options)
  explicit Transformer(const TransformerOptions& options = {});
  using Module::forward;  // one input: refused, as for every module of two
  /// src (S, N, E), tgt (T, N, E) -> (T, N, E).
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {},
                 const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& src_key_padding_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {});
  /// (sz, sz): 0 on and below the diagonal, -inf above (a position sees itself and before).
  static Tensor generate_square_subsequent_mask(int64_t sz);

  const TransformerOptions options;
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
};

}  // namespace tandem::nn
