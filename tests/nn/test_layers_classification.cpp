// The nn layers for classification and sequence models: Embedding, LayerNorm,
// Softmax/LogSoftmax, CrossEntropyLoss, NLLLoss, BCELoss, BCEWithLogitsLoss,
// L1Loss and the functional wrappers: defaults as PyTorch's, forward against the
// ops, gradients reaching the parameters, printing, bad options, and a small
// classifier that learns.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <sstream>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "error_text.h"
#include "gradcheck.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {
using V = std::vector<double>;
namespace F = nn::functional;

std::string repr(const nn::Module& m) {
  std::ostringstream os;
  os << m;
  return os.str();
}
}  // namespace

TEST_CASE("nn/embedding: N(0, 1) rows, padding row zero and frozen, shapes") {
  manual_seed(3);
  nn::Embedding emb(1000, 8);
  CHECK(emb.weight.sizes() == Shape{1000, 8});
  const V w = emb.weight.to_vector<double>();
  double s = 0, s2 = 0;
  for (double v : w) {
    s += v;
    s2 += v * v;
  }
  CHECK(std::abs(s / w.size()) < 0.05);  // N(0, 1), as PyTorch's default
  CHECK(s2 / w.size() == doctest::Approx(1.0).epsilon(0.05));
  Tensor idx = tensor({3, 999, 3}, kInt64).reshape({1, 3});
  Tensor out = emb.forward(idx);
  CHECK(out.sizes() == Shape{1, 3, 8});
  CHECK(rel_error(out[0][0], emb.weight[3]) == 0.0);
  CHECK(rel_error(out[0][1], emb.weight[999]) == 0.0);

  nn::Embedding padded(nn::EmbeddingOptions(5, 2).padding_idx(-1));  // row 4
  CHECK(padded.weight.select(0, 4).to_vector<double>() == V{0, 0});
  padded.forward(tensor({4, 1, 4}, kInt64)).sum().backward();
  CHECK(padded.weight.grad().select(0, 4).to_vector<double>() == V{0, 0});
  CHECK(padded.weight.grad().select(0, 1).to_vector<double>() == V{1, 1});
  CHECK(repr(padded) == "Embedding(5, 2, padding_idx=4)");
  CHECK(contains(error_of([] { nn::Embedding(0, 3); }),
                 "Embedding: num_embeddings and "
                 "embedding_dim must be positive"));
  CHECK(contains(error_of([] { nn::Embedding(nn::EmbeddingOptions(4, 2).padding_idx(4)); }),
                 "Embedding: padding_idx 4 is out of range for 4 embeddings"));
  CHECK(contains(error_of([&] { emb.forward(tensor({1000}, kInt64)); }),
                 "embedding: index 1000 is out of range [0, 1000)"));
}

TEST_CASE("nn/layer_norm: ones and zeros at first, matches the op, gradients reach w and b") {
  nn::LayerNorm ln(nn::LayerNormOptions({4}).eps(1e-6));
  CHECK(ln.weight.to_vector<double>() == V{1, 1, 1, 1});
  CHECK(ln.bias.to_vector<double>() == V{0, 0, 0, 0});
  CHECK(ln.parameters().size() == 2);
  Tensor x = randn64({3, 4}, 80).to(kFloat32);
  CHECK(rel_error(ln.forward(x), layer_norm(x, {4}, Tensor(), Tensor(), 1e-6)) == 0.0);
  ln.forward(x).mul(tensor({1, 2, 3, 4})).sum().backward();
  CHECK(ln.weight.grad().defined());
  CHECK(ln.bias.grad().to_vector<double>() == V{3, 6, 9, 12});
  CHECK(repr(ln) == "LayerNorm((4,), eps=1e-06, elementwise_affine=True)");

  nn::LayerNorm plain(nn::LayerNormOptions({2, 3}).elementwise_affine(false));
  CHECK(plain.parameters().empty());
  CHECK(repr(plain) == "LayerNorm((2, 3), eps=1e-05, elementwise_affine=False)");
  nn::LayerNorm no_bias(nn::LayerNormOptions({3}).bias(false));
  CHECK(no_bias.parameters().size() == 1);
  CHECK(contains(error_of([&] {
                   ln.forward(zeros({2, 5}));
                 }),
                 "layer_norm: normalized_shape [4] does not match the trailing dims of the input "
                 "of shape [2, 5]"));
  CHECK(contains(error_of([] { nn::LayerNorm(nn::LayerNormOptions({0})); }),
                 "LayerNorm: normalized_shape [0] must have positive sizes"));
}

// forward_residual: {x + r, forward(x + r)}, the same values as the two calls; the
// gradients reach x, r and the parameters; a residual of another shape is refused by
// name.
TEST_CASE("nn/layer_norm: forward_residual adds the residual, then normalises the sum") {
  nn::LayerNorm ln(nn::LayerNormOptions({6}).autocast_output(true));
  {
    NoGradGuard no_grad;
    ln.weight.copy_(tensor({1.0, 2.0, 0.5, -1.0, 3.0, 1.5}));
    ln.bias.copy_(tensor({0.0, 0.1, -0.2, 0.3, 0.0, 1.0}));
  }
  const Tensor x0 = randn64({5, 6}, 86).to(kFloat32), r0 = randn64({5, 6}, 87).to(kFloat32);
  Tensor x = x0.detach().set_requires_grad(true), r = r0.detach().set_requires_grad(true);
  const auto [sum, y] = ln.forward_residual(x, r);
  const Tensor want_sum = add(x0, r0);
  CHECK(sum.to_vector<float>() == want_sum.to_vector<float>());
  CHECK(y.to_vector<float>() == ln.forward(want_sum).to_vector<float>());
  add(sum, mul(y, 2.0)).sum().backward();
  // d sum / d x = d sum / d r, and the norm's share sums to 0 over a row (its d_x is
  // orthogonal to ones): each row of x's gradient sums to 6.
  CHECK(x.grad().to_vector<float>() == r.grad().to_vector<float>());
  const V row = x.grad().sum(1).to(kFloat64).to_vector<double>();
  for (double v : row) CHECK(v == doctest::Approx(6.0).epsilon(1e-5));
  CHECK(ln.weight.grad().defined());
  CHECK(ln.bias.grad().to_vector<float>() == std::vector<float>(6, 10.0f));
  {
    // Autocast leaves CPU tensors alone: float32 still (the bfloat16 result on a CUDA
    // mirror: tests/core/test_meta.cpp).
    AutocastGuard bf16;
    const auto [s32, y32] = ln.forward_residual(x0, r0);
    CHECK(s32.dtype() == kFloat32);
    CHECK(y32.dtype() == kFloat32);
    CHECK(y32.to_vector<float>() == y.to_vector<float>());
  }
  CHECK(contains(error_of([&] {
                   ln.forward_residual(x0, zeros({1, 6}));
                 }),
                 "add_layer_norm: the residual of shape [1, 6] does not match the input of "
                 "shape [5, 6]"));
}

TEST_CASE("nn/softmax, log_softmax modules and functional forms") {
  Tensor x = randn64({2, 5}, 81);
  nn::Softmax sm(1);
  nn::LogSoftmax lsm(nn::LogSoftmaxOptions(-1));
  CHECK(rel_error(sm.forward(x), softmax(x, 1)) == 0.0);
  CHECK(rel_error(lsm.forward(x), log_softmax(x, -1)) == 0.0);
  CHECK(rel_error(F::softmax(x, 0), softmax(x, 0)) == 0.0);
  CHECK(repr(sm) == "Softmax(dim=1)");
  CHECK(repr(lsm) == "LogSoftmax(dim=-1)");
  auto seq = std::make_shared<nn::Sequential>(nn::Linear(5, 3), nn::LogSoftmax(1));
  CHECK(seq->forward(x.to(kFloat32)).sizes() == Shape{2, 3});
}

TEST_CASE("nn/losses: modules agree with the ops; options as libtorch's") {
  Tensor logits = randn64({4, 3}, 82);
  Tensor t = tensor({0, 2, -100, 1}, kInt64);
  nn::CrossEntropyLoss ce;
  CHECK(ce.forward(logits, t).item() == cross_entropy(logits, t).item());
  nn::CrossEntropyLoss smooth(nn::CrossEntropyLossOptions().label_smoothing(0.1).ignore_index(2));
  CHECK(smooth.forward(logits, t.clamp(0, 2)).item() ==
        cross_entropy(logits, t.clamp(0, 2), CrossEntropyOptions(Reduction::Mean, 2, 0.1)).item());
  CHECK(repr(smooth) == "CrossEntropyLoss(reduction=mean, ignore_index=2, label_smoothing=0.1)");
  CHECK(F::cross_entropy(logits, t, F::CrossEntropyFuncOptions{Reduction::Sum}).item() ==
        cross_entropy(logits, t, CrossEntropyOptions{Reduction::Sum}).item());
  nn::NLLLoss nll(nn::NLLLossOptions().reduction(Reduction::Sum));
  CHECK(nll.forward(log_softmax(logits, 1), t).item() ==
        doctest::Approx(cross_entropy(logits, t, CrossEntropyOptions{Reduction::Sum}).item())
            .epsilon(1e-14));

  Tensor x = randn64({6}, 83), y = ones({6}, kFloat64) * 0.5;
  CHECK(nn::L1Loss().forward(x, y).item() == l1_loss(x, y).item());
  CHECK(nn::L1Loss(nn::L1LossOptions(Reduction::Sum)).forward(x, y).item() ==
        l1_loss(x, y, Reduction::Sum).item());
  CHECK(nn::BCELoss().forward(sigmoid(x), y).item() == binary_cross_entropy(sigmoid(x), y).item());
  nn::BCEWithLogitsLoss bce(nn::BCEWithLogitsLossOptions().pos_weight(full({6}, 2.0, kFloat64)));
  CHECK(bce.buffers().size() == 1);  // pos_weight moves with the module
  CHECK(bce.forward(x, y).item() ==
        binary_cross_entropy_with_logits(x, y, full({6}, 2.0, kFloat64)).item());
  // BCE from logits equals BCE of sigmoid(logits) where both are finite.
  CHECK(nn::BCEWithLogitsLoss().forward(x, y).item() ==
        doctest::Approx(binary_cross_entropy(sigmoid(x), y).item()).epsilon(1e-12));
  CHECK(contains(
      error_of([] { nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().label_smoothing(-0.5)); }),
      "CrossEntropyLoss: label_smoothing must be in [0, 1]"));
}

TEST_CASE("nn/classifier: embedding, layer norm and cross-entropy learn a lookup task") {
  // Each of 8 tokens has a class (token % 3); a bag-of-one model must learn it.
  manual_seed(7);
  nn::Embedding emb(8, 16);
  nn::LayerNorm norm(nn::LayerNormOptions({16}));
  nn::Linear head(16, 3);
  std::vector<Tensor> params = emb.parameters();
  for (const Tensor& p : norm.parameters()) params.push_back(p);
  for (const Tensor& p : head.parameters()) params.push_back(p);
  optim::Adam opt(params, optim::AdamOptions(0.05));
  Tensor tokens = arange(8, kInt64);
  Tensor labels = tensor({0, 1, 2, 0, 1, 2, 0, 1}, kInt64);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(head.forward(norm.forward(emb.forward(tokens))), labels);
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  CHECK(first > 0.9);  // about log(3) at the start
  CHECK(last < 0.05);  // learned
  Tensor predicted = argmax(head.forward(norm.forward(emb.forward(tokens))), 1);
  CHECK(sum(eq(predicted, labels)).item<int64_t>() == 8);
}
