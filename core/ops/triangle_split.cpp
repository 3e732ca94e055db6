// tril and triu (a where on an index mask, so every device and autograd come from
// where), and split, chunk and unbind, which return slices (views) of their input;
// split's and chunk's pieces share one backward that assembles their gradients as a
// cat does (SplitBackward, below).
#include <algorithm>
#include <memory>
#include <utility>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/ops/split_gradient.h"

namespace ember {

namespace {

// x with the elements of its last two dims kept where (col - row) <= diagonal
// (lower) or >= diagonal (upper), zeros elsewhere.
Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, const char* op) {
  OpSite site(op);
  check_defined(op, x);
  EMBER_CHECK(x.dim() >= 2, op, ": expects a tensor of at least 2 dims, got shape ",
              shape_str(x.sizes()));
  const int64_t rows = x.size(-2), cols = x.size(-1);
  const TensorOptions io = TensorOptions(kInt64).device(x.device());
  // (rows, 1) - (cols) broadcast: offset[r][c] = c - r
  const Tensor offset = sub(arange(static_cast<double>(cols), io),
                            reshape(arange(static_cast<double>(rows), io), {rows, 1}));
  const Scalar d(diagonal);
  const Tensor keep = lower ? le(offset, d) : ge(offset, d);
  return where(keep, x, zeros({}, x.options()));
}

void check_split_input(const char* op, const Tensor& x) {
  check_defined(op, x);
  EMBER_CHECK(x.dim() >= 1, op, ": expects a tensor of at least 1 dim, got a 0-dim tensor");
}

// The backward of split and chunk: one SplitBackward node per piece, each adding its
// gradient into one (input-shaped) sum kept for a join node, which passes the sum on
// to the input. The pieces are disjoint, so the first to arrive allocates the sum
// without filling it and each piece copies its gradient into its own region; the
// join, which runs after every piece that received a gradient, zero-fills only the
// regions no piece wrote (pieces the loss did not use). A GPT's q, k and v so cost
// the copies of a cat (as PyTorch's SplitBackward), where slices cost a zero-filled
// sum and an add per piece. Under anomaly mode the engine calls the pieces' apply(),
// which returns the zero-padded gradient, and the join passes the sum on untouched.
//
// When the pieces' gradients arrive as the regions of one marked buffer laid out as
// the input (detail::mark_split_gradient: the fused attention's q, k and v), the buffer
// is the sum and nothing is copied. It is kept here, not in the engine's sum, which
// stays empty until the join: the engine copies a sum that another tensor shares
// storage with (the pieces still to come are views of the same buffer), so the join
// hands the buffer on instead.
struct SplitState {
  Shape sizes;  // the input's
  int64_t dim = 0;
  std::vector<std::pair<int64_t, int64_t>> at;  // each piece's [start, end) along dim
  std::vector<bool> written;                    // by add_into, since the sum was made
  bool assembled = false;                       // the sum is add_into's (unfilled)
  Tensor adopted;  // the marked buffer as the input-shaped sum, until the join
};

class SplitPieceBackward final : public Node {
 public:
  SplitPieceBackward(std::shared_ptr<SplitState> state, size_t piece)
      : state_(std::move(state)), piece_(piece) {}
  const char* name() const override { return "SplitBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    if (released_) [[unlikely]]
      detail::throw_backward_twice(name());
    state_->assembled = false;  // the engine sums zero-padded gradients (anomaly mode)
    Tensor whole = zeros(state_->sizes, TensorOptions().dtype(g.dtype()).device(g.device()));
    Tensor part = region(whole);
    copy_(part, g);
    return {whole};
  }
  bool adds_into_sum() const override { return true; }
  void add_into(const Tensor& g, Tensor& sum) override {
    if (released_) [[unlikely]]
      detail::throw_backward_twice(name());
    SplitState& s = *state_;
    if (!sum.defined() && (s.adopted.defined() || adopt(g))) {
      Tensor part = region(s.adopted);
      if (!same_place(part, g)) copy_(part, g);  // else the gradient is already there
      s.written[piece_] = true;
      return;
    }
    if (!sum.defined()) {
      sum = empty(s.sizes, TensorOptions().dtype(g.dtype()).device(g.device()));
      s.written.assign(s.at.size(), false);
      s.assembled = true;
    }
    Tensor part = region(sum);
    if (s.assembled && !s.written[piece_]) {
      copy_(part, g);
      s.written[piece_] = true;
    } else {
      part.add_(g);
    }
  }
  void release() override { released_ = true; }

 private:
  Tensor region(const Tensor& whole) const {
    return slice(whole, state_->dim, state_->at[piece_].first, state_->at[piece_].second);
  }
  static bool same_place(const Tensor& a, const Tensor& b) {
    return a.storage() == b.storage() && a.storage_offset() == b.storage_offset() &&
           a.sizes() == b.sizes() && a.strides() == b.strides() && a.dtype() == b.dtype();
  }
  // Takes the buffer g lies in as the sum (SplitState::adopted) when it is marked and g
  // is this piece's region of a contiguous input-shaped tensor filling the whole buffer.
  bool adopt(const Tensor& g) {
    SplitState& s = *state_;
    if (!detail::is_split_gradient(g)) return false;
    const Shape strides = contiguous_strides(s.sizes);
    const int64_t base =
        g.storage_offset() - s.at[piece_].first * strides[static_cast<size_t>(s.dim)];
    if (base != 0 || g.strides() != strides ||
        static_cast<size_t>(numel_of(s.sizes)) * element_size(g.dtype()) != g.storage()->nbytes())
      return false;
    Tensor whole = make_view(g, s.sizes, strides, 0);
    if (!same_place(region(whole), g)) return false;
    s.adopted = std::move(whole);
    s.written.assign(s.at.size(), false);
    s.assembled = true;
    // The buffer never outlives this backward pass: the join takes it, and should the
    // pass end without the join (an exception), the engine's end-of-pass callbacks are
    // destroyed, and this one's guard drops it then, so a later pass starts clean.
    struct Drop {
      std::weak_ptr<SplitState> state;
      ~Drop() {
        if (std::shared_ptr<SplitState> st = state.lock()) {
          st->adopted = Tensor();
          st->assembled = false;
        }
      }
    };
    auto drop = std::make_shared<Drop>();  // made in place: a temporary's end would drop
    drop->state = state_;
    queue_backward_callback([drop] {});
    return true;
  }
  std::shared_ptr<SplitState> state_;
  size_t piece_;
  bool released_ = false;
};

class SplitJoinBackward final : public Node {
 public:
  explicit SplitJoinBackward(std::shared_ptr<SplitState> state) : state_(std::move(state)) {}
  const char* name() const override { return "SplitBackwardJoin"; }
  std::vector<Tensor> apply(const Tensor& given) override {
    SplitState& s = *state_;
    // The adopted buffer, when the pieces' gradients came in one (the engine's sum then
    // stays empty).
    Tensor sum = given;
    if (s.adopted.defined()) sum = std::exchange(s.adopted, Tensor());
    if (s.assembled && sum.defined()) {
      Tensor whole = sum;
      for (size_t i = 0; i < s.at.size(); ++i)
        if (!s.written[i]) {
          Tensor part = slice(whole, s.dim, s.at[i].first, s.at[i].second);
          part.fill_(0.0);
        }
    }
    s.assembled = false;
    return {sum};
  }

 private:
  std::shared_ptr<SplitState> state_;
};

// Views of x along dim at `bounds` ([start, end) each), wired to one SplitBackward
// join when x requires grad (slices otherwise: no gradient to route).
std::vector<Tensor> split_at(const Tensor& x, int64_t dim,
                             const std::vector<std::pair<int64_t, int64_t>>& bounds) {
  std::vector<Tensor> pieces;
  pieces.reserve(bounds.size());
  {
    NoGradGuard no_grad;  // the views, without SliceBackward nodes
    for (const auto& [start, end] : bounds) pieces.push_back(slice(x, dim, start, end));
  }
  if (!any_requires_grad({&x})) return pieces;
  auto state = std::make_shared<SplitState>();
  state->sizes = x.sizes();
  state->dim = dim;
  state->at = bounds;  // `written` is sized when a sum is made (add_into)
  auto join = std::make_shared<SplitJoinBackward>(state);
  NextEdge& to_x = join->next_edges.emplace_back();
  to_x.node = gradient_edge(x).node;
  to_x.input = InputMeta{x.sizes(), x.dtype(), x.device()};
  const Tensor* in = &x;
  for (size_t i = 0; i < pieces.size(); ++i) {
    auto node = std::make_shared<SplitPieceBackward>(state, i);
    Node* raw = node.get();
    detail::attach_node(pieces[i], std::move(node), &in, 1);
    raw->next_edges[0].node = join;  // into the join's sum, not x's
  }
  return pieces;
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  return triangle(x, diagonal, true, "tril");
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  return triangle(x, diagonal, false, "triu");
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_split_input("split", x);
  dim = wrap_dim(dim, x.dim(), "split");
  EMBER_CHECK(split_size >= 0, "split: split_size must be non-negative, got ", split_size);
  const int64_t n = x.size(dim);
  EMBER_CHECK(split_size > 0 || n == 0, "split: split_size 0 cannot split dim ", dim, " of size ",
              n, " (input of shape ", shape_str(x.sizes()), ")");
  // As torch: a dim of size 0 gives one empty piece.
  if (n == 0) return {slice(x, dim, 0, 0)};
  std::vector<std::pair<int64_t, int64_t>> bounds;
  for (int64_t at = 0; at < n; at += split_size)
    bounds.emplace_back(at, std::min(n, at + split_size));
  return split_at(x, dim, bounds);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim) {
  check_split_input("split", x);
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    EMBER_CHECK(s >= 0, "split: split sizes must be non-negative, got ", shape_str(split_sizes));
    total += s;
  }
  EMBER_CHECK(total == x.size(dim), "split: split sizes ", shape_str(split_sizes), " sum to ",
              total, ", but dim ", dim, " of the input of shape ", shape_str(x.sizes()),
              " has size ", x.size(dim));
  std::vector<std::pair<int64_t, int64_t>> bounds;
  int64_t at = 0;
  for (int64_t s : split_sizes) {
    bounds.emplace_back(at, at + s);
    at += s;
  }
  return split_at(x, dim, bounds);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_split_input("chunk", x);
  EMBER_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  dim = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(dim);
  // torch.chunk: pieces of ceil(n / chunks), so there may be fewer than `chunks`.
  const int64_t size = (n + chunks - 1) / chunks;
  return split(x, size, dim);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  check_split_input("unbind", x);
  dim = wrap_dim(dim, x.dim(), "unbind");
  std::vector<Tensor> pieces;
  for (int64_t i = 0; i < x.size(dim); ++i) pieces.push_back(select(x, dim, i));
  return pieces;
}

}  // namespace ember
