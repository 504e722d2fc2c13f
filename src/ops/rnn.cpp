// LSTM, GRU and the plain RNN over a sequence, from differentiable ops: the input projection of
// every step in one matmul, then per step the hidden projection and the gates.
#include "tandem/ops/rnn.hpp"

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

// One direction of one layer over x (T, N, in) from (h, c), each (N, H).
Sequence run_direction(Cell cell, const Tensor& x, Tensor h, Tensor c, const Weights& w,
                       bool reverse) {
  const int64_t steps = x.size(0), H = h.size(-1);
  // The GRU keeps b_hh with the hidden projection (r scales it); the others add it here once.
  Tensor gi = linear(x, w.w_ih, w.b_ih);
  if (cell != Cell::GRU && w.b_hh.defined()) gi = add(gi, w.b_hh);
  auto part = [H](const Tensor& t, int64_t k) { return narrow(t, -1, k * H, H); };
  std::vector<Tensor> out(static_cast<size_t>(steps));
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    const Tensor xi = select(gi, 0, t);
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
  return {stack(out, 0), h, c};
}

Sequence run_layers(Cell cell, const Tensor& input, const Tensor& h0, const Tensor& c0,
                    const std::vector<Tensor>& params, bool has_biases, int64_t num_layers,
                    double dropout_p, bool train, bool bidirectional, bool batch_first) {
  const char* name = name_of(cell);
  const int64_t directions = bidirectional ? 2 : 1, per = has_biases ? 4 : 2;
  TANDEM_CHECK(num_layers >= 1, name, ": num_layers must be >= 1, got ", num_layers);
  TANDEM_CHECK(dropout_p >= 0 && dropout_p <= 1, name, ": dropout must be in [0, 1], got ",
               dropout_p);
  TANDEM_CHECK(static_cast<int64_t>(params.size()) == num_layers * directions * per, name,
               ": expected ", num_layers * directions * per, " weights (", num_layers, " layers, ",
               directions, " directions, ", per, " each), got ", params.size());
  for (size_t k = 0; k < params.size(); ++k)
    TANDEM_CHECK(params[k].defined(), name, ": weight ", k, " is undefined");
  TANDEM_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 3), name,
               ": expected an input of 3 dims (batched) or 2 (unbatched), got ",
               input.defined() ? std::to_string(input.dim()) + " dims" : "an undefined tensor");
  const bool batched = input.dim() == 3;
  Tensor x = !batched ? unsqueeze(input, 1) : batch_first ? transpose(input, 0, 1) : input;
  TANDEM_CHECK(params[0].dim() == 2 && x.size(2) == params[0].size(1), name, ": the input has ",
               x.size(2),
               " features (its last dim), the first layer's "
               "weights take ",
               params[0].dim() == 2 ? params[0].size(1) : -1);
  TANDEM_CHECK(x.size(0) > 0, name, ": expected a sequence of at least one step, got input ",
               shape_str(input.shape()), batch_first ? " (batch_first)" : "");
  const int64_t G = gates_of(cell), H = params[1].size(-1), N = x.size(1);
  const int64_t states = num_layers * directions;
  const Shape state_shape = batched ? Shape{states, N, H} : Shape{states, H};
  auto state = [&](const Tensor& s, const char* what) {
    if (!s.defined()) return zeros({states, N, H}, TensorOptions(x.dtype()).device(x.device()));
    TANDEM_CHECK(s.shape() == state_shape, name, ": expected ", what, " of shape ",
                 shape_str(state_shape), ", got ", shape_str(s.shape()));
    TANDEM_CHECK(s.dtype() == x.dtype() && s.device() == x.device(), name, ": expected ", what,
                 " in the input's dtype and device (", x.dtype(), " on ", x.device(), "), got ",
                 s.dtype(), " on ", s.device());
    return batched ? s : unsqueeze(s, 1);
  };
  const Tensor h = state(h0, "hidden state h0");
  const Tensor c = cell == Cell::LSTM ? state(c0, "cell state c0") : Tensor();
  std::vector<Tensor> hs, cs;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    const int64_t in = x.size(2);
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
      Sequence seq = run_direction(cell, x, select(h, 0, k),
                                   c.defined() ? select(c, 0, k) : Tensor(), w, d == 1);
      outs.push_back(seq.output);
      hs.push_back(seq.h);
      cs.push_back(seq.c);
    }
    x = directions == 2 ? cat(outs, 2) : outs[0];
    if (dropout_p > 0 && train && layer + 1 < num_layers) x = dropout(x, dropout_p, true);
  }
  auto unbatch = [batched](const Tensor& t, int64_t dim) { return batched ? t : squeeze(t, dim); };
  Sequence result{!batched      ? squeeze(x, 1)
                  : batch_first ? transpose(x, 0, 1)
                                : x,
                  unbatch(stack(hs, 0), 1), Tensor()};
  if (cell == Cell::LSTM) result.c = unbatch(stack(cs, 0), 1);
  return result;
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
template <typename Sequence>
Tensor one_state_cell(const char* op, Sequence&& sequence, const Tensor& input, const Tensor& hx,
                      const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                      const Tensor& b_hh) {
  const auto params = cell_params(op, input, w_ih, w_hh, b_ih, b_hh);
  auto [out, h] = sequence(input.unsqueeze(0), as_layers(hx), params, params.size() == 4, 1, 0.0,
                           false, false, false);
  return h.squeeze(0);
}
}  // namespace

Tensor gru_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                const Tensor& b_ih, const Tensor& b_hh) {
  return one_state_cell("gru_cell", gru, input, hx, w_ih, w_hh, b_ih, b_hh);
}
Tensor rnn_tanh_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih, const Tensor& b_hh) {
  return one_state_cell("rnn_tanh_cell", rnn_tanh, input, hx, w_ih, w_hh, b_ih, b_hh);
}
Tensor rnn_relu_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih, const Tensor& b_hh) {
  return one_state_cell("rnn_relu_cell", rnn_relu, input, hx, w_ih, w_hh, b_ih, b_hh);
}
}  // namespace tandem
