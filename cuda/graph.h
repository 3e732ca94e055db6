// cuda::Graph: a whole step of CUDA work (a training step: forward, backward,
// optimizer step) captured once and replayed with one launch, as PyTorch's
// torch.cuda.CUDAGraph. Capturing records the step's kernels and copies; it runs
// nothing. What the step allocates comes from a private pool of the device's
// caching allocator that the graph owns, so every replay finds its tensors at the
// addresses it was captured with, and no one else is handed that memory meanwhile.
//
// What a captured step may not do, each refused with an ember::Error naming the
// op (the capture is then abandoned, and eager work goes on as before):
//  * wait for the device: item(), to_vector(), to(kCPU), copies from host memory
//    (to(kCUDA), from_vector on CUDA), cuda::synchronize, anomaly detection,
//    empty_cache;
//  * create optimizer state (moments, momentum buffers, step counts), which a
//    replay would reset: run a few eager steps before capturing. They also create
//    the cuBLAS/cuBLASLt handles and workspaces and load every kernel the step uses.
// Random numbers (rand, randn, randint, dropout, attention dropout) drawn inside the
// step are fresh at every replay: the graph keeps a device word per generator the
// step drew from, sets it to the generator's offset before each replay and then
// advances the generator by the step's draws, so replay k draws what the k-th eager
// step from the same generator state would (randperm and multinomial are still
// refused). The generators must outlive the graph's replays, as the tensors must; their
// seeds are baked in at capture (capture again after manual_seed to change one).
// And what it cannot see: host values are baked in when captured (scalars, shapes,
// the optimizer's lr and options: re-capture after changing them), inputs must
// be copied (copy_) into tensors made before the capture, and tensors the step
// uses but did not make (inputs, parameters, optimizer state) must stay alive, at
// their addresses, while the graph is replayed: capture again after
// load_state_dict or moving the model. Tensors the step made (the loss, the
// gradients) stay valid after the capture; each replay overwrites them with its
// own values.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda/runtime.h"  // is_capturing(device)

namespace ember::cuda {

class Graph {
 public:
  // On `device` (default: the current CUDA device). Throws ember::Error when the
  // machine has no CUDA device, or `device` is not one.
  explicit Graph(int device = -1);
  // Waits for the last replay, destroys the graph and gives the private pool's
  // memory back to the allocator's general cache (tensors still using it keep it
  // until they die; empty_cache() then returns it to the device).
  ~Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Calls `step` once with a private capture stream as the device's current
  // stream on this thread, records what it enqueues, and instantiates it. A
  // previous capture is dropped first (reset). If `step` throws, or does
  // something a capture cannot record, the capture is ended and discarded, the
  // private pool released, and the error rethrown (or thrown as ember::Error).
  void capture(const std::function<void()>& step);
  // Launches the captured graph on the device's current stream, after the work
  // already queued there. Replays of one graph must not overlap: keep them on one
  // stream (or order them).
  void replay();
  bool captured() const { return exec_ != nullptr; }
  int device() const { return device_; }
  // Drops the captured graph and its pool, as the destructor does.
  void reset();

  // The random-counter hook for draws inside a capture (kernels::DeviceHooks::
  // capture_random, core/device_services.h's draw_counters): the word of generator
  // `key` (whose offset is *host_offset) in the graph capturing `device` on this
  // thread, *offset_in_step the draw's counters within the step; *host_offset advances
  // by n. Throws when no graph captures the device on this thread, or the step draws
  // from more generators than the graph has words.
  static const uint64_t* capture_random(int device, const void* key, uint64_t* host_offset,
                                        uint64_t n, uint64_t* offset_in_step);

 private:
  void release() noexcept;
  // A generator the captured step drew from: its offset (host), the offset when the
  // capture first drew from it, and how far the step's draws advance it.
  struct RandomSlot {
    const void* key;
    uint64_t* host_offset;
    uint64_t start;
    uint64_t consumed;
  };

  int device_ = 0;
  std::optional<Stream> stream_;  // the capture stream, made on first capture
  cudaGraphExec_t exec_ = nullptr;
  uint64_t pool_ = 0;               // the allocator's private pool id; 0: none
  bool replayed_ = false;           // since the last capture
  uint64_t* words_ = nullptr;       // device words, one per slot (made at the first capture)
  std::vector<RandomSlot> random_;  // the generators of the captured step
};

}  // namespace ember::cuda
