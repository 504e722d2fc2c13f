// Recurrent layers as libtorch's: LSTM, GRU and RNN (tanh or relu), with their options, their
// parameters named and ordered as torch's (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0,
// then _reverse, then the next layer), so state dicts move between the two.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tandem/core/arg.hpp"
#include "tandem/nn/module.hpp"

namespace tandem::nn::utils::rnn {
/// torch.nn.utils.rnn.PackedSequence: sequences of different lengths without padding. data
/// (S, *) holds step t's batch_sizes[t] rows after step t - 1's, the sequences sorted longest
/// first; batch_sizes is an i64 CPU tensor; sorted_indices[i] is the batch position of the i-th
/// longest sequence (undefined: the batch was sorted already), unsorted_indices its inverse.
class PackedSequence {
 public:
  explicit PackedSequence(Tensor data, Tensor batch_sizes, Tensor sorted_indices = {},
                          Tensor unsorted_indices = {});
  const Tensor& data() const { return data_; }
  const Tensor& batch_sizes() const { return batch_sizes_; }
  const Tensor& sorted_indices() const { return sorted_indices_; }
  const Tensor& unsorted_indices() const { return unsorted_indices_; }
  /// The data and indices on `device` (batch_sizes stay on the CPU), as libtorch's.
  PackedSequence to(Device device) const;
  PackedSequence cuda() const { return to(kCUDA); }
  PackedSequence cpu() const { return to(kCPU); }
  bool is_cuda() const { return data_.device().is_cuda(); }

 private:
  Tensor data_, batch_sizes_, sorted_indices_, unsorted_indices_;
};
}  // namespace tandem::nn::utils::rnn

namespace tandem::nn {

/// The sizes come first, as libtorch's LSTMOptions(input_size, hidden_size).
struct LSTMOptions {
  LSTMOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  TANDEM_ARG(int64_t, input_size);
  TANDEM_ARG(int64_t, hidden_size);
  TANDEM_ARG(int64_t, num_layers) = 1;
  TANDEM_ARG(bool, bias) = true;
  /// Input and output (N, T, features) instead of (T, N, features); the states keep N second.
  TANDEM_ARG(bool, batch_first) = false;
  /// Dropout on each layer's output but the last's, when training.
  TANDEM_ARG(double, dropout) = 0.0;
  TANDEM_ARG(bool, bidirectional) = false;
};

struct GRUOptions {
  GRUOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  TANDEM_ARG(int64_t, input_size);
  TANDEM_ARG(int64_t, hidden_size);
  TANDEM_ARG(int64_t, num_layers) = 1;
  TANDEM_ARG(bool, bias) = true;
  TANDEM_ARG(bool, batch_first) = false;
  TANDEM_ARG(double, dropout) = 0.0;
  TANDEM_ARG(bool, bidirectional) = false;
};

struct RNNOptions {
  RNNOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  TANDEM_ARG(int64_t, input_size);
  TANDEM_ARG(int64_t, hidden_size);
  TANDEM_ARG(int64_t, num_layers) = 1;
  /// "tanh" or "relu" (libtorch's torch::kTanh, torch::kReLU).
  TANDEM_ARG(std::string, nonlinearity) = "tanh";
  TANDEM_ARG(bool, bias) = true;
  TANDEM_ARG(bool, batch_first) = false;
  TANDEM_ARG(double, dropout) = 0.0;
  TANDEM_ARG(bool, bidirectional) = false;
};

/// What the three share: the weights, registered in torch's order and initialized as torch's,
/// uniform in +-1/sqrt(hidden_size).
class RNNBase : public Module {
 public:
  /// The weights in the order the functional forms take them: per layer and direction w_ih,
  /// w_hh, then b_ih, b_hh (with bias), as libtorch's all_weights().
  const std::vector<Tensor>& all_weights() const { return weights_; }
  std::string extra_repr() const override;
  /// Draws every weight again as the constructor did (libtorch's reset_parameters).
  void reset_parameters();

 protected:
  struct Config {
    int64_t input_size, hidden_size, num_layers;
    bool bias, batch_first;
    double dropout;
    bool bidirectional;
  };
  /// The fields of LSTMOptions, GRUOptions or RNNOptions the base uses.
  template <typename Options>
  static Config config_of(const Options& o) {
    return {o.input_size_,  o.hidden_size_, o.num_layers_,   o.bias_,
            o.batch_first_, o.dropout_,     o.bidirectional_};
  }
  RNNBase(const std::string& type_name, int64_t gates, const Config& config);
  const Config config_;

 private:
  std::vector<Tensor> weights_;
};

// The recurrent modules and cells take their state as a second argument and return tuples, as
// libtorch's do, so their forward hides Module's one-tensor forward on purpose (called through a
// Module it throws, saying so); compilers that warn of the hiding are told it is meant.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Woverloaded-virtual"
#elif defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
#endif

/// torch.nn.LSTM. forward(input, {h0, c0}) gives (output, (h_n, c_n)); the states are zeros
/// when not given.
class LSTM : public RNNBase {
 public:
  TANDEM_MODULE_CLONE(LSTM, options)
  explicit LSTM(const LSTMOptions& options);
  LSTM(int64_t input_size, int64_t hidden_size) : LSTM(LSTMOptions(input_size, hidden_size)) {}
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(
      const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx = std::nullopt);
  /// Over a PackedSequence; the states, given and returned, are in the batch's own order.
  std::tuple<utils::rnn::PackedSequence, std::tuple<Tensor, Tensor>> forward_with_packed_input(
      const utils::rnn::PackedSequence& packed_input,
      std::optional<std::tuple<Tensor, Tensor>> hx = std::nullopt);
  const LSTMOptions options;
};

/// torch.nn.GRU. forward(input, h0) gives (output, h_n).
class GRU : public RNNBase {
 public:
  TANDEM_MODULE_CLONE(GRU, options)
  explicit GRU(const GRUOptions& options);
  GRU(int64_t input_size, int64_t hidden_size) : GRU(GRUOptions(input_size, hidden_size)) {}
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = {});
  std::tuple<utils::rnn::PackedSequence, Tensor> forward_with_packed_input(
      const utils::rnn::PackedSequence& packed_input, const Tensor& hx = {});
  const GRUOptions options;
};

/// torch.nn.RNN (Elman): h' = tanh or relu of W_ih x + b_ih + W_hh h + b_hh.
class RNN : public RNNBase {
 public:
  TANDEM_MODULE_CLONE(RNN, options)
  explicit RNN(const RNNOptions& options);
  RNN(int64_t input_size, int64_t hidden_size) : RNN(RNNOptions(input_size, hidden_size)) {}
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = {});
  std::tuple<utils::rnn::PackedSequence, Tensor> forward_with_packed_input(
      const utils::rnn::PackedSequence& packed_input, const Tensor& hx = {});
  const RNNOptions options;
};

/// The cells' options, as libtorch's LSTMCellOptions(input_size, hidden_size).bias(false).
struct LSTMCellOptions {
  LSTMCellOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  TANDEM_ARG(int64_t, input_size);
  TANDEM_ARG(int64_t, hidden_size);
  TANDEM_ARG(bool, bias) = true;
};
using GRUCellOptions = LSTMCellOptions;
struct RNNCellOptions {
  RNNCellOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  TANDEM_ARG(int64_t, input_size);
  TANDEM_ARG(int64_t, hidden_size);
  TANDEM_ARG(bool, bias) = true;
  /// "tanh" or "relu" (torch::kTanh, torch::kReLU).
  TANDEM_ARG(std::string, nonlinearity) = "tanh";
};

namespace detail {
/// What the cells share: weight_ih (gates * H, I), weight_hh (gates * H, H), bias_ih and
/// bias_hh (gates * H), registered and initialized as torch's (uniform in +-1/sqrt(H)).
class RNNCellBase : public Module {
 public:
  std::string extra_repr() const override;
  /// Draws the weights again as the constructor did (libtorch's reset_parameters).
  void reset_parameters();
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  RNNCellBase(const char* type_name, int64_t gates, int64_t input_size, int64_t hidden_size,
              bool bias);
  /// The input checked against input_size: (N, I) or (I).
  void check_input(const Tensor& input) const;
  const int64_t input_size_, hidden_size_;
};
}  // namespace detail

/// torch.nn.LSTMCell: forward(input, {h, c}) gives (h', c'); no state means zeros.
class LSTMCell : public detail::RNNCellBase {
 public:
  TANDEM_MODULE_CLONE(LSTMCell, options)
  explicit LSTMCell(const LSTMCellOptions& options);
  LSTMCell(int64_t input_size, int64_t hidden_size)
      : LSTMCell(LSTMCellOptions(input_size, hidden_size)) {}
  std::tuple<Tensor, Tensor> forward(const Tensor& input,
                                     std::optional<std::tuple<Tensor, Tensor>> hx = std::nullopt);
  const LSTMCellOptions options;
};

/// torch.nn.GRUCell: forward(input, h) gives h'.
class GRUCell : public detail::RNNCellBase {
 public:
  TANDEM_MODULE_CLONE(GRUCell, options)
  explicit GRUCell(const GRUCellOptions& options);
  GRUCell(int64_t input_size, int64_t hidden_size)
      : GRUCell(GRUCellOptions(input_size, hidden_size)) {}
  Tensor forward(const Tensor& input, const Tensor& hx = {});
  const GRUCellOptions options;
};

/// torch.nn.RNNCell: forward(input, h) gives tanh (or relu) of W_ih x + b_ih + W_hh h + b_hh.
class RNNCell : public detail::RNNCellBase {
 public:
  TANDEM_MODULE_CLONE(RNNCell, options)
  explicit RNNCell(const RNNCellOptions& options);
  RNNCell(int64_t input_size, int64_t hidden_size)
      : RNNCell(RNNCellOptions(input_size, hidden_size)) {}
  Tensor forward(const Tensor& input, const Tensor& hx = {});
  const RNNCellOptions options;
};

#if defined(__clang__)
#pragma clang diagnostic pop
#elif defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

}  // namespace tandem::nn

namespace tandem::nn::utils::rnn {
/// torch.nn.utils.rnn.pad_sequence: sequences (L_i, *) of one dtype and device (the dims after
/// the first alike), each padded after its end to the longest with `padding_value`, stacked
/// into (L_max, B, *), or (B, L_max, *) when batch_first. Differentiable (pad and stack).
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false,
                    double padding_value = 0.0);

/// torch.nn.utils.rnn.pack_padded_sequence: input (T, B, *), or (B, T, *) when batch_first,
/// whose sequence b is its first lengths[b] steps (lengths: B integers, each in [1, T]). With
/// enforce_sorted the lengths must not increase; otherwise the batch is sorted (stably) and the
/// result remembers the order. Differentiable in input.
PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths,
                                    bool batch_first = false, bool enforce_sorted = true);
/// Its inverse, torch.nn.utils.rnn.pad_packed_sequence: (padded (T, B, *) or (B, T, *), lengths
/// as an i64 CPU tensor), in the batch's own order; steps past a sequence's end hold
/// padding_value; total_length pads to that many steps (at least the longest).
std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence,
                                               bool batch_first = false, double padding_value = 0.0,
                                               std::optional<int64_t> total_length = std::nullopt);
/// torch.nn.utils.rnn.pack_sequence: sequences (L_i, *), longest first with enforce_sorted.
PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted = true);
/// The inverse of a permutation (i64 indices), as libtorch's invert_permutation.
Tensor invert_permutation(const Tensor& permutation);
}  // namespace tandem::nn::utils::rnn
