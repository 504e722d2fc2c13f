// Every op against PyTorch 1.13's values (tests/golden/make_golden.py): the output, and the
// gradients of the inputs for the recorded output gradient.
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "../util.hpp"

using namespace tandem;
using tandem::testing::require_close;
using json = nlohmann::json;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor decode(const json& j) {
  Shape shape = j["shape"].get<Shape>();
  std::string dt = j["dtype"];
  if (dt == "i64") return from_vector(j["data"].get<std::vector<int64_t>>(), shape).reshape(shape);
  if (dt == "bool") {
    std::vector<bool> v;
    for (auto& x : j["data"]) v.push_back(x.get<bool>());
    return from_vector(v, shape).reshape(shape);
  }
  std::vector<double> data;  // NaN and infinities come as strings ("nan", "inf", "-inf")
  for (const auto& x : j["data"])
    data.push_back(x.is_string() ? std::stod(x.get<std::string>()) : x.get<double>());
  Tensor t = from_vector(data, shape).reshape(shape);
  return dt == "f32" ? t.to(DType::f32) : t;
}

// The pieces flattened, each times its position + 1, end to end (as make_golden.py's weighted).
Tensor weighted(const std::vector<Tensor>& parts) {
  std::vector<Tensor> flat;
  for (size_t k = 0; k < parts.size(); ++k)
    flat.push_back(parts[k].flatten() * static_cast<double>(k + 1));
  return cat(flat);
}

// Functions of eigh's, svd's and qr's factors that the factors' signs leave unchanged: Q
// diag(sin L) Q^T, U diag(sin S) Vh (over the first k columns and rows), Q sin(R).
Tensor eigh_function(const Tensor& a, const std::string& uplo) {
  auto [l, q] = linalg::eigh(a, uplo);
  return matmul(mul(q, sin(l).unsqueeze(-2)), q.transpose(-2, -1));
}
Tensor svd_function(const Tensor& a, bool full_matrices) {
  auto [u, s, vh] = linalg::svd(a, full_matrices);
  const int64_t k = s.size(-1);
  return matmul(mul(u.narrow(-1, 0, k), sin(s).unsqueeze(-2)), vh.narrow(-2, 0, k));
}
Tensor qr_function(const Tensor& a) {
  auto [q, r] = linalg::qr(a);
  return matmul(q, sin(r));
}
constexpr double kInf = std::numeric_limits<double>::infinity();

using Attn = nn::functional::MultiheadAttentionForwardFuncOptions;
using nn::functional::multi_head_attention_forward;
namespace F = nn::functional;
std::tuple<Tensor, Tensor> mha(const Tensor& q, const Tensor& k, const Tensor& v, const Attn& o) {
  return multi_head_attention_forward(q, k, v, o);
}
// A convolution layer's forward with the case's weight and bias (inputs 1 and 2) in place of
// its own, so that their gradients are the case's.
template <typename Conv, typename Options>
Tensor conv_layer(const Options& options, const std::vector<Tensor>& x) {
  Conv layer(options);
  layer.weight = x[1];
  layer.bias = x[2];
  return layer.forward(x[0]);
}

Tensor both(const std::tuple<Tensor, Tensor>& r) {
  return weighted({std::get<0>(r), std::get<1>(r)});
}

// A recurrent layer over x packed with lengths {3, 5, 2, 4} (the batch sorted), its states
// permuted into the packed order and its results back, the output padded with -0.5, flattened as
// make_golden.py's packed_rnn does. run(data, batch_sizes, states) gives {output data, h_n[, c_n]}.
template <typename Run>
Tensor packed_rnn(const Tensor& x, bool batch_first, const std::vector<Tensor>& states, Run run) {
  namespace R = nn::utils::rnn;
  auto packed = R::pack_padded_sequence(x, from_vector<int64_t>({3, 5, 2, 4}), batch_first, false);
  std::vector<Tensor> sorted;
  for (const Tensor& h : states) sorted.push_back(index_select(h, 1, packed.sorted_indices()));
  std::vector<Tensor> out = run(packed.data(), packed.batch_sizes(), sorted);
  auto padded = std::get<0>(R::pad_packed_sequence(
      R::PackedSequence(out[0], packed.batch_sizes(), packed.sorted_indices()), batch_first, -0.5));
  std::vector<Tensor> parts{padded.flatten()};
  for (size_t k = 1; k < out.size(); ++k)
    parts.push_back(index_select(out[k], 1, packed.unsorted_indices()).flatten());
  return cat(parts);
}

// The cases make_golden.py writes in loops: scatter_reduce in every mode, with self's value and
// without, quantile's interpolations, grid_sample's modes and paddings, and each of the unique
// family's three results.
std::map<std::string, Fn> with_families(std::map<std::string, Fn> table) {
  using V = const std::vector<Tensor>&;
  for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"})
    for (bool include_self : {true, false})
      table[std::string("scatter_reduce_") + reduce + (include_self ? "" : "_exclude")] =
          [reduce, include_self](V x) {
            const Tensor index = tensor({0, 1, 0, 2, 2, 1, 1, 3, 3, 3}).reshape({2, 5});
            return x[0].scatter_reduce(1, index, x[1], reduce, include_self);
          };
  for (const char* mode : {"lower", "higher", "midpoint", "nearest"})
    table[std::string("quantile_") + mode] = [mode](V x) {
      return quantile(x[0], from_vector(std::vector<float>{0.1, 0.5, 0.75}, {3}), 0, false, mode);
    };
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    for (const auto& [name, padding] :
         {std::pair{"zeros", GridPadding::zeros}, std::pair{"border", GridPadding::border},
          std::pair{"reflection", GridPadding::reflection}})
      for (bool corners : {false, true})
        table[std::string("grid_sample_") + mode + "_" + name + (corners ? "_corners" : "")] =
            [mode, padding = padding, corners](V x) {
              return grid_sample(x[0], x[1], mode, padding, corners);
            };
  const std::pair<const char*, int> picks[] = {{"values", 0}, {"inverse", 1}, {"counts", 2}};
  for (const auto& [name, pick] : picks) {
    auto part = [pick = pick](std::tuple<Tensor, Tensor, Tensor> r) {
      return pick == 0 ? std::get<0>(r) : pick == 1 ? std::get<1>(r) : std::get<2>(r);
    };
    table[std::string("unique_") + name] = [part](V x) {
      return part(_unique2(x[0], true, true, true));
    };
    table[std::string("unique_consecutive_") + name] = [part](V x) {
      return part(unique_consecutive(x[0], true, true));
    };
    table[std::string("unique_dim_") + name] = [part](V x) {
      return part(unique_dim(x[0], 1, true, true, true));
    };
    table[std::string("unique_consecutive_dim_") + name] = [part](V x) {
      return part(unique_consecutive(x[0], true, true, 0));
    };
  }
  return table;
}

const std::map<std::string, Fn>& ops() {
  using V = const std::vector<Tensor>&;
  static const std::map<std::string, Fn> table = with_families({
      {"add", [](V x) { return x[0] + x[1]; }},
      {"add_alpha", [](V x) { return add(x[0], x[1], 2.5); }},
      {"sub", [](V x) { return x[0] - x[1]; }},
      {"mul", [](V x) { return x[0] * x[1]; }},
      {"div", [](V x) { return x[0] / x[1]; }},
      {"neg", [](V x) { return -x[0]; }},
      {"pow_scalar", [](V x) { return pow(x[0], 3.0); }},
      {"pow_tensor", [](V x) { return pow(x[0], x[1]); }},
      {"exp", [](V x) { return exp(x[0]); }},
      {"log", [](V x) { return log(x[0]); }},
      {"sqrt", [](V x) { return sqrt(x[0]); }},
      {"abs", [](V x) { return abs(x[0]); }},
      {"clamp", [](V x) { return clamp(x[0], -0.5, 0.7); }},
      {"relu", [](V x) { return relu(x[0]); }},
      {"gelu", [](V x) { return gelu(x[0]); }},
      {"gelu_tanh", [](V x) { return gelu(x[0], "tanh"); }},
      {"sigmoid", [](V x) { return sigmoid(x[0]); }},
      {"tanh", [](V x) { return tanh(x[0]); }},
      {"where", [](V x) { return where(x[0], x[1], x[2]); }},
      {"sum_all", [](V x) { return sum(x[0]); }},
      {"sum_dims",
       [](V x) {
         return sum(x[0], {0, 2});
       }},
      {"sum_keepdim", [](V x) { return sum(x[0], {1}, true); }},
      {"mean_dims", [](V x) { return mean(x[0], {1}); }},
      {"max_all", [](V x) { return max(x[0]); }},
      {"min_all", [](V x) { return min(x[0]); }},
      {"max_dim", [](V x) { return max(x[0], 1).first; }},
      {"max_dim_indices", [](V x) { return max(x[0], 2).second; }},
      {"min_dim", [](V x) { return min(x[0], 0, true).first; }},
      {"argmax", [](V x) { return argmax(x[0], 1); }},
      {"var", [](V x) { return var(x[0], {2}); }},
      {"var_all_biased", [](V x) { return var(x[0], {}, 0); }},
      {"matmul_2d", [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_batched_broadcast", [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_vec", [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_3d_2d", [](V x) { return matmul(x[0], x[1]); }},
      {"linear", [](V x) { return linear(x[0], x[1], x[2]); }},
      {"conv2d", [](V x) { return conv2d(x[0], x[1], x[2], 1, 1); }},
      {"conv2d_stride_dilation", [](V x) { return conv2d(x[0], x[1], Tensor(), 2, 2, 2); }},
      {"conv2d_groups", [](V x) { return conv2d(x[0], x[1], x[2], Int2(2, 1), Int2(1, 0), 1, 2); }},
      {"conv2d_1x1", [](V x) { return conv2d(x[0], x[1]); }},
      {"conv2d_wide", [](V x) { return conv2d(x[0], x[1], x[2], 1, 1); }},
      {"batch_norm_train",
       [](V x) {
         Tensor rm = zeros({3}), rv = ones({3});
         return batch_norm(x[0], rm, rv, x[1], x[2], true, 0.1, 1e-5);
       }},
      {"batch_norm_eval",
       [](V x) {
         return batch_norm(x[0], x[3].detach(), x[4].detach(), x[1], x[2], false, 0.1, 1e-5);
       }},
      {"max_pool2d", [](V x) { return max_pool2d(x[0], 3, 2, 1); }},
      {"max_pool2d_dilation", [](V x) { return max_pool2d(x[0], 2, 1, 0, 2); }},
      {"max_pool2d_ceil", [](V x) { return max_pool2d(x[0], 3, 2, 1, 1, true); }},
      {"max_pool2d_ceil_no_pad", [](V x) { return max_pool2d(x[0], 2, 2, 0, 1, true); }},
      {"max_pool2d_ceil_dilation",
       [](V x) { return max_pool2d(x[0], {3, 2}, {2, 3}, {1, 0}, {1, 2}, true); }},
      {"avg_pool2d", [](V x) { return avg_pool2d(x[0], 3, 2, 1); }},
      {"adaptive_avg_pool2d", [](V x) { return adaptive_avg_pool2d(x[0], Int2(3, 2)); }},
      {"adaptive_avg_pool2d_1", [](V x) { return adaptive_avg_pool2d(x[0], 1); }},
      {"softmax", [](V x) { return softmax(x[0], 1); }},
      {"log_softmax", [](V x) { return log_softmax(x[0], -1); }},
      {"cross_entropy", [](V x) { return cross_entropy(x[0], x[1]); }},
      {"cross_entropy_sum", [](V x) { return cross_entropy(x[0], x[1], {Reduction::sum}); }},
      {"cross_entropy_none", [](V x) { return cross_entropy(x[0], x[1], {Reduction::none}); }},
      {"cross_entropy_ignore", [](V x) { return cross_entropy(x[0], x[1]); }},
      {"cross_entropy_smoothing",
       [](V x) {
         return cross_entropy(x[0], x[1], {Reduction::mean, -100, 0.1});
       }},
      {"cross_entropy_smoothing_ignore",
       [](V x) {
         return cross_entropy(x[0], x[1], {Reduction::mean, -100, 0.2});
       }},
      {"cross_entropy_smoothing_sum",
       [](V x) {
         return cross_entropy(x[0], x[1], {Reduction::sum, -100, 0.2});
       }},
      {"cross_entropy_spatial", [](V x) { return cross_entropy(x[0], x[1]); }},
      {"nll_loss", [](V x) { return nll_loss(x[0], x[1]); }},
      {"mse_loss", [](V x) { return mse_loss(x[0], x[1]); }},
      {"mse_loss_sum", [](V x) { return mse_loss(x[0], x[1], Reduction::sum); }},
      {"cat",
       [](V x) {
         return cat({x[0], x[1]}, 1);
       }},
      {"stack",
       [](V x) {
         return stack({x[0], x[1]}, 0);
       }},
      {"pad",
       [](V x) {
         return pad(x[0], {1, 2, 0, 1}, 0.5);
       }},
      {"pad_negative",
       [](V x) {
         return pad(x[0], {-1, 1});
       }},
      {"flatten", [](V x) { return flatten(x[0], 1); }},
      {"permute_contiguous",
       [](V x) {
         return x[0].permute({2, 0, 1}).contiguous() * 2.0;
       }},
      {"slice_step", [](V x) { return x[0].slice(1, 1, 5, 2) * 3.0; }},
      {"select", [](V x) { return x[0].select(1, 2) * 2.0; }},
      {"expand",
       [](V x) {
         return x[0].expand({3, 4, 5}) * 1.5;
       }},
      {"transpose_matmul", [](V x) { return matmul(x[0].transpose(0, 1), x[1]); }},
      // The ops under libtorch's names, written as a libtorch user writes them.
      {"l1_loss", [](V x) { return l1_loss(x[0], x[1]); }},
      {"l1_loss_sum", [](V x) { return l1_loss(x[0], x[1], Reduction::Sum); }},
      {"smooth_l1_loss", [](V x) { return smooth_l1_loss(x[0], x[1]); }},
      {"smooth_l1_loss_beta_none",
       [](V x) { return smooth_l1_loss(x[0], x[1], Reduction::None, 0.5); }},
      {"binary_cross_entropy", [](V x) { return binary_cross_entropy(x[0], x[1]); }},
      {"binary_cross_entropy_weight_sum",
       [](V x) { return binary_cross_entropy(x[0], x[1], x[2], Reduction::Sum); }},
      {"binary_cross_entropy_with_logits",
       [](V x) { return binary_cross_entropy_with_logits(x[0], x[1]); }},
      {"binary_cross_entropy_with_logits_weights",
       [](V x) { return binary_cross_entropy_with_logits(x[0], x[1], x[2], x[3]); }},
      {"leaky_relu", [](V x) { return leaky_relu(x[0], 0.2); }},
      {"nll_loss_weight", [](V x) { return nll_loss(x[0], x[1], x[2]); }},
      {"cross_entropy_weight",
       [](V x) { return cross_entropy(x[0], x[1], {Reduction::mean, -100, 0.0, x[2]}); }},
      {"cross_entropy_weight_smoothing",
       [](V x) { return cross_entropy(x[0], x[1], {Reduction::mean, -100, 0.2, x[2]}); }},
      {"cross_entropy_weight_smoothing_sum",
       [](V x) { return cross_entropy(x[0], x[1], {Reduction::sum, -100, 0.2, x[2]}); }},
      {"cross_entropy_weight_spatial_none",
       [](V x) { return cross_entropy(x[0], x[1], {Reduction::none, -100, 0.1, x[2]}); }},
      {"nll_loss_weight_none", [](V x) { return nll_loss(x[0], x[1], x[2], Reduction::None); }},
      {"norm", [](V x) { return x[0].norm(); }},
      {"std_dim", [](V x) { return x[0].std({1}); }},
      {"conv_transpose2d",
       [](V x) { return conv_transpose2d(x[0], x[1], x[2], 2, 1, /*output_padding=*/1); }},
      {"conv_transpose2d_groups_dilation",
       [](V x) {
         return conv_transpose2d(x[0], x[1], {}, Int2(1, 2), Int2(0, 1), 0, /*groups=*/2,
                                 /*dilation=*/2);
       }},
      {"conv_transpose2d_3x3_s1", [](V x) { return conv_transpose2d(x[0], x[1], {}, 1, 1); }},
      {"index_select", [](V x) { return index_select(x[0], 1, x[1]); }},
      {"gather", [](V x) { return gather(x[0], 0, x[1]); }},
      {"scatter_add", [](V x) { return scatter_add(x[0], 0, x[1], x[2]); }},
      {"scatter", [](V x) { return scatter(x[0], 0, x[1], x[2]); }},
      {"index_add", [](V x) { return index_add(x[0], 0, x[1], x[2], 0.5); }},
      {"embedding_padding", [](V x) { return embedding(x[0], x[1], 1); }},
      {"interpolate_bilinear_antialias_down",
       [](V x) { return interpolate(x[0], Shape{3, 4}, {}, "bilinear", {}, {}, true); }},
      {"interpolate_bicubic_antialias_scale",
       [](V x) {
         return interpolate(x[0], {}, std::vector<double>{0.4}, "bicubic", {}, {}, true);
       }},
      {"interpolate_bilinear_antialias_corners",
       [](V x) { return interpolate(x[0], Shape{4, 5}, {}, "bilinear", true, {}, true); }},
      {"interpolate_bicubic_antialias_up_down",
       [](V x) { return interpolate(x[0], Shape{8, 3}, {}, "bicubic", {}, {}, true); }},
      {"embedding_scale_grad_by_freq", [](V x) { return embedding(x[0], x[1], -1, true); }},
      {"embedding_scale_grad_by_freq_padding", [](V x) { return embedding(x[0], x[1], 3, true); }},
      {"layer_norm",
       [](V x) {
         return layer_norm(x[0], {3, 4}, x[1], x[2], 1e-5);
       }},
      {"layer_norm_plain", [](V x) { return layer_norm(x[0], {5}); }},
      // The other activations, math functions, scans, products and sorts.
      {"silu", [](V x) { return silu(x[0]); }},
      {"elu", [](V x) { return elu(x[0], 0.7); }},
      {"selu", [](V x) { return selu(x[0]); }},
      {"softplus", [](V x) { return softplus(x[0], 2.0, 3.0); }},
      {"mish", [](V x) { return mish(x[0]); }},
      {"hardswish", [](V x) { return hardswish(x[0]); }},
      {"hardsigmoid", [](V x) { return hardsigmoid(x[0]); }},
      {"logsigmoid", [](V x) { return log_sigmoid(x[0]); }},
      {"hardtanh", [](V x) { return hardtanh(x[0], -0.5, 0.8); }},
      {"relu6", [](V x) { return relu6(x[0]); }},
      {"softsign", [](V x) { return softsign(x[0]); }},
      {"prelu", [](V x) { return prelu(x[0], x[1]); }},
      {"expm1", [](V x) { return expm1(x[0]); }},
      {"tan", [](V x) { return tan(x[0]); }},
      {"atan", [](V x) { return atan(x[0]); }},
      {"erf", [](V x) { return erf(x[0]); }},
      {"log2", [](V x) { return log2(x[0]); }},
      {"log10", [](V x) { return log10(x[0]); }},
      {"reciprocal", [](V x) { return reciprocal(x[0]); }},
      {"cumsum", [](V x) { return cumsum(x[0], 1); }},
      {"cumsum_dim0", [](V x) { return x[0].cumsum(0); }},
      {"prod_dim", [](V x) { return prod(x[0], 1); }},
      {"prod_dim0_keepdim", [](V x) { return x[0].prod(0, true); }},
      {"prod_all", [](V x) { return prod(x[0]); }},
      {"logsumexp", [](V x) { return logsumexp(x[0], {0, 2}); }},
      {"logsumexp_keepdim", [](V x) { return x[0].logsumexp(1, true); }},
      {"sort_descending", [](V x) { return sort(x[0], 1, true).first; }},
      {"sort_indices", [](V x) { return std::get<1>(x[0].sort(0)); }},
      {"topk", [](V x) { return topk(x[0], 3).first; }},
      {"topk_smallest_dim0", [](V x) { return x[0].topk(2, 0, false).first; }},
      {"masked_select", [](V x) { return masked_select(x[0], x[1]); }},
      {"atan2", [](V x) { return atan2(x[0], x[1]); }},
      {"fmod", [](V x) { return fmod(x[0], x[1]); }},
      {"fmod_negative_divisor", [](V x) { return x[0].fmod(x[1]); }},
      {"remainder", [](V x) { return remainder(x[0], x[1]); }},
      {"remainder_scalar", [](V x) { return x[0].remainder(-1.5); }},
      {"fmod_int", [](V x) { return fmod(x[0], x[1]); }},
      {"remainder_int", [](V x) { return remainder(x[0], x[1]); }},
      {"trunc", [](V x) { return trunc(x[0]); }},
      {"tril", [](V x) { return tril(x[0], -1); }},
      {"triu", [](V x) { return x[0].triu(2); }},
      {"normalize", [](V x) { return normalize(x[0]); }},
      {"normalize_p1_dim0",
       [](V x) {
         return nn::functional::normalize(x[0], nn::functional::NormalizeFuncOptions().p(1).dim(0));
       }},
      {"one_hot", [](V x) { return one_hot(x[0], 5); }},
      // what nn::InstanceNorm2d computes: group norm with a group per channel
      {"instance_norm", [](V x) { return group_norm(x[0], 3, x[1], x[2]); }},
      {"einsum_bmm", [](V x) { return einsum("bij,bjk->bik", {x[0], x[1]}); }},
      {"einsum_attention", [](V x) { return einsum("bhqd,bhkd->bhqk", {x[0], x[1]}); }},
      {"einsum_transpose", [](V x) { return einsum("ij->ji", {x[0]}); }},
      {"einsum_dot", [](V x) { return einsum("i,i->", {x[0], x[1]}); }},
      {"einsum_outer", [](V x) { return einsum("i,j->ij", {x[0], x[1]}); }},
      {"einsum_sum_kept", [](V x) { return einsum("ijk->j", {x[0]}); }},
      {"einsum_implicit", [](V x) { return einsum("jk,ij", {x[0], x[1]}); }},
      {"einsum_ellipsis", [](V x) { return einsum("...ij,jk->...ik", {x[0], x[1]}); }},
      {"einsum_three", [](V x) { return einsum("ij,jk,kl->li", {x[0], x[1], x[2]}); }},
      {"einsum_broadcast_one", [](V x) { return einsum("bij,bjk->bik", {x[0], x[1]}); }},
      {"einsum_summed_alone", [](V x) { return einsum("ij, kj -> k", {x[0], x[1]}); }},
      {"group_norm", [](V x) { return group_norm(x[0], 2, x[1], x[2]); }},
      {"cumprod", [](V x) { return cumprod(x[0], 1); }},
      {"cumprod_zeros", [](V x) { return x[0].cumprod(1); }},
      {"cumprod_zeros_dim0", [](V x) { return cumprod(x[0], 0); }},
      // 3-d convolution and pooling, avg_pool2d's divisor options.
      {"conv3d", [](V x) { return conv3d(x[0], x[1], x[2], 1, 1); }},
      {"conv3d_stride_dilation_groups",
       [](V x) { return conv3d(x[0], x[1], {}, {2, 1, 2}, {2, 1, 0}, {2, 1, 1}, 2); }},
      {"conv3d_unbatched", [](V x) { return conv3d(x[0], x[1], {}, 2); }},
      {"max_pool3d", [](V x) { return max_pool3d(x[0], 3, 2, 1); }},
      {"max_pool3d_ceil_dilation",
       [](V x) { return max_pool3d(x[0], {2, 3, 2}, {2, 2, 1}, {1, 1, 0}, {2, 1, 2}, true); }},
      {"max_pool3d_ties", [](V x) { return max_pool3d(x[0], 2, 1); }},
      {"avg_pool3d", [](V x) { return avg_pool3d(x[0], 3, 2, 1); }},
      {"avg_pool3d_ceil_exclude_pad",
       [](V x) { return avg_pool3d(x[0], {3, 2, 3}, 2, 1, true, false); }},
      {"avg_pool3d_ceil_include_pad", [](V x) { return avg_pool3d(x[0], {3, 2, 3}, 2, 1, true); }},
      {"avg_pool3d_divisor", [](V x) { return avg_pool3d(x[0], 2, 1, 1, false, true, 3); }},
      {"adaptive_avg_pool3d", [](V x) { return adaptive_avg_pool3d(x[0], {2, 3, 2}); }},
      {"avg_pool2d_ceil_exclude_pad",
       [](V x) { return avg_pool2d(x[0], 3, 2, 1, true, false); }},
      {"avg_pool2d_ceil", [](V x) { return avg_pool2d(x[0], {3, 2}, {2, 3}, {1, 1}, true); }},
      {"avg_pool2d_divisor", [](V x) { return avg_pool2d(x[0], 2, 1, 1, false, true, 5); }},
      {"amin_dims", [](V x) { return amin(x[0], {0, 2}); }},
      {"amin_ties", [](V x) { return x[0].amin(1, true); }},
      // The 1-d pools, and the losses and distances the third libtorch probe found missing.
      {"max_pool1d", [](V x) { return max_pool1d(x[0], 3, 2, 1); }},
      {"max_pool1d_ceil_dilation", [](V x) { return max_pool1d(x[0], 2, 2, 1, 2, true); }},
      {"max_pool1d_unbatched", [](V x) { return max_pool1d(x[0], 2); }},
      {"avg_pool1d_ceil_exclude_pad", [](V x) { return avg_pool1d(x[0], 3, 2, 1, true, false); }},
      {"adaptive_avg_pool1d", [](V x) { return adaptive_avg_pool1d(x[0], 4); }},
      {"huber_loss", [](V x) { return huber_loss(x[0], x[1], Reduction::mean, 0.7); }},
      {"huber_loss_none", [](V x) { return huber_loss(x[0], x[1], Reduction::none); }},
      {"kl_div_batchmean", [](V x) { return kl_div(x[0], x[1], kBatchMean); }},
      {"kl_div_zeros_sum", [](V x) { return kl_div(x[0], x[1], Reduction::sum); }},
      {"kl_div_log_target", [](V x) { return kl_div(x[0], x[1], Reduction::none, true); }},
      {"cosine_similarity", [](V x) { return cosine_similarity(x[0], x[1]); }},
      {"cosine_similarity_last", [](V x) { return cosine_similarity(x[0], x[1], -1); }},
      {"pairwise_distance", [](V x) { return pairwise_distance(x[0], x[1], 1.5); }},
      {"pad_reflect_2d", [](V x) { return pad(x[0], {1, 2, 2, 1}, PadMode::reflect); }},
      {"pad_replicate_2d", [](V x) { return pad(x[0], {2, 1, 0, 3}, PadMode::replicate); }},
      {"pad_circular_1d", [](V x) { return pad(x[0], {1, 2}, PadMode::circular); }},
      {"pad_reflect_1d", [](V x) { return pad(x[0], {3, 1}, PadMode::reflect); }},
      {"lstm_cell", [](V x) { return both(lstm_cell(x[0], {x[1], x[2]}, x[3], x[4], x[5], x[6])); }},
      {"gru_cell", [](V x) { return gru_cell(x[0], x[1], x[2], x[3], x[4], x[5]); }},
      {"gru_cell_nobias", [](V x) { return gru_cell(x[0], x[1], x[2], x[3]); }},
      {"rnn_tanh_cell", [](V x) { return rnn_tanh_cell(x[0], x[1], x[2], x[3], x[4], x[5]); }},
      {"rnn_relu_cell", [](V x) { return rnn_relu_cell(x[0], x[1], x[2], x[3], x[4], x[5]); }},
      // Convolutions padded by name and by mode; the layers' weights are the inputs.
      {"conv2d_same_even_dilated",
       [](V x) {
         return F::conv2d(x[0], x[1],
                          F::Conv2dFuncOptions().bias(x[2]).padding(kSame).dilation({1, 2}));
       }},
      {"conv1d_same_dilated",
       [](V x) { return F::conv1d(x[0], x[1], F::Conv1dFuncOptions().padding(kSame).dilation(3)); }},
      {"conv3d_same",
       [](V x) { return F::conv3d(x[0], x[1], F::Conv3dFuncOptions().padding(kSame)); }},
      {"conv2d_valid",
       [](V x) { return F::conv2d(x[0], x[1], F::Conv2dFuncOptions().padding(kValid)); }},
      {"conv2d_reflect_same",
       [](V x) {
         return conv_layer<nn::Conv2d>(
             nn::Conv2dOptions(3, 4, {3, 2}).padding(kSame).padding_mode(kReflect), x);
       }},
      {"conv2d_circular_stride",
       [](V x) {
         return conv_layer<nn::Conv2d>(
             nn::Conv2dOptions(2, 3, 3).stride(2).padding({1, 2}).padding_mode(kCircular), x);
       }},
      {"conv1d_replicate",
       [](V x) {
         return conv_layer<nn::Conv1d>(
             nn::Conv1dOptions(2, 3, 3).padding(2).dilation(2).padding_mode(kReplicate), x);
       }},
      {"pad_sequence",
       [](V x) { return nn::utils::rnn::pad_sequence({x[0], x[1], x[2]}, false, -1.5); }},
      {"pad_sequence_batch_first",
       [](V x) { return nn::utils::rnn::pad_sequence({x[0], x[1]}, true); }},
      {"adaptive_max_pool2d", [](V x) { return std::get<0>(adaptive_max_pool2d(x[0], {3, 4})); }},
      {"adaptive_max_pool2d_unbatched",
       [](V x) { return F::adaptive_max_pool2d(x[0], F::AdaptiveMaxPool2dFuncOptions(2)); }},
      {"adaptive_max_pool2d_indices",
       [](V x) { return std::get<1>(adaptive_max_pool2d(x[0], {2, 3})); }},
      {"adaptive_max_pool1d",
       [](V x) { return nn::AdaptiveMaxPool1d(4).forward(x[0]); }},
      {"pairwise_distance_keepdim",
       [](V x) { return pairwise_distance(x[0], x[1], 2.0, 1e-6, true); }},
      // Multi-head attention, two heads, weights as inputs: the output, then the weights.
      {"mha_self",
       [](V x) {
         return both(mha(x[0], x[0], x[0], Attn(6, 2, x[1], x[2], {}, {}, false, 0, x[3], x[4])));
       }},
      {"mha_masks",
       [](V x) {
         return both(mha(x[0], x[1], x[2],
                         Attn(6, 2, x[5], x[6], {}, {}, false, 0, x[7], x[8])
                             .attn_mask(x[3])
                             .key_padding_mask(x[4])
                             .average_attn_weights(false)));
       }},
      {"mha_float_mask_3d_no_bias",
       [](V x) {
         return std::get<0>(mha(x[0], x[1], x[2],
                                Attn(6, 2, x[4], {}, {}, {}, false, 0, x[5], {})
                                    .attn_mask(x[3])
                                    .need_weights(false)));
       }},
      {"mha_unbatched",
       [](V x) {
         return both(mha(x[0], x[1], x[2],
                         Attn(6, 2, x[4], x[5], {}, {}, false, 0, x[6], x[7])
                             .key_padding_mask(x[3])));
       }},
      {"mha_kdim_bias_kv_zero_attn",
       [](V x) {
         return both(mha(x[0], x[1], x[2],
                         Attn(6, 2, {}, x[8], x[9], x[10], true, 0, x[11], x[12])
                             .attn_mask(x[3])
                             .key_padding_mask(x[4])
                             .use_separate_proj_weight(true)
                             .q_proj_weight(x[5])
                             .k_proj_weight(x[6])
                             .v_proj_weight(x[7])));
       }},
      // Recurrent layers, weights as inputs: the output, then h_n (and c_n), flattened.
      {"lstm",
       [](V x) {
         auto [out, h, c] =
             lstm(x[0], {x[1], x[2]}, {x.begin() + 3, x.end()}, true, 1, 0.0, false, false, false);
         return cat({out.flatten(), h.flatten(), c.flatten()});
       }},
      {"lstm_2layer_bidirectional_batch_first_nobias",
       [](V x) {
         auto [out, h, c] =
             lstm(x[0], {}, {x.begin() + 1, x.end()}, false, 2, 0.0, false, true, true);
         return cat({out.flatten(), h.flatten(), c.flatten()});
       }},
      {"gru_bidirectional",
       [](V x) {
         auto [out, h] =
             gru(x[0], x[1], {x.begin() + 2, x.end()}, true, 1, 0.0, false, true, false);
         return cat({out.flatten(), h.flatten()});
       }},
      {"rnn_tanh_2layer_unbatched",
       [](V x) {
         auto [out, h] =
             rnn_tanh(x[0], x[1], {x.begin() + 2, x.end()}, true, 2, 0.0, false, false, false);
         return cat({out.flatten(), h.flatten()});
       }},
      // Packed sequences as nn.LSTM runs them: states into the packed order and back, the
      // output padded again with -0.5.
      {"lstm_packed_2layer_bidirectional",
       [](V x) {
         return packed_rnn(x[0], false, {x[1], x[2]}, [&](const Tensor& data, const Tensor& sizes,
                                                          const std::vector<Tensor>& states) {
           auto [out, h, c] = lstm(data, sizes, states, {x.begin() + 3, x.end()}, true, 2, 0.0,
                                   false, true);
           return std::vector<Tensor>{out, h, c};
         });
       }},
      {"gru_packed_batch_first",
       [](V x) {
         return packed_rnn(x[0], true, {x[1]}, [&](const Tensor& data, const Tensor& sizes,
                                                   const std::vector<Tensor>& states) {
           auto [out, h] =
               gru(data, sizes, states[0], {x.begin() + 2, x.end()}, true, 1, 0.0, false, false);
           return std::vector<Tensor>{out, h};
         });
       }},
      {"rnn_tanh_packed_sorted",
       [](V x) {
         auto packed = nn::utils::rnn::pack_padded_sequence(x[0], from_vector<int64_t>({5, 4, 2, 2}));
         auto [out, h] = rnn_tanh(packed.data(), packed.batch_sizes(), x[1],
                                  {x.begin() + 2, x.end()}, true, 1, 0.0, false, false);
         return cat({out.flatten(), h.flatten()});
       }},
      {"pack_padded_sequence_batch_first",
       [](V x) {
         return nn::utils::rnn::pack_padded_sequence(x[0], from_vector<int64_t>({3, 5, 2, 4}),
                                                     true, false)
             .data();
       }},
      {"pad_packed_sequence_total_length",
       [](V x) {
         namespace R = nn::utils::rnn;
         auto packed = R::pack_padded_sequence(x[0], from_vector<int64_t>({3, 5, 2, 4}), false,
                                               false);
         return std::get<0>(R::pad_packed_sequence(packed, false, 2.0, 7));
       }},
      {"pack_sequence",
       [](V x) { return nn::utils::rnn::pack_sequence({x[0], x[1], x[2]}).data(); }},
      {"rnn_relu",
       [](V x) {
         auto [out, h] =
             rnn_relu(x[0], x[1], {x.begin() + 2, x.end()}, true, 1, 0.0, false, false, false);
         return cat({out.flatten(), h.flatten()});
       }},
      // Pieces (weighted apart), tiles, flips and resizing.
      {"chunk", [](V x) { return weighted(x[0].chunk(3, 1)); }},
      {"split_with_sizes", [](V x) { return weighted(x[0].split_with_sizes({1, 3, 2}, 0)); }},
      {"split", [](V x) { return weighted(x[0].split(2, -1)); }},
      {"unbind", [](V x) { return weighted(x[0].unbind(1)); }},
      {"repeat", [](V x) { return x[0].repeat({2, 1, 3}); }},
      {"flip", [](V x) { return x[0].flip({0, 2}); }},
      {"interpolate_nearest_size", [](V x) { return interpolate(x[0], Shape{5, 7}, {}); }},
      {"interpolate_nearest_scale",
       [](V x) { return interpolate(x[0], {}, std::vector<double>{2.0}); }},
      {"interpolate_bilinear",
       [](V x) { return interpolate(x[0], Shape{7, 5}, {}, "bilinear"); }},
      {"interpolate_bilinear_corners_scale",
       [](V x) { return interpolate(x[0], {}, std::vector<double>{1.5, 2.5}, "bilinear", true); }},
      {"interpolate_bilinear_down",
       [](V x) { return interpolate(x[0], Shape{2, 3}, {}, "bilinear"); }},
      // Gradients taken with create_graph: the recorded gradients are second derivatives.
      {"grad_of_grad_mlp",
       [](V x) {
         Tensor g = autograd::grad({sum(pow(tanh(linear(x[0], x[1], x[2])), 2.0))}, {x[0]}, {},
                                   {}, /*create_graph=*/true)[0];
         return g * g;
       }},
      {"grad_of_grad_conv_bn",
       [](V x) {
         Tensor y = batch_norm(conv2d(x[0], x[1], {}, 2, 1), {}, {}, x[2], x[3], true);
         Tensor g = autograd::grad({sum(sigmoid(y))}, {x[0]}, {}, {}, true)[0];
         return g * g;
       }},
      {"grad_of_grad_pool_ce",
       [](V x) {
         Tensor logits = linear(max_pool2d(x[0], 2).flatten(1), x[1]);
         return sum(abs(autograd::grad({cross_entropy(logits, x[2])}, {x[0]}, {}, {}, true)[0]));
       }},
      // Shape ops, order statistics, products and losses of libtorch's added later: methods,
      // free functions, functional options and loss modules each somewhere.
      {"meshgrid_ij", [](V x) { return weighted(meshgrid({x[0], x[1]}, "ij")); }},
      {"meshgrid_xy", [](V x) { return weighted(meshgrid({x[0], x[1], x[2]}, "xy")); }},
      {"diagonal", [](V x) { return diagonal(x[0], 1, 0, 2); }},
      {"diagonal_negative", [](V x) { return x[0].diagonal(-2, -1, 1); }},
      {"diag_vector", [](V x) { return diag(x[0], -1); }},
      {"diag_matrix", [](V x) { return x[0].diag(1); }},
      {"trace", [](V x) { return x[0].trace(); }},
      {"roll", [](V x) { return roll(x[0], {1, -7}, {0, 2}); }},
      {"roll_flat", [](V x) { return x[0].roll({5}); }},
      {"tile", [](V x) { return x[0].tile({2, 3, 1}); }},
      {"tile_short", [](V x) { return tile(x[0], {2}); }},
      {"repeat_interleave_dim", [](V x) { return x[0].repeat_interleave(2, 1); }},
      {"repeat_interleave_flat", [](V x) { return repeat_interleave(x[0], 3); }},
      {"repeat_interleave_tensor", [](V x) { return x[0].repeat_interleave(x[1], 0); }},
      {"unfold_overlapping", [](V x) { return x[0].unfold(1, 3, 2); }},
      {"unfold_gaps", [](V x) { return unfold(x[0], 0, 2, 3); }},
      {"pixel_shuffle", [](V x) { return nn::PixelShuffle(2).forward(x[0]); }},
      {"pixel_unshuffle", [](V x) { return F::pixel_unshuffle(x[0], 2); }},
      {"kthvalue", [](V x) { return std::get<0>(x[0].kthvalue(2, 1)); }},
      {"kthvalue_indices", [](V x) { return kthvalue(x[0], 4, 0, true).second; }},
      {"median_all", [](V x) { return x[0].median(); }},
      {"median_dim", [](V x) { return std::get<0>(median(x[0], 1)); }},
      {"median_dim_indices", [](V x) { return x[0].median(-1, true).second; }},
      {"var_mean", [](V x) { return both(var_mean(x[0], {1})); }},
      {"std_mean", [](V x) { return both(std_mean(x[0], {0, 2}, false, true)); }},
      {"cross", [](V x) { return cross(x[0], x[1], 1); }},
      {"cross_default_dim", [](V x) { return x[0].cross(x[1]); }},
      {"linalg_cross_broadcast", [](V x) { return linalg::cross(x[0], x[1]); }},
      {"baddbmm", [](V x) { return baddbmm(x[0], x[1], x[2], 0.5, 2.0); }},
      {"cdist", [](V x) { return cdist(x[0], x[1]); }},
      {"cdist_p1", [](V x) { return cdist(x[0], x[1], 1.0); }},
      {"cdist_inf",
       [](V x) { return cdist(x[0], x[1], std::numeric_limits<double>::infinity()); }},
      {"cdist_mm", [](V x) { return cdist(x[0], x[1]); }},
      {"vector_norm", [](V x) { return linalg::vector_norm(x[0], 3, {0, 2}); }},
      {"vector_norm_neg_inf",
       [](V x) {
         return linalg::vector_norm(x[0], -std::numeric_limits<double>::infinity(), {1}, true);
       }},
      {"logit", [](V x) { return logit(x[0]); }},
      {"logit_eps", [](V x) { return x[0].logit(0.2); }},
      {"clip", [](V x) { return x[0].clip(-0.3, 0.4); }},
      {"glu", [](V x) { return nn::GLU(1).forward(x[0]); }},
      {"margin_ranking_loss",
       [](V x) {
         return F::margin_ranking_loss(x[0], x[1], x[2],
                                       F::MarginRankingLossFuncOptions().margin(0.2));
       }},
      {"triplet_margin_loss_swap",
       [](V x) {
         nn::TripletMarginLoss loss(nn::TripletMarginLossOptions().margin(0.5).swap(true));
         return loss(x[0], x[1], x[2]);
       }},
      {"triplet_margin_loss_p1_sum",
       [](V x) {
         return triplet_margin_loss(x[0], x[1], x[2], 1.0, 1.0, 1e-6, false, Reduction::sum);
       }},
      {"cosine_embedding_loss",
       [](V x) {
         return nn::CosineEmbeddingLoss(nn::CosineEmbeddingLossOptions().margin(0.1))
             .forward(x[0], x[1], x[2]);
       }},
      {"hinge_embedding_loss",
       [](V x) {
         return F::hinge_embedding_loss(
             x[0], x[1], F::HingeEmbeddingLossFuncOptions().margin(0.8).reduction(kSum));
       }},
      {"soft_margin_loss", [](V x) { return nn::SoftMarginLoss()(x[0], x[1]); }},
      {"multilabel_soft_margin_loss",
       [](V x) {
         return nn::MultiLabelSoftMarginLoss(
             nn::MultiLabelSoftMarginLossOptions().weight(x[2]).reduction(kNone))(x[0], x[1]);
       }},
      {"gaussian_nll_loss", [](V x) { return nn::GaussianNLLLoss()(x[0], x[1], x[2]); }},
      {"gaussian_nll_loss_one_var_full",
       [](V x) {
         return F::gaussian_nll_loss(x[0], x[1], x[2],
                                     F::GaussianNLLLossFuncOptions().full(true).reduction(kSum));
       }},
      {"gaussian_nll_loss_last_dim_one",
       [](V x) { return gaussian_nll_loss(x[0], x[1], x[2], false, 1e-6, Reduction::none); }},
      {"poisson_nll_loss", [](V x) { return nn::PoissonNLLLoss()(x[0], x[1]); }},
      {"poisson_nll_loss_full",
       [](V x) {
         return F::poisson_nll_loss(
             x[0], x[1], F::PoissonNLLLossFuncOptions().log_input(false).full(true).reduction(kSum));
       }},
      {"movedim", [](V x) { return movedim(x[0], {0, 3}, {2, 0}); }},
      {"moveaxis", [](V x) { return moveaxis(x[0], -1, 1); }},
      {"cross_default_dim_first_input", [](V x) { return cross(x[0], x[1]); }},
      {"vector_norm_negative",
       [](V x) { return linalg::vector_norm(x[0], -1.5, {1}, false, std::nullopt); }},
      {"celu", [](V x) { return nn::CELU(nn::CELUOptions().alpha(0.7)).forward(x[0]); }},
      {"softshrink", [](V x) { return F::softshrink(x[0], F::SoftshrinkFuncOptions(0.4)); }},
      {"hardshrink", [](V x) { return nn::Hardshrink(0.6).forward(x[0]); }},
      {"tanhshrink", [](V x) { return nn::Tanhshrink().forward(x[0]); }},
      {"threshold", [](V x) { return F::threshold(x[0], F::ThresholdFuncOptions(0.2, -3.0)); }},
      {"softmin", [](V x) { return nn::Softmin(1).forward(x[0]); }},
      {"bilinear", [](V x) { return F::bilinear(x[0], x[1], x[2], x[3]); }},
      {"channel_shuffle", [](V x) { return nn::ChannelShuffle(3).forward(x[0]); }},
      {"im2col",
       [](V x) {
         return F::unfold(x[0],
                          F::UnfoldFuncOptions({2, 3}).dilation({2, 1}).padding({1, 2}).stride({1, 2}));
       }},
      {"im2col_unbatched", [](V x) { return nn::Unfold(nn::UnfoldOptions(2)).forward(x[0]); }},
      {"col2im",
       [](V x) {
         return nn::Fold(nn::FoldOptions({5, 6}, {2, 3}).dilation({2, 1}).padding({1, 2}).stride(
                             {1, 2}))
             .forward(x[0]);
       }},
      {"unflatten",
       [](V x) {
         return nn::Unflatten(1, {2, -1}).forward(x[0]) * arange(1.0, 9.0).view({2, 4, 1});
       }},
      {"searchsorted", [](V x) { return searchsorted(x[0], x[1]); }},
      {"searchsorted_right_1d", [](V x) { return searchsorted(x[0], x[1], false, true); }},
      {"bucketize", [](V x) { return bucketize(x[0], x[1], true).to(DType::i64); }},
      {"linalg_inv", [](V x) { return linalg::inv(x[0]); }},
      {"inverse_batch", [](V x) { return x[0].inverse(); }},
      {"linalg_det", [](V x) { return linalg::det(x[0]); }},
      {"linalg_slogdet", [](V x) { return std::get<1>(linalg::slogdet(x[0])); }},
      {"linalg_slogdet_sign", [](V x) { return std::get<0>(x[0].slogdet()); }},
      {"logdet", [](V x) { return logdet(x[0]); }},
      {"linalg_solve", [](V x) { return linalg::solve(x[0], x[1]); }},
      {"linalg_solve_vector", [](V x) { return linalg::solve(x[0], x[1]); }},
      {"linalg_solve_batch_vector", [](V x) { return linalg::solve(x[0], x[1]); }},
      {"linalg_solve_broadcast", [](V x) { return linalg::solve(x[0], x[1]); }},
      {"linalg_solve_right", [](V x) { return linalg::solve(x[0], x[1], false); }},
      {"linalg_cholesky", [](V x) { return linalg::cholesky(x[0]); }},
      {"linalg_cholesky_upper", [](V x) { return x[0].cholesky(true); }},
      {"solve_triangular_upper", [](V x) { return linalg::solve_triangular(x[0], x[1], true); }},
      {"solve_triangular_lower_unit_right",
       [](V x) { return linalg::solve_triangular(x[0], x[1], false, false, true); }},
      {"cholesky_solve", [](V x) { return cholesky_solve(x[0], x[1]); }},
      {"cholesky_solve_upper", [](V x) { return x[0].cholesky_solve(x[1], true); }},
      {"cholesky_inverse", [](V x) { return cholesky_inverse(x[0]); }},
      {"matrix_power", [](V x) { return linalg::matrix_power(x[0], 3); }},
      {"matrix_power_negative", [](V x) { return x[0].matrix_power(-2); }},
      {"matrix_power_zero", [](V x) { return matrix_power(x[0], 0); }},
      {"multi_margin_loss", [](V x) { return nn::MultiMarginLoss()(x[0], x[1]); }},
      {"multi_margin_loss_p2_weight_sum",
       [](V x) {
         return F::multi_margin_loss(
             x[0], x[1],
             F::MultiMarginLossFuncOptions().p(2).margin(0.7).weight(x[2]).reduction(kSum));
       }},
      {"multilabel_margin_loss", [](V x) { return nn::MultiLabelMarginLoss()(x[0], x[1]); }},
      {"multilabel_margin_loss_none",
       [](V x) {
         return F::multilabel_margin_loss(
             x[0], x[1], F::MultilabelMarginLossFuncOptions().reduction(kNone));
       }},
      {"multilabel_margin_loss_sum_1d",
       [](V x) { return multilabel_margin_loss(x[0], x[1], Reduction::sum); }},
      {"linalg_tensorinv", [](V x) { return linalg::tensorinv(x[0]); }},
      {"linalg_tensorinv_ind1", [](V x) { return linalg::tensorinv(x[0], 1); }},
      {"linalg_tensorsolve", [](V x) { return linalg::tensorsolve(x[0], x[1]); }},
      {"linalg_tensorsolve_dims", [](V x) { return linalg::tensorsolve(x[0], x[1], {0}); }},
      {"ctc_loss_concatenated_last_empty",
       [](V x) { return ctc_loss(log_softmax(x[0], 2), x[1], x[2], x[3], 0, Reduction::none); }},
      {"ctc_loss_padding_outside",
       [](V x) { return ctc_loss(log_softmax(x[0], 2), x[1], x[2], x[3], 0, Reduction::none); }},
      {"ctc_loss_blank_in_target",
       [](V x) { return ctc_loss(log_softmax(x[0], 2), x[1], x[2], x[3], 0, Reduction::none); }},
      {"ctc_loss_long",
       [](V x) { return ctc_loss(log_softmax(x[0], 2), x[1], x[2], x[3], 0, Reduction::none); }},
      {"max_pool2d_indices",
       [](V x) { return std::get<1>(max_pool2d_with_indices(x[0], 3, 2, 1)); }},
      {"max_pool1d_indices",
       [](V x) {
         return std::get<1>(
             F::max_pool1d_with_indices(x[0], F::MaxPool1dFuncOptions(3).stride(2).dilation(2)));
       }},
      {"max_pool3d_indices",
       [](V x) {
         return std::get<1>(
             max_pool3d_with_indices(x[0], Int3(2, 3, 2), Int3(2, 2, 1), Int3(1, 1, 0)));
       }},
      {"max_pool3d_indices_ceil_dilation",
       [](V x) {
         return std::get<1>(nn::MaxPool3d(nn::MaxPool3dOptions(2).stride(2).dilation(Int3(2, 1, 1))
                                              .ceil_mode(true))
                                .forward_with_indices(x[0]));
       }},
      {"max_unpool2d",
       [](V x) {
         auto [y, i] = F::max_pool2d_with_indices(x[0], F::MaxPool2dFuncOptions(2));
         return F::max_unpool2d(y, i, F::MaxUnpool2dFuncOptions(2));
       }},
      {"max_unpool2d_output_size",
       [](V x) {
         auto [y, i] = max_pool2d_with_indices(x[0], 3, 2, 1);
         return nn::MaxUnpool2d(nn::MaxUnpool2dOptions(3).stride(2).padding(1))
             .forward(y, i, std::vector<int64_t>{8, 9});
       }},
      {"max_unpool1d",
       [](V x) {
         auto [y, i] = nn::MaxPool1d(nn::MaxPool1dOptions(3).stride(2)).forward_with_indices(x[0]);
         return F::max_unpool1d(y, i, F::MaxUnpool1dFuncOptions(3).stride(2));
       }},
      {"max_unpool3d",
       [](V x) {
         auto [y, i] = max_pool3d_with_indices(x[0], 2);
         return max_unpool3d(y, i, Int3(4, 4, 6));
       }},
      // Resizing in every mode.
      {"interpolate_linear_1d", [](V x) { return interpolate(x[0], Shape{7}, {}, kLinear); }},
      {"interpolate_linear_1d_corners_scale",
       [](V x) { return interpolate(x[0], {}, std::vector<double>{1.7}, kLinear, true); }},
      {"interpolate_nearest_1d_scale",
       [](V x) { return interpolate(x[0], {}, std::vector<double>{2.5}); }},
      {"interpolate_nearest_exact",
       [](V x) {
         return F::interpolate(
             x[0], F::InterpolateFuncOptions().size(Shape{5, 7}).mode(kNearestExact));
       }},
      {"interpolate_nearest_exact_down",
       [](V x) { return interpolate(x[0], Shape{2, 3}, {}, kNearestExact); }},
      {"interpolate_bicubic", [](V x) { return interpolate(x[0], Shape{7, 5}, {}, kBicubic); }},
      {"interpolate_bicubic_corners_scale",
       [](V x) { return interpolate(x[0], {}, std::vector<double>{1.5, 2.5}, kBicubic, true); }},
      {"interpolate_bicubic_down",
       [](V x) { return interpolate(x[0], Shape{3, 2}, {}, kBicubic); }},
      {"interpolate_bicubic_recompute",
       [](V x) { return interpolate(x[0], {}, std::vector<double>{1.3}, kBicubic, {}, true); }},
      {"interpolate_trilinear",
       [](V x) { return interpolate(x[0], Shape{3, 5, 4}, {}, kTrilinear); }},
      {"interpolate_trilinear_corners_scale",
       [](V x) { return interpolate(x[0], {}, std::vector<double>{2.0}, kTrilinear, true); }},
      {"interpolate_nearest_3d", [](V x) { return interpolate(x[0], Shape{4, 3, 5}, {}); }},
      {"interpolate_area_2d", [](V x) { return interpolate(x[0], Shape{3, 2}, {}, kArea); }},
      {"interpolate_area_1d_scale",
       [](V x) { return interpolate(x[0], {}, std::vector<double>{0.5}, kArea); }},
      // diff, nansum/nanmean, cummax/cummin, quantile.
      {"diff", [](V x) { return x[0].diff(); }},
      {"diff_n2_dim0_prepend_append", [](V x) { return diff(x[0], 2, 0, x[1], x[2]); }},
      {"diff_bool", [](V x) { return diff(x[0]); }},
      {"nansum", [](V x) { return nansum(x[0]); }},
      {"nansum_dim", [](V x) { return x[0].nansum({1}, true); }},
      {"nanmean_dim", [](V x) { return nanmean(x[0], 0); }},
      {"cummax", [](V x) { return cummax(x[0], 1).first; }},
      {"cummax_indices", [](V x) { return x[0].cummax(1).second; }},
      {"cummin", [](V x) { return cummin(x[0], 1).first; }},
      {"cummin_indices", [](V x) { return std::get<1>(x[0].cummin(1)); }},
      {"cummax_dim0", [](V x) { return cummax(x[0], 0).first; }},
      {"cummax_nan_indices", [](V x) { return cummax(x[0], 0).second; }},
      {"cummin_nan_indices", [](V x) { return cummin(x[0], 0).second; }},
      {"quantile", [](V x) { return quantile(x[0], 0.3); }},
      {"quantile_q_dim",
       [](V x) {
         return x[0].quantile(from_vector(std::vector<float>{0, 0.25, 0.5, 0.9, 1}, {5}), 1, true);
       }},
      {"quantile_nan_row", [](V x) { return quantile(x[0], 0.5, 1); }},
      {"nanquantile",
       [](V x) { return x[0].nanquantile(from_vector(std::vector<float>{0.2, 0.8}, {2}), 1); }},
      // index_copy, masked_scatter, scatter_reduce.
      {"index_copy", [](V x) { return x[0].index_copy(1, tensor({3, 0}), x[1]); }},
      {"masked_scatter",
       [](V x) {
         return x[0].masked_scatter(
             from_vector(std::vector<bool>{true, false, true}, {3, 1}).reshape({3, 1}), x[1]);
       }},
      {"grid_sample_3d",
       [](V x) { return grid_sample(x[0], x[1], "bilinear", GridPadding::reflection, false); }},
      {"affine_grid", [](V x) { return affine_grid(x[0], {2, 3, 4, 5}); }},
      {"affine_grid_corners_3d", [](V x) { return affine_grid(x[0], {1, 1, 2, 3, 4}, true); }},
      {"affine_grid_then_sample",
       [](V x) {
         return F::grid_sample(x[0], F::affine_grid(x[1], {2, 3, 6, 5}),
                               F::GridSampleFuncOptions().align_corners(false));
       }},
      {"scatter_reduce_amax_ties",
       [](V x) { return x[0].scatter_reduce(0, tensor({0, 0, 1, 1, 2}), x[1], "amax"); }},
      {"scatter_reduce_amin_ties_exclude",
       [](V x) {
         return scatter_reduce(x[0], 0, tensor({0, 0, 1, 1, 2}), x[1], "amin", false);
       }},
      {"scatter_reduce_prod_zeros",
       [](V x) { return scatter_reduce(x[0], 0, tensor({0, 0, 1, 1, 2, 2}), x[1], "prod"); }},
      {"scatter_reduce_amax_nan",
       [](V x) { return scatter_reduce(x[0], 0, tensor({0, 0, 1}), x[1], "amax"); }},
      {"scatter_reduce_mean_int",
       [](V x) {
         return scatter_reduce(x[0], 1, tensor({0, 0, 2, 1, 1, 1}).reshape({2, 3}), x[1], "mean");
       }},
      {"ctc_loss_padded_mean",
       [](V x) { return nn::CTCLoss()(log_softmax(x[0], 2), x[1], x[2], x[3]); }},
      {"ctc_loss_concatenated_blank_none",
       [](V x) {
         return F::ctc_loss(log_softmax(x[0], 2), x[1], x[2], x[3],
                            F::CTCLossFuncOptions().blank(4).reduction(kNone));
       }},
      {"ctc_loss_zero_infinity_sum",
       [](V x) {
         return F::ctc_loss(log_softmax(x[0], 2), x[1], x[2], x[3],
                            F::CTCLossFuncOptions().reduction(kSum).zero_infinity(true));
       }},
      {"ctc_loss_unbatched",
       [](V x) {
         return ctc_loss(log_softmax(x[0], 1), x[1], x[2], x[3], 0, Reduction::none);
       }},
      {"multi_margin_loss_1d", [](V x) { return multi_margin_loss(x[0], x[1], 1, 1.0, Tensor(), Reduction::none); }},
      {"local_response_norm", [](V x) { return nn::LocalResponseNorm(3).forward(x[0]); }},
      {"local_response_norm_3d",
       [](V x) {
         return F::local_response_norm(x[0], F::LocalResponseNormFuncOptions(4).alpha(0.1).beta(0.5).k(2.0));
       }},
      {"local_response_norm_5d",
       [](V x) { return nn::LocalResponseNorm(nn::LocalResponseNormOptions(2).alpha(0.3)).forward(x[0]); }},
      {"embedding_bag_mean_2d", [](V x) { return F::embedding_bag(x[1], x[0]); }},
      {"embedding_bag_sum_offsets_weights",
       [](V x) {
         return F::embedding_bag(
             x[1], x[0], F::EmbeddingBagFuncOptions().offsets(x[2]).mode(kSum).per_sample_weights(x[3]));
       }},
      {"embedding_bag_max_padding",
       [](V x) {
         return F::embedding_bag(x[1], x[0],
                                 F::EmbeddingBagFuncOptions().offsets(x[2]).mode(kMax).padding_idx(2));
       }},
      {"embedding_bag_mean_last_offset_padding",
       [](V x) {
         return embedding_bag(x[0], x[1], x[2], EmbeddingBagMode::mean, Tensor(), true, -1);
       }},
      // Eigen- and singular vectors through functions their signs leave unchanged, as
      // make_golden.py's.
      {"linalg_eigh", [](V x) { return eigh_function(x[0], "L"); }},
      {"linalg_eigh_batch_upper", [](V x) { return eigh_function(x[0], "U"); }},
      {"linalg_eigh_values", [](V x) { return std::get<0>(linalg::eigh(x[0])); }},
      {"linalg_eigvalsh_upper", [](V x) { return linalg::eigvalsh(x[0], "U"); }},
      {"linalg_svd_square", [](V x) { return svd_function(x[0], false); }},
      {"linalg_svd_tall_batch", [](V x) { return svd_function(x[0], false); }},
      {"linalg_svd_wide_full", [](V x) { return svd_function(x[0], true); }},
      {"linalg_svd_values", [](V x) { return std::get<1>(linalg::svd(x[0])); }},
      {"linalg_svdvals_wide", [](V x) { return linalg::svdvals(x[0]); }},
      {"linalg_qr_tall", [](V x) { return qr_function(x[0]); }},
      {"linalg_qr_square_batch", [](V x) { return qr_function(x[0]); }},
      {"linalg_qr_wide", [](V x) { return qr_function(x[0]); }},
      {"linalg_qr_r_of_reduced", [](V x) { return std::get<1>(linalg::qr(x[0])); }},
      {"linalg_qr_complete_q", [](V x) { return std::get<0>(linalg::qr(x[0], "complete")); }},
      {"linalg_qr_complete_r", [](V x) { return std::get<1>(linalg::qr(x[0], "complete")); }},
      {"linalg_qr_mode_r", [](V x) { return std::get<1>(linalg::qr(x[0], "r")); }},
      {"matrix_norm_fro", [](V x) { return linalg::matrix_norm(x[0]); }},
      {"matrix_norm_nuc", [](V x) { return linalg::matrix_norm(x[0], "nuc"); }},
      {"matrix_norm_2_dims_keepdim", [](V x) { return linalg::matrix_norm(x[0], 2, {2, 0}, true); }},
      {"matrix_norm_minus_2", [](V x) { return linalg::matrix_norm(x[0], -2); }},
      {"matrix_norm_1", [](V x) { return linalg::matrix_norm(x[0], 1); }},
      {"matrix_norm_minus_1", [](V x) { return linalg::matrix_norm(x[0], -1); }},
      {"matrix_norm_inf", [](V x) { return linalg::matrix_norm(x[0], kInf); }},
      {"matrix_norm_minus_inf_f64",
       [](V x) { return linalg::matrix_norm(x[0], -kInf, {-2, -1}, false, DType::f64); }},
      {"linalg_pinv_tall", [](V x) { return linalg::pinv(x[0]); }},
      {"linalg_pinv_wide", [](V x) { return linalg::pinv(x[0]); }},
      {"linalg_pinv_hermitian", [](V x) { return linalg::pinv(x[0], 1e-15, true); }},
      {"linalg_pinv_rank_deficient", [](V x) { return pinverse(x[0], 1e-5); }},
      {"linalg_matrix_rank", [](V x) { return linalg::matrix_rank(x[0]); }},
      {"linalg_matrix_rank_hermitian_atol",
       [](V x) { return linalg::matrix_rank(x[0], 1.0, true); }},
      {"linalg_lstsq_tall", [](V x) { return std::get<0>(linalg::lstsq(x[0], x[1])); }},
      {"linalg_lstsq_wide_vector", [](V x) { return std::get<0>(linalg::lstsq(x[0], x[1])); }},
      {"linalg_lstsq_broadcast", [](V x) { return std::get<0>(linalg::lstsq(x[0], x[1])); }},
      {"linalg_lstsq_gelsd_residuals",
       [](V x) { return std::get<1>(linalg::lstsq(x[0], x[1], std::nullopt, "gelsd")); }},
      {"linalg_lstsq_gelss_values",
       [](V x) { return std::get<3>(linalg::lstsq(x[0], x[1], std::nullopt, "gelss")); }},
      {"linalg_lstsq_rank", [](V x) { return std::get<2>(linalg::lstsq(x[0], x[1], 1e-4)); }},
      {"conv_transpose1d", [](V x) { return conv_transpose1d(x[0], x[1], x[2], 2, 1, 1, 2, 2); }},
      {"conv_transpose1d_unbatched", [](V x) { return F::conv_transpose1d(x[0], x[1], {}); }},
      {"conv_transpose3d",
       [](V x) {
         return conv_transpose3d(x[0], x[1], x[2], {2, 1, 2}, {1, 0, 1}, {1, 0, 0}, 2, {1, 2, 1});
       }},
      {"conv_transpose3d_dilated_depth",
       [](V x) {
         return F::conv_transpose3d(
             x[0], x[1],
             F::ConvTranspose3dFuncOptions().padding({2, 0, 0}).output_padding({1, 0, 0}).dilation(
                 {2, 1, 1}));
       }},
      {"conv_transpose3d_unbatched", [](V x) { return conv_transpose3d(x[0], x[1]); }},
      {"linalg_norm_all", [](V x) { return linalg::norm(x[0]); }},
      {"linalg_norm_vector_ord", [](V x) { return linalg::norm(x[0], 3); }},
      {"linalg_norm_matrix_ord", [](V x) { return linalg::norm(x[0], -1); }},
      {"linalg_norm_dim_keepdim", [](V x) { return linalg::norm(x[0], kInf, Shape{1}, true); }},
      {"linalg_norm_nuc_dims", [](V x) { return linalg::norm(x[0], "nuc", Shape{0, 2}); }},
      {"linalg_norm_two_dims_no_ord",
       [](V x) { return linalg::norm(x[0], std::nullopt, Shape{1, 2}); }},
      {"linalg_norm_fro_f64",
       [](V x) { return linalg::norm(x[0], "fro", std::nullopt, false, DType::f64); }},
      {"linalg_cond", [](V x) { return linalg::cond(x[0]); }},
      {"linalg_cond_tall_minus_2", [](V x) { return linalg::cond(x[0], -2); }},
      {"linalg_cond_1", [](V x) { return linalg::cond(x[0], 1); }},
      {"linalg_cond_inf", [](V x) { return linalg::cond(x[0], kInf); }},
      {"linalg_cond_fro", [](V x) { return linalg::cond(x[0], "fro"); }},
      {"linalg_cond_nuc", [](V x) { return linalg::cond(x[0], "nuc"); }},
      {"linalg_cond_singular", [](V x) { return atan(linalg::cond(x[0], -1)); }},
      {"linalg_multi_dot", [](V x) { return linalg::multi_dot({x[0], x[1], x[2], x[3]}); }},
      {"linalg_multi_dot_vectors", [](V x) { return linalg::multi_dot({x[0], x[1], x[2]}); }},
      {"linalg_multi_dot_two", [](V x) { return linalg::multi_dot({x[0], x[1]}); }},
      {"linalg_vecdot", [](V x) { return linalg::vecdot(x[0], x[1], 0); }},
      {"linalg_matrix_exp", [](V x) { return linalg::matrix_exp(x[0]); }},
      {"linalg_matrix_exp_batch", [](V x) { return linalg::matrix_exp(x[0]); }},
      {"matrix_exp_1x1", [](V x) { return matrix_exp(x[0]); }},
      {"linalg_inv_ex", [](V x) { return std::get<0>(linalg::inv_ex(x[0])); }},
      {"linalg_inv_ex_info", [](V x) { return std::get<1>(linalg::inv_ex(x[0])).to(DType::i64); }},
      {"linalg_lu_factor", [](V x) { return std::get<0>(linalg::lu_factor(x[0])); }},
      {"linalg_lu_factor_pivots",
       [](V x) { return std::get<1>(linalg::lu_factor(x[0])).to(DType::i64); }},
      {"linalg_lu_factor_wide", [](V x) { return std::get<0>(linalg::lu_factor(x[0])); }},
      {"linalg_lu_factor_tall", [](V x) { return std::get<0>(linalg::lu_factor(x[0])); }},
      {"linalg_lu_p", [](V x) { return std::get<0>(linalg::lu(x[0])); }},
      {"linalg_lu_l_wide", [](V x) { return std::get<1>(linalg::lu(x[0])); }},
      {"linalg_lu_u_tall", [](V x) { return std::get<2>(linalg::lu(x[0])); }},
      {"linalg_lu_plu",
       [](V x) {
         auto [p, l, u] = linalg::lu(x[0]);
         return matmul(matmul(p, sin(l)), u);
       }},
      {"linalg_lu_solve",
       [](V x) {
         auto [lu, pivots] = linalg::lu_factor(x[0]);
         return linalg::lu_solve(lu, pivots, x[1]);
       }},
      {"linalg_lu_solve_adjoint_broadcast",
       [](V x) {
         auto [lu, pivots] = linalg::lu_factor(x[0]);
         return linalg::lu_solve(lu, pivots, x[1], true, true);
       }},
      {"linalg_lu_solve_right",
       [](V x) {
         auto [lu, pivots] = linalg::lu_factor(x[0]);
         return linalg::lu_solve(lu, pivots, x[1], false);
       }},
      {"linalg_lu_solve_right_adjoint",
       [](V x) {
         auto [lu, pivots] = linalg::lu_factor(x[0]);
         return linalg::lu_solve(lu, pivots, x[1], false, true);
       }},
  });
  return table;
}

json load(const std::string& file) {
  std::ifstream in(std::string(TANDEM_GOLDEN_DIR) + "/" + file);
  REQUIRE(in.good());
  return json::parse(in);
}

}  // namespace

TEST_CASE("every op matches PyTorch's outputs and gradients", "[golden]") {
  // Parsed once: Catch runs the test case again from the top for each SECTION below, and the
  // file's 1.7 MB took most of this test's time when parsed for each of its cases (minutes
  // under ASan).
  static const json golden = load("ops.json");
  // The table and the golden file cover the same cases.
  REQUIRE(golden["cases"].size() == ops().size());
  for (const auto& c : golden["cases"]) {
    std::string name = c["name"];
    SECTION(name) {
      auto it = ops().find(name);
      INFO("case " << name);
      REQUIRE(it != ops().end());
      std::vector<Tensor> inputs;
      for (const auto& j : c["inputs"]) {
        Tensor t = decode(j);
        if (t.is_floating_point() && c.contains("grads")) t.set_requires_grad(true);
        inputs.push_back(t);
      }
      Tensor out = it->second(inputs);
      Tensor expected = decode(c["output"]);
      REQUIRE(out.dtype() == expected.dtype());
      require_close(out, expected, 1e-4, 1e-5, name + " output");
      if (c.contains("grads")) {
        out.backward(decode(c["grad_output"]));
        for (size_t k = 0; k < inputs.size(); ++k) {
          if (c["grads"][k].is_null()) continue;
          require_close(inputs[k].grad(), decode(c["grads"][k]), 1e-4, 1e-5,
                        name + " gradient of input " + std::to_string(k));
        }
      }
    }
  }
}

TEST_CASE("max_pool2d: a NaN is the max, of several the last in scan order, as PyTorch's",
          "[golden]") {
  // PyTorch 1.13: x (1, 1, 3, 4) zeros with NaN at (0, 1) and (0, 3), 5 at (1, 1), 7 at (2, 2);
  // max_pool2d(x, (3, 2), stride (1, 2), return_indices) gives [nan, nan] at indices [1, 3] and
  // the gradient of the sum lands on those two NaNs.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = from_vector(std::vector<float>{0, nan, 0, nan, 0, 5, 0, 0, 0, 0, 7, 0}, {1, 1, 3, 4});
  x.set_requires_grad(true);
  Tensor y = max_pool2d(x, {3, 2}, {1, 2});
  REQUIRE(y.shape() == Shape{1, 1, 1, 2});
  for (float v : y.to_vector<float>()) CHECK(std::isnan(v));
  y.sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0});
  // Two NaNs in one window: the later one takes the gradient.
  Tensor z = from_vector(std::vector<float>{nan, 1, 2, nan}, {1, 1, 2, 2});
  z.set_requires_grad(true);
  max_pool2d(z, 2).sum().backward();
  CHECK(z.grad().to_vector<float>() == std::vector<float>{0, 0, 0, 1});
  // Windows one column wide (a row at a time): PyTorch 1.13, x (1, 1, 4, 3) =
  // [[1, nan, 2], [nan, 5, 0], [3, 1, nan], [0, nan, nan]], max_pool2d(x, (2, 1), (1, 1)).
  Tensor c =
      from_vector(std::vector<float>{1, nan, 2, nan, 5, 0, 3, 1, nan, 0, nan, nan}, {1, 1, 4, 3});
  c.set_requires_grad(true);
  auto [cy, ci] = max_pool2d_with_indices(c, {2, 1}, {1, 1});
  const std::vector<float> cv = cy.to_vector<float>();
  const std::vector<float> want{nan, nan, 2, nan, 5, nan, 3, nan, nan};
  for (size_t k = 0; k < want.size(); ++k)
    CHECK((std::isnan(want[k]) ? std::isnan(cv[k]) : cv[k] == want[k]));
  CHECK(ci.to_vector<int64_t>() == std::vector<int64_t>{3, 1, 2, 3, 4, 8, 6, 10, 11});
  cy.sum().backward();
  CHECK(c.grad().to_vector<float>() == std::vector<float>{0, 1, 1, 2, 1, 0, 1, 0, 1, 0, 1, 1});
}
