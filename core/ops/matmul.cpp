// matmul with torch.matmul's semantics, and bmm. 1-D operands are promoted (a
// vector on the left gets a leading 1, on the right a trailing 1, removed from the
// result), batch dims of any rank broadcast, and every product runs through the
// device's gemm kernel (the CPU reference accumulates in double in i-k-j order;
// CUDA runs cuBLAS's strided-batched GEMM), which reads transposed, sliced and
// expanded operands in place. Backward: d_a = g @ b^T, d_b = a^T @ g, each summed
// back over the batch dims its operand was broadcast along.
#include <algorithm>
#include <type_traits>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

using Grads = std::vector<Tensor>;

namespace {

// out (batch..., n, m) = a (batch_a..., n, k) @ b (batch_b..., k, m), both >= 2-D,
// batch = broadcast(batch_a, batch_b).
struct MatmulDims {
  Shape batch;
  int64_t n = 0, k = 0, m = 0;
};

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "first operand");
  check_defined(op, b, "second operand");
  check_same_device(op, a, b);
  check_same_dtype(op, a, b);
  check_floating(op, a);
}

// Both operands >= 2-D (1-D ones already promoted); `sa`, `sb` are the shapes the
// caller was given, which the messages name.
MatmulDims check_matmul(const char* op, const Tensor& a, const Tensor& b, const Shape& sa,
                        const Shape& sb) {
  EMBER_CHECK(a.size(-1) == b.size(-2), op, ": shapes ", shape_str(sa), " and ", shape_str(sb),
              " cannot be multiplied (", a.size(-1), " columns vs ", b.size(-2), " rows)");
  const Shape ba(a.sizes().begin(), a.sizes().end() - 2);
  const Shape bb(b.sizes().begin(), b.sizes().end() - 2);
  bool broadcast = true;
  for (size_t i = 1; i <= std::min(ba.size(), bb.size()); ++i) {
    const int64_t x = ba[ba.size() - i], y = bb[bb.size() - i];
    broadcast = broadcast && (x == y || x == 1 || y == 1);
  }
  EMBER_CHECK(broadcast, op, ": shapes ", shape_str(sa), " and ", shape_str(sb),
              " have batch dims ", shape_str(ba), " and ", shape_str(bb), " that do not broadcast");
  MatmulDims d;
  d.batch = broadcast_shapes(ba, bb, op);
  d.n = a.size(-2);
  d.k = a.size(-1);
  d.m = b.size(-1);
  return d;
}

// How a kernel can read the last two dims (rows, cols) of t in place: row-major
// (unit column stride) or column-major (a transposed contiguous matrix). False
// when neither fits and t must be copied. Leaves batch_stride to the caller.
bool gemm_operand(const Tensor& t, int64_t rows, int64_t cols, kernels::MatrixOperand& op) {
  const int64_t sr = t.stride(-2), sc = t.stride(-1);
  op.data = t.raw_data();
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

// One run of the broadcast batch dims that each operand steps through with one
// stride (0 where it is broadcast): `size` batches, a's and b's strides.
struct BatchRun {
  int64_t size, sa, sb;
};

// t's stride along each dim of the broadcast batch shape (0 where t has no such
// dim or has size 1 there).
Shape batch_strides(const Tensor& t, const Shape& batch) {
  const int64_t lead = static_cast<int64_t>(batch.size()) - (t.dim() - 2);
  Shape s(batch.size(), 0);
  for (int64_t i = std::max<int64_t>(lead, 0); i < static_cast<int64_t>(batch.size()); ++i)
    if (t.size(i - lead) != 1) s[i] = t.stride(i - lead);
  return s;
}

// The batch dims merged into as few runs as the strides allow, outermost first:
// dims of size 1 drop out, and a dim joins the run inside it when both operands
// step over that whole run with its stride (the output is contiguous: it always
// does). One run is one strided-batched GEMM; more runs (batch dims swapped, or
// broadcast in both operands) loop over the outer ones, one GEMM call per outer
// index, rather than copying: a contiguous copy of a broadcast operand would
// materialise the broadcast. (Many outer indices of tiny products cost one launch
// each: a copy would win there, which this does not attempt.)
std::vector<BatchRun> batch_runs(const Shape& batch, const Shape& sa, const Shape& sb) {
  std::vector<BatchRun> runs;  // innermost first while building
  for (size_t i = batch.size(); i-- > 0;) {
    if (batch[i] == 1) continue;
    if (!runs.empty()) {
      BatchRun& r = runs.back();
      if (sa[i] == r.sa * r.size && sb[i] == r.sb * r.size) {
        r.size *= batch[i];
        continue;
      }
    }
    runs.push_back({batch[i], sa[i], sb[i]});
  }
  if (runs.empty()) runs.push_back({1, 0, 0});
  std::reverse(runs.begin(), runs.end());
  return runs;
}

template <typename P>  // const void* or void*
P advance(P p, int64_t elements, size_t element_bytes) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<P>>, const char, char>;
  return p == nullptr ? p : static_cast<Byte*>(p) + elements * static_cast<int64_t>(element_bytes);
}

void run_gemm(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulDims& d) {
  // Keep any contiguous copies alive until the GEMM is queued. A copy is made only
  // where an operand's last two dims have no unit stride (every second column, say):
  // the GEMM needs one of them contiguous. Batch dims never need one.
  Tensor ac = a, bc = b;
  kernels::MatrixOperand oa, ob;
  if (!gemm_operand(ac, d.n, d.k, oa)) {
    ac = contiguous(a);
    gemm_operand(ac, d.n, d.k, oa);
  }
  if (!gemm_operand(bc, d.k, d.m, ob)) {
    bc = contiguous(b);
    gemm_operand(bc, d.k, d.m, ob);
  }
  const std::vector<BatchRun> runs =
      batch_runs(d.batch, batch_strides(ac, d.batch), batch_strides(bc, d.batch));
  const BatchRun inner = runs.back();
  int64_t batch = inner.size, rows = d.n;
  oa.batch_stride = inner.sa;
  ob.batch_stride = inner.sb;
  // A shared b and a row-major a whose batches follow each other: one plain GEMM
  // of (batch * n, k) x (k, m), which cuBLAS runs faster than a batched one.
  if (batch > 1 && inner.sb == 0 && !oa.transposed && inner.sa == d.n * oa.ld) {
    rows = batch * d.n;
    batch = 1;
  }
  const size_t es = element_size(out.dtype());
  const int64_t c_step = inner.size * d.n * d.m;  // output elements of one inner run
  int64_t outer = 1;
  for (size_t r = 0; r + 1 < runs.size(); ++r) outer *= runs[r].size;
  const kernels::KernelTable& table = kernels::kernels_for(out.device());
  const void* a0 = oa.data;
  const void* b0 = ob.data;
  for (int64_t t = 0; t < outer; ++t) {
    int64_t off_a = 0, off_b = 0;  // of outer batch t, its index decoded innermost first
    for (int64_t r = static_cast<int64_t>(runs.size()) - 2, rest = t; r >= 0; --r) {
      const int64_t i = rest % runs[static_cast<size_t>(r)].size;
      rest /= runs[static_cast<size_t>(r)].size;
      off_a += i * runs[static_cast<size_t>(r)].sa;
      off_b += i * runs[static_cast<size_t>(r)].sb;
    }
    oa.data = advance(a0, off_a, es);
    ob.data = advance(b0, off_b, es);
    void* c = advance(out.raw_data(), t * c_step, es);
    table.gemm({out.device(), out.dtype(), batch, rows, d.m, d.k, oa, ob, c});
  }
}

// The product of two operands of >= 2 dims with broadcast batch dims; `sa`, `sb`
// the shapes the caller was given (for the messages).
Tensor matmul_nd(const char* op, const char* node, const Tensor& a, const Tensor& b,
                 const Shape& sa, const Shape& sb) {
  const MatmulDims d = check_matmul(op, a, b, sa, sb);
  Shape shape = d.batch;
  shape.push_back(d.n);
  shape.push_back(d.m);
  Tensor out = empty(shape, TensorOptions().dtype(a.dtype()).device(a.device()));
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
    const Shape a_shape = a.sizes(), b_shape = b.sizes();
    attach_grad_fn(
        out, node, {&a, &b}, {gb ? a : Tensor(), ga ? b : Tensor()},
        [ga, gb, d, a_shape, b_shape](const Tensor& g, const SavedTensors& s) {
          Tensor d_a, d_b;
          if (ga) d_a = sum_to(matmul(g, transpose(s[1], -1, -2)), a_shape);
          if (gb && b_shape.size() == 2 && a_shape.size() > 2) {
            // b shared by every batch: the sum over batches of a_t^T @ g_t is
            // one GEMM of the batches stacked along k's partner dim.
            const int64_t rows = numel_of(d.batch) * d.n;
            d_b = matmul(transpose(reshape(s[0], {rows, d.k}), 0, 1), reshape(g, {rows, d.m}));
          } else if (gb) {
            d_b = sum_to(matmul(transpose(s[0], -1, -2), g), b_shape);
          }
          return Grads{d_a, d_b};
        });
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  OpSite site("matmul");
  check_operands("matmul", a, b);
  const Shape& sa = a.sizes();
  const Shape& sb = b.sizes();
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: shapes ", shape_str(sa), " and ",
              shape_str(sb), ": both operands need at least 1 dim");
  if (a.dim() == 1 && b.dim() == 1) {
    EMBER_CHECK(a.size(0) == b.size(0), "matmul: shapes ", shape_str(sa), " and ", shape_str(sb),
                " cannot be multiplied (vectors of ", a.size(0), " and ", b.size(0), " elements)");
    return reshape(matmul_nd("matmul", "MatmulBackward", unsqueeze(a, 0), unsqueeze(b, 1), sa, sb),
                   Shape{});
  }
  if (a.dim() == 1)
    return squeeze(matmul_nd("matmul", "MatmulBackward", unsqueeze(a, 0), b, sa, sb), -2);
  if (b.dim() == 1)
    return squeeze(matmul_nd("matmul", "MatmulBackward", a, unsqueeze(b, 1), sa, sb), -1);
  return matmul_nd("matmul", "MatmulBackward", a, b, sa, sb);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  OpSite site("bmm");
  check_operands("bmm", a, b);
  EMBER_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: shapes ", shape_str(a.sizes()), " and ",
              shape_str(b.sizes()), ": both operands must be 3-D (batch, rows, cols)");
  EMBER_CHECK(a.size(0) == b.size(0), "bmm: shapes ", shape_str(a.sizes()), " and ",
              shape_str(b.sizes()), " have different batch sizes (", a.size(0), " vs ", b.size(0),
              ")");
  return matmul_nd("bmm", "BmmBackward", a, b, a.sizes(), b.sizes());
}

}  // namespace ember
