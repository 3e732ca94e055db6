#include "nn/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/device_services.h"
#include "core/ops.h"
#include "nn/atomic_file.h"
#include "nn/json.h"

namespace ember::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors: the format is little-endian and read with memcpy");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr size_t kChunkBytes = size_t{8} << 20;  // one pinned staging buffer

// The file's dtypes ember reads. F16 has no ember dtype: it is converted.
enum class FileDType { F64, I64, F32, BF16, F16, BOOL };

struct DTypeName {
  const char* name;
  FileDType file;
  size_t item;
};
constexpr DTypeName kDTypes[] = {{"F64", FileDType::F64, 8}, {"I64", FileDType::I64, 8},
                                 {"F32", FileDType::F32, 4}, {"BF16", FileDType::BF16, 2},
                                 {"F16", FileDType::F16, 2}, {"BOOL", FileDType::BOOL, 1}};
// The format's other dtypes, refused by name.
constexpr const char* kRefused[] = {"I8",  "U8",      "I16",     "U16",     "I32",
                                    "U32", "U64",     "F8_E5M2", "F8_E4M3", "F8_E8M0",
                                    "F4",  "F6_E2M3", "F6_E3M2", "C64"};

const DTypeName& info(FileDType t) {
  for (const DTypeName& d : kDTypes)
    if (d.file == t) return d;
  EMBER_FAIL("safetensors: unknown dtype");
}

DType ember_dtype(FileDType t, Float16As f16) {
  switch (t) {
    case FileDType::F64:
      return kFloat64;
    case FileDType::I64:
      return kInt64;
    case FileDType::F32:
      return kFloat32;
    case FileDType::BF16:
      return kBFloat16;
    case FileDType::F16:
      return f16 == Float16As::Float32 ? kFloat32 : kBFloat16;
    case FileDType::BOOL:
      return kBool;
  }
  return kFloat32;
}

// The file's name for an ember dtype; the reference writer orders tensors by
// this dtype's place in its list, widest first (I64, F64, F32, BF16, BOOL).
const char* file_dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "F32";
    case DType::Float64:
      return "F64";
    case DType::BFloat16:
      return "BF16";
    case DType::Int64:
      return "I64";
    case DType::Bool:
      return "BOOL";
  }
  return "?";
}
int write_rank(DType t) {
  switch (t) {
    case DType::Int64:
      return 0;
    case DType::Float64:
      return 1;
    case DType::Float32:
      return 2;
    case DType::BFloat16:
      return 3;
    case DType::Bool:
      return 4;
  }
  return 5;
}

struct Entry {
  std::string name;
  FileDType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::vector<Entry> entries;  // in the header's order
  SafetensorsMetadata metadata;
  uint64_t data_start = 0;  // 8 + N
};

// "safetensors '<path>': " before every message.
template <typename... Parts>
[[noreturn]] void fail(const std::string& path, const Parts&... parts) {
  EMBER_FAIL("safetensors '", path, "': ", parts...);
}

const json::Value* field(const json::Value& obj, std::string_view key) {
  const json::Value* found = nullptr;
  for (const json::Member& m : obj.members)
    if (m.key == key) found = &m.value;
  return found;
}

Entry parse_entry(const json::Member& m, const std::string& path) {
  Entry e;
  e.name = m.key;
  const std::string where = "tensor '" + m.key + "'";
  if (!m.value.is_object())
    fail(path, where, " must be a JSON object, got a ", json::kind_name(m.value.kind));
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    int count = 0;
    for (const json::Member& f : m.value.members) count += f.key == key;
    if (count == 0) fail(path, where, " has no '", key, "'");
    if (count > 1) fail(path, where, " has '", key, "' twice");
  }
  const json::Value& dtype = *field(m.value, "dtype");
  if (!dtype.is_string())
    fail(path, where, " 'dtype' must be a string, got a ", json::kind_name(dtype.kind));
  const DTypeName* known = nullptr;
  for (const DTypeName& d : kDTypes)
    if (dtype.text == d.name) known = &d;
  if (!known) {
    for (const char* r : kRefused)
      if (dtype.text == r)
        fail(path, where, " 'dtype' ", r,
             " is not supported (ember reads F32, F64, BF16, F16, I64 and BOOL)");
    fail(path, where, " 'dtype' \"", dtype.text, "\" is not a safetensors dtype");
  }
  e.dtype = known->file;

  const json::Value& shape = *field(m.value, "shape");
  if (!shape.is_array())
    fail(path, where, " 'shape' must be an array, got a ", json::kind_name(shape.kind));
  uint64_t numel = 1;
  bool overflow = false;
  for (const json::Value& s : shape.items) {
    const uint64_t n =
        json::to_uint64(s, "safetensors '" + path + "': " + where + " 'shape' entry");
    if (n > static_cast<uint64_t>(INT64_MAX))
      fail(path, where, " 'shape' entry ", n, " does not fit int64");
    overflow |= __builtin_mul_overflow(numel, n, &numel);
    e.shape.push_back(static_cast<int64_t>(n));
  }
  uint64_t need = 0;
  if (overflow || __builtin_mul_overflow(numel, uint64_t{known->item}, &need) ||
      numel > static_cast<uint64_t>(INT64_MAX))
    fail(path, where, " 'shape' ", shape_str(e.shape), " has more bytes than 64 bits count");

  const json::Value& offsets = *field(m.value, "data_offsets");
  if (!offsets.is_array() || offsets.items.size() != 2)
    fail(path, where, " 'data_offsets' must be an array [BEGIN, END]");
  const std::string what = "safetensors '" + path + "': " + where + " 'data_offsets'";
  e.begin = json::to_uint64(offsets.items[0], what + " BEGIN");
  e.end = json::to_uint64(offsets.items[1], what + " END");
  if (e.end < e.begin)
    fail(path, where, " 'data_offsets' [", e.begin, ", ", e.end, "] end before they begin");
  if (e.end - e.begin != need)
    fail(path, where, " 'data_offsets' [", e.begin, ", ", e.end, "] hold ", e.end - e.begin,
         " bytes; its 'shape' ", shape_str(e.shape), " and 'dtype' ", known->name, " need ", need);
  return e;
}

Header parse_header(const unsigned char* bytes, size_t size, const std::string& path) {
  if (size < 8) fail(path, "truncated: ", size, " bytes, shorter than the 8-byte header size");
  uint64_t n = 0;
  std::memcpy(&n, bytes, 8);
  if (n > kMaxHeaderBytes)
    fail(path, "header size ", n, " is over the format's limit of ", kMaxHeaderBytes, " bytes");
  if (n > size - 8)
    fail(path, "truncated: the header size says ", n, " header bytes, the file has ", size - 8,
         " after the header size");
  const std::string_view text(reinterpret_cast<const char*>(bytes + 8), n);
  const json::Value root = json::parse(text, "safetensors '" + path + "': header");
  if (!root.is_object())
    fail(path, "the header must be a JSON object, got a ", json::kind_name(root.kind));

  Header h;
  h.data_start = 8 + n;
  std::map<std::string_view, int> seen;
  for (const json::Member& m : root.members) {
    if (seen[m.key]++) {
      if (m.key == "__metadata__") fail(path, "'__metadata__' appears twice in the header");
      fail(path, "duplicate tensor name '", m.key, "' in the header");
    }
    if (m.key == "__metadata__") {
      if (!m.value.is_object())
        fail(path, "'__metadata__' must be an object of strings, got a ",
             json::kind_name(m.value.kind));
      for (const json::Member& kv : m.value.members) {
        if (!kv.value.is_string())
          fail(path, "'__metadata__' value of '", kv.key, "' must be a string, got a ",
               json::kind_name(kv.value.kind));
        if (!h.metadata.emplace(kv.key, kv.value.text).second)
          fail(path, "'__metadata__' has the key '", kv.key, "' twice");
      }
      continue;
    }
    h.entries.push_back(parse_entry(m, path));
  }

  // The byte ranges must tile [0, last END): sorted by BEGIN, each starts where
  // the previous ended.
  std::vector<const Entry*> order;
  for (const Entry& e : h.entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    if (e->begin < at)
      fail(path, "tensor '", e->name, "' 'data_offsets' [", e->begin, ", ", e->end,
           "] overlap tensor '", prev->name, "' [", prev->begin, ", ", prev->end, "]");
    if (e->begin > at)
      fail(path, "tensor '", e->name, "' 'data_offsets' [", e->begin, ", ", e->end,
           "] leave a hole: bytes [", at, ", ", e->begin, ") belong to no tensor");
    at = e->end;
    prev = e;
  }
  const uint64_t data_bytes = size - h.data_start;
  if (data_bytes != at)
    fail(path, data_bytes < at ? "truncated" : "trailing bytes", ": the 'data_offsets' end at ", at,
         ", the file has ", data_bytes, " data bytes (8 + ", n, " + ", at, " = ", h.data_start + at,
         " bytes expected, ", size, " found)");
  return h;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// `count` elements of file dtype `src` at `from`, as ember dtype `dst` at `to`.
void convert(void* to, DType dst, const unsigned char* from, FileDType src, size_t count) {
  if (count == 0) return;
  if (src != FileDType::F16) {
    std::memcpy(to, from, count * info(src).item);
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, from + 2 * i, 2);
    const float f = half_to_float(h);
    if (dst == kFloat32)
      static_cast<float*>(to)[i] = f;
    else
      static_cast<uint16_t*>(to)[i] = BFloat16::from_float(f);
  }
}

// Copies `count` elements to the contiguous CUDA tensor `dst` through two pinned
// buffers, converting on the way; the copies are queued on the device's current
// stream, the buffers reused once their previous copy is done.
void upload(const Tensor& dst, const unsigned char* from, FileDType src, size_t count,
            PinnedStaging (&staging)[2], int& turn) {
  const size_t in_item = info(src).item, out_item = element_size(dst.dtype());
  const size_t per_chunk = kChunkBytes / out_item;
  const Device device = dst.device();
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  for (size_t done = 0; done < count; done += per_chunk) {
    const size_t n = std::min(per_chunk, count - done);
    PinnedStaging& buf = staging[turn];
    turn ^= 1;
    convert(buf.acquire(n * out_item, device), dst.dtype(), from + done * in_item, src, n);
    buf.copy_to_device(out + done * out_item, n * out_item, device);
  }
  dst.bump_version();
}

// A read-only file mapped privately (copy-on-write): tensors may be written in
// memory, never through to the file. Unmapped when the last tensor viewing it dies.
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Mapping(const std::string& path, const char* op) {
    check_not_directory(op, "safetensors", path, "model.safetensors");
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, "cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      fail(path, "cannot stat: ", std::strerror(err));
    }
    size = static_cast<size_t>(st.st_size);
    if (size > 0) {
      addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      const int err = errno;
      ::close(fd);
      if (addr == MAP_FAILED) {
        addr = nullptr;
        fail(path, "cannot map ", size, " bytes: ", std::strerror(err));
      }
    } else {
      ::close(fd);
    }
  }
  ~Mapping() {
    if (addr) ::munmap(addr, size);
  }
  const unsigned char* bytes() const { return static_cast<const unsigned char*>(addr); }
};

const unsigned char* data_of(const Header& h, const unsigned char* file, const Entry& e) {
  return file + h.data_start + e.begin;
}

// A CPU tensor viewing `data` (owned by `owner`) without a copy.
Tensor view_of(unsigned char* data, const Shape& shape, DType dtype,
               const std::shared_ptr<const void>& owner) {
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->storage = std::make_shared<Storage>(
      data, static_cast<size_t>(numel_of(shape)) * element_size(dtype), kCPU, owner);
  return Tensor(std::move(impl));
}

// The tensor of entry `e` as `dtype` on the CPU: a view of the mapping when
// `owner` is given, the data aligned and no conversion needed; a copy otherwise.
Tensor host_tensor(const Header& h, const unsigned char* file, const Entry& e, DType dtype,
                   const std::shared_ptr<const void>& owner) {
  const unsigned char* data = data_of(h, file, e);
  const bool aligned = reinterpret_cast<uintptr_t>(data) % element_size(dtype) == 0;
  if (owner && e.dtype != FileDType::F16 && aligned && e.end > e.begin)
    return view_of(const_cast<unsigned char*>(data), e.shape, dtype, owner);
  Tensor t = empty(e.shape, dtype);
  convert(t.raw_data(), dtype, data, e.dtype, static_cast<size_t>(numel_of(e.shape)));
  return t;
}

std::string join_names(const std::string& a, const std::string& b) {
  return "'" + a + "' and '" + b + "'";
}

}  // namespace

SafetensorsFile parse_safetensors(const unsigned char* bytes, size_t size, const std::string& path,
                                  Float16As float16) {
  const Header h = parse_header(bytes, size, path);
  SafetensorsFile out;
  out.metadata = h.metadata;
  for (const Entry& e : h.entries)
    out.tensors.insert(e.name, host_tensor(h, bytes, e, ember_dtype(e.dtype, float16), nullptr));
  return out;
}

SafetensorsFile read_safetensors(const std::string& path, const SafetensorsReadOptions& options) {
  check_device(options.device);
  EMBER_CHECK(options.device.is_cpu() || options.device.is_cuda(), "read_safetensors: device ",
              options.device, " is neither the CPU nor a CUDA device");
  auto mapping = std::make_shared<const Mapping>(path, "read_safetensors");
  const Header h = parse_header(mapping->bytes(), mapping->size, path);
  SafetensorsFile out;
  out.metadata = h.metadata;
  if (options.device.is_cpu()) {
    for (const Entry& e : h.entries)
      out.tensors.insert(e.name, host_tensor(h, mapping->bytes(), e,
                                             ember_dtype(e.dtype, options.float16), mapping));
    return out;
  }
  PinnedStaging staging[2];
  int turn = 0;
  for (const Entry& e : h.entries) {
    Tensor t =
        empty(e.shape, TensorOptions(ember_dtype(e.dtype, options.float16)).device(options.device));
    upload(t, data_of(h, mapping->bytes(), e), e.dtype, static_cast<size_t>(t.numel()), staging,
           turn);
    out.tensors.insert(e.name, t);
  }
  return out;  // the staging buffers wait for their last copies as they die
}

void save_safetensors(const StateDict& tensors, const std::string& path,
                      const SafetensorsMetadata& metadata) {
  EMBER_CHECK(!path.empty(), "save_safetensors: empty path");
  check_not_directory("save_safetensors", "safetensors", path, "model.safetensors");
  std::vector<std::pair<std::string, Tensor>> items;
  for (const auto& [name, t] : tensors) {
    EMBER_CHECK(!name.empty(), "save_safetensors: a tensor has an empty name");
    EMBER_CHECK(name != "__metadata__",
                "save_safetensors: '__metadata__' is the format's metadata key, not a tensor name");
    EMBER_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    Tensor host;
    {
      NoGradGuard no_grad;
      host = t.detach().to(kCPU).contiguous();
    }
    items.emplace_back(name, host);
  }
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    const int ra = write_rank(a.second.dtype()), rb = write_rank(b.second.dtype());
    return ra != rb ? ra < rb : a.first < b.first;
  });
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + json::quote(k) + ":" + json::quote(v);
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : items) {
    if (header.size() > 1) header += ",";
    header += json::quote(name) + ":{\"dtype\":\"" + file_dtype_name(t.dtype()) + "\",\"shape\":[";
    for (int64_t d = 0; d < t.dim(); ++d) header += (d ? "," : "") + std::to_string(t.size(d));
    header += "],\"data_offsets\":[" + std::to_string(offset) + ",";
    offset += t.nbytes();
    header += std::to_string(offset) + "]}";
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  EMBER_CHECK(header.size() <= kMaxHeaderBytes, "save_safetensors: the header would take ",
              header.size(), " bytes, over the format's limit of ", kMaxHeaderBytes);
  const uint64_t n = header.size();
  write_file_atomically(path, "save_safetensors", [&](std::FILE* f) {
    bool ok = std::fwrite(&n, 1, 8, f) == 8 && std::fwrite(header.data(), 1, n, f) == n;
    for (const auto& [name, t] : items)
      ok = ok && (t.nbytes() == 0 || std::fwrite(t.raw_data(), 1, t.nbytes(), f) == t.nbytes());
    return ok;
  });
}

void save_safetensors(const Module& module, const std::string& path,
                      const SafetensorsMetadata& metadata) {
  save_safetensors(module.state_dict(), path, metadata);
}

void load_safetensors(Module& module, const std::string& path,
                      const SafetensorsLoadOptions& options) {
  auto mapping = std::make_shared<const Mapping>(path, "load_safetensors");
  const Header h = parse_header(mapping->bytes(), mapping->size, path);
  const StateDict mine = module.state_dict();

  // The file's entries under the module's names, each as the dtype it loads as.
  StateDict source;
  std::map<std::string, const Entry*> mapped_from;
  for (const Entry& e : h.entries) {
    std::string name = e.name;
    if (!options.strip_prefix.empty() && name.rfind(options.strip_prefix, 0) == 0)
      name.erase(0, options.strip_prefix.size());
    if (options.rename) {
      std::optional<std::string> renamed = options.rename(name);
      if (!renamed) continue;
      name = std::move(*renamed);
    }
    if (!options.strict && !mine.contains(name)) continue;
    auto [it, fresh] = mapped_from.emplace(name, &e);
    if (!fresh)
      fail(path, "tensors ", join_names(it->second->name, e.name), " both map to '", name, "'");
    DType dtype = ember_dtype(e.dtype, Float16As::Float32);
    if (const Tensor* target = mine.find(name);
        target && e.dtype == FileDType::F16 &&
        (target->dtype() == kFloat32 || target->dtype() == kBFloat16))
      dtype = target->dtype();
    source.insert(name, host_tensor(h, mapping->bytes(), e, dtype, mapping));
  }
  try {
    module.check_state_dict(source, options.strict);
  } catch (const Error& err) {
    fail(path, err.what());
  }

  NoGradGuard no_grad;
  PinnedStaging staging[2];
  int turn = 0;
  for (const auto& [name, t] : mine) {
    const Tensor* src = source.find(name);
    if (!src) continue;
    Tensor dst = t;
    const Entry* e = mapped_from.at(name);
    if (dst.is_cuda() && dst.is_contiguous())
      upload(dst, data_of(h, mapping->bytes(), *e), e->dtype, static_cast<size_t>(dst.numel()),
             staging, turn);
    else
      dst.copy_(*src);
  }
}

}  // namespace ember::nn
