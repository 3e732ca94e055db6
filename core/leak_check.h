// Leak diagnostics for training loops. StepLeakCheck is a scope around one step
// (or an epoch): at its end it compares the live allocations of the caching
// allocators with those at its start and names what survived, grouped by
// allocation site (core/alloc_site.h) and tensor shape, and every tensor made in
// the scope that still holds an autograd graph. LeakTracker, fed one report per
// step, names what grows on every step and by how much per step.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember {

enum class LeakMode {
  warn,    // print the report to stderr when something leaked
  raise,   // throw ember::Error carrying the report when something leaked
  record,  // say nothing; the caller reads the report (tests)
};

// Net growth of one allocation site and shape over a scope: what was allocated
// at its end and not at its start, less what was freed (blocks churned at the
// same site and shape, like gradients re-made each step, cancel out).
struct LeakSite {
  std::string site;   // "model.fc1.forward / linear"
  std::string shape;  // "[64, 128]", or "-" for a block no tensor views
  Device device;
  int64_t count = 0;            // net new blocks
  int64_t bytes = 0;            // net new bytes asked for (tensor bytes)
  int64_t allocated_bytes = 0;  // net new bytes as memory_allocated counts them (rounded)
};

// A tensor made inside the scope that outlived it while holding a graph.
struct RetainedGraph {
  std::string site;  // where the tensor was made
  std::string shape;
  Device device;
  std::string grad_fn;      // the node it holds ("AddBackward")
  size_t nodes = 0;         // graph nodes it keeps alive
  size_t nodes_before = 0;  // of those, made before the scope began: the graph spans steps
  size_t saved_activation_bytes = 0;  // saved-for-backward activations still alive through it
  size_t saved_leaf_bytes = 0;        // saved weights/inputs (alive anyway)
  // Leaking (not just kept for a look): it drags earlier steps' history or saved
  // activations along.
  bool leaks() const { return nodes_before > 0 || saved_activation_bytes > 0; }
};

struct LeakReport {
  std::string label;
  std::vector<Device> devices;
  int64_t allocated_before = 0;  // memory_allocated summed over `devices`
  int64_t allocated_after = 0;
  std::vector<LeakSite> survivors;    // net growth > 0, largest first
  std::vector<RetainedGraph> graphs;  // largest first

  bool leaked() const;
  std::string str() const;  // human-readable diagnosis with what to do
};

class LeakTracker;

class StepLeakCheck {
 public:
  // Watches `devices` (default: the CPU and every CUDA device present).
  explicit StepLeakCheck(std::string label = "step", LeakMode mode = LeakMode::warn,
                         std::vector<Device> devices = {});
  // A check that hands its report to `tracker` (mode: the tracker's business).
  StepLeakCheck(LeakTracker& tracker, std::string label);
  // Finishes the check if finish() was not called; throws in raise mode unless
  // already unwinding from another exception.
  ~StepLeakCheck() noexcept(false);
  StepLeakCheck(const StepLeakCheck&) = delete;
  StepLeakCheck& operator=(const StepLeakCheck&) = delete;

  // Ends the check now and returns its report (applying the mode).
  LeakReport finish();

 private:
  // Raw, so that a snapshot builds no strings: only blocks that differ between
  // start and end are ever named.
  struct Block {
    const char* tag = nullptr;
    const char* scope = nullptr;
    bool has_tensor = false;
    Shape sizes;
    DType dtype = kFloat32;
    size_t requested = 0;
    size_t size = 0;
    bool same_site(const Block& o) const {
      return tag == o.tag && scope == o.scope && has_tensor == o.has_tensor && sizes == o.sizes &&
             dtype == o.dtype;
    }
  };
  using Blocks = std::map<std::pair<int, uintptr_t>, Block>;  // (device slot, address)
  Blocks snapshot() const;

  std::string label_;
  LeakMode mode_;
  std::vector<Device> devices_;
  LeakTracker* tracker_ = nullptr;
  Blocks start_;
  int64_t allocated_before_ = 0;
  uint64_t first_node_ = 0;
  bool done_ = false;
};

// A site (or a retained graph) that grew on every step the tracker saw.
struct GrowingSite {
  std::string site;
  std::string shape;
  Device device;
  int steps = 0;               // steps it grew on (all of them)
  int64_t bytes_per_step = 0;  // mean net growth per step (tensor bytes)
  int64_t allocated_bytes_per_step = 0;
  int64_t total_bytes = 0;
};
struct GrowingGraph {
  std::string site;
  std::string grad_fn;
  int steps = 0;
  size_t nodes = 0;  // at the last step
  double nodes_per_step = 0;
  size_t saved_activation_bytes = 0;  // at the last step
  double saved_bytes_per_step = 0;
};

struct LeakTrend {
  int steps = 0;  // steps looked at (after warm-up)
  std::vector<GrowingSite> sites;
  std::vector<GrowingGraph> graphs;
  int64_t allocated_first = 0;  // memory_allocated after the first step looked at
  int64_t allocated_last = 0;
  bool leaked() const { return !sites.empty() || !graphs.empty(); }
  std::string str() const;
};

// Feeds on one StepLeakCheck per step: `{ StepLeakCheck s(tracker, "step"); ... }`.
// The first `warmup` steps are ignored (optimizer state and gradient buffers are
// made on the first step and are not leaks).
class LeakTracker {
 public:
  explicit LeakTracker(LeakMode mode = LeakMode::warn, int warmup = 1,
                       std::vector<Device> devices = {});
  void add(LeakReport report);
  // What grew on every step after warm-up (needs at least two such steps).
  LeakTrend trend() const;
  // Applies the mode to trend(): warn prints, raise throws, record returns it.
  LeakTrend check() const;
  const std::vector<LeakReport>& reports() const { return reports_; }
  const std::vector<Device>& devices() const { return devices_; }

 private:
  LeakMode mode_;
  int warmup_;
  int seen_ = 0;
  std::vector<Device> devices_;
  std::vector<LeakReport> reports_;  // after warm-up
};

// Records a step boundary named `label` into the allocation history of `devices`
// (default: all), so the memory timeline (core/memory/memory_timeline.h) can mark it.
void mark_step(const std::string& label, std::vector<Device> devices = {});

// The CPU and every CUDA device present.
std::vector<Device> all_memory_devices();

}  // namespace ember
