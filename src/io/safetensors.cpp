#include "tandem/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "tandem/ops/creation.hpp"

namespace tandem::io {

namespace {

using json = nlohmann::json;

static_assert(sizeof(uint64_t) == 8);

bool little_endian() {
  const uint16_t probe = 1;
  unsigned char first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

// The inverse of safetensors_dtype, over every DType.
bool dtype_from_name(const std::string& name, DType* out) {
  for (int t = 0; t <= static_cast<int>(DType::boolean); ++t)
    if (name == safetensors_dtype(static_cast<DType>(t))) {
      *out = static_cast<DType>(t);
      return true;
    }
  return false;
}

std::string errno_str() { return std::strerror(errno); }

}  // namespace

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
  }
  TANDEM_THROW(ValueError, "safetensors: unsupported dtype");
}

std::string to_safetensors(const nn::StateDict& tensors, const Metadata& metadata) {
  TANDEM_CHECK(little_endian(), "safetensors: big-endian hosts are not supported");
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TANDEM_CHECK(name != "__metadata__" && !name.empty(), "safetensors: invalid tensor name '",
                 name, "'");
    TANDEM_CHECK(t.defined(), "safetensors: tensor '", name, "' is undefined");
    Tensor cpu = t.detach().to(kCPU).contiguous();
    uint64_t nbytes = static_cast<uint64_t>(cpu.numel()) * cpu.element_size();
    header[name] = {{"dtype", safetensors_dtype(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    data.push_back(cpu);
  }
  std::string head;
  try {
    head = header.dump();
  } catch (const json::type_error&) {  // the one dump() throws: a string that is not UTF-8
    TANDEM_THROW(ValueError, "safetensors: tensor names and metadata must be valid UTF-8");
  }
  head.resize((head.size() + 7) / 8 * 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = head.size();
  std::memcpy(out.data(), &n, 8);
  out.reserve(8 + head.size() + offset);
  out += head;
  for (const Tensor& t : data)
    out.append(static_cast<const char*>(t.raw_data()), t.numel() * t.element_size());
  return out;
}

nn::StateDict from_safetensors(const std::string& bytes, Metadata* metadata,
                               const std::string& source) {
  TANDEM_CHECK(little_endian(), "safetensors: big-endian hosts are not supported");
  auto fail = [&](const std::string& what) {
    TANDEM_THROW(IoError, source, ": not a valid safetensors file: ", what);
  };
  if (bytes.size() < 8) fail("shorter than the 8-byte header length");
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > kMaxHeaderBytes)
    fail("header length " + std::to_string(header_len) + " exceeds the limit of " +
         std::to_string(kMaxHeaderBytes) + " bytes");
  if (header_len > bytes.size() - 8)
    fail("header length " + std::to_string(header_len) + " runs past the end of the file (" +
         std::to_string(bytes.size()) + " bytes)");
  const uint64_t data_size = bytes.size() - 8 - header_len;

  // Parse with a callback that refuses duplicate tensor names (JSON parsers keep the last one).
  std::set<std::string> seen;
  std::string duplicate;
  json header;
  try {
    header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(header_len),
                         [&](int depth, json::parse_event_t event, json& parsed) {
                           if (depth == 1 && event == json::parse_event_t::key &&
                               !seen.insert(parsed.get<std::string>()).second)
                             duplicate = parsed.get<std::string>();
                           return true;
                         });
  } catch (const json::exception& e) {
    fail(std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!duplicate.empty()) fail("duplicate tensor name '" + duplicate + "'");
  if (!header.is_object()) fail("header is not a JSON object");

  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail("__metadata__ value of '" + m.key() + "' is not a string");
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    // The writer's rule for names (to_safetensors): what one writes, the other reads.
    if (name.empty()) fail("a tensor has an empty name");
    auto bad = [&](const std::string& what) { fail("tensor '" + name + "': " + what); };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      bad("needs dtype, shape and data_offsets");
    Entry e{name, DType::f32, {}, 0, 0};
    if (!v["dtype"].is_string() || !dtype_from_name(v["dtype"].get<std::string>(), &e.dtype))
      bad("unsupported dtype " + v["dtype"].dump());
    const json& offs = v["data_offsets"];
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() ||
        !offs[1].is_number_unsigned())
      bad("data_offsets must be two non-negative integers");
    e.begin = offs[0].get<uint64_t>();
    e.end = offs[1].get<uint64_t>();
    if (e.begin > e.end) bad("data_offsets are reversed");
    if (!v["shape"].is_array()) bad("shape is not an array");
    // Every dim counts, a zero among them or not: the strides of a (2^32, 0, 2^32) tensor are
    // products of its other dims and must fit in int64 although it holds no element.
    uint64_t extent = static_cast<uint64_t>(element_size(e.dtype));  // bytes, zero dims as 1
    bool holds_none = false;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad("shape holds a value that is not a non-negative integer");
      uint64_t size = d.get<uint64_t>();
      if (__builtin_mul_overflow(extent, std::max<uint64_t>(size, 1), &extent) ||
          extent > static_cast<uint64_t>(INT64_MAX))
        bad("shape " + v["shape"].dump() + " overflows");
      holds_none = holds_none || size == 0;
      e.shape.push_back(static_cast<int64_t>(size));
    }
    const uint64_t bytes_needed = holds_none ? 0 : extent;
    if (bytes_needed != e.end - e.begin)
      bad("shape " + v["shape"].dump() + " of " + v["dtype"].get<std::string>() + " needs " +
          std::to_string(bytes_needed) + " bytes but data_offsets give " +
          std::to_string(e.end - e.begin));
    entries.push_back(std::move(e));
  }
  // The byte ranges tile [0, data_size) exactly: contiguous, in bounds, nothing after the end.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  uint64_t expected = 0;
  for (const auto& e : entries) {
    if (e.begin != expected)
      fail("tensor '" + e.name + "' starts at byte " + std::to_string(e.begin) + ", expected " +
           std::to_string(expected) + " (ranges must be contiguous)");
    if (e.end > data_size)
      fail("tensor '" + e.name + "' ends at byte " + std::to_string(e.end) + " past the " +
           std::to_string(data_size) + " data bytes in the file (truncated?)");
    expected = e.end;
  }
  if (expected != data_size)
    fail("the file holds " + std::to_string(data_size - expected) + " bytes after the last tensor");

  nn::StateDict out;
  const char* base = bytes.data() + 8 + header_len;
  for (const auto& e : entries) {
    Tensor t = empty(e.shape, TensorOptions(e.dtype).device(kCPU));  // read into host memory
    if (e.end > e.begin) std::memcpy(t.raw_data(), base + e.begin, e.end - e.begin);
    if (e.dtype == DType::boolean)
      for (int64_t i = 0; i < t.numel(); ++i)
        if (static_cast<const unsigned char*>(t.raw_data())[i] > 1)
          fail("tensor '" + e.name + "': BOOL byte that is neither 0 nor 1");
    out.emplace(e.name, std::move(t));
  }
  return out;
}

void atomic_write(const std::string& path, const std::string& bytes) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (dir.empty()) dir = "/";
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  TANDEM_CHECK_T(IoError, !base.empty(), "atomic_write: '", path, "' names a folder, not a file");
  std::string tmp = dir + "/." + base + ".tmp.XXXXXX";
  int fd = mkstemp(tmp.data());
  TANDEM_CHECK_T(IoError, fd >= 0, "cannot write ", path, ": creating a temp file in ", dir,
                 " failed: ", errno_str());
  auto abandon = [&](const std::string& what) {
    std::string err = errno_str();
    ::close(fd);
    ::unlink(tmp.c_str());
    TANDEM_THROW(IoError, "cannot write ", path, ": ", what, " failed: ", err);
  };
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) abandon("writing " + tmp);
    done += static_cast<size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) abandon("chmod");
  if (::fsync(fd) != 0) abandon("fsync");
  if (::close(fd) != 0) {
    std::string err = errno_str();
    ::unlink(tmp.c_str());
    TANDEM_THROW(IoError, "cannot write ", path, ": close failed: ", err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = errno_str();
    ::unlink(tmp.c_str());
    TANDEM_THROW(IoError, "cannot write ", path, ": rename failed: ", err);
  }
  // Make the rename itself durable.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_file(const std::string& path) {
  struct stat st {};
  TANDEM_CHECK_T(IoError, ::stat(path.c_str(), &st) == 0, "cannot read ", path, ": ", errno_str());
  TANDEM_CHECK_T(IoError, !S_ISDIR(st.st_mode), "cannot read ", path, ": it is a directory");
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK_T(IoError, in.good(), "cannot read ", path, ": ", errno_str());
  try {
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    TANDEM_CHECK_T(IoError, !in.bad(), "cannot read ", path, ": read error");
    return bytes;
  } catch (const std::ios_base::failure& e) {  // the stream buffer's own read errors
    TANDEM_THROW(IoError, "cannot read ", path, ": ", e.what());
  }
}

}  // namespace tandem::io
