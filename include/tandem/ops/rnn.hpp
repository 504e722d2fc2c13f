// Recurrent layers as functions of their weights, under ATen's names and arguments (torch::lstm,
// torch::gru, torch::rnn_tanh, torch::rnn_relu): the modules in nn/rnn.hpp call them. Each is
// composed of differentiable ops (one matmul over all time steps for the input projection, then
// per step a matmul and the gates), so autograd, autocast and every backend come with them.
#pragma once

#include <tuple>
#include <vector>

#include "tandem/core/tensor.hpp"

namespace tandem {

/// input (T, N, I), or (N, T, I) with batch_first, or unbatched (T, I); hx = {h0, c0}, each
/// (num_layers * directions, N, H) (or without N), or empty for zeros. params: per layer and
/// direction w_ih (4H, in), w_hh (4H, H), then b_ih, b_hh (4H) with has_biases, as torch orders
/// them; gates i, f, g, o. Dropout applies to each layer's output but the last's, when train.
/// Returns (output (T, N, directions * H), h_n, c_n).
std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, const std::vector<Tensor>& hx,
                                        const std::vector<Tensor>& params, bool has_biases,
                                        int64_t num_layers, double dropout, bool train,
                                        bool bidirectional, bool batch_first);
/// As lstm with one state h and gates r, z, n: n = tanh(W_in x + b_in + r (W_hn h + b_hn)),
/// h' = (1 - z) n + z h. Returns (output, h_n).
std::tuple<Tensor, Tensor> gru(const Tensor& input, const Tensor& hx,
                               const std::vector<Tensor>& params, bool has_biases,
                               int64_t num_layers, double dropout, bool train, bool bidirectional,
                               bool batch_first);
/// h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (rnn_relu: relu). Returns (output, h_n).
std::tuple<Tensor, Tensor> rnn_tanh(const Tensor& input, const Tensor& hx,
                                    const std::vector<Tensor>& params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train,
                                    bool bidirectional, bool batch_first);
std::tuple<Tensor, Tensor> rnn_relu(const Tensor& input, const Tensor& hx,
                                    const std::vector<Tensor>& params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train,
                                    bool bidirectional, bool batch_first);

/// The packed forms, as ATen's lstm(data, batch_sizes, ...) under a PackedSequence: data
/// (S, I) holds step t's batch_sizes[t] rows after step t - 1's, the sequences sorted longest
/// first; batch_sizes a 1-d i64 CPU tensor, positive and non-increasing; states (layers *
/// directions, N, H) with N = batch_sizes[0], in that sorted order; each sequence's h_n and c_n
/// are its states after its own last step. Returns (output data (S, directions * H), h_n[, c_n]).
std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& data, const Tensor& batch_sizes,
                                        const std::vector<Tensor>& hx,
                                        const std::vector<Tensor>& params, bool has_biases,
                                        int64_t num_layers, double dropout, bool train,
                                        bool bidirectional);
std::tuple<Tensor, Tensor> gru(const Tensor& data, const Tensor& batch_sizes, const Tensor& hx,
                               const std::vector<Tensor>& params, bool has_biases,
                               int64_t num_layers, double dropout, bool train, bool bidirectional);
std::tuple<Tensor, Tensor> rnn_tanh(const Tensor& data, const Tensor& batch_sizes, const Tensor& hx,
                                    const std::vector<Tensor>& params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train,
                                    bool bidirectional);
std::tuple<Tensor, Tensor> rnn_relu(const Tensor& data, const Tensor& batch_sizes, const Tensor& hx,
                                    const std::vector<Tensor>& params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train,
                                    bool bidirectional);

/// One step of each, as ATen's torch::lstm_cell, gru_cell, rnn_tanh_cell and rnn_relu_cell:
/// input (N, I) or unbatched (I); hx (N, H) or (H) (lstm_cell: {h, c}, or empty for zeros;
/// gru_cell and the rnn cells: undefined for zeros); both biases or neither. Each is its sequence
/// form over one time step, so the gates are the same ops. lstm_cell returns (h', c').
std::tuple<Tensor, Tensor> lstm_cell(const Tensor& input, const std::vector<Tensor>& hx,
                                     const Tensor& w_ih, const Tensor& w_hh,
                                     const Tensor& b_ih = {}, const Tensor& b_hh = {});
Tensor gru_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                const Tensor& b_ih = {}, const Tensor& b_hh = {});
Tensor rnn_tanh_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = {}, const Tensor& b_hh = {});
Tensor rnn_relu_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = {}, const Tensor& b_hh = {});

}  // namespace tandem
