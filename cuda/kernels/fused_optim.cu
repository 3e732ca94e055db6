// Fused multi-tensor optimizer kernels. Each block updates one chunk of one
// tensor of a batch of at most kFusedOptimTensorsPerLaunch, found by a binary
// search over the batch's chunk offsets; the batch is a kernel parameter
// (__grid_constant__, read in place). The per-element math is
// core/base/optim_math.h, the same as the CPU loops.
#include <cstdint>
#include <type_traits>

#include "core/base/error.h"
#include "cuda/check.h"
#include "cuda/kernels/fused_optim.h"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/registration.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 16 * 1024;  // elements per block
constexpr int kBatch = static_cast<int>(kFusedOptimTensorsPerLaunch);

struct TensorBatch {
  OptimTensor t[kBatch];
  int64_t first_chunk[kBatch + 1];  // the chunk where tensor i starts; [count]: the total
  int count;
};
static_assert(sizeof(TensorBatch) + sizeof(AdamConfig) <= 4000,
              "the batch must fit the kernel parameter space");

// The tensor of chunk `chunk`: the last i with first_chunk[i] <= chunk (tensors
// without elements own no chunk, so the search skips them).
__device__ int tensor_of(const TensorBatch& b, int64_t chunk) {
  int lo = 0, hi = b.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (b.first_chunk[mid] <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
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

// Float32 chunks whose arrays are all 16-byte aligned move four elements per thread
// per array as one load and one store each (the scalar loop left too few bytes in
// flight to keep the memory busy); each element's update is the same call, so the
// bits are the same. The rest of the chunk (and float64) goes element by element.
template <typename T>
__device__ void adam_chunk(const OptimTensor& t, const AdamConfig& c, int64_t begin, int64_t end,
                           double step_size, double bc2_sqrt) {
  T* p = static_cast<T*>(t.param);
  const T* g = static_cast<const T*>(t.grad);
  T* m = static_cast<T*>(t.state[0]);
  T* v = static_cast<T*>(t.state[1]);
  T* v_max = static_cast<T*>(t.state[2]);
  if constexpr (std::is_same_v<T, float>) {
    if (aligned16(p + begin) && aligned16(g + begin) && aligned16(m + begin) &&
        aligned16(v + begin) && (v_max == nullptr || aligned16(v_max + begin))) {
      const int64_t packs = (end - begin) / 4;
      for (int64_t q = threadIdx.x; q < packs; q += blockDim.x) {
        const int64_t i = begin + 4 * q;
        float pa[4], ga[4], ma[4], va[4], xa[4] = {0.f, 0.f, 0.f, 0.f};
        *reinterpret_cast<float4*>(pa) = *reinterpret_cast<const float4*>(p + i);
        *reinterpret_cast<float4*>(ga) = *reinterpret_cast<const float4*>(g + i);
        *reinterpret_cast<float4*>(ma) = *reinterpret_cast<const float4*>(m + i);
        *reinterpret_cast<float4*>(va) = *reinterpret_cast<const float4*>(v + i);
        if (v_max) *reinterpret_cast<float4*>(xa) = *reinterpret_cast<const float4*>(v_max + i);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          double pv = pa[j], mv = ma[j], vv = va[j], vm = xa[j];
          adam_update(c, pv, static_cast<double>(ga[j]), mv, vv, vm, step_size, bc2_sqrt);
          pa[j] = static_cast<float>(pv);
          ma[j] = static_cast<float>(mv);
          va[j] = static_cast<float>(vv);
          xa[j] = static_cast<float>(vm);
        }
        *reinterpret_cast<float4*>(p + i) = *reinterpret_cast<const float4*>(pa);
        *reinterpret_cast<float4*>(m + i) = *reinterpret_cast<const float4*>(ma);
        *reinterpret_cast<float4*>(v + i) = *reinterpret_cast<const float4*>(va);
        if (v_max) *reinterpret_cast<float4*>(v_max + i) = *reinterpret_cast<const float4*>(xa);
      }
      begin += 4 * packs;
    }
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    double pv = p[i], mv = m[i], vv = v[i];
    double vm = v_max ? static_cast<double>(v_max[i]) : 0.0;
    adam_update(c, pv, static_cast<double>(g[i]), mv, vv, vm, step_size, bc2_sqrt);
    p[i] = static_cast<T>(pv);
    m[i] = static_cast<T>(mv);
    v[i] = static_cast<T>(vv);
    if (v_max) v_max[i] = static_cast<T>(vm);
  }
}

__global__ void fused_sgd_kernel(const __grid_constant__ TensorBatch batch,
                                 const __grid_constant__ SgdConfig c) {
  const int64_t chunk = blockIdx.x;
  const int k = tensor_of(batch, chunk);
  const OptimTensor& t = batch.t[k];
  const int64_t begin = (chunk - batch.first_chunk[k]) * kChunk;
  const int64_t end = begin + kChunk < t.numel ? begin + kChunk : t.numel;
  if (t.is_double)
    sgd_chunk<double>(t, c, begin, end);
  else
    sgd_chunk<float>(t, c, begin, end);
}

// Adds one to each device step count of the batch; runs before the update, in
// the same stream, so every block of the update reads the new count.
__global__ void advance_steps_kernel(const __grid_constant__ TensorBatch batch) {
  const int k = static_cast<int>(threadIdx.x);
  if (k < batch.count) ++*batch.t[k].step;
}

__global__ void fused_adam_kernel(const __grid_constant__ TensorBatch batch,
                                  const __grid_constant__ AdamConfig c) {
  const int64_t chunk = blockIdx.x;
  const int k = tensor_of(batch, chunk);
  const OptimTensor& t = batch.t[k];
  const int64_t begin = (chunk - batch.first_chunk[k]) * kChunk;
  const int64_t end = begin + kChunk < t.numel ? begin + kChunk : t.numel;
  __shared__ double corrections[2];
  if (threadIdx.x == 0) {
    double step_size = 0, bc2_sqrt = 1;
    adam_bias_corrections(c, static_cast<double>(*t.step), step_size, bc2_sqrt);
    corrections[0] = step_size;
    corrections[1] = bc2_sqrt;
  }
  __syncthreads();
  if (t.is_double)
    adam_chunk<double>(t, c, begin, end, corrections[0], corrections[1]);
  else
    adam_chunk<float>(t, c, begin, end, corrections[0], corrections[1]);
}

// The next batch of `tensors` (at most kBatch from `offset`), with its chunk map;
// returns the batch's chunk count.
int64_t make_batch(const OptimTensor* tensors, int64_t count, int64_t offset, TensorBatch& b) {
  b.count = static_cast<int>(count - offset < kBatch ? count - offset : kBatch);
  int64_t chunks = 0;
  for (int k = 0; k < b.count; ++k) {
    b.t[k] = tensors[offset + k];
    EMBER_CHECK(b.t[k].numel >= 0, "fused optimizer: tensor ", offset + k, " has ", b.t[k].numel,
                " elements");
    b.first_chunk[k] = chunks;
    chunks += (b.t[k].numel + kChunk - 1) / kChunk;
  }
  b.first_chunk[b.count] = chunks;
  EMBER_CHECK(chunks < (int64_t{1} << 31), "fused optimizer: ", chunks,
              " chunks exceed the grid limit");
  return chunks;
}

}  // namespace

void launch_fused_sgd(const OptimTensor* tensors, int64_t count, const SgdConfig& config,
                      cudaStream_t stream) {
  for (int64_t offset = 0; offset < count; offset += kBatch) {
    TensorBatch batch{};
    const int64_t chunks = make_batch(tensors, count, offset, batch);
    if (chunks == 0) continue;
    fused_sgd_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(batch, config);
    EMBER_CUDA_CHECK(cudaGetLastError());
  }
}

void launch_fused_adam(const OptimTensor* tensors, int64_t count, const AdamConfig& config,
                       cudaStream_t stream) {
  for (int64_t offset = 0; offset < count; offset += kBatch) {
    TensorBatch batch{};
    const int64_t chunks = make_batch(tensors, count, offset, batch);
    for (int k = 0; k < batch.count; ++k)
      EMBER_CHECK(batch.t[k].step != nullptr, "fused Adam: tensor ", offset + k,
                  " has no step count");
    advance_steps_kernel<<<1, kBatch, 0, stream>>>(batch);
    EMBER_CUDA_CHECK(cudaGetLastError());
    if (chunks == 0) continue;
    fused_adam_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(batch, config);
    EMBER_CUDA_CHECK(cudaGetLastError());
  }
}

// ------------------------------------------------------------------ registration

namespace {
namespace entry {

void fused_sgd(const kernels::FusedSgdArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_fused_sgd(a.tensors, a.count, a.config, current_stream(a.device.index));
}

void fused_adam(const kernels::FusedAdamArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_fused_adam(a.tensors, a.count, a.config, current_stream(a.device.index));
}

}  // namespace entry
}  // namespace

void register_fused_optim(kernels::KernelFamilies& t) {
  t.fused_sgd = &entry::fused_sgd;
  t.fused_adam = &entry::fused_adam;
}

}  // namespace ember::cuda
