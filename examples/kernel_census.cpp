// kernel_census: what one training step of a workload (examples/workloads.h) asks
// the device to do, counted on the meta device mirroring CUDA: every kernel family's
// calls, and for the element-wise ones (unary, binary, where, cast, fill and their
// backwards) the bytes each moves and whether its operands are contiguous or go
// through the strided index path, grouped by the op that launched them (the
// allocation-site tag) -- the byte floor of each kernel class at copy bandwidth,
// before any GPU time is spent. GEMM and attention families are counted in FLOPs
// too; layer norm, batch norm, cross-entropy, dropout, the fused Adam and the
// multi-tensor norm and scale in bytes at their floors (each operand once); the
// convolution's columns (im2col, col2im) in bytes, its implicit GEMM in FLOPs.
//
//   kernel_census gpt2 [--steps 2] [--top 40] [--tflops 790] [--gbps 4209]
//
// The last step is counted (the first ones warm the optimizer's state up). Each
// family's floor is the larger of its FLOPs at --tflops and its bytes at --gbps (by
// default the H200's dense bf16 ceiling and its measured copy bandwidth,
// benchmarks/NOTES.md); the step's floor is their sum.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/alloc_site.h"
#include "core/meta.h"
#include "examples/workloads.h"

using namespace ember;

namespace {

struct Row {
  int64_t calls = 0;
  double bytes = 0;
  double flops = 0;
};

using Key = std::tuple<std::string, std::string, std::string, std::string, std::string>;

const char* path_of(std::initializer_list<const StridedLayout*> ls) {
  bool broadcast = false, strided = false;
  for (const StridedLayout* l : ls) {
    if (l->contiguous) continue;
    strided = true;
    for (int d = 0; d < l->ndim; ++d)
      if (l->strides[d] == 0 && l->sizes[d] > 1) broadcast = true;
  }
  if (!strided) return "contiguous";
  return broadcast ? "strided+broadcast" : "strided";
}

// Bytes an operand moves: n elements, or its distinct ones where it broadcasts.
double operand_bytes(const StridedLayout& l, int64_t n, DType t) {
  double distinct = static_cast<double>(n);
  if (!l.contiguous) {
    distinct = 1;
    for (int d = 0; d < l.ndim; ++d)
      if (l.strides[d] != 0) distinct *= static_cast<double>(l.sizes[d]);
  }
  return distinct * static_cast<double>(element_size(t));
}

double gemm_bytes(DType t, int64_t batch, int64_t m, int64_t n, int64_t k, size_t out_size) {
  const double b = static_cast<double>(batch);
  return b * (static_cast<double>(element_size(t)) * static_cast<double>(m * k + k * n) +
              static_cast<double>(out_size) * static_cast<double>(m * n));
}
double gemm_flops(int64_t batch, int64_t m, int64_t n, int64_t k) {
  return 2.0 * static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
         static_cast<double>(k);
}

// Every kernel the meta device runs while `on`: calls per family, and bytes (and
// FLOPs) per (family, op, allocation-site tag, dtype, path) for the families it
// knows the traffic of.
class Census final : public MetaKernelObserver {
 public:
  bool on = false;
  std::map<std::string, Row> by_family;
  std::map<Key, Row> by_op;

#define EMBER_CENSUS_FAMILY(name, R, Args, kind) \
  void name(const kernels::Args& a) override {   \
    if (!on) return;                             \
    by_family[#name].calls++;                    \
    measure(a);                                  \
  }
  EMBER_KERNEL_FAMILIES(EMBER_CENSUS_FAMILY)
#undef EMBER_CENSUS_FAMILY

 private:
  void note(const char* family, const std::string& op, DType t, const char* path, double bytes,
            double flops = 0) {
    Row& f = by_family[family];
    f.bytes += bytes;
    f.flops += flops;
    const char* tag = AllocationTag::current();
    Row& r =
        by_op[{family, op, tag != nullptr ? tag : "(no op)", std::string(dtype_name(t)), path}];
    r.calls++;
    r.bytes += bytes;
    r.flops += flops;
  }

  template <typename Args>
  void measure(const Args&) {}  // a family whose traffic the census does not model
  void measure(const kernels::UnaryArgs& a) {
    note("unary", unary_name(a.op), a.dtype, path_of({&a.xl, &a.yl}),
         operand_bytes(a.xl, a.n, a.dtype) + operand_bytes(a.yl, a.n, a.out_dtype));
  }
  void measure(const kernels::BinaryArgs& a) {
    const DType x = a.x_bf16 ? DType::BFloat16 : a.dtype, y = a.y_bf16 ? DType::BFloat16 : a.dtype;
    note("binary", std::string(binary_name(a.op)) + (a.x_bf16 || a.y_bf16 ? " (bf16 read)" : ""),
         a.dtype, path_of({&a.xl, &a.yl, &a.ol}),
         operand_bytes(a.xl, a.n, x) + operand_bytes(a.yl, a.n, y) +
             operand_bytes(a.ol, a.n, a.out_dtype));
  }
  void measure(const kernels::UnaryBackwardArgs& a) {
    note("unary_backward", unary_name(a.op), a.dtype, path_of({&a.gl, &a.sl, &a.ol}),
         operand_bytes(a.gl, a.n, a.dtype) + operand_bytes(a.sl, a.n, a.dtype) +
             operand_bytes(a.ol, a.n, a.dtype));
  }
  void measure(const kernels::BinaryBackwardArgs& a) {
    note("binary_backward", binary_name(a.op), a.dtype, path_of({&a.gl, &a.xl, &a.yl, &a.ol}),
         operand_bytes(a.gl, a.n, a.dtype) + operand_bytes(a.xl, a.n, a.dtype) +
             operand_bytes(a.yl, a.n, a.dtype) + operand_bytes(a.ol, a.n, a.dtype));
  }
  void measure(const kernels::WhereArgs& a) {
    note("where", "where", a.dtype, path_of({&a.cl, &a.al, &a.bl, &a.ol}),
         operand_bytes(a.cl, a.n, DType::Bool) + operand_bytes(a.al, a.n, a.dtype) +
             operand_bytes(a.bl, a.n, a.dtype) + operand_bytes(a.ol, a.n, a.dtype));
  }
  void measure(const kernels::CastArgs& a) {
    note("cast", std::string(dtype_name(a.from)) + "->" + std::string(dtype_name(a.to)), a.from,
         path_of({&a.xl, &a.yl}),
         operand_bytes(a.xl, a.n, a.from) + operand_bytes(a.yl, a.n, a.to));
  }
  void measure(const kernels::FillArgs& a) {
    note("fill", "fill", a.dtype, path_of({&a.yl}), operand_bytes(a.yl, a.n, a.dtype));
  }
  void measure(const kernels::GemmArgs& a) {
    note("gemm", "gemm", a.dtype, "-",
         gemm_bytes(a.dtype, a.batch, a.m, a.n, a.k, element_size(a.dtype)),
         gemm_flops(a.batch, a.m, a.n, a.k));
  }
  void measure(const kernels::LinearArgs& a) {
    note("linear_fused", "gemm", a.dtype, "-",
         gemm_bytes(a.dtype, 1, a.m, a.n, a.k, element_size(a.dtype)),
         gemm_flops(1, a.m, a.n, a.k));
  }
  void measure(const kernels::LinearInputGradArgs& a) {
    note("linear_input_grad", "gemm", a.dtype, "-",
         gemm_bytes(a.dtype, 1, a.m, a.k, a.n, element_size(a.dtype)),
         gemm_flops(1, a.m, a.k, a.n));
  }
  // The fused families, at their floors: each operand read or written once.
  void measure(const kernels::LayerNormArgs& a) {
    const double n = static_cast<double>(a.rows * a.cols), es = element_size(a.dtype);
    const double out = a.y_bf16 ? 2 : es;
    // With a residual: its read and the sum's write as well (add_layer_norm).
    const double res = a.residual == nullptr ? 0 : (a.residual_bf16 ? 2 : es) + es;
    const std::string what =
        std::string(a.residual == nullptr               ? "fwd"
                    : a.residual_dropout.threshold != 0 ? "fwd + dropped residual"
                                                        : "fwd + residual") +
        (a.y_bf16 ? " (bf16 out)" : "");
    note("layer_norm_fused", what, a.dtype, "-",
         n * (es + out + res) + static_cast<double>(a.cols) * es * 2 +
             static_cast<double>(a.rows) * 8);
  }
  void measure(const kernels::LayerNormBackwardArgs& a) {
    const double n = static_cast<double>(a.rows * a.cols), es = element_size(a.dtype);
    const double dy = a.d_y_bf16 ? 2 : es;
    const double dx = a.d_x == nullptr ? 0 : a.d_x_add != nullptr ? 2 * es : es;
    note("layer_norm_backward_fused", a.d_x_add != nullptr ? "bwd (folds d_x)" : "bwd", a.dtype,
         "-", n * (dy + es + dx) + static_cast<double>(a.rows) * 8);
  }
  // Batch norm at its floor: forward x read, y written; backward d_y and x read, d_x
  // written (the per-channel statistics are small).
  void measure(const kernels::BatchNormArgs& a) {
    note("batch_norm_fused", a.training ? "fwd (train)" : "fwd (eval)", a.dtype, "-",
         2.0 * static_cast<double>(a.n * a.c * a.m) * element_size(a.dtype));
  }
  void measure(const kernels::BatchNormBackwardArgs& a) {
    const double per = a.d_x != nullptr ? 3.0 : 2.0;
    note("batch_norm_backward_fused", "bwd", a.dtype, "-",
         per * static_cast<double>(a.n * a.c * a.m) * element_size(a.dtype));
  }
  void measure(const kernels::CrossEntropyArgs& a) {
    const double n = static_cast<double>(a.rows * a.classes), es = element_size(a.dtype);
    note("cross_entropy_fused", a.op, a.dtype, "-", n * es * (a.d_logits != nullptr ? 2 : 1));
  }
  void measure(const kernels::DropoutArgs& a) {
    // y_bf16: float32 read, bfloat16 written (a cast and the dropout in one pass).
    const double in = static_cast<double>(element_size(a.dtype)), out = a.y_bf16 ? 2 : in;
    note("dropout", a.y_bf16 ? "dropout (bf16 out)" : "dropout", a.dtype, "-",
         static_cast<double>(a.n) * (in + out));
  }
  void measure(const kernels::FusedAdamArgs& a) {
    // param, grad, exp_avg, exp_avg_sq read; param, exp_avg, exp_avg_sq written (float32).
    double elems = 0;
    for (int64_t i = 0; i < a.count; ++i) elems += static_cast<double>(a.tensors[i].numel);
    note("fused_adam", a.config.decoupled_weight_decay ? "AdamW" : "Adam", DType::Float32, "-",
         elems * 4 * 7);
  }
  void measure(const kernels::MultiTensorNormArgs& a) {
    double bytes = 0;
    for (int64_t i = 0; i < a.count; ++i)
      bytes += static_cast<double>(a.tensors[i].numel) * element_size(a.tensors[i].dtype);
    note("multi_tensor_norm", "norm", DType::Float32, "-", bytes);
  }
  void measure(const kernels::MultiTensorScaleArgs& a) {
    double bytes = 0;
    for (int64_t i = 0; i < a.count; ++i)
      bytes += static_cast<double>(a.tensors[i].numel) * element_size(a.tensors[i].dtype) * 2;
    note("multi_tensor_scale", "scale", DType::Float32, "-", bytes);
  }
  void measure(const kernels::MultiTensorCastArgs& a) {  // float32 read, bfloat16 written
    double elems = 0;
    for (int64_t i = 0; i < a.count; ++i) elems += static_cast<double>(a.tensors[i].numel);
    note("multi_tensor_cast", "cast", DType::Float32, "-", elems * 6);
  }
  // Attention: FLOPs 4 B H Tq Tk D forward (halved when causal and square), the
  // backward 2.5 times that; bytes q, k, v, o (and d_o, dq, dk, dv backward).
  static double attention_flops(int64_t b, int64_t h, int64_t tq, int64_t tk, int64_t d,
                                bool causal) {
    const double f = 4.0 * static_cast<double>(b * h) * static_cast<double>(tq) *
                     static_cast<double>(tk) * static_cast<double>(d);
    return causal && tq == tk ? f / 2 : f;
  }
  void measure(const kernels::AttentionArgs& a) {
    const double es = element_size(a.dtype), bh = static_cast<double>(a.batch * a.heads);
    note(
        "attention_fused", a.causal ? "causal" : "full", a.dtype, "-",
        bh * es * static_cast<double>(a.head_dim) * static_cast<double>(2 * a.q_len + 2 * a.kv_len),
        attention_flops(a.batch, a.heads, a.q_len, a.kv_len, a.head_dim, a.causal));
  }
  void measure(const kernels::AttentionBackwardArgs& a) {
    const double es = element_size(a.dtype), bh = static_cast<double>(a.batch * a.heads);
    note(
        "attention_backward_fused", a.causal ? "causal" : "full", a.dtype, "-",
        bh * es * static_cast<double>(a.head_dim) * static_cast<double>(4 * a.q_len + 4 * a.kv_len),
        2.5 * attention_flops(a.batch, a.heads, a.q_len, a.kv_len, a.head_dim, a.causal));
  }
  // Convolution: the columns (im2col writes them from x, col2im reads them into x:
  // the same bytes, counted together), and the implicit GEMM (FLOPs 2 m n k of its pass; bytes its
  // image, other operand and output once).
  void measure(const kernels::Im2colArgs& a) {
    const double es = element_size(a.dtype);
    const double x = static_cast<double>(a.n * a.c * a.h * a.w) * es;
    const double cols = static_cast<double>(a.n * a.c * a.kh * a.kw * a.oh * a.ow) * es;
    note("im2col+col2im", "columns", a.dtype, "-", x + cols);
  }
  void measure(const kernels::ConvGemmArgs& a) {
    const kernels::ConvGemmShape& s = a.shape;
    const double x = static_cast<double>(s.n * s.c * s.h * s.w);
    const double y = static_cast<double>(s.n * s.o * s.oh * s.ow);
    const double w = static_cast<double>(s.o * s.c * s.kh * s.kw);
    static const char* const kPass[] = {"forward", "input grad", "weight grad"};
    // forward: x, w read, y written; input grad: d_y, w read, d_x written; weight
    // grad: x, d_y read, float32 parts written.
    const double bytes =
        a.pass == 2 ? 2 * (x + y) + 4 * w * static_cast<double>(a.splits) : 2 * (x + y + w);
    const double m =
        a.pass == 1 ? static_cast<double>(s.n * s.h * s.w) : static_cast<double>(s.n * s.oh * s.ow);
    note("conv_gemm", kPass[a.pass], a.dtype, "-", bytes,
         2.0 * m * static_cast<double>(a.pass == 1 ? s.c : s.o) *
             static_cast<double>(s.kh * s.kw * (a.pass == 1 ? s.o : s.c)));
  }
  void measure(const kernels::LinearWeightGradArgs& a) {
    // d_w (n, k) over m rows; a sum into d_w reads it too.
    const size_t out = a.d_w_float32 ? 4 : element_size(a.dtype);
    note("linear_weight_grad_fused", a.accumulate ? "gemm+=" : "gemm", a.dtype, "-",
         gemm_bytes(a.dtype, 1, a.n, a.k, a.m, a.accumulate ? 2 * out : out),
         gemm_flops(1, a.n, a.k, a.m));
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: kernel_census WORKLOAD [--steps N] [--top K]\n");
    return 2;
  }
  const std::string name = argv[1];
  int steps = 2, top = 40;
  double tflops = 790, gbps = 4209;
  for (int i = 2; i < argc; i += 2) {
    const bool has_value = i + 1 < argc;
    const int value = has_value ? std::atoi(argv[i + 1]) : 0;
    const double real = has_value ? std::atof(argv[i + 1]) : 0;
    if (std::strcmp(argv[i], "--steps") == 0 && has_value && value >= 1) {
      steps = value;
    } else if (std::strcmp(argv[i], "--top") == 0 && has_value && value >= 0) {
      top = value;
    } else if (std::strcmp(argv[i], "--tflops") == 0 && has_value && real > 0) {
      tflops = real;
    } else if (std::strcmp(argv[i], "--gbps") == 0 && has_value && real > 0) {
      gbps = real;
    } else {
      std::fprintf(stderr,
                   "kernel_census: bad argument %s (--steps N >= 1, --top K >= 0, --tflops X > 0, "
                   "--gbps Y > 0)\n",
                   argv[i]);
      return 2;
    }
  }
  const auto all = workloads::all();
  const workloads::Workload* w = nullptr;
  for (const auto& x : all)
    if (x.name == name) w = &x;
  if (w == nullptr) {
    std::fprintf(stderr, "kernel_census: no workload %s; one of:", name.c_str());
    for (const auto& x : all) std::fprintf(stderr, " %s", x.name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  Census census;
  MetaDeviceScope meta(MetaDeviceOptions().observe(&census));
  auto step = w->factory()(Device(DeviceType::Meta));
  for (int s = 0; s < steps; ++s) {
    census.on = s == steps - 1;
    step(s);
  }
  census.on = false;
  std::printf("== %s (%s): step %d on the meta device mirroring CUDA\n", name.c_str(),
              w->about.c_str(), steps);
  std::printf("%-26s %8s %10s %10s %10s\n", "family", "calls", "GB moved", "GFLOP", "floor ms");
  Row total;
  double floor_ms = 0;
  for (const auto& [f, r] : census.by_family) {  // by name
    const double ms = std::max(r.flops / (tflops * 1e9), r.bytes / (gbps * 1e6));
    std::printf("%-26s %8lld %10.3f %10.1f %10.3f\n", f.c_str(), static_cast<long long>(r.calls),
                r.bytes / 1e9, r.flops / 1e9, ms);
    total.calls += r.calls;
    total.bytes += r.bytes;
    total.flops += r.flops;
    floor_ms += ms;
  }
  std::printf("%-26s %8lld %10.3f %10.1f %10.3f\n", "total (modelled families)",
              static_cast<long long>(total.calls), total.bytes / 1e9, total.flops / 1e9, floor_ms);
  std::printf("floor: %.2f ms at %.0f TFLOP/s and %.0f GB/s (each family the larger of its two)\n",
              floor_ms, tflops, gbps);
  std::vector<std::pair<Key, Row>> rows(census.by_op.begin(), census.by_op.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
  std::printf("\n%-24s %-18s %-28s %-9s %-17s %6s %9s %9s\n", "family", "op", "tag", "dtype",
              "path", "calls", "GB", "GFLOP");
  int shown = 0;
  for (const auto& [k, r] : rows) {
    if (shown++ >= top) break;
    const auto& [fam, op, tag, dt, path] = k;
    std::printf("%-24s %-18s %-28s %-9s %-17s %6lld %9.3f %9.1f\n", fam.c_str(), op.c_str(),
                tag.c_str(), dt.c_str(), path.c_str(), static_cast<long long>(r.calls),
                r.bytes / 1e9, r.flops / 1e9);
  }
  return 0;
}
