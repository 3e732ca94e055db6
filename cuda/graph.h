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
//  * draw random numbers (randn, dropout): a replay would repeat them;
//  * create optimizer state (moments, momentum buffers, step counts), which a
//    replay would reset: run a few eager steps before capturing. They also create
//    the cuBLAS/cuBLASLt handles and workspaces and load every kernel the step uses.
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

 private:
  void release() noexcept;

  int device_ = 0;
  std::optional<Stream> stream_;  // the capture stream, made on first capture
  cudaGraphExec_t exec_ = nullptr;
  uint64_t pool_ = 0;      // the allocator's private pool id; 0: none
  bool replayed_ = false;  // since the last capture
};

}  // namespace ember::cuda
