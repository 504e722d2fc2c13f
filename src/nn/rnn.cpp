#include "tandem/nn/rnn.hpp"

#include <cmath>
#include <sstream>

#include "tandem/core/error.hpp"
#include "tandem/nn/init.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/rnn.hpp"

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
  const double bound = 1.0 / std::sqrt(static_cast<double>(c.hidden_size));
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

}  // namespace tandem::nn
