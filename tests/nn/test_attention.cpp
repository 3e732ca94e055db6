// nn::MultiheadAttention against a per-head composition written with 2-D ops;
// its layouts, masks, weights and gradients. Weight tying through
// replace_parameter: one parameter for parameters(), the optimizer and
// checkpoints. clip_grad_norm_tensor_: the norm as a device tensor, on the meta
// device and inside a CUDA graph capture.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/graph.h"
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

constexpr double kInf = std::numeric_limits<double>::infinity();

// PyTorch's multi_head_attention_forward for (N, L, E) inputs, head by head with
// 2-D matmuls: softmax(q_h k_h^T / sqrt(D) + add) v_h, joined, out_proj.
// mask_add: an additive mask (N, L, S) or undefined.
Tensor reference_mha(nn::MultiheadAttention& m, const Tensor& x, const Tensor& kv,
                     const Tensor& mask_add) {
  const int64_t E = m.options.embed_dim(), H = m.options.num_heads(), D = E / H;
  const int64_t N = x.size(0);
  std::vector<Tensor> rows;
  for (int64_t n = 0; n < N; ++n) {
    Tensor xn = select(x, 0, n), kn = select(kv, 0, n);
    std::vector<Tensor> hs;
    for (int64_t h = 0; h < H; ++h) {
      auto proj = [&](const Tensor& in, int64_t part) {
        Tensor w =
            slice(slice(m.in_proj_weight, 0, part * E, (part + 1) * E), 0, h * D, (h + 1) * D);
        Tensor b = slice(slice(m.in_proj_bias, 0, part * E, (part + 1) * E), 0, h * D, (h + 1) * D);
        return add(matmul(in, transpose(w, 0, 1)), b);
      };
      Tensor s = matmul(proj(xn, 0), transpose(proj(kn, 1), 0, 1)) * (1.0 / std::sqrt(D * 1.0));
      if (mask_add.defined()) s = s + select(mask_add, 0, n);
      hs.push_back(matmul(softmax(s, 1), proj(kn, 2)));
    }
    rows.push_back(cat(hs, 1));
  }
  return m.out_proj->forward(stack(rows, 0));
}

std::shared_ptr<nn::MultiheadAttention> make_mha(int64_t E, int64_t H, bool batch_first) {
  manual_seed(3);
  auto m = std::make_shared<nn::MultiheadAttention>(
      nn::MultiheadAttentionOptions(E, H).batch_first(batch_first));
  m->to(kFloat64);
  // non-zero biases, so the test sees them
  NoGradGuard ng;
  m->in_proj_bias.copy_(randn64({3 * E}, 50));
  m->out_proj->bias.copy_(randn64({E}, 51));
  return m;
}

}  // namespace

TEST_CASE("nn/multihead_attention: parameters as PyTorch names them") {
  nn::MultiheadAttention m(8, 2);
  std::vector<std::string> names;
  for (auto& [name, t] : m.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                          "out_proj.bias"});
  CHECK(m.in_proj_weight.sizes() == Shape{24, 8});
  CHECK(sum(abs(m.in_proj_bias)).item() == 0.0);
  nn::MultiheadAttention kv(nn::MultiheadAttentionOptions(8, 2).kdim(5).vdim(3).bias(false));
  names.clear();
  for (auto& [name, t] : kv.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight",
                                          "out_proj.weight"});
  CHECK(kv.k_proj_weight.sizes() == Shape{8, 5});
  auto [out, w] = kv.forward(randn({4, 2, 8}), randn({6, 2, 5}), randn({6, 2, 3}));
  CHECK(out.sizes() == Shape{4, 2, 8});
  CHECK(w.sizes() == Shape{2, 4, 6});
  CHECK(contains(error_of([] { nn::MultiheadAttention(10, 3); }), "divisible by num_heads"));
}

TEST_CASE("nn/multihead_attention: forward against the per-head composition") {
  const int64_t E = 6, H = 3, N = 2, L = 4, S = 5;
  auto m = make_mha(E, H, true);
  Tensor x = randn64({N, L, E}, 52), kv = randn64({N, S, E}, 53);
  SUBCASE("self-attention (the fused in-projection) and cross-attention") {
    auto [out, w] = m->forward(x, x, x);
    CHECK(rel_error(out, reference_mha(*m, x, x, Tensor())) < 1e-13);
    auto [out2, w2] = m->forward(x, kv, kv, Tensor(), false);
    CHECK(!w2.defined());
    CHECK(rel_error(out2, reference_mha(*m, x, kv, Tensor())) < 1e-13);
    // need_weights: rows of the averaged weights sum to one; the same output
    auto [out3, w3] = m->forward(x, kv, kv);
    CHECK(rel_error(out3, out2) < 1e-14);
    CHECK(w3.sizes() == Shape{N, L, S});
    CHECK(rel_error(sum(w3, -1), ones({N, L}, kFloat64)) < 1e-14);
    auto [out4, w4] = m->forward(x, kv, kv, Tensor(), true, Tensor(), false);
    CHECK(w4.sizes() == Shape{N, H, L, S});
  }
  SUBCASE("sequence-first layout is the transpose") {
    auto mf = make_mha(E, H, false);
    auto [out, w] = mf->forward(transpose(x, 0, 1), transpose(kv, 0, 1), transpose(kv, 0, 1));
    CHECK(out.sizes() == Shape{L, N, E});
    CHECK(rel_error(transpose(out, 0, 1), reference_mha(*mf, x, kv, Tensor())) < 1e-13);
  }
  SUBCASE("key_padding_mask and attn_mask, bool (true = hidden) and additive") {
    Tensor pad = tensor({{0, 0, 1, 0, 1}, {0, 0, 0, 0, 0}}, kFloat64).gt(0.5);  // (N, S)
    Tensor am = randn64({L, S}, 54);
    Tensor add =
        expand(unsqueeze(where(pad, full({}, -kInf, kFloat64), full({}, 0.0, kFloat64)), 1),
               {N, L, S}) +
        am;
    Tensor want = reference_mha(*m, x, kv, add);
    auto [out, w] = m->forward(x, kv, kv, pad, true, am);
    CHECK(rel_error(out, want) < 1e-13);
    auto [out_sdpa, none] = m->forward(x, kv, kv, pad, false, am);
    CHECK(rel_error(out_sdpa, want) < 1e-13);
    const std::vector<double> wv = w.to_vector<double>();  // padded keys get weight 0
    CHECK(wv[2] == 0.0);
    CHECK(wv[4] == 0.0);
    // a bool attn_mask hides where true; (N * H, L, S) masks per head
    Tensor hide = randn64({L, S}, 55).gt(1.0);
    Tensor hide_add = where(hide, full({}, -kInf, kFloat64), full({}, 0.0, kFloat64));
    auto [ob, wb] = m->forward(x, kv, kv, Tensor(), false, hide);
    CHECK(rel_error(ob, reference_mha(*m, x, kv, expand(hide_add, {N, L, S}))) < 1e-13);
    auto [oh, wh] = m->forward(x, kv, kv, Tensor(), false, expand(hide, {N * H, L, S}));
    CHECK(rel_error(oh, ob) < 1e-14);
  }
  SUBCASE("is_causal alone, and with a key_padding_mask") {
    Tensor causal = tensor(
        {{0, -kInf, -kInf, -kInf}, {0, 0, -kInf, -kInf}, {0, 0, 0, -kInf}, {0, 0, 0, 0}}, kFloat64);
    Tensor want = reference_mha(*m, x, x, expand(causal, {N, L, L}));
    auto [out, w] = m->forward(x, x, x, Tensor(), false, Tensor(), true, true);
    CHECK(rel_error(out, want) < 1e-13);
    auto [outw, ww] = m->forward(x, x, x, Tensor(), true, Tensor(), true, true);
    CHECK(rel_error(outw, want) < 1e-13);
    Tensor pad = zeros({N, L}, kFloat64).gt(0.5);  // nothing padded: the same result
    auto [outp, wp] = m->forward(x, x, x, pad, false, Tensor(), true, true);
    CHECK(rel_error(outp, want) < 1e-13);
  }
  SUBCASE("bad masks name the module and the shapes") {
    CHECK(contains(error_of([&] {
                     (void)m->forward(x, kv, kv, Tensor(), true, ones({L, L}));
                   }),
                   "attn_mask [4, 4] must be (L, S) = (4, 5)"));
    CHECK(contains(error_of([&] {
                     (void)m->forward(x, kv, kv, ones({N, L}));
                   }),
                   "key_padding_mask [2, 4] must be (N, S) = (2, 5)"));
    CHECK(contains(error_of([&] { (void)m->forward(randn64({L, E}, 1), kv, kv); }), "must be 3-D"));
  }
}

TEST_CASE("nn/multihead_attention: gradients against finite differences") {
  auto m = make_mha(4, 2, true);
  Tensor pad = tensor({{0, 0, 1}, {0, 0, 0}}, kFloat64).gt(0.5);
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return std::get<0>(m->forward(in[0], in[1], in[1], pad, false, Tensor(), true));
      },
      {randn64({2, 3, 4}, 60), randn64({2, 3, 4}, 61)});
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return std::get<1>(m->forward(in[0], in[0], in[0], Tensor(), true, Tensor(), true, true));
      },
      {randn64({2, 3, 4}, 62)});
}

namespace {

// A toy language model whose output layer shares the embedding's weight.
struct Tied : nn::Module {
  Tied() {
    emb = register_module("emb", std::make_shared<nn::Embedding>(7, 3));
    head =
        register_module("head", std::make_shared<nn::Linear>(nn::LinearOptions(3, 7).bias(false)));
    head->weight = head->replace_parameter("weight", emb->weight);
  }
  Tensor forward(const Tensor& idx) { return head->forward(emb->forward(idx)); }
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<nn::Linear> head;
};

}  // namespace

TEST_CASE("nn/weight tying: one parameter for parameters(), the optimizer and checkpoints") {
  manual_seed(4);
  Tied m;
  CHECK(m.head->weight.is_same(m.emb->weight));
  REQUIRE(m.parameters().size() == 1);
  CHECK(m.named_parameters()[0].first == "emb.weight");
  CHECK(m.state_dict().size() == 1);
  Tensor idx = tensor({1, 4, 4, 6}, kInt64);
  Tensor target = tensor({2, 0, 5, 1}, kInt64);
  // the gradient sums both uses: against the untied computation
  Tensor w1 = m.emb->weight.detach().clone().set_requires_grad(true);
  Tensor w2 = m.emb->weight.detach().clone().set_requires_grad(true);
  cross_entropy(linear(embedding(w1, idx), w2), target).backward();
  cross_entropy(m.forward(idx), target).backward();
  CHECK(rel_error(m.emb->weight.grad(), w1.grad() + w2.grad()) < 1e-6);
  // one AdamW update, as on a lone tensor with that gradient
  Tensor lone = m.emb->weight.detach().clone().set_requires_grad(true);
  lone.set_grad(m.emb->weight.grad().clone());
  optim::AdamW opt(m.parameters(), optim::AdamWOptions(0.1));
  optim::AdamW opt_lone({lone}, optim::AdamWOptions(0.1));
  opt.step();
  opt_lone.step();
  CHECK(rel_error(m.emb->weight, lone) == 0.0);
  CHECK(m.head->weight.is_same(m.emb->weight));
  // a checkpoint holds it once; loading keeps the tie
  const std::string path = "test_weight_tying.ckpt";
  nn::save(m, opt, path);
  size_t model_entries = 0;
  for (const std::string& k : nn::load_state_dict_file(path).keys())
    model_entries += k.rfind("model.", 0) == 0;
  CHECK(model_entries == 1);
  Tied back;
  optim::AdamW opt_back(back.parameters(), optim::AdamWOptions(0.1));
  nn::load(back, opt_back, path);
  std::remove(path.c_str());
  CHECK(rel_error(back.emb->weight, m.emb->weight) == 0.0);
  CHECK(back.head->weight.is_same(back.emb->weight));
  CHECK(contains(error_of([&] {
                   (void)m.head->replace_parameter("weight", zeros({3, 7}));
                 }),
                 "has shape [7, 3], the new tensor [3, 7]"));
  CHECK(contains(error_of([&] { (void)m.head->replace_parameter("bias", zeros({7})); }),
                 "has no parameter 'bias'"));
}

TEST_CASE("nn/clip_grad_norm_tensor_: the norm as a device tensor, no host read") {
  Tensor a = zeros({2}, TensorOptions(kFloat32).requires_grad());
  Tensor b = zeros({1, 2}, TensorOptions(kFloat32).requires_grad());
  a.set_grad(tensor({3.0, -4.0}, kFloat32));
  b.set_grad(tensor({{0.0, 12.0}}, kFloat32));
  Tensor norm = nn::utils::clip_grad_norm_tensor_({a, b}, 6.5);
  CHECK(norm.dim() == 0);
  CHECK(norm.dtype() == kFloat64);
  CHECK(norm.item() == doctest::Approx(13.0));
  // scaled by 6.5 / (13 + 1e-6), as the double form does
  CHECK(a.grad().to_vector<double>()[0] == doctest::Approx(1.5).epsilon(1e-6));
  CHECK(nn::utils::clip_grad_norm_tensor_(std::vector<Tensor>{zeros({1})}, 1.0).item() == 0.0);
  // on the meta device: shapes only, and nothing throws
  Tensor pm = empty({3, 4}, TensorOptions().device(kMeta).requires_grad());
  pm.set_grad(empty({3, 4}, TensorOptions().device(kMeta)));
  Tensor nm = nn::utils::clip_grad_norm_tensor_({pm}, 1.0);
  CHECK(nm.device() == kMeta);
  CHECK(nm.dim() == 0);
  CHECK(contains(error_of([&] { (void)nn::utils::clip_grad_norm_({pm}, 1.0); }), "meta"));
}

TEST_CASE("nn/clip_grad_norm_tensor_: inside a CUDA graph capture" * doctest::test_suite("cuda")) {
  Tensor p = zeros({1000}, TensorOptions(kFloat32).device(kCUDA).requires_grad());
  Tensor g = full({1000}, 0.5, TensorOptions(kFloat32).device(kCUDA));
  Tensor src = full({1000}, 0.5, TensorOptions(kFloat32).device(kCUDA));
  p.set_grad(g);
  (void)nn::utils::clip_grad_norm_tensor_({p}, 1.0);  // warm-up, eager
  Tensor norm;
  cuda::Graph graph;
  graph.capture([&] {
    Tensor gg = p.grad();
    gg.copy_(src);
    norm = nn::utils::clip_grad_norm_tensor_({p}, 1.0);
  });
  graph.replay();
  // |g| = 0.5 sqrt(1000); after clipping, |g| = 1
  CHECK(norm.item() == doctest::Approx(0.5 * std::sqrt(1000.0)));
  CHECK(rel_error(sum(p.grad() * p.grad()).to(kCPU).to(kFloat64), full({}, 1.0, kFloat64)) < 1e-5);
}
