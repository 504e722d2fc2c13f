// Bad input gets a clear error naming the op, what it expected and what it got.
#include "../util.hpp"

using namespace tandem;
using tandem::testing::error_of;

TEST_CASE("shape errors", "[errors]") {
  CHECK(error_of([] { conv2d(zeros({8, 1, 28, 28}), zeros({16, 3, 3, 3})); }) ==
        "conv2d: input must be (N, C, H, W) with C == weight.size(1) * groups == 3, got (8, 1, 28, 28)");
  CHECK(error_of([] { conv2d(zeros({1, 3, 2, 2}), zeros({4, 3, 3, 3})); }) ==
        "conv2d: input of spatial size (2, 2) with padding (0, 0) is smaller than the dilated kernel (3, 3)");
  CHECK(error_of([] { conv2d(zeros({1, 4, 5, 5}), zeros({3, 2, 3, 3}), Tensor(), 1, 0, 1, 2); }) ==
        "conv2d: C_out (3) must be divisible by groups (2)");
  // As PyTorch: no pixels is refused (a CPU crash and a cuDNN error before), no channels not.
  CHECK(error_of([] { conv2d(zeros({2, 3, 0, 4}), zeros({3, 3, 3, 3}), Tensor(), 1, 2); }) ==
        "conv2d: only zero batch or zero channel inputs are supported, but got input shape "
        "(2, 3, 0, 4)");
  CHECK(error_of([] { conv_transpose2d(zeros({2, 3, 4, 0}), zeros({3, 2, 3, 3})); }) ==
        "conv_transpose2d: only zero batch or zero channel inputs are supported, but got input "
        "shape (2, 3, 4, 0)");
  CHECK(error_of([] { add(zeros({2, 3}), zeros({4})); }) ==
        "add: shapes (2, 3) and (4,) cannot be broadcast together (dim 1: 3 vs 4)");
  CHECK(error_of([] { matmul(zeros({2, 3}), zeros({4, 5})); }) ==
        "matmul: shapes (2, 3) and (4, 5) cannot be multiplied (3 != 4)");
  CHECK(error_of([] { zeros({6}).reshape({4, -1}); }) ==
        "reshape: shape (4, -1) is invalid for input of size 6");
  CHECK(error_of([] { cat({zeros({2, 3}), zeros({3, 4})}, 1); }) ==
        "cat: sizes must match except in dim 1, got (2, 3) at entry 0 and (3, 4) at entry 1");
  CHECK(error_of([] { stack({zeros({2}), zeros({3})}); }) ==
        "stack: expects each tensor to be equal size, but got (2,) at entry 0 and (3,) at entry 1");
  CHECK(error_of([] { zeros({2, 3}).expand({2, 4}); }) ==
        "expand: the expanded size of the tensor (4) must match the existing size (3) at "
        "non-singleton dimension 1. Target sizes: (2, 4). Tensor sizes: (2, 3)");
  CHECK(error_of([] { batch_norm(zeros({4, 3, 2}), Tensor(), Tensor(), zeros({2}), Tensor(), true); }) ==
        "batch_norm: weight must be (3) for an input with 3 channels, got (2,)");
  CHECK(error_of([] { batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true); }) ==
        "batch_norm: expected more than 1 value per channel when training, got input of shape (1, 3)");
  CHECK(error_of([] { max_pool2d(zeros({1, 1, 4, 4}), 2, 2, 2); }) ==
        "max_pool2d: padding should be at most half of the kernel size, got padding (2, 2) for kernel (2, 2)");
  // A window larger than the input: no output (torch's floor division), not one clipped window.
  CHECK(error_of([] { max_pool2d(zeros({1, 3, 2, 2}), 3); }) ==
        "max_pool2d: output size would be (0, 0) for input (1, 3, 2, 2); the input is too small "
        "for the kernel");
  CHECK(error_of([] { avg_pool2d(zeros({1, 3, 2, 5}), 3, 1); }) ==
        "avg_pool2d: output size would be (0, 3) for input (1, 3, 2, 5); the input is too small "
        "for the kernel");
  CHECK(error_of([] { cross_entropy(zeros({4, 3}), zeros({5}, DType::i64)); }) ==
        "cross_entropy: target must be (4,) for input (4, 3), got (5,)");
  CHECK(error_of([] { mse_loss(zeros({2}), zeros({3})); }) ==
        "mse_loss: input (2,) and target (3,) must have the same shape");
  CHECK(error_of([] { linear(zeros({2, 3}), zeros({4, 5})); }) ==
        "linear: input (*, in_features) with in_features == weight.size(1) == 5 expected, got "
        "input (2, 3) and weight (4, 5)");
  CHECK(error_of([] { pad(zeros({2}), {1, 2, 3, 4}); }) ==
        "pad: expected an even number of pads covering at most 1 dims, got 4 values");
  CHECK(error_of([] { zeros({-1, 2}); }) == "empty: negative size -1 at dim 0 of shape (-1, 2)");
}

TEST_CASE("dim and index errors", "[errors]") {
  Tensor t = zeros({2, 3});
  CHECK(error_of([&] { sum(t, {2}); }) ==
        "sum: dim 2 out of range for a tensor of 2 dims (expected in [-2, 1])");
  CHECK(error_of([&] { t.select(1, 3); }) == "select: index 3 out of range for dim 1 of size 3");
  CHECK(error_of([&] { t.narrow(1, 2, 2); }) ==
        "narrow: start (2) + length (2) exceeds dimension size (3)");
  CHECK(error_of([&] { t.permute({0, 0}); }) == "permute: dim 0 appears twice in (0, 0)");
  CHECK(error_of([&] { t.transpose(0, -3); }) ==
        "transpose: dim -3 out of range for a tensor of 2 dims (expected in [-2, 1])");
  CHECK(error_of([&] { cross_entropy(zeros({2, 3}), from_vector<int64_t>({1, 3})); }) ==
        "cross_entropy: target 3 is out of bounds for 3 classes (at position 1)");
  CHECK_THROWS_AS(t.select(0, 2), IndexError);
  CHECK(error_of([&] { t.size(5); }) ==
        "size: dim 5 out of range for a tensor of 2 dims (expected in [-2, 1])");
}

TEST_CASE("dtype errors", "[errors]") {
  Tensor i = ones({2, 2}, DType::i64);
  CHECK(error_of([&] { gelu(i); }) ==
        "gelu: expected a floating-point input (f32, f64, f16 or bf16), got dtype i64");
  CHECK(error_of([&] { conv2d(ones({1, 1, 3, 3}, DType::i64), ones({1, 1, 1, 1}, DType::i64)); }) ==
        "conv2d: expected a floating-point input (f32, f64, f16 or bf16), got dtype i64");
  CHECK(error_of([&] { conv2d(ones({1, 1, 3, 3}), ones({1, 1, 1, 1}, DType::f64)); }) ==
        "conv2d: input (f32), weight (f64) must have the same dtype");
  CHECK(error_of([&] {
          cross_entropy(zeros({2, 3}), zeros({2}, DType::u8));
        }) == "cross_entropy: target must hold class indices (i64 or i32), got dtype u8");
  CHECK(error_of([&] {
          cross_entropy(zeros({2, 3}), zeros({2}));
        }) ==
        "cross_entropy: a floating target holds class probabilities and must have the input's "
        "shape (2, 3), got (2,); class indices are i64 or i32");
  CHECK(error_of([&] { where(ones({2}), ones({2}), ones({2})); }) ==
        "where: condition must be a bool tensor, got f32");
  CHECK(error_of([&] { mean(i); }) ==
        "mean: expected a floating-point input (f32, f64, f16 or bf16), got dtype i64");
  CHECK(error_of([&] { matmul(i.to(DType::boolean), i.to(DType::boolean)); }) ==
        "bmm: bool operands are not multiplied; convert them to an integer or floating dtype "
        "first (got bool and bool)");
  CHECK(error_of([] { rand({2}, DType::i32); }) == "rand: expected a floating dtype, got i32");
  CHECK(error_of([] { dropout(ones({2}), 1.5); }) == "dropout: probability must be in [0, 1], got 1.5");
}

TEST_CASE("device errors", "[errors][gpu]") {
  // A tensor that claims to live on cuda:0 (no memory is touched), so the checks run on any
  // machine.
  float dummy[2] = {0, 0};
  Tensor fake_gpu = from_blob(dummy, {2}, DType::f32, Device("cuda:0"));
  CHECK(error_of([&] { add(ones({2}), fake_gpu); }) ==
        "add: expected all tensors on one device, got cpu and cuda:0");
  CHECK(error_of([&] { conv2d(ones({1, 1, 2, 2}), fake_gpu.reshape({1, 1, 2, 1})); }) ==
        "conv2d: expected all tensors on one device, got cpu and cuda:0");
  // Named as called, not as the op that carries it out (sub_ through add, linear through bmm).
  const std::string mixed = ": expected all tensors on one device, got cpu and cuda:0";
  CHECK(error_of([&] { ones({2}).sub_(fake_gpu); }) == "sub_" + mixed);
  CHECK(error_of([&] { linear(ones({1, 2}), fake_gpu.reshape({1, 2})); }) == "linear" + mixed);
  CHECK(error_of([&] { mse_loss(ones({2}), fake_gpu); }) == "mse_loss" + mixed);
  CHECK(error_of([&] {
          binary_cross_entropy_with_logits(ones({2}), ones({2}), Tensor(), fake_gpu);
        }) == "binary_cross_entropy_with_logits" + mixed);
  bool flags[2] = {true, false};
  const Tensor fake_gpu_mask = from_blob(flags, {2}, DType::boolean, Device("cuda:0"));
  CHECK(error_of([&] { ones({2}).masked_fill(fake_gpu_mask, 1.0); }) == "masked_fill" + mixed);
  if (!cuda::compiled_with_cuda()) {
    // A build without the CUDA backend: one error naming the op, the dtype and the device,
    // raised before anything is allocated there.
    const std::string why = "no unary kernel; this build has no CUDA backend";
    CHECK(error_of([&] { exp(fake_gpu); }) ==
          "exp: not implemented for f32 tensors on cuda:0 (" + why + ")");
    CHECK_THROWS_AS(exp(fake_gpu), NotImplementedError);
    CHECK(error_of([&] { matmul(fake_gpu.reshape({1, 2}), fake_gpu.reshape({2, 1})); })
              .rfind("bmm: not implemented for f32 tensors on cuda:0", 0) == 0);
  } else if (!cuda::is_available()) {
    // A CUDA build on a machine without a GPU: the op reaches its CUDA kernel, whose output
    // allocation says there is no GPU.
    CHECK(error_of([&] { exp(fake_gpu); }) == "cuda:0: no CUDA device is available");
  }
  if (!cuda::is_available()) {
    // Without a GPU, asking for one says so instead of crashing.
    CHECK_THROWS_AS(ones({2}, Device("cuda:0")), Error);
  }
  CHECK(error_of([] { Tensor().dim(); }) == "Tensor: operation on an undefined tensor");
  CHECK(error_of([] { add(Tensor(), ones({1})); }) == "add: first operand is an undefined tensor");
}

TEST_CASE("in-place writes refuse an expanded destination before writing, unexpand is its "
          "memory once", "[errors]") {
  Tensor base = from_vector<double>({1, 2, 3}, {3, 1});
  Tensor wide = base.expand({3, 4});  // each row's 4 elements share one location
  CHECK(wide.has_internal_overlap());
  CHECK_FALSE(base.has_internal_overlap());
  CHECK_FALSE(zeros({1, 3}).expand({1, 3}).has_internal_overlap());  // no repeated element
  CHECK_FALSE(base.t().has_internal_overlap());
  CHECK_FALSE(zeros({1, 0}).expand({3, 0}).has_internal_overlap());  // no elements
  const std::string what = "more than one element of the written-to tensor refers to a single "
                           "memory location (an expanded view of shape (3, 4)); write into a "
                           "contiguous() copy, or into unexpand() of it when the update is the "
                           "same for every repeated element";
  CHECK(error_of([&] { Tensor(wide).copy_(arange(0, 12, 1, DType::f64).reshape({3, 4})); }) == "copy_: " + what);
  CHECK(error_of([&] { Tensor(wide).add_(ones({4}, DType::f64)); }) == "add_: " + what);
  CHECK(error_of([&] { Tensor(wide).mul_(2.0); }) == "mul_: " + what);
  CHECK(error_of([&] { Tensor(wide).mul_(ones({3, 4}, DType::f64)); }) == "mul_: " + what);
  CHECK(error_of([&] { Tensor(wide).div_(2.0); }) == "div_: " + what);
  CHECK(error_of([&] { Tensor(wide).sub_(1.0); }) == "sub_: " + what);
  CHECK(base.reshape({3}).to_vector<double>() == std::vector<double>{1, 2, 3});  // nothing written
  // unexpand: the stride-0 dims narrowed to 1, a view of the same memory.
  Tensor once = unexpand(wide);
  CHECK(once.shape() == Shape{3, 1});
  CHECK_FALSE(once.has_internal_overlap());
  once.mul_(2.0);
  CHECK(wide.contiguous().reshape({12}).to_vector<double>() ==
        std::vector<double>{2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6});
  Tensor scalar_wide = scalar_tensor(5.0).expand({2, 3});
  CHECK(unexpand(scalar_wide).shape() == Shape{1, 1});
  CHECK(unexpand(base).is_same(base));
  Tensor(wide).fill_(0.0);  // one value for every element: allowed, as torch allows it
  CHECK(base.reshape({3}).to_vector<double>() == std::vector<double>{0, 0, 0});
}

TEST_CASE("edge input an API probe found: errors, not crashes, hangs or wrong values", "[errors]") {
  // A 0-dim tensor has no dim 0 to measure (a read past its empty shape before); reducing over
  // its dim 0 or -1 is the tensor itself, as torch's.
  const Tensor s = scalar_tensor(3.0);
  CHECK_THROWS_AS(s.size(0), IndexError);
  CHECK_THROWS_AS(s.stride(-1), IndexError);
  for (const Tensor& r : {sum(s, {0}), sum(s, {-1}, true), mean(s, {0}), amax(s, {0})}) {
    CHECK(r.dim() == 0);
    CHECK(r.item<double>() == 3.0);
  }
  // Element counts past int64 wrapped (to 0 here: a 0-byte storage indexed after it).
  CHECK(error_of([] {
          zeros({int64_t{1} << 32, int64_t{1} << 32});
        }) == "empty: shape (4294967296, 4294967296) has more elements than a tensor can address");
  CHECK_THROWS_AS(ones({int64_t{1} << 61}, DType::f64), ValueError);  // bytes past int64
  CHECK_THROWS_AS(ones({1}).expand({int64_t{1} << 62, 4}), ValueError);
  CHECK(zeros({0, int64_t{1} << 62}).numel() == 0);  // empty, with strides that fit
  CHECK_THROWS_AS(zeros({0, int64_t{1} << 62, int64_t{1} << 62}), ValueError);  // strides past
  CHECK(error_of([] { ones({1}).expand({-2}); }) ==
        "expand: invalid size -2 at dim 0 of (-2,) (sizes are >= 0, or -1 to keep the tensor's)");
  // A view must lie inside its storage.
  const Tensor base = ones({4});
  CHECK_THROWS_AS(make_tensor(base.storage(), {4}, {1}, 100, DType::f32), IndexError);
  CHECK_THROWS_AS(make_tensor(base.storage(), {1 << 20}, {1}, 0, DType::f32), IndexError);
  CHECK_THROWS_AS(make_tensor(base.storage(), {2}, {-1}, 0, DType::f32), IndexError);
  CHECK_THROWS_AS(make_tensor(base.storage(), {-2, 0}, {1, 1}, 0, DType::f32), ValueError);
  CHECK(make_tensor(base.storage(), {2, 2}, {1, 2}, 0, DType::f32).sum().item<float>() == 4);
  // A pooling window far larger than the map: its taps clipped at once (it looped over all 2^40
  // before), the values those of the taps inside.
  const Tensor img = arange(0, 16, 1, DType::f32).reshape({1, 1, 4, 4});
  const int64_t huge = int64_t{1} << 40;
  Tensor big = max_pool2d(img, Int2(huge), Int2(1), Int2(huge / 2));
  CHECK(big.shape() == Shape{1, 1, 5, 5});
  CHECK(big.max().item<float>() == 15);
  CHECK(avg_pool2d(img, Int2(huge), Int2(1), Int2(huge / 2)).shape() == Shape{1, 1, 5, 5});
  // Augmenting maps without pixels (a division by their size before).
  CHECK(data::crop_flip_normalize(zeros({1, 3, 0, 4}, DType::u8), zeros({1, 3}, DType::i32),
                                  std::vector<float>{0.5f, 0.5f, 0.5f},
                                  std::vector<float>{1.f, 1.f, 1.f})
            .numel() == 0);
  // A module below itself: every walk over the tree would recurse forever.
  auto seq = std::make_shared<nn::Sequential>();
  CHECK_THROWS_AS(seq->push_back(seq), ValueError);
  auto outer = std::make_shared<nn::Sequential>(), inner = std::make_shared<nn::Sequential>();
  outer->push_back(inner);
  CHECK_THROWS_AS(inner->push_back(outer), ValueError);
  CHECK(outer->children().size() == 1);
  // Printing past 64 dims leaves the values out (the nesting overflowed the stack).
  std::ostringstream deep;
  deep << ones(Shape(100000, 1));
  CHECK(deep.str().rfind("tensor([...]", 0) == 0);
  // Integer tensors with a scalar that is not whole compute in f32, and / is true division
  // (the scalar was truncated: 4 / 2.0 was 0, 4 * 0.5 was 0).
  const Tensor i = from_vector<int64_t>({4, 6}, {2});
  CHECK(equal(i / 2.0, from_vector<float>({2, 3}, {2})));
  CHECK(equal(i * 0.5, from_vector<float>({2, 3}, {2})));
  CHECK(equal(i - 0.5, from_vector<float>({3.5, 5.5}, {2})));
  CHECK(equal(i / 0.0, full({2}, INFINITY)));
  CHECK(equal(pow(i, 0.5), sqrt(i.to(DType::f32))));
  // The number's kind decides, as libtorch's Scalar: `t * 2` keeps the dtype, `t * 2.0` is f32
  // (torch's default dtype), whole or not; a bool number keeps a bool tensor's.
  CHECK((i * 2).dtype() == DType::i64);
  CHECK((i * 2.0).dtype() == DType::f32);
  CHECK(equal(i + 2.0, from_vector<float>({6, 8}, {2})));
  CHECK((i - int64_t{1}).dtype() == DType::i64);
  CHECK(pow(i, 2).dtype() == DType::i64);
  CHECK(pow(i, 2.0).dtype() == DType::f32);
  CHECK(equal(pow(2, i), from_vector<int64_t>({16, 64}, {2})));
  CHECK(pow(2.0, i).dtype() == DType::f32);
  CHECK(equal(fmod(i, 4.0), from_vector<float>({0, 2}, {2})));
  CHECK(remainder(i, 4).dtype() == DType::i64);
  CHECK(where(i > 5, i, 0.0).dtype() == DType::f32);
  CHECK(where(i > 5, i, 0).dtype() == DType::i64);
  CHECK(equal(2.0 / i, from_vector<float>({0.5f, 1.0f / 3}, {2})));
  const Tensor mask = from_vector<int64_t>({1, 0}, {2}).to(DType::boolean);
  CHECK((mask + true).dtype() == DType::boolean);
  CHECK(equal(mask + true, mask | mask.logical_not()));
  CHECK((mask + 1).dtype() == DType::i64);
  CHECK((mask * 2.0).dtype() == DType::f32);
  Tensor w = i.clone();
  CHECK_THROWS_AS(w.mul_(0.5), ValueError);
  CHECK_THROWS_AS(w.div_(2.0), ValueError);
  CHECK_THROWS_AS(w.div_(i), ValueError);
  CHECK(equal(w, i));  // nothing written
  // clamp with min above max: max wins, as torch's min(max(x, min), max).
  CHECK(equal(ones({3}).clamp(2.0, 1.0), ones({3})));
  CHECK(equal(from_vector<float>({0, 5}, {2}).clamp(3.0, 1.0), full({2}, 1.0)));
  // Softmax over an empty dim is empty.
  CHECK(softmax(ones({3, 0}), 1).shape() == Shape{3, 0});
  CHECK(log_softmax(ones({3, 0}), 1).shape() == Shape{3, 0});
  // Batch counts near int64's limit (n + b - 1 overflowed to none).
  CHECK(data::DistributedSampler(INT64_MAX, 0, 2).num_samples() == INT64_MAX / 2 + 1);
  auto images =
      std::make_shared<data::TensorDataset>(zeros({4, 1, 2, 2}), zeros({4}, DType::i64), 10);
  CHECK(data::DataLoader(images, data::DistributedSampler(4),
                         data::LoaderOptions().batch_size(INT64_MAX))
            .num_batches() == 1);
  // A value an integer dtype cannot hold (its conversion through int64 was undefined).
  CHECK(error_of([] { full({3}, NAN, TensorOptions(DType::i32)); }) ==
        "full: the value nan cannot be converted to i32 without overflow");
  CHECK_THROWS_AS(full({3}, 1e30, TensorOptions(DType::i64)), ValueError);
  CHECK_THROWS_AS(i.masked_fill(full({2}, true, TensorOptions(DType::boolean)), INFINITY),
                  ValueError);
  CHECK_THROWS_AS(w.fill_(NAN), ValueError);
  CHECK(equal(full({2}, 2.5, TensorOptions(DType::i64)), full({2}, 2, TensorOptions(DType::i64))));
  // An optimizer given a computed tensor (it would never receive a gradient).
  Tensor param = ones({2});
  param.set_requires_grad(true);
  CHECK_THROWS_AS(optim::SGD(std::vector<Tensor>{mul(param, 2.0)}, optim::SGDOptions(0.1)),
                  ValueError);
  // Messages that named an internal op or a value that meant nothing to the caller.
  CHECK(error_of([] {
          linear(zeros({2, 3}), zeros({3}));
        }) == "linear: weight must be 2-d (out_features, in_features), got (3,)");
  CHECK(error_of([] { arange(0, INFINITY, 1); }) == "arange: unsupported range 0 -> inf (step 1)");
  CHECK_THROWS_AS(arange(0, 1e30, 1), ValueError);
  CHECK(error_of([] {
          cross_entropy(zeros({2, 0}), zeros({2}, DType::i64));
        }) == "cross_entropy: input has no classes (C == 0), got shape (2, 0)");
  CHECK(error_of([] { zeros({0}).max(); }) ==
        "max: an empty tensor has no largest value (give a dim to reduce)");
  CHECK(error_of([] { zeros({0}).min(); }) ==
        "min: an empty tensor has no smallest value (give a dim to reduce)");
  CHECK(error_of([] { optim::clip_grad_norm({Tensor()}, 1.0); }) ==
        "clip_grad_norm: parameter 0 is undefined");
  nn::Linear lin(2, 3);
  nn::StateDict state = lin.state_dict();
  state.at("weight") = Tensor();
  CHECK(error_of([&] { lin.load_state_dict(state); })
            .find("weight: expected (3, 2), got an "
                  "undefined tensor") != std::string::npos);
  CHECK(error_of([] {
          io::load_safetensors(std::filesystem::temp_directory_path().string());
        }).find("it is a directory") != std::string::npos);
  CHECK(error_of([] {
          io::to_safetensors({{"bad\xff", zeros({1})}});
        }) == "safetensors: tensor names and metadata must be valid UTF-8");
  // A gradient buffer whose elements alias would add into one place several times.
  Tensor leaf = ones({2});
  leaf.set_requires_grad(true);
  CHECK_THROWS_AS(leaf.set_grad_buffer(zeros({1}).expand({2})), ValueError);
}

TEST_CASE("errors of the shape ops, order statistics and losses added for libtorch code",
          "[errors]") {
  CHECK(error_of([] {
          meshgrid({zeros({2, 2})});
        }) == "meshgrid: expected 0-d or 1-d tensors, got 2-d at position 0");
  CHECK(error_of([] { meshgrid({zeros({2})}, "yx"); }) ==
        "meshgrid: indexing must be \"ij\" or \"xy\", got \"yx\"");
  CHECK(error_of([] {
          diagonal(zeros({3, 3}), 0, 1, -1);
        }) == "diagonal: dim1 and dim2 cannot be the same dim (1)");
  CHECK(error_of([] {
          roll(zeros({3, 3}), {1, 2}, {0});
        }) == "roll: 2 shifts for 1 dims (give one shift per dim)");
  CHECK(error_of([] {
          zeros({3, 2}).repeat_interleave(from_vector<int64_t>({1, 2}), 0);
        }) == "repeat_interleave: 2 repeats for dim 0 of size 3 (give one per element, or one)");
  CHECK(error_of([] { zeros({4}).unfold(0, 5, 1); }) ==
        "unfold: size 5 must be in [0, 4], the size of dim 0");
  CHECK(error_of([] {
          pixel_shuffle(zeros({1, 6, 2, 2}), 2);
        }) ==
        "pixel_shuffle: the channels (6) must be divisible by the square of the upscale factor "
        "(4)");
  CHECK(error_of([] {
          zeros({2, 3}).kthvalue(4, 1);
        }) == "kthvalue: k (4) must be in [1, 3], the size of the dim");
  CHECK(error_of([] {
          cross(zeros({2, 4}), zeros({2, 4}));
        }) == "cross: no dim of size 3 in (2, 4)");
  CHECK(error_of([] {
          glu(zeros({2, 3}));
        }) == "glu: halving dimension must be even, but dimension 1 is size 3");
  CHECK(error_of([] {
          cdist(zeros({2, 3}), zeros({2, 4}));
        }) == "cdist: expected (*, P, M) and (*, R, M), got (2, 3) and (2, 4)");
  CHECK(error_of([] {
          gaussian_nll_loss(zeros({4, 3}), zeros({4, 3}), ones({3}));
        }) ==
        "gaussian_nll_loss: var (3,) must have the input's shape (4, 3), or it with the last dim "
        "1 or gone");
  CHECK(error_of([] {
          gaussian_nll_loss(zeros({2}), zeros({2}), from_vector<float>({1, -1}));
        }) == "gaussian_nll_loss: var has negative entries");
  CHECK(error_of([] {
          cosine_embedding_loss(zeros({2, 3}), zeros({2, 3}), zeros({2, 1}));
        }) == "cosine_embedding_loss: expected a 0-d or 1-d target, got (2, 1)");
  CHECK(error_of([] {
          movedim(zeros({2, 3}), {0, 0}, {0, 1});
        }) == "movedim: source dim 0 appears twice in (0, 0)");
  CHECK(error_of([] {
          im2col(zeros({1, 1, 2, 2}), 3);
        }) == "unfold: the padded map (2, 2) is smaller than the dilated kernel (3, 3)");
  CHECK(error_of([] {
          col2im(zeros({1, 4, 5}), {3, 4}, 2);
        }) ==
        "fold: the input's 5 columns do not match the 2 x 3 windows of the output size (3, 4)");
  CHECK(error_of([] {
          channel_shuffle(zeros({1, 6, 2}), 4);
        }) == "channel_shuffle: the channels (6) must be divisible by groups (4)");
  CHECK(error_of([] {
          searchsorted(zeros({2, 3}), zeros({3, 3}));
        }) ==
        "searchsorted: sorted_sequence (2, 3) must be 1-d or share all but its last dim with "
        "values (3, 3)");
  CHECK(error_of([] {
          zeros({2, 6}).unflatten(1, {4, -1});
        }) == "unflatten: shape (4, -1) is invalid for input of size 6");
}

TEST_CASE("errors of eigh, SVD, QR and the matrix norms say what was asked for", "[errors]") {
  CHECK(error_of([] {
          linalg::eigh(zeros({2, 3}));
        }) == "linalg.eigh: A must be batches of square matrices, but they are 2 by 3 matrices");
  CHECK(error_of([] { linalg::eigvalsh(eye(2), "X"); }) ==
        "linalg.eigvalsh: UPLO must be 'L' or 'U', got 'X'");
  CHECK(error_of([] {
          linalg::eigh(from_vector<float>({1, 0, std::nanf(""), 1}, {2, 2}));
        }) ==
        "linalg.eigh: the factorization of matrix 0 of the batch failed (its elements are not "
        "all finite, or it did not converge)");
  CHECK(error_of([] {
          linalg::svdvals(stack({eye(2), full({2, 2}, INFINITY)}));
        }) ==
        "linalg.svdvals: the factorization of matrix 1 of the batch failed (its elements are not "
        "all finite, or it did not converge)");
  CHECK(error_of([] { linalg::svd(eye(2), false, "gesvdj"); }) ==
        "linalg.svd: driver='gesvdj' is refused: as torch, a driver is only taken for CUDA inputs "
        "with cuSOLVER, and tandem computes this on the host");
  CHECK(error_of([] { linalg::svdvals(ones({3}, DType::i64)); }) ==
        "linalg.svdvals: expected A of dtype f32 or f64, got i64 (as torch, the factorizations "
        "take no integers nor f16/bf16)");
  CHECK(error_of([] { linalg::qr(eye(2), "thin"); }) ==
        "linalg.qr: mode must be 'reduced' (the default), 'complete' or 'r', got 'thin'");
  // The factors torch does not differentiate: R of mode "r", and "complete" of a tall matrix.
  Tensor a = ones({3, 2}).requires_grad_();
  CHECK(error_of([&] { sum(std::get<1>(linalg::qr(a, "r"))).backward(); }) ==
        "linalg.qr: the derivative of R depends on Q, which is not computed when mode='r'; use "
        "mode='reduced' to differentiate through linalg.qr");
  CHECK(error_of([&] { sum(std::get<0>(linalg::qr(a, "complete"))).backward(); }) ==
        "linalg.qr: the QR decomposition is not differentiable when mode='complete' and A has "
        "more rows than columns");
  CHECK(error_of([] { linalg::matrix_norm(eye(2), 3); }) ==
        "linalg.matrix_norm: ord must be one of 1, -1, 2, -2, inf, -inf, 'fro' or 'nuc', got 3");
  CHECK(error_of([] { linalg::matrix_norm(eye(2), "max"); }) ==
        "linalg.matrix_norm: ord must be 'fro' or 'nuc' (or a number: 1, -1, 2, -2, inf, -inf), "
        "got 'max'");
  CHECK(error_of([] {
          linalg::matrix_norm(ones({2, 2, 2}), "fro", {1, -2});
        }) == "linalg.matrix_norm: dims must be different, got (1, -2)");
  CHECK(error_of([] { linalg::matrix_norm(ones({2}), "fro"); }) ==
        "linalg.matrix_norm: the input must have at least 2 dimensions, got shape (2,)");
  CHECK(error_of([] {
          linalg::matrix_norm(ones({2, 2}, DType::i64));
        }) == "linalg.matrix_norm: expected a floating-point input and dtype, got i64");
  CHECK(error_of([] {
          linalg::matrix_norm(ones({2, 2}), "fro", {-2, -1}, false, DType::i32);
        }) == "linalg.matrix_norm: expected a floating-point input and dtype, got f32 and i32");
  CHECK(error_of([] {
          linalg::lstsq(ones({3, 2}), ones({3, 1}), std::nullopt, "gelsx");
        }) ==
        "linalg.lstsq: driver must be one of 'gels', 'gelsy' (the default), 'gelsd' or 'gelss', "
        "got 'gelsx'");
  CHECK(error_of([] {
          linalg::lstsq(ones({3, 2}), ones({4, 1}));
        }) ==
        "linalg.lstsq: A of shape (3, 2) and B of shape (4, 1) do not match (3 rows against 4)");
}

TEST_CASE("errors of LU, matrix_exp, norm, cond, multi_dot and vecdot", "[errors]") {
  CHECK(error_of([] {
          linalg::lu_factor(ones({3, 3}), false);
        }) ==
        "linalg.lu_factor: LU without pivoting is not implemented (nor is it on torch's CPU)");
  CHECK(error_of([] { linalg::lu(ones({3})); }) ==
        "linalg.lu: A must have at least 2 dimensions, got shape (3,)");
  // Named tensors, not a structured binding: clang's C++17 lambdas cannot capture one.
  const auto factored = linalg::lu_factor(add(eye(3), 1.0));
  const Tensor lu = std::get<0>(factored), pivots = std::get<1>(factored);
  CHECK(error_of([&] { lu_unpack(lu, pivots.to(DType::i64)); }) ==
        "lu_unpack: pivots must be i32 of shape (..., 3) for LU of shape (3, 3), got i64 of "
        "shape (3,)");
  CHECK(error_of([&] {
          lu_unpack(lu.expand({2, 3, 3}), pivots.expand({3, 3}));
        }) == "lu_unpack: shapes (2,) and (3,) cannot be broadcast together (dim 0: 2 vs 3)");
  CHECK(error_of([&] {
          lu_unpack(lu, from_vector<int32_t>({3, 4, 3}, {3}));
        }) == "lu_unpack: pivot 4 at position 2 of matrix 0 is out of range [1, 3]");
  CHECK(error_of([] {
          linalg::lu_factor(stack({eye(2), ones({2, 2})}));
        }) ==
        "linalg.lu_factor: matrix 1 of the batch is singular (U's diagonal element 2 is zero), "
        "and lu_solve would divide by it; linalg::lu or linalg::lu_factor_ex factor it");
  CHECK(error_of([] {
          linalg::lu_factor_ex(ones({2, 2}), true, true);
        }) ==
        "linalg.lu_factor_ex: matrix 0 of the batch is singular (U's diagonal element 2 is zero), "
        "and lu_solve would divide by it; linalg::lu or linalg::lu_factor_ex factor it");
  CHECK(error_of([&] {
          linalg::lu_solve(lu, pivots, ones({2, 2}));
        }) ==
        "linalg.lu_solve: LU of shape (3, 3) and B of shape (2, 2) do not match (3 rows needed "
        "in B)");
  CHECK(error_of([&] {
          linalg::lu_solve(lu, pivots, ones({3, 2}, DType::f64));
        }) == "linalg.lu_solve: LU and B must have one dtype, got f32 and f64");
  CHECK(error_of([] {
          linalg::matrix_exp(ones({2, 3}));
        }) ==
        "linalg.matrix_exp: A must be batches of square matrices, but they are 2 by 3 matrices");
  CHECK(error_of([] {
          linalg::norm(ones({2, 2, 2}), 2);
        }) ==
        "linalg.norm: with an ord but no dim, the input must be 1-d or 2-d, got shape (2, 2, 2)");
  CHECK(error_of([] {
          linalg::norm(ones({2, 2, 2}), 2, Shape{0, 1, 2});
        }) ==
        "linalg.norm: dim must name 1 dim (a vector norm) or 2 (a matrix norm), got (0, 1, 2)");
  CHECK(error_of([] {
          linalg::norm(ones({2, 2}), "nuc", Shape{0});
        }) ==
        "linalg.norm: ord 'nuc' is a matrix norm: it needs two dims, or a 2-d input without dim; "
        "got shape (2, 2) and dim (0,)");
  CHECK(error_of([] { linalg::cond(eye(2), 3); }) ==
        "linalg.cond: ord must be one of 1, -1, 2, -2, inf, -inf, 'fro' or 'nuc', got 3");
  CHECK(error_of([] {
          linalg::cond(ones({2, 3}), 1);
        }) == "linalg.cond: A must be batches of square matrices, but they are 2 by 3 matrices");
  CHECK(error_of([] { linalg::cond(eye(2), "max"); }) ==
        "linalg.cond: ord must be 'fro' or 'nuc' (or a number: 1, -1, 2, -2, inf, -inf), got "
        "'max'");
  CHECK(error_of([] {
          linalg::tensorinv(ones({2, 3, 4}));
        }) ==
        "linalg.tensorinv: the first 2 dims of (2, 3, 4) hold 6 elements and the others 4; they "
        "must be equal");
  CHECK(error_of([] {
          linalg::tensorinv(ones({2, 2}), 0);
        }) == "linalg.tensorinv: ind must be positive, got 0");
  CHECK(error_of([] {
          linalg::tensorsolve(ones({2, 3, 5}), ones({2, 3}));
        }) ==
        "linalg.tensorsolve: A (2, 3, 5) must be B's shape (2, 3) followed by dims of as many "
        "elements, as a square system");
  CHECK(error_of([] {
          linalg::multi_dot({ones({2, 2})});
        }) == "linalg.multi_dot: expected at least 2 tensors, got 1");
  CHECK(error_of([] {
          linalg::multi_dot({ones({2, 2}), ones({2}), ones({2, 2})});
        }) == "linalg.multi_dot: tensor 1 must be 2-d, got shape (2,)");
  CHECK(error_of([] {
          linalg::multi_dot({ones({2, 3}), ones({2, 2})});
        }) ==
        "linalg.multi_dot: tensors 0 and 1 with shapes (2, 3) and (2, 2) cannot be multiplied");
  CHECK(error_of([] {
          linalg::multi_dot({ones({2, 2}), ones({2, 2}, DType::f64)});
        }) ==
        "linalg.multi_dot: all tensors must have one dtype, but tensor 0 is f32 and tensor 1 is "
        "f64");
  CHECK(error_of([] { linalg::vecdot(ones({2}), ones({2}, DType::f64)); }) ==
        "linalg.vecdot: x and y must have one dtype, got f32 and f64");
  CHECK(error_of([] { linalg::vecdot(ones({2}, DType::i64), ones({2}, DType::i64)); }) ==
        "linalg.vecdot: expected a floating-point x (f32, f64, f16 or bf16), got dtype i64");
}

TEST_CASE("errors of the factorizations and solvers name the matrix and what is wrong with it",
          "[errors]") {
  CHECK(error_of([] {
          linalg::inv(zeros({2, 3}));
        }) == "linalg.inv: A must be batches of square matrices, but they are 2 by 3 matrices");
  CHECK(error_of([] { linalg::det(zeros({3})); }) ==
        "linalg.det: A must have at least 2 dimensions, got shape (3,)");
  CHECK(error_of([] {
          linalg::inv(zeros({2, 2}, DType::f16));
        }) ==
        "linalg.inv: expected A of dtype f32 or f64, got f16 (as torch, the factorizations take "
        "no integers nor f16/bf16)");
  Tensor singular = stack({eye(2), from_vector<float>({1, 2, 2, 4}, {2, 2})});
  CHECK(error_of([&] { linalg::inv(singular); }) ==
        "linalg.inv: matrix 1 of the batch is singular (U's diagonal element 2 is zero), so it "
        "has no inverse");
  CHECK(error_of([&] {
          linalg::solve(singular, ones({2, 2}));
        }) ==
        "linalg.solve: matrix 1 of the batch is singular (U's diagonal element 2 is zero), so it "
        "has no inverse");
  CHECK(error_of([] {
          linalg::solve(eye(3), ones({2, 3}));
        }) ==
        "linalg.solve: A of shape (3, 3) and B of shape (2, 3) do not match (3 columns, 2 rows)");
  CHECK(
      error_of([] { linalg::solve(eye(3), ones({3}), false); }) ==
      "linalg.solve: with left=false, B must be a batch of matrices (..., k, n), not vectors: got "
      "A (3, 3) and B (3,)");
  CHECK(error_of([] { linalg::solve(eye(3), ones({3}, DType::f64)); }) ==
        "linalg.solve: A and B must have one dtype, got f32 and f64");
  CHECK(error_of([] { linalg::solve_triangular(eye(3), ones({3}), true); }) ==
        "linalg.solve_triangular: B must have at least 2 dimensions, got shape (3,)");
  CHECK(error_of([] {
          linalg::cholesky(from_vector<float>({4, 2, 0, 2, 1, 0, 0, 0, 1}, {3, 3}));
        }) ==
        "linalg.cholesky: matrix 0 of the batch is not positive-definite (its leading minor of "
        "order 2 is not)");
  CHECK(error_of([] {
          linalg::cholesky(full({2, 2}, std::nan("")));
        }) ==
        "linalg.cholesky: matrix 0 of the batch is not positive-definite (its leading minor of "
        "order 1 is not)");
  Tensor a = from_vector<float>({1, 2, 2, 4}, {2, 2}).requires_grad_();
  Tensor d = linalg::det(a);
  CHECK(d.item<float>() == 0.0f);
  CHECK(error_of([&] { d.backward(); }) ==
        "linalg.det: the gradient at a singular matrix is not computed here (torch takes it "
        "through an SVD)");
}

TEST_CASE("errors of the bags of embeddings, local response norm and the multi-class hinge loss",
          "[errors]") {
  const Tensor w = zeros({5, 2});
  CHECK(error_of([&] {
          embedding_bag(w, from_vector<int64_t>({1, 2}), from_vector<int64_t>({1}, {1}));
        }) == "embedding_bag: offsets[0] has to be 0, got 1");
  CHECK(error_of([&] {
          embedding_bag(w, from_vector<int64_t>({1, 2}));
        }) == "embedding_bag: a 1-d input needs 1-d offsets, where each bag starts");
  CHECK(error_of([&] {
          embedding_bag(w, from_vector<int64_t>({1, 2}), from_vector<int64_t>({0, 3}));
        }) == "embedding_bag: offsets must rise within [0, 2], got 0 then 3");
  CHECK(
      error_of([&] {
        embedding_bag(w, zeros({2, 2}, DType::i64), Tensor(), EmbeddingBagMode::max, ones({2, 2}));
      }) == "embedding_bag: per_sample_weights are only supported for mode sum");
  CHECK(error_of([&] {
          embedding_bag(w, from_vector<int64_t>({1, 2}), from_vector<int64_t>({0, 1}),
                        EmbeddingBagMode::mean, Tensor(), true);
        }) ==
        "embedding_bag: with include_last_offset the last offset must be the number of indices "
        "(2), got 1");
  CHECK_THROWS_AS(embedding_bag(w, from_vector<int64_t>({7}, {1}), from_vector<int64_t>({0}, {1})),
                  IndexError);
  CHECK(error_of([] {
          local_response_norm(zeros({2, 3}), 2);
        }) == "local_response_norm: expected (N, C, ...) with at least 3 dims, got (2, 3)");
  CHECK(error_of([] {
          multi_margin_loss(zeros({2, 3}), zeros({2}, DType::i64), 3);
        }) == "multi_margin_loss: only p == 1 and p == 2 are supported, got 3");
  CHECK(error_of([] {
          multi_margin_loss(zeros({2, 3}), zeros({3}, DType::i64));
        }) ==
        "multi_margin_loss: expected (N, C) scores with N targets or (C) with one, got (2, 3) and "
        "(3,)");
  CHECK(error_of([] {
          multi_margin_loss(zeros({2, 3}), zeros({2}, DType::i64), 1, 1.0, ones({2}));
        }) == "multi_margin_loss: weight must be (3), one per class, got (2,)");
  CHECK(error_of([] {
          multilabel_margin_loss(zeros({2, 3}), zeros({2}, DType::i64));
        }) ==
        "multilabel_margin_loss: expected (N, C), (C) or 0-dim scores and a target of their "
        "shape, got (2, 3) and (2,)");
  CHECK(error_of([] {
          multilabel_margin_loss(zeros({2, 3}), zeros({2, 3}));
        }) == "multilabel_margin_loss: expected integer class indices, got f32");
  // Class indices below -1 or from C up: an IndexError, as torch's "out of range".
  CHECK_THROWS_AS(multilabel_margin_loss(zeros({2, 3}),
                                         from_vector<int64_t>({0, 3, -1}, {1, 3}).expand({2, 3})),
                  IndexError);
  CHECK_THROWS_AS(multilabel_margin_loss(zeros({3}), from_vector<int64_t>({1, -2, -1})),
                  IndexError);
  const Tensor lp = zeros({4, 2, 3}), ctc_targets = ones({2, 2}, DType::i64);
  const std::vector<int64_t> frames{4, 4}, lengths{2, 1};
  CHECK(error_of([&] {
          ctc_loss(lp, ctc_targets, std::vector<int64_t>{5, 4}, lengths);
        }) == "ctc_loss: input length 5 of sample 0 is not in [0, 4]");
  CHECK(error_of([&] {
          ctc_loss(lp, ctc_targets, frames, std::vector<int64_t>{3, 1});
        }) == "ctc_loss: expected padded targets (2, 3 or more), got (2, 2)");
  CHECK(error_of([&] { ctc_loss(lp, ctc_targets, frames, lengths, 3); }) ==
        "ctc_loss: blank must be in [0, 3), got 3");
  CHECK(error_of([&] { ctc_loss(lp, ctc_targets, frames, std::vector<int64_t>{2}); }) ==
        "ctc_loss: expected 2 input and target lengths, one per sample, got 2 and 1");
  CHECK(error_of([&] { ctc_loss(lp.to(DType::f16), ctc_targets, frames, lengths); }) ==
        "ctc_loss: expected f32 or f64 log-probabilities, got f16");
  CHECK(error_of([&] { ctc_loss(lp, ctc_targets.flatten(), frames, lengths); }) ==
        "ctc_loss: expected 3 targets, the sum of the target lengths, got 4");
  CHECK(error_of([&] { ctc_loss(lp, ctc_targets.to(DType::f32), frames, lengths); }) ==
        "ctc_loss: expected integer class indices as targets, got f32");
  CHECK_THROWS_AS(ctc_loss(lp, full({2, 2}, 3.0, DType::i64), frames, lengths), IndexError);
  CHECK(error_of([&] {
          ctc_loss(lp, from_vector<int64_t>({1, 2, -1, 7}, {2, 2}), frames, lengths);
        }) == "ctc_loss: target -1 of sample 1 (position 0) is out of bounds for 3 classes");
  // Unbatched targets are concatenated ones too: exactly target_length of them, as torch's.
  CHECK(error_of([&] {
          ctc_loss(zeros({4, 3}), from_vector<int64_t>({1, 2, 1}), std::vector<int64_t>{4},
                   std::vector<int64_t>{2});
        }) == "ctc_loss: expected 2 targets, the sum of the target lengths, got 3");
  CHECK(error_of([&] {
          ctc_loss(zeros({0, 2, 3}), ctc_targets, std::vector<int64_t>{0, 0}, lengths);
        }) == "ctc_loss: expected log_probs of one frame or more, got (0, 2, 3)");
}

TEST_CASE("the 1-d pools report bad arguments in their own name and terms", "[errors]") {
  // They run as 2-d pools over (N, C, 1, L), which would report "(1, k)" and "max_pool2d".
  const Tensor x = ones({2, 3, 8});
  CHECK(error_of([&] { max_pool1d(x, 3, -1); }) ==
        "max_pool1d: kernel_size 3, stride -1 and dilation 1 must be positive and padding 0 "
        "non-negative");
  CHECK(error_of([&] { avg_pool1d(x, 0); }) ==
        "avg_pool1d: kernel_size 0, stride 0 and dilation 1 must be positive and padding 0 "
        "non-negative");
  CHECK(error_of([&] { max_pool1d(x, 3, 1, 0, 0); })
            .find("max_pool1d: kernel_size 3, stride 1 "
                  "and dilation 0") == 0);
  CHECK(error_of([&] { max_pool1d(x, 3, 1, 2); }) ==
        "max_pool1d: padding should be at most half of the kernel size, got padding 2 for "
        "kernel 3");
  CHECK(error_of([&] { avg_pool1d(x, 9); }) ==
        "avg_pool1d: output size would be 0 for input (2, 3, 8); the input is too small for the "
        "kernel");
  CHECK(error_of([&] { max_pool1d(x, 3, 1, 0, 4); }) ==
        "max_pool1d: output size would be 0 for input (2, 3, 8); the input is too small for the "
        "kernel");
  CHECK(error_of([&] {
          std::get<0>(max_pool1d_with_indices(ones({2, 3, 2}), 3));
        }).find("max_pool1d: output size would be 0") == 0);
  CHECK(error_of([&] { max_pool1d(ones({2, 3, 8}, DType::i64), 2); }).find("max_pool1d") == 0);
  // what is right still pools: unbatched, and the default stride
  CHECK(max_pool1d(ones({3, 8}), 2).shape() == Shape{3, 4});
  CHECK(avg_pool1d(x, 3, 0, 1).shape() == Shape{2, 3, 3});
}

TEST_CASE(
    "dtypes a second probe found mishandled: refused as torch refuses, or wrapping as torch "
    "wraps",
    "[errors]") {
  const int64_t max64 = std::numeric_limits<int64_t>::max(),
                min64 = std::numeric_limits<int64_t>::min();
  // An in-place op whose promoted result cannot be written back (it cast the operand first:
  // [1, 2, 3] * 1.5 left [1, 2, 3]).
  Tensor a = from_vector<int64_t>({1, 2, 3});
  CHECK(error_of([&] { a.mul_(full({3}, 1.5)); }) ==
        "mul_: the result type f32 (i64 with f32) cannot be written into a i64 tensor in place");
  CHECK_THROWS_AS(a.add_(full({3}, 0.5)), ValueError);
  CHECK_THROWS_AS(a.sub_(full({}, 0.5)), ValueError);  // a 0-dim float operand too
  CHECK_THROWS_AS(a.addcdiv_(full({3}, 1.0), full({3}, 2.0)), ValueError);
  CHECK_THROWS_AS(from_vector<bool>({true}).add_(from_vector<int64_t>({1})), ValueError);
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});  // nothing written
  a.add_(from_vector<int32_t>({1, 1, 1}));                         // i64 with i32 is i64: fine
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4});
  // f32 with f64 is computed in f64 and rounded once, as torch's
  Tensor f = full({1}, 1.0);
  f.add_(full({1}, 1e-8, DType::f64));
  CHECK(f.item<float>() == static_cast<float>(1.0 + 1e-8));
  // a fractional alpha would truncate on integers (3 + 0.5 * 3 gave 3)
  CHECK(error_of([&] { add(from_vector<int64_t>({3}), from_vector<int64_t>({3}), 0.5); }) ==
        "add: alpha must be a whole number for integer operands (i64 and i64), got 0.5");
  CHECK_THROWS_AS(a.add_(a.clone(), 0.5), ValueError);
  CHECK(add(from_vector<int64_t>({3}), full({1}, 3.0), 0.5).item<float>() == 4.5f);
  // bool: no subtraction or negation (they gave wrong bools); addcdiv of integers
  CHECK_THROWS_AS(sub(from_vector<bool>({true, false}), from_vector<bool>({true, true})),
                  ValueError);
  CHECK_THROWS_AS(neg(from_vector<bool>({true})), ValueError);
  CHECK_THROWS_AS(sub(from_vector<int64_t>({1}), from_vector<bool>({true})), ValueError);
  CHECK_THROWS_AS(1.0 - from_vector<bool>({true}), ValueError);  // torch: use ~ to invert a mask
  CHECK_THROWS_AS(addcdiv(zeros({2}), from_vector<int64_t>({1, 2}), from_vector<int64_t>({2, 2})),
                  ValueError);
  // random integers that do not fit the dtype (they wrapped: randperm(300) in u8 repeated)
  CHECK_THROWS_AS(randperm(300, DType::u8), ValueError);
  CHECK(randperm(256, DType::u8).to(DType::i64).sum().item<int64_t>() == 255 * 128);
  CHECK_THROWS_AS(randint(0, 1000, {3}, DType::u8), ValueError);
  CHECK_THROWS_AS(randint(-1, 5, {3}, DType::u8), ValueError);
  CHECK_THROWS_AS(randint(0, 5000, {3}, DType::f16), ValueError);
  // the whole int64 range: its width overflowed int64 (undefined behaviour)
  CHECK(randint(min64, max64, {64}).numel() == 64);
  // fill values out of an integer or f16 range (300 in u8 gave 44)
  CHECK(error_of([] { full({2}, 300.0, DType::u8); }) ==
        "full: the value 300 cannot be converted to u8 without overflow");
  CHECK(full({1}, -1.0, DType::u8).item<int64_t>() == 255);  // a whole negative wraps, as torch
  CHECK_THROWS_AS(full({1}, -0.5, DType::u8), ValueError);
  CHECK_THROWS_AS(full({1}, 1e10, DType::i32), ValueError);
  CHECK(full({1}, 2147483647.0, DType::i32).item<int64_t>() == 2147483647);
  CHECK_THROWS_AS(full({1}, 1e6, DType::f16), ValueError);
  CHECK(std::isinf(full({1}, std::numeric_limits<double>::infinity(), DType::f16).item<float>()));
  // integer arithmetic wraps (two's complement), as torch's: it was signed overflow
  const Tensor big = from_vector<int64_t>({max64}), small = from_vector<int64_t>({min64});
  CHECK(add(big, from_vector<int64_t>({1})).item<int64_t>() == min64);
  CHECK(add(big, 1).item<int64_t>() == min64);
  CHECK(sub(small, from_vector<int64_t>({1})).item<int64_t>() == max64);
  CHECK(mul(big, from_vector<int64_t>({2})).item<int64_t>() == -2);
  CHECK(mul(big, 2).item<int64_t>() == -2);
  CHECK(neg(small).item<int64_t>() == min64);
  CHECK(abs(small).item<int64_t>() == min64);
  CHECK(sum(from_vector<int64_t>({max64, 1})).item<int64_t>() == min64);
  CHECK(add(from_vector<int32_t>({2147483647}), from_vector<int32_t>({1})).item<int64_t>() ==
        -2147483648LL);
  // casts of NaN and out-of-range floats to integers give the type's minimum, as x86 (and
  // torch there) does; a plain C++ cast of them is undefined
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(from_vector<float>({static_cast<float>(nan), 1e30f, -1e30f, 7.9f})
            .to(DType::i64)
            .to_vector<int64_t>() == std::vector<int64_t>{min64, min64, min64, 7});
  CHECK(from_vector<double>({3e9, -3e9, -2147483648.0}).to(DType::i32).to_vector<int32_t>() ==
        std::vector<int32_t>{INT32_MIN, INT32_MIN, INT32_MIN});
  // a convolution with an empty kernel (it returned a larger output of zeros)
  CHECK(error_of([] {
          conv2d(ones({1, 2, 4, 4}), ones({1, 2, 0, 0}));
        }) == "conv2d: the kernel size must be positive, got weight (1, 2, 0, 0)");
  // an interpolation scale whose output cannot be a size (4e30 was converted to int64)
  CHECK(error_of([] {
          interpolate(ones({1, 2, 4, 4}), std::nullopt, std::vector<double>{1e30, 1.0});
        }) ==
        "interpolate: scale factor 1e+30 makes an output of 4e+30 from 4 along spatial dim "
        "0, too large for a tensor");
  // labels a dataset cannot hold: out of [0, num_classes), or not class indices
  CHECK_THROWS_AS(data::TensorDataset(zeros({2, 1, 2, 2}), from_vector<int64_t>({0, 5}), 3),
                  IndexError);
  CHECK_THROWS_AS(data::TensorDataset(zeros({2, 1, 2, 2}), from_vector<float>({0, 1}), 3),
                  ValueError);
  CHECK(data::TensorDataset(zeros({2, 1, 2, 2}), from_vector<uint8_t>({0, 2}), 3).size() == 2);
  // Sizes whose arithmetic overflowed int64 (undefined; narrow returned an empty tensor)
  const Tensor r = arange(5);
  CHECK(error_of([&] { r.narrow(0, 1, max64); }) ==
        "narrow: start (1) + length (9223372036854775807) exceeds dimension size (5)");
  CHECK(error_of([&] {
          ones({2, 3}).narrow(1, -5, 1);
        }) == "narrow: start -5 out of range for dim 1 of size 3");  // as given, not wrapped
  CHECK(r.slice(0, 0, 5, max64).to_vector<int64_t>() == std::vector<int64_t>{0});
  CHECK(r.slice(0, 1, 5, 3).to_vector<int64_t>() == std::vector<int64_t>{1, 4});
  CHECK(ones({6}).chunk(max64).size() == 6);
  for (const auto& f : std::vector<std::function<void()>>{
           [] {
             zeros({4}).reshape({-1, int64_t{1} << 62, 4});
           },
           [] {
             ones({6}).split_with_sizes({max64, max64, 6});
           },
           [] { ones({2}).repeat({max64}); },
           [] {
             ones({2}).tile({int64_t{1} << 62, int64_t{1} << 62});
           },
           [] {
             pad(ones({2}), {max64, 1});
           },
           [] { ones({2}).diag(max64); }, [] { ones({2}).repeat_interleave(max64); }})
    CHECK(error_of(f).find("overflows int64") != std::string::npos);
  // Messages that named an op the caller did not call (gather, scatter_add, conv2d, amax)
  CHECK(error_of([] {
          multi_margin_loss(ones({2, 3}), from_vector<int64_t>({3, 0}));
        }) ==
        "multi_margin_loss: target 3 is out of range for 3 classes (expected class indices in "
        "[0, C))");
  CHECK(error_of([] {
          multilabel_margin_loss(ones({1, 3}), from_vector<int64_t>({1, -1, -2}).reshape({1, 3}));
        }) ==
        "multilabel_margin_loss: target -2 is out of range for 3 classes (expected class "
        "indices in [0, C), or -1 to end a sample's labels)");
  CHECK_THROWS_AS(
      multilabel_margin_loss(ones({1, 3}), from_vector<int64_t>({3, 0, 0}).reshape({1, 3})),
      IndexError);
  CHECK(error_of([] {
          conv1d(ones({1, 2, 2}), ones({1, 2, 3}));
        }) == "conv1d: input of length 2 with padding 0 is shorter than the dilated kernel (3)");
  CHECK(error_of([] {
          conv1d(ones({1, 2, 5}), ones({1, 2, 3}), Tensor(), 0);
        }) == "conv1d: stride 0 and dilation 1 must be positive and padding 0 non-negative");
  CHECK(error_of([] {
          conv1d(ones({1, 2, 5}), ones({1, 2, 3}, DType::f64));
        }).find("conv1d: input (f32), weight (f64)") == 0);
  CHECK(error_of([] {
          conv_transpose1d(ones({1, 2, 5}), ones({2, 1, 3}), Tensor(), 1, 0, 2);
        }) ==
        "conv_transpose1d: output_padding (2) must be smaller than either stride (1) or dilation "
        "(1)");
  // logsumexp over nothing is -inf, as torch's (amax refused the empty dim)
  CHECK(logsumexp(zeros({0}), {0}).item<float>() == -std::numeric_limits<float>::infinity());
  CHECK(logsumexp(zeros({0, 3}), {0}).to_vector<float>() ==
        std::vector<float>(3, -std::numeric_limits<float>::infinity()));
  CHECK(error_of([] {
          ones({2}, DType::i64).masked_fill(from_vector<bool>({true, false}), 1e30);
        }) == "masked_fill: the value 1e+30 cannot be converted to i64 without overflow");
  CHECK(error_of([] { scalar_tensor(std::nan(""), DType::i64); }).find("scalar_tensor:") == 0);
  CHECK(error_of([] { zeros({2}, DType::i64).uniform_(); })
            .find("uniform_: expected a "
                  "floating-point tensor") == 0);
  CHECK(error_of([] { zeros({1}).expand({3}).normal_(); }).find("normal_: more than one") == 0);
  CHECK(error_of([] {
          zeros({1}).expand({2}).masked_fill_(from_vector<bool>({true, false}), 1.0);
        }).find("masked_fill_: more than one") == 0);
  // a diagonal past int64's double range keeps all or nothing (its conversion was refused)
  CHECK(triu(ones({2, 3}), max64).sum().item<float>() == 0);
  CHECK(triu(ones({2, 3}), min64).sum().item<float>() == 6);
  CHECK(tril(ones({2, 3}), max64).sum().item<float>() == 6);
  // a count no memory holds is a tandem error (it was std::length_error)
  CHECK_THROWS_AS(linspace(0, 1, max64), ValueError);
}

TEST_CASE(
    "what the fourth probe left: integer matmul, empty sequences, loss shapes, set_grad, "
    "detach_ of a view",
    "[errors]") {
  // (Integer matmul's values are checked in test_ops.cpp.) An RNN over no steps is refused in
  // its own name (stack's message named an op the caller did not call).
  nn::LSTM lstm(3, 4);
  CHECK(error_of([&] {
          lstm.forward(zeros({0, 2, 3}));
        }) == "lstm: expected a sequence of at least one step, got input (0, 2, 3)");
  nn::GRU gru(nn::GRUOptions(3, 4).batch_first(true));
  CHECK(error_of([&] {
          gru.forward(zeros({2, 0, 3}));
        }) == "gru: expected a sequence of at least one step, got input (2, 0, 3) (batch_first)");
  // Shapes that do not broadcast are reported by the loss, not by an op inside it.
  CHECK(error_of([] {
          hinge_embedding_loss(zeros({2, 3}), zeros({3, 2}));
        }).rfind("hinge_embedding_loss: shapes (2, 3) and (3, 2) cannot be broadcast", 0) == 0);
  CHECK(error_of([] {
          margin_ranking_loss(zeros({2}), zeros({3}), ones({2}));
        }).rfind("margin_ranking_loss: shapes (2,) and (3,) cannot be broadcast", 0) == 0);
  CHECK(error_of([] {
          margin_ranking_loss(zeros({2}), zeros({2}), ones({3}));
        }).rfind("margin_ranking_loss: shapes (2,) and (3,) cannot be broadcast", 0) == 0);
  CHECK(error_of([] {
          cosine_embedding_loss(zeros({2, 3}), zeros({3, 3}), ones({2}));
        }).rfind("cosine_embedding_loss: shapes (2, 3) and (3, 3) cannot be broadcast", 0) == 0);
  CHECK(error_of([] {
          cosine_embedding_loss(zeros({2, 3}), zeros({2, 3}), ones({3}));
        }).rfind("cosine_embedding_loss: shapes (2,) and (3,) cannot be broadcast", 0) == 0);
  CHECK(error_of([] {
          triplet_margin_loss(zeros({2, 3}), zeros({3, 2}), ones({2, 3}));
        }).rfind("triplet_margin_loss: shapes (2, 3) and (3, 2) cannot be broadcast", 0) == 0);
  // Shapes that broadcast still do, as torch's.
  CHECK(margin_ranking_loss(ones({2}), zeros({1}), ones({2})).item<float>() == 0);
  // detach_ of a view is refused, as torch's (its history is its base's); its detach() is a
  // tensor of its own, which may.
  Tensor base = ones({4}).set_requires_grad();
  Tensor part = base.slice(0, 0, 2);
  CHECK(part.is_view());
  CHECK_FALSE(base.is_view());
  CHECK(error_of([&] { part.detach_(); }) ==
        "detach_: can't detach a view in place (it shares its base's history); use detach() "
        "instead");
  CHECK(part.requires_grad());
  Tensor own = part.detach();
  CHECK_FALSE(own.is_view());
  own.detach_();
  // A gradient of another dtype or device is refused when set, as torch's grad assignment.
  Tensor p = zeros({3}).set_requires_grad();
  CHECK(error_of([&] { p.set_grad(zeros({3}, DType::f64)); }) ==
        "set_grad: gradient of f64 on cpu for a tensor of f32 on cpu; a gradient takes its "
        "tensor's dtype and device");
  CHECK(!p.grad().defined());
  float dummy[3] = {0, 0, 0};
  CHECK(error_of([&] {
          p.set_grad(from_blob(dummy, {3}, DType::f32, Device("cuda:0")));
        }).rfind("set_grad: gradient of f32 on cuda:0 for a tensor of f32 on cpu", 0) == 0);
}
