// LSTM, GRU and the plain RNN over a sequence, from differentiable ops: the input projection of
// every step in one matmul, then per step the hidden projection and the gates.
#include "tandem/ops/rnn.hpp"

#include <algorithm>

#include "tandem/core/error.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/elementwise.hpp"
#include "tandem/ops/linalg.hpp"
#include "tandem/ops/nn_ops.hpp"
#include "tandem/ops/shape_ops.hpp"

namespace tandem {
namespace {

enum class Cell { LSTM, GRU, Tanh, ReLU };

const char* name_of(Cell cell) {
  switch (cell) {
    case Cell::LSTM: return "lstm";
    case Cell::GRU: return "gru";
    case Cell::Tanh: return "rnn_tanh";
    case Cell::ReLU: return "rnn_relu";
  }
  return "rnn";
}

int64_t gates_of(Cell cell) { return cell == Cell::LSTM ? 4 : cell == Cell::GRU ? 3 : 1; }

struct Weights {
  Tensor w_ih, w_hh, b_ih, b_hh;  // biases undefined without has_biases
};

struct Sequence {
  Tensor output, h, c;  // c for the LSTM only
};

// One direction of one layer over packed steps: x (S, in) holds step t's batch_sizes[t] rows
// after step t - 1's (the sequences sorted longest first, so a step's batch is a prefix of the
// last's); h0 and c0 (N, H). A sequence's final state is its state after its last step: forward,
// the rows that leave the batch are set aside; in reverse, they join it from h0 as they start.
Sequence run_direction(Cell cell, const Tensor& x, const std::vector<int64_t>& batch_sizes,
                       const Tensor& h0, const Tensor& c0, const Weights& w, bool reverse) {
  const auto steps = static_cast<int64_t>(batch_sizes.size());
  const int64_t H = h0.size(-1);
  // The GRU keeps b_hh with the hidden projection (r scales it); the others add it here once.
  Tensor gi = linear(x, w.w_ih, w.b_ih);
  if (cell != Cell::GRU && w.b_hh.defined()) gi = add(gi, w.b_hh);
  auto part = [H](const Tensor& t, int64_t k) { return narrow(t, -1, k * H, H); };
  std::vector<int64_t> offset(batch_sizes.size(), 0);
  for (size_t t = 1; t < batch_sizes.size(); ++t) offset[t] = offset[t - 1] + batch_sizes[t - 1];
  const int64_t first = reverse ? batch_sizes.back() : batch_sizes.front();
  Tensor h = first == h0.size(0) ? h0 : narrow(h0, 0, 0, first);
  Tensor c = !c0.defined() || first == c0.size(0) ? c0 : narrow(c0, 0, 0, first);
  std::vector<Tensor> out(batch_sizes.size()), ended_h, ended_c;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    const int64_t rows = batch_sizes[static_cast<size_t>(t)], have = h.size(0);
    if (rows < have) {  // forward: sequences [rows, have) ended at the last step
      ended_h.push_back(narrow(h, 0, rows, have - rows));
      h = narrow(h, 0, 0, rows);
      if (c.defined()) {
        ended_c.push_back(narrow(c, 0, rows, have - rows));
        c = narrow(c, 0, 0, rows);
      }
    } else if (rows > have) {  // reverse: sequences [have, rows) start here
      h = cat({h, narrow(h0, 0, have, rows - have)}, 0);
      if (c.defined()) c = cat({c, narrow(c0, 0, have, rows - have)}, 0);
    }
    const Tensor xi = narrow(gi, 0, offset[static_cast<size_t>(t)], rows);
    const Tensor gh = linear(h, w.w_hh, cell == Cell::GRU ? w.b_hh : Tensor());
    switch (cell) {
      case Cell::LSTM: {
        const Tensor gates = add(xi, gh);
        c = add(mul(sigmoid(part(gates, 1)), c),
                mul(sigmoid(part(gates, 0)), tanh(part(gates, 2))));
        h = mul(sigmoid(part(gates, 3)), tanh(c));
        break;
      }
      case Cell::GRU: {
        const Tensor r = sigmoid(add(part(xi, 0), part(gh, 0)));
        const Tensor z = sigmoid(add(part(xi, 1), part(gh, 1)));
        const Tensor n = tanh(add(part(xi, 2), mul(r, part(gh, 2))));
        h = add(n, mul(z, sub(h, n)));  // (1 - z) n + z h
        break;
      }
      case Cell::Tanh: h = tanh(add(xi, gh)); break;
      case Cell::ReLU: h = relu(add(xi, gh)); break;
    }
    out[static_cast<size_t>(t)] = h;
  }
  // The sequences that ended early, back in batch order (the last to end holds the first rows).
  auto in_order = [](std::vector<Tensor>& ended, const Tensor& rest) {
    if (ended.empty()) return rest;
    ended.push_back(rest);
    std::reverse(ended.begin(), ended.end());
    return cat(ended, 0);
  };
  return {steps == 1 ? out[0] : cat(out, 0), in_order(ended_h, h), in_order(ended_c, c)};
}

// The layers over packed x (S, in); h0 and c0 (layers * directions, N, H) or undefined (zeros).
Sequence run_packed(Cell cell, Tensor x, const std::vector<int64_t>& batch_sizes, const Tensor& h0,
                    const Tensor& c0, const std::vector<Tensor>& params, bool has_biases,
                    int64_t num_layers, double dropout_p, bool train, bool bidirectional) {
  const char* name = name_of(cell);
  const int64_t directions = bidirectional ? 2 : 1, per = has_biases ? 4 : 2;
  const int64_t G = gates_of(cell), H = params[1].size(-1);
  std::vector<Tensor> hs, cs;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    const int64_t in = x.size(1);
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < directions; ++d) {
      const int64_t k = layer * directions + d;
      const auto at = [&](int64_t j) { return params[static_cast<size_t>(k * per + j)]; };
      Weights w{at(0), at(1), has_biases ? at(2) : Tensor(), has_biases ? at(3) : Tensor()};
      const std::string where =
          std::string(name) + ": layer " + std::to_string(layer) + (d ? " (reverse)" : "");
      TANDEM_CHECK(w.w_ih.shape() == Shape({G * H, in}), where, ": expected w_ih of shape ",
                   shape_str({G * H, in}), ", got ", shape_str(w.w_ih.shape()));
      TANDEM_CHECK(w.w_hh.shape() == Shape({G * H, H}), where, ": expected w_hh of shape ",
                   shape_str({G * H, H}), ", got ", shape_str(w.w_hh.shape()));
      for (const Tensor* b : {&w.b_ih, &w.b_hh})
        TANDEM_CHECK(!has_biases || b->shape() == Shape({G * H}), where,
                     ": expected biases of shape ", shape_str({G * H}), ", got ",
                     shape_str(b->shape()));
      Sequence seq = run_direction(cell, x, batch_sizes, select(h0, 0, k),
                                   c0.defined() ? select(c0, 0, k) : Tensor(), w, d == 1);
      outs.push_back(seq.output);
      hs.push_back(seq.h);
      cs.push_back(seq.c);
    }
    x = directions == 2 ? cat(outs, 1) : outs[0];
    if (dropout_p > 0 && train && layer + 1 < num_layers) x = dropout(x, dropout_p, true);
  }
  Sequence result{x, stack(hs, 0), Tensor()};
  if (cell == Cell::LSTM) result.c = stack(cs, 0);
  return result;
}

// What both forms check before they run: the hyper-parameters and the number of weights.
void check_config(const char* name, const std::vector<Tensor>& params, bool has_biases,
                  int64_t num_layers, double dropout_p, bool bidirectional) {
  const int64_t directions = bidirectional ? 2 : 1, per = has_biases ? 4 : 2;
  TANDEM_CHECK(num_layers >= 1, name, ": num_layers must be >= 1, got ", num_layers);
  TANDEM_CHECK(dropout_p >= 0 && dropout_p <= 1, name, ": dropout must be in [0, 1], got ",
               dropout_p);
  TANDEM_CHECK(static_cast<int64_t>(params.size()) == num_layers * directions * per, name,
               ": expected ", num_layers * directions * per, " weights (", num_layers, " layers, ",
               directions, " directions, ", per, " each), got ", params.size());
  for (size_t k = 0; k < params.size(); ++k)
    TANDEM_CHECK(params[k].defined(), name, ": weight ", k, " is undefined");
  TANDEM_CHECK(params[0].dim() == 2 && params[1].dim() == 2, name,
               ": expected 2-d weights w_ih and w_hh, got ", params[0].dim(), " and ",
               params[1].dim(), " dims");
}

// A state given (checked: `shape`, x's dtype and device) or zeros (layers * directions, N, H).
Tensor state_or_zeros(const char* name, const char* what, const Tensor& s, const Shape& shape,
                      const Tensor& x) {
  if (!s.defined()) return zeros(shape, TensorOptions(x.dtype()).device(x.device()));
  TANDEM_CHECK(s.shape() == shape, name, ": expected ", what, " of shape ", shape_str(shape),
               ", got ", shape_str(s.shape()));
  TANDEM_CHECK(s.dtype() == x.dtype() && s.device() == x.device(), name, ": expected ", what,
               " in the input's dtype and device (", x.dtype(), " on ", x.device(), "), got ",
               s.dtype(), " on ", s.device());
  return s;
}

Sequence run_layers(Cell cell, const Tensor& input, const Tensor& h0, const Tensor& c0,
                    const std::vector<Tensor>& params, bool has_biases, int64_t num_layers,
                    double dropout_p, bool train, bool bidirectional, bool batch_first) {
  const char* name = name_of(cell);
  check_config(name, params, has_biases, num_layers, dropout_p, bidirectional);
  TANDEM_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 3), name,
               ": expected an input of 3 dims (batched) or 2 (unbatched), got ",
               input.defined() ? std::to_string(input.dim()) + " dims" : "an undefined tensor");
  const bool batched = input.dim() == 3;
  Tensor x = !batched ? unsqueeze(input, 1) : batch_first ? transpose(input, 0, 1) : input;
  TANDEM_CHECK(x.size(2) == params[0].size(1), name, ": the input has ", x.size(2),
               " features (its last dim), the first layer's weights take ", params[0].size(1));
  TANDEM_CHECK(x.size(0) > 0, name, ": expected a sequence of at least one step, got input ",
               shape_str(input.shape()), batch_first ? " (batch_first)" : "");
  const int64_t T = x.size(0), N = x.size(1), H = params[1].size(-1);
  const int64_t states = num_layers * (bidirectional ? 2 : 1);
  const Shape given = batched ? Shape{states, N, H} : Shape{states, H};
  auto state = [&](const Tensor& s, const char* what) {
    Tensor t = state_or_zeros(name, what, s, given, x);
    return batched ? t : unsqueeze(t, 1);
  };
  // Every step has the whole batch: the packed form with T steps of N rows.
  Sequence seq = run_packed(
      cell, reshape(x, {T * N, x.size(2)}), std::vector<int64_t>(static_cast<size_t>(T), N),
      state(h0, "hidden state h0"), cell == Cell::LSTM ? state(c0, "cell state c0") : Tensor(),
      params, has_biases, num_layers, dropout_p, train, bidirectional);
  Tensor out = reshape(seq.output, {T, N, seq.output.size(1)});
  auto unbatch = [batched](const Tensor& t, int64_t dim) { return batched ? t : squeeze(t, dim); };
  Sequence result{!batched      ? squeeze(out, 1)
                  : batch_first ? transpose(out, 0, 1)
                                : out,
                  unbatch(seq.h, 1), Tensor()};
  if (cell == Cell::LSTM) result.c = unbatch(seq.c, 1);
  return result;
}

// The packed form: data (S, in) and batch_sizes (i64, on the CPU, positive, non-increasing,
// summing to S), as ATen's lstm(data, batch_sizes, ...); states (layers * directions, N, H), N
// the first step's batch.
Sequence run_layers_packed(Cell cell, const Tensor& data, const Tensor& batch_sizes,
                           const Tensor& h0, const Tensor& c0, const std::vector<Tensor>& params,
                           bool has_biases, int64_t num_layers, double dropout_p, bool train,
                           bool bidirectional) {
  const char* name = name_of(cell);
  check_config(name, params, has_biases, num_layers, dropout_p, bidirectional);
  TANDEM_CHECK(data.defined() && data.dim() == 2, name,
               ": expected packed data of 2 dims (steps' rows, features), got ",
               data.defined() ? shape_str(data.shape()) : std::string("an undefined tensor"));
  TANDEM_CHECK(data.size(1) == params[0].size(1), name, ": the input has ", data.size(1),
               " features (its last dim), the first layer's weights take ", params[0].size(1));
  TANDEM_CHECK(batch_sizes.defined() && batch_sizes.dim() == 1 && batch_sizes.numel() > 0 &&
                   batch_sizes.dtype() == DType::i64 && batch_sizes.device() == kCPU,
               name, ": batch_sizes must be a non-empty 1-d i64 tensor on the CPU");
  const auto sizes = batch_sizes.contiguous().to_vector<int64_t>();
  int64_t total = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    TANDEM_CHECK(sizes[t] > 0 && (t == 0 || sizes[t] <= sizes[t - 1]), name,
                 ": batch_sizes must be positive and non-increasing, got ", sizes[t], " at step ",
                 t);
    total += sizes[t];
  }
  TANDEM_CHECK(total == data.size(0), name, ": batch_sizes sum to ", total, " rows, data has ",
               data.size(0));
  const int64_t states = num_layers * (bidirectional ? 2 : 1), H = params[1].size(-1);
  const Shape shape{states, sizes[0], H};
  return run_packed(
      cell, data, sizes, state_or_zeros(name, "hidden state h0", h0, shape, data),
      cell == Cell::LSTM ? state_or_zeros(name, "cell state c0", c0, shape, data) : Tensor(),
      params, has_biases, num_layers, dropout_p, train, bidirectional);
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, const std::vector<Tensor>& hx,
                                        const std::vector<Tensor>& params, bool has_biases,
                                        int64_t num_layers, double dropout, bool train,
                                        bool bidirectional, bool batch_first) {
  TANDEM_CHECK(hx.empty() || hx.size() == 2, "lstm: hx must be empty or {h0, c0}, got ", hx.size(),
               " tensors");
  Sequence s =
      run_layers(Cell::LSTM, input, hx.empty() ? Tensor() : hx[0], hx.empty() ? Tensor() : hx[1],
                 params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  return {s.output, s.h, s.c};
}

std::tuple<Tensor, Tensor> gru(const Tensor& input, const Tensor& hx,
                               const std::vector<Tensor>& params, bool has_biases,
                               int64_t num_layers, double dropout, bool train, bool bidirectional,
                               bool batch_first) {
  Sequence s = run_layers(Cell::GRU, input, hx, Tensor(), params, has_biases, num_layers, dropout,
                          train, bidirectional, batch_first);
  return {s.output, s.h};
}

std::tuple<Tensor, Tensor> rnn_tanh(const Tensor& input, const Tensor& hx,
                                    const std::vector<Tensor>& params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train,
                                    bool bidirectional, bool batch_first) {
  Sequence s = run_layers(Cell::Tanh, input, hx, Tensor(), params, has_biases, num_layers, dropout,
                          train, bidirectional, batch_first);
  return {s.output, s.h};
}

std::tuple<Tensor, Tensor> rnn_relu(const Tensor& input, const Tensor& hx,
                                    const std::vector<Tensor>& params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train,
                                    bool bidirectional, bool batch_first) {
  Sequence s = run_layers(Cell::ReLU, input, hx, Tensor(), params, has_biases, num_layers, dropout,
                          train, bidirectional, batch_first);
  return {s.output, s.h};
}

std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& data, const Tensor& batch_sizes,
                                        const std::vector<Tensor>& hx,
                                        const std::vector<Tensor>& params, bool has_biases,
                                        int64_t num_layers, double dropout, bool train,
                                        bool bidirectional) {
  TANDEM_CHECK(hx.empty() || hx.size() == 2, "lstm: hx must be empty or {h0, c0}, got ", hx.size(),
               " tensors");
  Sequence s = run_layers_packed(Cell::LSTM, data, batch_sizes, hx.empty() ? Tensor() : hx[0],
                                 hx.empty() ? Tensor() : hx[1], params, has_biases, num_layers,
                                 dropout, train, bidirectional);
  return {s.output, s.h, s.c};
}

std::tuple<Tensor, Tensor> gru(const Tensor& data, const Tensor& batch_sizes, const Tensor& hx,
                               const std::vector<Tensor>& params, bool has_biases,
                               int64_t num_layers, double dropout, bool train, bool bidirectional) {
  Sequence s = run_layers_packed(Cell::GRU, data, batch_sizes, hx, Tensor(), params, has_biases,
                                 num_layers, dropout, train, bidirectional);
  return {s.output, s.h};
}

std::tuple<Tensor, Tensor> rnn_tanh(const Tensor& data, const Tensor& batch_sizes, const Tensor& hx,
                                    const std::vector<Tensor>& params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train,
                                    bool bidirectional) {
  Sequence s = run_layers_packed(Cell::Tanh, data, batch_sizes, hx, Tensor(), params, has_biases,
                                 num_layers, dropout, train, bidirectional);
  return {s.output, s.h};
}

std::tuple<Tensor, Tensor> rnn_relu(const Tensor& data, const Tensor& batch_sizes, const Tensor& hx,
                                    const std::vector<Tensor>& params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train,
                                    bool bidirectional) {
  Sequence s = run_layers_packed(Cell::ReLU, data, batch_sizes, hx, Tensor(), params, has_biases,
                                 num_layers, dropout, train, bidirectional);
  return {s.output, s.h};
}

namespace {
// A cell's weights as its sequence form takes them, and whether it has biases.
std::vector<Tensor> cell_params(const char* op, const Tensor& input, const Tensor& w_ih,
                                const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  TANDEM_CHECK(input.defined() && w_ih.defined() && w_hh.defined(), op,
               ": input, w_ih and w_hh must be defined");
  TANDEM_CHECK(input.dim() == 1 || input.dim() == 2, op, ": expected an input (N, I) or (I), got ",
               shape_str(input.shape()));
  TANDEM_CHECK(b_ih.defined() == b_hh.defined(), op, ": give both biases or neither");
  if (b_ih.defined()) return {w_ih, w_hh, b_ih, b_hh};
  return {w_ih, w_hh};
}
// A state (N, H) or (H) as the sequence form's (1, N, H) or (1, H); undefined stays undefined.
Tensor as_layers(const Tensor& h) { return h.defined() ? h.unsqueeze(0) : h; }
}  // namespace

std::tuple<Tensor, Tensor> lstm_cell(const Tensor& input, const std::vector<Tensor>& hx,
                                     const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                     const Tensor& b_hh) {
  const auto params = cell_params("lstm_cell", input, w_ih, w_hh, b_ih, b_hh);
  TANDEM_CHECK(hx.empty() || hx.size() == 2, "lstm_cell: hx is {h, c} or empty, got ", hx.size(),
               " tensors");
  std::vector<Tensor> states;
  for (const Tensor& h : hx) states.push_back(as_layers(h));
  auto [out, h, c] =
      lstm(input.unsqueeze(0), states, params, params.size() == 4, 1, 0.0, false, false, false);
  return {h.squeeze(0), c.squeeze(0)};
}

namespace {
Tensor one_state_cell(const char* op, Cell cell, const Tensor& input, const Tensor& hx,
                      const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                      const Tensor& b_hh) {
  const auto params = cell_params(op, input, w_ih, w_hh, b_ih, b_hh);
  Sequence s = run_layers(cell, input.unsqueeze(0), as_layers(hx), Tensor(), params,
                          params.size() == 4, 1, 0.0, false, false, false);
  return s.h.squeeze(0);
}
}  // namespace

Tensor gru_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                const Tensor& b_ih, const Tensor& b_hh) {
  return one_state_cell("gru_cell", Cell::GRU, input, hx, w_ih, w_hh, b_ih, b_hh);
}
Tensor rnn_tanh_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih, const Tensor& b_hh) {
  return one_state_cell("rnn_tanh_cell", Cell::Tanh, input, hx, w_ih, w_hh, b_ih, b_hh);
}
Tensor rnn_relu_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih, const Tensor& b_hh) {
  return one_state_cell("rnn_relu_cell", Cell::ReLU, input, hx, w_ih, w_hh, b_ih, b_hh);
}
}  // namespace tandem
