// gemm_probe: a fast, standalone check and timing of ember's GEMM kernels on one
// GPU, built by tools/gemm_probe.sh with nvcc alone (no CMake build).
//
// For every kernel variant it runs a list of shapes, checks each result
//   - against cuBLASLt (same operands, fp32 output) with the epilogue applied
//     on the host: every element, norm-relative error, NaN count (outputs are
//     poisoned with NaN first, so an unwritten element counts), and
//   - against a float64 host reference on whole sampled rows and columns,
// and times ours and cuBLASLt: every variant of a case (tile, schedule, the
// main loop alone) and cuBLASLt with the same epilogue, in one loop that
// alternates them, PROBE_REPS (>= 5) single-launch timings each; prints the
// median, [min-max], TFLOP/s and cuBLASLt's time over ours (> 1: ours faster).
// Every variant is checked before it is timed. The `dispatch` group also
// prints what the dispatch rule (cuda/gemm_rule.h) picks beside which side
// was faster, and a SUMMARY line per shape. Any wrong answer makes the exit
// code non-zero.
//
// The parent process never touches CUDA: each group of cases runs in a forked
// child with a time limit, so a kernel that traps (the watchdog in a stuck
// mbarrier wait) or hangs fails its group and the other groups still run.
//
// Usage: gemm_probe [group ...]      groups: gemm_probe --list
// Environment: PROBE_TIMEOUT (s per group, default 150), PROBE_REPS (timed runs
// per variant, default 15, at least 5).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/gemm_rule.h"
#include "cuda/kernels/gemm.h"
#include "cuda/kernels/gemm_sm90.h"

using namespace ember;
using namespace ember::cuda;

namespace {

// ------------------------------------------------------------------ plumbing

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
#define CKL(expr)                                                                               \
  do {                                                                                          \
    cublasStatus_t s_ = (expr);                                                                 \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                          \
      std::printf("cuBLASLt error %d at %s:%d: %s\n", static_cast<int>(s_), __FILE__, __LINE__, \
                  #expr);                                                                       \
      std::fflush(stdout);                                                                      \
      std::exit(3);                                                                             \
    }                                                                                           \
  } while (0)

void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

int g_failures = 0;
std::vector<std::string> g_summary;  // SUMMARY lines of the dispatch group, printed at its end
int* g_watch_host = nullptr;         // mapped host memory the kernels report a stuck wait into
int* g_watch_dev = nullptr;          // its device alias, given to the kernels

float bf16_round(float f) {
  return __bfloat162float(__float2bfloat16_rn(f));
}
float tf32_trunc(float f) {  // what the tensor cores read of an fp32 operand
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u &= 0xFFFFE000u;
  std::memcpy(&f, &u, 4);
  return f;
}

double act_ref(Activation act, double v) {
  return activation_forward<double>(act, v);
}

// A device buffer with a host mirror of the values it was given.
struct Buf {
  void* d = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t b) : bytes(b) {
    if (b) CK(cudaMalloc(&d, b));
  }
  ~Buf() {
    if (d) cudaFree(d);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

// ------------------------------------------------------------------ cuBLASLt

// cuBLASLt's fused epilogue, for timing it against ours on the same work: bias
// (n) added along our rows, GELU with its input kept in aux (n % 8 == 0), or
// the row sums of our A (BGRADB: cuBLAS's B is our A^T, summed over k).
struct LtEpi {
  const void* bias = nullptr;
  bool relu = false, gelu = false;
  void* aux = nullptr;
  void* bgrad = nullptr;
};

// D (m, n, row-major, fp32 or the input dtype) = A B^T with A, B laid out as our
// kernels take them. Row-major D is column-major D^T (n x m) = op(B) op(A^T).
struct Lt {
  cublasLtHandle_t h = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = size_t{32} << 20;
  Lt() {
    CKL(cublasLtCreate(&h));
    CK(cudaMalloc(&ws, ws_bytes));
  }
  ~Lt() {
    cudaFree(ws);
    cublasLtDestroy(h);
  }
  // Returns false when cuBLASLt offers no algorithm.
  bool run(DType dt, int64_t m, int64_t n, int64_t k, const Sm90Operand& a, const Sm90Operand& b,
           void* d, DType out, cudaStream_t st, bool tf32 = true, const LtEpi* epi = nullptr) {
    const cudaDataType_t in_t = dt == DType::BFloat16 ? CUDA_R_16BF : CUDA_R_32F;
    const cudaDataType_t out_t = out == DType::BFloat16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t comp =
        dt == DType::Float32 && tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t desc;
    CKL(cublasLtMatmulDescCreate(&desc, comp, CUDA_R_32F));
    const cublasOperation_t op_a = b.k_major ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS's A = our B
    const cublasOperation_t op_b = a.k_major ? CUBLAS_OP_N : CUBLAS_OP_T;  // cuBLAS's B = our A^T
    CKL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    CKL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    if (epi != nullptr) {
      cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_DEFAULT;
      const void* ptr = nullptr;
      if (epi->bgrad != nullptr) {
        e = CUBLASLT_EPILOGUE_BGRADB, ptr = epi->bgrad;
      } else if (epi->gelu) {
        e = epi->aux != nullptr
                ? (epi->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                : (epi->bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
        ptr = epi->bias;
      } else if (epi->relu) {
        e = epi->bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU, ptr = epi->bias;
      } else if (epi->bias != nullptr) {
        e = CUBLASLT_EPILOGUE_BIAS, ptr = epi->bias;
      }
      CKL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
      if (ptr != nullptr)
        CKL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr,
                                           sizeof ptr));
      if (epi->gelu && epi->aux != nullptr) {
        const int64_t aux_ld = n;
        CKL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                           &epi->aux, sizeof epi->aux));
        CKL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                           sizeof aux_ld));
      }
    }
    cublasLtMatrixLayout_t la, lb, ld;
    if (b.k_major)
      CKL(cublasLtMatrixLayoutCreate(&la, in_t, k, n, b.ld));
    else
      CKL(cublasLtMatrixLayoutCreate(&la, in_t, n, k, b.ld));
    if (a.k_major)
      CKL(cublasLtMatrixLayoutCreate(&lb, in_t, k, m, a.ld));
    else
      CKL(cublasLtMatrixLayoutCreate(&lb, in_t, m, k, a.ld));
    CKL(cublasLtMatrixLayoutCreate(&ld, out_t, n, m, n));
    cublasLtMatmulPreference_t pref;
    CKL(cublasLtMatmulPreferenceCreate(&pref));
    CKL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ws_bytes, sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t res{};
    int count = 0;
    cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &res, &count);
    bool ok = count > 0;
    if (ok) {
      const float one = 1.f, zero = 0.f;
      CKL(cublasLtMatmul(h, desc, &one, b.data, la, a.data, lb, &zero, d, ld, d, ld, &res.algo, ws,
                         ws_bytes, st));
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(desc);
    return ok;
  }
};

Lt* g_lt = nullptr;

// ------------------------------------------------------------------ one case

enum class Pattern { Random, RowId, KId, ColId, KIdB };  // diag patterns (see fill)

// One way of running ours, timed beside the others of its case.
struct Variant {
  const char* name;
  Sm90Tile tile = Sm90Tile::Auto;
  Sm90Schedule sched = Sm90Schedule::Auto;
  bool no_epilogue = false;  // the main loop alone: writes nothing, not checked
};
const Variant kCoop256{"coop 128x256", Sm90Tile::k128x256, Sm90Schedule::Cooperative};
const Variant kCoop128{"coop 128x128", Sm90Tile::k128x128, Sm90Schedule::Cooperative};
const Variant kPing128{"pingpong 128x128", Sm90Tile::k128x128, Sm90Schedule::Pingpong};
const Variant kCoop256Loop{"coop 128x256 mainloop only", Sm90Tile::k128x256,
                           Sm90Schedule::Cooperative, true};
const Variant kPing128Loop{"pingpong 128x128 mainloop only", Sm90Tile::k128x128,
                           Sm90Schedule::Pingpong, true};
const std::vector<Variant> kSchedVariants = {kCoop256, kCoop128, kPing128, kCoop256Loop,
                                             kPing128Loop};

struct Case {
  const char* group = "";
  DType dt = DType::BFloat16;
  int64_t m = 0, n = 0, k = 0;
  bool a_k = true, b_k = true;  // operands K-major
  int64_t pad = 0;              // extra elements per operand row (strided rows)
  bool bias = false, pre = false, bias_grad = false;
  Activation act = Activation::None;
  DType out = DType::BFloat16;
  Sm90Tile tile = Sm90Tile::Auto;
  Sm90Schedule sched = Sm90Schedule::Auto;
  int max_tiles = 0, max_ctas = 0, group_m = 0;
  bool time = false;
  std::vector<Variant> variants;  // timed side by side (empty: the case's own tuning)
  bool rule = false;              // print what the dispatch rule picks (group dispatch)
  Pattern pat = Pattern::Random;
  enum Kernel { Sm90, Simt, MmaSync } kernel = Sm90;  // old kernels: forward layout only
};

const char* tile_name(Sm90Tile t) {
  switch (t) {
    case Sm90Tile::k128x256:
      return "128x256";
    case Sm90Tile::k128x128:
      return "128x128";
    default:
      return "auto";
  }
}
const char* sched_name(Sm90Schedule s) {
  switch (s) {
    case Sm90Schedule::Cooperative:
      return " coop";
    case Sm90Schedule::Pingpong:
      return " ping";
    default:
      return "";
  }
}
const char* act_name(Activation a) {
  return activation_name(a);
}

// Host values of one operand, logical (rows x k), stored per its layout.
struct Operand {
  std::vector<float> v;  // logical (r, k) at r * k + kk, already rounded to the dtype
  std::vector<uint16_t> bf;
  std::vector<float> f32;
  int64_t ld = 0;
  bool k_major = true;
};

void fill(Operand& op, DType dt, int64_t rows, int64_t k, bool k_major, int64_t pad, Pattern pat,
          bool is_a, std::mt19937_64& rng) {
  // xorshift64 for the values (the operands of the big cases are 10^8 elements).
  uint64_t st = rng() | 1;
  auto u = [&st](std::mt19937_64&) {
    st ^= st << 13, st ^= st >> 7, st ^= st << 17;
    return static_cast<float>(st >> 40) * (2.f / 16777216.f) - 1.f;
  };
  op.k_major = k_major;
  op.v.resize(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kk = 0; kk < k; ++kk) {
      float x;
      // Structured inputs make a layout error readable off the output: with a
      // one-hot operand, D(i, j) names the element of the other that arrived.
      switch (pat) {
        case Pattern::RowId:  // A(r, k) = r + 1; B one-hot (n % k == k)
          x = is_a ? static_cast<float>(r % 256 + 1) : (kk == r % k ? 1.f : 0.f);
          break;
        case Pattern::KId:  // A(r, k) = k + 1; B one-hot
          x = is_a ? static_cast<float>(kk % 256 + 1) : (kk == r % k ? 1.f : 0.f);
          break;
        case Pattern::ColId:  // A one-hot (m % k == k); B(n, k) = n + 1
          x = is_a ? (kk == r % k ? 1.f : 0.f) : static_cast<float>(r % 256 + 1);
          break;
        case Pattern::KIdB:  // A one-hot; B(n, k) = k + 1
          x = is_a ? (kk == r % k ? 1.f : 0.f) : static_cast<float>(kk % 256 + 1);
          break;
        default:
          x = u(rng);
      }
      op.v[static_cast<size_t>(r * k + kk)] = dt == DType::BFloat16 ? bf16_round(x) : tf32_trunc(x);
    }
  // Storage: K-major rows of k, or M/N-major rows of `rows` per k, each rounded
  // up to TMA's 16 bytes, plus pad elements (strided rows).
  const int64_t inner = k_major ? k : rows, outer = k_major ? rows : k;
  const int64_t align = dt == DType::BFloat16 ? 8 : 4;
  op.ld = (std::max<int64_t>(inner, 1) + align - 1) / align * align + pad;
  const size_t total = static_cast<size_t>(std::max<int64_t>(outer * op.ld, 1));
  if (dt == DType::BFloat16)
    op.bf.assign(total, 0x7FC0);  // NaN in the padding: it must never be read
  else
    op.f32.assign(total, std::nanf(""));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kk = 0; kk < k; ++kk) {
      const size_t at = static_cast<size_t>(k_major ? r * op.ld + kk : kk * op.ld + r);
      const float x = op.v[static_cast<size_t>(r * k + kk)];
      if (dt == DType::BFloat16) {
        const __nv_bfloat16 b = __float2bfloat16_rn(x);
        std::memcpy(&op.bf[at], &b, 2);
      } else {
        op.f32[at] = x;
      }
    }
}

float from_out(const std::vector<uint8_t>& raw, DType out, size_t i) {
  if (out == DType::Float32) {
    float f;
    std::memcpy(&f, raw.data() + 4 * i, 4);
    return f;
  }
  __nv_bfloat16 b;
  std::memcpy(&b, raw.data() + 2 * i, 2);
  return __bfloat162float(b);
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Stats {
  double median = 0, min = 0, max = 0;  // ms
};

// Times each fn (one launch each) with events: after 3 warm-up calls of each,
// `reps` rounds that call every fn once in turn (so clocks, temperature and L2
// state drift alike for all of them); per fn the median, min and max, in ms.
std::vector<Stats> time_alternating(const std::vector<std::function<void()>>& fns, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (const auto& fn : fns)
    for (int i = 0; i < 3; ++i) fn();
  CK(cudaDeviceSynchronize());
  std::vector<std::vector<float>> t(fns.size());
  for (int r = 0; r < reps; ++r)
    for (size_t f = 0; f < fns.size(); ++f) {
      CK(cudaEventRecord(a));
      fns[f]();
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      t[f].push_back(ms);
    }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::vector<Stats> out;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    out.push_back({median(v), v.front(), v.back()});
  }
  return out;
}

void check_watchdog(const char* where) {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    say("  !! %s: kernel failed: %s\n", where, cudaGetErrorString(e));
    const int* w = g_watch_host;
    if (w != nullptr && w[0] != 0) {
      const char* roles[] = {"?", "producer (empty wait)", "row-sum warps (full wait)",
                             "consumer (full wait)"};
      const int r = w[0];
      say("  !! watchdog: %s stuck: block %d tile %d k-step %d thread %d parity %d\n",
          roles[r >= 1 && r <= 3 ? r : 0], w[1], w[2], w[3], w[4], w[5]);
    }
    std::exit(4);
  }
}

// Runs one case: returns true when it passed.
bool run_case(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const DType dt = c.dt;
  const size_t esize = dt == DType::BFloat16 ? 2 : 4;
  const size_t osize = c.out == DType::Float32 ? 4 : 2;
  Operand A, B;
  fill(A, dt, c.m, c.k, c.a_k, c.pad, c.pat, true, rng);
  fill(B, dt, c.n, c.k, c.b_k, c.pad, c.pat, false, rng);
  std::vector<float> bias_v;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  if (c.bias)
    for (int64_t j = 0; j < c.n; ++j)
      bias_v.push_back(dt == DType::BFloat16 ? bf16_round(u(rng)) : u(rng));

  const size_t a_elems = dt == DType::BFloat16 ? A.bf.size() : A.f32.size();
  const size_t b_elems = dt == DType::BFloat16 ? B.bf.size() : B.f32.size();
  Buf da(a_elems * esize), db(b_elems * esize);
  CK(cudaMemcpy(da.d, dt == DType::BFloat16 ? static_cast<const void*>(A.bf.data()) : A.f32.data(),
                da.bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db.d, dt == DType::BFloat16 ? static_cast<const void*>(B.bf.data()) : B.f32.data(),
                db.bytes, cudaMemcpyHostToDevice));
  Buf dbias(c.bias ? c.n * esize : 0);
  if (c.bias) {
    std::vector<uint8_t> raw(c.n * esize);
    for (int64_t j = 0; j < c.n; ++j) {
      if (dt == DType::BFloat16) {
        const __nv_bfloat16 b = __float2bfloat16_rn(bias_v[j]);
        std::memcpy(raw.data() + 2 * j, &b, 2);
      } else {
        std::memcpy(raw.data() + 4 * j, &bias_v[j], 4);
      }
    }
    CK(cudaMemcpy(dbias.d, raw.data(), raw.size(), cudaMemcpyHostToDevice));
  }
  const size_t out_elems = static_cast<size_t>(c.m * c.n);
  Buf dd(std::max<size_t>(out_elems, 1) * osize), dpre(c.pre ? out_elems * osize : 0),
      dg(c.bias_grad ? c.m * osize : 0), dref(std::max<size_t>(out_elems, 1) * 4);
  auto poison = [&](Buf& b) {
    if (b.bytes) CK(cudaMemset(b.d, 0xFF, b.bytes));  // all-ones bits: NaN in bf16 and fp32
  };
  poison(dd);
  poison(dpre);
  poison(dg);

  const Sm90Operand oa{da.d, A.ld, A.k_major}, ob{db.d, B.ld, B.k_major};
  GemmEpilogue epi;
  epi.bias = c.bias ? dbias.d : nullptr;
  epi.pre = c.pre ? dpre.d : nullptr;
  epi.bias_grad = c.bias_grad ? dg.d : nullptr;
  epi.act = c.act;
  epi.out = c.out;
  Sm90Tuning tune;
  tune.tile = c.tile;
  tune.schedule = c.sched;
  tune.max_tiles = c.max_tiles;
  tune.max_ctas = c.max_ctas;
  tune.group_m = c.group_m;
  tune.watchdog = g_watch_dev;

  char label[256];
  std::snprintf(
      label, sizeof label, "%-5s %s %s%s %-7s%s %5lldx%5lldx%5lld%s act=%s%s%s%s out=%s%s", c.group,
      dt == DType::BFloat16 ? "bf16" : "tf32", c.a_k ? "K" : "M", c.b_k ? "K" : "N",
      c.kernel == Case::Sm90 ? tile_name(c.tile) : (c.kernel == Case::Simt ? "simt" : "mma.sync"),
      sched_name(c.sched), static_cast<long long>(c.m), static_cast<long long>(c.n),
      static_cast<long long>(c.k), c.pad ? " pad" : "", act_name(c.act), c.bias ? " +bias" : "",
      c.pre ? " +pre" : "", c.bias_grad ? " +dbias" : "", c.out == DType::Float32 ? "f32" : "bf16",
      c.max_tiles ? " (first tiles only)" : "");
  say("%s\n", label);

  auto launch_ours = [&]() {
    if (c.kernel == Case::Sm90) {
      launch_sm90_gemm(dt, c.m, c.n, c.k, oa, ob, dd.d, c.n, epi, nullptr, tune);
    } else {
      // The old forward kernels: x (m, k) w (n, k)^T, output in the input dtype.
      launch_linear_gemm(dt, da.d, A.ld, db.d, B.ld, epi.bias, dd.d, epi.pre, c.m, c.n, c.k, c.act,
                         nullptr, c.kernel == Case::Simt ? GemmTile::kF32Bk8 : GemmTile::Auto);
    }
  };
  try {
    launch_ours();
  } catch (const std::exception& e) {
    say("  !! launch threw: %s\n", e.what());
    ++g_failures;
    return false;
  }
  check_watchdog(label);

  // cuBLASLt reference in fp32 output (all elements), then the epilogue on the host.
  bool have_lt = c.m > 0 && c.n > 0 && c.k > 0 &&
                 g_lt->run(dt, c.m, c.n, c.k, oa, ob, dref.d, DType::Float32, nullptr);
  CK(cudaDeviceSynchronize());
  std::vector<uint8_t> got(out_elems * osize), got_pre(c.pre ? out_elems * osize : 0),
      got_g(c.bias_grad ? c.m * osize : 0);
  std::vector<float> ref(have_lt ? out_elems : 0);
  if (out_elems) CK(cudaMemcpy(got.data(), dd.d, got.size(), cudaMemcpyDeviceToHost));
  if (c.pre && out_elems)
    CK(cudaMemcpy(got_pre.data(), dpre.d, got_pre.size(), cudaMemcpyDeviceToHost));
  if (c.bias_grad && c.m) CK(cudaMemcpy(got_g.data(), dg.d, got_g.size(), cudaMemcpyDeviceToHost));
  if (have_lt) CK(cudaMemcpy(ref.data(), dref.d, out_elems * 4, cudaMemcpyDeviceToHost));

  // Tolerances: DESIGN.md's (bf16 output 1e-2; fp32 output of bf16 or tf32-exact
  // operands: only accumulation order differs, so 1e-4 catches any real bug).
  const double tol = c.out == DType::BFloat16 ? 1e-2 : 1e-4;
  bool ok = true;
  long long nan_count = 0, shown = 0;
  // (1) every element vs cuBLASLt + host epilogue
  auto expect_from = [&](double acc, int64_t j, bool want_pre) {
    double v = acc + (c.bias ? bias_v[j] : 0.0);
    return want_pre ? v : act_ref(c.act, v);
  };
  double e1 = -1, e1p = -1;
  auto compare_full = [&](const std::vector<uint8_t>& g, bool want_pre, double& err) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        const size_t at = static_cast<size_t>(i * c.n + j);
        const double r = expect_from(ref[at], j, want_pre);
        const double o = from_out(g, c.out, at);
        if (std::isnan(o)) {
          ++nan_count;
          if (shown < 8)
            say("  NaN at (%lld, %lld)%s expected %.6g\n", (long long)i, (long long)j,
                want_pre ? " [pre]" : "", r),
                ++shown;
          continue;
        }
        num += (o - r) * (o - r);
        den += r * r;
        if (shown < 8 && std::fabs(o - r) > 8 * tol * (std::fabs(r) + 1.0)) {
          say("  mismatch at (%lld, %lld)%s: got %.6g expected %.6g\n", (long long)i, (long long)j,
              want_pre ? " [pre]" : "", o, r);
          ++shown;
        }
      }
    err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  };
  if (have_lt) {
    compare_full(got, false, e1);
    if (c.pre) compare_full(got_pre, true, e1p);
  }
  // (2) float64 reference on whole sampled rows and columns (all when small).
  std::vector<int64_t> rows, cols;
  const bool small = c.m * c.n * c.k <= (int64_t{1} << 26);
  if (small) {
    for (int64_t i = 0; i < c.m; ++i) rows.push_back(i);
  } else {
    std::uniform_int_distribution<int64_t> ri(0, std::max<int64_t>(c.m - 1, 0)),
        ci(0, std::max<int64_t>(c.n - 1, 0));
    rows = {0, c.m - 1, c.m / 2, ri(rng)};
    cols = {0, c.n - 1, ci(rng)};
  }
  double num = 0, den = 0;
  long long nan64 = 0;
  std::vector<std::pair<int64_t, int64_t>> pts;
  for (int64_t i : rows)
    for (int64_t j = 0; j < c.n; ++j) pts.push_back({i, j});
  for (int64_t j : cols)
    for (int64_t i = 0; i < c.m; ++i) pts.push_back({i, j});
  std::vector<double> refs(pts.size());
  {
    const unsigned nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<std::thread> th;
    for (unsigned t = 0; t < nt; ++t)
      th.emplace_back([&, t] {
        for (size_t p = t; p < pts.size(); p += nt) {
          const int64_t i = pts[p].first, j = pts[p].second;
          double acc = 0;
          const float* ar = A.v.data() + i * c.k;
          const float* br = B.v.data() + j * c.k;
          for (int64_t kk = 0; kk < c.k; ++kk) acc += double(ar[kk]) * double(br[kk]);
          refs[p] = expect_from(acc, j, false);
        }
      });
    for (auto& x : th) x.join();
  }
  for (size_t p = 0; p < pts.size(); ++p) {
    const double o = from_out(got, c.out, static_cast<size_t>(pts[p].first * c.n + pts[p].second));
    if (std::isnan(o)) {
      ++nan64;
      continue;
    }
    num += (o - refs[p]) * (o - refs[p]);
    den += refs[p] * refs[p];
    if (!have_lt && shown < 8 && std::fabs(o - refs[p]) > 8 * tol * (std::fabs(refs[p]) + 1.0)) {
      say("  mismatch at (%lld, %lld): got %.6g expected %.6g (f64)\n", (long long)pts[p].first,
          (long long)pts[p].second, o, refs[p]);
      ++shown;
    }
  }
  const double e64 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  // (3) the bias gradient: row sums of A in float64.
  std::vector<double> row_sums(c.bias_grad ? static_cast<size_t>(c.m) : 0);
  for (size_t i = 0; i < row_sums.size(); ++i)
    for (int64_t kk = 0; kk < c.k; ++kk) row_sums[i] += A.v[i * static_cast<size_t>(c.k) + kk];
  auto bias_grad_error = [&](const std::vector<uint8_t>& got_g) {
    double gn = 0, gd = 0;
    for (int64_t i = 0; i < c.m; ++i) {
      const double s = row_sums[static_cast<size_t>(i)];
      const double o = from_out(got_g, c.out, static_cast<size_t>(i));
      if (std::isnan(o)) {
        ++nan_count;
        if (shown < 8) say("  NaN in bias_grad[%lld]\n", (long long)i), ++shown;
        continue;
      }
      if (shown < 8 && std::fabs(o - s) > 8 * tol * (std::fabs(s) + 1.0))
        say("  bias_grad[%lld]: got %.6g expected %.6g\n", (long long)i, o, s), ++shown;
      gn += (o - s) * (o - s);
      gd += s * s;
    }
    return gd > 0 ? std::sqrt(gn / gd) : std::sqrt(gn);
  };
  const double eg = c.bias_grad ? bias_grad_error(got_g) : -1;
  ok = nan_count == 0 && nan64 == 0 && e64 <= tol && (e1 < 0 || e1 <= tol) &&
       (e1p < 0 || e1p <= tol) && (eg < 0 || eg <= tol);
  say("  %s  err_vs_lt %.2e%s  err_f64 %.2e (%zu pts)%s  NaN %lld\n", ok ? "PASS" : "FAIL", e1,
      c.pre ? (std::string(" pre ") + std::to_string(e1p)).c_str() : "", e64, pts.size(),
      c.bias_grad ? (std::string("  dbias ") + std::to_string(eg)).c_str() : "", nan_count + nan64);
  if (!ok) ++g_failures;
  if (!ok && c.pat != Pattern::Random && out_elems) {
    // The output of a structured case names its source elements (see fill):
    // print a few rows from each 64-row half and columns across 8-column groups.
    say("  D (rows x cols), got / expected:\n");
    for (int64_t i : {0, 1, 7, 8, 15, 16, 63, 64, 65, 127}) {
      if (i >= c.m) continue;
      say("   row %3lld:", (long long)i);
      for (int64_t j : {0, 1, 2, 7, 8, 9, 15, 16, 63, 64, 127, 128, 255}) {
        if (j >= c.n) continue;
        const size_t at = static_cast<size_t>(i * c.n + j);
        say(" %g/%g", from_out(got, c.out, at), have_lt ? expect_from(ref[at], j, false) : 0.0);
      }
      say("\n");
    }
  }

  if (!c.time || !ok) return ok;

  // ---- timing: cuBLASLt (same epilogue) and every variant of ours, alternating.
  std::vector<Variant> vars = c.variants;
  if (vars.empty())
    vars.push_back(Variant{c.kernel == Case::Sm90   ? "ours"
                           : c.kernel == Case::Simt ? "ours simt"
                                                    : "ours mma.sync",
                           c.tile, c.sched});
  // Checks variant v's outputs against the reference computed above.
  auto check_variant = [&](const Variant& v, const Sm90Tuning& t) {
    poison(dd), poison(dpre), poison(dg);
    launch_sm90_gemm(dt, c.m, c.n, c.k, oa, ob, dd.d, c.n, epi, nullptr, t);
    check_watchdog(label);
    if (out_elems) CK(cudaMemcpy(got.data(), dd.d, got.size(), cudaMemcpyDeviceToHost));
    if (c.pre && out_elems)
      CK(cudaMemcpy(got_pre.data(), dpre.d, got_pre.size(), cudaMemcpyDeviceToHost));
    if (c.bias_grad && c.m)
      CK(cudaMemcpy(got_g.data(), dg.d, got_g.size(), cudaMemcpyDeviceToHost));
    nan_count = 0, shown = 0;
    double ev = -1, evp = -1;
    if (have_lt) {
      compare_full(got, false, ev);
      if (c.pre) compare_full(got_pre, true, evp);
    }
    const double evg = c.bias_grad ? bias_grad_error(got_g) : -1;
    const bool good = have_lt && nan_count == 0 && ev <= tol && evp <= tol && evg <= tol;
    say("  %s  %-32s err_vs_lt %.2e%s NaN %lld\n", good ? "PASS" : "FAIL", v.name, ev,
        c.bias_grad ? (std::string(" dbias ") + std::to_string(evg)).c_str() : "", nan_count);
    if (!good) ++g_failures;
    return good;
  };
  std::vector<std::function<void()>> fns;
  std::vector<std::string> names;
  // cuBLASLt with the case's epilogue, into its own buffers (plain fp32 GEMM for
  // the SIMT kernel; SiLU has no cuBLASLt epilogue: bias only, said so).
  const bool simt = c.kernel == Case::Simt;
  Buf dlt(std::max<size_t>(out_elems, 1) * osize), dlt_pre(c.pre ? out_elems * osize : 0),
      dlt_g(c.bias_grad ? c.m * osize : 0);
  LtEpi le;
  le.bias = epi.bias;
  le.relu = c.act == Activation::Relu;
  le.gelu = c.act == Activation::GeluTanh;
  le.aux = le.gelu && c.pre ? dlt_pre.d : nullptr;
  le.bgrad = c.bias_grad ? dlt_g.d : nullptr;
  const LtEpi* lep = simt ? nullptr : &le;
  if (have_lt && lep != nullptr &&
      !g_lt->run(dt, c.m, c.n, c.k, oa, ob, dlt.d, c.out, nullptr, true, lep)) {
    say("  (cuBLASLt has no algorithm with this epilogue: timed without it)\n");
    lep = nullptr;
  }
  if (have_lt) {
    fns.push_back(
        [&, lep] { g_lt->run(dt, c.m, c.n, c.k, oa, ob, dlt.d, c.out, nullptr, !simt, lep); });
    std::string n = simt ? "cublasLt fp32 (no TF32)" : "cublasLt";
    if (lep != nullptr && (lep->bias || lep->gelu || lep->relu || lep->bgrad))
      n += std::string(" +") + (lep->bgrad  ? "BGRADB"
                                : lep->gelu ? (lep->aux ? "GELU_AUX_BIAS" : "GELU_BIAS")
                                : lep->relu ? "RELU_BIAS"
                                            : "BIAS");
    if (c.act == Activation::Silu) n += " (no SiLU)";
    names.push_back(n);
  }
  for (const Variant& v : vars) {
    Sm90Tuning t = tune;
    if (c.kernel == Case::Sm90 && c.variants.size() > 0) {
      t.tile = v.tile, t.schedule = v.sched, t.no_epilogue = v.no_epilogue;
      if (!v.no_epilogue) {
        bool good = false;
        try {
          good = check_variant(v, t);
        } catch (const std::exception& e) {
          say("  !! %s: %s\n", v.name, e.what());
          ++g_failures;
        }
        if (!good) continue;  // a wrong answer is not timed
      }
    }
    if (c.kernel == Case::Sm90)
      fns.push_back(
          [&, t] { launch_sm90_gemm(dt, c.m, c.n, c.k, oa, ob, dd.d, c.n, epi, nullptr, t); });
    else
      fns.push_back(launch_ours);
    names.push_back(v.name);
  }
  const char* env_reps = std::getenv("PROBE_REPS");
  const int reps = std::max(5, env_reps ? std::atoi(env_reps) : 15);
  const std::vector<Stats> st = time_alternating(fns, reps);
  check_watchdog(label);
  const double flops = 2.0 * c.m * c.n * c.k;
  const double t_lt = have_lt ? st[0].median : -1;
  for (size_t i = 0; i < st.size(); ++i) {
    const bool is_lt = have_lt && i == 0;
    say("  TIME %-36s %8.4f ms [%.4f-%.4f] %6.1f TF/s", names[i].c_str(), st[i].median, st[i].min,
        st[i].max, flops / st[i].median * 1e-9);
    if (!is_lt && t_lt > 0) say("  lt/ours %.3f", t_lt / st[i].median);
    say("\n");
  }
  if (c.rule && have_lt && st.size() >= 2) {
    // What the dispatch rule picks for this product, against what was faster
    // (ours: the first variant, the kernel dispatch would run).
    const LinearProduct prod = c.a_k ? (c.b_k ? LinearProduct::Forward : LinearProduct::InputGrad)
                                     : LinearProduct::WeightGrad;
    const bool rule_ours = sm90_measured_faster(prod, dt, dt == DType::Float32, c.m, c.n, c.k);
    const double ratio = t_lt / st[1].median;
    const bool ours_faster = ratio >= 1.0;
    say("  RULE picks %s; measured faster: %s (lt/ours %.3f) %s\n", rule_ours ? "ours" : "cublas",
        ours_faster ? "ours" : "cublas", ratio,
        rule_ours == ours_faster        ? "AGREE"
        : std::fabs(ratio - 1.0) < 0.02 ? "DISAGREE (within 2%)"
                                        : "DISAGREE");
    char line[256];
    std::snprintf(line, sizeof line,
                  "SUMMARY %-11s %s %5lld %5lld %5lld%s  lt %.4f ms  ours %.4f ms  lt/ours %.3f  "
                  "rule %s  faster %s  %s",
                  to_string(prod), dt == DType::BFloat16 ? "bf16" : "tf32",
                  static_cast<long long>(c.m), static_cast<long long>(c.n),
                  static_cast<long long>(c.k), c.bias_grad ? " +dbias" : (c.bias ? " +bias" : ""),
                  t_lt, st[1].median, ratio, rule_ours ? "ours" : "cublas",
                  ours_faster ? "ours" : "cublas", rule_ours == ours_faster ? "AGREE" : "DISAGREE");
    g_summary.push_back(line);
  }
  return ok;
}

// ------------------------------------------------------------------ groups

const char* kGroups[] = {"diag",  "fwd",  "epi",   "bwd",      "tf32", "big",
                         "tiles", "ping", "sched", "dispatch", "old",  "ncu"};

std::vector<Case> group_cases(const std::string& g) {
  std::vector<Case> v;
  auto add = [&](Case c) {
    for (const char* name : kGroups)
      if (g == name) c.group = name;
    v.push_back(c);
  };
  if (g == "diag") {
    // One tile, one K step, structured inputs: a wrong descriptor or swizzle
    // shows as D naming the wrong source element. Then more K steps than stages
    // (the ring wraps), then one block walking many tiles (persistence).
    for (auto lay : {std::pair{true, true}, std::pair{true, false}, std::pair{false, false}}) {
      for (Pattern p : {Pattern::RowId, Pattern::KId, Pattern::ColId, Pattern::KIdB}) {
        Case c;
        c.m = 128, c.n = 256, c.k = 64, c.a_k = lay.first, c.b_k = lay.second;
        c.tile = Sm90Tile::k128x256, c.out = DType::Float32, c.pat = p;
        add(c);
      }
      Case c;
      c.m = 128, c.n = 256, c.k = 64 * 9, c.a_k = lay.first, c.b_k = lay.second;
      c.tile = Sm90Tile::k128x256, c.out = DType::Float32;
      add(c);
      c.m = 128 * 5, c.n = 256 * 3, c.k = 64 * 5, c.max_ctas = 1;
      add(c);
      c.max_ctas = 4;
      add(c);
    }
    Case t;  // TF32, one tile then several
    t.dt = DType::Float32, t.out = DType::Float32, t.tile = Sm90Tile::k128x256;
    for (Pattern p : {Pattern::RowId, Pattern::KId, Pattern::ColId, Pattern::KIdB}) {
      t.m = 128, t.n = 256, t.k = 32, t.pat = p;
      add(t);
    }
    t.pat = Pattern::Random, t.m = 128 * 3, t.n = 256 * 2, t.k = 32 * 11, t.max_ctas = 2;
    add(t);
  } else if (g == "fwd") {
    // Forward layout, bf16 out, ragged and tiny shapes (K % 8 == 0: TMA strides).
    for (auto s : std::vector<std::array<int64_t, 3>>{{1, 1, 8},
                                                      {1, 4096, 4096},
                                                      {7, 7, 8},
                                                      {127, 255, 72},
                                                      {129, 257, 520},
                                                      {4097, 4095, 4104},
                                                      {256, 128, 0}}) {
      Case c;
      c.m = s[0], c.n = s[1], c.k = s[2];
      add(c);
    }
    Case c;
    c.m = 300, c.n = 200, c.k = 136, c.pad = 8;  // strided rows
    add(c);
    for (Sm90Tile t : {Sm90Tile::k128x128}) {
      c.pad = 0, c.tile = t, c.m = 1000, c.n = 1000, c.k = 1000;
      add(c);
    }
  } else if (g == "epi") {
    for (Activation a :
         {Activation::None, Activation::Relu, Activation::GeluTanh, Activation::Silu})
      for (DType out : {DType::BFloat16, DType::Float32}) {
        Case c;
        c.m = 333, c.n = 517, c.k = 264, c.bias = true, c.pre = a != Activation::None, c.act = a;
        c.out = out;
        add(c);
      }
  } else if (g == "bwd") {
    // dx = dy w: A = dy (K-major), B = w (N-major); dw = dy^T x (+ d_b): both M/N-major.
    // TMA needs the contiguous sizes (k of a K-major operand, m or n of an M/N-major
    // one) to be multiples of 8 bf16; the others are ragged.
    for (auto s : std::vector<std::array<int64_t, 3>>{
             {128, 256, 64}, {7, 16, 24}, {127, 4088, 520}, {1000, 1000, 1000}}) {
      Case c;
      c.m = s[0], c.n = s[1], c.k = s[2], c.a_k = true, c.b_k = false;  // dx
      add(c);
    }
    for (auto s : std::vector<std::array<int64_t, 3>>{
             {128, 256, 64}, {16, 24, 7}, {136, 4088, 4097}, {1000, 1000, 1000}}) {
      Case c;
      c.m = s[0], c.n = s[1], c.k = s[2], c.a_k = false, c.b_k = false, c.bias_grad = true;  // dw
      add(c);
      c.out = DType::Float32;
      add(c);
    }
    Case c;
    c.m = 8192, c.n = 4096, c.k = 4096, c.a_k = true, c.b_k = false, c.time = true;  // dx
    add(c);
    c.m = 4096, c.n = 4096, c.k = 8192, c.a_k = false, c.b_k = false, c.bias_grad = true;  // dw
    add(c);
  } else if (g == "tf32") {
    for (auto s : std::vector<std::array<int64_t, 3>>{
             {1, 1, 4}, {7, 127, 36}, {129, 257, 520}, {1000, 1000, 1000}}) {
      Case c;
      c.dt = DType::Float32, c.out = DType::Float32, c.m = s[0], c.n = s[1], c.k = s[2];
      add(c);
    }
    Case c;
    c.dt = DType::Float32, c.out = DType::Float32, c.m = 8192, c.n = 4096, c.k = 4096;
    c.time = true;
    add(c);
    c.bias = true, c.act = Activation::GeluTanh, c.pre = true, c.time = false, c.m = 513,
    c.n = 1031, c.k = 260;
    add(c);
  } else if (g == "tiles") {
    for (Sm90Tile t : {Sm90Tile::k128x256, Sm90Tile::k128x128}) {
      Case c;
      c.m = 8192, c.n = 4096, c.k = 4096, c.tile = t, c.time = true;
      add(c);
    }
    for (int gm : {1, 4, 16}) {
      Case c;
      c.m = 8192, c.n = 4096, c.k = 4096, c.tile = Sm90Tile::k128x256, c.group_m = gm,
      c.time = true;
      add(c);
    }
  } else if (g == "big") {
    for (auto s : std::vector<std::array<int64_t, 3>>{{8192, 4096, 4096},
                                                      {8192, 8192, 8192},
                                                      {4096, 4096, 4096},
                                                      {2048, 2048, 2048},
                                                      {1024, 1024, 1024},
                                                      {512, 512, 512},
                                                      {4097, 4097, 4096}}) {
      Case c;
      c.m = s[0], c.n = s[1], c.k = s[2], c.time = true;
      add(c);
    }
    Case c;
    c.m = 8192, c.n = 4096, c.k = 4096, c.bias = true, c.act = Activation::GeluTanh, c.pre = true;
    c.time = true;
    add(c);
  } else if (g == "ping") {
    // The ping-pong schedule's correctness: structured one-tile cases per layout,
    // a ring that wraps (13 K steps over 6 stages), blocks walking an odd and an
    // even number of tiles (one warpgroup idle at the end), ragged sizes, the
    // row sums, the epilogue with the pre-activation, TF32.
    for (auto lay : {std::pair{true, true}, std::pair{true, false}, std::pair{false, false}}) {
      for (Pattern p : {Pattern::RowId, Pattern::KId, Pattern::ColId, Pattern::KIdB}) {
        Case c;
        c.m = 128, c.n = 128, c.k = 64, c.a_k = lay.first, c.b_k = lay.second;
        c.sched = Sm90Schedule::Pingpong, c.out = DType::Float32, c.pat = p;
        add(c);
      }
      Case c;
      c.a_k = lay.first, c.b_k = lay.second, c.sched = Sm90Schedule::Pingpong;
      c.out = DType::Float32, c.bias_grad = !lay.first;
      c.m = 128, c.n = 128, c.k = 64 * 13;
      add(c);
      for (int ctas : {1, 2, 3}) {
        c.m = 128 * 5, c.n = 128 * 3, c.k = 64 * 7, c.max_ctas = ctas;
        add(c);
      }
      c.max_ctas = 0;
      for (auto s : std::vector<std::array<int64_t, 3>>{
               {1, 1, 1}, {127, 4095, 520}, {4097, 136, 1001}, {1000, 1000, 1000}}) {
        c.m = s[0], c.n = s[1], c.k = s[2], c.out = DType::BFloat16;
        add(c);
      }
    }
    Case e;
    e.m = 333, e.n = 517, e.k = 264, e.bias = true, e.pre = true, e.act = Activation::GeluTanh;
    e.sched = Sm90Schedule::Pingpong;
    add(e);
    e.act = Activation::Silu, e.out = DType::Float32;
    add(e);
    Case t;
    t.dt = DType::Float32, t.out = DType::Float32, t.sched = Sm90Schedule::Pingpong;
    t.m = 128 * 3 + 5, t.n = 128 * 2 + 3, t.k = 32 * 11, t.max_ctas = 2;
    add(t);
  } else if (g == "sched") {
    // Each schedule and tile side by side, and the main loop alone (what the
    // epilogue costs), on the shapes whose ratios decide dispatch.
    auto timed = [&](Case c) {
      c.time = true, c.variants = kSchedVariants;
      add(c);
    };
    Case c;
    c.m = 8192, c.n = 4096, c.k = 4096;
    timed(c);  // forward, plain
    c.bias = true, c.act = Activation::GeluTanh, c.pre = true;
    timed(c);  // forward, the GELU epilogue with its input kept
    c.act = Activation::Relu, c.pre = false;
    timed(c);  // forward, ReLU + bias (the MLP's)
    c = Case{};
    c.m = 8192, c.n = 8192, c.k = 8192;
    timed(c);
    c.m = 4096, c.n = 4096, c.k = 4096;
    timed(c);
    c = Case{};
    c.m = 8192, c.n = 4096, c.k = 4096, c.b_k = false;
    timed(c);  // d_x
    c = Case{};
    c.m = 4096, c.n = 4096, c.k = 8192, c.a_k = false, c.b_k = false;
    timed(c);  // d_w alone...
    c.bias_grad = true;
    timed(c);  // ...and with d_b
    c = Case{};
    c.m = 4096, c.n = 4096, c.k = 8192;
    timed(c);  // the same shape K-major: the layout's share against the shape's
    c = Case{};
    c.dt = DType::Float32, c.out = DType::Float32, c.m = 8192, c.n = 4096, c.k = 4096;
    timed(c);  // TF32
  } else if (g == "dispatch") {
    // The sweep behind the dispatch rule: ours as dispatch runs it (default
    // tuning) against cuBLASLt with the same epilogue (bias; BGRADB for d_w),
    // and what the rule picks.
    auto timed = [&](DType dt, bool a_k, bool b_k, int64_t m, int64_t n, int64_t k) {
      Case c;
      c.dt = dt, c.out = dt, c.a_k = a_k, c.b_k = b_k, c.m = m, c.n = n, c.k = k;
      c.bias = a_k && b_k, c.bias_grad = !a_k, c.time = true, c.rule = true;
      add(c);
    };
    using S3 = std::array<int64_t, 3>;
    for (S3 s :
         {S3{1024, 1024, 1024}, S3{2048, 2048, 2048}, S3{4096, 4096, 4096}, S3{6144, 6144, 6144},
          S3{8192, 8192, 8192}, S3{8192, 4096, 4096}, S3{16384, 4096, 4096}, S3{8192, 8192, 4096},
          S3{8192, 4096, 16384}, S3{4096, 4095, 4096}, S3{1024, 1023, 1024}, S3{4097, 4097, 4096},
          S3{127, 4097, 4096}})
      timed(DType::BFloat16, true, true, s[0], s[1], s[2]);
    for (S3 s :
         {S3{4096, 4096, 4096}, S3{8192, 4096, 4096}, S3{8192, 8192, 8192}, S3{4097, 4097, 4096}})
      timed(DType::Float32, true, true, s[0], s[1], s[2]);
    for (S3 s :
         {S3{2048, 2048, 2048}, S3{4096, 4096, 4096}, S3{8192, 4096, 4096}, S3{8192, 8192, 8192}})
      timed(DType::BFloat16, true, false, s[0], s[1], s[2]);
    for (S3 s :
         {S3{2048, 2048, 2048}, S3{4096, 4096, 4096}, S3{4096, 4096, 8192}, S3{8192, 8192, 8192}})
      timed(DType::BFloat16, false, false, s[0], s[1], s[2]);
  } else if (g == "old") {
    Case c;
    c.m = 8192, c.n = 4096, c.k = 4096, c.time = true, c.kernel = Case::MmaSync;
    add(c);
    c.dt = DType::Float32, c.out = DType::Float32, c.kernel = Case::Simt;
    add(c);
  }
  return v;
}

// For a profiler (tools/gpu_gemm.sh, EMBER_GEMM_NCU=1): bf16 8192x4096x4096
// with the bias, two launches of ours (cooperative 128x256, ping-pong 128x128),
// then cuBLASLt with its bias epilogue; then fp32 (no TF32) at the same shape, ours
// SIMT and cuBLASLt's; nothing else.
int profile_forward() {
  const int64_t m = 8192, n = 4096, k = 4096;
  Buf a(m * k * 2), b(n * k * 2), bias(n * 2), d(m * n * 2);
  CK(cudaMemset(a.d, 0x3c, a.bytes));  // bf16 0x3c3c: ~0.0115, finite
  CK(cudaMemset(b.d, 0x3c, b.bytes));
  CK(cudaMemset(bias.d, 0, bias.bytes));
  const Sm90Operand oa{a.d, k, true}, ob{b.d, k, true};
  GemmEpilogue epi;
  epi.bias = bias.d;
  for (Sm90Schedule s : {Sm90Schedule::Cooperative, Sm90Schedule::Pingpong}) {
    Sm90Tuning t;
    t.schedule = s;
    launch_sm90_gemm(DType::BFloat16, m, n, k, oa, ob, d.d, n, epi, nullptr, t);
  }
  LtEpi le;
  le.bias = bias.d;
  g_lt->run(DType::BFloat16, m, n, k, oa, ob, d.d, DType::BFloat16, nullptr, true, &le);
  // fp32 without TF32 at the same shape: ours SIMT, then cuBLAS's (through Lt, no TF32).
  Buf af(m * k * 4), bf(n * k * 4), df(m * n * 4);
  CK(cudaMemset(af.d, 0, af.bytes));
  CK(cudaMemset(bf.d, 0, bf.bytes));
  launch_linear_gemm(DType::Float32, af.d, k, bf.d, k, nullptr, df.d, nullptr, m, n, k,
                     Activation::None, nullptr, GemmTile::kF32Bk8);
  const Sm90Operand oaf{af.d, k, true}, obf{bf.d, k, true};
  g_lt->run(DType::Float32, m, n, k, oaf, obf, df.d, DType::Float32, nullptr, false, nullptr);
  CK(cudaDeviceSynchronize());
  say("== group ncu: profiled launches done\n");
  return 0;
}

int run_group(const std::string& g) {
  int dev = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  CK(cudaHostAlloc(reinterpret_cast<void**>(&g_watch_host), 8 * sizeof(int), cudaHostAllocMapped));
  std::memset(g_watch_host, 0, 8 * sizeof(int));
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&g_watch_dev), g_watch_host, 0));
  Lt lt;
  g_lt = &lt;
  say("== group %s on %s (cc %d.%d, %d SMs)\n", g.c_str(), prop.name, prop.major, prop.minor,
      prop.multiProcessorCount);
  uint64_t seed = 1234;
  if (g == "ncu") return profile_forward();
  for (const Case& c : group_cases(g)) run_case(c, seed++);
  for (const std::string& line : g_summary) say("%s\n", line.c_str());
  say("== group %s: %d failure(s)\n", g.c_str(), g_failures);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<std::string> groups;
  bool child = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--list") {
      for (const char* g : kGroups) std::printf("%s\n", g);
      return 0;
    }
    if (a == "--child") {
      child = true;
      continue;
    }
    groups.push_back(a);
  }
  if (groups.empty())
    for (const char* g : kGroups) groups.push_back(g);
  if (child) return run_group(groups.at(0));

  const int limit = std::getenv("PROBE_TIMEOUT") ? std::atoi(std::getenv("PROBE_TIMEOUT")) : 150;
  std::vector<std::pair<std::string, int>> results;
  for (const std::string& g : groups) {
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", argv[0], "--child", g.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    int status = 0;
    int waited = 0;
    pid_t r = 0;
    while ((r = waitpid(pid, &status, WNOHANG)) == 0 && waited < limit * 10) {
      usleep(100000);
      ++waited;
    }
    int code;
    if (r == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      std::printf("== group %s: TIMED OUT after %d s (killed)\n", g.c_str(), limit);
      code = 124;
    } else {
      code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    results.push_back({g, code});
  }
  std::printf("\n== summary\n");
  int bad = 0;
  for (auto& [g, code] : results) {
    std::printf("  %-6s %s (exit %d)\n", g.c_str(), code == 0 ? "ok" : "FAILED", code);
    bad += code != 0;
  }
  return bad == 0 ? 0 : 1;
}
