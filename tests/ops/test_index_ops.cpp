// index_select, gather, scatter, scatter_add, index_add and embedding against loops written
// from their definitions (PyTorch's values are in test_golden.cpp, finite differences in
// test_gradcheck.cpp): every dim, repeated indices, narrow dtypes, strided destinations, and
// the errors, which leave the destination as it was.
#include "../util.hpp"

using namespace tandem;
using tandem::testing::error_of;
using tandem::testing::require_close;

namespace {

Tensor iota(const Shape& shape, DType dtype = DType::f32) {
  return arange(numel_of(shape), TensorOptions(DType::f64)).reshape(shape).to(dtype);
}

// Row-major offset of (a, b, c) in a 3-d shape.
int64_t at(const Shape& s, int64_t a, int64_t b, int64_t c) { return (a * s[1] + b) * s[2] + c; }

}  // namespace

TEST_CASE("index_select picks slices along any dim, repeats allowed, i32 or i64 indices",
          "[ops][index]") {
  const Shape s{3, 4, 5};
  Tensor x = iota(s);
  const std::vector<int64_t> idx{2, 0, 2, 1};
  const auto xv = x.to_vector<double>();
  for (int64_t dim = 0; dim < 3; ++dim) {
    INFO("dim " << dim);
    for (DType it : {DType::i64, DType::i32}) {
      Tensor y = index_select(x, dim, from_vector(idx).to(it));
      Shape expected_shape = s;
      expected_shape[dim] = 4;
      REQUIRE(y.shape() == expected_shape);
      const auto yv = y.to_vector<double>();
      for (int64_t a = 0; a < expected_shape[0]; ++a)
        for (int64_t b = 0; b < expected_shape[1]; ++b)
          for (int64_t c = 0; c < expected_shape[2]; ++c) {
            int64_t src[3] = {a, b, c};
            src[dim] = idx[src[dim]];
            REQUIRE(yv[at(expected_shape, a, b, c)] == xv[at(s, src[0], src[1], src[2])]);
          }
    }
  }
  // Negative dims, a scalar index, the method form, and integer and bool values.
  CHECK(equal(index_select(x, -1, from_vector<int64_t>({4})), x.narrow(2, 4, 1)));
  CHECK(equal(x.index_select(0, scalar_tensor(2.0, DType::i64)), x.narrow(0, 2, 1)));
  Tensor xi = iota({4, 2}, DType::i64);
  CHECK(index_select(xi, 0, from_vector<int64_t>({2, 2})).to_vector<int64_t>() ==
        std::vector<int64_t>{4, 5, 4, 5});
  Tensor xb = gt(iota({3}), scalar_tensor(0.5));
  CHECK(index_select(xb, 0, from_vector<int64_t>({0, 2})).to_vector<bool>() ==
        std::vector<bool>{false, true});
  // An empty index gives an empty result; a bad index into an empty block is still refused.
  CHECK(index_select(x, 1, zeros({0}, DType::i64)).shape() == Shape{3, 0, 5});
  CHECK_THAT(error_of([] { index_select(zeros({3, 0}), 0, from_vector<int64_t>({7})); }),
             Catch::Contains("index 7 is out of bounds for dimension 0 with size 3"));
  CHECK(index_select(zeros({3, 0}), 0, from_vector<int64_t>({2, 0})).shape() == Shape{2, 0});
  // A scalar is a dim of one: one index, and a scalar result (as torch).
  Tensor five = scalar_tensor(5.0);
  CHECK(index_select(five, 0, from_vector<int64_t>({0})).shape() == Shape{});
  CHECK(index_select(five, 0, from_vector<int64_t>({0})).item<float>() == 5.0f);
  CHECK_THAT(error_of([&] { index_select(five, 0, from_vector<int64_t>({0, 0})); }),
             Catch::Contains("a scalar can be indexed by one index only"));
}

TEST_CASE("the gradient of index_select sums the output slices into the slices they came from",
          "[ops][index]") {
  Tensor x = iota({4, 3});
  x.set_requires_grad(true);
  Tensor y = index_select(x, 0, from_vector<int64_t>({2, 0, 2}));
  y.backward(iota({3, 3}).add(1.0));
  // Row 2 receives output rows 0 and 2, row 0 receives row 1, rows 1 and 3 nothing.
  CHECK(x.grad().to_vector<float>() ==
        std::vector<float>{4, 5, 6, 0, 0, 0, 1 + 7, 2 + 8, 3 + 9, 0, 0, 0});
}

TEST_CASE("gather and scatter_add follow torch's definitions, an index smaller than self too",
          "[ops][index]") {
  const Shape s{3, 4, 5};
  Tensor x = iota(s);
  Generator g(5);
  for (int64_t dim = 0; dim < 3; ++dim) {
    INFO("dim " << dim);
    // The index is smaller than x in the other dims (torch allows it) and repeats values.
    Shape is{2, 3, 4};
    is[dim] = 6;
    Tensor idx = randint(0, s[dim], is, DType::i64, &g);
    Tensor y = gather(x, dim, idx);
    REQUIRE(y.shape() == is);
    const auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
    const auto iv = idx.to_vector<int64_t>();
    // scatter_add: every element of src lands where the index sends it.
    Tensor src = iota(is).add(1.0);
    Tensor z = scatter_add(zeros(s), dim, idx, src);
    std::vector<double> expected_z(numel_of(s), 0.0);
    const auto sv = src.to_vector<double>();
    for (int64_t a = 0; a < is[0]; ++a)
      for (int64_t b = 0; b < is[1]; ++b)
        for (int64_t c = 0; c < is[2]; ++c) {
          const int64_t k = at(is, a, b, c);
          int64_t p[3] = {a, b, c};
          p[dim] = iv[k];
          REQUIRE(yv[k] == xv[at(s, p[0], p[1], p[2])]);
          expected_z[at(s, p[0], p[1], p[2])] += sv[k];
        }
    CHECK(z.to_vector<double>() == expected_z);
    // The gradient of gather is that scatter_add.
    Tensor xg = x.detach();
    xg.set_requires_grad(true);
    gather(xg, dim, idx).backward(src);
    CHECK(xg.grad().to_vector<double>() == expected_z);
  }
}

TEST_CASE("scatter writes values or a number (one-hot), and its gradients skip what it overwrote",
          "[ops][index]") {
  Tensor labels = from_vector<int64_t>({2, 0, 3}, {3, 1});
  Tensor one_hot = zeros({3, 4}).scatter(1, labels, 1.0);
  CHECK(one_hot.to_vector<float>() == std::vector<float>{0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1});
  Tensor self = iota({2, 4}).add(1.0), src = iota({2, 3}).mul(-1.0);
  self.set_requires_grad(true);
  src.set_requires_grad(true);
  // src is wider than the index (2, 2): its last column is never read.
  Tensor idx = from_vector<int64_t>({3, 0, 1, 2}, {2, 2});
  Tensor y = scatter(self, 1, idx, src);
  CHECK(y.to_vector<float>() == std::vector<float>{-1, 2, 3, -0.0f, 5, -3, -4, 8});
  y.backward(iota({2, 4}).add(10.0));
  CHECK(self.grad().to_vector<float>() == std::vector<float>{0, 11, 12, 0, 14, 0, 0, 17});
  CHECK(src.grad().to_vector<float>() == std::vector<float>{13, 10, 0, 15, 16, 0});
}

TEST_CASE("index_add adds alpha * source slices, repeats summing, in every float dtype",
          "[ops][index]") {
  Tensor idx = from_vector<int64_t>({1, 3, 1});
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO("dtype " << dt);
    Tensor self = iota({2, 4}, dt), source = iota({2, 3}, dt).add(1.0);
    Tensor y = index_add(self, 1, idx, source, 2.0);
    REQUIRE(y.dtype() == dt);
    // Column 1 gets 2 * (source col 0 + col 2), column 3 gets 2 * col 1.
    CHECK(y.to_vector<double>() == std::vector<double>{0, 1 + 2 * (1 + 3), 2, 3 + 2 * 2,
                                                       4, 5 + 2 * (4 + 6), 6, 7 + 2 * 5});
  }
  // Few long rows (split by columns, not rows) and many planes of short ones (split by planes)
  // give the same sums as the closed form.
  Tensor few = index_add(zeros({2, 5000}), 0, from_vector<int64_t>({0, 0, 1, 0}), ones({4, 5000}));
  CHECK(few.select(0, 0).min().item<float>() == 3.0f);
  CHECK(few.select(0, 1).max().item<float>() == 1.0f);
  Tensor planes = index_add(zeros({64, 3, 2}), 1, from_vector<int64_t>({2, 2, 0}), ones({64, 3, 2}));
  CHECK(planes.sum({0, 2}).to_vector<float>() == std::vector<float>{128, 0, 256});
  // In place, into a transposed (strided) tensor: the same numbers.
  Tensor t = iota({4, 2}).t().contiguous().t();  // (4, 2) with column-major strides
  REQUIRE(!t.is_contiguous());
  t.index_add_(0, idx, ones({3, 2}));
  CHECK(t.to_vector<float>() == std::vector<float>{0, 1, 4, 5, 4, 5, 7, 8});
  // Gradients: self's passes through, source's is the gradient's selected slices times alpha.
  Tensor self = zeros({2, 4}), source = zeros({2, 3});
  self.set_requires_grad(true);
  source.set_requires_grad(true);
  index_add(self, 1, idx, source, -0.5).backward(iota({2, 4}));
  CHECK(self.grad().to_vector<float>() == iota({2, 4}).to_vector<float>());
  CHECK(source.grad().to_vector<float>() == std::vector<float>{-0.5, -1.5, -0.5, -2.5, -3.5, -2.5});
}

TEST_CASE("a scatter whose index or values are the destination itself reads them as they were",
          "[ops][index]") {
  // Each write would change an index still to be read; read after the writes, index 100 would
  // send the last one far outside the tensor.
  Tensor t = from_vector<int64_t>({1, 2, 0});
  t.scatter_(0, t, from_vector<int64_t>({100, 100, 7}));
  CHECK(t.to_vector<int64_t>() == std::vector<int64_t>{7, 100, 100});
  Tensor u = from_vector<float>({1, 2, 3});
  u.index_add_(0, from_vector<int64_t>({2, 1, 0}), u);
  CHECK(u.to_vector<float>() == std::vector<float>{4, 4, 4});
}

TEST_CASE("a bad index, dtype or shape is an error that leaves the destination as it was",
          "[ops][index][errors]") {
  Tensor x = iota({3, 4});
  const auto before = x.to_vector<float>();
  CHECK_THAT(error_of([&] { index_select(x, 0, from_vector<int64_t>({0, 3})); }),
             Catch::Contains("index_select: index 3 is out of bounds for dimension 0 with size 3"));
  CHECK_THAT(error_of([&] { index_select(x, 1, from_vector<int64_t>({-1})); }),
             Catch::Contains("index -1 is out of bounds for dimension 1 with size 4"));
  CHECK_THROWS_AS(index_select(x, 0, from_vector<int64_t>({5})), IndexError);
  CHECK_THAT(error_of([&] { index_select(x, 0, from_vector<float>({0})); }),
             Catch::Contains("index must hold integers (i64 or i32), got dtype f32"));
  CHECK_THAT(error_of([&] { index_select(x, 0, zeros({2, 2}, DType::i64)); }),
             Catch::Contains("index must be 1-d"));
  CHECK_THAT(error_of([&] { gather(x, 1, zeros({3}, DType::i64)); }),
             Catch::Contains("gather: index must have as many dims as self (2)"));
  CHECK_THAT(error_of([&] { gather(x, 1, zeros({4, 1}, DType::i64)); }),
             Catch::Contains("is larger than self (3, 4) in dim 0"));
  // In place: the good indices before the bad one are not written either.
  CHECK_THAT(error_of([&] { x.scatter_add_(1, from_vector<int64_t>({0, 1, 9}, {1, 3}), ones({1, 3})); }),
             Catch::Contains("scatter_add_: index 9 is out of bounds for dimension 1 with size 4"));
  CHECK_THAT(error_of([&] { x.index_add_(0, from_vector<int64_t>({1, 7}), ones({2, 4})); }),
             Catch::Contains("index_add_: index 7 is out of bounds"));
  CHECK_THAT(error_of([&] { x.index_add_(0, from_vector<int64_t>({1}), ones({1, 3})); }),
             Catch::Contains("source must be (1, 4)"));
  CHECK_THAT(error_of([&] { index_add(iota({3}, DType::i64), 0, from_vector<int64_t>({1}),
                                      ones({1}, DType::i64), 0.5); }),
             Catch::Contains("alpha must be a whole number for an integer tensor, got 0.5"));
  CHECK_THAT(error_of([&] { x.scatter_(0, zeros({1, 1}, DType::i64), ones({1, 1}, DType::f64)); }),
             Catch::Contains("src must have self's dtype (f32), got f64"));
  CHECK(x.to_vector<float>() == before);
  CHECK_THAT(error_of([&] { zeros({3}, DType::boolean).scatter_add_(0, zeros({1}, DType::i64),
                                                                    ones({1}, DType::boolean)); }),
             Catch::Contains("cannot add bool tensors"));
  // Writes through an expanded view and into tensors that require grad are refused.
  CHECK_THAT(error_of([&] { zeros({1, 3}).expand({2, 3}).scatter_(0, zeros({1, 1}, DType::i64), 1.0); }),
             Catch::Contains("more than one element of the written-to tensor"));
  Tensor leaf = zeros({3});
  leaf.set_requires_grad(true);
  CHECK_THAT(error_of([&] { leaf.index_add_(0, zeros({1}, DType::i64), ones({1})); }),
             Catch::Contains("in-place operation on a leaf tensor that requires grad"));
}

TEST_CASE("embedding looks rows up for any index shape, the padding row gets no gradient",
          "[ops][index][nn]") {
  Tensor w = iota({5, 3});
  w.set_requires_grad(true);
  Tensor ids = from_vector<int64_t>({4, 0, 2, 4, 2, 2}, {2, 3});
  Tensor y = embedding(w, ids, /*padding_idx=*/2);
  REQUIRE(y.shape() == Shape{2, 3, 3});
  CHECK(y.select(0, 0).select(0, 0).to_vector<float>() == std::vector<float>{12, 13, 14});
  CHECK(y.select(0, 1).select(0, 2).to_vector<float>() == std::vector<float>{6, 7, 8});
  y.sum().backward();
  // Row 4 twice, row 0 once, row 2 is padding.
  CHECK(w.grad().to_vector<float>() ==
        std::vector<float>{1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2});
  // F::embedding takes the input first and counts a negative padding_idx from the end.
  namespace F = nn::functional;
  Tensor w2 = w.detach().clone();
  w2.set_requires_grad(true);
  F::embedding(ids, w2, F::EmbeddingFuncOptions().padding_idx(-1)).sum().backward();
  CHECK(w2.grad().to_vector<float>() ==
        std::vector<float>{1, 1, 1, 0, 0, 0, 3, 3, 3, 0, 0, 0, 0, 0, 0});
  CHECK_THAT(error_of([&] { embedding(w, from_vector<int64_t>({5})); }),
             Catch::Contains("embedding: index 5 is out of bounds for dimension 0 with size 5"));
  CHECK_THAT(error_of([&] { F::embedding(ids, w, F::EmbeddingFuncOptions().padding_idx(5)); }),
             Catch::Contains("padding_idx 5 is out of range for 5 embeddings"));
}

TEST_CASE("nn::Embedding: N(0, 1) rows, a zero padding row, from_pretrained frozen or not",
          "[nn][index]") {
  manual_seed(17);
  nn::Embedding table(nn::EmbeddingOptions(1000, 16).padding_idx(3));
  REQUIRE(table.weight.shape() == Shape{1000, 16});
  CHECK(table.weight.select(0, 3).abs().sum().item<float>() == 0.0f);
  const double mean = table.weight.mean().item<float>(), sd = table.weight.std().item<float>();
  CHECK(std::abs(mean) < 0.03);  // 16,000 draws: the standard error of the mean is 0.008
  CHECK(std::abs(sd - 1.0) < 0.03);
  CHECK(table.named_parameters().keys() == std::vector<std::string>{"weight"});
  Tensor ids = from_vector<int64_t>({3, 7});
  Tensor y = table.forward(ids);
  CHECK(equal(y.select(0, 1), table.weight.select(0, 7)));

  // from_pretrained uses the tensor itself, as libtorch's: training it changes the caller's.
  Tensor pretrained = iota({4, 2}, DType::f64);
  auto frozen = nn::Embedding::from_pretrained(pretrained);
  CHECK(frozen->weight.is_same(pretrained));
  CHECK(frozen->weight.dtype() == DType::f64);
  CHECK(!frozen->weight.requires_grad());
  CHECK(frozen->parameters().size() == 1);
  Tensor trained = iota({4, 2});
  auto trainable = nn::Embedding::from_pretrained(
      trained, nn::EmbeddingFromPretrainedOptions().freeze(false).padding_idx(0));
  CHECK(trainable->weight.requires_grad());
  CHECK(trainable->padding_idx == 0);
  CHECK(trainable->weight.select(0, 0).to_vector<float>() == std::vector<float>{0, 1});
  optim::SGD sgd(trainable->parameters(), optim::SGDOptions(1.0));
  trainable->forward(from_vector<int64_t>({0, 2})).sum().backward();
  sgd.step();
  // Row 2 took a step of -1; row 0 is padding and got no gradient.
  CHECK(trained.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 3, 4, 6, 7});
  CHECK_THAT(error_of([] { nn::Embedding(nn::EmbeddingOptions(4, 2).padding_idx(-5)); }),
             Catch::Contains("padding_idx -5 is out of range for 4 embeddings"));
}
