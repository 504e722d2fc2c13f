// The safetensors reader and writer: round trips of every dtype, and a damaged file for each
// check the reader makes. Atomic writes keep the previous file when a write fails.
#include <cstring>
#include <filesystem>
#include <fstream>

#include "../util.hpp"

using namespace tandem;
using tandem::testing::error_of;
using tandem::testing::TempDir;

namespace {

// A file of one or more raw header/data parts, as a damaged writer might produce.
std::string raw_file(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string read_error(const std::string& bytes) {
  return error_of([&] { io::from_safetensors(bytes, nullptr, "model.safetensors"); });
}


}  // namespace

TEST_CASE("safetensors round-trips every dtype, empty and 0-dim tensors, metadata", "[io]") {
  nn::StateDict in{
      {"a.f32", randn({3, 4})},
      {"b.f64", randn({2}, DType::f64)},
      {"c.f16", randn({5}).to(DType::f16)},
      {"d.bf16", randn({2, 2}).to(DType::bf16)},
      {"e.i64", arange(6).reshape({2, 3})},
      {"f.i32", arange(4).to(DType::i32)},
      {"g.u8", arange(7).to(DType::u8)},
      {"h.bool", from_vector<bool>({true, false, true})},
      {"i.empty", zeros({0, 3})},
      {"j.scalar", scalar_tensor(2.5)},
      {"k.strided", randn({4, 6}).t()},  // non-contiguous: written in row-major order
  };
  io::Metadata meta_in{{"model", "resnet20"}}, meta_out;
  std::string bytes = io::to_safetensors(in, meta_in);
  CHECK(bytes.size() % 8 == 0);
  nn::StateDict out = io::from_safetensors(bytes, &meta_out);
  CHECK(meta_out == meta_in);
  REQUIRE(out.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    CHECK(out.at(name).dtype() == t.dtype());
    CHECK(out.at(name).shape() == t.shape());
    CHECK(equal(out.at(name), t));
  }
  // The header is the documented JSON: dtype names and offsets as the format specifies.
  CHECK(bytes.find(R"("a.f32":{"data_offsets":[0,48],"dtype":"F32","shape":[3,4]})") !=
        std::string::npos);
  CHECK(bytes.find(R"("d.bf16":{"data_offsets":[)") != std::string::npos);
  CHECK(bytes.find(R"("dtype":"BOOL")") != std::string::npos);
}

TEST_CASE("the safetensors reader refuses damaged files with the reason", "[io][errors]") {
  std::string good = io::to_safetensors({{"w", ones({2, 2})}, {"b", zeros({2})}});
  CHECK(io::from_safetensors(good).size() == 2);

  CHECK_THAT(read_error("abc"), Catch::Contains("model.safetensors: not a valid safetensors file: "
                                                "shorter than the 8-byte header length"));
  std::string huge(8, '\0');
  uint64_t n = 200ull << 20;
  std::memcpy(huge.data(), &n, 8);
  CHECK_THAT(read_error(huge), Catch::Contains("exceeds the limit of 104857600 bytes"));
  CHECK_THAT(read_error(good.substr(0, 20)), Catch::Contains("runs past the end of the file"));
  CHECK_THAT(read_error(good.substr(0, good.size() - 4)),
             Catch::Contains("past the 20 data bytes in the file (truncated?)"));
  CHECK_THAT(read_error(good + "xxxxxxxx"),
             Catch::Contains("the file holds 8 bytes after the last tensor"));
  CHECK_THAT(read_error(raw_file("{not json")), Catch::Contains("header is not valid JSON"));
  CHECK_THAT(read_error(raw_file("[1,2]")), Catch::Contains("header is not a JSON object"));
  const std::string t = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  CHECK_THAT(read_error(raw_file(R"({"w":)" + t + R"(,"w":)" + t + "}", std::string(8, '\0'))),
             Catch::Contains("duplicate tensor name 'w'"));
  CHECK_THAT(read_error(raw_file(R"({"w":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})",
                                 std::string(2, '\0'))),
             Catch::Contains("tensor 'w': unsupported dtype \"F8\""));
  CHECK_THAT(read_error(raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                                 std::string(8, '\0'))),
             Catch::Contains("shape [3] of F32 needs 12 bytes but data_offsets give 8"));
  CHECK_THAT(read_error(raw_file(R"({"w":{"dtype":"F32","shape":[4611686018427387904,8],)"
                                 R"("data_offsets":[0,8]}})",
                                 std::string(8, '\0'))),
             Catch::Contains("overflows"));
  CHECK_THAT(read_error(raw_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})")),
             Catch::Contains("not a non-negative integer"));
  // Overlapping and gapped ranges.
  CHECK_THAT(read_error(raw_file(R"({"a":)" + t + R"(,"b":)" + t + "}", std::string(16, '\0'))),
             Catch::Contains("starts at byte 0, expected 8 (ranges must be contiguous)"));
  CHECK_THAT(read_error(raw_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                                 std::string(4, '\0'))),
             Catch::Contains("tensor 'a' starts at byte 2, expected 0"));
  CHECK_THAT(read_error(raw_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[4,2]}})")),
             Catch::Contains("data_offsets are reversed"));
  CHECK_THAT(read_error(raw_file(R"({"__metadata__":{"k":1}})")),
             Catch::Contains("__metadata__ value of 'k' is not a string"));
  CHECK_THAT(read_error(raw_file(R"({"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})",
                                 "\x07")),
             Catch::Contains("BOOL byte that is neither 0 nor 1"));
}

TEST_CASE("every dim of a safetensors shape is checked whether or not one is zero",
          "[io][errors]") {
  // No bytes to hold, but the strides of (2^32, 0, 2^32) overflowed: the product stopped
  // growing at the 0 and never saw the dim after it.
  CHECK_THAT(read_error(raw_file(R"({"w":{"dtype":"F32","shape":[4294967296,0,4294967296],)"
                                 R"("data_offsets":[0,0]}})")),
             Catch::Contains("tensor 'w': shape [4294967296,0,4294967296] overflows"));
  CHECK_THAT(read_error(raw_file(R"({"w":{"dtype":"U8","shape":[0,9223372036854775808],)"
                                 R"("data_offsets":[0,0]}})")),
             Catch::Contains("overflows"));
  // Zero dims whose other dims fit read as the empty tensors they are.
  nn::StateDict empty = io::from_safetensors(
      raw_file(R"({"w":{"dtype":"F32","shape":[65536,0,65536],"data_offsets":[0,0]}})"));
  CHECK(empty.at("w").shape() == Shape{65536, 0, 65536});
  CHECK(empty.at("w").strides() == Shape{65536, 65536, 1});

  // The same file as a training checkpoint.
  TempDir dir;
  const std::string path = (dir.path / "ckpt.safetensors").string();
  std::ofstream(path, std::ios::binary)
      << raw_file(R"({"__metadata__":{"format":"tandem-checkpoint","version":"1"},)"
                  R"("model.w":{"dtype":"F32","shape":[4294967296,0,4294967296],)"
                  R"("data_offsets":[0,0]}})");
  CHECK_THAT(error_of([&] { io::load_checkpoint(path); }),
             Catch::Contains(path + ": not a valid safetensors file: tensor 'model.w': shape "
                                    "[4294967296,0,4294967296] overflows"));
}

TEST_CASE("the safetensors reader refuses the tensor names the writer refuses", "[io][errors]") {
  CHECK_THAT(error_of([] {
               io::to_safetensors({{"", ones({1})}});
             }),
             Catch::Contains("invalid tensor name ''"));
  CHECK_THAT(read_error(raw_file(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                 std::string(4, '\0'))),
             Catch::Contains("model.safetensors: not a valid safetensors file: a tensor has an "
                             "empty name"));
}

TEST_CASE("atomic writes replace the file whole or not at all", "[io]") {
  TempDir dir;
  const std::string path = (dir.path / "w.safetensors").string();
  io::save_safetensors(path, {{"w", ones({3})}});
  io::save_safetensors(path, {{"w", full({3}, 2.0)}});
  CHECK(io::load_safetensors(path).at("w").to_vector<float>() == std::vector<float>{2, 2, 2});
  // A write that cannot complete (the target is a non-empty folder) leaves the old file and
  // no temp files behind.
  std::filesystem::create_directory(dir.path / "blocked");
  std::ofstream(dir.path / "blocked" / "x") << "x";
  CHECK_THAT(error_of([&] { io::atomic_write((dir.path / "blocked").string(), "new"); }),
             Catch::Contains("rename failed"));
  CHECK_THAT(error_of([&] { io::atomic_write("/nonexistent-dir/w.safetensors", "new"); }),
             Catch::Contains("cannot write /nonexistent-dir/w.safetensors: creating a temp file"));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) {
    (void)entry;
    ++files;
  }
  CHECK(files == 2);  // w.safetensors and blocked/
  CHECK_THAT(error_of([&] { io::load_safetensors((dir.path / "missing").string()); }),
             Catch::Contains("cannot read"));
}

TEST_CASE("training checkpoints round-trip and refuse other files", "[io]") {
  TempDir dir;
  const std::string path = (dir.path / "ckpt.safetensors").string();
  io::TrainingState s;
  s.model = {{"w", randn({2, 2})}};
  s.optimizer = {{"group.0.lr", scalar_tensor(0.1, DType::f64)}};
  s.scheduler = {{"last_step", scalar_tensor(5, DType::i64)}};
  s.step = 1234;
  s.epoch = 3;
  s.batch = 17;
  s.rng_seed = 0xfedcba9876543210ull;  // above INT64_MAX: stored bit for bit
  s.rng_offset = 99;
  s.metadata["model"] = "resnet20";
  io::save_checkpoint(path, s);
  io::TrainingState r = io::load_checkpoint(path);
  CHECK(equal(r.model.at("w"), s.model.at("w")));
  CHECK(r.optimizer.at("group.0.lr").item<double>() == 0.1);
  CHECK(r.scheduler.at("last_step").item<int64_t>() == 5);
  CHECK(r.step == 1234);
  CHECK(r.epoch == 3);
  CHECK(r.batch == 17);
  CHECK(r.rng_seed == s.rng_seed);
  CHECK(r.rng_offset == 99);
  CHECK(r.metadata.at("model") == "resnet20");

  const std::string weights = (dir.path / "weights.safetensors").string();
  io::save_safetensors(weights, {{"w", ones({1})}});
  CHECK_THAT(error_of([&] { io::load_checkpoint(weights); }),
             Catch::Contains("not a tandem training checkpoint"));
}
