// The IDX reader: real Fashion-MNIST when installed, and every kind of damaged file.
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "../util.hpp"
#include "tandem/data/idx.hpp"

using namespace tandem;
using tandem::testing::error_of;

namespace {
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem_test_" + name)).string();
}
void write_raw(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}
void write_gz(const std::string& path, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}
std::vector<unsigned char> idx_bytes(int rows, int cols) {
  std::vector<unsigned char> b = {0, 0, 8, 2, 0, 0, 0, static_cast<unsigned char>(rows), 0, 0, 0,
                                  static_cast<unsigned char>(cols)};
  for (int i = 0; i < rows * cols; ++i) b.push_back(static_cast<unsigned char>(i));
  return b;
}
}  // namespace

TEST_CASE("reads plain and gzip IDX files", "[data]") {
  std::string plain = temp_path("plain.idx"), gz = temp_path("packed.idx.gz");
  write_raw(plain, idx_bytes(2, 3));
  write_gz(gz, idx_bytes(2, 3));
  for (const auto& path : {plain, gz}) {
    Tensor t = data::read_idx(path);
    CHECK(t.shape() == Shape{2, 3});
    CHECK(t.dtype() == DType::u8);
    CHECK(t.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  }
}

TEST_CASE("damaged IDX files give one clear error naming the file", "[data]") {
  std::string path = temp_path("bad.idx");
  auto bytes = idx_bytes(2, 3);
  write_raw(path, std::vector<unsigned char>(bytes.begin(), bytes.end() - 2));
  CHECK(error_of([&] { data::read_idx(path); }) ==
        "read_idx: " + path + ": file is truncated: expected 6 bytes of data, got 4");
  auto magic = bytes;
  magic[0] = 7;
  write_raw(path, magic);
  CHECK(error_of([&] { data::read_idx(path); }) == "read_idx: " + path + ": not an IDX file (bad magic number)");
  auto extra = bytes;
  extra.push_back(1);
  write_raw(path, extra);
  CHECK(error_of([&] { data::read_idx(path); }).find("trailing bytes") != std::string::npos);
  // A gzip stream with its middle overwritten.
  std::string gz = temp_path("bad.idx.gz");
  std::vector<unsigned char> big = idx_bytes(100, 100);
  write_gz(gz, big);
  {
    std::fstream f(gz, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    const char junk[16] = {'\x13', '\x37', '\x55', '\x7f', '\x00', '\xff', '\x42', '\x42',
                           '\x13', '\x37', '\x55', '\x7f', '\x00', '\xff', '\x42', '\x42'};
    f.write(junk, sizeof junk);
  }
  std::string msg = error_of([&] { data::read_idx(gz); });
  CHECK(msg.find("read_idx: " + gz) == 0);
  CHECK(error_of([] { data::read_idx("/nonexistent/file.idx"); }) ==
        "read_idx: /nonexistent/file.idx does not exist");
  CHECK(error_of([] { data::load_mnist("/nonexistent", true); }).find("dataset-fashion-mnist") !=
        std::string::npos);
}

TEST_CASE("IDX dims whose product wraps around 2^64 are refused", "[data][errors]") {
  // 10 x 859019674 x 2147418113 = 2^64 + 4: multiplied unchecked it wrapped to 4, and four data
  // bytes made a tensor of that shape whose select(0, 1) read a wild address.
  std::string path = temp_path("wrapping.idx");
  write_raw(path,
            {0, 0, 8, 3, 0, 0, 0, 10, 0x33, 0x33, 0x99, 0x9a, 0x7f, 0xff, 0x00, 0x01, 1, 2, 3, 4});
  CHECK(error_of([&] { data::read_idx(path); }) ==
        "read_idx: " + path + ": more elements than any IDX dataset holds");
}

TEST_CASE("an IDX header's claim costs no memory the file does not hold", "[data][errors]") {
  // 12 bytes announcing 131071 x 131071 bytes (16 GiB, under the element limit). The reader
  // allocated the whole claim before reading; with at most 1 GiB more address space than the
  // process has, that allocation fails (outside the sanitizer builds, whose shadow memory needs
  // an unlimited address space; the fuzz targets check it there, with -malloc_limit_mb).
  const std::vector<unsigned char> header = {0, 0, 8, 2, 0, 1, 0xff, 0xff, 0, 1, 0xff, 0xff};
  std::string plain = temp_path("claim.idx"), gz = temp_path("claim.idx.gz");
  write_raw(plain, header);
  write_gz(gz, header);
  tandem::testing::AddressSpaceLimit limit(size_t{1} << 30);
  for (const auto& path : {plain, gz})
    CHECK(error_of([&] { data::read_idx(path); }) ==
          "read_idx: " + path + ": file is truncated: expected 17179607041 bytes of data, got 0");
  // A real file of several chunks still reads whole: (2, 255, 255), 130050 bytes.
  std::vector<unsigned char> big = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 255, 0, 0, 0, 255};
  for (int i = 0; i < 2 * 255 * 255; ++i) big.push_back(static_cast<unsigned char>(i % 251));
  write_gz(gz, big);
  Tensor t = data::read_idx(gz);
  CHECK(t.shape() == Shape{2, 255, 255});
  CHECK(t.select(0, 1).select(0, 254).to_vector<int64_t>().back() == (2 * 255 * 255 - 1) % 251);
}

TEST_CASE("Fashion-MNIST from Debian's package loads", "[data]") {
  if (!std::filesystem::exists(std::string(data::kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz")) {
    WARN("dataset-fashion-mnist not installed; skipped");
    return;
  }
  auto test = data::load_mnist(data::kFashionMnistDir, false);
  CHECK(test.images.shape() == Shape{10000, 1, 28, 28});
  CHECK(test.labels.shape() == Shape{10000});
  CHECK(max(test.images).item<float>() <= 1.0f);
  CHECK(min(test.labels).item<int64_t>() == 0);
  CHECK(max(test.labels).item<int64_t>() == 9);
}
