#include "src/base/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "src/base/io.h"

namespace ddplab::safetensors {

namespace {

using nlohmann::json;

constexpr uint64_t kFnvOffset = 1469598103934665603ULL, kFnvPrime = 1099511628211ULL;
constexpr int kMaxDepth = 16;     // a standard header nests 3 deep: {name: {"shape": [...]}}
constexpr size_t kMaxShown = 80;  // names and values quoted in a message are cut to this many bytes

uint64_t fnv1a(uint64_t h, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

// Every dtype of the safetensors format, with its size in bits (F4/F6 pack elements into bits).
struct DType {
  const char* name;
  uint64_t bits;
};
constexpr DType kDTypes[] = {{"BOOL", 8},    {"U8", 8},   {"I8", 8},      {"F8_E5M2", 8}, {"F8_E4M3", 8},
                             {"F8_E8M0", 8}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"I16", 16},
                             {"U16", 16},    {"F16", 16}, {"BF16", 16},   {"I32", 32},    {"U32", 32},
                             {"F32", 32},    {"F64", 64}, {"I64", 64},    {"U64", 64},    {"C64", 64}};

const DType* find_dtype(const std::string& name) {
  for (const DType& d : kDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string dtype_names() {
  std::string out;
  for (const DType& d : kDTypes) out += std::string(out.empty() ? "" : ",") + d.name;
  return out;
}

// Cut to about `max` bytes without splitting a UTF-8 sequence.
std::string cut(std::string s, size_t max = kMaxShown) {
  if (s.size() <= max) return s;
  size_t n = max - 3;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n) + "...";
}

// A JSON value as it reads in a one-line message: escaped, cut.
std::string shown(const json& v) { return cut(v.dump(-1, ' ', false, json::error_handler_t::replace)); }
std::string quoted(const std::string& name) { return shown(json(name)); }

// One line whatever the file holds: control characters become '?'.
std::string one_line(std::string s) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return s;
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a fifo";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// A non-negative JSON integer (nlohmann keeps those without '-' as unsigned; "-0" is a signed 0).
bool non_negative_integer(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

struct Entry {
  std::string name;
  const DType* dtype = nullptr;
  std::vector<int64_t> shape;
  uint64_t numel = 0, begin = 0, end = 0;
};

class File {
 public:
  File(const std::string& path, int fd, uint64_t size, uint64_t base) : path_(path), fd_(fd), size_(size), base_(base) {}
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() { ::close(fd_); }
  uint64_t size() const { return size_; }
  // Exactly `n` bytes at `offset`, which the caller has checked lie within size().
  void read(void* dst, uint64_t offset, uint64_t n) const {
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, p, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(base_ + offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw error(fmt::format("read failed at byte {}: {}", offset, std::strerror(errno)));
      if (got == 0) throw error(fmt::format("the file shrank while it was read: no bytes at {} of {}", offset, size_));
      p += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
  }
  FormatError error(const std::string& what) const { return FormatError(one_line(path_ + ": " + what)); }

 private:
  std::string path_;
  int fd_;
  uint64_t size_, base_;  // the bytes read: [base_, base_ + size_) of the file
};

}  // namespace

std::string checksum(const std::string& bytes) {
  return fmt::format("{:016x}", fnv1a(kFnvOffset, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()));
}

std::string save(const std::string& path, const TensorMap& tensors) {
  static_assert(sizeof(float) == 4, "float32");
  std::string data;
  nlohmann::ordered_json header;
  for (const auto& [name, t] : tensors) {
    const size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));  // x86-64: LE
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  nlohmann::ordered_json full;
  full["__metadata__"] = {{"format", "pt"}, {"checksum_fnv1a64", checksum(data)}};
  for (auto& [k, v] : header.items()) full[k] = v;
  std::string text = full.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // safetensors pads the header to 8 bytes
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += text;
  out += data;
  return write_file_atomic(path, out);
}

TensorMap load(const std::string& path, LoadInfo* info, const std::string& f64_prefix, Range range) {
  const auto fail = [&](const std::string& what) { return FormatError(one_line(path + ": " + what)); };
  // Only a regular file has a size to bound every read by: a directory, /dev/zero or a fifo is refused
  // before it is opened (opening a fifo would wait for a writer), and again after, in case it was swapped.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw fail(fmt::format("cannot open: {}", std::strerror(errno)));
  const auto regular = [&](const struct stat& s) {
    if (!S_ISREG(s.st_mode))
      throw fail(fmt::format("is {}; only a regular file is read as safetensors", file_kind(s.st_mode)));
  };
  regular(st);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw fail(fmt::format("cannot open: {}", std::strerror(errno)));
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw fail(fmt::format("cannot stat: {}", std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) ::close(fd);
  regular(st);
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (range.length != UINT64_MAX && (range.offset > file_size || range.length > file_size - range.offset)) {
    ::close(fd);
    throw fail(fmt::format("truncated: bytes {} to {} asked for, the file has {}", range.offset,
                           range.offset + range.length, file_size));
  }
  const File file(path, fd, range.length == UINT64_MAX ? file_size : range.length,
                  range.length == UINT64_MAX ? 0 : range.offset);
  const uint64_t size = file.size();

  if (size < 8) throw fail(fmt::format("truncated: {} bytes, less than the 8-byte header length", size));
  unsigned char len[8];
  file.read(len, 0, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > size - 8) throw fail(fmt::format("truncated: header says {} bytes, the file has {} after it", n, size - 8));
  if (n > kMaxHeaderBytes)
    throw fail(fmt::format("header length {} exceeds the limit of {} bytes", n, kMaxHeaderBytes));
  std::string text(static_cast<size_t>(n), '\0');
  file.read(text.data(), 8, n);
  const uint64_t data_begin = 8 + n, data_size = size - data_begin;

  json header;
  try {
    header = json::parse(text, [&](int depth, json::parse_event_t event, json&) {
      if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
          depth >= kMaxDepth) {
        throw fail(fmt::format("corrupt header: JSON nested deeper than {} levels", kMaxDepth));
      }
      return true;
    });
  } catch (const json::exception& e) {
    throw fail(std::string("corrupt header: ") + cut(e.what(), 300));
  }
  text = std::string();
  if (!header.is_object())
    throw fail(fmt::format("corrupt header: a JSON {}, not an object of tensors", header.type_name()));

  LoadInfo found;
  std::vector<Entry> entries;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") {  // safetensors: a free-form map of strings to strings
      if (!t.is_object())
        throw fail(fmt::format("__metadata__ must be an object of strings (got a JSON {})", t.type_name()));
      for (const auto& [k, v] : t.items()) {
        if (!v.is_string()) throw fail(fmt::format("__metadata__ {} must be a string (got {})", quoted(k), shown(v)));
        found.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    Entry e;
    e.name = name;
    const std::string what = "tensor " + quoted(name);
    if (!t.is_object())
      throw fail(fmt::format("{}: must be an object with dtype, shape, data_offsets (got {})", what, shown(t)));
    const auto dtype = t.find("dtype"), shape = t.find("shape"), offsets = t.find("data_offsets");
    if (dtype == t.end() || shape == t.end() || offsets == t.end()) {
      throw fail(fmt::format("{}: needs dtype, shape and data_offsets (got {})", what, shown(t)));
    }
    if (!dtype->is_string() || !(e.dtype = find_dtype(dtype->get<std::string>()))) {
      throw fail(fmt::format("{}: unknown dtype {} (safetensors has {})", what, shown(*dtype), dtype_names()));
    }
    if (!shape->is_array())
      throw fail(fmt::format("{}: shape must be a list of non-negative integers (got {})", what, shown(*shape)));
    bool zero = false;
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : *shape) {
      uint64_t v = 0;
      if (!non_negative_integer(d, &v)) {
        throw fail(fmt::format("{}: shape entries must be non-negative integers (got {} in {})", what, shown(d),
                               shown(*shape)));
      }
      if (v > static_cast<uint64_t>(INT64_MAX)) {
        throw fail(fmt::format("{}: shape entry {} exceeds 2^63-1", what, v));
      }
      e.shape.push_back(static_cast<int64_t>(v));
      zero = zero || v == 0;
      overflow = overflow || __builtin_mul_overflow(numel, v, &numel);
    }
    uint64_t bits = 0;
    if (zero) numel = 0;
    if ((!zero && overflow) || __builtin_mul_overflow(numel, e.dtype->bits, &bits)) {
      throw fail(fmt::format("{}: shape {} of {} needs more than 2^64 bits", what, shown(*shape), e.dtype->name));
    }
    if (bits % 8 != 0)
      throw fail(fmt::format("{}: shape {} of {} is not a whole number of bytes", what, shown(*shape), e.dtype->name));
    e.numel = numel;
    if (!offsets->is_array() || offsets->size() != 2 || !non_negative_integer((*offsets)[0], &e.begin) ||
        !non_negative_integer((*offsets)[1], &e.end)) {
      throw fail(fmt::format("{}: data_offsets must be [begin, end], two non-negative integers (got {})", what,
                             shown(*offsets)));
    }
    if (e.end < e.begin) throw fail(fmt::format("{}: data_offsets {} end before they begin", what, shown(*offsets)));
    if (e.end > data_size) {
      throw fail(
          fmt::format("{}: data_offsets {} go past the end of the data ({} bytes)", what, shown(*offsets), data_size));
    }
    if (e.end - e.begin != bits / 8) {
      throw fail(fmt::format("{}: data_offsets {} hold {} bytes, its shape {} of {} needs {}", what, shown(*offsets),
                             e.end - e.begin, shown(*shape), e.dtype->name, bits / 8));
    }
    entries.push_back(std::move(e));
  }
  // safetensors' rule: the tensors tile the data exactly, in offset order.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < pos) {
      throw fail(fmt::format("tensor {}: data_offsets [{}, {}] overlap tensor {}'s [{}, {}]", quoted(e.name), e.begin,
                             e.end, quoted(prev->name), prev->begin, prev->end));
    }
    if (e.begin > pos)
      throw fail(fmt::format("data bytes [{}, {}) belong to no tensor (safetensors allows no gaps)", pos, e.begin));
    pos = e.end;
    prev = &e;
  }
  if (pos != data_size) {
    throw fail(
        fmt::format("the last {} of the {} data bytes belong to no tensor (safetensors allows no trailing bytes)",
                    data_size - pos, data_size));
  }
  for (const Entry& e : entries) {
    const bool f64 =
        info && !f64_prefix.empty() && e.name.rfind(f64_prefix, 0) == 0 && std::strcmp(e.dtype->name, "F64") == 0;
    if (std::strcmp(e.dtype->name, "F32") != 0 && !f64) {
      throw fail(fmt::format("tensor {} has dtype {}; only F32 tensors are read{}", quoted(e.name), e.dtype->name,
                             f64_prefix.empty() ? "" : " (and F64 ones named " + f64_prefix + "...)"));
    }
  }
  const auto sum = found.metadata.find("checksum_fnv1a64");

  // Every byte read now lies within the file; every allocation is a tensor's, within the data's size.
  TensorMap out;
  uint64_t h = kFnvOffset;
  for (const Entry& e : entries) {
    Tensor t;
    Tensor64 t64;
    const bool f64 = std::strcmp(e.dtype->name, "F64") == 0;
    void* dst = nullptr;
    if (f64) {
      t64.shape = e.shape;
      t64.data.resize(static_cast<size_t>(e.numel));
      dst = t64.data.data();
    } else {
      t.shape = e.shape;
      t.data.resize(static_cast<size_t>(e.numel));
      dst = t.data.data();
    }
    if (e.numel > 0) file.read(dst, data_begin + e.begin, e.end - e.begin);  // x86-64: LE
    if (sum != found.metadata.end()) {  // in offset order: the tensors tile the data, so this hashes all of it
      h = fnv1a(h, static_cast<const unsigned char*>(dst), static_cast<size_t>(e.end - e.begin));
    }
    if (f64) {
      found.f64[e.name] = std::move(t64);
    } else {
      out[e.name] = std::move(t);
    }
  }
  if (sum != found.metadata.end()) {
    if (fmt::format("{:016x}", h) != sum->second)
      throw fail("checksum mismatch: the data was changed or cut after it was written");
    found.checksum_verified = true;
  }
  if (info) *info = std::move(found);
  return out;
}

}  // namespace ddplab::safetensors
