// Fused multi-tensor optimizer kernels. Each block updates one chunk of one
// tensor, found through a chunk map, so a single launch covers a whole parameter
// group; the per-element math is fused_optim_math.h, the same as the CPU loops.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/kernels/fused_optim.h"

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 16 * 1024;  // elements per block

struct ChunkRef {
  int64_t tensor;
  int64_t start;
};

int64_t count_chunks(const OptimTensor* tensors, int64_t count) {
  int64_t chunks = 0;
  for (int64_t i = 0; i < count; ++i) chunks += (tensors[i].numel + kChunk - 1) / kChunk;
  return chunks;
}

template <typename T>
__device__ void sgd_chunk(const OptimTensor& t, const SgdConfig& c, int64_t begin, int64_t end) {
  T* p = static_cast<T*>(t.param);
  const T* g = static_cast<const T*>(t.grad);
  T* buf = static_cast<T*>(t.state[0]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    double pv = p[i];
    double bv = buf ? static_cast<double>(buf[i]) : 0.0;
    sgd_update(c, pv, static_cast<double>(g[i]), bv, t.first_step);
    p[i] = static_cast<T>(pv);
    if (buf) buf[i] = static_cast<T>(bv);
  }
}

template <typename T>
__device__ void adam_chunk(const OptimTensor& t, const AdamConfig& c, int64_t begin, int64_t end) {
  T* p = static_cast<T*>(t.param);
  const T* g = static_cast<const T*>(t.grad);
  T* m = static_cast<T*>(t.state[0]);
  T* v = static_cast<T*>(t.state[1]);
  T* v_max = static_cast<T*>(t.state[2]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    double pv = p[i], mv = m[i], vv = v[i];
    double vm = v_max ? static_cast<double>(v_max[i]) : 0.0;
    adam_update(c, pv, static_cast<double>(g[i]), mv, vv, vm, t.step_size, t.bias_correction2_sqrt);
    p[i] = static_cast<T>(pv);
    m[i] = static_cast<T>(mv);
    v[i] = static_cast<T>(vv);
    if (v_max) v_max[i] = static_cast<T>(vm);
  }
}

__global__ void fused_sgd_kernel(const OptimTensor* tensors, const ChunkRef* chunks, SgdConfig c) {
  const ChunkRef ref = chunks[blockIdx.x];
  const OptimTensor t = tensors[ref.tensor];
  const int64_t end = ref.start + kChunk < t.numel ? ref.start + kChunk : t.numel;
  if (t.is_double)
    sgd_chunk<double>(t, c, ref.start, end);
  else
    sgd_chunk<float>(t, c, ref.start, end);
}

__global__ void fused_adam_kernel(const OptimTensor* tensors, const ChunkRef* chunks,
                                  AdamConfig c) {
  const ChunkRef ref = chunks[blockIdx.x];
  const OptimTensor t = tensors[ref.tensor];
  const int64_t end = ref.start + kChunk < t.numel ? ref.start + kChunk : t.numel;
  if (t.is_double)
    adam_chunk<double>(t, c, ref.start, end);
  else
    adam_chunk<float>(t, c, ref.start, end);
}

// Uploads [tensors | chunk map] into the workspace; returns the chunk count.
int64_t upload_tables(const OptimTensor* tensors, int64_t count, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream, const OptimTensor** d_tensors,
                      const ChunkRef** d_chunks) {
  const size_t need = fused_optim_workspace_bytes(tensors, count);
  EMBER_CHECK(workspace != nullptr && workspace_bytes >= need, "fused optimizer: workspace of ",
              workspace_bytes, " bytes is smaller than the ", need, " bytes needed");
  const int64_t chunks = count_chunks(tensors, count);
  EMBER_CHECK(chunks < (int64_t{1} << 31), "fused optimizer: ", chunks,
              " chunks exceed the grid limit");
  std::vector<unsigned char> host(need);
  std::memcpy(host.data(), tensors, sizeof(OptimTensor) * static_cast<size_t>(count));
  auto* map = reinterpret_cast<ChunkRef*>(host.data() + sizeof(OptimTensor) * count);
  int64_t k = 0;
  for (int64_t i = 0; i < count; ++i)
    for (int64_t s = 0; s < tensors[i].numel; s += kChunk) map[k++] = ChunkRef{i, s};
  // From pageable memory the copy is staged before cudaMemcpyAsync returns, so
  // `host` may die right after.
  EMBER_CUDA_CHECK(cudaMemcpyAsync(workspace, host.data(), need, cudaMemcpyHostToDevice, stream));
  *d_tensors = static_cast<const OptimTensor*>(workspace);
  *d_chunks = reinterpret_cast<const ChunkRef*>(static_cast<unsigned char*>(workspace) +
                                                sizeof(OptimTensor) * count);
  return chunks;
}

}  // namespace

size_t fused_optim_workspace_bytes(const OptimTensor* tensors, int64_t count) {
  return sizeof(OptimTensor) * static_cast<size_t>(count) +
         sizeof(ChunkRef) * static_cast<size_t>(count_chunks(tensors, count));
}

void launch_fused_sgd(const OptimTensor* tensors, int64_t count, const SgdConfig& config,
                      void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (count == 0) return;
  const OptimTensor* d_tensors = nullptr;
  const ChunkRef* d_chunks = nullptr;
  int64_t chunks =
      upload_tables(tensors, count, workspace, workspace_bytes, stream, &d_tensors, &d_chunks);
  if (chunks == 0) return;
  fused_sgd_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(d_tensors, d_chunks,
                                                                           config);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void launch_fused_adam(const OptimTensor* tensors, int64_t count, const AdamConfig& config,
                       void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (count == 0) return;
  const OptimTensor* d_tensors = nullptr;
  const ChunkRef* d_chunks = nullptr;
  int64_t chunks =
      upload_tables(tensors, count, workspace, workspace_bytes, stream, &d_tensors, &d_chunks);
  if (chunks == 0) return;
  fused_adam_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(d_tensors, d_chunks,
                                                                            config);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
