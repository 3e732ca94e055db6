// Checkpoints: a model's state, and as asked its optimizer's, learning-rate
// scheduler's and data loader's, entries of your own and the default random
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
// Entry names: "model.<state_dict key>", "optimizer.<state_dict key>",
// "scheduler.<state_dict key>", "loader.<key>" (nn::DataLoader::state_dict),
// "user.<name>" (entries of your own: epoch, step, any scalar or tensor), and
// "rng.state" (int64 [seed, offset] of ember::default_generator()).
//
// save writes <path>.tmp, flushes and fsyncs it, then renames it over <path>: a
// crash mid-save leaves the previous checkpoint intact. load reads and checks
// the whole file (magic, version, size, checksum, every entry against the model,
// optimizer, scheduler and loader) before changing anything; any problem throws
// ember::Error naming the file and what does not match.
//
// Everything a run needs to continue bit for bit, in one file:
//
//   nn::Checkpoint ckp(*model);
//   ckp.optimizer(opt).scheduler(sched).loader(loader);
//   ckp.set("epoch", epoch).set("step", step).set("best_loss", best);
//   ckp.save("run.ckp");                       // anywhere, even mid-epoch
//   ...
//   ckp.load("run.ckp");                       // restores all of them
//   int64_t epoch = ckp.get<int64_t>("epoch");
//   for (const nn::Example& batch : loader)    // continues after the saved batch
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/state_dict.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace ember::nn {

class DataLoader;

// What a save writes and a load restores: a model, and optionally its optimizer,
// learning-rate scheduler, data loader and entries of your own. Holds references
// to the objects attached, which must outlive it.
class Checkpoint {
 public:
  explicit Checkpoint(Module& model) : model_(&model) {}

  Checkpoint& optimizer(optim::Optimizer& optimizer);
  // The scheduler must drive the attached optimizer (attach that first).
  Checkpoint& scheduler(optim::LRScheduler& scheduler);
  Checkpoint& loader(DataLoader& loader);

  // Entries of your own, saved as "user.<name>": integers as int64 scalars,
  // floating-point values as float64 scalars, tensors as they are (copied to the
  // host). Setting a name again replaces its value.
  template <std::integral T>
  Checkpoint& set(const std::string& name, T value) {
    return set_entry(name, integer_entry(static_cast<long double>(value), name));
  }
  template <std::floating_point T>
  Checkpoint& set(const std::string& name, T value) {
    return set_entry(name, float_entry(static_cast<double>(value)));
  }
  Checkpoint& set(const std::string& name, const Tensor& value);

  bool contains(const std::string& name) const { return entries_.contains(name); }
  // The entry `name` as T: an integer type (the entry must be an int64 scalar), a
  // floating-point type (any one-element entry) or Tensor (on the host). Throws
  // naming the entry and the names there are when absent, or the entry's dtype
  // and shape when it is not a T.
  template <typename T>
  T get(const std::string& name) const;
  std::vector<std::string> names() const { return entries_.keys(); }

  // Writes every attached object and entry, and the generator's position.
  void save(const std::string& path) const;
  // Checks the whole file against every attached object, then restores them, the
  // entries (replacing those set before) and the generator. An attached object
  // whose state the file lacks is an error naming it (a model-only checkpoint
  // loaded with an optimizer, say).
  void load(const std::string& path);

 private:
  Checkpoint& set_entry(const std::string& name, Tensor t);
  static Tensor integer_entry(long double value, const std::string& name);
  static Tensor float_entry(double value);
  const Tensor& entry(const std::string& name) const;

  Module* model_;
  optim::Optimizer* optimizer_ = nullptr;
  optim::LRScheduler* scheduler_ = nullptr;
  DataLoader* loader_ = nullptr;
  StateDict entries_;
};

template <>
Tensor Checkpoint::get<Tensor>(const std::string& name) const;
template <>
double Checkpoint::get<double>(const std::string& name) const;
template <>
int64_t Checkpoint::get<int64_t>(const std::string& name) const;
template <typename T>
T Checkpoint::get(const std::string& name) const {
  static_assert(std::is_arithmetic_v<T>,
                "Checkpoint::get<T>: T is an integer type, a "
                "floating-point type or Tensor");
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(get<double>(name));
  else
    return static_cast<T>(get<int64_t>(name));
}

void save(const Module& model, const optim::Optimizer& optimizer, const std::string& path);
void save(const Module& model, const std::string& path);
// The common cases of Checkpoint: model (and optimizer) and the generator.
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
