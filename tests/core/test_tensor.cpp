// Tensor creation, views, conversions, element access and printing.
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "../util.hpp"

using namespace tandem;
using tandem::testing::error_of;

TEST_CASE("factories fill what they promise", "[tensor]") {
  Tensor z = zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.dtype() == DType::f32);
  CHECK(z.device() == kCPU);
  CHECK(z.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(ones({4}, DType::i32).to_vector<int32_t>() == std::vector<int32_t>(4, 1));
  CHECK(full({2}, 2.5, DType::f64).to_vector<double>() == std::vector<double>{2.5, 2.5});
  CHECK(arange(5).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(5).dtype() == DType::i64);
  CHECK(arange(1.0, 2.0, 0.25, DType::f32).to_vector<float>() ==
        std::vector<float>{1.0f, 1.25f, 1.5f, 1.75f});
  CHECK(scalar_tensor(7.0).dim() == 0);
  CHECK(scalar_tensor(7.0).item<float>() == 7.0f);
  CHECK(empty({0, 3}).numel() == 0);
  float buffer[6] = {1, 2, 3, 4, 5, 6};
  Tensor blob = from_blob(buffer, {2, 3}, DType::f32);
  buffer[4] = 50;  // no copy: the tensor sees the change
  CHECK(blob.to_vector<float>()[4] == 50.0f);
  bool deleted = false;
  {
    Tensor owned = from_blob(buffer, {6}, DType::f32, kCPU, [&](void*) { deleted = true; });
    Tensor view = owned.narrow(0, 1, 2);
    owned = Tensor();
    CHECK_FALSE(deleted);  // the view keeps the storage alive
  }
  CHECK(deleted);
}

TEST_CASE("views share storage and have the right strides", "[tensor]") {
  Tensor a = arange(24, DType::f32).reshape({2, 3, 4});
  CHECK(a.is_contiguous());
  CHECK(a.strides() == Shape{12, 4, 1});
  Tensor t = a.transpose(0, 2);
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK(t.strides() == Shape{1, 4, 12});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.storage().is_same(a.storage()));
  CHECK(t.contiguous().is_contiguous());
  CHECK(t.contiguous().to_vector<float>()[1] == 12.0f);  // t[0][0][1] == a[1][0][0]
  Tensor p = a.permute({1, 2, 0});
  CHECK(p.shape() == Shape{3, 4, 2});
  Tensor s = a.slice(2, 1, 4, 2);  // columns 1 and 3
  CHECK(s.shape() == Shape{2, 3, 2});
  CHECK(s.contiguous().to_vector<float>()[0] == 1.0f);
  CHECK(s.contiguous().to_vector<float>()[1] == 3.0f);
  CHECK(a.slice(1, -2, 100).shape() == Shape{2, 2, 4});  // Python-style clamping
  CHECK(a.narrow(1, 1, 2).storage_offset() == 4);
  Tensor sel = a.select(0, 1);
  CHECK(sel.shape() == Shape{3, 4});
  CHECK(sel.to_vector<float>()[0] == 12.0f);
  CHECK(a.select(1, -1).to_vector<float>()[0] == 8.0f);
  CHECK(a.unsqueeze(1).shape() == Shape{2, 1, 3, 4});
  CHECK(a.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
  CHECK(zeros({1, 3, 1}).squeeze().shape() == Shape{3});
  CHECK(zeros({1, 3, 1}).squeeze(0).shape() == Shape{3, 1});
  Tensor e = arange(3, DType::f32).unsqueeze(0).expand({4, 3});
  CHECK(e.strides() == Shape{0, 1});
  CHECK(e.contiguous().to_vector<float>()[10] == 1.0f);
  CHECK(a.flatten().shape() == Shape{24});
  CHECK(a.flatten(1).shape() == Shape{2, 12});
  CHECK(a.reshape({-1, 6}).shape() == Shape{4, 6});
  // reshape of a non-viewable layout copies; view refuses.
  CHECK(t.reshape({24}).to_vector<float>()[1] == 12.0f);
  CHECK(error_of([&] { t.view({24}); }).find("use reshape") != std::string::npos);
  // a transposed tensor's transpose is viewable
  CHECK(a.transpose(1, 2).transpose(1, 2).view({6, 4}).shape() == Shape{6, 4});
}

TEST_CASE("dtype and device conversions", "[tensor]") {
  Tensor a = from_vector<float>({1.5f, -2.25f, 3.0f});
  CHECK(a.to(DType::f64).to_vector<double>() == std::vector<double>{1.5, -2.25, 3.0});
  CHECK(a.to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>{1, -2, 3});
  CHECK(a.to(DType::boolean).to_vector<bool>() == std::vector<bool>{true, true, true});
  CHECK(from_vector<float>({0.0f, 2.0f}).to(DType::boolean).to_vector<bool>() ==
        std::vector<bool>{false, true});
  CHECK(a.to(DType::f16).to(DType::f32).to_vector<float>() == a.to_vector<float>());
  CHECK(a.to(kCPU).is_same(a));
  CHECK(a.clone().storage().is_same(a.storage()) == false);
  CHECK(from_vector<int64_t>({300}).to(DType::u8).item<int64_t>() == 44);  // wraps as C++ does
  CHECK(a.to(DType::f32).is_same(a));
}

TEST_CASE("in-place methods", "[tensor]") {
  Tensor a = zeros({2, 2});
  a.fill_(3.0);
  CHECK(a.to_vector<float>() == std::vector<float>(4, 3.0f));
  a.add_(ones({2}), 2.0);
  CHECK(a.to_vector<float>() == std::vector<float>(4, 5.0f));
  a.mul_(0.5);
  CHECK(a.to_vector<float>() == std::vector<float>(4, 2.5f));
  a.narrow(1, 0, 1).copy_(from_vector<float>({7.0f, 8.0f}).unsqueeze(1));
  CHECK(a.to_vector<float>() == std::vector<float>{7.0f, 2.5f, 8.0f, 2.5f});
  a.zero_();
  CHECK(a.to_vector<float>() == std::vector<float>(4, 0.0f));
}

TEST_CASE("in-place arithmetic writes into the tensor itself and matches the out-of-place ops",
          "[tensor]") {
  Generator g(11);
  // Written straight in: same dtype and device, broadcast operands, strided destinations.
  Tensor base = randn({4, 6}, DType::f32, &g);
  Tensor a = base.clone(), at = base.clone().t();  // a row-major and a transposed destination
  Tensor other = randn({6}, DType::f32, &g);
  a.add_(other, -0.5);
  CHECK(max(abs(a - add(base, other, -0.5))).item<double>() == 0.0);
  at.mul_(randn({4, 1}, DType::f32, &g).t());  // (6, 4) times a (1, 4) row
  CHECK(at.strides() == Shape{1, 6});
  at.add_(2.0);
  at.mul_(3.0);
  Generator g2(11);
  Tensor base2 = randn({4, 6}, DType::f32, &g2);
  randn({6}, DType::f32, &g2);
  Tensor row = randn({4, 1}, DType::f32, &g2).t();
  CHECK(max(abs(at - mul(add(mul(base2.t(), row), 2.0), 3.0))).item<double>() == 0.0);
  // Integers take integer numbers in place; a floating number's result is f32, as torch's
  // (`n.add_(1.0)` is refused there too).
  Tensor n = arange(0, 6, 1, DType::i64);
  n.add_(1);
  n.mul_(3);
  CHECK(n.to_vector<int64_t>() == std::vector<int64_t>{3, 6, 9, 12, 15, 18});
  CHECK_THROWS_WITH(n.add_(1.0), Catch::Contains("cannot be written into a i64 tensor"));
  CHECK_THROWS_WITH(n *= 3.0, Catch::Contains("cannot be written into a i64 tensor"));
  CHECK(n.to_vector<int64_t>() == std::vector<int64_t>{3, 6, 9, 12, 15, 18});
  // The operand is the destination itself: each element read before it is written.
  Tensor d = from_vector<float>({1, 2, 3});
  d.add_(d, 2.0);
  d.mul_(d);
  CHECK(d.to_vector<float>() == std::vector<float>{9, 36, 81});
  // Through a temporary: another view of the same memory, another dtype, a larger operand.
  Tensor sq = arange(0, 9, 1, DType::f32).reshape({3, 3});
  Tensor expected = add(sq, sq.t());
  sq.add_(sq.t());  // in place, element (0, 1) would read (1, 0) after it was written
  CHECK(max(abs(sq - expected)).item<double>() == 0.0);
  // copy_ from another view of the destination's memory: the source's values before the copy
  // (torch refuses these; element by element they would read what the copy already wrote).
  Tensor tr = arange(0, 16, 1, DType::f32).reshape({4, 4});
  const Tensor transposed = tr.t().contiguous();
  tr.copy_(tr.t());
  CHECK(equal(tr, transposed));
  Tensor line = arange(0, 6, 1, DType::f32);
  line.narrow(0, 1, 5).copy_(line.narrow(0, 0, 5));  // a forward loop would smear element 0
  CHECK(line.to_vector<float>() == std::vector<float>{0, 0, 1, 2, 3, 4});
  Tensor rows = arange(0, 6, 1, DType::f32).reshape({2, 3});
  rows.copy_(rows[1]);  // a broadcast row of itself
  CHECK(rows.to_vector<float>() == std::vector<float>{3, 4, 5, 3, 4, 5});
  Tensor f = ones({3});
  f.mul_(from_vector<double>({0.5, 2, 4}));
  CHECK(f.to_vector<float>() == std::vector<float>{0.5f, 2, 4});
  CHECK_THROWS_AS(ones({3}).add_(ones({2, 3})), Error);
}

TEST_CASE("printing follows torch's layout", "[tensor]") {
  auto str = [](const Tensor& t) {
    std::ostringstream os;
    os << t;
    return os.str();
  };
  CHECK(str(from_vector<float>({1, 2, 3, 4}).reshape({2, 2})) ==
        "tensor([[1., 2.],\n        [3., 4.]], shape=(2, 2), dtype=f32, device=cpu)");
  CHECK(str(from_vector<double>({0.5, -1.25})) ==
        "tensor([ 0.5000, -1.2500], shape=(2,), dtype=f64, device=cpu)");
  CHECK(str(from_vector<int64_t>({3, -10})) == "tensor([  3, -10], shape=(2,), dtype=i64, device=cpu)");
  CHECK(str(scalar_tensor(2.0)) == "tensor(2., shape=(), dtype=f32, device=cpu)");
  CHECK(str(from_vector<bool>({true, false})) ==
        "tensor([ True, False], shape=(2,), dtype=bool, device=cpu)");
  CHECK(str(from_vector<float>({1e-5f, 1.0f})) ==
        "tensor([1.0000e-05, 1.0000e+00], shape=(2,), dtype=f32, device=cpu)");
  CHECK(str(arange(2000, DType::f32)).find("[   0.,    1.,    2., ..., 1997., 1998., 1999.]") !=
        std::string::npos);
  Tensor w = ones({2}).set_requires_grad();
  CHECK(str(w).find("requires_grad=True") != std::string::npos);
  CHECK(str(mul(w, 2.0)).find("grad_fn=<mul>") != std::string::npos);
  CHECK(str(zeros({2, 1, 2})) ==
        "tensor([[[0., 0.]],\n\n        [[0., 0.]]], shape=(2, 1, 2), dtype=f32, device=cpu)");
}

TEST_CASE("item and data_ptr check what they are asked", "[tensor]") {
  Tensor a = from_vector<float>({1, 2});
  CHECK(error_of([&] { a.item<float>(); }) ==
        "item: a tensor with 2 elements (shape (2,)) cannot be converted to a scalar");
  CHECK(error_of([&] { a.data_ptr<double>(); }) ==
        "data_ptr: tensor has dtype f32 but data_ptr<f64> was asked for");
  CHECK(a.data_ptr<float>()[1] == 2.0f);
  CHECK(from_vector<int64_t>({9}).item<double>() == 9.0);
}

TEST_CASE("CUDA absent or present, asking for it is safe", "[tensor][cuda]") {
  CHECK(cuda::build_info().rfind(cuda::compiled_with_cuda() ? "CUDA runtime" : "built without", 0) == 0);
  if (cuda::is_available()) {
    Tensor a = from_vector<float>({1, 2, 3});
    Tensor g = a.to(Device("cuda:0"));
    CHECK(g.device() == Device("cuda:0"));
    CHECK(g.cpu().to_vector<float>() == a.to_vector<float>());
    CHECK(full({1000}, 2.5, Device("cuda:0")).cpu().to_vector<float>() == std::vector<float>(1000, 2.5f));
  } else {
    CHECK(cuda::device_count() == 0);
    CHECK_THROWS_AS(zeros({2}, Device("cuda:0")), Error);
  }
  CHECK(error_of([] { Device("gpu0"); }) ==
        "Device: expected \"cpu\", \"cuda\" or \"cuda:N\", got \"gpu0\"");
  CHECK(Device("cuda:3").index() == 3);
}

namespace {
// This process's resident memory in MiB (Linux).
double resident_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}
}  // namespace

TEST_CASE("a freed block above 64 MiB goes back to the system, not to the cache", "[tensor]") {
#ifdef TANDEM_TEST_SANITIZED
  WARN("the sanitizers' allocators keep freed memory in quarantine; skipped");
#else
  const double before = resident_mib();
  {
    Tensor big = zeros({int64_t{48} << 20});  // 192 MiB, every page written
    CHECK(resident_mib() - before > 150);
  }
  CHECK(resident_mib() - before < 40);
#endif
}

TEST_CASE("creation, conversion and item follow libtorch's rules (torch 1.13's values)",
          "[tensor]") {
  // arange infers its dtype from the kinds of its numbers, as libtorch's Scalars; an integer
  // dtype truncates them first.
  CHECK(arange(5).dtype() == DType::i64);
  CHECK(arange(5.0).dtype() == DType::f32);
  CHECK(arange(0.0, 1.0, 0.25).to_vector<float>() == std::vector<float>{0, 0.25f, 0.5f, 0.75f});
  CHECK(arange(0.5, 3.7, 1, DType::i64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
  CHECK(arange(-2.5, 2.0, 1.5, DType::i64).to_vector<int64_t>() ==
        std::vector<int64_t>{-2, -1, 0, 1});
  CHECK_THROWS_WITH(arange(0.0, 2.5, 0.5, DType::i32), Catch::Contains("step must be nonzero"));
  // uint8_t data is u8 (libtorch's TensorDataContainer); int stays i64.
  CHECK(tensor(std::vector<uint8_t>{1, 2}).dtype() == DType::u8);
  CHECK(tensor({uint8_t{1}, uint8_t{2}}).dtype() == DType::u8);
  CHECK(tensor(std::vector<int>{1, 2}).dtype() == DType::i64);
  // A nonzero f64 too small for f32 is still true.
  CHECK(from_vector<double>({1e-300, 0.0, -5e-320}).to(DType::boolean).to_vector<bool>() ==
        std::vector<bool>{true, false, true});
  CHECK(full({1}, 1e-300, DType::boolean).item<bool>());
  // item<T> refuses a value T cannot hold, as c10's checked conversion; u8 takes -1 (255).
  CHECK_THROWS_WITH(full({}, 3e9).item<int32_t>(), Catch::Contains("without overflow"));
  CHECK_THROWS_WITH(full({}, -1.0).item<uint8_t>(), Catch::Contains("without overflow"));
  CHECK_THROWS_WITH(full({}, 300, DType::i64).item<uint8_t>(), Catch::Contains("without overflow"));
  CHECK_THROWS_WITH(full({}, 1e300, DType::f64).item<float>(), Catch::Contains("without overflow"));
  CHECK(full({}, -1, DType::i64).item<uint8_t>() == 255);
  CHECK(std::isinf(full({}, INFINITY, DType::f64).item<float>()));
  CHECK(full({}, 2147483647, DType::i64).item<int32_t>() == 2147483647);
  // Empty tensors are contiguous whatever their strides, as torch's.
  CHECK(zeros({2, 0}).is_contiguous());
  CHECK(zeros({3, 0, 2}).transpose(0, 2).is_contiguous());
  // requires_grad_(true) on a result that requires grad already does nothing, as torch's.
  Tensor x = ones({2}).requires_grad_();
  Tensor y = mul(x, 2.0);
  CHECK(y.requires_grad_(true).requires_grad());
  CHECK_THROWS_WITH(y.requires_grad_(false), Catch::Contains("leaf tensors"));
  // allclose as torch's isclose: infinities are close to themselves only.
  CHECK(allclose(from_vector<float>({INFINITY, 1}), from_vector<float>({INFINITY, 1})));
  CHECK_FALSE(allclose(from_vector<float>({INFINITY}), from_vector<float>({-INFINITY})));
  CHECK_FALSE(allclose(from_vector<float>({INFINITY}), from_vector<float>({1e30f})));
}
