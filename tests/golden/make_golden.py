#!/usr/bin/python3
"""Regenerates the golden values the op tests compare against, with PyTorch (Debian's
python3-torch, 1.13, CPU). Run from anywhere: /usr/bin/python3 tests/golden/make_golden.py

Each case records its inputs, the output, a gradient for the output and the gradients of the
inputs that require them. The C++ test (tests/ops/test_golden.cpp) runs the same op, by the
case's name, on the same inputs. The matmul-based cases' last bits depend on PyTorch's BLAS (the
committed values up to "rnn_relu" came from the reference BLAS, the rest from OpenBLAS); the
test's tolerances cover either."""
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

torch.manual_seed(1234)
HERE = os.path.dirname(os.path.abspath(__file__))
cases = []


def enc(t):
    t = t.detach()
    dtype = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.bool: "bool"}[t.dtype]
    data = t.reshape(-1).tolist()
    if t.is_floating_point():  # JSON has no NaN or infinity: they go as strings
        data = [x if math.isfinite(x) else str(x) for x in data]
    return {"shape": list(t.shape), "dtype": dtype, "data": data}


def case(name, fn, *inputs, grad=True, nograd=()):
    """inputs: tensors; floating ones get gradients when grad is True, except those whose
    positions are in nograd (class weights: torch has no derivative for them)."""
    ins = [x.clone().requires_grad_(grad and x.is_floating_point() and k not in nograd)
           for k, x in enumerate(inputs)]
    out = fn(*ins)
    entry = {"name": name, "inputs": [enc(x) for x in ins], "output": enc(out)}
    if grad and out.is_floating_point() and out.requires_grad:
        g = torch.randn(out.shape, dtype=out.dtype)
        out.backward(g)
        entry["grad_output"] = enc(g)
        entry["grads"] = [enc(x.grad) if x.grad is not None else None for x in ins]
    cases.append(entry)


def r(*shape):
    return torch.randn(*shape, dtype=torch.float32)


pos = lambda *s: torch.rand(*s) + 0.5
# elementwise with broadcasting
case("add", lambda a, b: a + b, r(2, 3, 4), r(3, 1))
case("add_alpha", lambda a, b: torch.add(a, b, alpha=2.5), r(4, 5), r(5))
case("sub", lambda a, b: a - b, r(3, 4), r(2, 1, 4))
case("mul", lambda a, b: a * b, r(2, 3), r(2, 3))
case("div", lambda a, b: a / b, r(3, 4), pos(4))
case("neg", lambda a: -a, r(5))
case("pow_scalar", lambda a: a.pow(3.0), r(6))
case("pow_tensor", lambda a, b: a.pow(b), pos(3, 4), r(3, 4))
case("exp", torch.exp, r(7))
case("log", torch.log, pos(7))
case("sqrt", torch.sqrt, pos(7))
case("abs", torch.abs, r(7))
case("clamp", lambda a: torch.clamp(a, -0.5, 0.7), r(20))
case("relu", torch.relu, r(3, 5))
case("gelu", F.gelu, r(3, 5))
case("gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), r(3, 5))
case("sigmoid", torch.sigmoid, r(3, 5))
case("tanh", torch.tanh, r(3, 5))
case("where", lambda c, a, b: torch.where(c, a, b), torch.rand(3, 4) > 0.5, r(3, 4), r(4))
# reductions
x = r(3, 4, 5)
case("sum_all", lambda a: a.sum(), x)
case("sum_dims", lambda a: a.sum(dim=(0, 2)), x)
case("sum_keepdim", lambda a: a.sum(dim=1, keepdim=True), x)
case("mean_dims", lambda a: a.mean(dim=(1,)), x)
case("max_all", lambda a: a.max(), x)
case("min_all", lambda a: a.min(), x)
case("max_dim", lambda a: a.max(dim=1)[0], x)
case("max_dim_indices", lambda a: a.max(dim=2)[1], x, grad=False)
case("min_dim", lambda a: a.min(dim=0, keepdim=True)[0], x)
case("argmax", lambda a: a.argmax(dim=1), x, grad=False)
case("var", lambda a: a.var(dim=2), x)
case("var_all_biased", lambda a: a.var(unbiased=False), x)
# linear algebra
case("matmul_2d", torch.matmul, r(4, 6), r(6, 3))
case("matmul_batched_broadcast", torch.matmul, r(2, 1, 3, 4), r(5, 4, 2))
case("matmul_vec", torch.matmul, r(3, 4), r(4))
case("matmul_3d_2d", torch.matmul, r(2, 3, 4), r(4, 5))
case("linear", F.linear, r(5, 4), r(3, 4), r(3))
# convolution, normalization, pooling
case("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1), r(2, 3, 6, 5), r(4, 3, 3, 3), r(4))
case("conv2d_stride_dilation", lambda x, w: F.conv2d(x, w, stride=2, padding=2, dilation=2),
     r(2, 2, 9, 8), r(3, 2, 3, 3))
case("conv2d_groups", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), groups=2),
     r(2, 4, 7, 6), r(6, 2, 3, 2), r(6))
case("conv2d_1x1", lambda x, w: F.conv2d(x, w), r(2, 5, 4, 4), r(3, 5, 1, 1))
case("conv2d_wide", lambda x, w, b: F.conv2d(x, w, b, padding=1), r(2, 5, 9, 20), r(12, 5, 3, 3), r(12))
rm, rv = torch.randn(3), torch.rand(3) + 0.5
case("batch_norm_train", lambda x, w, b: F.batch_norm(x, rm.clone(), rv.clone(), w, b, True, 0.1, 1e-5),
     r(4, 3, 5, 5), r(3), r(3))
case("batch_norm_eval",
     lambda x, w, b, m, v: F.batch_norm(x, m.detach(), v.detach(), w, b, False, 0.1, 1e-5),
     r(4, 3, 5, 5), r(3), r(3), rm, rv)
case("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1), r(2, 3, 9, 8))
case("max_pool2d_dilation", lambda x: F.max_pool2d(x, 2, 1, 0, 2), r(1, 2, 6, 6))
case("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1), r(2, 3, 9, 8))
case("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 2)), r(2, 3, 7, 5))
case("adaptive_avg_pool2d_1", lambda x: F.adaptive_avg_pool2d(x, 1), r(2, 3, 4, 4))
# softmax and losses
case("softmax", lambda a: F.softmax(a, dim=1), r(4, 6))
case("log_softmax", lambda a: F.log_softmax(a, dim=-1), r(4, 6))
tgt = torch.tensor([1, 0, 4, 2, 4, 3])
tgt_ign = torch.tensor([1, -100, 4, 2, -100, 3])
case("cross_entropy", lambda a, t: F.cross_entropy(a, t), r(6, 5), tgt)
case("cross_entropy_sum", lambda a, t: F.cross_entropy(a, t, reduction="sum"), r(6, 5), tgt)
case("cross_entropy_none", lambda a, t: F.cross_entropy(a, t, reduction="none"), r(6, 5), tgt)
case("cross_entropy_ignore", lambda a, t: F.cross_entropy(a, t), r(6, 5), tgt_ign)
case("cross_entropy_smoothing", lambda a, t: F.cross_entropy(a, t, label_smoothing=0.1), r(6, 5), tgt)
case("cross_entropy_smoothing_ignore",
     lambda a, t: F.cross_entropy(a, t, label_smoothing=0.2, ignore_index=-100), r(6, 5), tgt_ign)
case("cross_entropy_smoothing_sum",
     lambda a, t: F.cross_entropy(a, t, label_smoothing=0.2, reduction="sum"), r(6, 5), tgt_ign)
case("cross_entropy_spatial", lambda a, t: F.cross_entropy(a, t), r(2, 4, 3, 3),
     torch.randint(0, 4, (2, 3, 3)))
case("nll_loss", lambda a, t: F.nll_loss(a, t), r(6, 5), tgt)
case("mse_loss", F.mse_loss, r(3, 4), r(3, 4))
case("mse_loss_sum", lambda a, b: F.mse_loss(a, b, reduction="sum"), r(3, 4), r(3, 4))
# shape ops
case("cat", lambda a, b: torch.cat([a, b], dim=1), r(2, 3), r(2, 5))
case("stack", lambda a, b: torch.stack([a, b], dim=0), r(2, 3), r(2, 3))
case("pad", lambda a: F.pad(a, (1, 2, 0, 1), value=0.5), r(2, 3, 4))
case("pad_negative", lambda a: F.pad(a, (-1, 1)), r(2, 4))
case("flatten", lambda a: torch.flatten(a, 1), r(2, 3, 4))
case("permute_contiguous", lambda a: a.permute(2, 0, 1).contiguous() * 2, r(2, 3, 4))
case("slice_step", lambda a: a[:, 1:5:2] * 3, r(3, 6))
case("select", lambda a: a.select(1, 2) * 2, r(3, 4, 2))
case("expand", lambda a: a.expand(3, 4, 5) * 1.5, r(4, 1))
case("transpose_matmul", lambda a, b: a.transpose(0, 1) @ b, r(4, 3), r(4, 2))

# The ops under libtorch's names (losses, leaky_relu, norm, std): their own random stream, so
# the cases above and half.json keep their values.
with torch.random.fork_rng():
    torch.manual_seed(4321)
    prob = lambda *s: torch.rand(*s) * 0.98 + 0.01
    case("l1_loss", F.l1_loss, r(3, 4), r(3, 4))
    case("l1_loss_sum", lambda a, b: F.l1_loss(a, b, reduction="sum"), r(3, 4), r(3, 4))
    case("smooth_l1_loss", F.smooth_l1_loss, r(4, 5) * 2, r(4, 5))
    case("smooth_l1_loss_beta_none",
         lambda a, b: F.smooth_l1_loss(a, b, reduction="none", beta=0.5), r(4, 5), r(4, 5))
    case("binary_cross_entropy", F.binary_cross_entropy, prob(3, 4), torch.rand(3, 4))
    case("binary_cross_entropy_weight_sum",
         lambda a, b, w: F.binary_cross_entropy(a, b, weight=w, reduction="sum"),
         prob(3, 4), torch.rand(3, 4), pos(4), nograd=(2,))
    case("binary_cross_entropy_with_logits", F.binary_cross_entropy_with_logits, r(3, 4) * 4,
         torch.rand(3, 4))
    case("binary_cross_entropy_with_logits_weights",
         lambda a, b, w, pw: F.binary_cross_entropy_with_logits(a, b, weight=w, pos_weight=pw),
         r(3, 4) * 30, (torch.rand(3, 4) > 0.5).float(), pos(3, 1), pos(4), nograd=(2, 3))
    case("leaky_relu", lambda a: F.leaky_relu(a, 0.2), r(3, 5))
    tgt_w = torch.tensor([0, 4, 2, -100, 1, 4])
    case("nll_loss_weight", lambda a, t, w: F.nll_loss(a, t, weight=w), r(6, 5), tgt_w, pos(5),
         nograd=(2,))
    case("nll_loss_weight_none",
         lambda a, t, w: F.nll_loss(a, t, weight=w, reduction="none"), r(6, 5), tgt_w, pos(5),
         nograd=(2,))
    case("norm", lambda a: a.norm(), r(3, 4))
    case("std_dim", lambda a: a.std(dim=1), r(3, 4))
    case("conv_transpose2d",
         lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
         r(2, 4, 5, 6), r(4, 3, 3, 3), r(3))
    case("conv_transpose2d_groups_dilation",
         lambda x, w: F.conv_transpose2d(x, w, stride=(1, 2), padding=(0, 1), groups=2,
                                         dilation=2), r(1, 4, 4, 4), r(4, 2, 3, 2))
    case("conv_transpose2d_3x3_s1", lambda x, w: F.conv_transpose2d(x, w, padding=1),
         r(2, 8, 7, 7), r(8, 4, 3, 3))

# Indexing by tensors of indices: a random stream of its own, as above.
with torch.random.fork_rng():
    torch.manual_seed(5555)
    rows = torch.tensor([2, 0, 2, 3])
    gidx = torch.tensor([[1, 0, 1], [2, 2, 0]])
    case("index_select", lambda a, i: a.index_select(1, i), r(3, 4, 2), rows)
    case("gather", lambda a, i: a.gather(0, i), r(3, 4), gidx)
    case("scatter_add", lambda a, i, s: a.scatter_add(0, i, s), r(3, 4), gidx, r(2, 3))
    # Distinct rows in each column: no value is lost to a repeated position.
    case("scatter", lambda a, i, s: a.scatter(0, i, s), r(3, 4),
         torch.tensor([[1, 0, 2, 2], [2, 1, 0, 0]]), r(2, 4))
    case("index_add", lambda a, i, s: a.index_add(0, i, s, alpha=0.5), r(4, 3), rows, r(4, 3))
    case("embedding_padding", lambda w, i: F.embedding(i, w, padding_idx=1), r(5, 3),
         torch.tensor([[1, 4, 1], [0, 2, 4]]))

# Normalization layers, and gradients of gradients: each of the last three outputs is a
# gradient taken with create_graph (so the recorded gradients are second derivatives).
with torch.random.fork_rng():
    torch.manual_seed(7777)
    case("layer_norm", lambda x, w, b: F.layer_norm(x, (3, 4), w, b, eps=1e-5), r(2, 3, 4),
         r(3, 4), r(3, 4))
    case("layer_norm_plain", lambda x: F.layer_norm(x, (5,)), r(4, 5) * 3 + 1)
    case("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), r(2, 4, 3, 3), r(4), r(4))
    grad_of = lambda y, x: torch.autograd.grad(y, x, create_graph=True)[0]
    case("grad_of_grad_mlp",
         lambda x, w, b: grad_of(torch.tanh(F.linear(x, w, b)).pow(2).sum(), x) ** 2,
         r(3, 4), r(5, 4), r(5))
    case("grad_of_grad_conv_bn",
         lambda x, w, g, b: grad_of(torch.sigmoid(F.batch_norm(
             F.conv2d(x, w, padding=1, stride=2), None, None, g, b, training=True)).sum(), x) ** 2,
         r(2, 2, 5, 5), r(3, 2, 3, 3), r(3), r(3))
    ce_target = torch.tensor([1, 0, 2, 1])
    case("grad_of_grad_pool_ce",
         lambda x, w, t: grad_of(F.cross_entropy(
             F.linear(F.max_pool2d(x, 2).flatten(1), w), t), x).abs().sum(),
         r(4, 1, 4, 4), r(3, 4), ce_target)

# Recurrent layers through torch's functional forms (the weights as inputs, so their gradients
# are recorded); each case's output is the sequence output, then h_n (and c_n), flattened.
with torch.random.fork_rng():
    torch.manual_seed(8888)
    flat = lambda *ts: torch.cat([t.reshape(-1) for t in ts])

    def weights(gates, hidden, sizes, bias=True, directions=1):
        out = []
        for size in sizes:
            for _ in range(directions):
                out += [r(gates * hidden, size) * 0.4, r(gates * hidden, hidden) * 0.4]
                if bias:
                    out += [r(gates * hidden) * 0.2, r(gates * hidden) * 0.2]
        return out

    case("lstm", lambda x, h, c, *w: flat(*torch._VF.lstm(x, (h, c), w, True, 1, 0.0, False,
                                                          False, False)),
         r(5, 3, 4), r(1, 3, 6), r(1, 3, 6), *weights(4, 6, [4]))
    case("lstm_2layer_bidirectional_batch_first_nobias",
         lambda x, *w: flat(*torch._VF.lstm(x, (torch.zeros(4, 3, 5), torch.zeros(4, 3, 5)), w,
                                            False, 2, 0.0, False, True, True)),
         r(3, 4, 2), *weights(4, 5, [2, 10], bias=False, directions=2))
    case("gru_bidirectional", lambda x, h, *w: flat(*torch._VF.gru(x, h, w, True, 1, 0.0, False,
                                                                   True, False)),
         r(4, 2, 3), r(2, 2, 5), *weights(3, 5, [3], directions=2))
    # Unbatched (T, in), as torch.nn.RNN runs it: a batch of one in the middle.
    case("rnn_tanh_2layer_unbatched",
         lambda x, h, *w: flat(*[t.squeeze(1) for t in torch._VF.rnn_tanh(
             x.unsqueeze(1), h.unsqueeze(1), w, True, 2, 0.0, False, False, False)]),
         r(6, 3), r(2, 4), *weights(1, 4, [3, 4]))
    case("rnn_relu", lambda x, h, *w: flat(*torch._VF.rnn_relu(x, h, w, True, 1, 0.0, False,
                                                               False, False)),
         r(4, 2, 3), r(1, 2, 5), *weights(1, 5, [3]))

# Pieces, tiles and flips; resizing. Pieces are weighted apart so each gradient finds its way.
with torch.random.fork_rng():
    torch.manual_seed(9999)
    weighted = lambda parts: torch.cat([p.flatten() * (k + 1) for k, p in enumerate(parts)])
    case("chunk", lambda a: weighted(a.chunk(3, 1)), r(2, 7))
    case("split_with_sizes", lambda a: weighted(a.split([1, 3, 2], 0)), r(6, 2))
    case("split", lambda a: weighted(a.split(2, -1)), r(3, 5))
    case("unbind", lambda a: weighted(a.unbind(1)), r(2, 3, 2))
    case("repeat", lambda a: a.repeat(2, 1, 3), r(3, 2))
    case("flip", lambda a: a.flip([0, 2]), r(2, 3, 4))
    case("interpolate_nearest_size", lambda x: F.interpolate(x, size=(5, 7)), r(2, 3, 3, 4))
    case("interpolate_nearest_scale", lambda x: F.interpolate(x, scale_factor=2.0), r(1, 2, 3, 3))
    case("interpolate_bilinear", lambda x: F.interpolate(x, size=(7, 5), mode="bilinear"),
         r(1, 2, 4, 3))
    case("interpolate_bilinear_corners_scale",
         lambda x: F.interpolate(x, scale_factor=(1.5, 2.5), mode="bilinear", align_corners=True),
         r(2, 1, 4, 3))
    case("interpolate_bilinear_down", lambda x: F.interpolate(x, size=(2, 3), mode="bilinear"),
         r(1, 2, 5, 7))

# Cross-entropy with class weights: a random stream of its own, as above.
with torch.random.fork_rng():
    torch.manual_seed(777)
    tgt_cw = torch.tensor([0, 4, 2, -100, 1, 4])
    ce = lambda **kw: (lambda a, t, w: F.cross_entropy(a, t, weight=w, **kw))
    case("cross_entropy_weight", ce(), r(6, 5), tgt_cw, pos(5), nograd=(2,))
    case("cross_entropy_weight_smoothing", ce(label_smoothing=0.2), r(6, 5), tgt_cw, pos(5),
         nograd=(2,))
    case("cross_entropy_weight_smoothing_sum", ce(label_smoothing=0.2, reduction="sum"),
         r(6, 5), tgt_cw, pos(5), nograd=(2,))
    case("cross_entropy_weight_spatial_none", ce(label_smoothing=0.1, reduction="none"),
         r(2, 4, 3, 3), torch.randint(0, 4, (2, 3, 3)), pos(4), nograd=(2,))
    # ceil_mode: windows hanging past the input's end, the last one dropped where it would
    # start past the input and its padding.
    case("max_pool2d_ceil", lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), r(2, 3, 8, 9))
    case("max_pool2d_ceil_no_pad", lambda x: F.max_pool2d(x, 2, 2, 0, ceil_mode=True),
         r(1, 2, 5, 7))
    case("max_pool2d_ceil_dilation",
         lambda x: F.max_pool2d(x, (3, 2), (2, 3), (1, 0), (1, 2), ceil_mode=True), r(1, 2, 7, 8))

# The other activations, math functions, scans, products and sorts: a stream of their own.
with torch.random.fork_rng():
    torch.manual_seed(4242)
    case("silu", F.silu, r(3, 5) * 3)
    case("elu", lambda a: F.elu(a, alpha=0.7), r(3, 5) * 2)
    case("selu", F.selu, r(3, 5) * 2)
    case("softplus", lambda a: F.softplus(a, beta=2.0, threshold=3.0), r(4, 5) * 2)
    case("mish", F.mish, r(3, 5) * 3)
    case("hardswish", F.hardswish, r(4, 5) * 3)
    case("hardsigmoid", F.hardsigmoid, r(4, 5) * 3)
    case("logsigmoid", F.logsigmoid, r(3, 5) * 4)
    case("hardtanh", lambda a: F.hardtanh(a, -0.5, 0.8), r(4, 5))
    case("relu6", F.relu6, r(4, 5) * 5)
    case("softsign", F.softsign, r(3, 5) * 2)
    case("prelu", lambda a, w: F.prelu(a, w), r(2, 3, 2, 2), r(3))
    case("expm1", torch.expm1, r(7))
    case("tan", torch.tan, r(7) * 0.5)
    case("atan", torch.atan, r(7) * 2)
    case("erf", torch.erf, r(7))
    case("log2", torch.log2, pos(7))
    case("log10", torch.log10, pos(7))
    case("reciprocal", torch.reciprocal, pos(7))
    case("cumsum", lambda a: torch.cumsum(a, 1), r(3, 6))
    case("cumsum_dim0", lambda a: torch.cumsum(a, 0), r(4, 2, 3))
    zeros_in = r(3, 4)
    zeros_in[1, 2] = 0.0
    zeros_in[2, 0] = 0.0
    zeros_in[2, 3] = 0.0
    case("prod_dim", lambda a: torch.prod(a, 1), zeros_in)
    case("prod_dim0_keepdim", lambda a: torch.prod(a, 0, keepdim=True), r(3, 4))
    case("prod_all", torch.prod, r(2, 3) + 1.5)
    case("logsumexp", lambda a: torch.logsumexp(a, (0, 2)), r(2, 3, 4) * 3)
    case("logsumexp_keepdim", lambda a: torch.logsumexp(a, 1, keepdim=True), r(3, 5) * 10)
    case("sort_descending", lambda a: torch.sort(a, 1, descending=True)[0], r(3, 7))
    case("sort_indices", lambda a: torch.sort(a, 0)[1], r(5, 3), grad=False)
    case("topk", lambda a: torch.topk(a, 3)[0], r(2, 3, 6))
    case("topk_smallest_dim0", lambda a: torch.topk(a, 2, 0, largest=False)[0], r(5, 4))
    case("masked_select", lambda a, m: torch.masked_select(a, m), r(3, 4), torch.rand(4) > 0.4)

# Binary math, triangles, normalization, one-hot: a stream of their own.
with torch.random.fork_rng():
    torch.manual_seed(4343)
    case("atan2", torch.atan2, r(3, 4), r(4))
    case("fmod", torch.fmod, r(3, 4) * 5, r(3, 4) + 2.5)
    case("fmod_negative_divisor", torch.fmod, r(6) * 5, -(torch.rand(6) + 0.5))
    case("remainder", torch.remainder, r(3, 4) * 5, r(4) * 2)
    case("remainder_scalar", lambda a: torch.remainder(a, -1.5), r(7) * 4)
    case("fmod_int", lambda a, b: torch.fmod(a, b), torch.randint(-20, 20, (8,)),
         torch.tensor([3, -3, 7, -7, 5, 2, -1, 4]), grad=False)
    case("remainder_int", lambda a, b: torch.remainder(a, b), torch.randint(-20, 20, (8,)),
         torch.tensor([3, -3, 7, -7, 5, 2, -1, 4]), grad=False)
    case("trunc", torch.trunc, r(7) * 3)
    case("tril", lambda a: torch.tril(a, -1), r(2, 4, 5))
    case("triu", lambda a: torch.triu(a, 2), r(4, 6))
    case("normalize", lambda a: F.normalize(a, dim=1), r(3, 4, 2))
    case("normalize_p1_dim0", lambda a: F.normalize(a, p=1.0, dim=0), r(3, 4))
    case("one_hot", lambda a: F.one_hot(a, 5), torch.randint(0, 5, (2, 3)), grad=False)
    case("instance_norm", lambda x, w, b: F.instance_norm(x, weight=w, bias=b), r(2, 3, 4, 5),
         r(3), r(3))

# einsum: a stream of its own.
with torch.random.fork_rng():
    torch.manual_seed(4444)
    case("einsum_bmm", lambda a, b: torch.einsum("bij,bjk->bik", a, b), r(2, 3, 4), r(2, 4, 5))
    case("einsum_attention", lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k), r(2, 3, 4, 5),
         r(2, 3, 6, 5))
    case("einsum_transpose", lambda a: torch.einsum("ij->ji", a), r(3, 4))
    case("einsum_dot", lambda a, b: torch.einsum("i,i->", a, b), r(5), r(5))
    case("einsum_outer", lambda a, b: torch.einsum("i,j->ij", a, b), r(3), r(4))
    case("einsum_sum_kept", lambda a: torch.einsum("ijk->j", a), r(2, 3, 4))
    case("einsum_implicit", lambda a, b: torch.einsum("jk,ij", a, b), r(4, 5), r(3, 4))
    case("einsum_ellipsis", lambda a, b: torch.einsum("...ij,jk->...ik", a, b), r(2, 3, 4, 5),
         r(5, 2))
    case("einsum_three", lambda a, b, c: torch.einsum("ij,jk,kl->li", a, b, c), r(2, 3), r(3, 4),
         r(4, 5))
    case("einsum_broadcast_one", lambda a, b: torch.einsum("bij,bjk->bik", a, b), r(1, 2, 3),
         r(4, 3, 5))
    case("einsum_summed_alone", lambda a, b: torch.einsum("ij,kj->k", a, b), r(3, 4), r(5, 4))

# Multi-head attention (sequence first): a stream of its own. The output and the weights end to
# end, weighted apart.
with torch.random.fork_rng():
    torch.manual_seed(5555)
    both = lambda parts: torch.cat([p.flatten() * (k + 1) for k, p in enumerate(parts)])
    mha = lambda q, k, v, w, b, ow, ob, **kw: F.multi_head_attention_forward(
        q, k, v, q.shape[-1], 2, w, b, kw.pop("bias_k", None), kw.pop("bias_v", None),
        kw.pop("add_zero_attn", False), 0.0, ow, ob, training=True, **kw)
    case("mha_self", lambda x, w, b, ow, ob: both(mha(x, x, x, w, b, ow, ob)), r(4, 2, 6),
         r(18, 6) * 0.5, r(18), r(6, 6) * 0.5, r(6))
    causal = torch.arange(5)[None, :] > torch.arange(3)[:, None] + 2
    padded = torch.tensor([[False, False, False, False, True], [False, False, False, True, False]])
    case("mha_masks", lambda q, k, v, am, kpm, w, b, ow, ob: both(
        mha(q, k, v, w, b, ow, ob, attn_mask=am, key_padding_mask=kpm,
            average_attn_weights=False)), r(3, 2, 6), r(5, 2, 6), r(5, 2, 6), causal, padded,
         r(18, 6) * 0.5, r(18), r(6, 6) * 0.5, r(6))
    case("mha_float_mask_3d_no_bias", lambda q, k, v, am, w, ow: mha(
        q, k, v, w, None, ow, None, attn_mask=am, need_weights=False)[0], r(3, 2, 6), r(4, 2, 6),
         r(4, 2, 6), r(4, 3, 4), r(18, 6) * 0.5, r(6, 6) * 0.5)
    case("mha_unbatched", lambda q, k, v, kpm, w, b, ow, ob: both(
        mha(q, k, v, w, b, ow, ob, key_padding_mask=kpm)), r(3, 6), r(4, 6), r(4, 6),
         torch.tensor([False, True, False, False]), r(18, 6) * 0.5, r(18), r(6, 6) * 0.5, r(6))
    case("mha_kdim_bias_kv_zero_attn", lambda q, k, v, am, kpm, wq, wk, wv, b, bk, bv, ow, ob: both(
        mha(q, k, v, None, b, ow, ob, bias_k=bk, bias_v=bv, add_zero_attn=True, attn_mask=am,
            key_padding_mask=kpm, use_separate_proj_weight=True, q_proj_weight=wq,
            k_proj_weight=wk, v_proj_weight=wv)), r(3, 2, 6), r(4, 2, 5), r(4, 2, 7), r(3, 4),
         torch.tensor([[False, True, False, False], [False, False, False, False]]),
         r(6, 6) * 0.5, r(6, 5) * 0.5, r(6, 7) * 0.5, r(18), r(1, 1, 6), r(1, 1, 6),
         r(6, 6) * 0.5, r(6))

# cumprod: a stream of its own. Zeros where the gradient changes form: one and two in a row.
with torch.random.fork_rng():
    torch.manual_seed(6666)
    case("cumprod", lambda a: torch.cumprod(a, 1), r(3, 6))
    with_zeros = r(4, 6)
    with_zeros[0, 2] = 0
    with_zeros[1, 0] = 0
    with_zeros[2, 1] = 0
    with_zeros[2, 4] = 0
    with_zeros[3, 5] = 0
    case("cumprod_zeros", lambda a: torch.cumprod(a, 1), with_zeros)
    case("cumprod_zeros_dim0", lambda a: torch.cumprod(a, 0), with_zeros.t().contiguous())

# 3-d convolution and pooling, and avg_pool2d's divisor options: a stream of its own. Ceil-mode
# windows hang past the padding; the ties case has many equal values in a window.
with torch.random.fork_rng():
    torch.manual_seed(7777)
    case("conv3d", lambda x, w, b: F.conv3d(x, w, b, padding=1), r(2, 3, 5, 6, 4),
         r(4, 3, 3, 3, 2), r(4))
    case("conv3d_stride_dilation_groups", lambda x, w: F.conv3d(
        x, w, stride=(2, 1, 2), padding=(2, 1, 0), dilation=(2, 1, 1), groups=2),
         r(1, 4, 7, 5, 6), r(6, 2, 2, 3, 2))
    case("conv3d_unbatched", lambda x, w: F.conv3d(x, w, stride=2), r(2, 5, 5, 5),
         r(3, 2, 1, 2, 2))
    case("max_pool3d", lambda x: F.max_pool3d(x, 3, 2, 1), r(2, 3, 7, 6, 5))
    case("max_pool3d_ceil_dilation", lambda x: F.max_pool3d(
        x, (2, 3, 2), (2, 2, 1), (1, 1, 0), (2, 1, 2), ceil_mode=True), r(1, 2, 8, 7, 6))
    case("max_pool3d_ties", lambda x: F.max_pool3d(x, 2, 1),
         torch.randint(0, 3, (1, 2, 4, 4, 4)).float())
    case("avg_pool3d", lambda x: F.avg_pool3d(x, 3, 2, 1), r(2, 3, 7, 6, 5))
    case("avg_pool3d_ceil_exclude_pad", lambda x: F.avg_pool3d(
        x, (3, 2, 3), 2, 1, ceil_mode=True, count_include_pad=False), r(1, 2, 6, 7, 8))
    case("avg_pool3d_ceil_include_pad", lambda x: F.avg_pool3d(
        x, (3, 2, 3), 2, 1, ceil_mode=True), r(1, 2, 6, 7, 8))
    case("avg_pool3d_divisor", lambda x: F.avg_pool3d(x, 2, 1, 1, divisor_override=3),
         r(1, 2, 4, 5, 3))
    case("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), r(2, 2, 5, 7, 3))
    case("avg_pool2d_ceil_exclude_pad", lambda x: F.avg_pool2d(
        x, 3, 2, 1, ceil_mode=True, count_include_pad=False), r(2, 3, 8, 9))
    case("avg_pool2d_ceil", lambda x: F.avg_pool2d(x, (3, 2), (2, 3), (1, 1), ceil_mode=True),
         r(1, 2, 8, 7))
    case("avg_pool2d_divisor", lambda x: F.avg_pool2d(x, 2, 1, 1, divisor_override=5),
         r(1, 2, 5, 4))
    # amin: its gradient split among equal smallest values, as amax's.
    case("amin_dims", lambda a: torch.amin(a, dim=(0, 2)), r(3, 4, 5))
    case("amin_ties", lambda a: a.amin(1, keepdim=True), torch.randint(0, 3, (3, 6)).float())

# The 1-d pools, and the losses and distances libtorch user code reaches for: a stream of its
# own. kl_div's target with zeros takes no gradient (torch's is NaN there: x / y at 0 / 0).
with torch.random.fork_rng():
    torch.manual_seed(8888)
    case("max_pool1d", lambda x: F.max_pool1d(x, 3, 2, 1), r(2, 3, 9))
    case("max_pool1d_ceil_dilation", lambda x: F.max_pool1d(x, 2, 2, 1, 2, ceil_mode=True),
         r(1, 2, 10))
    case("max_pool1d_unbatched", lambda x: F.max_pool1d(x, 2), r(3, 8))
    case("avg_pool1d_ceil_exclude_pad", lambda x: F.avg_pool1d(
        x, 3, 2, 1, ceil_mode=True, count_include_pad=False), r(2, 3, 10))
    case("adaptive_avg_pool1d", lambda x: F.adaptive_avg_pool1d(x, 4), r(2, 3, 10))
    case("huber_loss", lambda a, b: F.huber_loss(a, b, delta=0.7), r(4, 5) * 2, r(4, 5))
    case("huber_loss_none", lambda a, b: F.huber_loss(a, b, reduction="none"), r(3, 4) * 2,
         r(3, 4))
    case("kl_div_batchmean", lambda a, b: F.kl_div(a, b, reduction="batchmean"),
         r(4, 5).log_softmax(1), r(4, 5).softmax(1))
    with_zero = r(3, 6).softmax(1)
    with_zero[0, 1] = 0
    with_zero[2, 4] = 0
    case("kl_div_zeros_sum", lambda a, b: F.kl_div(a, b, reduction="sum"),
         r(3, 6).log_softmax(1), with_zero, nograd=(1,))
    case("kl_div_log_target", lambda a, b: F.kl_div(a, b, reduction="none", log_target=True),
         r(3, 4).log_softmax(1), r(3, 4).log_softmax(1))
    case("cosine_similarity", lambda a, b: F.cosine_similarity(a, b), r(4, 5), r(1, 5))
    case("cosine_similarity_last", lambda a, b: F.cosine_similarity(a, b, dim=-1), r(2, 3, 4),
         r(2, 3, 4))
    case("pairwise_distance", lambda a, b: F.pairwise_distance(a, b, p=1.5), r(4, 6), r(4, 6))
    case("pairwise_distance_keepdim", lambda a, b: F.pairwise_distance(a, b, keepdim=True),
         r(3, 5), r(3, 5))

# Padding by reflection, replication and wrapping, and the recurrent cells: a stream of its own.
with torch.random.fork_rng():
    torch.manual_seed(9999)
    pair = lambda parts: torch.cat([p.flatten() * (k + 1) for k, p in enumerate(parts)])
    case("pad_reflect_2d", lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), r(2, 3, 5, 6))
    case("pad_replicate_2d", lambda x: F.pad(x, (2, 1, 0, 3), mode="replicate"), r(1, 2, 4, 5))
    case("pad_circular_1d", lambda x: F.pad(x, (1, 2), mode="circular"), r(2, 3, 5))
    case("pad_reflect_1d", lambda x: F.pad(x, (3, 1), mode="reflect"), r(2, 3, 6))
    case("lstm_cell", lambda x, h, c, wi, wh, bi, bh: pair(torch.lstm_cell(x, (h, c), wi, wh, bi, bh)),
         r(3, 4), r(3, 5), r(3, 5), r(20, 4), r(20, 5), r(20), r(20))
    case("gru_cell", lambda x, h, wi, wh, bi, bh: torch.gru_cell(x, h, wi, wh, bi, bh),
         r(3, 4), r(3, 5), r(15, 4), r(15, 5), r(15), r(15))
    case("gru_cell_nobias", lambda x, h, wi, wh: torch.gru_cell(x, h, wi, wh), r(2, 4), r(2, 5),
         r(15, 4), r(15, 5))
    case("rnn_tanh_cell", lambda x, h, wi, wh, bi, bh: torch.rnn_tanh_cell(x, h, wi, wh, bi, bh),
         r(3, 4), r(3, 5), r(5, 4), r(5, 5), r(5), r(5))
    case("rnn_relu_cell", lambda x, h, wi, wh, bi, bh: torch.rnn_relu_cell(x, h, wi, wh, bi, bh),
         r(3, 4), r(3, 5), r(5, 4), r(5, 5), r(5), r(5))

# Convolutions padded by name (padding="same") and by mode (padding_mode): a stream of its own.
with torch.random.fork_rng():
    torch.manual_seed(10101)

    def conv_layer(cls, *args, **kwargs):  # the layer's forward, its weight and bias as inputs
        layer = cls(*args, **kwargs)
        return lambda x, w, b: layer._conv_forward(x, w, b)

    case("conv2d_same_even_dilated",
         lambda x, w, b: F.conv2d(x, w, b, padding="same", dilation=(1, 2)),
         r(2, 3, 5, 6), r(4, 3, 2, 3), r(4))
    case("conv1d_same_dilated", lambda x, w: F.conv1d(x, w, padding="same", dilation=3),
         r(2, 2, 9), r(3, 2, 4))
    case("conv3d_same", lambda x, w: F.conv3d(x, w, padding="same"), r(1, 2, 4, 4, 5),
         r(2, 2, 2, 3, 2))
    case("conv2d_valid", lambda x, w: F.conv2d(x, w, padding="valid"), r(1, 2, 5, 4),
         r(3, 2, 3, 2))
    case("conv2d_reflect_same",
         conv_layer(torch.nn.Conv2d, 3, 4, (3, 2), padding="same", padding_mode="reflect"),
         r(2, 3, 5, 6), r(4, 3, 3, 2), r(4))
    case("conv2d_circular_stride",
         conv_layer(torch.nn.Conv2d, 2, 3, 3, stride=2, padding=(1, 2), padding_mode="circular"),
         r(1, 2, 6, 7), r(3, 2, 3, 3), r(3))
    case("conv1d_replicate",
         conv_layer(torch.nn.Conv1d, 2, 3, 3, padding=2, dilation=2, padding_mode="replicate"),
         r(2, 2, 8), r(3, 2, 3), r(3))
    pad_sequence = torch.nn.utils.rnn.pad_sequence
    case("pad_sequence", lambda a, b, c: pad_sequence([a, b, c], padding_value=-1.5),
         r(3, 2), r(1, 2), r(4, 2))
    case("pad_sequence_batch_first", lambda a, b: pad_sequence([a, b], batch_first=True),
         r(2, 3, 2), r(5, 3, 2))
    case("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (3, 4)), r(2, 3, 7, 9))
    case("adaptive_max_pool2d_unbatched", lambda x: F.adaptive_max_pool2d(x, 2), r(2, 5, 4))
    case("adaptive_max_pool2d_indices",
         lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True)[1], r(1, 2, 5, 7),
         grad=False)
    case("adaptive_max_pool1d", lambda x: F.adaptive_max_pool1d(x, 4), r(2, 3, 10))

# libtorch's shape ops, order statistics, products and losses added later: a stream of its own.
with torch.random.fork_rng():
    torch.manual_seed(20201)
    weighted = lambda parts: torch.cat([p.flatten() * (k + 1) for k, p in enumerate(parts)])
    sign = lambda *s: torch.randint(0, 2, s).float() * 2 - 1
    case("meshgrid_ij", lambda a, b: weighted(torch.meshgrid(a, b, indexing="ij")), r(3), r(4))
    case("meshgrid_xy", lambda a, b, c: weighted(torch.meshgrid(a, b, c, indexing="xy")), r(2),
         r(3), r(4))
    case("diagonal", lambda a: torch.diagonal(a, 1, 0, 2), r(3, 4, 5))
    case("diagonal_negative", lambda a: a.diagonal(-2, -1, 1), r(2, 5, 4))
    case("diag_vector", lambda a: torch.diag(a, -1), r(4))
    case("diag_matrix", lambda a: torch.diag(a, 1), r(3, 5))
    case("trace", torch.trace, r(4, 5))
    case("roll", lambda a: torch.roll(a, (1, -7), (0, 2)), r(3, 4, 5))
    case("roll_flat", lambda a: torch.roll(a, 5), r(3, 4))
    case("tile", lambda a: a.tile((2, 3, 1)), r(2, 3))
    case("tile_short", lambda a: a.tile((2,)), r(2, 3))
    case("repeat_interleave_dim", lambda a: a.repeat_interleave(2, dim=1), r(2, 3, 2))
    case("repeat_interleave_flat", lambda a: a.repeat_interleave(3), r(2, 2))
    case("repeat_interleave_tensor",
         lambda a, n: a.repeat_interleave(n, dim=0), r(3, 2), torch.tensor([1, 0, 3]))
    case("unfold_overlapping", lambda a: a.unfold(1, 3, 2), r(2, 7, 3))
    case("unfold_gaps", lambda a: a.unfold(0, 2, 3), r(8))
    case("pixel_shuffle", lambda a: F.pixel_shuffle(a, 2), r(2, 8, 3, 2))
    case("pixel_unshuffle", lambda a: F.pixel_unshuffle(a, 2), r(1, 2, 4, 6))
    case("kthvalue", lambda a: a.kthvalue(2, 1)[0], r(3, 5, 2))
    case("kthvalue_indices", lambda a: a.kthvalue(4, 0, keepdim=True)[1], r(5, 3), grad=False)
    case("median_all", lambda a: a.median(), r(5, 4))
    case("median_dim", lambda a: a.median(1)[0], r(3, 6))
    case("median_dim_indices", lambda a: a.median(-1, keepdim=True)[1], r(2, 3, 5), grad=False)
    case("var_mean", lambda a: weighted(torch.var_mean(a, 1)), r(3, 4, 2))
    case("std_mean", lambda a: weighted(torch.std_mean(a, (0, 2), unbiased=False, keepdim=True)),
         r(3, 4, 2))
    case("cross", lambda a, b: torch.cross(a, b, dim=1), r(4, 3), r(4, 3))
    case("cross_default_dim", lambda a, b: torch.cross(a, b), r(3, 2, 3), r(3, 2, 3))
    case("linalg_cross_broadcast", lambda a, b: torch.linalg.cross(a, b), r(2, 1, 3), r(1, 4, 3))
    case("baddbmm", lambda s, a, b: torch.baddbmm(s, a, b, beta=0.5, alpha=2.0), r(1, 4, 5),
         r(3, 4, 2), r(3, 2, 5))
    case("cdist", torch.cdist, r(2, 4, 3), r(2, 5, 3))
    case("cdist_p1", lambda a, b: torch.cdist(a, b, p=1.0), r(3, 2), r(4, 2))
    case("cdist_inf", lambda a, b: torch.cdist(a, b, p=float("inf")), r(3, 2), r(4, 2))
    case("cdist_mm", torch.cdist, r(30, 4), r(27, 4))
    case("vector_norm", lambda a: torch.linalg.vector_norm(a, 3, dim=(0, 2)), r(3, 4, 2))
    case("vector_norm_neg_inf",
         lambda a: torch.linalg.vector_norm(a, float("-inf"), dim=1, keepdim=True), r(3, 4))
    case("logit", torch.logit, torch.rand(10) * 0.8 + 0.1)
    case("logit_eps", lambda a: torch.logit(a, eps=0.2), torch.rand(12))
    case("clip", lambda a: torch.clip(a, -0.3, 0.4), r(12))
    case("glu", lambda a: F.glu(a, 1), r(3, 6, 2))
    case("margin_ranking_loss", lambda a, b, t: F.margin_ranking_loss(a, b, t, margin=0.2),
         r(6), r(6), sign(6), nograd=(2,))
    case("triplet_margin_loss_swap",
         lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=0.5, swap=True), r(5, 4), r(5, 4),
         r(5, 4))
    case("triplet_margin_loss_p1_sum",
         lambda a, p, n: F.triplet_margin_loss(a, p, n, p=1, reduction="sum"), r(5, 4), r(5, 4),
         r(5, 4))
    case("cosine_embedding_loss", lambda a, b, t: F.cosine_embedding_loss(a, b, t, margin=0.1),
         r(6, 4), r(6, 4), torch.tensor([1.0, -1, 1, -1, -1, -1]), nograd=(2,))
    case("hinge_embedding_loss",
         lambda a, t: F.hinge_embedding_loss(a, t, margin=0.8, reduction="sum"), r(3, 4),
         sign(3, 4), nograd=(1,))
    case("soft_margin_loss", F.soft_margin_loss, r(3, 4), sign(3, 4), nograd=(1,))
    case("multilabel_soft_margin_loss",
         lambda a, t, w: F.multilabel_soft_margin_loss(a, t, weight=w, reduction="none"), r(4, 5),
         torch.randint(0, 2, (4, 5)).float(), torch.rand(5), nograd=(1,))
    case("gaussian_nll_loss", lambda a, t, v: F.gaussian_nll_loss(a, t, v), r(4, 3), r(4, 3),
         torch.tensor([[0.5, 1e-8, 2.0]] * 4))
    case("gaussian_nll_loss_one_var_full",
         lambda a, t, v: F.gaussian_nll_loss(a, t, v, full=True, reduction="sum"), r(4, 3),
         r(4, 3), torch.rand(4) + 0.5)
    case("gaussian_nll_loss_last_dim_one",
         lambda a, t, v: F.gaussian_nll_loss(a, t, v, reduction="none"), r(4, 3), r(4, 3),
         torch.rand(4, 1) + 0.5)
    case("poisson_nll_loss", F.poisson_nll_loss, r(3, 4), torch.rand(3, 4) * 3, nograd=(1,))
    case("poisson_nll_loss_full",
         lambda a, t: F.poisson_nll_loss(a, t, log_input=False, full=True, reduction="sum"),
         pos(3, 4), torch.tensor([[0.0, 1.0, 1.5, 4.0]] * 3), nograd=(1,))
    case("movedim", lambda a: torch.movedim(a, (0, 3), (2, 0)), r(2, 3, 4, 5))
    case("moveaxis", lambda a: torch.moveaxis(a, -1, 1), r(2, 3, 4))
    case("celu", lambda a: F.celu(a, 0.7), r(12) * 2)
    case("softshrink", lambda a: F.softshrink(a, 0.4), r(12))
    case("hardshrink", lambda a: F.hardshrink(a, 0.6), r(12))
    case("tanhshrink", F.tanhshrink, r(12))
    case("threshold", lambda a: F.threshold(a, 0.2, -3.0), r(12))
    case("softmin", lambda a: F.softmin(a, 1), r(3, 5))
    case("bilinear", F.bilinear, r(2, 3, 4), r(2, 3, 5), r(6, 4, 5), r(6))
    # (torch 1.13 has no derivative for it: values only; the C++ gradcheck covers its gradient.)
    case("channel_shuffle", lambda a: torch.nn.ChannelShuffle(3)(a), r(2, 6, 2), grad=False)
    case("im2col", lambda a: F.unfold(a, (2, 3), dilation=(2, 1), padding=(1, 2), stride=(1, 2)),
         r(2, 3, 5, 6))
    case("im2col_unbatched", lambda a: F.unfold(a, 2), r(2, 3, 4))
    case("col2im", lambda a: F.fold(a, (5, 6), (2, 3), dilation=(2, 1), padding=(1, 2),
                                   stride=(1, 2)), r(2, 18, 20))
    case("unflatten", lambda a: a.unflatten(1, (2, -1)) * torch.arange(1.0, 9.0).view(2, 4, 1),
         r(3, 8, 1))
    case("searchsorted", lambda s, v: torch.searchsorted(s, v),
         torch.tensor([[0.0, 1.0, 2.0, 3.0], [-1.0, -0.5, 0.5, 2.0]]),
         torch.tensor([[-1.0, 1.0, 2.5], [0.5, -0.7, 9.0]]), grad=False)
    case("searchsorted_right_1d", lambda s, v: torch.searchsorted(s, v, right=True),
         torch.tensor([0.0, 1.0, 1.0, 3.0]), torch.tensor([[1.0, -2.0], [3.0, 0.5]]), grad=False)
    case("bucketize", lambda v, b: torch.bucketize(v, b, out_int32=True).long(),
         torch.tensor([0.1, 2.0, 5.5, -1.0]), torch.tensor([0.0, 2.0, 5.0]), grad=False)
    case("cross_default_dim_first_input", torch.cross, r(1, 3), r(3, 3))
    case("vector_norm_negative", lambda a: torch.linalg.vector_norm(a, -1.5, dim=1), r(3, 4))

# torch.linalg's factorizations and solvers: a stream of its own. Inputs are well conditioned
# (f32 LAPACK here, f64 there: they agree to rounding).
with torch.random.fork_rng():
    torch.manual_seed(20202)
    well = lambda *s: torch.randn(*s) + s[-1] * torch.eye(s[-1])
    def spd(*s):
        x = torch.randn(*s)
        return x @ x.transpose(-1, -2) + s[-1] * torch.eye(s[-1])
    case("linalg_inv", torch.linalg.inv, well(3, 3))
    case("inverse_batch", torch.inverse, well(2, 3, 3))
    case("linalg_det", torch.linalg.det, well(2, 3, 3))
    case("linalg_slogdet", lambda a: torch.linalg.slogdet(a)[1], r(2, 3, 3))
    case("linalg_slogdet_sign", lambda a: torch.linalg.slogdet(a)[0], r(4, 3, 3), grad=False)
    case("logdet", torch.logdet, spd(2, 3, 3))
    case("linalg_solve", torch.linalg.solve, well(2, 3, 3), r(2, 3, 2))
    case("linalg_solve_vector", torch.linalg.solve, well(3, 3), r(3))
    case("linalg_solve_batch_vector", torch.linalg.solve, well(2, 3, 3), r(2, 3))
    case("linalg_solve_broadcast", torch.linalg.solve, well(3, 3), r(2, 3, 4))
    case("linalg_solve_right", lambda a, b: torch.linalg.solve(a, b, left=False), well(3, 3),
         r(2, 3))
    case("linalg_cholesky", torch.linalg.cholesky, spd(2, 4, 4))
    case("linalg_cholesky_upper", lambda a: torch.linalg.cholesky(a, upper=True), spd(3, 3))
    case("solve_triangular_upper",
         lambda a, b: torch.linalg.solve_triangular(a, b, upper=True), well(3, 3), r(3, 2))
    case("solve_triangular_lower_unit_right",
         lambda a, b: torch.linalg.solve_triangular(a, b, upper=False, left=False,
                                                    unitriangular=True), r(2, 3, 3), r(2, 4, 3))
    case("cholesky_solve", torch.cholesky_solve, r(3, 2), torch.linalg.cholesky(spd(3, 3)))
    case("cholesky_solve_upper", lambda b, u: torch.cholesky_solve(b, u, upper=True), r(2, 3, 1),
         torch.linalg.cholesky(spd(2, 3, 3), upper=True))
    case("cholesky_inverse", torch.cholesky_inverse, torch.linalg.cholesky(spd(3, 3)))
    case("matrix_power", lambda a: torch.linalg.matrix_power(a, 3), r(2, 3, 3) * 0.5)
    case("matrix_power_negative", lambda a: torch.matrix_power(a, -2), well(3, 3))
    case("matrix_power_zero", lambda a: torch.linalg.matrix_power(a, 0), r(2, 2, 2), grad=False)

# The rarer layers and losses: a stream of its own.
with torch.random.fork_rng():
    torch.manual_seed(20203)
    case("multi_margin_loss", F.multi_margin_loss, r(4, 5), torch.tensor([0, 3, 4, 1]))
    case("multi_margin_loss_p2_weight_sum",
         lambda x, y, w: F.multi_margin_loss(x, y, p=2, margin=0.7, weight=w, reduction="sum"),
         r(3, 4), torch.tensor([2, 0, 3]), torch.rand(4), nograd=(2,))
    case("multi_margin_loss_1d", lambda x, y: F.multi_margin_loss(x, y, reduction="none"), r(5),
         torch.tensor([2]))
    case("local_response_norm", lambda x: F.local_response_norm(x, 3), r(2, 5, 3, 4))
    case("local_response_norm_3d",
         lambda x: F.local_response_norm(x, 4, alpha=0.1, beta=0.5, k=2.0), r(2, 6, 5))
    case("local_response_norm_5d", lambda x: F.local_response_norm(x, 2, alpha=0.3), r(1, 4, 2, 3, 2))
    case("embedding_bag_mean_2d", lambda w, i: F.embedding_bag(i, w), r(10, 3),
         torch.tensor([[1, 2, 4], [4, 3, 9]]))
    case("embedding_bag_sum_offsets_weights",
         lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p), r(10, 3),
         torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 3, 3, 6]), r(8))
    case("embedding_bag_max_padding",
         lambda w, i, o: F.embedding_bag(i, w, o, mode="max", padding_idx=2), r(10, 3),
         torch.tensor([1, 2, 4, 2, 2, 3, 9]), torch.tensor([0, 3, 5]))
    case("embedding_bag_mean_last_offset_padding",
         lambda w, i, o: F.embedding_bag(i, w, o, include_last_offset=True, padding_idx=-1),
         r(6, 2), torch.tensor([5, 0, 5, 1, 3]), torch.tensor([0, 2, 5]))

# torch.linalg's eigh, SVD and QR, and what is built on them: a stream of its own. Eigenvectors
# and singular vectors are compared through functions their signs do not change.
with torch.random.fork_rng():
    torch.manual_seed(20204)
    sym = lambda *s: (lambda x: x + x.transpose(-1, -2))(torch.randn(*s))
    def eigh_function(a, uplo="L"):
        l, q = torch.linalg.eigh(a, UPLO=uplo)
        return q @ torch.diag_embed(l.sin()) @ q.transpose(-1, -2)
    def svd_function(a, full_matrices=False):
        u, s, vh = torch.linalg.svd(a, full_matrices=full_matrices)
        k = s.shape[-1]
        return u[..., :k] @ torch.diag_embed(s.sin()) @ vh[..., :k, :]
    def qr_function(a, mode="reduced"):
        q, r = torch.linalg.qr(a, mode=mode)
        return q @ r.sin()
    case("linalg_eigh", eigh_function, sym(3, 3))
    case("linalg_eigh_batch_upper", lambda a: eigh_function(a, "U"), r(2, 4, 4))
    case("linalg_eigh_values", lambda a: torch.linalg.eigh(a)[0], sym(2, 3, 3))
    case("linalg_eigvalsh_upper", lambda a: torch.linalg.eigvalsh(a, UPLO="U"), r(4, 4))
    case("linalg_svd_square", svd_function, r(3, 3))
    case("linalg_svd_tall_batch", svd_function, r(2, 5, 3))
    case("linalg_svd_wide_full", lambda a: svd_function(a, True), r(3, 5))
    case("linalg_svd_values", lambda a: torch.linalg.svd(a)[1], r(2, 4, 3))
    case("linalg_svdvals_wide", torch.linalg.svdvals, r(2, 5))
    case("linalg_qr_tall", qr_function, r(5, 3))
    case("linalg_qr_square_batch", qr_function, r(2, 3, 3))
    case("linalg_qr_wide", qr_function, r(3, 5))
    case("linalg_qr_r_of_reduced", lambda a: torch.linalg.qr(a)[1], r(4, 3))
    case("linalg_qr_complete_q", lambda a: torch.linalg.qr(a, mode="complete")[0], r(4, 2),
         grad=False)
    case("linalg_qr_complete_r", lambda a: torch.linalg.qr(a, mode="complete")[1], r(4, 2),
         grad=False)
    case("linalg_qr_mode_r", lambda a: torch.linalg.qr(a, mode="r")[1], r(2, 4, 3), grad=False)
    case("matrix_norm_fro", torch.linalg.matrix_norm, r(2, 3, 4))
    case("matrix_norm_nuc", lambda a: torch.linalg.matrix_norm(a, "nuc"), r(2, 3, 4))
    case("matrix_norm_2_dims_keepdim",
         lambda a: torch.linalg.matrix_norm(a, 2, dim=(2, 0), keepdim=True), r(3, 2, 4))
    case("matrix_norm_minus_2", lambda a: torch.linalg.matrix_norm(a, -2), r(4, 3))
    case("matrix_norm_1", lambda a: torch.linalg.matrix_norm(a, 1), r(2, 3, 4))
    case("matrix_norm_minus_1", lambda a: torch.linalg.matrix_norm(a, -1), r(3, 4))
    case("matrix_norm_inf", lambda a: torch.linalg.matrix_norm(a, float("inf")), r(2, 3, 4))
    case("matrix_norm_minus_inf_f64",
         lambda a: torch.linalg.matrix_norm(a, -float("inf"), dtype=torch.float64), r(3, 4))
    case("linalg_pinv_tall", torch.linalg.pinv, r(2, 5, 3))
    case("linalg_pinv_wide", torch.linalg.pinv, r(3, 4))
    case("linalg_pinv_hermitian", lambda a: torch.linalg.pinv(a, hermitian=True), sym(3, 3))
    case("linalg_pinv_rank_deficient", lambda a: torch.linalg.pinv(a, rcond=1e-5),
         r(4, 2) @ r(2, 3), grad=False)
    case("linalg_matrix_rank", torch.linalg.matrix_rank,
         torch.stack([r(4, 2) @ r(2, 3), r(4, 3), torch.zeros(4, 3)]), grad=False)
    case("linalg_matrix_rank_hermitian_atol",
         lambda a: torch.linalg.matrix_rank(a, atol=1.0, hermitian=True),
         torch.diag(torch.tensor([3.0, -2.0, 0.5, 1e-8])), grad=False)
    case("linalg_lstsq_tall", lambda a, b: torch.linalg.lstsq(a, b).solution, r(5, 3), r(5, 2))
    # (torch 1.13's backward of a vector B fails with an IndexError: the values alone)
    case("linalg_lstsq_wide_vector", lambda a, b: torch.linalg.lstsq(a, b).solution, r(3, 5),
         r(3), grad=False)
    case("linalg_lstsq_broadcast", lambda a, b: torch.linalg.lstsq(a, b).solution, r(2, 5, 3),
         r(1, 5, 2))
    case("linalg_lstsq_gelsd_residuals",
         lambda a, b: torch.linalg.lstsq(a, b, driver="gelsd").residuals, r(2, 5, 3), r(2, 5))
    case("linalg_lstsq_gelss_values",
         lambda a, b: torch.linalg.lstsq(a, b, driver="gelss").singular_values, r(4, 3), r(4, 1))
    case("linalg_lstsq_rank", lambda a, b: torch.linalg.lstsq(a, b, rcond=1e-4).rank,
         torch.stack([r(5, 2) @ r(2, 3), r(5, 3)]), r(2, 5, 1), grad=False)

# Transposed convolutions over a length and a volume: a stream of its own.
with torch.random.fork_rng():
    torch.manual_seed(20205)
    case("conv_transpose1d",
         lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1,
                                            groups=2, dilation=2), r(2, 4, 5), r(4, 3, 3), r(6))
    case("conv_transpose1d_unbatched", F.conv_transpose1d, r(3, 6), r(3, 2, 4))
    case("conv_transpose3d",
         lambda x, w, b: F.conv_transpose3d(x, w, b, stride=(2, 1, 2), padding=(1, 0, 1),
                                            output_padding=(1, 0, 0), groups=2,
                                            dilation=(1, 2, 1)),
         r(2, 4, 3, 4, 3), r(4, 3, 2, 3, 2), r(6))
    case("conv_transpose3d_dilated_depth",
         lambda x, w: F.conv_transpose3d(x, w, padding=(2, 0, 0), output_padding=(1, 0, 0),
                                         dilation=(2, 1, 1)), r(1, 2, 3, 3, 3), r(2, 2, 3, 2, 2))
    case("conv_transpose3d_unbatched", F.conv_transpose3d, r(2, 2, 3, 2), r(2, 1, 2, 2, 2))

# torch.linalg's norm, cond, multi_dot, vecdot, matrix_exp and the LU family: a stream of its own.
with torch.random.fork_rng():
    torch.manual_seed(20206)
    case("linalg_norm_all", torch.linalg.norm, r(2, 3, 4))
    case("linalg_norm_vector_ord", lambda a: torch.linalg.norm(a, 3), r(5))
    case("linalg_norm_matrix_ord", lambda a: torch.linalg.norm(a, -1), r(3, 4))
    case("linalg_norm_dim_keepdim",
         lambda a: torch.linalg.norm(a, float("inf"), dim=1, keepdim=True), r(2, 3, 4))
    case("linalg_norm_nuc_dims", lambda a: torch.linalg.norm(a, "nuc", dim=(0, 2)), r(3, 2, 4))
    case("linalg_norm_two_dims_no_ord", lambda a: torch.linalg.norm(a, dim=(1, 2)), r(2, 3, 4))
    case("linalg_norm_fro_f64", lambda a: torch.linalg.norm(a, "fro", dtype=torch.float64),
         r(3, 3))
    case("linalg_cond", torch.linalg.cond, r(2, 3, 3))
    case("linalg_cond_tall_minus_2", lambda a: torch.linalg.cond(a, -2), r(5, 3))
    # (torch 1.13's backward through the inverse fails: its masked_fill_ is in place; the values)
    case("linalg_cond_1", lambda a: torch.linalg.cond(a, 1), r(2, 4, 4), grad=False)
    case("linalg_cond_inf", lambda a: torch.linalg.cond(a, float("inf")), r(3, 3), grad=False)
    case("linalg_cond_fro", lambda a: torch.linalg.cond(a, "fro"), r(3, 3), grad=False)
    case("linalg_cond_nuc", lambda a: torch.linalg.cond(a, "nuc"), r(3, 3))
    # (inf for the singular matrix: through atan, pi / 2, as JSON holds no inf)
    case("linalg_cond_singular", lambda a: torch.linalg.cond(a, -1).atan(),
         torch.stack([r(3, 1) @ r(1, 3), r(3, 3)]), grad=False)
    case("linalg_multi_dot", lambda a, b, c, d: torch.linalg.multi_dot([a, b, c, d]), r(10, 2),
         r(2, 8), r(8, 3), r(3, 7))
    case("linalg_multi_dot_vectors", lambda a, b, c: torch.linalg.multi_dot([a, b, c]), r(4),
         r(4, 5), r(5))
    case("linalg_multi_dot_two", lambda a, b: torch.linalg.multi_dot([a, b]), r(3), r(3, 2))
    case("linalg_vecdot", lambda a, b: torch.linalg.vecdot(a, b, dim=0), r(3, 4), r(4))
    case("linalg_matrix_exp", torch.linalg.matrix_exp, r(3, 3))
    # one matrix within degree 13's bound, one scaled by 2^-3 and squared back
    case("linalg_matrix_exp_batch", torch.linalg.matrix_exp,
         torch.stack([r(4, 4) * 0.1, r(4, 4) * 3]))
    case("matrix_exp_1x1", torch.matrix_exp, r(2, 1, 1))
    case("linalg_inv_ex", lambda a: torch.linalg.inv_ex(a).inverse, r(2, 3, 3))
    case("linalg_inv_ex_info", lambda a: torch.linalg.inv_ex(a).info.long(),
         torch.stack([torch.zeros(3, 3), r(3, 3), torch.tensor([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]])]),
         grad=False)
    case("linalg_lu_factor", lambda a: torch.linalg.lu_factor(a).LU, r(2, 4, 4))
    case("linalg_lu_factor_pivots", lambda a: torch.linalg.lu_factor(a).pivots.long(),
         r(3, 5, 5), grad=False)
    case("linalg_lu_factor_wide", lambda a: torch.linalg.lu_factor(a).LU, r(3, 5))
    case("linalg_lu_factor_tall", lambda a: torch.linalg.lu_factor(a).LU, r(2, 5, 3))
    case("linalg_lu_p", lambda a: torch.linalg.lu(a).P, r(2, 4, 4), grad=False)
    case("linalg_lu_l_wide", lambda a: torch.linalg.lu(a).L, r(3, 5))
    case("linalg_lu_u_tall", lambda a: torch.linalg.lu(a).U, r(5, 3))
    case("linalg_lu_plu", lambda a: (lambda p, l, u: p @ l.sin() @ u)(*torch.linalg.lu(a)),
         r(2, 3, 3))
    case("linalg_lu_solve", lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
         r(2, 3, 3), r(2, 3, 2))
    case("linalg_lu_solve_adjoint_broadcast",
         lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, adjoint=True),
         r(4, 4), r(2, 4, 3))
    case("linalg_lu_solve_right",
         lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, left=False),
         r(3, 3), r(2, 3))
    case("linalg_lu_solve_right_adjoint",
         lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, left=False,
                                            adjoint=True), r(3, 3), r(2, 3))

# The multi-label hinge loss: a stream of its own.
with torch.random.fork_rng():
    torch.manual_seed(20207)
    # Each row's classes end at the first -1: two classes; one given twice; none; all five.
    ml_target = torch.tensor([[3, 0, -1, 1, 2], [1, 1, 4, -1, -1], [-1, 2, 3, 0, 1],
                              [4, 2, 0, 1, 3]])
    case("multilabel_margin_loss", F.multilabel_margin_loss, r(4, 5), ml_target)
    case("multilabel_margin_loss_none",
         lambda x, y: F.multilabel_margin_loss(x, y, reduction="none"), r(4, 5), ml_target)
    case("multilabel_margin_loss_sum_1d",
         lambda x, y: F.multilabel_margin_loss(x, y, reduction="sum"), r(6),
         torch.tensor([5, 0, 2, -1, 4, 1]))
    # CTC of log_softmax's output (torch's gradient with respect to log_probs adds exp(log_probs),
    # which log_softmax's backward cancels: through the logits the two agree).
    case("ctc_loss_padded_mean",
         lambda x, y, il, tl: F.ctc_loss(x.log_softmax(2), y, il, tl), r(12, 3, 5),
         torch.tensor([[1, 2, 2, 3], [4, 4, 0, 0], [3, 1, 3, 0]]), torch.tensor([12, 10, 7]),
         torch.tensor([4, 2, 3]))
    case("ctc_loss_concatenated_blank_none",
         lambda x, y, il, tl: F.ctc_loss(x.log_softmax(2), y, il, tl, blank=4, reduction="none"),
         r(9, 4, 5), torch.tensor([0, 1, 1, 3, 2, 2, 0]), torch.tensor([9, 6, 9, 4]),
         torch.tensor([3, 0, 2, 2]))
    # Sample 1 needs 5 frames (2, blank, 2, blank, 2) and has 4: inf, zeroed.
    case("ctc_loss_zero_infinity_sum",
         lambda x, y, il, tl: F.ctc_loss(x.log_softmax(2), y, il, tl, reduction="sum",
                                         zero_infinity=True), r(6, 2, 3),
         torch.tensor([[1, 2, 1], [2, 2, 2]]), torch.tensor([6, 4]), torch.tensor([3, 3]))
    case("ctc_loss_unbatched",
         lambda x, y, il, tl: F.ctc_loss(x.log_softmax(1), y, il, tl, reduction="none"), r(7, 4),
         torch.tensor([3, 3, 1]), torch.tensor(7), torch.tensor(3))
    case("linalg_tensorinv", torch.linalg.tensorinv, r(2, 3, 6))
    case("linalg_tensorinv_ind1", lambda a: torch.linalg.tensorinv(a, ind=1), r(6, 2, 3))
    case("linalg_tensorsolve", torch.linalg.tensorsolve, r(2, 3, 6), r(2, 3))
    case("linalg_tensorsolve_dims", lambda a, b: torch.linalg.tensorsolve(a, b, dims=(0,)),
         r(6, 2, 3), r(2, 3))
    # CTC: a last empty target among concatenated ones; padding outside the classes (torch reads
    # no further than each length); a target holding the blank's label.
    case("ctc_loss_concatenated_last_empty",
         lambda x, y, il, tl: F.ctc_loss(x.log_softmax(2), y, il, tl, reduction="none"),
         r(4, 3, 3), torch.tensor([1, 2, 2]), torch.tensor([4, 3, 4]), torch.tensor([2, 1, 0]))
    case("ctc_loss_padding_outside",
         lambda x, y, il, tl: F.ctc_loss(x.log_softmax(2), y, il, tl, reduction="none"),
         r(4, 2, 3), torch.tensor([[1, 2], [1, -1]]), torch.tensor([4, 3]), torch.tensor([2, 1]))
    case("ctc_loss_blank_in_target",
         lambda x, y, il, tl: F.ctc_loss(x.log_softmax(2), y, il, tl, reduction="none"),
         r(3, 1, 3), torch.tensor([[1, 0]]), torch.tensor([3]), torch.tensor([2]), grad=False)
    # CTC over longer inputs (the recursions over many frames and states): repeated labels,
    # inputs of several lengths, one just long enough (8 labels with 3 repeats: 11 frames).
    case("ctc_loss_long",
         lambda x, y, il, tl: F.ctc_loss(x.log_softmax(2), y, il, tl, reduction="none"),
         r(60, 5, 8),
         torch.tensor([[1, 1, 2, 3, 3, 3, 7, 4, 5, 6, 2, 1], [2, 2, 2, 2, 5, 6, 0, 0, 0, 0, 0, 0],
                       [7, 6, 5, 4, 3, 2, 1, 7, 6, 5, 4, 3], [1, 1, 1, 2, 2, 3, 4, 5, 0, 0, 0, 0],
                       [4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]]),
         torch.tensor([60, 41, 33, 11, 1]), torch.tensor([12, 6, 12, 8, 1]))
    # Max pools' indices (into each plane or volume) and their inverse, max_unpool: the values
    # and the gradient through both.
    case("max_pool2d_indices",
         lambda x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True)[1], r(2, 3, 7, 8),
         grad=False)
    case("max_pool1d_indices",
         lambda x: F.max_pool1d(x, 3, stride=2, dilation=2, return_indices=True)[1], r(2, 3, 11),
         grad=False)
    case("max_pool3d_indices",
         lambda x: F.max_pool3d(x, (2, 3, 2), stride=(2, 2, 1), padding=(1, 1, 0),
                                return_indices=True)[1], r(1, 2, 5, 6, 4), grad=False)
    case("max_pool3d_indices_ceil_dilation",
         lambda x: F.max_pool3d(x, 2, stride=2, dilation=(2, 1, 1), ceil_mode=True,
                                return_indices=True)[1], r(2, 1, 7, 5, 5), grad=False)
    case("max_unpool2d", lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2),
         r(2, 3, 6, 6))
    case("max_unpool2d_output_size",
         lambda x: F.max_unpool2d(*F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True),
                                  3, stride=2, padding=1, output_size=(8, 9)), r(1, 2, 8, 9))
    case("max_unpool1d",
         lambda x: F.max_unpool1d(*F.max_pool1d(x, 3, stride=2, return_indices=True), 3, stride=2),
         r(2, 2, 9))
    case("max_unpool3d", lambda x: F.max_unpool3d(*F.max_pool3d(x, 2, return_indices=True), 2),
         r(1, 2, 4, 4, 6))

# Resizing in every mode, and ops built on sorts, scans and scatters: a stream of their own.
with torch.random.fork_rng():
    torch.manual_seed(20208)
    case("interpolate_linear_1d", lambda x: F.interpolate(x, size=7, mode="linear"), r(2, 3, 5))
    case("interpolate_linear_1d_corners_scale",
         lambda x: F.interpolate(x, scale_factor=1.7, mode="linear", align_corners=True), r(1, 2, 6))
    case("interpolate_nearest_1d_scale", lambda x: F.interpolate(x, scale_factor=2.5), r(2, 2, 4))
    case("interpolate_nearest_exact", lambda x: F.interpolate(x, size=(5, 7), mode="nearest-exact"),
         r(1, 2, 3, 4))
    case("interpolate_nearest_exact_down",
         lambda x: F.interpolate(x, size=(2, 3), mode="nearest-exact"), r(1, 2, 5, 7))
    case("interpolate_bicubic", lambda x: F.interpolate(x, size=(7, 5), mode="bicubic"),
         r(2, 2, 4, 3))
    case("interpolate_bicubic_corners_scale",
         lambda x: F.interpolate(x, scale_factor=(1.5, 2.5), mode="bicubic", align_corners=True),
         r(1, 2, 3, 4))
    case("interpolate_bicubic_down", lambda x: F.interpolate(x, size=(3, 2), mode="bicubic"),
         r(1, 1, 7, 5))
    case("interpolate_bicubic_recompute",
         lambda x: F.interpolate(x, scale_factor=1.3, mode="bicubic", recompute_scale_factor=True),
         r(1, 1, 5, 4))
    case("interpolate_trilinear", lambda x: F.interpolate(x, size=(3, 5, 4), mode="trilinear"),
         r(1, 2, 2, 3, 3))
    case("interpolate_trilinear_corners_scale",
         lambda x: F.interpolate(x, scale_factor=2.0, mode="trilinear", align_corners=True),
         r(1, 1, 2, 2, 3))
    case("interpolate_nearest_3d", lambda x: F.interpolate(x, size=(4, 3, 5)), r(1, 2, 2, 3, 2))
    case("interpolate_area_2d", lambda x: F.interpolate(x, size=(3, 2), mode="area"), r(1, 2, 7, 5))
    case("interpolate_area_1d_scale", lambda x: F.interpolate(x, scale_factor=0.5, mode="area"),
         r(2, 2, 9))
    # diff, nansum/nanmean, cummax/cummin (ties and NaN), quantile.
    case("diff", lambda x: torch.diff(x), r(3, 5))
    case("diff_n2_dim0_prepend_append",
         lambda x, p, a: torch.diff(x, n=2, dim=0, prepend=p, append=a), r(3, 4), r(1, 4), r(2, 4))
    case("diff_bool", lambda x: torch.diff(x), torch.tensor([[True, False, False, True]]))
    nan_x = r(4, 5)
    nan_x[0, 1] = nan_x[2, 3] = nan_x[2, 0] = float("nan")
    case("nansum", lambda x: torch.nansum(x), nan_x)
    case("nansum_dim", lambda x: torch.nansum(x, dim=1, keepdim=True), nan_x)
    case("nanmean_dim", lambda x: torch.nanmean(x, dim=0), nan_x)
    tied = torch.tensor([[1.0, 3.0, 3.0, 2.0, 5.0, 5.0, 0.0], [2.0, 1.0, 1.0, 0.5, 0.5, 4.0, 4.0]])
    case("cummax", lambda x: torch.cummax(x, 1)[0], tied)
    case("cummax_indices", lambda x: torch.cummax(x, 1)[1], tied, grad=False)
    case("cummin", lambda x: torch.cummin(x, 1)[0], tied)
    case("cummin_indices", lambda x: torch.cummin(x, 1)[1], tied, grad=False)
    case("cummax_dim0", lambda x: torch.cummax(x, 0)[0], r(9, 3))
    nan_seq = torch.tensor([1.0, float("nan"), 3.0, float("nan"), 0.5, 7.0])
    case("cummax_nan_indices", lambda x: torch.cummax(x, 0)[1], nan_seq, grad=False)
    case("cummin_nan_indices", lambda x: torch.cummin(x, 0)[1], nan_seq, grad=False)
    case("quantile", lambda x: torch.quantile(x, 0.3), r(11))
    case("quantile_q_dim",
         lambda x: torch.quantile(x, torch.tensor([0.0, 0.25, 0.5, 0.9, 1.0]), dim=1, keepdim=True),
         r(3, 8))
    for mode in ["lower", "higher", "midpoint", "nearest"]:
        case("quantile_" + mode,
             lambda x, mode=mode: torch.quantile(x, torch.tensor([0.1, 0.5, 0.75]), dim=0,
                                                 interpolation=mode), r(7, 3))
    case("quantile_nan_row", lambda x: torch.quantile(x, 0.5, dim=1), nan_x)
    case("nanquantile", lambda x: torch.nanquantile(x, torch.tensor([0.2, 0.8]), dim=1), nan_x)
    # index_copy, masked_scatter, scatter_reduce in every mode.
    case("index_copy", lambda x, s: x.index_copy(1, torch.tensor([3, 0]), s), r(3, 4), r(3, 2))
    case("masked_scatter", lambda x, s: x.masked_scatter(torch.tensor([[True], [False], [True]]), s),
         r(3, 4), r(3, 3))
    sr_index = torch.tensor([[0, 1, 0, 2, 2], [1, 1, 3, 3, 3]])
    for reduce in ["sum", "prod", "mean", "amax", "amin"]:
        for include_self in [True, False]:
            case("scatter_reduce_%s%s" % (reduce, "" if include_self else "_exclude"),
                 lambda x, s, reduce=reduce, include_self=include_self:
                     x.scatter_reduce(1, sr_index, s, reduce, include_self=include_self),
                 r(2, 4), r(2, 5))
    # Ties of amax and amin with self and among the values (the gradient is shared), zeros of
    # prod (one and two at a position).
    case("scatter_reduce_amax_ties",
         lambda x, s: x.scatter_reduce(0, torch.tensor([0, 0, 1, 1, 2]), s, "amax"),
         torch.tensor([1.0, 5.0, 0.0]), torch.tensor([1.0, 0.5, 5.0, 5.0, -1.0]))
    case("scatter_reduce_amin_ties_exclude",
         lambda x, s: x.scatter_reduce(0, torch.tensor([0, 0, 1, 1, 2]), s, "amin",
                                       include_self=False),
         torch.tensor([1.0, 5.0, 0.0]), torch.tensor([1.0, 0.5, 5.0, 5.0, -1.0]))
    case("scatter_reduce_prod_zeros",
         lambda x, s: x.scatter_reduce(0, torch.tensor([0, 0, 1, 1, 2, 2]), s, "prod"),
         torch.tensor([2.0, 0.0, 3.0]), torch.tensor([0.0, 4.0, 5.0, 6.0, 0.0, 0.0]))
    case("scatter_reduce_amax_nan",
         lambda x, s: x.scatter_reduce(0, torch.tensor([0, 0, 1]), s, "amax"),
         torch.tensor([1.0, 2.0]), torch.tensor([float("nan"), 3.0, 1.0]), grad=False)
    ints = torch.tensor([[5, 7, 1], [2, 9, 4]])
    case("scatter_reduce_mean_int",
         lambda x, s: x.scatter_reduce(1, torch.tensor([[0, 0, 2], [1, 1, 1]]), s, "mean"), ints,
         torch.tensor([[4, 1, 8], [3, 3, 6]]))
    # The unique family: values, inverse and counts of each.
    # (No NaN: torch 1.13's CPU unique gives a NaN a count of 0 and misplaces it.)
    u = torch.tensor([[3.0, 1.0, 3.0, -0.5], [2.0, 1.0, 1.0, -0.5]])
    for name, pick in [("values", 0), ("inverse", 1), ("counts", 2)]:
        case("unique_" + name, lambda x, pick=pick: torch.unique(
            x, return_inverse=True, return_counts=True)[pick], u, grad=False)
        case("unique_consecutive_" + name, lambda x, pick=pick: torch.unique_consecutive(
            x, return_inverse=True, return_counts=True)[pick],
             torch.tensor([1, 1, 2, 2, 2, 1, 3, 3]), grad=False)
        case("unique_dim_" + name, lambda x, pick=pick: torch.unique(
            x, dim=1, return_inverse=True, return_counts=True)[pick],
             torch.tensor([[1, 0, 1, 1, 0], [2, 5, 2, 0, 5]]), grad=False)
        case("unique_consecutive_dim_" + name, lambda x, pick=pick: torch.unique_consecutive(
            x, dim=0, return_inverse=True, return_counts=True)[pick],
             torch.tensor([[1, 2], [1, 2], [0, 2], [1, 2]]), grad=False)
    # grid_sample in each mode and padding, 2-d and 3-d, and affine_grid (the grids reach past
    # the edges: |values| up to 1.3).
    grid2 = (torch.rand(2, 3, 4, 2) * 2.6 - 1.3)
    for mode in ["bilinear", "nearest"]:
        for padding in ["zeros", "border", "reflection"]:
            for corners in [False, True]:
                case("grid_sample_%s_%s%s" % (mode, padding, "_corners" if corners else ""),
                     lambda x, g, mode=mode, padding=padding, corners=corners: F.grid_sample(
                         x, g, mode=mode, padding_mode=padding, align_corners=corners),
                     r(2, 3, 5, 4), grid2)
    case("grid_sample_3d", lambda x, g: F.grid_sample(x, g, padding_mode="reflection",
                                                      align_corners=False),
         r(1, 2, 3, 4, 5), torch.rand(1, 2, 3, 2, 3) * 2.4 - 1.2)
    case("affine_grid", lambda t: F.affine_grid(t, [2, 3, 4, 5], align_corners=False), r(2, 2, 3))
    case("affine_grid_corners_3d", lambda t: F.affine_grid(t, [1, 1, 2, 3, 4], align_corners=True),
         r(1, 3, 4))
    case("affine_grid_then_sample",
         lambda x, t: F.grid_sample(x, F.affine_grid(t, [2, 3, 6, 5], align_corners=False),
                                    align_corners=False), r(2, 3, 5, 4), r(2, 2, 3))

# Packed sequences (torch.nn.utils.rnn) through the recurrent layers, as nn.LSTM runs them: the
# states permuted into the packed order and back, the output padded again (with -0.5). The
# lengths differ, so every sort packs the batch alike.
with torch.random.fork_rng():
    torch.manual_seed(20209)
    rnn_utils = torch.nn.utils.rnn

    def packed_rnn(fn, x, states, w, layers, bidirectional, batch_first=False):
        packed = rnn_utils.pack_padded_sequence(x, torch.tensor([3, 5, 2, 4]),
                                                batch_first=batch_first, enforce_sorted=False)
        states = [h.index_select(1, packed.sorted_indices) for h in states]
        out = fn(packed.data, packed.batch_sizes, states if len(states) > 1 else states[0], w,
                 True, layers, 0.0, False, bidirectional)
        padded, _ = rnn_utils.pad_packed_sequence(
            rnn_utils.PackedSequence(out[0], packed.batch_sizes, packed.sorted_indices,
                                     packed.unsorted_indices),
            batch_first=batch_first, padding_value=-0.5)
        return flat(padded, *[h.index_select(1, packed.unsorted_indices) for h in out[1:]])

    case("lstm_packed_2layer_bidirectional",
         lambda x, h, c, *w: packed_rnn(torch._VF.lstm, x, [h, c], w, 2, True),
         r(5, 4, 3), r(4, 4, 4), r(4, 4, 4), *weights(4, 4, [3, 8], directions=2))
    case("gru_packed_batch_first",
         lambda x, h, *w: packed_rnn(torch._VF.gru, x, [h], w, 1, False, batch_first=True),
         r(4, 5, 3), r(1, 4, 5), *weights(3, 5, [3]))
    case("rnn_tanh_packed_sorted",
         lambda x, h, *w: flat(*torch._VF.rnn_tanh(
             *rnn_utils.pack_padded_sequence(x, [5, 4, 2, 2])[:2], h, w, True, 1, 0.0, False,
             False)),
         r(5, 4, 2), r(1, 4, 3), *weights(1, 3, [2]))
    case("pack_padded_sequence_batch_first",
         lambda x: rnn_utils.pack_padded_sequence(x, [3, 5, 2, 4], batch_first=True,
                                                  enforce_sorted=False).data, r(4, 5, 2))
    case("pad_packed_sequence_total_length",
         lambda x: rnn_utils.pad_packed_sequence(
             rnn_utils.pack_padded_sequence(x, [3, 5, 2, 4], enforce_sorted=False),
             padding_value=2.0, total_length=7)[0], r(5, 4, 2))
    case("pack_sequence", lambda a, b, c: rnn_utils.pack_sequence([a, b, c]).data, r(4, 3),
         r(3, 3), r(1, 3))
    # Embedding gradients scaled by each row's frequency in the batch, with a padding row too.
    # (torch's gradient of that gradient drops the scaling; test_gradcheck.cpp checks tandem's
    # against finite differences instead.)
    freq_idx = torch.tensor([[1, 3, 1], [0, 1, 3]])
    case("embedding_scale_grad_by_freq",
         lambda w, i: F.embedding(i, w, scale_grad_by_freq=True), r(5, 3), freq_idx)
    case("embedding_scale_grad_by_freq_padding",
         lambda w, i: F.embedding(i, w, padding_idx=3, scale_grad_by_freq=True), r(5, 3), freq_idx)
    # Anti-aliased resizing: down, down by a factor, with corners aligned, up along one axis.
    case("interpolate_bilinear_antialias_down",
         lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True), r(2, 3, 11, 9))
    case("interpolate_bicubic_antialias_scale",
         lambda x: F.interpolate(x, scale_factor=0.4, mode="bicubic", antialias=True),
         r(1, 2, 10, 12))
    case("interpolate_bilinear_antialias_corners",
         lambda x: F.interpolate(x, size=(4, 5), mode="bilinear", align_corners=True,
                                 antialias=True), r(1, 1, 9, 13))
    case("interpolate_bicubic_antialias_up_down",
         lambda x: F.interpolate(x, size=(8, 3), mode="bicubic", antialias=True), r(1, 2, 5, 9))
    # grid_sample's bicubic mode in each padding, the grid reaching past the edges.
    grid_bicubic = torch.rand(2, 3, 4, 2) * 2.6 - 1.3
    for padding in ["zeros", "border", "reflection"]:
        for corners in [False, True]:
            case("grid_sample_bicubic_%s%s" % (padding, "_corners" if corners else ""),
                 lambda x, g, padding=padding, corners=corners: F.grid_sample(
                     x, g, mode="bicubic", padding_mode=padding, align_corners=corners),
                 r(2, 3, 5, 4), grid_bicubic)

with open(os.path.join(HERE, "ops.json"), "w") as f:
    json.dump({"generator": "torch " + torch.__version__, "cases": cases}, f)

# f16 / bf16 rounding: f32 inputs and the bit patterns torch produces.
vals = [0.0, -0.0, 1.0, -2.5, 65504.0, 65520.0, 1e-8, 6.1e-5, 5.96e-8, 2.98e-8, float("inf"),
        float("-inf"), 3.14159265, 1.0009765625, 1.00048828125, 1.00146484375, 3.3895314e38,
        1.00390625, 1.001953125, 1.005859375]
vals += torch.randn(64).mul(100).tolist() + torch.randn(32).mul(1e-5).tolist()
x = torch.tensor(vals, dtype=torch.float32)
f32_bits = [struct.unpack("<I", struct.pack("<f", v))[0] for v in x.tolist()]
half = x.to(torch.float16).view(torch.int16).tolist()
bf = x.to(torch.bfloat16).view(torch.int16).tolist()
with open(os.path.join(HERE, "half.json"), "w") as f:
    json.dump({"f32_bits": f32_bits, "f16_bits": [b & 0xFFFF for b in half],
               "bf16_bits": [b & 0xFFFF for b in bf]}, f)
print(f"wrote {len(cases)} op cases and {len(vals)} half/bfloat16 conversions")
