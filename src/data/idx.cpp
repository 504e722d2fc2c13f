// IDX reading through zlib (gzread also reads uncompressed files as they are).
#include "tandem/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "tandem/ops.hpp"

namespace tandem::data {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// Reads exactly n bytes or throws, naming the file and what was expected.
void read_exact(gzFile f, void* dst, size_t n, const std::string& path, const char* what) {
  size_t done = 0;
  auto* out = static_cast<unsigned char*>(dst);
  while (done < n) {
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    int got = gzread(f, out + done, chunk);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      TANDEM_THROW(Error, "read_idx: ", path, ": corrupt gzip stream while reading ", what, " (",
                   msg, ")");
    }
    TANDEM_CHECK_T(Error, got > 0, "read_idx: ", path, ": file is truncated: expected ", n,
                   " bytes of ", what, ", got ", done);
    done += static_cast<size_t>(got);
  }
}

// Reads the n data bytes a header announces. The announcement is not trusted with memory: the
// bytes arrive in chunks into a buffer that grows with them (doubling, from 64 KiB), so a file
// that claims gigabytes but holds a few bytes costs a few bytes; a gzip stream's size is only
// known once it is read.
std::vector<unsigned char> read_data(gzFile f, size_t n, const std::string& path) {
  std::vector<unsigned char> data;
  while (data.size() < n) {
    const size_t have = data.size();
    data.resize(std::min(n, std::max<size_t>(2 * have, 64 << 10)));
    unsigned want = static_cast<unsigned>(std::min<size_t>(data.size() - have, 1u << 30));
    int got = gzread(f, data.data() + have, want);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      TANDEM_THROW(Error, "read_idx: ", path, ": corrupt gzip stream while reading data (", msg,
                   ")");
    }
    TANDEM_CHECK_T(Error, got > 0, "read_idx: ", path, ": file is truncated: expected ", n,
                   " bytes of data, got ", have);
    data.resize(have + static_cast<size_t>(got));
  }
  return data;
}

}  // namespace

Tensor read_idx(const std::string& path) {
  TANDEM_CHECK_T(Error, std::filesystem::exists(path), "read_idx: ", path, " does not exist");
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  TANDEM_CHECK_T(Error, f != nullptr, "read_idx: cannot open ", path, ": ", std::strerror(errno));
  unsigned char magic[4];
  read_exact(f.get(), magic, 4, path, "the header");
  TANDEM_CHECK_T(Error, magic[0] == 0 && magic[1] == 0, "read_idx: ", path,
                 ": not an IDX file (bad magic number)");
  TANDEM_CHECK_T(Error, magic[2] == 0x08, "read_idx: ", path, ": element type 0x", std::hex,
                 int(magic[2]), " is not supported (only unsigned bytes, 0x08)");
  const int ndim = magic[3];
  TANDEM_CHECK_T(Error, ndim >= 1 && ndim <= 4, "read_idx: ", path, ": ", ndim,
                 " dims; expected 1 to 4");
  Shape shape;
  constexpr int64_t kMaxElements = int64_t{1} << 34;
  int64_t count = 1;
  for (int d = 0; d < ndim; ++d) {
    unsigned char b[4];
    read_exact(f.get(), b, 4, path, "the dims");
    int64_t size = (int64_t{b[0]} << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
    TANDEM_CHECK_T(Error, size > 0 && size < (int64_t{1} << 31), "read_idx: ", path, ": dim ", d,
                   " has implausible size ", size);
    // Checked before the multiplication, which could otherwise wrap around to a small count.
    TANDEM_CHECK_T(Error, count <= kMaxElements / size, "read_idx: ", path,
                   ": more elements than any IDX dataset holds");
    count *= size;
    shape.push_back(size);
  }
  std::vector<unsigned char> data = read_data(f.get(), static_cast<size_t>(count), path);
  Tensor t = empty(shape, TensorOptions(DType::u8).device(kCPU));  // file contents: host memory
  std::memcpy(t.raw_data(), data.data(), data.size());
  unsigned char extra;
  TANDEM_CHECK_T(Error, gzread(f.get(), &extra, 1) == 0, "read_idx: ", path,
                 ": trailing bytes after the ", count, " elements the header announces");
  return t;
}

MnistSplit load_mnist(const std::string& dir, bool train, DType dtype) {
  TANDEM_CHECK(dtype == DType::f32 || dtype == DType::u8, "load_mnist: images come as f32 or u8, not ",
               dtype);
  TANDEM_CHECK_T(Error, std::filesystem::is_directory(dir), "load_mnist: folder ", dir,
                 " not found. For Fashion-MNIST install Debian's dataset-fashion-mnist package "
                 "(apt-get install dataset-fashion-mnist), or pass the folder holding "
                 "train-images-idx3-ubyte.gz and its siblings");
  std::string prefix = dir + "/" + (train ? "train" : "t10k");
  auto pick = [](const std::string& base) {
    return std::filesystem::exists(base + ".gz") ? base + ".gz" : base;
  };
  std::string image_path = pick(prefix + "-images-idx3-ubyte");
  std::string label_path = pick(prefix + "-labels-idx1-ubyte");
  Tensor images = read_idx(image_path);
  Tensor labels = read_idx(label_path);
  TANDEM_CHECK_T(Error, images.dim() == 3, "load_mnist: ", image_path,
                 " must hold (N, H, W) images, got ", shape_str(images.shape()));
  TANDEM_CHECK_T(Error, labels.dim() == 1 && labels.size(0) == images.size(0), "load_mnist: ",
                 label_path, " holds ", labels.numel(), " labels for ", images.size(0),
                 " images in ", image_path);
  MnistSplit split;
  split.images = dtype == DType::u8 ? images.unsqueeze(1)
                                     : mul(images.to(DType::f32), 1.0 / 255.0).unsqueeze(1).contiguous();
  split.labels = labels.to(DType::i64);
  return split;
}

}  // namespace tandem::data
