#include "nn/checkpoint.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "nn/atomic_file.h"
#include "nn/data.h"

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

const char* kPrefixes[] = {"model.", "optimizer.", "scheduler.", "loader.", "user."};

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

}  // namespace

void save_state_dict(const StateDict& state, const std::string& path) {
  EMBER_CHECK(!path.empty(), "save: empty checkpoint path");
  check_not_directory("save", "checkpoint", path, "model.ckp");
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
  std::vector<unsigned char> header(kMagic, kMagic + 8);
  put<uint32_t>(header, kVersion);
  put<uint32_t>(header, static_cast<uint32_t>(state.size()));
  put<uint64_t>(header, payload.size());
  put<uint64_t>(header, fnv1a64(payload.data(), payload.size()));
  put<uint64_t>(header, 0);

  write_file_atomically(path, "save", [&](std::FILE* f) {
    return std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
           std::fwrite(payload.data(), 1, payload.size(), f) == payload.size();
  });
}

StateDict load_state_dict_file(const std::string& path) {
  check_not_directory("load", "checkpoint", path, "model.ckp");
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
    EMBER_CHECK(code <= static_cast<uint8_t>(DType::Bool), "checkpoint '", path, "': entry '", name,
                "' has unknown dtype code ", int(code));
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
    EMBER_CHECK(nbytes == need, "checkpoint '", path, "': entry '", name, "' holds ", nbytes,
                " bytes of data, its shape ", shape_str(sizes), " and dtype ", dtype, " need ",
                need);
    const unsigned char* data = r.bytes(nbytes, "data");
    EMBER_CHECK(!sd.contains(name), "checkpoint '", path, "': duplicate entry '", name, "'");
    Tensor t = empty(sizes, dtype);
    if (nbytes) std::memcpy(t.raw_data(), data, nbytes);
    sd.insert(std::move(name), t);
  }
  EMBER_CHECK(r.at_end(), "checkpoint '", path, "': trailing bytes after ", count, " entries");
  return sd;
}

// ---------------------------------------------------------------- Checkpoint

Checkpoint& Checkpoint::optimizer(optim::Optimizer& optimizer) {
  EMBER_CHECK(scheduler_ == nullptr || &scheduler_->optimizer() == &optimizer,
              "Checkpoint::optimizer: the attached ", scheduler_ ? scheduler_->name() : "",
              " drives another optimizer than this one");
  optimizer_ = &optimizer;
  return *this;
}

Checkpoint& Checkpoint::scheduler(optim::LRScheduler& scheduler) {
  EMBER_CHECK(optimizer_ != nullptr,
              "Checkpoint::scheduler: attach the scheduler's optimizer "
              "first (optimizer(opt)); a schedule means nothing without it");
  EMBER_CHECK(&scheduler.optimizer() == optimizer_, "Checkpoint::scheduler: this ",
              scheduler.name(), " was built for another optimizer than the checkpoint's");
  scheduler_ = &scheduler;
  return *this;
}

Checkpoint& Checkpoint::loader(DataLoader& loader) {
  loader_ = &loader;
  return *this;
}

Tensor Checkpoint::integer_entry(long double value, const std::string& name) {
  EMBER_CHECK(
      value >= static_cast<long double>(INT64_MIN) && value <= static_cast<long double>(INT64_MAX),
      "Checkpoint::set: '", name, "' does not fit an int64");
  Tensor t = empty({}, kInt64);
  *t.data_ptr<int64_t>() = static_cast<int64_t>(value);
  return t;
}

Tensor Checkpoint::float_entry(double value) {
  Tensor t = empty({}, kFloat64);
  *t.data_ptr<double>() = value;
  return t;
}

Checkpoint& Checkpoint::set(const std::string& name, const Tensor& value) {
  EMBER_CHECK(value.defined(), "Checkpoint::set: '", name, "' is an undefined tensor");
  Tensor host;
  {
    NoGradGuard no_grad;
    host = value.detach().to(kCPU).contiguous().clone();  // a snapshot, not an alias
  }
  return set_entry(name, host);
}

Checkpoint& Checkpoint::set_entry(const std::string& name, Tensor t) {
  EMBER_CHECK(!name.empty(), "Checkpoint::set: the name is empty");
  StateDict next;
  for (const auto& [key, old] : entries_)
    if (key != name) next.insert(key, old);
  next.insert(name, std::move(t));
  entries_ = std::move(next);
  return *this;
}

const Tensor& Checkpoint::entry(const std::string& name) const {
  const Tensor* t = entries_.find(name);
  if (t == nullptr) {
    std::string known;
    for (const std::string& k : entries_.keys()) known += (known.empty() ? "'" : ", '") + k + "'";
    EMBER_FAIL("Checkpoint::get: no entry '", name, "' (entries: ", known.empty() ? "none" : known,
               ")");
  }
  return *t;
}

template <>
Tensor Checkpoint::get<Tensor>(const std::string& name) const {
  return entry(name);
}

template <>
double Checkpoint::get<double>(const std::string& name) const {
  const Tensor& t = entry(name);
  EMBER_CHECK(t.numel() == 1, "Checkpoint::get: '", name, "' is a tensor of shape ",
              shape_str(t.sizes()), ", not a scalar (get<Tensor>)");
  return t.item();
}

template <>
int64_t Checkpoint::get<int64_t>(const std::string& name) const {
  const Tensor& t = entry(name);
  EMBER_CHECK(t.numel() == 1 && t.dtype() == kInt64, "Checkpoint::get: '", name, "' is a ",
              t.dtype(), " tensor of shape ", shape_str(t.sizes()),
              ", not an integer (ask for get<double> or get<Tensor>)");
  return *t.data_ptr<int64_t>();
}

void Checkpoint::save(const std::string& path) const {
  EMBER_CHECK(scheduler_ == nullptr || &scheduler_->optimizer() == optimizer_,
              "save: the checkpoint's scheduler was built for another optimizer");
  StateDict all = with_prefix(model_->state_dict(), "model.");
  if (optimizer_)
    for (const auto& [name, t] : optimizer_->state_dict()) all.insert("optimizer." + name, t);
  if (scheduler_)
    for (const auto& [name, t] : scheduler_->state_dict()) all.insert("scheduler." + name, t);
  if (loader_)
    for (const auto& [name, t] : loader_->state_dict()) all.insert("loader." + name, t);
  for (const auto& [name, t] : entries_) all.insert("user." + name, t);
  all.insert("rng.state", rng_state());
  save_state_dict(all, path);
}

void Checkpoint::load(const std::string& path) {
  const StateDict all = load_state_dict_file(path);
  for (const auto& [name, t] : all) {
    bool known = name == "rng.state";
    for (const char* prefix : kPrefixes) known |= starts_with(name, prefix);
    EMBER_CHECK(known, "checkpoint '", path, "': unexpected entry '", name, "'");
  }
  // An object asked for whose state the file does not hold: say so plainly
  // rather than list every key it misses.
  auto require = [&](bool attached, const char* prefix, const char* what, const char* how) {
    if (!attached) return;
    bool present = false;
    for (const auto& [name, t] : all) present |= starts_with(name, prefix);
    EMBER_CHECK(present, "checkpoint '", path, "' holds no ", what, " state (it was saved ",
                "without one); ", how);
  };
  require(optimizer_ != nullptr, "optimizer.", "optimizer",
          "load it with nn::load(model, path), or save the optimizer with it "
          "(nn::save(model, optimizer, path))");
  require(scheduler_ != nullptr, "scheduler.", "learning-rate scheduler",
          "attach the scheduler when saving (Checkpoint::scheduler)");
  require(loader_ != nullptr, "loader.", "data loader",
          "attach the loader when saving (Checkpoint::loader)");
  const StateDict model_sd = strip_prefix(all, "model.");
  const StateDict optim_sd = strip_prefix(all, "optimizer.");
  const StateDict sched_sd = strip_prefix(all, "scheduler.");
  const StateDict loader_sd = strip_prefix(all, "loader.");
  // Everything is validated before anything changes.
  with_context(path, "model", [&] { model_->check_state_dict(model_sd); });
  if (optimizer_) with_context(path, "optimizer", [&] { optimizer_->check_state_dict(optim_sd); });
  if (scheduler_) {
    EMBER_CHECK(&scheduler_->optimizer() == optimizer_, "checkpoint '", path,
                "': the scheduler was built for another optimizer than the checkpoint's");
    with_context(path, "scheduler", [&] { scheduler_->check_state_dict(sched_sd); });
  }
  if (loader_) with_context(path, "loader", [&] { loader_->check_state_dict(loader_sd); });
  check_rng(all, path);
  model_->load_state_dict(model_sd);
  if (optimizer_) optimizer_->load_state_dict(optim_sd);
  if (scheduler_) scheduler_->load_state_dict(sched_sd);
  if (loader_) loader_->load_state_dict(loader_sd);
  entries_ = strip_prefix(all, "user.");
  restore_rng(all);
}

// ---------------------------------------------------------------- the common cases

void save(const Module& model, const optim::Optimizer& optimizer, const std::string& path) {
  // Checkpoint only reads what it saves.
  Checkpoint(const_cast<Module&>(model))
      .optimizer(const_cast<optim::Optimizer&>(optimizer))
      .save(path);
}

void save(const Module& model, const std::string& path) {
  Checkpoint(const_cast<Module&>(model)).save(path);
}

void load(Module& model, optim::Optimizer& optimizer, const std::string& path) {
  Checkpoint(model).optimizer(optimizer).load(path);
}

void load(Module& model, const std::string& path) {
  Checkpoint(model).load(path);
}

}  // namespace ember::nn
