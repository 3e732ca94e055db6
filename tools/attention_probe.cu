// attention_probe: a standalone check and timing of ember's fused attention
// (cuda/kernels/attention.cu) on one GPU, built by tools/attention_probe.sh with
// nvcc alone (no CMake build).
//
// Check: random bf16 q, k, v, d_out (fresh per case), outputs poisoned with NaN,
// then forward, backward (atomic dQ) and backward (deterministic dQ, run twice
// and compared bit for bit) against a naive float32 reference on the GPU
// (S = scale Q K^T, masked softmax, O = P V; dP = dO V^T, dS = P (dP - rowsum(P dP)),
// dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO) on the same bf16 inputs.
// Prints ||ours - ref|| / ||ref|| for O, LSE, dQ, dK, dV and the count of
// non-finite outputs; a case passes at <= 1e-2 each and no non-finite value.
// Time: forward, forward+backward and forward+backward deterministic, CUDA events
// around each single run after warm-up, the median of PROBE_REPS (default 25)
// with [min-max], TFLOP/s with FLOPs 4 B H T^2 D forward (halved causal) and x3.5
// for forward+backward. Each timed shape is first checked on its first (b, h)
// slices against the reference.
//
// Usage: attention_probe [--sanitize] [--check-only] [--time-only]
//   --sanitize: two small shapes, checks only (for compute-sanitizer).
// Exit status: 0 when every check passed, 1 when one failed, 3 on a CUDA error.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/kernels/attention.h"

using namespace ember;
using namespace ember::cuda;

namespace {

#define CK(expr)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (expr);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, \
                  #expr);                                                                     \
      std::fflush(stdout);                                                                    \
      std::exit(3);                                                                           \
    }                                                                                         \
  } while (0)

using bf16 = __nv_bfloat16;
constexpr double kTol = 1e-2;

// ---------------------------------------------------------------- device buffers

template <typename T>
struct Buf {
  T* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t count) : n(count) {
    CK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
  }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void poison() { CK(cudaMemset(p, 0xFF, std::max<size_t>(n, 1) * sizeof(T))); }
};

__device__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Uniform in [-amp, amp), rounded to bf16.
__global__ void fill_random(bf16* x, size_t n, uint64_t seed, float amp) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float u = (hash32(seed * 0x9E3779B97F4A7C15ULL + i) >> 8) * (1.f / 16777216.f);
    x[i] = __float2bfloat16((2.f * u - 1.f) * amp);
  }
}

// ------------------------------------------------------------------ reference

// A (B, H, T, D) strided view, for the reference kernels.
struct View {
  const bf16* p;
  int64_t sb, sh, st;
  __device__ float at(int b, int h, int t, int d) const {
    return __bfloat162float(p[b * sb + h * sh + t * st + d]);
  }
};

struct RefShape {
  int H, tq, tk, D;
  float scale;
  bool causal;
};

// Slices s = 0 .. n-1 stand for (b, h) = (s / H, s % H).
__global__ void ref_scores(View q, View k, RefShape s, float* S, int slices) {
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t total = int64_t(slices) * s.tq * s.tk;
  if (idx >= total) return;
  const int j = int(idx % s.tk);
  const int i = int((idx / s.tk) % s.tq);
  const int sl = int(idx / (int64_t(s.tk) * s.tq));
  const int b = sl / s.H, h = sl % s.H;
  float acc = 0.f;
  for (int d = 0; d < s.D; ++d) acc += q.at(b, h, i, d) * k.at(b, h, j, d);
  S[idx] = (s.causal && j > i) ? -INFINITY : acc * s.scale;
}

// Row softmax in place; lse per row. A block per row.
__global__ void ref_softmax(float* S, float* lse, int tk) {
  float* row = S + blockIdx.x * int64_t(tk);
  __shared__ float red[256];
  float m = -INFINITY;
  for (int j = threadIdx.x; j < tk; j += blockDim.x) m = fmaxf(m, row[j]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int o = 128; o > 0; o >>= 1) {
    if (int(threadIdx.x) < o) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + o]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int j = threadIdx.x; j < tk; j += blockDim.x) sum += expf(row[j] - m);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int o = 128; o > 0; o >>= 1) {
    if (int(threadIdx.x) < o) red[threadIdx.x] += red[threadIdx.x + o];
    __syncthreads();
  }
  sum = red[0];
  for (int j = threadIdx.x; j < tk; j += blockDim.x) row[j] = expf(row[j] - m) / sum;
  if (threadIdx.x == 0) lse[blockIdx.x] = m + logf(sum);
}

// out[sl][i][d] = mul * sum_j M[sl][i][j] X(b, h, j, d)   (M: (slices, rows, inner))
__global__ void ref_mat_by_view(const float* M, View x, int H, int rows, int inner, int D,
                                float mul, float* out, int slices) {
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= int64_t(slices) * rows * D) return;
  const int d = int(idx % D);
  const int i = int((idx / D) % rows);
  const int sl = int(idx / (int64_t(D) * rows));
  const float* m = M + (int64_t(sl) * rows + i) * inner;
  float acc = 0.f;
  for (int j = 0; j < inner; ++j) acc += m[j] * x.at(sl / H, sl % H, j, d);
  out[idx] = acc * mul;
}

// out[sl][j][d] = mul * sum_i M[sl][i][j] X(b, h, i, d)   (M transposed)
__global__ void ref_matT_by_view(const float* M, View x, int H, int rows, int inner, int D,
                                 float mul, float* out, int slices) {
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= int64_t(slices) * inner * D) return;
  const int d = int(idx % D);
  const int j = int((idx / D) % inner);
  const int sl = int(idx / (int64_t(D) * inner));
  const float* m = M + int64_t(sl) * rows * inner + j;
  float acc = 0.f;
  for (int i = 0; i < rows; ++i) acc += m[int64_t(i) * inner] * x.at(sl / H, sl % H, i, d);
  out[idx] = acc * mul;
}

// dP = dO V^T, then dS = P (dP - sum_j P dP) in place of dP. A block per row.
__global__ void ref_dp(View dout, View v, RefShape s, float* dP, int slices) {
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= int64_t(slices) * s.tq * s.tk) return;
  const int j = int(idx % s.tk);
  const int i = int((idx / s.tk) % s.tq);
  const int sl = int(idx / (int64_t(s.tk) * s.tq));
  float acc = 0.f;
  for (int d = 0; d < s.D; ++d)
    acc += dout.at(sl / s.H, sl % s.H, i, d) * v.at(sl / s.H, sl % s.H, j, d);
  dP[idx] = acc;
}
__global__ void ref_ds(const float* P, float* dP, int tk) {
  const float* p = P + blockIdx.x * int64_t(tk);
  float* g = dP + blockIdx.x * int64_t(tk);
  __shared__ float red[256];
  float sum = 0.f;
  for (int j = threadIdx.x; j < tk; j += blockDim.x) sum += p[j] * g[j];
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int o = 128; o > 0; o >>= 1) {
    if (int(threadIdx.x) < o) red[threadIdx.x] += red[threadIdx.x + o];
    __syncthreads();
  }
  sum = red[0];
  for (int j = threadIdx.x; j < tk; j += blockDim.x) g[j] = p[j] * (g[j] - sum);
}

unsigned blocks_for(int64_t n, int threads = 256) {
  return unsigned((n + threads - 1) / threads);
}

// ------------------------------------------------------------------ a problem

struct Case {
  int B, H, tq, tk, D;
  bool causal;
  bool bthd;        // storage (B, T, H, D) viewed as (B, H, T, D); else contiguous (B, H, T, D)
  float amp = 2.f;  // inputs uniform in [-amp, amp)
};

struct Tensors {
  Case c;
  int64_t sb_q, sh_q, st_q, sb_k, sh_k, st_k;
  Buf<bf16> q, k, v, o, dout, dq, dk, dv;
  Buf<float> lse;
  Buf<char> ws;
  size_t ws_bytes;
  AttentionProblem prob;

  static int64_t count(const Case& c, int t) { return int64_t(c.B) * c.H * t * c.D; }
  static AttentionProblem problem_of(const Case& c) {
    AttentionProblem p;
    p.dtype = DType::BFloat16;
    p.batch = c.B;
    p.heads = c.H;
    p.q_len = c.tq;
    p.kv_len = c.tk;
    p.head_dim = c.D;
    p.scale = 1.f / std::sqrt(float(c.D));
    p.causal = c.causal;
    return p;
  }
  static size_t workspace_of(const Case& c) {
    return std::max(attention_backward_workspace_bytes(problem_of(c), false),
                    attention_backward_workspace_bytes(problem_of(c), true));
  }
  explicit Tensors(const Case& cs)
      : c(cs),
        q(count(cs, cs.tq)),
        k(count(cs, cs.tk)),
        v(count(cs, cs.tk)),
        o(count(cs, cs.tq)),
        dout(count(cs, cs.tq)),
        dq(count(cs, cs.tq)),
        dk(count(cs, cs.tk)),
        dv(count(cs, cs.tk)),
        lse(int64_t(cs.B) * cs.H * cs.tq),
        ws(workspace_of(cs)),
        ws_bytes(workspace_of(cs)),
        prob(problem_of(cs)) {
    set_strides(cs.tq, sb_q, sh_q, st_q);
    set_strides(cs.tk, sb_k, sh_k, st_k);
  }
  void set_strides(int t, int64_t& sb, int64_t& sh, int64_t& st) const {
    if (c.bthd) {
      sb = int64_t(t) * c.H * c.D, sh = c.D, st = int64_t(c.H) * c.D;
    } else {
      sb = int64_t(c.H) * t * c.D, sh = int64_t(t) * c.D, st = c.D;
    }
  }
  AttentionInput in_q(const bf16* p) const { return {p, sb_q, sh_q, st_q}; }
  AttentionInput in_k(const bf16* p) const { return {p, sb_k, sh_k, st_k}; }
  AttentionOutput out_q(bf16* p) const { return {p, sb_q, sh_q, st_q}; }
  AttentionOutput out_k(bf16* p) const { return {p, sb_k, sh_k, st_k}; }
  View view_q(const bf16* p) const { return {p, sb_q, sh_q, st_q}; }
  View view_k(const bf16* p) const { return {p, sb_k, sh_k, st_k}; }

  void randomize(uint64_t seed) {
    fill_random<<<1024, 256>>>(q.p, q.n, seed * 4 + 0, c.amp);
    fill_random<<<1024, 256>>>(k.p, k.n, seed * 4 + 1, c.amp);
    fill_random<<<1024, 256>>>(v.p, v.n, seed * 4 + 2, 1.f);
    fill_random<<<1024, 256>>>(dout.p, dout.n, seed * 4 + 3, 1.f);
    CK(cudaGetLastError());
  }
  // Version 1 (mma.sync), 4 or 8 warps.
  void forward(int warps = 0) {
    AttentionTuning tuning;
    tuning.forward_version = 1;
    tuning.forward_warps = warps;
    launch_attention_forward(prob, in_q(q.p), in_k(k.p), in_k(v.p), out_q(o.p), lse.p, nullptr,
                             tuning);
  }
  void forward_sm90(int key_tile, bool pipelined = false) {
    launch_attention_forward_sm90(prob, in_q(q.p), in_k(k.p), in_k(v.p), out_q(o.p), lse.p, nullptr,
                                  key_tile, pipelined);
  }
  // Version 4 (warp-specialised: TMA producer, ping-pong consumers).
  void forward_ws(int key_tile, bool persistent = true, bool overlap = false, int consumers = 2) {
    launch_attention_forward_sm90_ws(prob, in_q(q.p), in_k(k.p), in_k(v.p), out_q(o.p), lse.p,
                                     nullptr, key_tile, persistent, overlap, consumers);
  }
  // The library's default forward (versions 4 or 2 on sm_90; see docs/attention.md).
  void forward_default() {
    launch_attention_forward(prob, in_q(q.p), in_k(k.p), in_k(v.p), out_q(o.p), lse.p, nullptr);
  }
  // query_tile: the deterministic dK/dV kernel's query rows per tile (0: default).
  // version: AttentionTuning::backward_version (2: wgmma, deterministic only).
  void backward(bool deterministic, int query_tile = 0, int version = 0) {
    const cudaStream_t st = nullptr;
    AttentionTuning tuning;
    tuning.backward_query_tile = query_tile;
    tuning.backward_version = version;
    launch_attention_backward(prob, in_q(q.p), in_k(k.p), in_k(v.p), in_q(o.p), in_q(dout.p), lse.p,
                              out_q(dq.p), out_k(dk.p), out_k(dv.p), deterministic, ws.p, ws_bytes,
                              st, tuning);
  }
};

// The reference's outputs for the first `slices` (b, h) pairs, as float.
struct Reference {
  std::vector<float> o, lse, dq, dk, dv;
};

Reference run_reference(Tensors& t, int slices) {
  const Case& c = t.c;
  const RefShape rs{c.H, c.tq, c.tk, c.D, t.prob.scale, c.causal};
  const int64_t nS = int64_t(slices) * c.tq * c.tk;
  Buf<float> P(nS), dS(nS), lse(int64_t(slices) * c.tq);
  Buf<float> o(int64_t(slices) * c.tq * c.D), dq(int64_t(slices) * c.tq * c.D),
      dk(int64_t(slices) * c.tk * c.D), dv(int64_t(slices) * c.tk * c.D);
  ref_scores<<<blocks_for(nS), 256>>>(t.view_q(t.q.p), t.view_k(t.k.p), rs, P.p, slices);
  CK(cudaGetLastError());
  ref_softmax<<<unsigned(int64_t(slices) * c.tq), 256>>>(P.p, lse.p, c.tk);
  CK(cudaGetLastError());
  ref_mat_by_view<<<blocks_for(o.n), 256>>>(P.p, t.view_k(t.v.p), c.H, c.tq, c.tk, c.D, 1.f, o.p,
                                            slices);
  CK(cudaGetLastError());
  ref_dp<<<blocks_for(nS), 256>>>(t.view_q(t.dout.p), t.view_k(t.v.p), rs, dS.p, slices);
  CK(cudaGetLastError());
  ref_ds<<<unsigned(int64_t(slices) * c.tq), 256>>>(P.p, dS.p, c.tk);
  CK(cudaGetLastError());
  ref_mat_by_view<<<blocks_for(dq.n), 256>>>(dS.p, t.view_k(t.k.p), c.H, c.tq, c.tk, c.D,
                                             t.prob.scale, dq.p, slices);
  CK(cudaGetLastError());
  ref_matT_by_view<<<blocks_for(dk.n), 256>>>(dS.p, t.view_q(t.q.p), c.H, c.tq, c.tk, c.D,
                                              t.prob.scale, dk.p, slices);
  CK(cudaGetLastError());
  ref_matT_by_view<<<blocks_for(dv.n), 256>>>(P.p, t.view_q(t.dout.p), c.H, c.tq, c.tk, c.D, 1.f,
                                              dv.p, slices);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  Reference r;
  auto get = [](const Buf<float>& b) {
    std::vector<float> h(b.n);
    CK(cudaMemcpy(h.data(), b.p, b.n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  };
  r.o = get(o), r.lse = get(lse), r.dq = get(dq), r.dk = get(dk), r.dv = get(dv);
  return r;
}

// Our (b, h, t, d) output for the first `slices` slices, as float in (slice, t, d) order.
std::vector<float> gather(const Buf<bf16>& buf, const Tensors& t, bool q_side, int slices) {
  const Case& c = t.c;
  std::vector<bf16> all(buf.n);
  CK(cudaMemcpy(all.data(), buf.p, buf.n * sizeof(bf16), cudaMemcpyDeviceToHost));
  const int T = q_side ? c.tq : c.tk;
  const int64_t sb = q_side ? t.sb_q : t.sb_k, sh = q_side ? t.sh_q : t.sh_k,
                st = q_side ? t.st_q : t.st_k;
  std::vector<float> out(int64_t(slices) * T * c.D);
  for (int sl = 0; sl < slices; ++sl)
    for (int i = 0; i < T; ++i)
      for (int d = 0; d < c.D; ++d)
        out[(int64_t(sl) * T + i) * c.D + d] =
            __bfloat162float(all[(sl / c.H) * sb + (sl % c.H) * sh + int64_t(i) * st + d]);
  return out;
}

struct Err {
  double rel;
  int64_t bad;
};
Err rel_err(const std::vector<float>& ours, const std::vector<float>& ref) {
  double num = 0, den = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ours[i])) {
      ++bad;
      continue;
    }
    const double d = double(ours[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return {den > 0 ? std::sqrt(num / den) : std::sqrt(num), bad};
}

int g_failures = 0;
bool g_sm90 = false;      // device 0 is compute capability 9.0: version 2 runs
bool g_v2_ok64 = true;    // every check of version 2 with 64-key tiles passed so far
bool g_v2_ok128 = true;   // ... with 128-key tiles
bool g_v3_ok64 = true;    // the pipelined version 2 (forward_version 3), 64-key tiles
bool g_v3_ok128 = true;   // ... 128-key tiles
bool g_v4_ok64 = true;    // the warp-specialised forward (forward_version 4), 64-key tiles
bool g_v4_ok128 = true;   // ... 128-key tiles
bool g_v5_ok64 = true;    // forward version 5 (version 4 with the intra-warpgroup overlap)
bool g_v5_ok128 = true;   // ... 128-key tiles
bool g_v6_ok64 = true;    // version 5 with three consumer warpgroups (head dim 64)
bool g_v6_ok128 = true;   // ... 128-key tiles
bool g_fwd_only = false;  // --fwd-only: time the sm_90 forwards alone
bool g_v2_bwd_ok = true;  // every check of version 2 of the backward passed so far
bool g_v3_bwd_ok = true;  // ... of version 3 (the warp-specialised dK/dV kernel)
bool g_v4_bwd_ok = true;  // ... of version 4 (version 2's dK/dV kernel with the atomic dQ)
bool g_bwd4 = false;      // PROBE_BWD4=1: check and time backward version 4 too
bool g_skip_fwd = false;  // PROBE_SKIP_FWD=1: --fwd-only times the backwards only

std::string describe(const Case& c) {
  char s[128];
  std::snprintf(s, sizeof s, "B%d H%d Tq%d Tk%d D%d %s %s amp%.0f", c.B, c.H, c.tq, c.tk, c.D,
                c.causal ? "causal" : "full  ", c.bthd ? "BTHD" : "BHTD", c.amp);
  return s;
}

bool report(const char* what, Err e) {
  const bool ok = e.bad == 0 && e.rel <= kTol && std::isfinite(e.rel);
  std::printf(" %s %.2e%s", what, e.rel, e.bad ? " NONFINITE" : "");
  if (e.bad) std::printf("(%lld)", static_cast<long long>(e.bad));
  return ok;
}

// Checks one case: forward (v1 4 and 8 warps, v2 both tiles on sm_90), both
// backward modes, determinism. Returns whether version 1 passed.
bool check_case(Tensors& t, int slices, uint64_t seed) {
  const Case& c = t.c;
  t.randomize(seed);
  Reference ref = run_reference(t, slices);
  std::vector<float> lse_ref = ref.lse;

  t.o.poison(), t.lse.poison(), t.dq.poison(), t.dk.poison(), t.dv.poison();
  t.forward();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> lse(t.lse.n);
  CK(cudaMemcpy(lse.data(), t.lse.p, lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
  lse.resize(size_t(slices) * c.tq);
  bool ok = true;
  std::printf("%-44s fwd:", describe(c).c_str());
  ok &= report("O", rel_err(gather(t.o, t, true, slices), ref.o));
  ok &= report("LSE", rel_err(lse, lse_ref));
  // The 8-warp forward variant (128 query rows a block) on the same inputs.
  t.o.poison(), t.lse.poison();
  t.forward(8);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(lse.data(), t.lse.p, lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::printf(" | fwd8:");
  ok &= report("O", rel_err(gather(t.o, t, true, slices), ref.o));
  ok &= report("LSE", rel_err(lse, lse_ref));
  // Version 2 (wgmma, sm_90a), both key tiles, where the device is sm_90.
  bool v2_all = true;
  if (g_sm90) {
    for (int pipe = 0; pipe < 6; ++pipe)
      for (int tile : {64, 128}) {
        if (pipe == 5 && c.D != 64) continue;  // three consumers: head dim 64 only
        t.o.poison(), t.lse.poison();
        if (pipe >= 2)
          t.forward_ws(tile, pipe != 3, pipe >= 4, pipe == 5 ? 3 : 2);
        else
          t.forward_sm90(tile, pipe == 1);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(lse.data(), t.lse.p, lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
        std::printf(" | %s/%d:",
                    pipe == 5   ? "v6"
                    : pipe == 4 ? "v5"
                    : pipe == 3 ? "v4n"
                    : pipe == 2 ? "v4"
                    : pipe      ? "v3"
                                : "v2",
                    tile);
        const bool v2ok = report("O", rel_err(gather(t.o, t, true, slices), ref.o)) &
                          report("LSE", rel_err(lse, lse_ref));
        v2_all &= v2ok;
        if (pipe == 5)
          (tile == 64 ? g_v6_ok64 : g_v6_ok128) &= v2ok;
        else if (pipe == 4)
          (tile == 64 ? g_v5_ok64 : g_v5_ok128) &= v2ok;
        else if (pipe >= 2)
          (tile == 64 ? g_v4_ok64 : g_v4_ok128) &= v2ok;
        else if (pipe)
          (tile == 64 ? g_v3_ok64 : g_v3_ok128) &= v2ok;
        else
          (tile == 64 ? g_v2_ok64 : g_v2_ok128) &= v2ok;
      }
  }
  // The library's default forward (what the op layer runs); backward reads its O and lse.
  t.o.poison(), t.lse.poison();
  t.forward_default();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(lse.data(), t.lse.p, lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::printf(" | lib:");
  ok &= report("O", rel_err(gather(t.o, t, true, slices), ref.o));
  ok &= report("LSE", rel_err(lse, lse_ref));

  // Atomic, deterministic with the default query tile, deterministic with the other.
  const int other_tile = c.D == 128 ? 64 : 32;
  for (int mode = 0; mode < 3; ++mode) {
    t.dq.poison(), t.dk.poison(), t.dv.poison();
    t.backward(mode > 0, mode == 2 ? other_tile : 0, mode == 0 ? 1 : 0);  // atomic: v1's
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::printf(mode == 0 ? " | bwd:" : mode == 1 ? " | bwd-det:" : " | det/q%d:", other_tile);
    ok &= report("dQ", rel_err(gather(t.dq, t, true, slices), ref.dq));
    ok &= report("dK", rel_err(gather(t.dk, t, false, slices), ref.dk));
    ok &= report("dV", rel_err(gather(t.dv, t, false, slices), ref.dv));
  }
  // Version 2 of the backward (wgmma) where the device is sm_90, and its repeat.
  bool v2_bwd = true;
  if (g_sm90) {
    t.dq.poison(), t.dk.poison(), t.dv.poison();
    t.backward(true, 0, 2);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::printf(" | bwd-v2:");
    v2_bwd &= report("dQ", rel_err(gather(t.dq, t, true, slices), ref.dq));
    v2_bwd &= report("dK", rel_err(gather(t.dk, t, false, slices), ref.dk));
    v2_bwd &= report("dV", rel_err(gather(t.dv, t, false, slices), ref.dv));
    std::vector<bf16> a(t.dk.n), b(t.dk.n);
    CK(cudaMemcpy(a.data(), t.dk.p, a.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
    t.dk.poison();
    t.backward(true, 0, 2);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(b.data(), t.dk.p, b.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
    const bool same_v2 = std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
    std::printf(" v2-repeat %s", same_v2 ? "same" : "DIFFERENT");
    v2_bwd &= same_v2;
    g_v2_bwd_ok &= v2_bwd;
    v2_all &= v2_bwd;
    // Version 3: the same with the warp-specialised dK/dV kernel.
    bool v3_bwd = true;
    t.dq.poison(), t.dk.poison(), t.dv.poison();
    t.backward(true, 0, 3);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::printf(" | bwd-v3:");
    v3_bwd &= report("dQ", rel_err(gather(t.dq, t, true, slices), ref.dq));
    v3_bwd &= report("dK", rel_err(gather(t.dk, t, false, slices), ref.dk));
    v3_bwd &= report("dV", rel_err(gather(t.dv, t, false, slices), ref.dv));
    set_attention_backward_pingpong(false);
    t.dq.poison(), t.dk.poison(), t.dv.poison();
    t.backward(true, 0, 3);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    set_attention_backward_pingpong(true);
    std::printf(" | bwd-v3 no turns:");
    v3_bwd &= report("dQ", rel_err(gather(t.dq, t, true, slices), ref.dq));
    v3_bwd &= report("dK", rel_err(gather(t.dk, t, false, slices), ref.dk));
    v3_bwd &= report("dV", rel_err(gather(t.dv, t, false, slices), ref.dv));
    g_v3_bwd_ok &= v3_bwd;
    v2_all &= v3_bwd;
    // Version 4: the atomic mode, dQ's shares added in the dK/dV kernel.
    bool v4_bwd = g_bwd4;
    if (g_bwd4) {
      t.dq.poison(), t.dk.poison(), t.dv.poison();
      t.backward(false, 0, 4);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      std::printf(" | bwd-v4:");
      v4_bwd &= report("dQ", rel_err(gather(t.dq, t, true, slices), ref.dq));
      v4_bwd &= report("dK", rel_err(gather(t.dk, t, false, slices), ref.dk));
      v4_bwd &= report("dV", rel_err(gather(t.dv, t, false, slices), ref.dv));
      v2_all &= v4_bwd;
    }
    g_v4_bwd_ok &= v4_bwd;
  }
  // The deterministic mode again: the same bits (run again first: the last backward above
  // may have been version 4's atomic one).
  std::vector<bf16> first(t.dq.n), second(t.dq.n);
  t.backward(true);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(first.data(), t.dq.p, t.dq.n * sizeof(bf16), cudaMemcpyDeviceToHost));
  t.dq.poison();
  t.backward(true);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(second.data(), t.dq.p, t.dq.n * sizeof(bf16), cudaMemcpyDeviceToHost));
  const bool same = std::memcmp(first.data(), second.data(), first.size() * sizeof(bf16)) == 0;
  std::printf(" | det-repeat %s", same ? "same" : "DIFFERENT");
  ok &= same;
  std::printf("  %s%s\n", ok && v2_all ? "PASS" : "FAIL", ok && !v2_all ? " (v2 only)" : "");
  std::fflush(stdout);
  if (!ok || !v2_all) ++g_failures;
  return ok;  // version 1 forward and both backward modes; version 2 is flagged on its own
}

// ------------------------------------------------------------------ timing

struct Stat {
  double med, lo, hi;
};

template <typename F>
Stat time_it(F&& f, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  CK(cudaDeviceSynchronize());
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back()};
}

void time_case(const Case& c, int reps) {
  Tensors t(c);
  const int slices = std::min(c.B * c.H, c.tq >= 4096 ? 1 : 2);
  std::printf("check  ");
  if (!check_case(t, slices, 1000 + c.tq + c.D + c.causal)) {
    std::printf("TIME %-44s skipped: the check failed\n", describe(c).c_str());
    return;
  }
  const double fwd_flop = 4.0 * c.B * c.H * double(c.tq) * c.tk * c.D * (c.causal ? 0.5 : 1.0);
  auto tf = [](double flop, double ms) { return flop / (ms * 1e-3) / 1e12; };
  if (g_fwd_only) {
    // Version 2, version 4 one block a tile (v4n) and version 4 persistent (v4)
    // alternating, 5 rounds of `reps` each; per round the medians, then their median and
    // spread.
    for (int tile : {64, 128}) {
      if (g_skip_fwd) break;
      if (!(tile == 64 ? g_v2_ok64 && g_v4_ok64 : g_v2_ok128 && g_v4_ok128)) continue;
      const bool v5_ok = tile == 64 ? g_v5_ok64 : g_v5_ok128;
      const bool v6_ok = c.D == 64 && (tile == 64 ? g_v6_ok64 : g_v6_ok128);
      std::vector<double> v2, v4n, v4, v5, v6, ratio, ratio5, ratio6;
      for (int round = 0; round < 5; ++round) {
        v2.push_back(time_it([&] { t.forward_sm90(tile); }, reps).med);
        v4n.push_back(time_it([&] { t.forward_ws(tile, false); }, reps).med);
        v4.push_back(time_it([&] { t.forward_ws(tile, true); }, reps).med);
        ratio.push_back(v4.back() / v2.back());
        if (v5_ok) {
          v5.push_back(time_it([&] { t.forward_ws(tile, true, true); }, reps).med);
          ratio5.push_back(v5.back() / v4.back());
        }
        if (v6_ok) {
          v6.push_back(time_it([&] { t.forward_ws(tile, true, true, 3); }, reps).med);
          ratio6.push_back(v6.back() / v2.back());
        }
      }
      if (v6_ok) {
        std::sort(v6.begin(), v6.end());
        std::sort(ratio6.begin(), ratio6.end());
        std::printf(
            "TIME %-44s key tile %3d: fwd v6 (v5, three consumers) %.4f ms [%.4f-%.4f] %4.0f "
            "TF/s | v6/v2 %.3f [%.3f-%.3f]\n",
            describe(c).c_str(), tile, v6[2], v6[0], v6[4], tf(fwd_flop, v6[2]), ratio6[2],
            ratio6[0], ratio6[4]);
      }
      for (auto* v : {&v2, &v4n, &v4, &ratio}) std::sort(v->begin(), v->end());
      if (v5_ok) {
        std::sort(v5.begin(), v5.end());
        std::sort(ratio5.begin(), ratio5.end());
        std::printf(
            "TIME %-44s key tile %3d: fwd v5 (v4 + intra-warpgroup overlap) %.4f ms [%.4f-%.4f] "
            "%4.0f TF/s | v5/v4 %.3f [%.3f-%.3f]\n",
            describe(c).c_str(), tile, v5[2], v5[0], v5[4], tf(fwd_flop, v5[2]), ratio5[2],
            ratio5[0], ratio5[4]);
      }
      std::printf(
          "TIME %-44s key tile %3d: fwd v2 %.4f ms %4.0f TF/s | v4n %.4f ms [%.4f-%.4f] %4.0f "
          "TF/s | v4 %.4f ms [%.4f-%.4f] %4.0f TF/s | v4/v2 %.3f [%.3f-%.3f]\n",
          describe(c).c_str(), tile, v2[2], tf(fwd_flop, v2[2]), v4n[2], v4n[0], v4n[4],
          tf(fwd_flop, v4n[2]), v4[2], v4[0], v4[4], tf(fwd_flop, v4[2]), ratio[2], ratio[0],
          ratio[4]);
    }
    if (g_v2_bwd_ok && g_v3_bwd_ok) {
      // The library's default forward, then backward version 2, 3 or 4 (atomic),
      // alternating.
      auto fwd_bwd = [&](int version) {
        return time_it(
                   [&] {
                     t.forward_default();
                     t.backward(version != 4, 0, version);
                   },
                   reps)
            .med;
      };
      std::vector<double> b2, b3, b4, ratio, ratio4;
      for (int round = 0; round < 5; ++round) {
        b2.push_back(fwd_bwd(2));
        b3.push_back(fwd_bwd(3));
        ratio.push_back(b3.back() / b2.back());
        if (g_v4_bwd_ok) {
          b4.push_back(fwd_bwd(4));
          ratio4.push_back(b4.back() / b2.back());
        }
      }
      for (auto* v : {&b2, &b3, &ratio}) std::sort(v->begin(), v->end());
      std::printf(
          "TIME %-44s lib fwd + bwd v2 %.4f ms %4.0f TF/s | + bwd v3 %.4f ms [%.4f-%.4f] %4.0f "
          "TF/s | v3/v2 %.3f [%.3f-%.3f]\n",
          describe(c).c_str(), b2[2], tf(3.5 * fwd_flop, b2[2]), b3[2], b3[0], b3[4],
          tf(3.5 * fwd_flop, b3[2]), ratio[2], ratio[0], ratio[4]);
      if (g_v4_bwd_ok) {
        for (auto* v : {&b4, &ratio4}) std::sort(v->begin(), v->end());
        std::printf(
            "TIME %-44s lib fwd + bwd v4 (atomic dQ) %.4f ms [%.4f-%.4f] %4.0f TF/s | v4/v2 "
            "%.3f [%.3f-%.3f]\n",
            describe(c).c_str(), b4[2], b4[0], b4[4], tf(3.5 * fwd_flop, b4[2]), ratio4[2],
            ratio4[0], ratio4[4]);
      }
    }
    std::fflush(stdout);
    return;
  }
  const Stat f = time_it([&] { t.forward(); }, reps);
  const Stat f8 = time_it([&] { t.forward(8); }, reps);
  Stat v64{0, 0, 0}, v128{0, 0, 0};
  if (g_sm90 && g_v2_ok64) v64 = time_it([&] { t.forward_sm90(64); }, reps);
  if (g_sm90 && g_v2_ok128) v128 = time_it([&] { t.forward_sm90(128); }, reps);
  // The pipelined variant, each tile timed right after the unpipelined one above.
  Stat p64{0, 0, 0}, p128{0, 0, 0};
  if (g_sm90 && g_v3_ok64) p64 = time_it([&] { t.forward_sm90(64, true); }, reps);
  if (g_sm90 && g_v3_ok128) p128 = time_it([&] { t.forward_sm90(128, true); }, reps);
  const Stat fb = time_it(
      [&] {
        t.forward();
        t.backward(false);
      },
      reps);
  const Stat fbd = time_it(
      [&] {
        t.forward();
        t.backward(true);
      },
      reps);
  const int other_tile = c.D == 128 ? 64 : 32;
  const Stat fbo = time_it(
      [&] {
        t.forward();
        t.backward(true, other_tile);
      },
      reps);
  // The library's defaults end to end (the op layer's path).
  const Stat lf = time_it([&] { t.forward_default(); }, reps);
  const Stat lfb = time_it(
      [&] {
        t.forward_default();
        t.backward(kAttentionDeterministicDefault);
      },
      reps);
  // Version 2 of the backward after the library's default forward.
  Stat lfb2{0, 0, 0};
  if (g_sm90 && g_v2_bwd_ok)
    lfb2 = time_it(
        [&] {
          t.forward_default();
          t.backward(true, 0, 2);
        },
        reps);
  std::printf(
      "TIME %-44s fwd %.3f ms [%.3f-%.3f] %4.0f TF/s | fwd8 %.3f ms %4.0f TF/s | fwd+bwd %.3f ms "
      "[%.3f-%.3f] %4.0f TF/s | fwd+bwd det %.3f ms %4.0f TF/s\n",
      describe(c).c_str(), f.med, f.lo, f.hi, tf(fwd_flop, f.med), f8.med, tf(fwd_flop, f8.med),
      fb.med, fb.lo, fb.hi, tf(3.5 * fwd_flop, fb.med), fbd.med, tf(3.5 * fwd_flop, fbd.med));
  std::printf(
      "TIME %-44s bwd det query tile %d (default) %.3f ms | query tile %d %.3f ms (fwd+bwd, v1 "
      "fwd) | lib default: fwd %.3f ms %4.0f TF/s, fwd+bwd %.3f ms %4.0f TF/s\n",
      describe(c).c_str(), c.D == 128 ? 32 : 64, fbd.med, other_tile, fbo.med, lf.med,
      tf(fwd_flop, lf.med), lfb.med, tf(3.5 * fwd_flop, lfb.med));
  if (v64.med > 0 || v128.med > 0)
    std::printf(
        "TIME %-44s fwd v2 (wgmma) key tile 64: %.3f ms %4.0f TF/s | key tile 128: %.3f ms "
        "%4.0f TF/s (0: not run, its check failed)\n",
        describe(c).c_str(), v64.med, v64.med > 0 ? tf(fwd_flop, v64.med) : 0.0, v128.med,
        v128.med > 0 ? tf(fwd_flop, v128.med) : 0.0);
  if (p64.med > 0 || p128.med > 0)
    std::printf(
        "TIME %-44s fwd v3 (pipelined wgmma) key tile 64: %.3f ms [%.3f-%.3f] %4.0f TF/s | key "
        "tile 128: %.3f ms [%.3f-%.3f] %4.0f TF/s (0: not run, its check failed)\n",
        describe(c).c_str(), p64.med, p64.lo, p64.hi, p64.med > 0 ? tf(fwd_flop, p64.med) : 0.0,
        p128.med, p128.lo, p128.hi, p128.med > 0 ? tf(fwd_flop, p128.med) : 0.0);
  if (lfb2.med > 0)
    std::printf(
        "TIME %-44s fwd+bwd v2 (lib default fwd, wgmma bwd): %.3f ms [%.3f-%.3f] %4.0f TF/s | "
        "against lib default fwd+bwd: %.3fx\n",
        describe(c).c_str(), lfb2.med, lfb2.lo, lfb2.hi, tf(3.5 * fwd_flop, lfb2.med),
        lfb2.med / lfb.med);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  bool sanitize = false, check_only = false, time_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sanitize")
      sanitize = true;
    else if (a == "--check-only")
      check_only = true;
    else if (a == "--time-only")
      time_only = true;
    else if (a == "--fwd-only")
      g_fwd_only = true;
    else {
      std::printf(
          "usage: attention_probe [--sanitize] [--check-only] [--time-only] [--fwd-only]\n");
      return 2;
    }
  }
  int reps = 25;
  if (const char* r = std::getenv("PROBE_REPS")) reps = std::max(5, std::atoi(r));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, cc %d.%d\n", prop.name, prop.multiProcessorCount, prop.major,
              prop.minor);
  g_sm90 = prop.major == 9 && prop.minor == 0;
  if (const char* b4 = std::getenv("PROBE_BWD4")) g_bwd4 = std::string(b4) == "1";
  if (const char* sf = std::getenv("PROBE_SKIP_FWD")) g_skip_fwd = std::string(sf) == "1";
  try {
    if (sanitize) {
      const Case cases[] = {{1, 2, 77, 77, 64, true, true}, {1, 2, 130, 70, 128, false, false}};
      for (const Case& c : cases) {
        Tensors t(c);
        check_case(t, c.B * c.H, 7 + c.tq);
      }
    } else {
      if (!time_only) {
        std::printf("== checks (tolerance %.0e relative; NaN-poisoned outputs)\n", kTol);
        uint64_t seed = 1;
        const int lens[] = {1, 7, 127, 1000, 4097};
        for (int D : {64, 128})
          for (int causal = 0; causal < 2; ++causal)
            for (int T : lens) {
              Case c{T >= 4097 ? 1 : 2, T >= 4097 ? 2 : 3, T, T, D, causal == 1, (T % 2) == 1};
              Tensors t(c);
              check_case(t, c.B * c.H, seed++);
            }
        // Cross lengths (top-left causal), large scores (the online rescaling), BHTD.
        const Case extra[] = {{2, 3, 127, 1000, 64, false, false},
                              {2, 3, 127, 1000, 128, true, true},
                              {2, 3, 1000, 127, 64, true, false},
                              {1, 2, 300, 300, 128, true, false, 4.f},
                              {1, 2, 300, 300, 64, false, true, 4.f}};
        for (const Case& c : extra) {
          Tensors t(c);
          check_case(t, c.B * c.H, seed++);
        }
      }
      if (!check_only) {
        std::printf(
            "== timing (median of %d, [min-max]; FLOPs 4BHT^2D fwd, /2 causal, x3.5 "
            "fwd+bwd)\n",
            reps);
        const int shapes[][4] = {{8, 16, 1024, 64},
                                 {8, 16, 2048, 128},
                                 {16, 12, 1024, 64},
                                 {4, 16, 4096, 64},
                                 {2, 16, 8192, 128}};
        for (const auto& s : shapes)
          for (int causal = 1; causal >= 0; --causal)
            time_case({s[0], s[1], s[2], s[2], s[3], causal == 1, false}, reps);
      }
    }
  } catch (const std::exception& e) {
    std::printf("EXCEPTION: %s\n", e.what());
    return 3;
  }
  std::printf("%s: %d failed case(s)\n", g_failures ? "FAIL" : "ALL PASS", g_failures);
  return g_failures ? 1 : 0;
}
