// matmul: 2-D x 2-D, batched (B, n, k) x (B, k, m), and (B, n, k) x (k, m) with the
// right operand shared by every batch, through the device's gemm kernel (the CPU
// reference accumulates in double in i-k-j order; CUDA runs cuBLAS), which reads
// transposed views in place. Backward: d_a = g @ b^T, d_b = a^T @ g (summed over a shared b's
// batch).
#include <algorithm>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

using Grads = std::vector<Tensor>;

namespace {

// out (batch, n, m) = a (batch, n, k) @ b ((batch,) k, m).
struct MatmulDims {
  int64_t batch = 1, n = 0, k = 0, m = 0;
  bool b_shared = false;  // b is 2-D while a is 3-D
};

MatmulDims check_matmul(const Tensor& a, const Tensor& b) {
  check_defined("matmul", a, "first operand");
  check_defined("matmul", b, "second operand");
  check_same_device("matmul", a, b);
  check_same_dtype("matmul", a, b);
  check_floating("matmul", a);
  EMBER_CHECK((a.dim() == 2 && b.dim() == 2) || (a.dim() == 3 && (b.dim() == 3 || b.dim() == 2)),
              "matmul: unsupported operand shapes ", shape_str(a.sizes()), " and ",
              shape_str(b.sizes()),
              "; expected 2-D x 2-D, (B, n, k) x (B, k, m) or (B, n, k) x (k, m)");
  EMBER_CHECK(a.size(-1) == b.size(-2), "matmul: shapes ", shape_str(a.sizes()), " and ",
              shape_str(b.sizes()), " cannot be multiplied (", a.size(-1), " columns vs ",
              b.size(-2), " rows)");
  EMBER_CHECK(a.dim() == 2 || b.dim() == 2 || a.size(0) == b.size(0), "matmul: shapes ",
              shape_str(a.sizes()), " and ", shape_str(b.sizes()), " have different batch sizes (",
              a.size(0), " vs ", b.size(0), ")");
  MatmulDims d;
  d.batch = a.dim() == 3 ? a.size(0) : 1;
  d.n = a.size(-2);
  d.k = a.size(-1);
  d.m = b.size(-1);
  d.b_shared = a.dim() == 3 && b.dim() == 2;
  return d;
}

// How a kernel can read the last two dims (rows, cols) of t in place: row-major
// (unit column stride) or column-major (a transposed contiguous matrix). False
// when neither fits and t must be copied.
bool gemm_operand(const Tensor& t, int64_t rows, int64_t cols, kernels::MatrixOperand& op) {
  const int64_t sr = t.stride(-2), sc = t.stride(-1);
  op.data = t.raw_data();
  op.batch_stride = t.dim() == 3 ? t.stride(0) : 0;
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= std::max<int64_t>(cols, 1))) {
    op.transposed = false;
    op.ld = rows == 1 ? std::max<int64_t>(cols, 1) : sr;
    return true;
  }
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= std::max<int64_t>(rows, 1))) {
    op.transposed = true;
    op.ld = cols == 1 ? std::max<int64_t>(rows, 1) : sc;
    return true;
  }
  return false;
}

void run_gemm(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulDims& d) {
  Tensor ac = a, bc = b;  // keep any contiguous copies alive until the GEMM is queued
  kernels::MatrixOperand oa, ob;
  if (!gemm_operand(ac, d.n, d.k, oa)) {
    ac = contiguous(a);
    gemm_operand(ac, d.n, d.k, oa);
  }
  if (!gemm_operand(bc, d.k, d.m, ob)) {
    bc = contiguous(b);
    gemm_operand(bc, d.k, d.m, ob);
  }
  int64_t batch = d.batch, rows = d.n;
  // A shared b and a row-major a whose batches follow each other: one plain GEMM
  // of (batch * n, k) x (k, m), which cuBLAS runs faster than a batched one.
  if (batch > 1 && ob.batch_stride == 0 && !oa.transposed && oa.batch_stride == d.n * oa.ld) {
    rows = batch * d.n;
    batch = 1;
  }
  kernels::kernels_for(out.device())
      .gemm({out.device(), out.dtype(), batch, rows, d.m, d.k, oa, ob, out.raw_data()});
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  OpSite site("matmul");
  const MatmulDims d = check_matmul(a, b);
  Tensor out = empty(a.dim() == 2 ? Shape{d.n, d.m} : Shape{d.batch, d.n, d.m},
                     TensorOptions().dtype(a.dtype()).device(a.device()));
  if (out.numel() > 0) {
    if (d.k == 0) {
      NoGradGuard ng;
      fill_(out, 0.0);
    } else {
      run_gemm(a.detach(), b.detach(), out, d);
    }
  }
  if (any_requires_grad({&a, &b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    attach_grad_fn(out, "MatmulBackward", {&a, &b}, {gb ? a : Tensor(), ga ? b : Tensor()},
                   [ga, gb, d](const Tensor& g, const SavedTensors& s) {
                     Tensor d_a, d_b;
                     if (ga) d_a = matmul(g, transpose(s[1], -1, -2));
                     if (gb && d.b_shared)  // sum over batches of a_t^T @ g_t, as one GEMM
                       d_b = matmul(transpose(reshape(s[0], {d.batch * d.n, d.k}), 0, 1),
                                    reshape(g, {d.batch * d.n, d.m}));
                     else if (gb)
                       d_b = matmul(transpose(s[0], -1, -2), g);
                     return Grads{d_a, d_b};
                   });
  }
  return out;
}

}  // namespace ember
