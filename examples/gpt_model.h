// A GPT as nanoGPT's model.py writes it, in ember: token and position
// embeddings, n_layer pre-norm blocks of causal self-attention (through
// scaled_dot_product_attention) and a GELU MLP, a final LayerNorm and an output
// layer tied to the token embedding. Parameter names follow nanoGPT's without its
// "transformer." prefix ("wte.weight", "h.0.attn.c_attn.weight", ...), so weights
// map one to one to a PyTorch copy (benchmarks/peer_gpt.py). Shared by
// examples/gpt_char.cpp and benchmarks/bench_gpt.cpp.
//
// GELU is exact (Activation::Gelu, x Phi(x)), as nanoGPT's nn.GELU() and the
// PyTorch peer's F.gelu. Under autocast the layer norms return bfloat16
// (LayerNormOptions::autocast_output): the values the next Linear (or the head) would
// cast them to, with no cast pass forward or back. Each residual add is made by the
// norm after it (nn::LayerNorm::forward_residual, one pass where the kernels fuse them).
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ember.h"

namespace gpt {

using namespace ember;

struct GPTConfig {
  int64_t vocab_size = 65;
  int64_t block_size = 256;
  int64_t n_layer = 6;
  int64_t n_head = 6;
  int64_t n_embd = 384;
  double dropout = 0.2;
  bool bias = false;  // nanoGPT's default: no biases in Linear and LayerNorm
};

// GPT-2 124M's shape (12 layers, 12 heads, 768 dims, T 1024, the vocabulary padded to
// 50304, no dropout), as the benchmarks train it.
inline GPTConfig gpt2_124m() {
  GPTConfig c;
  c.vocab_size = 50304;
  c.block_size = 1024;
  c.n_layer = 12;
  c.n_head = 12;
  c.n_embd = 768;
  c.dropout = 0.0;
  return c;
}

struct CausalSelfAttention : nn::Module {
  explicit CausalSelfAttention(const GPTConfig& c) : cfg(c) {
    c_attn = register_module("c_attn", std::make_shared<nn::Linear>(
                                           nn::LinearOptions(c.n_embd, 3 * c.n_embd).bias(c.bias)));
    c_proj = register_module(
        "c_proj", std::make_shared<nn::Linear>(nn::LinearOptions(c.n_embd, c.n_embd).bias(c.bias)));
  }
  // x: (B, T, C) -> (B, T, C)
  Tensor forward(const Tensor& x) {
    return nn::functional::dropout(branch(x), cfg.dropout, is_training());
  }
  // forward without its output's dropout (which Block applies inside its next norm)
  Tensor branch(const Tensor& x) {
    nn::ForwardScope scope(*this);
    const int64_t B = x.size(0), T = x.size(1), C = cfg.n_embd, H = cfg.n_head, D = C / H;
    // q, k, v: (B, T, C) views of c_attn's (B, T, 3C) output, as nanoGPT's split;
    // their gradients are assembled into one (B, T, 3C) tensor as a cat would.
    const std::vector<Tensor> qkv = split(c_attn->forward(x), C, 2);
    auto heads = [&](int64_t i) {  // (B, H, T, D)
      return transpose(reshape(qkv[static_cast<size_t>(i)], {B, T, H, D}), 1, 2);
    };
    const double p = is_training() ? cfg.dropout : 0.0;
    Tensor y = scaled_dot_product_attention(heads(0), heads(1), heads(2), Tensor(), p, true);
    y = reshape(transpose(y, 1, 2), {B, T, C});
    return c_proj->forward(y);
  }
  GPTConfig cfg;
  std::shared_ptr<nn::Linear> c_attn, c_proj;
};

struct MLP : nn::Module {
  explicit MLP(const GPTConfig& c) : cfg(c) {
    c_fc = register_module(
        "c_fc", std::make_shared<nn::Linear>(nn::LinearOptions(c.n_embd, 4 * c.n_embd)
                                                 .bias(c.bias)
                                                 .activation(Activation::Gelu)));  // fused on CUDA
    c_proj = register_module("c_proj", std::make_shared<nn::Linear>(
                                           nn::LinearOptions(4 * c.n_embd, c.n_embd).bias(c.bias)));
  }
  Tensor forward(const Tensor& x) {
    return nn::functional::dropout(branch(x), cfg.dropout, is_training());
  }
  // forward without its output's dropout (which Block applies inside its next norm)
  Tensor branch(const Tensor& x) {
    nn::ForwardScope scope(*this);
    return c_proj->forward(c_fc->forward(x));
  }
  GPTConfig cfg;
  std::shared_ptr<nn::Linear> c_fc, c_proj;
};

struct Block : nn::Module {
  explicit Block(const GPTConfig& c) : dropout(c.dropout) {
    ln_1 = register_module(
        "ln_1", std::make_shared<nn::LayerNorm>(
                    nn::LayerNormOptions({c.n_embd}).bias(c.bias).autocast_output(true)));
    attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
    ln_2 = register_module(
        "ln_2", std::make_shared<nn::LayerNorm>(
                    nn::LayerNormOptions({c.n_embd}).bias(c.bias).autocast_output(true)));
    mlp = register_module("mlp", std::make_shared<MLP>(c));
  }
  Tensor forward(const Tensor& x) {
    const auto [h, m] = forward_open(x, Tensor());
    return h + nn::functional::dropout(m, dropout, is_training());
  }
  // The block with its residual adds, and the dropouts of the sub-layers' outputs,
  // carried into the norms that follow them (nn::LayerNorm::forward_residual: one pass
  // each where the fused kernels run): x, the residual stream; pending, the previous
  // block's MLP output not yet dropped and added to it (undefined: nothing pending).
  // Returns {the stream with this block's attention output added, this block's MLP
  // output}: the first plus the second's dropout is forward's result, which the next
  // block's ln_1 (or the final norm) forms as it normalises. The generator is drawn in
  // the same order as forward's dropouts would draw it.
  std::pair<Tensor, Tensor> forward_open(const Tensor& x, const Tensor& pending) {
    nn::ForwardScope scope(*this);
    Tensor stream = x, normed;
    if (pending.defined())
      std::tie(stream, normed) = ln_1->forward_residual(x, pending, dropout);
    else
      normed = ln_1->forward(x);
    auto [h, normed2] = ln_2->forward_residual(stream, attn->branch(normed), dropout);
    return {h, mlp->branch(normed2)};
  }
  double dropout;
  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

struct GPT : nn::Module {
  explicit GPT(const GPTConfig& c) : cfg(c) {
    wte = register_module("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd));
    wpe = register_module("wpe", std::make_shared<nn::Embedding>(c.block_size, c.n_embd));
    h = register_module("h", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < c.n_layer; ++i) {
      blocks.push_back(std::make_shared<Block>(c));
      h->push_back(blocks.back());
    }
    ln_f = register_module(
        "ln_f", std::make_shared<nn::LayerNorm>(
                    nn::LayerNormOptions({c.n_embd}).bias(c.bias).autocast_output(true)));
    lm_head = register_module(
        "lm_head",
        std::make_shared<nn::Linear>(nn::LinearOptions(c.n_embd, c.vocab_size).bias(false)));
    // weight tying: one tensor, listed once (as "wte.weight")
    lm_head->weight = lm_head->replace_parameter("weight", wte->weight);
    init_weights();
  }

  // nanoGPT's _init_weights: N(0, 0.02) for Linear and Embedding weights, zero
  // biases, and N(0, 0.02 / sqrt(2 n_layer)) for the residual projections.
  void init_weights() {
    NoGradGuard no_grad;
    for (auto& [name, p] : named_parameters()) {
      const bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
      if (name.find("ln_") != std::string::npos) {
        if (is_bias)
          nn::init::zeros_(p);
        else
          nn::init::ones_(p);
      } else if (is_bias) {
        nn::init::zeros_(p);
      } else if (name.find("c_proj.weight") != std::string::npos) {
        nn::init::normal_(p, 0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.n_layer)));
      } else {
        nn::init::normal_(p, 0.0, 0.02);
      }
    }
  }

  // idx: (B, T) int64 -> logits (B, T, vocab)
  Tensor forward(const Tensor& idx) { return lm_head->forward(hidden(idx)); }
  // idx: (B, T) int64 -> the final layer norm's output (B, T, n_embd), the head's input
  Tensor hidden(const Tensor& idx) {
    nn::ForwardScope scope(*this);
    const int64_t T = idx.size(1);
    EMBER_CHECK(T <= cfg.block_size, "GPT: sequence of ", T, " tokens, block_size is ",
                cfg.block_size);
    Tensor pos = arange(static_cast<double>(T), TensorOptions(kInt64).device(idx.device()));
    Tensor x =
        nn::functional::dropout(wte->forward(idx) + wpe->forward(pos), cfg.dropout, is_training());
    Tensor pending;  // the last block's MLP output, added by the next norm
    for (auto& b : blocks) std::tie(x, pending) = b->forward_open(x, pending);
    return pending.defined() ? ln_f->forward_residual(x, pending, cfg.dropout).second
                             : ln_f->forward(x);
  }
  // Mean cross-entropy of the next-token predictions: targets (B, T) int64. The head
  // and the loss in one op (linear_cross_entropy), so the (B T, vocab) logits exist
  // one chunk of rows at a time: GPT-2's would take 1.54 GiB in bfloat16, twice over
  // with their gradient.
  Tensor loss(const Tensor& idx, const Tensor& targets) {
    return nn::functional::linear_cross_entropy(hidden(idx), lm_head->weight, targets);
  }

  // Parameters that decay (2-D and up: matmul weights, embeddings) and those that
  // do not (biases, LayerNorm weights), as nanoGPT's configure_optimizers: each
  // group gets `options` with its weight decay.
  std::vector<optim::ParamGroup> param_groups(optim::AdamWOptions options) const {
    std::vector<Tensor> decay, no_decay;
    for (const Tensor& p : parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    std::vector<optim::ParamGroup> groups;
    groups.emplace_back(decay, options);
    if (!no_decay.empty()) groups.emplace_back(no_decay, options.weight_decay(0.0));
    return groups;
  }
  // The blocks' Linear weights and biases: what autocast lowers to bfloat16 as the
  // layers run, for AutocastGuard::cast_parameters to cast in one launch. (The tied
  // head's weight is cast inside linear_cross_entropy, chunk by chunk.)
  std::vector<Tensor> autocast_parameters() const {
    std::vector<Tensor> out;
    for (const auto& b : blocks)
      for (const auto* l : {b->attn->c_attn.get(), b->attn->c_proj.get(), b->mlp->c_fc.get(),
                            b->mlp->c_proj.get()}) {
        out.push_back(l->weight);
        if (l->bias.defined()) out.push_back(l->bias);
      }
    return out;
  }
  int64_t num_parameters(bool non_embedding = true) const {
    int64_t n = 0;
    for (const Tensor& p : parameters()) n += p.numel();
    if (non_embedding) n -= wpe->weight.numel();  // as nanoGPT (wte is shared with lm_head)
    return n;
  }

  GPTConfig cfg;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::ModuleList> h;
  std::vector<std::shared_ptr<Block>> blocks;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;
};

// Training FLOPs per token, as nanoGPT's estimate_mfu (PaLM's appendix B): 6 N
// for the weights plus 12 L H Q T for attention (forward and backward).
inline double flops_per_token(const GPT& m, int64_t T) {
  const auto& c = m.cfg;
  return 6.0 * static_cast<double>(m.num_parameters()) +
         12.0 * static_cast<double>(c.n_layer * c.n_head * (c.n_embd / c.n_head) * T);
}

// One training step as the benchmarks time it (bench_gpt; ember-predict's gpt_char and
// gpt2): AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on the 2-D parameters), bf16
// autocast when asked, the forward and backward, clipping at 1.0 without a host sync
// (the tensor-returning form), the update; on a fixed batch of random token ids.
struct TrainStep {
  std::shared_ptr<GPT> model;
  std::shared_ptr<optim::AdamW> opt;
  Tensor x, y;
  bool bf16;

  TrainStep(const GPTConfig& cfg, int64_t batch, Device device, bool bf16_autocast,
            uint64_t seed = 1337)
      : bf16(bf16_autocast) {
    manual_seed(seed);
    model = std::make_shared<GPT>(cfg);
    model->to(device);
    optim::AdamWOptions o = optim::AdamWOptions(1e-3).betas({0.9, 0.99});
    opt = std::make_shared<optim::AdamW>(model->param_groups(o.weight_decay(0.1)), o);
    Generator g(7);
    x = randint(0, cfg.vocab_size, {batch, cfg.block_size}, TensorOptions(kInt64), &g).to(device);
    y = randint(0, cfg.vocab_size, {batch, cfg.block_size}, TensorOptions(kInt64), &g).to(device);
  }
  Tensor loss() {
    if (!bf16) return model->loss(x, y);
    AutocastGuard autocast(kBFloat16);
    autocast.cast_parameters(model->autocast_parameters());
    return model->loss(x, y);
  }
  Tensor step() {
    opt->zero_grad();
    Tensor l = loss();
    l.backward();
    nn::utils::clip_grad_norm_tensor_(model->parameters(), 1.0);
    opt->step();
    return l.detach();
  }
};

}  // namespace gpt
