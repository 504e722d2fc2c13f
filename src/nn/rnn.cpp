#include "tandem/nn/rnn.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "tandem/core/error.hpp"
#include "tandem/nn/init.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/rnn.hpp"
#include "tandem/ops/shape_ops.hpp"

namespace tandem::nn {

RNNBase::RNNBase(const std::string& type_name, int64_t gates, const Config& c)
    : Module(type_name), config_(c) {
  TANDEM_CHECK(c.input_size > 0 && c.hidden_size > 0, type_name,
               ": input_size and hidden_size must be positive, got ", c.input_size, " and ",
               c.hidden_size);
  TANDEM_CHECK(c.num_layers >= 1, type_name, ": num_layers must be >= 1, got ", c.num_layers);
  TANDEM_CHECK(c.dropout >= 0 && c.dropout <= 1, type_name, ": dropout must be in [0, 1], got ",
               c.dropout);
  const int64_t directions = c.bidirectional ? 2 : 1, rows = gates * c.hidden_size;
  for (int64_t layer = 0; layer < c.num_layers; ++layer)
    for (int64_t d = 0; d < directions; ++d) {
      const std::string suffix = "_l" + std::to_string(layer) + (d ? "_reverse" : "");
      const int64_t in = layer == 0 ? c.input_size : directions * c.hidden_size;
      weights_.push_back(register_parameter("weight_ih" + suffix, empty({rows, in})));
      weights_.push_back(register_parameter("weight_hh" + suffix, empty({rows, c.hidden_size})));
      if (c.bias) {
        weights_.push_back(register_parameter("bias_ih" + suffix, empty({rows})));
        weights_.push_back(register_parameter("bias_hh" + suffix, empty({rows})));
      }
    }
  reset_parameters();
}

void RNNBase::reset_parameters() {
  const double bound = 1.0 / std::sqrt(static_cast<double>(config_.hidden_size));
  for (Tensor& w : weights_) init::uniform_(w, -bound, bound);
}

std::string RNNBase::extra_repr() const {
  std::ostringstream os;
  os << config_.input_size << ", " << config_.hidden_size;
  if (config_.num_layers != 1) os << ", num_layers=" << config_.num_layers;
  if (!config_.bias) os << ", bias=false";
  if (config_.batch_first) os << ", batch_first=true";
  if (config_.dropout != 0) os << ", dropout=" << config_.dropout;
  if (config_.bidirectional) os << ", bidirectional=true";
  return os.str();
}

LSTM::LSTM(const LSTMOptions& o) : RNNBase("LSTM", 4, config_of(o)), options(o) {}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(
    const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx) {
  std::vector<Tensor> state;
  if (hx) state = {std::get<0>(*hx), std::get<1>(*hx)};
  auto [output, h, c] =
      lstm(input, state, all_weights(), config_.bias, config_.num_layers, config_.dropout,
           is_training(), config_.bidirectional, config_.batch_first);
  return {output, {h, c}};
}

GRU::GRU(const GRUOptions& o) : RNNBase("GRU", 3, config_of(o)), options(o) {}

std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& hx) {
  return gru(input, hx, all_weights(), config_.bias, config_.num_layers, config_.dropout,
             is_training(), config_.bidirectional, config_.batch_first);
}

RNN::RNN(const RNNOptions& o) : RNNBase("RNN", 1, config_of(o)), options(o) {
  TANDEM_CHECK(o.nonlinearity_ == "tanh" || o.nonlinearity_ == "relu",
               "RNN: nonlinearity must be \"tanh\" or \"relu\", got \"", o.nonlinearity_, "\"");
}

std::tuple<Tensor, Tensor> RNN::forward(const Tensor& input, const Tensor& hx) {
  auto run = options.nonlinearity_ == "tanh" ? rnn_tanh : rnn_relu;
  return run(input, hx, all_weights(), config_.bias, config_.num_layers, config_.dropout,
             is_training(), config_.bidirectional, config_.batch_first);
}

detail::RNNCellBase::RNNCellBase(const char* type_name, int64_t gates, int64_t input_size,
                                 int64_t hidden_size, bool bias)
    : Module(type_name), input_size_(input_size), hidden_size_(hidden_size) {
  TANDEM_CHECK(input_size > 0 && hidden_size > 0, type_name,
               ": input_size and hidden_size must be positive, got ", input_size, " and ",
               hidden_size);
  const int64_t rows = gates * hidden_size;
  weight_ih = register_parameter("weight_ih", empty({rows, input_size}));
  weight_hh = register_parameter("weight_hh", empty({rows, hidden_size}));
  if (bias) {
    bias_ih = register_parameter("bias_ih", empty({rows}));
    bias_hh = register_parameter("bias_hh", empty({rows}));
  }
  reset_parameters();
}

void detail::RNNCellBase::reset_parameters() {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size_));
  for (Tensor* w : {&weight_ih, &weight_hh, &bias_ih, &bias_hh})
    if (w->defined()) init::uniform_(*w, -bound, bound);
}

void detail::RNNCellBase::check_input(const Tensor& input) const {
  TANDEM_CHECK(
      input.defined() && (input.dim() == 1 || input.dim() == 2) && input.size(-1) == input_size_,
      type_name(), ": expected an input (N, ", input_size_, ") or (", input_size_, "), got ",
      input.defined() ? shape_str(input.shape()) : std::string("an undefined tensor"));
}

std::string detail::RNNCellBase::extra_repr() const {
  std::ostringstream os;
  os << input_size_ << ", " << hidden_size_;
  if (!bias_ih.defined()) os << ", bias=false";
  return os.str();
}

LSTMCell::LSTMCell(const LSTMCellOptions& o)
    : RNNCellBase("LSTMCell", 4, o.input_size(), o.hidden_size(), o.bias()), options(o) {}
std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& input,
                                             std::optional<std::tuple<Tensor, Tensor>> hx) {
  check_input(input);
  std::vector<Tensor> states;
  if (hx) states = {std::get<0>(*hx), std::get<1>(*hx)};
  return lstm_cell(input, states, weight_ih, weight_hh, bias_ih, bias_hh);
}

GRUCell::GRUCell(const GRUCellOptions& o)
    : RNNCellBase("GRUCell", 3, o.input_size(), o.hidden_size(), o.bias()), options(o) {}
Tensor GRUCell::forward(const Tensor& input, const Tensor& hx) {
  check_input(input);
  return gru_cell(input, hx, weight_ih, weight_hh, bias_ih, bias_hh);
}

RNNCell::RNNCell(const RNNCellOptions& o)
    : RNNCellBase("RNNCell", 1, o.input_size(), o.hidden_size(), o.bias()), options(o) {
  TANDEM_CHECK(o.nonlinearity() == "tanh" || o.nonlinearity() == "relu",
               "RNNCell: nonlinearity must be \"tanh\" or \"relu\", got \"", o.nonlinearity(),
               "\"");
}
Tensor RNNCell::forward(const Tensor& input, const Tensor& hx) {
  check_input(input);
  return options.nonlinearity() == "tanh"
             ? rnn_tanh_cell(input, hx, weight_ih, weight_hh, bias_ih, bias_hh)
             : rnn_relu_cell(input, hx, weight_ih, weight_hh, bias_ih, bias_hh);
}

}  // namespace tandem::nn

namespace tandem::nn::utils::rnn {
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value) {
  TANDEM_CHECK(!sequences.empty(), "pad_sequence: no sequences given");
  int64_t longest = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    TANDEM_CHECK(s.defined() && s.dim() >= 1, "pad_sequence: sequence ", i,
                 " is undefined or has no dims");
    const Shape& first = sequences[0].shape();
    TANDEM_CHECK(
        Shape(s.shape().begin() + 1, s.shape().end()) == Shape(first.begin() + 1, first.end()),
        "pad_sequence: sequence ", i, " has shape ", shape_str(s.shape()), " and sequence 0 ",
        shape_str(first), ": the dims after the first must agree");
    longest = std::max(longest, s.size(0));
  }
  std::vector<Tensor> padded;
  for (const Tensor& s : sequences) {
    std::vector<int64_t> pads(2 * static_cast<size_t>(s.dim()),
                              0);  // (left, right) from the last dim
    pads.back() = longest - s.size(0);
    padded.push_back(pads.back() ? pad(s, pads, padding_value) : s);
  }
  return stack(padded, batch_first ? 0 : 1);
}
}  // namespace tandem::nn::utils::rnn
