#include "cuda/blas.h"

#include <array>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <unistd.h>

#include <cublasLt.h>
#include <cublas_v2.h>

#include "cuda/check.h"
#include "cuda/kernels/elementwise.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

std::atomic<bool> g_allow_tf32{false};

constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;  // cuBLAS's own default on Hopper

// A cuBLAS handle on one device and its workspace. The mutex keeps "bind to this
// stream and workspace, enqueue" atomic when several host threads share the
// device's handle. The workspace is ours rather than cuBLAS's default pool so
// that a GEMM captured in a CUDA graph uses memory that lives as long as the
// handle, and eager and captured GEMMs run the same algorithms; like cuBLASLt's
// below, it is one per device (GEMMs of one device on concurrent streams would
// share it).
class BlasHandle {
 public:
  explicit BlasHandle(int device) {
    DeviceGuard guard(device);
    EMBER_CUBLAS_CHECK(cublasCreate(&handle_));
    EMBER_CUDA_CHECK(cudaMalloc(&workspace_, kBlasWorkspaceBytes));
  }
  ~BlasHandle() {
    if (workspace_ != nullptr) (void)cudaFree(workspace_);  // as LtHandle's, at exit
    if (handle_ != nullptr)
      EMBER_GPU_CALL_LOG("cuBLAS", cublasDestroy(handle_), CUBLAS_STATUS_SUCCESS,
                         cublasGetStatusString);
  }
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;

  cublasHandle_t get() const { return handle_; }
  void* workspace() const { return workspace_; }
  std::mutex& mutex() { return mutex_; }

 private:
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::mutex mutex_;
};

// initcheck does not see the stores of cuBLAS(Lt)'s sm90 tensor-core GEMM kernels
// (H200, cuBLAS 13.0: the probe tools/cublaslt_racecheck_probe --uninit-output
// reads a product cuBLASLt wrote, with no ember code, and is reported), so a kernel
// of ours reading a product is reported reading uninitialized memory. Under
// EMBER_SANITIZE_PREFILL_BLAS_OUTPUTS=1 (tools/gpu_sanitize.sh sets it for its
// initcheck runs, and only after the probe showed the blindness) each cuBLAS(Lt)
// call first writes zeros over exactly the elements it is told to write (D, the
// GELU input it saves, the bias gradient), by cudaMemset(2D)Async, which initcheck
// does see. Every output is written with beta = 0, so no call reads what is filled
// and its result is the same; bytes the call is not told to write stay unfilled, so
// reading them is still reported. The count goes to stderr at exit, for the table.
class BlasPrefill {
 public:
  static BlasPrefill& get() {
    static BlasPrefill p;
    return p;
  }
  bool on() const { return on_; }
  // A column-major (rows, cols) matrix of `elt`-byte elements at leading dimension ld.
  void fill(void* p, int64_t rows, int64_t cols, int64_t ld, size_t elt, cudaStream_t stream) {
    if (!on_ || p == nullptr || rows <= 0 || cols <= 0) return;
    const size_t width = static_cast<size_t>(rows) * elt;
    if (ld == rows)
      EMBER_CUDA_CHECK(cudaMemsetAsync(p, 0, width * static_cast<size_t>(cols), stream));
    else
      EMBER_CUDA_CHECK(cudaMemset2DAsync(p, static_cast<size_t>(ld) * elt, 0, width,
                                         static_cast<size_t>(cols), stream));
    calls_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(width * static_cast<size_t>(cols), std::memory_order_relaxed);
  }
  ~BlasPrefill() {
    if (on_)
      std::fprintf(stderr,
                   "ember: EMBER_SANITIZE_PREFILL_BLAS_OUTPUTS: %llu cuBLAS(Lt) outputs "
                   "(%llu bytes) pre-filled before their calls\n",
                   static_cast<unsigned long long>(calls_.load()),
                   static_cast<unsigned long long>(bytes_.load()));
  }

 private:
  BlasPrefill() {
    const char* v = std::getenv("EMBER_SANITIZE_PREFILL_BLAS_OUTPUTS");
    on_ = v != nullptr && std::string(v) == "1";
  }
  bool on_ = false;
  std::atomic<unsigned long long> calls_{0}, bytes_{0};
};

constexpr int kMaxDevices = 64;

BlasHandle& handle_for(int device) {
  static std::mutex mutex;
  static std::array<std::unique_ptr<BlasHandle>, kMaxDevices> handles;
  check_device(device);
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<BlasHandle>& slot = handles[static_cast<size_t>(device)];
  if (!slot) slot = std::make_unique<BlasHandle>(device);
  return *slot;
}

// EMBER_BLAS_TRACE=<dir>: each distinct cuBLAS / cuBLASLt call this process makes
// is written once, as one line, to <dir>/blas.<pid>.txt, in cuBLAS's own
// (column-major) terms with each pointer's offset from a 256-byte boundary, so that
// tools/cublaslt_racecheck_probe.cu --replay can issue the very same calls without
// ember (issue 33: whether a sanitizer report inside cuBLAS is the library's own).
// Off (the default): one relaxed load per call.
class BlasTrace {
 public:
  static BlasTrace& get() {
    static BlasTrace t;
    return t;
  }
  bool on() const { return file_ != nullptr; }
  void write(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!seen_.insert(line).second) return;
    std::fprintf(file_, "%s\n", line.c_str());
    std::fflush(file_);  // a test binary may end in _exit or abort
  }

 private:
  BlasTrace() {
    const char* dir = std::getenv("EMBER_BLAS_TRACE");
    if (dir == nullptr || *dir == 0) return;
    const std::string path =
        std::string(dir) + "/blas." + std::to_string(static_cast<long>(getpid())) + ".txt";
    file_ = std::fopen(path.c_str(), "a");
    if (file_ == nullptr)
      std::fprintf(stderr, "ember: EMBER_BLAS_TRACE: cannot open %s for writing\n", path.c_str());
  }
  std::FILE* file_ = nullptr;
  std::mutex mutex_;
  std::set<std::string> seen_;
};

long long misalign(const void* p) {
  return static_cast<long long>(reinterpret_cast<uintptr_t>(p) % 256);
}

const char* op_name(cublasOperation_t op) {
  return op == CUBLAS_OP_T ? "T" : "N";
}

void check_fits_int(const char* what, int64_t v) {
  EMBER_CHECK(v >= 0 && v <= INT_MAX, "matmul: ", what, " = ", v,
              " does not fit cuBLAS's 32-bit sizes");
}

}  // namespace

void set_allow_tf32(bool allow) {
  g_allow_tf32.store(allow, std::memory_order_relaxed);
}
bool allow_tf32() {
  return g_allow_tf32.load(std::memory_order_relaxed);
}

// Row-major C = A @ B is column-major C^T = B^T @ A^T: cuBLAS's first operand is
// our B, its second our A. A row-major operand read as column-major is its own
// transpose (op N); a transposed one (column-major storage) needs op T.
void gemm(DType dtype, int64_t batch, int64_t m, int64_t n, int64_t k, const GemmOperand& a,
          const GemmOperand& b, void* c, int device, cudaStream_t stream) {
  check_fits_int("m", m);
  check_fits_int("n", n);
  check_fits_int("k", k);
  check_fits_int("batch", batch);
  check_fits_int("lda", a.ld);
  check_fits_int("ldb", b.ld);
  const int cm = static_cast<int>(n), cn = static_cast<int>(m), ck = static_cast<int>(k);
  const int lda = static_cast<int>(b.ld), ldb = static_cast<int>(a.ld), ldc = static_cast<int>(n);
  const long long stride_a = b.batch_stride, stride_b = a.batch_stride, stride_c = m * n;
  const int count = static_cast<int>(batch);
  const cublasOperation_t op_a = b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;

  DeviceGuard guard(device);
  BlasHandle& h = handle_for(device);
  std::lock_guard<std::mutex> lock(h.mutex());
  cublasHandle_t handle = h.get();
  EMBER_CUBLAS_CHECK(cublasSetStream(handle, stream));
  // cublasSetStream resets the workspace to cuBLAS's default pool: set ours again.
  EMBER_CUBLAS_CHECK(cublasSetWorkspace(handle, h.workspace(), kBlasWorkspaceBytes));
  EMBER_CUBLAS_CHECK(cublasSetMathMode(handle, dtype == DType::Float32 && allow_tf32()
                                                   ? CUBLAS_TF32_TENSOR_OP_MATH
                                                   : CUBLAS_DEFAULT_MATH));
  if (BlasTrace& trace = BlasTrace::get(); trace.on()) {
    char line[320];
    std::snprintf(line, sizeof(line),
                  "gemm %s %s %s %s %d %d %d %d %d %d %lld %lld %lld %d %lld %lld %lld",
                  dtype == DType::BFloat16  ? "bf16"
                  : dtype == DType::Float64 ? "fp64"
                                            : "fp32",
                  dtype == DType::Float32 && allow_tf32() ? "tf32" : "default", op_name(op_a),
                  op_name(op_b), cm, cn, ck, lda, ldb, ldc, stride_a, stride_b, stride_c, count,
                  misalign(b.data), misalign(a.data), misalign(c));
    trace.write(line);
  }
  // C is contiguous: (batch, m, n) elements.
  BlasPrefill::get().fill(c, m * n, batch, m * n, element_size(dtype), stream);
  switch (dtype) {
    case DType::Float32: {
      const float one = 1.f, zero = 0.f;
      const float* pa = static_cast<const float*>(b.data);
      const float* pb = static_cast<const float*>(a.data);
      float* pc = static_cast<float*>(c);
      if (batch == 1)
        EMBER_CUBLAS_CHECK(
            cublasSgemm(handle, op_a, op_b, cm, cn, ck, &one, pa, lda, pb, ldb, &zero, pc, ldc));
      else
        EMBER_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, op_a, op_b, cm, cn, ck, &one, pa, lda,
                                                     stride_a, pb, ldb, stride_b, &zero, pc, ldc,
                                                     stride_c, count));
      return;
    }
    case DType::Float64: {
      const double one = 1.0, zero = 0.0;
      const double* pa = static_cast<const double*>(b.data);
      const double* pb = static_cast<const double*>(a.data);
      double* pc = static_cast<double*>(c);
      if (batch == 1)
        EMBER_CUBLAS_CHECK(
            cublasDgemm(handle, op_a, op_b, cm, cn, ck, &one, pa, lda, pb, ldb, &zero, pc, ldc));
      else
        EMBER_CUBLAS_CHECK(cublasDgemmStridedBatched(handle, op_a, op_b, cm, cn, ck, &one, pa, lda,
                                                     stride_a, pb, ldb, stride_b, &zero, pc, ldc,
                                                     stride_c, count));
      return;
    }
    case DType::BFloat16: {
      const float one = 1.f, zero = 0.f;
      if (batch == 1)
        EMBER_CUBLAS_CHECK(cublasGemmEx(handle, op_a, op_b, cm, cn, ck, &one, b.data, CUDA_R_16BF,
                                        lda, a.data, CUDA_R_16BF, ldb, &zero, c, CUDA_R_16BF, ldc,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      else
        EMBER_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
            handle, op_a, op_b, cm, cn, ck, &one, b.data, CUDA_R_16BF, lda, stride_a, a.data,
            CUDA_R_16BF, ldb, stride_b, &zero, c, CUDA_R_16BF, ldc, stride_c, count,
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return;
    }
    default:
      EMBER_FAIL("matmul: dtype ", dtype, " is not supported on CUDA");
  }
}

// --- cuBLASLt ---------------------------------------------------------------

namespace {

constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;  // cuBLAS's own default on Hopper

// A cuBLASLt handle and its workspace on one device, created on first use and kept
// for the process (as the cuBLAS handle above). The workspace is library scratch,
// not tensor memory, so it comes from cudaMalloc rather than the caching allocator.
class LtHandle {
 public:
  explicit LtHandle(int device) {
    DeviceGuard guard(device);
    EMBER_CUBLAS_CHECK(cublasLtCreate(&handle_));
    EMBER_CUDA_CHECK(cudaMalloc(&workspace_, kLtWorkspaceBytes));
  }
  ~LtHandle() {
    // At process exit the runtime may already be unloading; the memory goes with
    // the process then, so a failed free here is not worth a message.
    if (workspace_ != nullptr) (void)cudaFree(workspace_);
    if (handle_ != nullptr)
      EMBER_GPU_CALL_LOG("cuBLASLt", cublasLtDestroy(handle_), CUBLAS_STATUS_SUCCESS,
                         cublasGetStatusString);
  }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;

  cublasLtHandle_t get() const { return handle_; }
  void* workspace() const { return workspace_; }
  std::mutex& mutex() { return mutex_; }

  // Heuristic results, one per problem (-1: none offered), so the heuristic runs
  // once per shape rather than on every call.
  using Key = std::string;
  std::map<Key, std::pair<bool, cublasLtMatmulHeuristicResult_t>> algos;

 private:
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::mutex mutex_;
};

LtHandle& lt_handle_for(int device) {
  static std::mutex mutex;
  static std::array<std::unique_ptr<LtHandle>, kMaxDevices> handles;
  check_device(device);
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<LtHandle>& slot = handles[static_cast<size_t>(device)];
  if (!slot) slot = std::make_unique<LtHandle>(device);
  return *slot;
}

// RAII owners of the cuBLASLt descriptors of one call.
struct LtDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDesc() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

template <typename T>
void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& v) {
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v)));
}

cudaDataType_t lt_type(DType dtype) {
  return dtype == DType::BFloat16 ? CUDA_R_16BF : CUDA_R_32F;
}

// Column-major D (rows, cols) = op_a(A) op_b(B) with the epilogue `epi`; the
// descriptors' shapes are cuBLAS's (column-major) view of our row-major operands.
struct LtProblem {
  DType dtype = DType::Float32;
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int64_t rows = 0, cols = 0, inner = 0;  // D is rows x cols, summed over inner
  const void* a = nullptr;                // as stored, column-major
  int64_t a_rows = 0, a_cols = 0, lda = 0;
  const void* b = nullptr;
  int64_t b_rows = 0, b_cols = 0, ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // BIAS_POINTER (bias in, or bias gradient out)
  void* aux = nullptr;
  int64_t aux_ld = 0;
  bool d_float32 = false;   // D (and C) float32 whatever dtype is
  bool accumulate = false;  // D = A B + D (beta 1; C is D)
};

// What lt_run checks before it asks cuBLASLt anything.
bool lt_attempts(DType dtype, std::initializer_list<int64_t> sizes) {
  if (dtype != DType::Float32 && dtype != DType::BFloat16) return false;
  for (int64_t v : sizes)
    if (v <= 0 || v > INT_MAX) return false;
  return true;
}

bool lt_run(const LtProblem& p, int device, cudaStream_t stream) {
  if (!lt_attempts(p.dtype, {p.rows, p.cols, p.inner, p.lda, p.ldb, p.ldd})) return false;
  const bool tf32 = p.dtype == DType::Float32 && allow_tf32();
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t type = lt_type(p.dtype);
  const cudaDataType_t d_type = p.d_float32 ? CUDA_R_32F : type;

  DeviceGuard guard(device);
  LtHandle& h = lt_handle_for(device);
  std::lock_guard<std::mutex> lock(h.mutex());
  LtDesc ld;
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&ld.desc, compute, CUDA_R_32F));
  set_attr(ld.desc, CUBLASLT_MATMUL_DESC_TRANSA, p.op_a);
  set_attr(ld.desc, CUBLASLT_MATMUL_DESC_TRANSB, p.op_b);
  set_attr(ld.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, p.epi);
  if (p.bias != nullptr) set_attr(ld.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  if (p.aux != nullptr) {
    set_attr(ld.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
    set_attr(ld.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.aux_ld);
  }
  EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld.a, type, static_cast<uint64_t>(p.a_rows),
                                                static_cast<uint64_t>(p.a_cols), p.lda));
  EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld.b, type, static_cast<uint64_t>(p.b_rows),
                                                static_cast<uint64_t>(p.b_cols), p.ldb));
  EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld.d, d_type, static_cast<uint64_t>(p.rows),
                                                static_cast<uint64_t>(p.cols), p.ldd));

  // Alignment (of pointers, in 16-byte steps) changes which kernels qualify.
  auto align_of = [](const void* ptr) {
    const auto v = reinterpret_cast<uintptr_t>(ptr);
    return static_cast<int64_t>(v % 256 == 0 ? 256 : v % 16 == 0 ? 16 : v % 4);
  };
  char key_buf[256];
  std::snprintf(
      key_buf, sizeof(key_buf),
      "%d %d %d %d %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %d %d %d",
      static_cast<int>(p.dtype) + (p.d_float32 ? 16 : 0), tf32 ? 1 : 0, static_cast<int>(p.op_a),
      static_cast<int>(p.op_b), static_cast<long long>(p.rows), static_cast<long long>(p.cols),
      static_cast<long long>(p.inner), static_cast<long long>(p.a_rows),
      static_cast<long long>(p.a_cols), static_cast<long long>(p.lda),
      static_cast<long long>(p.b_rows), static_cast<long long>(p.b_cols),
      static_cast<long long>(p.ldb), static_cast<long long>(p.ldd),
      static_cast<long long>(align_of(p.a)),
      static_cast<long long>(align_of(p.b) * 1000 + align_of(p.d)),
      static_cast<long long>(p.aux != nullptr ? p.aux_ld * 1000 + align_of(p.aux) : 0),
      static_cast<int>(p.epi), p.bias != nullptr ? static_cast<int>(align_of(p.bias)) : 0,
      p.accumulate ? 1 : 0);
  const std::string key(key_buf);
  auto it = h.algos.find(key);
  if (it == h.algos.end()) {
    EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&ld.pref));
    const uint64_t ws = kLtWorkspaceBytes;
    EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        ld.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h.get(), ld.desc, ld.a, ld.b, ld.d,
                                                             ld.d, ld.pref, 1, &result, &count);
    const bool ok = st == CUBLAS_STATUS_SUCCESS && count > 0;
    it = h.algos.emplace(key, std::make_pair(ok, result)).first;
  }
  if (!it->second.first) return false;
  if (BlasTrace& trace = BlasTrace::get(); trace.on()) {
    char line[400];
    std::snprintf(
        line, sizeof(line),
        "lt %s%s %s %s %s %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %d %lld %lld "
        "%lld %lld %lld %lld %lld",
        p.dtype == DType::BFloat16 ? "bf16" : "fp32",
        p.d_float32 && p.dtype != DType::Float32 ? "->fp32" : "", tf32 ? "tf32" : "default",
        op_name(p.op_a), op_name(p.op_b), static_cast<long long>(p.rows),
        static_cast<long long>(p.cols), static_cast<long long>(p.inner),
        static_cast<long long>(p.a_rows), static_cast<long long>(p.a_cols),
        static_cast<long long>(p.lda), static_cast<long long>(p.b_rows),
        static_cast<long long>(p.b_cols), static_cast<long long>(p.ldb),
        static_cast<long long>(p.ldd), static_cast<int>(p.epi), p.bias != nullptr ? 1LL : 0LL,
        static_cast<long long>(p.aux_ld), misalign(p.a), misalign(p.b), misalign(p.d),
        p.bias != nullptr ? misalign(p.bias) : 0LL, p.aux != nullptr ? misalign(p.aux) : 0LL);
    trace.write(line);
  }
  if (BlasPrefill& fill = BlasPrefill::get(); fill.on()) {
    const size_t elt = element_size(p.dtype);
    // An accumulating D holds the sum so far: never prefilled.
    if (!p.accumulate)
      fill.fill(p.d, p.rows, p.cols, p.ldd, p.d_float32 ? sizeof(float) : elt, stream);
    if (p.epi == CUBLASLT_EPILOGUE_GELU_AUX || p.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
      fill.fill(p.aux, p.rows, p.cols, p.aux_ld, elt, stream);
    if (p.epi == CUBLASLT_EPILOGUE_BGRADB)  // one bias gradient per column of D
      fill.fill(const_cast<void*>(p.bias), p.cols, 1, p.cols, elt, stream);
  }
  const float one = 1.f, zero = 0.f;
  EMBER_CUBLAS_CHECK(cublasLtMatmul(
      h.get(), ld.desc, &one, p.a, ld.a, p.b, ld.b, p.accumulate ? &one : &zero, p.d, ld.d, p.d,
      ld.d, &it->second.second.algo, h.workspace(), kLtWorkspaceBytes, stream));
  return true;
}

}  // namespace

// Row-major y (m, n) is column-major y^T (n, m) = w (stored (k, n), op T) times
// x (stored (k, m), op N); the bias runs along D's rows (our n), as cuBLASLt wants.
//
// Activations cuBLASLt cannot fuse to our accuracy run as a second pass of our
// element-wise kernel (the formula of core/base/elementwise_ops.h) over its output:
// SiLU and exact GELU (cuBLASLt has no such epilogue: its GELU epilogue is the tanh
// form, GeluTanh), and GeluTanh in float32 without TF32 (cuBLASLt's GELU epilogue
// may use a fast approximate tanh, which would cost more than fp32's 1e-5 budget;
// the extra pass is ~1% of an fp32 GEMM's time). The GEMM and bias then write into
// pre (or y).
bool lt_linear_forward(DType dtype, int64_t m, int64_t n, int64_t k, const void* x, int64_t ldx,
                       const void* w, int64_t ldw, const void* b, void* y, void* pre,
                       Activation act, int device, cudaStream_t stream) {
  const bool own_act = act == Activation::Silu || act == Activation::Gelu ||
                       (act == Activation::GeluTanh && dtype == DType::Float32 && !allow_tf32());
  LtProblem p{};
  p.dtype = dtype;
  p.op_a = CUBLAS_OP_T;
  p.op_b = CUBLAS_OP_N;
  p.rows = n, p.cols = m, p.inner = k;
  p.a = w, p.a_rows = k, p.a_cols = n, p.lda = ldw;
  p.b = x, p.b_rows = k, p.b_cols = m, p.ldb = ldx;
  p.d = own_act && pre != nullptr ? pre : y, p.ldd = n;
  p.bias = b;
  if (own_act || act == Activation::None) {
    p.epi = b != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  } else if (act == Activation::Relu) {
    p.epi = b != nullptr ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  } else if (act == Activation::GeluTanh) {
    if (pre != nullptr) {
      if (n % 8 != 0) return false;  // the GELU input's leading dimension must be a multiple of 8
      p.epi = b != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      p.aux = pre, p.aux_ld = n;
    } else {
      p.epi = b != nullptr ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    }
  } else {
    EMBER_FAIL("linear: activation ", activation_name(act), " has no cuBLASLt epilogue");
  }
  if (!lt_run(p, device, stream)) return false;
  if (own_act) {
    const StridedLayout flat = flat_layout(m * n);
    launch_unary(unary_op_of(act), dtype, p.d, flat, y, flat, m * n, 0.0, stream);
  }
  return true;
}

namespace {

// Row-major d_w (n, k) is column-major d_w^T (k, n) = x (stored (k, m), op N) times
// d_y (stored (n, m), op T).
LtProblem weight_grad_problem(DType dtype, int64_t m, int64_t n, int64_t k, const void* x,
                              int64_t ldx, const void* d_y, int64_t ldd, void* d_w) {
  LtProblem p{};
  p.dtype = dtype;
  p.op_a = CUBLAS_OP_N;
  p.op_b = CUBLAS_OP_T;
  p.rows = k, p.cols = n, p.inner = m;
  p.a = x, p.a_rows = k, p.a_cols = m, p.lda = ldx;
  p.b = d_y, p.b_rows = n, p.b_cols = m, p.ldb = ldd;
  p.d = d_w, p.ldd = k;
  return p;
}

}  // namespace

// BGRADB sums op(B) = d_y over the GEMM's inner m: the bias gradient, one per column
// of D (our n).
bool lt_linear_backward_weight(DType dtype, int64_t m, int64_t n, int64_t k, const void* x,
                               int64_t ldx, const void* d_y, int64_t ldd, void* d_w, void* d_b,
                               int device, cudaStream_t stream) {
  LtProblem p = weight_grad_problem(dtype, m, n, k, x, ldx, d_y, ldd, d_w);
  p.epi = d_b != nullptr ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
  p.bias = d_b;
  return lt_run(p, device, stream);
}

bool lt_linear_backward_weight_into(DType dtype, int64_t m, int64_t n, int64_t k, const void* x,
                                    int64_t ldx, const void* d_y, int64_t ldd, void* d_w,
                                    bool d_w_float32, bool accumulate, int device,
                                    cudaStream_t stream) {
  LtProblem p = weight_grad_problem(dtype, m, n, k, x, ldx, d_y, ldd, d_w);
  p.d_float32 = d_w_float32;
  p.accumulate = accumulate;
  return lt_run(p, device, stream);
}

bool lt_linear_backward_weight_attempts(DType dtype, int64_t m, int64_t n, int64_t k, int64_t ldx) {
  // The sizes lt_linear_backward_weight gives lt_run: rows k, cols n, inner m,
  // lda ldx, ldb n, ldd k.
  return lt_attempts(dtype, {k, n, m, ldx, n, k});
}

size_t blas_workspace_bytes() {
  return kBlasWorkspaceBytes;
}
size_t lt_workspace_bytes() {
  return kLtWorkspaceBytes;
}

void create_handles(int device) {
  handle_for(device);
  lt_handle_for(device);
}

}  // namespace ember::cuda
