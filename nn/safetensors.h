// safetensors files in and out: the format PyTorch, JAX and the Hugging Face
// tools share, so a model trained in PyTorch loads into ember by name and an
// ember model is read by anything else. See docs/safetensors.md.
//
// A file is an 8-byte little-endian header size N, N bytes of a JSON object
// {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]}, ...,
// "__metadata__": {"key": "value"}}, then the tensors' bytes. The reader enforces
// every rule of the format, each error naming the file and the field: N at most
// 100,000,000 and the header a JSON object; each entry's dtype known and its
// END - BEGIN = numel x item size; the entries' byte ranges contiguous from 0, no
// hole and no overlap; the file exactly 8 + N + the last END bytes; no name twice;
// `__metadata__` an object of strings.
//
// dtypes: F32, F64, BF16, I64 and BOOL read and write as ember's float32,
// float64, bfloat16, int64 and bool. F16 (ember has no float16 tensors) is
// converted on load: to float32 by default, which is exact (every float16 value
// is a float32), or to bfloat16 on request (rounded to nearest even: 3 fewer
// mantissa bits, a wider range); into a module it converts to the parameter's
// dtype. Any other dtype (I32, U8, F8_E4M3, ...) is refused by name.
//
// Writes are atomic as checkpoints are (nn/checkpoint.h): a temporary file,
// fsync, rename. The writer lays tensors out as the reference implementation
// does (by dtype, widest first, then by name; the header compact, padded with
// spaces to a multiple of 8 bytes), so each tensor's data is aligned.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "core/state_dict.h"
#include "nn/module.h"

namespace ember::nn {

// The `__metadata__` of a file: string keys to string values.
using SafetensorsMetadata = std::map<std::string, std::string>;

// What a file's float16 tensors become (ember has no float16).
enum class Float16As {
  Float32,  // exact; the default
  BFloat16  // rounded to nearest even
};

// Where and how read_safetensors puts the tensors.
struct SafetensorsReadOptions {
  // kCPU: each tensor views the file's memory mapping (no copy; the mapping is
  // private, so writing to a tensor changes memory, not the file), unless its
  // data is misaligned for its dtype or it is converted (F16), when it is copied.
  // A CUDA device: each tensor is copied to the device through pinned host
  // memory in chunks, two buffers in flight.
  Device device = kCPU;
  Float16As float16 = Float16As::Float32;
};

// A file's tensors, in the order of the header, and its metadata.
struct SafetensorsFile {
  StateDict tensors;
  SafetensorsMetadata metadata;
};

// The plain reader: every tensor of the file by name. Throws ember::Error naming
// the file and the rule broken.
SafetensorsFile read_safetensors(const std::string& path,
                                 const SafetensorsReadOptions& options = {});

// The same rules on bytes already in memory (`path` only names them in errors);
// the tensors are CPU copies. The fuzz target's entry point.
SafetensorsFile parse_safetensors(const unsigned char* bytes, size_t size, const std::string& path,
                                  Float16As float16 = Float16As::Float32);

// Writes `tensors` (any devices; each is copied to the host as it is written)
// with `metadata`, atomically. Names must be unique, non-empty and not
// "__metadata__"; float64 is written as F64.
void save_safetensors(const StateDict& tensors, const std::string& path,
                      const SafetensorsMetadata& metadata = {});
// Writes module.state_dict(): parameters and buffers by their dotted names.
void save_safetensors(const Module& module, const std::string& path,
                      const SafetensorsMetadata& metadata = {});

// How load_safetensors maps the file's names to the module's.
struct SafetensorsLoadOptions {
  // Removed from the front of every file name that starts with it (e.g.
  // "model." or "module." from a wrapped PyTorch model).
  std::string strip_prefix;
  // Applied after strip_prefix: the module's name for a file name, or
  // std::nullopt to leave that entry out.
  std::function<std::optional<std::string>(const std::string&)> rename;
  // As Module::load_state_dict: every module entry must be in the file and
  // every (mapped) file entry in the module. Off: only the names both have load.
  bool strict = true;
};

// Loads a file into `module` by name: every entry is checked first (names, shapes,
// dtypes; F16 entries are converted to the parameter's dtype, which must then be
// float32 or bfloat16), and any mismatch throws listing every one and changing
// nothing, as nn::load does. CPU parameters are filled from the mapping, CUDA
// parameters through pinned memory.
void load_safetensors(Module& module, const std::string& path,
                      const SafetensorsLoadOptions& options = {});

}  // namespace ember::nn
