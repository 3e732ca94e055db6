// Element-wise CUDA kernels: one grid-stride kernel per arity and storage type,
// with the op chosen at run time (uniform across the grid, so the switch costs
// little next to the memory traffic) to keep compile time and binary size small.
// Forward kernels take float32, float64, bfloat16 and int64 input (int64 computed
// in int64 for the ops that keep integers and the comparisons, in double for the
// rest) and write the input's type or, for comparisons, bool.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>

#include <cuda_bf16.h>

#include "core/base/env_switch.h"
#include "core/base/random.h"
#include "cuda/check.h"
#include "cuda/kernels/elementwise.h"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/registration.h"
#include "cuda/kernels/row_copy_plan.h"
#include "cuda/kernels/transpose_plan.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

template <typename S>
struct ComputeOf {
  using type = float;
};
template <>
struct ComputeOf<double> {
  using type = double;
};
template <>
struct ComputeOf<int64_t> {
  using type = double;
};

template <typename S>
__device__ __forceinline__ typename ComputeOf<S>::type load(const S* p) {
  return *p;
}
template <>
__device__ __forceinline__ float load<__nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
template <typename S, typename C>
__device__ __forceinline__ void store(S* p, C v) {
  *p = static_cast<S>(v);
}
template <>
__device__ __forceinline__ void store<__nv_bfloat16, float>(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ void store<__nv_bfloat16, double>(__nv_bfloat16* p, double v) {
  *p = __float2bfloat16_rn(static_cast<float>(v));
}

constexpr int kThreads = 256;

// 32 blocks per multiprocessor of the current device fill it; grid-stride loops do
// the rest. The count is read once per device (kernel_helpers.cuh).
int64_t block_cap() {
  return int64_t{sm_count(current_device())} * 32;
}

inline unsigned grid_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks <= 1) return 1;
  const int64_t cap = block_cap();
  return static_cast<unsigned>(blocks < cap ? blocks : cap);
}

// O: the output's storage type, S or bool.
template <typename S, typename O>
__global__ void unary_kernel(UnaryOp op, const S* x, StridedLayout xl, O* y, StridedLayout yl,
                             int64_t n, double a) {
  using C = typename ComputeOf<S>::type;
  if constexpr (std::is_same_v<S, int64_t>) {
    if (computes_in_int64(op)) {  // exact: int64 in int64 (elementwise_ops.h)
      for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
           i += int64_t(gridDim.x) * blockDim.x)
        y[yl.offset_of(i)] = static_cast<O>(unary_forward_int64(op, x[xl.offset_of(i)], a));
      return;
    }
  }
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    C v = unary_forward<C>(op, load(x + xl.offset_of(i)), static_cast<C>(a));
    store(y + yl.offset_of(i), v);
  }
}

template <typename S>
__global__ void unary_backward_kernel(UnaryOp op, const S* g, StridedLayout gl, const S* s,
                                      StridedLayout sl, S* out, StridedLayout ol, int64_t n,
                                      double a) {
  using C = typename ComputeOf<S>::type;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    C v = unary_backward<C>(op, load(g + gl.offset_of(i)), load(s + sl.offset_of(i)),
                            static_cast<C>(a));
    store(out + ol.offset_of(i), v);
  }
}

// SY: y's storage type, S's or (S float32) bfloat16, widened as it is read.
template <typename S, typename O, typename SY = S>
__global__ void binary_kernel(BinaryOp op, const S* x, StridedLayout xl, const SY* y,
                              StridedLayout yl, O* out, StridedLayout ol, int64_t n, double a) {
  using C = typename ComputeOf<S>::type;
  if constexpr (std::is_same_v<S, int64_t>) {
    if (computes_in_int64(op)) {  // exact: int64 in int64 (elementwise_ops.h)
      for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
           i += int64_t(gridDim.x) * blockDim.x)
        out[ol.offset_of(i)] =
            static_cast<O>(binary_forward_int64(op, x[xl.offset_of(i)], y[yl.offset_of(i)], a));
      return;
    }
  }
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    C v = binary_forward<C>(op, load(x + xl.offset_of(i)), load(y + yl.offset_of(i)),
                            static_cast<C>(a));
    store(out + ol.offset_of(i), v);
  }
}

template <typename S>
__global__ void where_kernel(const bool* cond, StridedLayout cl, const S* a, StridedLayout al,
                             const S* b, StridedLayout bl, S* out, StridedLayout ol, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[ol.offset_of(i)] = cond[cl.offset_of(i)] ? a[al.offset_of(i)] : b[bl.offset_of(i)];
}

template <typename S>
__global__ void binary_backward_kernel(BinaryOp op, int side, const S* g, StridedLayout gl,
                                       const S* x, StridedLayout xl, const S* y, StridedLayout yl,
                                       S* out, StridedLayout ol, int64_t n, double a) {
  using C = typename ComputeOf<S>::type;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    C v = binary_backward<C>(op, side, load(g + gl.offset_of(i)), load(x + xl.offset_of(i)),
                             load(y + yl.offset_of(i)), static_cast<C>(a));
    store(out + ol.offset_of(i), v);
  }
}

template <typename From, typename To>
__global__ void cast_kernel(const From* x, StridedLayout xl, To* y, StridedLayout yl, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<From, To>) {  // a copy: int64 is not a double
      y[yl.offset_of(i)] = x[xl.offset_of(i)];
    } else {
      double v;
      if constexpr (std::is_same_v<From, __nv_bfloat16>)
        v = __bfloat162float(x[xl.offset_of(i)]);
      else
        v = static_cast<double>(x[xl.offset_of(i)]);
      store(y + yl.offset_of(i), v);
    }
  }
}

// A same-dtype copy that is a batched transpose (transpose_plan): 32 x 32 tiles, a
// block of 32 x 8 threads. Each reads its tile along the source's contiguous rows
// (i) and writes it along the output's contiguous columns (j), through shared memory
// padded by one element so that the column reads do not share a bank (for 2- and
// 4-byte elements; 8-byte ones two ways). T: an unsigned integer of the element's
// size (a copy moves bits).
template <typename T>
__global__ void transpose_kernel(const T* __restrict__ x, T* __restrict__ y, TransposePlan p) {
  constexpr int kTile = static_cast<int>(kTransposeTile), kRowsPerPass = 8;
  __shared__ T tile[kTile][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t j0 = int64_t(blockIdx.x) * kTile, i0 = int64_t(blockIdx.y) * kTile;
  for (int64_t b = blockIdx.z; b < p.batch; b += gridDim.z) {
    const T* xb = x + p.offset + b * p.batch_stride;
    T* yb = y + b * p.rows * p.cols;
    for (int k = 0; k < kTile; k += kRowsPerPass) {
      const int64_t i = i0 + tx, j = j0 + ty + k;
      if (i < p.rows && j < p.cols) tile[ty + k][tx] = xb[i + j * p.col_stride];
    }
    __syncthreads();
    for (int k = 0; k < kTile; k += kRowsPerPass) {
      const int64_t i = i0 + ty + k, j = j0 + tx;
      if (i < p.rows && j < p.cols) yb[i * p.cols + j] = tile[tx][ty + k];
    }
    __syncthreads();  // the tile is refilled for the next b
  }
}

template <typename T>
void launch_transpose(const void* x, void* y, int64_t y_offset, const TransposePlan& p,
                      cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.cols + kTransposeTile - 1) / kTransposeTile),
                  static_cast<unsigned>((p.rows + kTransposeTile - 1) / kTransposeTile),
                  static_cast<unsigned>(std::min(p.batch, kTransposeMaxBatchBlocks)));
  transpose_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(static_cast<const T*>(x),
                                                        static_cast<T*>(y) + y_offset, p);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// A same-dtype copy of whole contiguous rows (row_copy_plan): chunk i of the copy is
// bytes [c V, c V + V) of row r = i / (row_bytes / V); a thread finds the row's two
// starts from its digits over the plan's outer dimensions (I: the index type, 32 bits
// where the chunks and rows fit).
template <int V>
struct VecBytes;
template <>
struct VecBytes<4> {
  using type = uint32_t;
};
template <>
struct VecBytes<8> {
  using type = uint2;
};
template <>
struct VecBytes<16> {
  using type = uint4;
};

template <int V, typename I>
__global__ void row_copy_kernel(const char* __restrict__ x, char* __restrict__ y, RowCopyPlan p,
                                I chunks) {
  using W = typename VecBytes<V>::type;
  const I per_row = static_cast<I>(p.row_bytes / V);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < chunks; i += I(gridDim.x) * blockDim.x) {
    I row = i / per_row;
    const I c = i - row * per_row;
    int64_t so = p.src_offset + int64_t(c) * V, yo = p.dst_offset + int64_t(c) * V;
    for (int d = p.outer - 1; d >= 0; --d) {
      const I size = static_cast<I>(p.sizes[d]);
      const I digit = row % size;
      row /= size;
      so += int64_t(digit) * p.src_strides[d];
      yo += int64_t(digit) * p.dst_strides[d];
    }
    *reinterpret_cast<W*>(y + yo) = *reinterpret_cast<const W*>(x + so);
  }
}

// ------------------------------------------------------------------ vectors
// The same formulas over contiguous operands, V elements per thread moved as one
// aligned load or store per operand (V: 16 bytes of the widest operand), for
// float32 and bfloat16 storage. Each element is computed exactly as the strided
// kernels above compute it, so the bits are the same; what changes is the bytes in
// flight per thread (one 2-byte load per operand per iteration leaves the scalar
// bfloat16 kernels short of what the memory system needs to stay busy).
// Elements past the last whole vector (fewer than V) are taken by block 0.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// out[i] = f(x[i]) (map1) or f(x[i], y[i]) (map2), f computing in float: whole packs of
// V per thread over a grid-stride loop, then the tail.
template <int V, typename F, typename X, typename O>
__global__ void map1_vec_kernel(F f, const X* x, O* out, int64_t n) {
  const int64_t packs = n / V;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs;
       p += int64_t(gridDim.x) * blockDim.x) {
    const Pack<X, V> xv = reinterpret_cast<const Pack<X, V>*>(x)[p];
    Pack<O, V> ov;
#pragma unroll
    for (int j = 0; j < V; ++j) store(&ov.v[j], f(load(&xv.v[j])));
    reinterpret_cast<Pack<O, V>*>(out)[p] = ov;
  }
  const int64_t i = packs * V + threadIdx.x;
  if (blockIdx.x == 0 && i < n) store(out + i, f(load(x + i)));
}

template <int V, typename F, typename X, typename Y, typename O>
__global__ void map2_vec_kernel(F f, const X* x, const Y* y, O* out, int64_t n) {
  const int64_t packs = n / V;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs;
       p += int64_t(gridDim.x) * blockDim.x) {
    const Pack<X, V> xv = reinterpret_cast<const Pack<X, V>*>(x)[p];
    const Pack<Y, V> yv = reinterpret_cast<const Pack<Y, V>*>(y)[p];
    Pack<O, V> ov;
#pragma unroll
    for (int j = 0; j < V; ++j) store(&ov.v[j], f(load(&xv.v[j]), load(&yv.v[j])));
    reinterpret_cast<Pack<O, V>*>(out)[p] = ov;
  }
  const int64_t i = packs * V + threadIdx.x;
  if (blockIdx.x == 0 && i < n) store(out + i, f(load(x + i), load(y + i)));
}

// The formulas the strided kernels apply, as functors for the map kernels (C: the
// type they compute in, float for float32 and bfloat16 storage).
template <typename C>
struct UnaryF {
  UnaryOp op;
  double a;
  __device__ C operator()(C x) const { return unary_forward<C>(op, x, static_cast<C>(a)); }
};
template <typename C>
struct BinaryF {
  BinaryOp op;
  double a;
  __device__ C operator()(C x, C y) const { return binary_forward<C>(op, x, y, static_cast<C>(a)); }
};
template <typename C>
struct UnaryBackwardF {
  UnaryOp op;
  double a;
  __device__ C operator()(C g, C s) const { return unary_backward<C>(op, g, s, static_cast<C>(a)); }
};
// UnaryF and UnaryBackwardF with the op fixed at compile time: the same formulas, without
// the per-element switch over every op. The GPT's GELU, forward and backward, runs
// through these (the only op that does).
template <typename C, UnaryOp OP>
struct FixedUnaryF {
  double a;
  __device__ C operator()(C x) const { return unary_forward<C>(OP, x, static_cast<C>(a)); }
};
template <typename C, UnaryOp OP>
struct FixedUnaryBackwardF {
  double a;
  __device__ C operator()(C g, C s) const { return unary_backward<C>(OP, g, s, static_cast<C>(a)); }
};
struct CastF {  // float32 <-> bfloat16 through float (a same-type cast is a copy)
  __device__ float operator()(float x) const { return x; }
};

// step != 0: arange's fma(step, i, value), rounded once as the CPU's std::fma.
template <typename S>
__global__ void fill_kernel(S* y, StridedLayout yl, int64_t n, double value, double step) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store(y + yl.offset_of(i), step != 0.0 ? fma(step, static_cast<double>(i), value) : value);
}

template <typename S>
__global__ void random_kernel(S* y, int64_t n, uint64_t seed, uint64_t offset, bool normal,
                              bool integer, double p0, double p1, const uint64_t* offset_base) {
  if (offset_base != nullptr) offset += *offset_base;  // inside a CUDA graph
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    double v = integer  ? p0 + floor((p1 - p0) * random_uniform(seed, offset + i))
               : normal ? p0 + p1 * random_normal(seed, offset + i)
                        : p0 + (p1 - p0) * random_uniform(seed, offset + i);
    store(y + i, v);
  }
}

// Dropout, its mask drawn here (kernel_families.h's DropoutArgs); x may be y. key:
// dropout_key(seed), made once by the caller. Y: X, or bfloat16 beside float32 X (x
// rounded to Y before it is scaled, as a cast and then dropout).
template <typename X, typename Y>
__device__ __forceinline__ typename CompOf<Y>::type dropped(X x, uint32_t key, uint64_t counter,
                                                            uint32_t threshold,
                                                            typename CompOf<Y>::type scale) {
  using C = typename CompOf<Y>::type;
  const bool keep = dropout_bits_keyed(key, counter) >= threshold;
  return keep ? widen(narrow<Y>(widen(x))) * scale : C(0);
}

template <typename X, typename Y>
__global__ void dropout_kernel(const X* x, Y* y, int64_t n, uint32_t key, uint64_t offset,
                               uint32_t threshold, typename CompOf<Y>::type scale,
                               const uint64_t* offset_base) {
  if (offset_base != nullptr) offset += *offset_base;  // inside a CUDA graph
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = narrow<Y>(dropped<X, Y>(x[i], key, offset + static_cast<uint64_t>(i), threshold, scale));
}

// dropout_kernel over whole packs of V (16 bytes of the wider type per thread), then the
// tail (block 0): each element drawn and computed as dropout_kernel does, so the bits
// are the same.
template <int V, typename X, typename Y>
__global__ void dropout_vec_kernel(const X* x, Y* y, int64_t n, uint32_t key, uint64_t offset,
                                   uint32_t threshold, float scale, const uint64_t* offset_base) {
  if (offset_base != nullptr) offset += *offset_base;  // inside a CUDA graph
  const int64_t packs = n / V;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs;
       p += int64_t(gridDim.x) * blockDim.x) {
    const Pack<X, V> xv = reinterpret_cast<const Pack<X, V>*>(x)[p];
    const uint64_t first = offset + static_cast<uint64_t>(p) * V;
    Pack<Y, V> yv;
#pragma unroll
    for (int j = 0; j < V; ++j)
      yv.v[j] = narrow<Y>(dropped<X, Y>(xv.v[j], key, first + j, threshold, scale));
    reinterpret_cast<Pack<Y, V>*>(y)[p] = yv;
  }
  const int64_t i = packs * V + threadIdx.x;
  if (blockIdx.x == 0 && i < n)
    y[i] = narrow<Y>(dropped<X, Y>(x[i], key, offset + static_cast<uint64_t>(i), threshold, scale));
}

// The runtime's handle of `kernel`, looked up once per kernel. Since CUDA 13,
// <<<>>> launches by handle too; cudaLaunchKernel given the host stub instead
// must first find its kernel.
template <auto kernel>
cudaKernel_t handle_of() {
  static const cudaKernel_t handle = [] {
    cudaKernel_t h = nullptr;
    EMBER_CUDA_CHECK(cudaGetKernel(&h, reinterpret_cast<const void*>(kernel)));
    return h;
  }();
  return handle;
}

template <typename... Params, typename... Args>
void launch_by_handle(void (*)(Params...), cudaKernel_t handle, int64_t n, cudaStream_t stream,
                      Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch: one argument per parameter");
  std::tuple<Params...> values(std::forward<Args>(args)...);  // the kernel's exact types
  std::apply(
      [&](auto&... v) {
        void* ptrs[] = {static_cast<void*>(&v)...};
        EMBER_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(handle), dim3(grid_for(n)),
                                          dim3(kThreads), ptrs, 0, stream));
      },
      values);
}

// kernel<<<grid_for(n), kThreads, 0, stream>>>(args...) as the one runtime call
// it needs: cudaLaunchKernel by handle, its status checked (what
// cudaGetLastError() after <<<>>> would report), without <<<>>>'s push and pop
// of the launch configuration or the cudaGetLastError call. These launches are
// the whole device side of an eager element-wise op (bench_op_overhead).
template <auto kernel, typename... Args>
void launch(int64_t n, cudaStream_t stream, Args&&... args) {
  launch_by_handle(kernel, handle_of<kernel>(), n, stream, std::forward<Args>(args)...);
}

// Every storage type (casts and fills).
template <typename F>
void dispatch_all(DType t, F&& f) {
  if (t == DType::Int64)
    f(static_cast<int64_t*>(nullptr));
  else if (t == DType::Bool)
    f(static_cast<bool*>(nullptr));
  else
    dispatch_float(t, "cast", std::forward<F>(f));
}

// The input types of the forward element-wise kernels: floating point and int64.
template <typename F>
void dispatch_numeric(DType t, const char* op, F&& f) {
  if (t == DType::Int64)
    f(static_cast<int64_t*>(nullptr));
  else
    dispatch_float(t, op, std::forward<F>(f));
}

// ------------------------------------------------------------------ vector path choice

std::atomic<int> g_vectors{-1};    // -1: EMBER_ELEMENTWISE_VECTORS not read yet
std::atomic<int> g_transpose{-1};  // -1: EMBER_TRANSPOSE_COPY not read yet
std::atomic<int> g_row_copy{-1};   // -1: EMBER_ROW_COPY not read yet

// One operand of a vector launch: where it starts and how it is laid out.
struct VecOperand {
  const void* base;
  const StridedLayout* layout;
  size_t element;
};

// The operand's first element, when the vector kernels may take it: contiguous,
// and aligned to its own pack (V elements).
const void* vector_start(const VecOperand& o, int v) {
  if (!o.layout->contiguous) return nullptr;
  const char* p = static_cast<const char*>(o.base) + o.layout->offset * int64_t(o.element);
  return reinterpret_cast<uintptr_t>(p) % (o.element * size_t(v)) == 0 ? p : nullptr;
}

// Whether every operand qualifies for packs of v elements (and the switch is on).
bool vectors_for(int64_t n, int v, std::initializer_list<VecOperand> ops) {
  if (!elementwise_vectors() || n < v) return false;
  for (const VecOperand& o : ops)
    if (vector_start(o, v) == nullptr) return false;
  return true;
}

template <typename T>
T* start_of(const void* base, const StridedLayout& l) {
  return const_cast<T*>(static_cast<const T*>(base)) + l.offset;
}

// Elements per thread: 16 bytes of the widest of the types.
template <typename... T>
constexpr int pack_of() {
  constexpr size_t widest = std::max({sizeof(T)...});
  return static_cast<int>(16 / widest);
}

template <typename S>
constexpr bool vector_type = std::is_same_v<S, float> || std::is_same_v<S, __nv_bfloat16>;

template <int V>
void launch_row_copy_v(const void* x, void* y, const RowCopyPlan& p, cudaStream_t stream) {
  const int64_t chunks = p.rows * (p.row_bytes / V);
  const char* xs = static_cast<const char*>(x);
  char* ys = static_cast<char*>(y);
  if (chunks < (int64_t{1} << 31) && p.rows < (int64_t{1} << 31))
    launch<row_copy_kernel<V, uint32_t>>(chunks, stream, xs, ys, p, static_cast<uint32_t>(chunks));
  else
    launch<row_copy_kernel<V, int64_t>>(chunks, stream, xs, ys, p, chunks);
}

void launch_row_copy(const void* x, void* y, const RowCopyPlan& p, cudaStream_t stream) {
  if (p.vec == 16)
    launch_row_copy_v<16>(x, y, p, stream);
  else if (p.vec == 8)
    launch_row_copy_v<8>(x, y, p, stream);
  else
    launch_row_copy_v<4>(x, y, p, stream);
}

}  // namespace

void set_transpose_copy(bool on) {
  g_transpose.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool transpose_copy() {
  return env_switch(g_transpose, "EMBER_TRANSPOSE_COPY", true);
}

void set_row_copy(bool on) {
  g_row_copy.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool row_copy() {
  return env_switch(g_row_copy, "EMBER_ROW_COPY", true);
}

void set_elementwise_vectors(bool on) {
  g_vectors.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool elementwise_vectors() {
  return env_switch(g_vectors, "EMBER_ELEMENTWISE_VECTORS", true);
}

void launch_unary(UnaryOp op, DType dtype, const void* x, const StridedLayout& xl, void* y,
                  const StridedLayout& yl, int64_t n, double a, DType out_dtype,
                  cudaStream_t stream) {
  if (n == 0) return;
  dispatch_numeric(dtype, unary_name(op), [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    if constexpr (vector_type<S>) {
      constexpr int v = pack_of<S>();
      if (vectors_for(n, v,
                      {{x, &xl, sizeof(S)}, {y, &yl, out_dtype == DType::Bool ? 1 : sizeof(S)}})) {
        if (out_dtype == DType::Bool)
          launch<map1_vec_kernel<v, UnaryF<float>, S, bool>>(
              n / v, stream, UnaryF<float>{op, a}, start_of<S>(x, xl), start_of<bool>(y, yl), n);
        else if (op == UnaryOp::Gelu)
          launch<map1_vec_kernel<v, FixedUnaryF<float, UnaryOp::Gelu>, S, S>>(
              n / v, stream, FixedUnaryF<float, UnaryOp::Gelu>{a}, start_of<S>(x, xl),
              start_of<S>(y, yl), n);
        else
          launch<map1_vec_kernel<v, UnaryF<float>, S, S>>(
              n / v, stream, UnaryF<float>{op, a}, start_of<S>(x, xl), start_of<S>(y, yl), n);
        return;
      }
    }
    if (out_dtype == DType::Bool)
      launch<unary_kernel<S, bool>>(n, stream, op, static_cast<const S*>(x), xl,
                                    static_cast<bool*>(y), yl, n, a);
    else
      launch<unary_kernel<S, S>>(n, stream, op, static_cast<const S*>(x), xl, static_cast<S*>(y),
                                 yl, n, a);
  });
}

void launch_binary(BinaryOp op, DType dtype, const void* x, const StridedLayout& xl, const void* y,
                   const StridedLayout& yl, void* out, const StridedLayout& ol, int64_t n, double a,
                   DType out_dtype, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_numeric(dtype, binary_name(op), [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    if constexpr (vector_type<S>) {
      constexpr int v = pack_of<S>();
      const size_t oe = out_dtype == DType::Bool ? 1 : sizeof(S);
      if (vectors_for(n, v, {{x, &xl, sizeof(S)}, {y, &yl, sizeof(S)}, {out, &ol, oe}})) {
        if (out_dtype == DType::Bool)
          launch<map2_vec_kernel<v, BinaryF<float>, S, S, bool>>(
              n / v, stream, BinaryF<float>{op, a}, start_of<S>(x, xl), start_of<S>(y, yl),
              start_of<bool>(out, ol), n);
        else
          launch<map2_vec_kernel<v, BinaryF<float>, S, S, S>>(
              n / v, stream, BinaryF<float>{op, a}, start_of<S>(x, xl), start_of<S>(y, yl),
              start_of<S>(out, ol), n);
        return;
      }
    }
    if (out_dtype == DType::Bool)
      launch<binary_kernel<S, bool>>(n, stream, op, static_cast<const S*>(x), xl,
                                     static_cast<const S*>(y), yl, static_cast<bool*>(out), ol, n,
                                     a);
    else
      launch<binary_kernel<S, S>>(n, stream, op, static_cast<const S*>(x), xl,
                                  static_cast<const S*>(y), yl, static_cast<S*>(out), ol, n, a);
  });
}

void launch_where(DType dtype, const void* cond, const StridedLayout& cl, const void* a,
                  const StridedLayout& al, const void* b, const StridedLayout& bl, void* out,
                  const StridedLayout& ol, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_all(dtype, [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    launch<where_kernel<S>>(n, stream, static_cast<const bool*>(cond), cl, static_cast<const S*>(a),
                            al, static_cast<const S*>(b), bl, static_cast<S*>(out), ol, n);
  });
}

void launch_unary_backward(UnaryOp op, DType dtype, const void* g, const StridedLayout& gl,
                           const void* saved, const StridedLayout& sl, void* out,
                           const StridedLayout& ol, int64_t n, double a, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dtype, "unary backward", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    if constexpr (vector_type<S>) {
      constexpr int v = pack_of<S>();
      if (vectors_for(n, v,
                      {{g, &gl, sizeof(S)}, {saved, &sl, sizeof(S)}, {out, &ol, sizeof(S)}})) {
        if (op == UnaryOp::Gelu)
          launch<map2_vec_kernel<v, FixedUnaryBackwardF<float, UnaryOp::Gelu>, S, S, S>>(
              n / v, stream, FixedUnaryBackwardF<float, UnaryOp::Gelu>{a}, start_of<S>(g, gl),
              start_of<S>(saved, sl), start_of<S>(out, ol), n);
        else
          launch<map2_vec_kernel<v, UnaryBackwardF<float>, S, S, S>>(
              n / v, stream, UnaryBackwardF<float>{op, a}, start_of<S>(g, gl),
              start_of<S>(saved, sl), start_of<S>(out, ol), n);
        return;
      }
    }
    launch<unary_backward_kernel<S>>(n, stream, op, static_cast<const S*>(g), gl,
                                     static_cast<const S*>(saved), sl, static_cast<S*>(out), ol, n,
                                     a);
  });
}

void launch_binary_backward(BinaryOp op, int side, DType dtype, const void* g,
                            const StridedLayout& gl, const void* x, const StridedLayout& xl,
                            const void* y, const StridedLayout& yl, void* out,
                            const StridedLayout& ol, int64_t n, double a, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dtype, "binary backward", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    launch<binary_backward_kernel<S>>(n, stream, op, side, static_cast<const S*>(g), gl,
                                      static_cast<const S*>(x), xl, static_cast<const S*>(y), yl,
                                      static_cast<S*>(out), ol, n, a);
  });
}

// out (float32, or bool) = op(x, y, a) computed in float32, one of x and y stored
// as bfloat16 (x_bf16 says which): binary_kernel with a second storage type.
void launch_binary_mixed(BinaryOp op, bool x_bf16, const void* x, const StridedLayout& xl,
                         const void* y, const StridedLayout& yl, void* out, const StridedLayout& ol,
                         int64_t n, double a, DType out_dtype, cudaStream_t stream) {
  if (n == 0) return;
  using B = __nv_bfloat16;
  constexpr int v = pack_of<float>();
  const size_t oe = out_dtype == DType::Bool ? 1 : sizeof(float);
  if (vectors_for(n, v,
                  {{x, &xl, x_bf16 ? sizeof(B) : sizeof(float)},
                   {y, &yl, x_bf16 ? sizeof(float) : sizeof(B)},
                   {out, &ol, oe}})) {
    auto run = [&](auto* o) {
      using O = std::remove_pointer_t<decltype(o)>;
      if (!x_bf16)
        launch<map2_vec_kernel<v, BinaryF<float>, float, B, O>>(
            n / v, stream, BinaryF<float>{op, a}, start_of<float>(x, xl), start_of<B>(y, yl),
            start_of<O>(out, ol), n);
      else
        launch<map2_vec_kernel<v, BinaryF<float>, B, float, O>>(
            n / v, stream, BinaryF<float>{op, a}, start_of<B>(x, xl), start_of<float>(y, yl),
            start_of<O>(out, ol), n);
    };
    if (out_dtype == DType::Bool)
      run(static_cast<bool*>(nullptr));
    else
      run(static_cast<float*>(nullptr));
    return;
  }
  auto run = [&](auto* o) {
    using O = std::remove_pointer_t<decltype(o)>;
    if (!x_bf16)
      launch<binary_kernel<float, O, B>>(n, stream, op, static_cast<const float*>(x), xl,
                                         static_cast<const B*>(y), yl, o, ol, n, a);
    else
      launch<binary_kernel<B, O, float>>(n, stream, op, static_cast<const B*>(x), xl,
                                         static_cast<const float*>(y), yl, o, ol, n, a);
  };
  if (out_dtype == DType::Bool)
    run(static_cast<bool*>(out));
  else
    run(static_cast<float*>(out));
}

KernelLaunch binary_kernel_launch(DType dtype, int64_t n) {
  KernelLaunch l;
  dispatch_float(dtype, "binary", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    l.kernel = reinterpret_cast<const void*>(&binary_kernel<S, S>);
    l.handle = reinterpret_cast<const void*>(handle_of<binary_kernel<S, S>>());
  });
  l.grid = grid_for(n);
  l.block = kThreads;
  return l;
}

void launch_cast(DType from, const void* x, const StridedLayout& xl, DType to, void* y,
                 const StridedLayout& yl, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (from == to && transpose_copy()) {
    if (const std::optional<TransposePlan> p = transpose_plan(xl, yl)) {
      switch (element_size(from)) {
        case 1:
          return launch_transpose<uint8_t>(x, y, yl.offset, *p, stream);
        case 2:
          return launch_transpose<uint16_t>(x, y, yl.offset, *p, stream);
        case 4:
          return launch_transpose<uint32_t>(x, y, yl.offset, *p, stream);
        case 8:
          return launch_transpose<uint64_t>(x, y, yl.offset, *p, stream);
        default:
          break;
      }
    }
  }
  if (from == to && row_copy()) {
    if (const std::optional<RowCopyPlan> p =
            row_copy_plan(xl, yl, static_cast<int64_t>(element_size(from)),
                          reinterpret_cast<uintptr_t>(x), reinterpret_cast<uintptr_t>(y)))
      return launch_row_copy(x, y, *p, stream);
  }
  dispatch_all(from, [&](auto* ftag) {
    using F = std::remove_pointer_t<decltype(ftag)>;
    dispatch_all(to, [&](auto* ttag) {
      using T = std::remove_pointer_t<decltype(ttag)>;
      if constexpr (vector_type<F> && vector_type<T> && !std::is_same_v<F, T>) {
        constexpr int v = pack_of<F, T>();
        if (vectors_for(n, v, {{x, &xl, sizeof(F)}, {y, &yl, sizeof(T)}})) {
          launch<map1_vec_kernel<v, CastF, F, T>>(n / v, stream, CastF{}, start_of<F>(x, xl),
                                                  start_of<T>(y, yl), n);
          return;
        }
      }
      launch<cast_kernel<F, T>>(n, stream, static_cast<const F*>(x), xl, static_cast<T*>(y), yl, n);
    });
  });
}

void launch_fill(DType dtype, void* y, const StridedLayout& yl, int64_t n, double value,
                 double step, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_all(dtype, [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    launch<fill_kernel<S>>(n, stream, static_cast<S*>(y), yl, n, value, step);
  });
}

void launch_random(DType dtype, void* y, int64_t n, uint64_t seed, uint64_t offset, bool normal,
                   bool integer, double p0, double p1, const uint64_t* offset_base,
                   cudaStream_t stream) {
  if (n == 0) return;
  dispatch_numeric(dtype, "random", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    launch<random_kernel<S>>(n, stream, static_cast<S*>(y), n, seed, offset, normal, integer, p0,
                             p1, offset_base);
  });
}

namespace {

// Float32 and bfloat16 take the vector kernel where both operands are aligned to a pack
// (and EMBER_ELEMENTWISE_VECTORS is on); float64 and the rest the strided one.
void launch_dropout(const kernels::DropoutArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  EMBER_CHECK(!a.y_bf16 || a.dtype == DType::Float32,
              "dropout: a bfloat16 result is written from float32 input only, got ", a.dtype);
  const uint32_t key = dropout_key(a.seed);
  auto go = [&](auto* x_tag, auto* y_tag) {
    using X = std::remove_pointer_t<decltype(x_tag)>;
    using Y = std::remove_pointer_t<decltype(y_tag)>;
    using C = typename CompOf<Y>::type;
    const X* x = static_cast<const X*>(a.x);
    Y* y = static_cast<Y*>(a.y);
    if constexpr (vector_type<X> && vector_type<Y>) {
      constexpr int v = pack_of<X, Y>();
      const auto aligned = [](const void* p, size_t bytes) {
        return reinterpret_cast<uintptr_t>(p) % bytes == 0;
      };
      if (elementwise_vectors() && a.n >= v && aligned(x, sizeof(X) * v) &&
          aligned(y, sizeof(Y) * v)) {
        launch<dropout_vec_kernel<v, X, Y>>(a.n / v, stream, x, y, a.n, key, a.offset, a.threshold,
                                            static_cast<float>(a.scale), a.offset_base);
        return;
      }
    }
    launch<dropout_kernel<X, Y>>(a.n, stream, x, y, a.n, key, a.offset, a.threshold,
                                 static_cast<C>(a.scale), a.offset_base);
  };
  if (a.y_bf16) return go(static_cast<float*>(nullptr), static_cast<__nv_bfloat16*>(nullptr));
  dispatch_float(a.dtype, "dropout", [&](auto* tag) { go(tag, tag); });
}

}  // namespace

struct Words {
  uint64_t v[kMaxStoredWords];
};

__global__ void store_words_kernel(uint64_t* dst, Words w, int n) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < n) dst[i] = w.v[i];
}

void launch_store_words(uint64_t* dst, const uint64_t* values, int n, cudaStream_t stream) {
  EMBER_CHECK(n >= 0 && n <= kMaxStoredWords, "store_words: ", n, " words (at most ",
              kMaxStoredWords, ")");
  if (n == 0) return;
  Words w{};
  for (int i = 0; i < n; ++i) w.v[i] = values[i];
  store_words_kernel<<<1, kMaxStoredWords, 0, stream>>>(dst, w, n);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// ------------------------------------------------------------------ registration

namespace {
namespace entry {

void unary(const kernels::UnaryArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_unary(a.op, a.dtype, a.x, a.xl, a.y, a.yl, a.n, a.a, a.out_dtype,
               current_stream(a.device.index));
}

void unary_backward(const kernels::UnaryBackwardArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_unary_backward(a.op, a.dtype, a.g, a.gl, a.s, a.sl, a.out, a.ol, a.n, a.a,
                        current_stream(a.device.index));
}

void binary(const kernels::BinaryArgs& a) {
  DeviceGuard guard(a.device.index);
  if (a.x_bf16 || a.y_bf16) [[unlikely]] {
    EMBER_CHECK(a.dtype == DType::Float32 && a.x_bf16 != a.y_bf16 &&
                    (a.out_dtype == DType::Float32 || a.out_dtype == DType::Bool),
                binary_name(a.op),
                ": a bfloat16 operand is read as float32 beside one float32 operand only, into "
                "a float32 or bool result");
    launch_binary_mixed(a.op, a.x_bf16, a.x, a.xl, a.y, a.yl, a.out, a.ol, a.n, a.a, a.out_dtype,
                        current_stream(a.device.index));
    return;
  }
  launch_binary(a.op, a.dtype, a.x, a.xl, a.y, a.yl, a.out, a.ol, a.n, a.a, a.out_dtype,
                current_stream(a.device.index));
}

void where(const kernels::WhereArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_where(a.dtype, a.cond, a.cl, a.a, a.al, a.b, a.bl, a.out, a.ol, a.n,
               current_stream(a.device.index));
}

void binary_backward(const kernels::BinaryBackwardArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_binary_backward(a.op, a.side, a.dtype, a.g, a.gl, a.x, a.xl, a.y, a.yl, a.out, a.ol, a.n,
                         a.a, current_stream(a.device.index));
}

// A contiguous cast to the same dtype is a copy.
void cast(const kernels::CastArgs& a) {
  DeviceGuard guard(a.device.index);
  const cudaStream_t stream = current_stream(a.device.index);
  if (a.xl.contiguous && a.yl.contiguous && a.from == a.to) {
    const int64_t es = static_cast<int64_t>(element_size(a.to));
    EMBER_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(a.y) + a.yl.offset * es,
                                     static_cast<const char*>(a.x) + a.xl.offset * es,
                                     static_cast<size_t>(a.n * es), cudaMemcpyDeviceToDevice,
                                     stream));
    return;
  }
  launch_cast(a.from, a.x, a.xl, a.to, a.y, a.yl, a.n, stream);
}

void fill(const kernels::FillArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_fill(a.dtype, a.y, a.yl, a.n, a.value, a.step, current_stream(a.device.index));
}

void random(const kernels::RandomArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_random(a.dtype, a.y, a.n, a.seed, a.offset, a.normal, a.integer, a.p0, a.p1, a.offset_base,
                current_stream(a.device.index));
}

void dropout(const kernels::DropoutArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_dropout(a, current_stream(a.device.index));
}

}  // namespace entry
}  // namespace

void register_elementwise(kernels::KernelFamilies& t) {
  t.unary = &entry::unary;
  t.unary_backward = &entry::unary_backward;
  t.binary = &entry::binary;
  t.binary_backward = &entry::binary_backward;
  t.where = &entry::where;
  t.cast = &entry::cast;
  t.fill = &entry::fill;
  t.random = &entry::random;
  t.dropout = &entry::dropout;
}

}  // namespace ember::cuda
