#include "tandem/nn/rnn.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "tandem/core/error.hpp"
#include "tandem/nn/init.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/index_ops.hpp"
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

namespace {
using utils::rnn::PackedSequence;
// A state in the batch's order as the packed rows order it (sorted_indices), or back.
Tensor permute_state(const Tensor& state, const Tensor& permutation) {
  return state.defined() && permutation.defined()
             ? index_select(state, 1, permutation.to(state.device()))
             : state;
}
PackedSequence packed_like(const PackedSequence& input, Tensor data) {
  return PackedSequence(std::move(data), input.batch_sizes(), input.sorted_indices(),
                        input.unsorted_indices());
}
}  // namespace

std::tuple<PackedSequence, std::tuple<Tensor, Tensor>> LSTM::forward_with_packed_input(
    const PackedSequence& packed, std::optional<std::tuple<Tensor, Tensor>> hx) {
  std::vector<Tensor> state;
  if (hx)
    state = {permute_state(std::get<0>(*hx), packed.sorted_indices()),
             permute_state(std::get<1>(*hx), packed.sorted_indices())};
  auto [output, h, c] =
      lstm(packed.data(), packed.batch_sizes(), state, all_weights(), config_.bias,
           config_.num_layers, config_.dropout, is_training(), config_.bidirectional);
  return {
      packed_like(packed, output),
      {permute_state(h, packed.unsorted_indices()), permute_state(c, packed.unsorted_indices())}};
}

GRU::GRU(const GRUOptions& o) : RNNBase("GRU", 3, config_of(o)), options(o) {}

std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& hx) {
  return gru(input, hx, all_weights(), config_.bias, config_.num_layers, config_.dropout,
             is_training(), config_.bidirectional, config_.batch_first);
}

std::tuple<PackedSequence, Tensor> GRU::forward_with_packed_input(const PackedSequence& packed,
                                                                  const Tensor& hx) {
  auto [output, h] = gru(packed.data(), packed.batch_sizes(),
                         permute_state(hx, packed.sorted_indices()), all_weights(), config_.bias,
                         config_.num_layers, config_.dropout, is_training(), config_.bidirectional);
  return {packed_like(packed, output), permute_state(h, packed.unsorted_indices())};
}

RNN::RNN(const RNNOptions& o) : RNNBase("RNN", 1, config_of(o)), options(o) {
  TANDEM_CHECK(o.nonlinearity_ == "tanh" || o.nonlinearity_ == "relu",
               "RNN: nonlinearity must be \"tanh\" or \"relu\", got \"", o.nonlinearity_, "\"");
}

std::tuple<Tensor, Tensor> RNN::forward(const Tensor& input, const Tensor& hx) {
  const auto& c = config_;
  return options.nonlinearity_ == "tanh"
             ? rnn_tanh(input, hx, all_weights(), c.bias, c.num_layers, c.dropout, is_training(),
                        c.bidirectional, c.batch_first)
             : rnn_relu(input, hx, all_weights(), c.bias, c.num_layers, c.dropout, is_training(),
                        c.bidirectional, c.batch_first);
}

std::tuple<PackedSequence, Tensor> RNN::forward_with_packed_input(const PackedSequence& packed,
                                                                  const Tensor& hx) {
  const auto& c = config_;
  const Tensor h0 = permute_state(hx, packed.sorted_indices());
  auto [output, h] = options.nonlinearity_ == "tanh"
                         ? rnn_tanh(packed.data(), packed.batch_sizes(), h0, all_weights(), c.bias,
                                    c.num_layers, c.dropout, is_training(), c.bidirectional)
                         : rnn_relu(packed.data(), packed.batch_sizes(), h0, all_weights(), c.bias,
                                    c.num_layers, c.dropout, is_training(), c.bidirectional);
  return {packed_like(packed, output), permute_state(h, packed.unsorted_indices())};
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
namespace {
// Sequences that pad_sequence can stack (as many as given, each defined with a first dim, the
// dims after it alike); returns their lengths. `op` names the call in the errors.
std::vector<int64_t> sequence_lengths(const std::vector<Tensor>& sequences, const char* op) {
  TANDEM_CHECK(!sequences.empty(), op, ": no sequences given");
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    TANDEM_CHECK(s.defined() && s.dim() >= 1, op, ": sequence ", i, " is undefined or has no dims");
    const Shape& first = sequences[0].shape();
    TANDEM_CHECK(
        Shape(s.shape().begin() + 1, s.shape().end()) == Shape(first.begin() + 1, first.end()), op,
        ": sequence ", i, " has shape ", shape_str(s.shape()), " and sequence 0 ", shape_str(first),
        ": the dims after the first must agree");
    lengths.push_back(s.size(0));
  }
  return lengths;
}
}  // namespace

Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value) {
  const std::vector<int64_t> lengths = sequence_lengths(sequences, "pad_sequence");
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
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

namespace tandem::nn::utils::rnn {

Tensor invert_permutation(const Tensor& permutation) {
  if (!permutation.defined()) return {};
  TANDEM_CHECK(permutation.dim() == 1 && permutation.dtype() == DType::i64,
               "invert_permutation: expected a 1-d i64 tensor, got ",
               shape_str(permutation.shape()), " ", permutation.dtype());
  const int64_t n = permutation.numel();
  return scatter(empty_like(permutation), 0, permutation,
                 arange(n, TensorOptions(DType::i64).device(permutation.device())));
}

PackedSequence::PackedSequence(Tensor data, Tensor batch_sizes, Tensor sorted_indices,
                               Tensor unsorted_indices)
    : data_(std::move(data)),
      batch_sizes_(std::move(batch_sizes)),
      sorted_indices_(std::move(sorted_indices)),
      unsorted_indices_(unsorted_indices.defined() ? std::move(unsorted_indices)
                                                   : invert_permutation(sorted_indices_)) {}

PackedSequence PackedSequence::to(Device device) const {
  auto move = [device](const Tensor& t) { return t.defined() ? t.to(device) : t; };
  return PackedSequence(move(data_), batch_sizes_, move(sorted_indices_), move(unsorted_indices_));
}

namespace {
// Row t * B + b of the padded (T * B, *) input for each packed row, in packed order.
Tensor packed_rows(const std::vector<int64_t>& batch_sizes, int64_t B, Device device) {
  std::vector<int64_t> rows;
  for (size_t t = 0; t < batch_sizes.size(); ++t)
    for (int64_t b = 0; b < batch_sizes[t]; ++b) rows.push_back(static_cast<int64_t>(t) * B + b);
  return from_vector(rows).to(device);
}
}  // namespace

PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first,
                                    bool enforce_sorted) {
  TANDEM_CHECK(input.defined() && input.dim() >= 2,
               "pack_padded_sequence: expected an input of at least 2 dims (steps and batch), got ",
               input.defined() ? shape_str(input.shape()) : std::string("an undefined tensor"));
  TANDEM_CHECK(lengths.defined() && lengths.dim() == 1 && !is_floating(lengths.dtype()) &&
                   lengths.dtype() != DType::boolean,
               "pack_padded_sequence: lengths must be a 1-d integer tensor");
  const Tensor x = batch_first ? transpose(input, 0, 1) : input;  // (T, B, *)
  const int64_t T = x.size(0), B = x.size(1);
  const auto given = lengths.to(kCPU).to(DType::i64).contiguous().to_vector<int64_t>();
  TANDEM_CHECK(static_cast<int64_t>(given.size()) == B,
               "pack_padded_sequence: expected one length per sequence, got ", given.size(),
               " lengths for a batch of ", B);
  std::vector<int64_t> order(given.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  for (size_t i = 0; i < given.size(); ++i) {
    TANDEM_CHECK(given[i] > 0 && given[i] <= T, "pack_padded_sequence: length ", given[i],
                 " of sequence ", i, " is not in [1, ", T, "], the input's steps");
    TANDEM_CHECK(!enforce_sorted || i == 0 || given[i] <= given[i - 1],
                 "pack_padded_sequence: lengths must not increase with enforce_sorted (got ",
                 given[i - 1], " then ", given[i],
                 "); pass enforce_sorted = false to have the batch sorted");
  }
  Tensor sorted_indices;
  Tensor sorted_x = x;
  if (!enforce_sorted) {
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return given[a] > given[b]; });
    sorted_indices = from_vector(order).to(x.device());
    sorted_x = index_select(x, 1, sorted_indices);
  }
  std::vector<int64_t> batch_sizes;
  for (int64_t t = 0; t < given[order[0]]; ++t) {
    int64_t n = 0;
    while (n < B && given[order[n]] > t) ++n;
    batch_sizes.push_back(n);
  }
  Shape rows_shape = sorted_x.shape();
  rows_shape.erase(rows_shape.begin());
  rows_shape[0] = T * B;
  Tensor data =
      index_select(reshape(sorted_x, rows_shape), 0, packed_rows(batch_sizes, B, x.device()));
  return PackedSequence(data, from_vector(batch_sizes), sorted_indices);
}

std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first,
                                               double padding_value,
                                               std::optional<int64_t> total_length) {
  const Tensor& data = sequence.data();
  const Tensor& sizes = sequence.batch_sizes();
  TANDEM_CHECK(data.defined() && data.dim() >= 1 && sizes.defined() && sizes.dim() == 1 &&
                   sizes.numel() > 0 && sizes.dtype() == DType::i64,
               "pad_packed_sequence: expected packed data and 1-d i64 batch_sizes");
  const auto batch_sizes = sizes.to(kCPU).contiguous().to_vector<int64_t>();
  const int64_t longest = static_cast<int64_t>(batch_sizes.size()), B = batch_sizes[0];
  const int64_t T = total_length.value_or(longest);
  TANDEM_CHECK(T >= longest,
               "pad_packed_sequence: total_length must be at least the longest sequence's ",
               longest, " steps, got ", T);
  int64_t rows = 0;
  std::vector<int64_t> lengths(static_cast<size_t>(B), 0);
  for (size_t t = 0; t < batch_sizes.size(); ++t) {
    TANDEM_CHECK(batch_sizes[t] > 0 && batch_sizes[t] <= (t ? batch_sizes[t - 1] : B),
                 "pad_packed_sequence: batch_sizes must be positive and non-increasing");
    rows += batch_sizes[t];
    for (int64_t b = 0; b < batch_sizes[t]; ++b) ++lengths[static_cast<size_t>(b)];
  }
  TANDEM_CHECK(rows == data.size(0), "pad_packed_sequence: batch_sizes sum to ", rows,
               " rows, the data has ", data.size(0));
  Shape padded_shape = data.shape();
  padded_shape[0] = T * B;
  Tensor padded = index_copy(
      full(padded_shape, padding_value, TensorOptions(data.dtype()).device(data.device())), 0,
      packed_rows(batch_sizes, B, data.device()), data);
  padded_shape[0] = B;
  padded_shape.insert(padded_shape.begin(), T);
  padded = reshape(padded, padded_shape);
  Tensor length_tensor = from_vector(lengths);
  if (sequence.unsorted_indices().defined()) {
    padded = index_select(padded, 1, sequence.unsorted_indices().to(data.device()));
    length_tensor = index_select(length_tensor, 0, sequence.unsorted_indices().to(kCPU));
  }
  return {batch_first ? transpose(padded, 0, 1) : padded, length_tensor};
}

PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted) {
  const std::vector<int64_t> lengths = sequence_lengths(sequences, "pack_sequence");
  return pack_padded_sequence(pad_sequence(sequences), from_vector(lengths), false, enforce_sorted);
}

}  // namespace tandem::nn::utils::rnn
