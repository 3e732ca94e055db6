#include "nn/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"

namespace ember::nn {

static_assert(std::endian::native == std::endian::little,
              "checkpoint: the file format is little-endian and written with memcpy");

namespace {

constexpr char kMagic[8] = {'E', 'M', 'B', 'E', 'R', 'C', 'K', 'P'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 40;

uint64_t fnv1a64(const unsigned char* p, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

template <typename T>
void put(std::vector<unsigned char>& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

uint8_t dtype_code(DType t) {
  return static_cast<uint8_t>(t);
}

// Reads the payload with bounds checks; every failure names the file.
class Reader {
 public:
  Reader(const unsigned char* p, size_t n, const std::string& path) : p_(p), n_(n), path_(path) {}
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const unsigned char* bytes(size_t n, const char* what) {
    need(n, what);
    const unsigned char* at = p_ + pos_;
    pos_ += n;
    return at;
  }
  bool at_end() const { return pos_ == n_; }

 private:
  void need(size_t n, const char* what) {
    EMBER_CHECK(n <= n_ - pos_, "checkpoint '", path_, "': corrupt entry (", what, " runs past ",
                "the end of the payload at byte ", pos_, ")");
  }
  const unsigned char* p_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& path_;
};

StateDict with_prefix(const StateDict& sd, const std::string& prefix) {
  StateDict out;
  for (const auto& [name, t] : sd) out.insert(prefix + name, t);
  return out;
}

// The entries under `prefix`, with the prefix removed.
StateDict strip_prefix(const StateDict& sd, const std::string& prefix) {
  StateDict out;
  for (const auto& [name, t] : sd)
    if (name.compare(0, prefix.size(), prefix) == 0) out.insert(name.substr(prefix.size()), t);
  return out;
}

Tensor rng_state() {
  Tensor t = empty({2}, kInt64);
  int64_t* p = t.data_ptr<int64_t>();
  p[0] = static_cast<int64_t>(default_generator().seed());
  p[1] = static_cast<int64_t>(default_generator().offset());
  return t;
}

void check_rng(const StateDict& sd, const std::string& path) {
  const Tensor* rng = sd.find("rng.state");
  EMBER_CHECK(rng != nullptr, "checkpoint '", path, "': missing key 'rng.state'");
  EMBER_CHECK(rng->dtype() == kInt64 && rng->sizes() == Shape{2}, "checkpoint '", path,
              "': 'rng.state' must be int64 of shape [2], got ", rng->dtype(), " ",
              shape_str(rng->sizes()));
}

void restore_rng(const StateDict& sd) {
  const int64_t* p = sd.at("rng.state").data_ptr<int64_t>();
  default_generator().manual_seed(static_cast<uint64_t>(p[0]));
  default_generator().set_offset(static_cast<uint64_t>(p[1]));
}

// Prefixes the error of a failed check with the file's name.
template <typename F>
void with_context(const std::string& path, const char* what, F&& check) {
  try {
    check();
  } catch (const Error& e) {
    EMBER_FAIL("checkpoint '", path, "': ", what, ": ", e.what());
  }
}

}  // namespace

void save_state_dict(const StateDict& state, const std::string& path) {
  EMBER_CHECK(!path.empty(), "save: empty checkpoint path");
  EMBER_CHECK(state.size() <= UINT32_MAX, "save: too many entries (", state.size(), ")");
  std::vector<unsigned char> payload;
  for (const auto& [name, t] : state) {
    EMBER_CHECK(t.defined(), "save: entry '", name, "' is an undefined tensor");
    EMBER_CHECK(t.dim() <= 255, "save: entry '", name, "' has too many dims");
    Tensor host = t.detach().to(kCPU).contiguous();
    put<uint32_t>(payload, static_cast<uint32_t>(name.size()));
    payload.insert(payload.end(), name.begin(), name.end());
    put<uint8_t>(payload, dtype_code(host.dtype()));
    put<uint8_t>(payload, static_cast<uint8_t>(host.dim()));
    put<uint16_t>(payload, 0);
    for (int64_t s : host.sizes()) put<int64_t>(payload, s);
    put<uint64_t>(payload, host.nbytes());
    const auto* data = static_cast<const unsigned char*>(host.raw_data());
    payload.insert(payload.end(), data, data + host.nbytes());
  }
  std::vector<unsigned char> header;
  header.insert(header.end(), kMagic, kMagic + 8);
  put<uint32_t>(header, kVersion);
  put<uint32_t>(header, static_cast<uint32_t>(state.size()));
  put<uint64_t>(header, payload.size());
  put<uint64_t>(header, fnv1a64(payload.data(), payload.size()));
  put<uint64_t>(header, 0);

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  EMBER_CHECK(f != nullptr, "save: cannot open '", tmp, "' for writing: ", std::strerror(errno));
  const bool written = std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
                       std::fwrite(payload.data(), 1, payload.size(), f) == payload.size() &&
                       std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    EMBER_FAIL("save: writing '", tmp, "' failed: ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    std::remove(tmp.c_str());
    EMBER_FAIL("save: cannot rename '", tmp, "' to '", path, "': ", std::strerror(rename_err));
  }
  // Make the rename itself durable.
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

StateDict load_state_dict_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "checkpoint '", path, "': cannot open: ", std::strerror(errno));
  std::vector<unsigned char> file((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  return parse_state_dict(file.data(), file.size(), path);
}

StateDict parse_state_dict(const unsigned char* bytes, size_t size, const std::string& path) {
  struct View {
    const unsigned char* p;
    size_t n;
    const unsigned char* data() const { return p; }
    size_t size() const { return n; }
  } file{bytes, size};
  EMBER_CHECK(file.size() >= kHeaderBytes, "checkpoint '", path, "': truncated (", file.size(),
              " bytes, shorter than the ", kHeaderBytes, "-byte header)");
  EMBER_CHECK(std::memcmp(file.data(), kMagic, 8) == 0, "checkpoint '", path,
              "': bad magic (not an ember checkpoint; expected \"EMBERCKP\")");
  Reader header(file.data() + 8, kHeaderBytes - 8, path);
  const auto version = header.get<uint32_t>("version");
  const auto count = header.get<uint32_t>("entry count");
  const auto payload_bytes = header.get<uint64_t>("payload size");
  const auto checksum = header.get<uint64_t>("checksum");
  EMBER_CHECK(version == kVersion, "checkpoint '", path, "': unsupported format version ", version,
              " (this build reads version ", kVersion, ")");
  const size_t have = file.size() - kHeaderBytes;
  EMBER_CHECK(payload_bytes == have, "checkpoint '", path,
              "': ", have < payload_bytes ? "truncated" : "has trailing bytes",
              " (header promises ", payload_bytes, " payload bytes, file has ", have, ")");
  const unsigned char* payload = file.data() + kHeaderBytes;
  const uint64_t actual = fnv1a64(payload, have);
  EMBER_CHECK(actual == checksum, "checkpoint '", path, "': checksum mismatch (header says ",
              std::hex, checksum, ", payload hashes to ", actual, "); the file is corrupted");

  StateDict sd;
  Reader r(payload, have, path);
  for (uint32_t e = 0; e < count; ++e) {
    const auto name_len = r.get<uint32_t>("name length");
    const unsigned char* name_bytes = r.bytes(name_len, "name");
    std::string name(reinterpret_cast<const char*>(name_bytes), name_len);
    const auto code = r.get<uint8_t>("dtype");
    EMBER_CHECK(code <= static_cast<uint8_t>(DType::Bool), "checkpoint '", path, "': entry '",
                name, "' has unknown dtype code ", int(code));
    const auto ndim = r.get<uint8_t>("dims");
    r.get<uint16_t>("padding");
    Shape sizes;
    for (int d = 0; d < ndim; ++d) {
      sizes.push_back(r.get<int64_t>("sizes"));
      EMBER_CHECK(sizes.back() >= 0, "checkpoint '", path, "': entry '", name,
                  "' has a negative size");
    }
    const DType dtype = static_cast<DType>(code);
    const auto nbytes = r.get<uint64_t>("data size");
    uint64_t need = 0;
    with_context(path, name.c_str(), [&] { check_sizes(sizes, "entry shape"); });
    EMBER_CHECK(!__builtin_mul_overflow(static_cast<uint64_t>(numel_of(sizes)),
                                        uint64_t{element_size(dtype)}, &need),
                "checkpoint '", path, "': entry '", name, "' has shape ", shape_str(sizes),
                " whose size overflows");
    EMBER_CHECK(nbytes == need,
                "checkpoint '", path, "': entry '", name, "' holds ", nbytes,
                " bytes of data, its shape ", shape_str(sizes), " and dtype ", dtype, " need ", need);
    const unsigned char* data = r.bytes(nbytes, "data");
    EMBER_CHECK(!sd.contains(name), "checkpoint '", path, "': duplicate entry '", name, "'");
    Tensor t = empty(sizes, dtype);
    if (nbytes) std::memcpy(t.raw_data(), data, nbytes);
    sd.insert(std::move(name), t);
  }
  EMBER_CHECK(r.at_end(), "checkpoint '", path, "': trailing bytes after ", count, " entries");
  return sd;
}

void save(const Module& model, const optim::Optimizer& optimizer, const std::string& path) {
  StateDict all = with_prefix(model.state_dict(), "model.");
  for (const auto& [name, t] : optimizer.state_dict()) all.insert("optimizer." + name, t);
  all.insert("rng.state", rng_state());
  save_state_dict(all, path);
}

void save(const Module& model, const std::string& path) {
  StateDict all = with_prefix(model.state_dict(), "model.");
  all.insert("rng.state", rng_state());
  save_state_dict(all, path);
}

void load(Module& model, optim::Optimizer& optimizer, const std::string& path) {
  const StateDict all = load_state_dict_file(path);
  const StateDict model_sd = strip_prefix(all, "model.");
  const StateDict optim_sd = strip_prefix(all, "optimizer.");
  for (const auto& [name, t] : all)
    EMBER_CHECK(
        name.rfind("model.", 0) == 0 || name.rfind("optimizer.", 0) == 0 || name == "rng.state",
        "checkpoint '", path, "': unexpected entry '", name, "'");
  // Everything is validated before anything changes.
  with_context(path, "model", [&] { model.check_state_dict(model_sd); });
  with_context(path, "optimizer", [&] { optimizer.check_state_dict(optim_sd); });
  check_rng(all, path);
  model.load_state_dict(model_sd);
  optimizer.load_state_dict(optim_sd);
  restore_rng(all);
}

void load(Module& model, const std::string& path) {
  const StateDict all = load_state_dict_file(path);
  const StateDict model_sd = strip_prefix(all, "model.");
  with_context(path, "model", [&] { model.check_state_dict(model_sd); });
  check_rng(all, path);
  model.load_state_dict(model_sd);
  restore_rng(all);
}

}  // namespace ember::nn
