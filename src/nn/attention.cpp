// Multi-head attention from recorded ops: projections (linear), the scores of each head (bmm),
// softmax, dropout and the output projection, as torch 1.13's multi_head_attention_forward.
#include "tandem/nn/attention.hpp"

#include <cmath>
#include <limits>
#include <sstream>

#include "tandem/nn/init.hpp"
#include "tandem/ops.hpp"

namespace tandem::nn {

namespace functional {
namespace {

constexpr const char* kOp = "multi_head_attention_forward";

// A mask as scores to add: a boolean one (or integer, as torch's deprecated uint8 masks) gives
// -inf where it is true and 0 elsewhere; a floating one is added as it is, in the scores' dtype.
Tensor additive_mask(const Tensor& mask, DType dtype, const char* name) {
  if (is_floating(mask.dtype())) return mask.to(dtype);
  TANDEM_CHECK(mask.dtype() == DType::boolean || mask.dtype() == DType::u8, kOp, ": ", name,
               " must be boolean or floating, got ", dtype_name(mask.dtype()));
  return zeros(mask.shape(), TensorOptions(dtype).device(mask.device()))
      .masked_fill(mask.to(DType::boolean), -std::numeric_limits<double>::infinity());
}

void check_shape(const Tensor& t, const Shape& expected, const char* name) {
  TANDEM_CHECK(t.shape() == expected, kOp, ": ", name, " must be ", shape_str(expected), ", got ",
               shape_str(t.shape()));
}

// The projected keys or values of every head, (N * H, S, hd), from (S, N, E) projections.
Tensor heads(const Tensor& x, int64_t batch_heads, int64_t head_dim) {
  return x.reshape({x.size(0), batch_heads, head_dim}).transpose(0, 1);
}

}  // namespace

std::tuple<Tensor, Tensor> multi_head_attention_forward(
    const Tensor& query, const Tensor& key, const Tensor& value,
    const MultiheadAttentionForwardFuncOptions& o) {
  TANDEM_CHECK(query.defined() && key.defined() && value.defined(), kOp,
               ": query, key and value must be defined");
  TANDEM_CHECK((query.dim() == 3 || query.dim() == 2) && key.dim() == query.dim() &&
                   value.dim() == query.dim(),
               kOp, ": expected query, key and value all (L, N, E) or all unbatched (L, E), got ",
               shape_str(query.shape()), ", ", shape_str(key.shape()), ", ",
               shape_str(value.shape()));
  const bool batched = query.dim() == 3;
  const Tensor q_in = batched ? query : query.unsqueeze(1);
  const Tensor k_in = batched ? key : key.unsqueeze(1);
  const Tensor v_in = batched ? value : value.unsqueeze(1);
  const int64_t L = q_in.size(0), N = q_in.size(1), E = q_in.size(2), S = k_in.size(0);
  const int64_t H = o.num_heads();
  TANDEM_CHECK(E == o.embed_dim_to_check(), kOp, ": query's embedding size is ", E,
               ", expected embed_dim_to_check = ", o.embed_dim_to_check());
  TANDEM_CHECK(H > 0 && E % H == 0, kOp, ": embed_dim (", E, ") must split into num_heads (", H,
               ") equal heads");
  TANDEM_CHECK(k_in.size(1) == N && v_in.size(1) == N && v_in.size(0) == S, kOp,
               ": key and value must be (S, N, *) with the query's batch N = ", N, ", got ",
               shape_str(key.shape()), " and ", shape_str(value.shape()));
  TANDEM_CHECK(o.bias_k().defined() == o.bias_v().defined(), kOp,
               ": give both bias_k and bias_v or neither");
  const int64_t hd = E / H, NH = N * H;

  // The projections: one GEMM for self-attention's single input, three otherwise.
  Tensor bq, bk, bv;
  if (o.in_proj_bias().defined()) {
    check_shape(o.in_proj_bias(), {3 * E}, "in_proj_bias");
    auto b = o.in_proj_bias().chunk(3);
    bq = b[0], bk = b[1], bv = b[2];
  }
  Tensor q, k, v;
  if (!o.use_separate_proj_weight()) {
    const Tensor& w = o.in_proj_weight();
    TANDEM_CHECK(w.defined(), kOp,
                 ": in_proj_weight is undefined (or set use_separate_proj_weight)");
    check_shape(w, {3 * E, E}, "in_proj_weight");
    if (query.is_same(key) && key.is_same(value)) {
      auto qkv = linear(q_in, w, o.in_proj_bias()).chunk(3, -1);
      q = qkv[0], k = qkv[1], v = qkv[2];
    } else {
      auto ws = w.chunk(3);
      q = linear(q_in, ws[0], bq), k = linear(k_in, ws[1], bk), v = linear(v_in, ws[2], bv);
    }
  } else {
    TANDEM_CHECK(
        o.q_proj_weight().defined() && o.k_proj_weight().defined() && o.v_proj_weight().defined(),
        kOp,
        ": use_separate_proj_weight needs q_proj_weight, k_proj_weight and "
        "v_proj_weight");
    check_shape(o.q_proj_weight(), {E, E}, "q_proj_weight");
    check_shape(o.k_proj_weight(), {E, k_in.size(2)}, "k_proj_weight");
    check_shape(o.v_proj_weight(), {E, v_in.size(2)}, "v_proj_weight");
    q = linear(q_in, o.q_proj_weight(), bq);
    k = linear(k_in, o.k_proj_weight(), bk);
    v = linear(v_in, o.v_proj_weight(), bv);
  }

  // The masks, in the scores' shape: attn_mask (1 or N * H, L, S), key_padding_mask (N, S).
  const DType dt = q.dtype();
  Tensor mask;
  if (o.attn_mask().defined()) {
    mask = additive_mask(o.attn_mask(), dt, "attn_mask");
    if (mask.dim() == 2) {
      check_shape(mask, {L, S}, "a 2-d attn_mask");
      mask = mask.unsqueeze(0);
    } else {
      check_shape(mask, {NH, L, S}, "a 3-d attn_mask");
    }
  }
  Tensor padding;
  if (o.key_padding_mask().defined()) {
    padding = additive_mask(o.key_padding_mask(), dt, "key_padding_mask");
    if (!batched && padding.dim() == 1) padding = padding.unsqueeze(0);
    check_shape(padding, {N, S}, "key_padding_mask");
  }
  // One more key position each: bias_k/bias_v, then the zero slot; the masks let them in.
  auto one_more = [](const Tensor& m) { return m.defined() ? pad(m, {0, 1}) : m; };
  if (o.bias_k().defined()) {
    check_shape(o.bias_k(), {1, 1, E}, "bias_k");
    check_shape(o.bias_v(), {1, 1, E}, "bias_v");
    TANDEM_CHECK(!o.static_k().defined() && !o.static_v().defined(), kOp,
                 ": bias_k/bias_v cannot be used with static_k/static_v");
    k = cat({k, o.bias_k().expand({1, N, E})});
    v = cat({v, o.bias_v().expand({1, N, E})});
    mask = one_more(mask);
    padding = one_more(padding);
  }
  Tensor kh = heads(k, NH, hd), vh = heads(v, NH, hd);
  if (o.static_k().defined()) {
    check_shape(o.static_k(), {NH, o.static_k().size(1), hd}, "static_k");
    kh = o.static_k();
  }
  if (o.static_v().defined()) {
    check_shape(o.static_v(), {NH, kh.size(1), hd}, "static_v (with static_k's length)");
    vh = o.static_v();
  }
  TANDEM_CHECK(kh.size(1) == vh.size(1), kOp, ": keys (", kh.size(1), ") and values (", vh.size(1),
               ") of different lengths");
  if (o.add_zero_attn()) {
    kh = cat({kh, zeros({NH, 1, hd}, TensorOptions(dt).device(kh.device()))}, 1);
    vh = cat({vh, zeros({NH, 1, hd}, TensorOptions(dt).device(vh.device()))}, 1);
    mask = one_more(mask);
    padding = one_more(padding);
  }
  const int64_t S2 = kh.size(1);
  if (mask.defined())
    TANDEM_CHECK(mask.size(2) == S2, kOp, ": attn_mask covers ", mask.size(2),
                 " key positions, the keys have ", S2);
  if (padding.defined()) {
    TANDEM_CHECK(padding.size(1) == S2, kOp, ": key_padding_mask covers ", padding.size(1),
                 " key positions, the keys have ", S2);
    Tensor per_head = padding.reshape({N, 1, 1, S2}).expand({N, H, 1, S2}).reshape({NH, 1, S2});
    mask = mask.defined() ? add(mask, per_head) : per_head;
  }

  // Scaled dot products of each head, softmax over the keys, dropout, the weighted values.
  Tensor qh = mul(heads(q, NH, hd), 1.0 / std::sqrt(static_cast<double>(hd)));
  Tensor scores = bmm(qh, kh.transpose(1, 2));
  if (mask.defined()) scores = add(scores, mask);
  Tensor attn = softmax(scores, -1);
  if (o.training() && o.dropout_p() > 0) attn = dropout(attn, o.dropout_p(), true);
  Tensor out = bmm(attn, vh).transpose(0, 1).reshape({L * N, E});
  out = linear(out, o.out_proj_weight(), o.out_proj_bias()).reshape({L, N, E});

  Tensor weights;
  if (o.need_weights()) {
    weights = attn.reshape({N, H, L, S2});
    if (o.average_attn_weights()) weights = mul(sum(weights, {1}), 1.0 / static_cast<double>(H));
    if (!batched) weights = weights.squeeze(0);
  }
  if (!batched) out = out.squeeze(1);
  return {out, weights};
}

}  // namespace functional

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions& o)
    : Module("MultiheadAttention"),
      options(o),
      head_dim(o.num_heads() > 0 ? o.embed_dim() / o.num_heads() : 0) {
  const int64_t E = o.embed_dim();
  TANDEM_CHECK(E > 0 && o.num_heads() > 0 && E % o.num_heads() == 0,
               "MultiheadAttention: embed_dim (", E, ") must split into num_heads (", o.num_heads(),
               ") equal heads");
  TANDEM_CHECK(o.kdim() > 0 && o.vdim() > 0, "MultiheadAttention: kdim and vdim must be positive");
  TANDEM_CHECK(o.dropout() >= 0 && o.dropout() <= 1,
               "MultiheadAttention: dropout must be in [0, 1], got ", o.dropout());
  if (o.kdim() == E && o.vdim() == E) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * E, E}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({E, E}));
    k_proj_weight = register_parameter("k_proj_weight", empty({E, o.kdim()}));
    v_proj_weight = register_parameter("v_proj_weight", empty({E, o.vdim()}));
  }
  if (o.bias()) in_proj_bias = register_parameter("in_proj_bias", zeros({3 * E}));
  if (o.add_bias_kv()) {
    bias_k = register_parameter("bias_k", empty({1, 1, E}));
    bias_v = register_parameter("bias_v", empty({1, 1, E}));
  }
  out_proj =
      register_module("out_proj", std::make_shared<Linear>(LinearOptions(E, E).bias(o.bias())));
  reset_parameters();  // after out_proj's own draw, as torch's
}

void MultiheadAttention::reset_parameters() {
  for (Tensor* w : {&in_proj_weight, &q_proj_weight, &k_proj_weight, &v_proj_weight})
    if (w->defined()) init::xavier_uniform_(*w);
  for (Tensor* b : {&in_proj_bias, &out_proj->bias})
    if (b->defined()) init::zeros_(*b);
  for (Tensor* b : {&bias_k, &bias_v})
    if (b->defined()) init::xavier_normal_(*b);
}

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                       const Tensor& value,
                                                       const Tensor& key_padding_mask,
                                                       bool need_weights, const Tensor& attn_mask,
                                                       bool average_attn_weights) {
  const bool separate = !in_proj_weight.defined();
  return functional::multi_head_attention_forward(
      query, key, value,
      functional::MultiheadAttentionForwardFuncOptions(
          options.embed_dim(), options.num_heads(), in_proj_weight, in_proj_bias, bias_k, bias_v,
          options.add_zero_attn(), options.dropout(), out_proj->weight, out_proj->bias)
          .training(is_training())
          .key_padding_mask(key_padding_mask)
          .need_weights(need_weights)
          .attn_mask(attn_mask)
          .use_separate_proj_weight(separate)
          .q_proj_weight(q_proj_weight)
          .k_proj_weight(k_proj_weight)
          .v_proj_weight(v_proj_weight)
          .average_attn_weights(average_attn_weights));
}

std::string MultiheadAttention::extra_repr() const {
  std::ostringstream os;
  os << "embed_dim=" << options.embed_dim() << ", num_heads=" << options.num_heads()
     << ", dropout=" << options.dropout();
  if (options.kdim() != options.embed_dim() || options.vdim() != options.embed_dim())
    os << ", kdim=" << options.kdim() << ", vdim=" << options.vdim();
  return os.str();
}

}  // namespace tandem::nn
