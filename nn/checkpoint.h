// Checkpoints: a model's state, an optimizer's state and the default random
// generator's position, in one file, saved atomically and loaded all-or-nothing.
//
// File format, version 1, little-endian:
//   header, 40 bytes:
//     char[8]  magic "EMBERCKP"
//     u32      format version (1)
//     u32      number of entries
//     u64      payload size in bytes (everything after the header)
//     u64      FNV-1a 64-bit hash of the payload
//     u64      reserved, 0
//   payload: the entries, one after another:
//     u32      name length, then the name (no terminator)
//     u8       dtype (0 float32, 1 float64, 2 bfloat16, 3 int64)
//     u8       number of dims, then u16 0
//     i64[n]   sizes
//     u64      data size in bytes, then the data (row-major, contiguous)
// Entry names: "model.<state_dict key>", "optimizer.<state_dict key>", "rng.state"
// (int64 [seed, offset] of ember::default_generator()).
//
// save writes <path>.tmp, flushes and fsyncs it, then renames it over <path>: a
// crash mid-save leaves the previous checkpoint intact. load reads and checks
// the whole file (magic, version, size, checksum, every entry against the model
// and optimizer) before changing anything; any problem throws ember::Error
// naming the file and what does not match.
#pragma once

#include <string>

#include "core/state_dict.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace ember::nn {

void save(const Module& model, const optim::Optimizer& optimizer, const std::string& path);
void save(const Module& model, const std::string& path);
// Restores model, optimizer and the default generator.
void load(Module& model, optim::Optimizer& optimizer, const std::string& path);
void load(Module& model, const std::string& path);

// The file layer: any StateDict to and from the format above. Loaded tensors are
// on the CPU.
void save_state_dict(const StateDict& state, const std::string& path);
StateDict load_state_dict_file(const std::string& path);
// The reader behind load_state_dict_file, on bytes already in memory; `path`
// only names them in errors. Any malformed input throws ember::Error.
StateDict parse_state_dict(const unsigned char* bytes, size_t size, const std::string& path);

}  // namespace ember::nn
