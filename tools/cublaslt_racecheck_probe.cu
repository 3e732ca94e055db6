// The GEMMs of ember's Linear called directly through cuBLAS(Lt), with no ember
// code at all, so that compute-sanitizer's reports on cuBLASLt's own kernels can
// be told from ember's (issue 33). Each case is one product of a Linear layer
// y = x w^T + b with x (m, k), w (n, k), as cuda/blas.cpp issues it:
//   forward  cublasLtMatmul, D (n x m) = op_T(w as k x n) op_N(x as k x m), epilogue
//            BIAS (or RELU_BIAS, GELU_BIAS, GELU_AUX_BIAS with --all-epilogues)
//   dgrad    cublasGemmEx / cublasSgemm, d_x^T (k x m) = w (k x n) d_y^T (n x m)
//   wgrad    cublasLtMatmul, d_w^T (k x n) = op_N(x as k x m) op_T(d_y as n x m),
//            epilogue BGRADB (the bias gradient)
// in fp32, TF32 (CUBLAS_COMPUTE_32F_FAST_TF32) and bf16, with a 32 MiB workspace
// and the first heuristic result (what ember asks for). The default shapes are the
// ones tests/cuda/test_kernels_linear.cpp runs (kAligned, kUnaligned and the
// strided x); `m n k` triples on the command line replace them.
//
// Built and run by tools/cublaslt_racecheck_probe.sh (nvcc, no ember target).
// Usage: cublaslt_racecheck_probe [--names] [--all-epilogues] [--dtype fp32|tf32|bf16]
//                                 [--product forward|dgrad|wgrad] [m n k]...
//        cublaslt_racecheck_probe [--names] --replay FILE
//   --replay  issue exactly the calls of FILE, lines that ember's cuda/blas.cpp wrote
//             under EMBER_BLAS_TRACE (the shapes, leading dimensions, batch strides,
//             epilogues, math mode and pointer alignments of every GEMM a test run
//             made), on zeroed buffers of the sizes they need
//   --names   record every kernel launch with CUPTI and print, per case, the
//             kernels it launched (run it natively: not under compute-sanitizer)
//   --uninit-output  for initcheck: each product's output buffer is allocated and not
//             zeroed, and after the call a kernel of this probe reads all of it in
//             16-byte loads. initcheck reporting that read means the tool did not see
//             cuBLAS(Lt)'s writes to the buffer (the values are right: ember's tests
//             compare them), which is how a read of a cuBLASLt output in an ember
//             kernel gets reported as uninitialized.
// Exit status 0 when every call returned success; 1 otherwise.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef PROBE_NO_CUPTI
#include <cupti.h>
#endif

namespace {

[[noreturn]] void die(const char* what, const char* detail) {
  std::fprintf(stderr, "cublaslt_racecheck_probe: %s failed: %s\n", what, detail);
  std::exit(1);
}
#define CK_CUDA(x)                                          \
  do {                                                      \
    cudaError_t e_ = (x);                                   \
    if (e_ != cudaSuccess) die(#x, cudaGetErrorString(e_)); \
  } while (0)
#define CK_BLAS(x)                                                       \
  do {                                                                   \
    cublasStatus_t s_ = (x);                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) die(#x, cublasGetStatusString(s_)); \
  } while (0)

constexpr size_t kWorkspace = size_t{32} << 20;  // ember's (cuda/blas.cpp) and cuBLAS's default

bool g_uninit_output = false;  // --uninit-output

// Reads every byte of [p, p + bytes) (16-byte loads over the aligned body, bytes at
// the ends) and keeps a sum, so that the loads are not dropped.
__global__ void read_all_kernel(const unsigned char* p, size_t bytes, unsigned long long* sink) {
  const size_t head = (16 - reinterpret_cast<uintptr_t>(p) % 16) % 16;
  const size_t body = bytes > head ? (bytes - head) / 16 : 0;
  const uint4* v = reinterpret_cast<const uint4*>(p + head);
  unsigned long long acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t i = tid; i < body; i += stride) {
    const uint4 x = v[i];
    acc += x.x ^ x.y ^ x.z ^ x.w;
  }
  for (size_t i = tid; i < bytes; i += stride)
    if (i < head || i >= head + body * 16) acc += p[i];
  if (acc == 0x5eedULL) atomicAdd(sink, acc);  // almost never taken; keeps the loads live
}

void read_all(const void* p, size_t bytes) {
  static unsigned long long* sink = nullptr;
  if (sink == nullptr) {
    CK_CUDA(cudaMalloc(&sink, sizeof *sink));
    CK_CUDA(cudaMemset(sink, 0, sizeof *sink));
  }
  read_all_kernel<<<264, 256>>>(static_cast<const unsigned char*>(p), bytes, sink);
  CK_CUDA(cudaGetLastError());
  CK_CUDA(cudaDeviceSynchronize());
}

// At least 16 bytes of device memory, zeroed unless `zeroed` is false.
void* device_buffer(size_t bytes, bool zeroed) {
  void* p = nullptr;
  CK_CUDA(cudaMalloc(&p, bytes < 16 ? 16 : bytes));
  if (zeroed) CK_CUDA(cudaMemset(p, 0, bytes < 16 ? 16 : bytes));
  return p;
}
void* device_zeros(size_t bytes) {
  return device_buffer(bytes, true);
}
// An output buffer: zeroed, or under --uninit-output left as cudaMalloc gives it.
void* device_output(size_t bytes) {
  return device_buffer(bytes, !g_uninit_output);
}

// ---- kernel names, recorded with CUPTI's launch callbacks (--names only)
std::vector<std::string> g_launched;

#ifndef PROBE_NO_CUPTI
std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d != nullptr ? d : name;
  std::free(d);
  return s;
}

void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_ENTER) return;
  bool launch = false;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
    launch = id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel ||
             id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
             id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx ||
             id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz ||
             id == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel;
  else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
    launch = id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 ||
             id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000 ||
             id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060 ||
             id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060;
  if (!launch || cb->symbolName == nullptr) return;
  std::string name = demangle(cb->symbolName);
  // A runtime launch also passes through the driver: keep one entry.
  if (g_launched.empty() || g_launched.back() != name) g_launched.push_back(name);
}

void start_names() {
  CUpti_SubscriberHandle sub;
  if (cuptiSubscribe(&sub, reinterpret_cast<CUpti_CallbackFunc>(on_api), nullptr) !=
          CUPTI_SUCCESS ||
      cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API) != CUPTI_SUCCESS ||
      cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API) != CUPTI_SUCCESS)
    die("CUPTI subscribe", "kernel names cannot be recorded (run without --names)");
}
#else
void start_names() {
  die("--names", "built without CUPTI (PROBE_NO_CUPTI)");
}
#endif

enum class DT { fp32, tf32, bf16 };
const char* dt_name(DT d) {
  return d == DT::fp32 ? "fp32" : d == DT::tf32 ? "tf32" : "bf16";
}

struct Shape {
  long m, n, k, ldx;  // ldx > k: x is a view with padded rows (the strided-x case)
};

struct Bufs {
  void *x = nullptr, *w = nullptr, *b = nullptr, *y = nullptr, *aux = nullptr;
  void *dy = nullptr, *dx = nullptr, *dw = nullptr, *db = nullptr;
};

std::string algo_text(const cublasLtMatmulAlgo_t& algo) {
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t a) {
    long long v = 0;
    uint32_t u32 = 0;
    size_t written = 0;
    // Most attributes are 32-bit; read into a 32-bit slot first.
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, a, &u32, sizeof(u32), &written) ==
        CUBLAS_STATUS_SUCCESS)
      v = u32;
    return v;
  };
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "algo id=%lld tile=%lld splitK=%lld reduction=%lld stages=%lld swizzle=%lld "
                "cluster=%lld",
                get(CUBLASLT_ALGO_CONFIG_ID), get(CUBLASLT_ALGO_CONFIG_TILE_ID),
                get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM), get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                get(CUBLASLT_ALGO_CONFIG_STAGES_ID), get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
  return buf;
}

struct Lt {
  cublasLtHandle_t handle = nullptr;
  cublasHandle_t blas = nullptr;
  void* workspace = nullptr;
  void* blas_workspace = nullptr;
};

// One cublasLtMatmul as cuda/blas.cpp's lt_run issues it; returns the algorithm
// text, or "" when the heuristic offered none (ember then runs its own kernel).
std::string lt_matmul(Lt& lt, DT dt, cublasOperation_t op_a, cublasOperation_t op_b, long rows,
                      long cols, const void* a, long a_rows, long a_cols, long lda, const void* b,
                      long b_rows, long b_cols, long ldb, void* d, long ldd, cublasLtEpilogue_t epi,
                      const void* bias, void* aux, long aux_ld, bool d_float32 = false) {
  const cudaDataType_t type = dt == DT::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType_t d_type = d_float32 ? CUDA_R_32F : type;
  const cublasComputeType_t compute =
      dt == DT::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasLtMatmulDesc_t desc;
  CK_BLAS(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
  CK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  CK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  CK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (bias != nullptr)
    CK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof bias));
  if (aux != nullptr) {
    int64_t ld = aux_ld;
    CK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                           sizeof aux));
    CK_BLAS(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
  }
  cublasLtMatrixLayout_t la, lb, ldesc;
  CK_BLAS(cublasLtMatrixLayoutCreate(&la, type, a_rows, a_cols, lda));
  CK_BLAS(cublasLtMatrixLayoutCreate(&lb, type, b_rows, b_cols, ldb));
  CK_BLAS(cublasLtMatrixLayoutCreate(&ldesc, d_type, rows, cols, ldd));
  cublasLtMatmulPreference_t pref;
  CK_BLAS(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspace;
  CK_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                               sizeof ws));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt.handle, desc, la, lb, ldesc, ldesc,
                                                           pref, 1, &result, &count);
  std::string text;
  if (st == CUBLAS_STATUS_SUCCESS && count > 0) {
    const float one = 1.f, zero = 0.f;
    CK_BLAS(cublasLtMatmul(lt.handle, desc, &one, a, la, b, lb, &zero, d, ldesc, d, ldesc,
                           &result.algo, lt.workspace, kWorkspace, nullptr));
    text = algo_text(result.algo);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(ldesc);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
  return text;
}

// A zeroed buffer of `bytes`, and a pointer into it `offset` bytes past its
// (256-byte aligned) start: the alignment class of the traced pointer.
struct Buf {
  void* base = nullptr;
  char* at = nullptr;
  Buf(size_t bytes, long long offset, bool output = false) {
    base = output ? device_output(bytes + 256) : device_zeros(bytes + 256);
    at = static_cast<char*>(base) + offset;
  }
  ~Buf() { cudaFree(base); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

cublasOperation_t op_of(const std::string& s) {
  if (s != "N" && s != "T") die("--replay", ("operation must be N or T, got " + s).c_str());
  return s == "T" ? CUBLAS_OP_T : CUBLAS_OP_N;
}

// One traced cublas*gemm* call (cuda/blas.cpp's gemm()), re-issued as it was.
void replay_gemm(Lt& lt, std::istringstream& in, const std::string& line) {
  std::string dt, math, sa, sb;
  long long m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch, off_a, off_b, off_c;
  if (!(in >> dt >> math >> sa >> sb >> m >> n >> k >> lda >> ldb >> ldc >> stride_a >> stride_b >>
        stride_c >> batch >> off_a >> off_b >> off_c))
    die("--replay", ("malformed gemm line: " + line).c_str());
  const cublasOperation_t op_a = op_of(sa), op_b = op_of(sb);
  const size_t es = dt == "bf16" ? 2 : dt == "fp64" ? 8 : 4;
  const long long a_cols = op_a == CUBLAS_OP_N ? k : m, b_cols = op_b == CUBLAS_OP_N ? n : k;
  Buf a(es * size_t(lda * a_cols + stride_a * (batch - 1)), off_a);
  Buf b(es * size_t(ldb * b_cols + stride_b * (batch - 1)), off_b);
  const size_t c_bytes = es * size_t(ldc * n + stride_c * (batch - 1));
  Buf c(c_bytes, off_c, true);
  CK_BLAS(cublasSetMathMode(lt.blas,
                            math == "tf32" ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  const int M = int(m), N = int(n), K = int(k), A = int(lda), B = int(ldb), C = int(ldc);
  const int count = int(batch);
  if (dt == "fp64") {
    const double one = 1.0, zero = 0.0;
    auto pa = reinterpret_cast<const double*>(a.at), pb = reinterpret_cast<const double*>(b.at);
    auto pc = reinterpret_cast<double*>(c.at);
    if (batch == 1)
      CK_BLAS(cublasDgemm(lt.blas, op_a, op_b, M, N, K, &one, pa, A, pb, B, &zero, pc, C));
    else
      CK_BLAS(cublasDgemmStridedBatched(lt.blas, op_a, op_b, M, N, K, &one, pa, A, stride_a, pb, B,
                                        stride_b, &zero, pc, C, stride_c, count));
  } else if (dt == "fp32") {
    const float one = 1.f, zero = 0.f;
    auto pa = reinterpret_cast<const float*>(a.at), pb = reinterpret_cast<const float*>(b.at);
    auto pc = reinterpret_cast<float*>(c.at);
    if (batch == 1)
      CK_BLAS(cublasSgemm(lt.blas, op_a, op_b, M, N, K, &one, pa, A, pb, B, &zero, pc, C));
    else
      CK_BLAS(cublasSgemmStridedBatched(lt.blas, op_a, op_b, M, N, K, &one, pa, A, stride_a, pb, B,
                                        stride_b, &zero, pc, C, stride_c, count));
  } else if (dt == "bf16") {
    const float one = 1.f, zero = 0.f;
    if (batch == 1)
      CK_BLAS(cublasGemmEx(lt.blas, op_a, op_b, M, N, K, &one, a.at, CUDA_R_16BF, A, b.at,
                           CUDA_R_16BF, B, &zero, c.at, CUDA_R_16BF, C, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT));
    else
      CK_BLAS(cublasGemmStridedBatchedEx(lt.blas, op_a, op_b, M, N, K, &one, a.at, CUDA_R_16BF, A,
                                         stride_a, b.at, CUDA_R_16BF, B, stride_b, &zero, c.at,
                                         CUDA_R_16BF, C, stride_c, count, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT));
  } else {
    die("--replay", ("unknown dtype in: " + line).c_str());
  }
  // The rows of C the product wrote: ldc * (n - 1) + m elements per batch entry.
  if (g_uninit_output)
    for (long long i = 0; i < batch; ++i)
      read_all(c.at + es * size_t(stride_c * i), es * size_t(ldc * (n - 1) + m));
}

// One traced cublasLtMatmul (cuda/blas.cpp's lt_run()), re-issued as it was: the
// same descriptors, epilogue, 32 MiB workspace and the heuristic's first answer.
// Returns false when the heuristic offers none here (ember's run had one).
bool replay_lt(Lt& lt, std::istringstream& in, const std::string& line) {
  std::string dt, math, sa, sb;
  long long rows, cols, inner, a_rows, a_cols, lda, b_rows, b_cols, ldb, ldd, has_bias, aux_ld;
  long long off_a, off_b, off_d, off_bias, off_aux;
  int epi = 0;
  if (!(in >> dt >> math >> sa >> sb >> rows >> cols >> inner >> a_rows >> a_cols >> lda >>
        b_rows >> b_cols >> ldb >> ldd >> epi >> has_bias >> aux_ld >> off_a >> off_b >> off_d >>
        off_bias >> off_aux))
    die("--replay", ("malformed lt line: " + line).c_str());
  (void)inner;
  // "bf16->fp32": bfloat16 operands, a float32 D (lt_linear_backward_weight_into).
  const bool d_float32 = dt == "bf16->fp32";
  const DT d = dt == "bf16" || d_float32 ? DT::bf16 : math == "tf32" ? DT::tf32 : DT::fp32;
  const size_t es = d == DT::bf16 ? 2 : 4;
  const size_t d_es = d_float32 ? 4 : es;
  Buf a(es * size_t(lda * a_cols), off_a);
  Buf b(es * size_t(ldb * b_cols), off_b);
  Buf out(d_es * size_t(ldd * cols), off_d, true);
  // The bias (in, or the bias gradient out) runs along D's rows or columns: room
  // for either, in float32.
  Buf bias(4 * size_t(rows > cols ? rows : cols), off_bias);
  Buf aux(4 * size_t(aux_ld > 0 ? aux_ld * cols : 1), off_aux);
  const bool ran =
      !lt_matmul(lt, d, op_of(sa), op_of(sb), rows, cols, a.at, a_rows, a_cols, lda, b.at, b_rows,
                 b_cols, ldb, out.at, ldd, static_cast<cublasLtEpilogue_t>(epi),
                 has_bias ? bias.at : nullptr, aux_ld > 0 ? aux.at : nullptr, aux_ld, d_float32)
           .empty();
  if (ran && g_uninit_output) read_all(out.at, d_es * size_t(ldd * (cols - 1) + rows));
  return ran;
}

int replay(Lt& lt, const std::string& path, bool names) {
  std::ifstream file(path);
  if (!file) die("--replay", ("cannot open " + path).c_str());
  std::string line;
  int cases = 0, gemms = 0, lts = 0, no_algo = 0;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "gemm") {
      replay_gemm(lt, in, line);
      ++gemms;
    } else if (kind == "lt") {
      if (!replay_lt(lt, in, line)) ++no_algo;
      ++lts;
    } else {
      die("--replay", ("unknown line: " + line).c_str());
    }
    CK_CUDA(cudaDeviceSynchronize());
    std::printf("case %-5d %s\n", ++cases, line.c_str());
    if (names) {
      for (const std::string& k : g_launched) std::printf("    kernel %s\n", k.c_str());
      g_launched.clear();
    }
    std::fflush(stdout);
  }
  std::printf(
      "cublaslt_racecheck_probe: replayed %d calls of %s (%d cublas*gemm*, %d cublasLtMatmul, "
      "%d of which got no algorithm here); every call returned success\n",
      cases, path.c_str(), gemms, lts, no_algo);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool names = false, all_epilogues = false;
  std::string only_dtype, only_product;
  std::vector<Shape> shapes;
  std::vector<long> triple;
  std::string replay_file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--names") {
      names = true;
    } else if (a == "--uninit-output") {
      g_uninit_output = true;
    } else if (a == "--replay" && i + 1 < argc) {
      replay_file = argv[++i];
    } else if (a == "--all-epilogues") {
      all_epilogues = true;
    } else if (a == "--dtype" && i + 1 < argc) {
      only_dtype = argv[++i];
    } else if (a == "--product" && i + 1 < argc) {
      only_product = argv[++i];
    } else if (!a.empty() && a[0] != '-') {
      triple.push_back(std::atol(a.c_str()));
      if (triple.size() == 3) {
        if (triple[0] < 1 || triple[1] < 1 || triple[2] < 1) die("arguments", "m n k must be >= 1");
        shapes.push_back({triple[0], triple[1], triple[2], triple[2]});
        triple.clear();
      }
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--names] [--uninit-output] [--all-epilogues] [--dtype fp32|tf32|bf16] "
          "[--product forward|dgrad|wgrad] [m n k]...\n"
          "       %s [--names] [--uninit-output] --replay FILE\n",
          argv[0], argv[0]);
      return 2;
    }
  }
  if (!triple.empty()) die("arguments", "sizes come in m n k triples");
  if (shapes.empty())  // tests/cuda/test_kernels_linear.cpp: kAligned, kUnaligned, strided x
    shapes = {{1, 8, 8, 8},       {129, 136, 264, 264}, {4097, 24, 16, 16},
              {7, 4104, 40, 40},  {1, 7, 127, 127},     {127, 128, 7, 7},
              {64, 4097, 16, 16}, {130, 24, 257, 257},  {129, 136, 264, 272}};
  if (names) start_names();

  Lt lt;
  CK_BLAS(cublasLtCreate(&lt.handle));
  CK_BLAS(cublasCreate(&lt.blas));
  CK_CUDA(cudaMalloc(&lt.workspace, kWorkspace));
  CK_CUDA(cudaMalloc(&lt.blas_workspace, kWorkspace));
  CK_BLAS(cublasSetWorkspace(lt.blas, lt.blas_workspace, kWorkspace));
  int cuda_version = 0;
  cudaRuntimeGetVersion(&cuda_version);
  std::printf("cublaslt_racecheck_probe: cuBLASLt %zu, CUDA runtime %d\n", cublasLtGetVersion(),
              cuda_version);
  if (!replay_file.empty()) {
    const int rc = replay(lt, replay_file, names);
    cublasDestroy(lt.blas);
    cublasLtDestroy(lt.handle);
    cudaFree(lt.workspace);
    cudaFree(lt.blas_workspace);
    return rc;
  }

  int cases = 0, offered = 0;
  for (DT dt : {DT::fp32, DT::tf32, DT::bf16}) {
    if (!only_dtype.empty() && only_dtype != dt_name(dt)) continue;
    const size_t es = dt == DT::bf16 ? 2 : 4;
    const cudaDataType_t type = dt == DT::bf16 ? CUDA_R_16BF : CUDA_R_32F;
    for (const Shape& s : shapes) {
      Bufs buf;
      buf.x = device_zeros(es * s.m * s.ldx);
      buf.w = device_zeros(es * s.n * s.k);
      buf.b = device_zeros(es * s.n);
      buf.y = device_output(es * s.m * s.n);
      buf.aux = device_zeros(es * s.m * s.n);
      buf.dy = device_zeros(es * s.m * s.n);
      buf.dx = device_output(es * s.m * s.k);
      buf.dw = device_output(es * s.n * s.k);
      buf.db = device_zeros(es * s.n);
      CK_CUDA(cudaDeviceSynchronize());
      auto report = [&](const char* what, const std::string& algo) {
        CK_CUDA(cudaDeviceSynchronize());
        ++cases;
        if (!algo.empty() && std::strncmp(what, "dgrad", 5) != 0) ++offered;
        std::printf(
            "case %-4d %s %-22s m=%ld n=%ld k=%ld ldx=%ld: %s\n", cases, dt_name(dt), what, s.m,
            s.n, s.k, s.ldx,
            algo.empty() ? "no cuBLASLt algorithm (ember runs its own kernel)" : algo.c_str());
        if (names) {
          for (const std::string& k : g_launched) std::printf("    kernel %s\n", k.c_str());
          g_launched.clear();
        }
        std::fflush(stdout);
      };
      if (only_product.empty() || only_product == "forward") {
        std::vector<std::pair<const char*, cublasLtEpilogue_t>> epis = {
            {"forward+BIAS", CUBLASLT_EPILOGUE_BIAS}};
        if (all_epilogues) {
          epis.push_back({"forward+RELU_BIAS", CUBLASLT_EPILOGUE_RELU_BIAS});
          epis.push_back({"forward+GELU_BIAS", CUBLASLT_EPILOGUE_GELU_BIAS});
          if (s.n % 8 == 0)
            epis.push_back({"forward+GELU_AUX_BIAS", CUBLASLT_EPILOGUE_GELU_AUX_BIAS});
        }
        for (auto [what, epi] : epis) {
          const bool aux = epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
          const std::string algo = lt_matmul(lt, dt, CUBLAS_OP_T, CUBLAS_OP_N, s.n, s.m, buf.w, s.k,
                                             s.n, s.k, buf.x, s.k, s.m, s.ldx, buf.y, s.n, epi,
                                             buf.b, aux ? buf.aux : nullptr, aux ? s.n : 0);
          report(what, algo);
          if (g_uninit_output && !algo.empty()) read_all(buf.y, es * s.m * s.n);
        }
      }
      if (only_product.empty() || only_product == "dgrad") {
        // cuda/blas.cpp's gemm(): d_x (m, k) = d_y (m, n) w (n, k), row-major, as
        // column-major d_x^T = w^T-as-stored times d_y^T-as-stored, both op N.
        const float one = 1.f, zero = 0.f;
        CK_BLAS(cublasSetMathMode(
            lt.blas, dt == DT::tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
        if (dt == DT::bf16)
          CK_BLAS(cublasGemmEx(lt.blas, CUBLAS_OP_N, CUBLAS_OP_N, int(s.k), int(s.m), int(s.n),
                               &one, buf.w, type, int(s.k), buf.dy, type, int(s.n), &zero, buf.dx,
                               type, int(s.k), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        else
          CK_BLAS(cublasSgemm(lt.blas, CUBLAS_OP_N, CUBLAS_OP_N, int(s.k), int(s.m), int(s.n), &one,
                              static_cast<const float*>(buf.w), int(s.k),
                              static_cast<const float*>(buf.dy), int(s.n), &zero,
                              static_cast<float*>(buf.dx), int(s.k)));
        report("dgrad (cuBLAS gemm)", "cuBLAS picks its own algorithm");
        if (g_uninit_output) read_all(buf.dx, es * s.m * s.k);
      }
      if (only_product.empty() || only_product == "wgrad") {
        const std::string algo =
            lt_matmul(lt, dt, CUBLAS_OP_N, CUBLAS_OP_T, s.k, s.n, buf.x, s.k, s.m, s.ldx, buf.dy,
                      s.n, s.m, s.n, buf.dw, s.k, CUBLASLT_EPILOGUE_BGRADB, buf.db, nullptr, 0);
        report("wgrad+BGRADB", algo);
        if (g_uninit_output && !algo.empty()) read_all(buf.dw, es * s.n * s.k);
      }
      for (void* p : {buf.x, buf.w, buf.b, buf.y, buf.aux, buf.dy, buf.dx, buf.dw, buf.db})
        CK_CUDA(cudaFree(p));
    }
  }
  CK_CUDA(cudaDeviceSynchronize());
  std::printf(
      "cublaslt_racecheck_probe: %d cases run, %d of them cublasLtMatmul calls with an "
      "algorithm; every call returned success\n",
      cases, offered);
  cublasDestroy(lt.blas);
  cublasLtDestroy(lt.handle);
  cudaFree(lt.workspace);
  cudaFree(lt.blas_workspace);
  return 0;
}
