// A character-level GPT, nanoGPT's shakespeare_char configuration (6 layers, 6
// heads, 384 dims, block 256, batch 64, dropout 0.2; AdamW with betas 0.9/0.99,
// lr 1e-3, weight decay 0.1 but none on biases and LayerNorm weights; 100 warm-up
// steps then cosine to 1e-4; gradients clipped at 1.0), trained on "Alice's
// Adventures in Wonderland" (public domain; examples/data/alice/README.md): the
// first 90% to train on, the last 10% held out. Prints predict_memory's peak for
// the step before the first one, a progress line every --log-every steps (loss,
// validation loss, tokens/s, elapsed, ETA), evaluates every --eval-every steps,
// keeps a checkpoint of the model, optimizer, scheduler and random generator
// (resume continues bit for bit), and samples with temperature and top-k at the
// end. Exits 1 when the best validation loss is above --max-val-loss.
//
//   build/examples/gpt_char [--tiny] [--steps N] [--device cpu|cuda] [--out DIR] [--fp32]
//                           [--resume CKPT] [--check-resume] [--max-val-loss X]
//                           [--dropout P] [--data FILE]
//
// On CUDA the step runs under bf16 autocast (as nanoGPT's), unless --fp32. Each
// evaluation saves DIR/gpt_char_last.ckp (--resume it to continue a run cut short)
// and, when the validation loss is the best so far, DIR/gpt_char.ckp.
// --tiny: a 2-layer, 48-dim model that CI trains on the CPU (its bound is set in
// main below). --check-resume: trains --steps steps, then again from the
// checkpoint saved half-way, and fails unless the parameters agree bit for bit.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/meta.h"
#include "core/predict.h"
#include "ember.h"
#include "gpt_model.h"

using namespace ember;
using gpt::GPT;
using gpt::GPTConfig;

namespace {

struct TrainConfig {
  GPTConfig model;
  int64_t batch = 64;
  int64_t steps = 5000;
  int64_t warmup = 100;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, clip = 1.0;
  int64_t eval_every = 250, eval_iters = 200, log_every = 10;
  bool bf16 = false;  // bf16 autocast (CUDA Linear layers and attention), as nanoGPT
};

TrainConfig full_config() {
  return TrainConfig{};
}

// Runs on 2 CPU cores in seconds: the bound below was measured with it.
TrainConfig tiny_config() {
  TrainConfig t;
  t.model.n_layer = 2;
  t.model.n_head = 2;
  t.model.n_embd = 48;
  t.model.block_size = 32;
  t.model.dropout = 0.0;
  t.batch = 16;
  t.steps = 200;
  t.warmup = 10;
  t.lr = 6e-3;
  t.eval_every = 50;
  t.eval_iters = 8;
  t.log_every = 25;
  return t;
}

struct Corpus {
  std::string alphabet;
  std::vector<int64_t> train, val;
};

Corpus load_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("gpt_char: cannot open " + path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Corpus c;
  c.alphabet = text;
  std::sort(c.alphabet.begin(), c.alphabet.end());
  c.alphabet.erase(std::unique(c.alphabet.begin(), c.alphabet.end()), c.alphabet.end());
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (char ch : text) ids.push_back(static_cast<int64_t>(c.alphabet.find(ch)));
  const size_t split = ids.size() * 9 / 10;
  c.train.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(split));
  c.val.assign(ids.begin() + static_cast<std::ptrdiff_t>(split), ids.end());
  return c;
}

// B random windows of T + 1 characters (offsets from the default generator, so a
// checkpoint's "rng.state" resumes the same batches): inputs and next characters.
void get_batch(const std::vector<int64_t>& data, int64_t B, int64_t T, Device device, Tensor& x,
               Tensor& y) {
  const std::vector<int64_t> starts =
      randint(0, static_cast<int64_t>(data.size()) - T - 1, {B}).to_vector<int64_t>();
  std::vector<double> xs, ys;
  xs.reserve(static_cast<size_t>(B * T));
  ys.reserve(static_cast<size_t>(B * T));
  for (int64_t s : starts)
    for (int64_t t = 0; t < T; ++t) {
      xs.push_back(static_cast<double>(data[static_cast<size_t>(s + t)]));
      ys.push_back(static_cast<double>(data[static_cast<size_t>(s + t + 1)]));
    }
  x = from_vector(xs, {B, T}, TensorOptions(kInt64).device(device));
  y = from_vector(ys, {B, T}, TensorOptions(kInt64).device(device));
}

// Mean loss over `iters` batches of each split, in eval mode (no dropout).
double estimate_loss(GPT& model, const std::vector<int64_t>& data, const TrainConfig& cfg,
                     Device device) {
  NoGradGuard no_grad;
  model.eval();
  Tensor total = zeros({}, TensorOptions(kFloat32).device(device));
  for (int64_t i = 0; i < cfg.eval_iters; ++i) {
    Tensor x, y;
    get_batch(data, cfg.batch, cfg.model.block_size, device, x, y);
    AutocastGuard autocast(kBFloat16, cfg.bf16);
    total = total + model.loss(x, y);
  }
  model.train();
  return total.item() / static_cast<double>(cfg.eval_iters);
}

// The next character from the last position's logits: the top k, softmax at
// `temperature`, one draw (topk and multinomial, as nanoGPT's sampling loop).
int64_t sample_next(const Tensor& logits_row, double temperature, int64_t top_k, Generator& gen) {
  const int64_t k = std::clamp<int64_t>(top_k, 1, logits_row.size(0));
  const ValuesAndIndices top = topk(logits_row, k);
  const Tensor probs = softmax(top.values / temperature, -1);
  const Tensor pick = multinomial(probs, 1, false, &gen);  // a position among the top k
  return index_select(top.indices, 0, pick).item<int64_t>();
}

std::string generate(GPT& model, const Corpus& c, const std::string& prompt, int64_t length,
                     double temperature, int64_t top_k, Device device) {
  NoGradGuard no_grad;
  model.eval();
  Generator gen(1234);
  std::vector<int64_t> ctx;
  for (char ch : prompt) ctx.push_back(static_cast<int64_t>(c.alphabet.find(ch)));
  std::string out = prompt;
  for (int64_t i = 0; i < length; ++i) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ctx.size()), model.cfg.block_size);
    std::vector<double> window(ctx.end() - T, ctx.end());
    Tensor x = from_vector(window, {1, T}, TensorOptions(kInt64).device(device));
    Tensor logits = model.forward(x);  // (1, T, V)
    const int64_t next =
        sample_next(select(select(logits, 0, 0), 0, T - 1), temperature, top_k, gen);
    ctx.push_back(next);
    out += c.alphabet[static_cast<size_t>(next)];
  }
  model.train();
  return out;
}

// The model, optimizer and schedule of one run, built on `device`.
struct Run {
  std::shared_ptr<GPT> model;
  std::shared_ptr<optim::AdamW> opt;
  std::shared_ptr<optim::SequentialLR> sched;

  Run(const TrainConfig& cfg, Device device) {
    model = std::make_shared<GPT>(cfg.model);
    model->to(device);
    optim::AdamWOptions o = optim::AdamWOptions(cfg.lr).betas({0.9, 0.99});
    opt = std::make_shared<optim::AdamW>(model->param_groups(o.weight_decay(cfg.weight_decay)), o);
    auto warm = std::make_shared<optim::LinearLR>(*opt, 1.0 / static_cast<double>(cfg.warmup + 1),
                                                  1.0, cfg.warmup);
    auto cosine = std::make_shared<optim::CosineAnnealingLR>(
        *opt, std::max<int64_t>(cfg.steps - cfg.warmup, 1), cfg.min_lr);
    sched = std::make_shared<optim::SequentialLR>(
        *opt, std::vector<std::shared_ptr<optim::LRScheduler>>{warm, cosine},
        std::vector<int64_t>{cfg.warmup});
  }
  // One optimizer step on a fresh training batch; the loss stays on the device.
  Tensor step(const Corpus& c, const TrainConfig& cfg, Device device) {
    Tensor x, y;
    get_batch(c.train, cfg.batch, cfg.model.block_size, device, x, y);
    opt->zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(kBFloat16, cfg.bf16);
      autocast.cast_parameters(model->autocast_parameters());
      loss = model->loss(x, y);
    }
    loss.backward();
    nn::utils::clip_grad_norm_tensor_(model->parameters(), cfg.clip);
    opt->step();
    sched->step();
    return loss.detach();
  }
  nn::Checkpoint checkpoint() {
    nn::Checkpoint ckp(*model);
    ckp.optimizer(*opt).scheduler(*sched);
    return ckp;
  }
};

void print_prediction(const TrainConfig& cfg, Device device) {
  // predict_memory runs the step on the meta device: the batch is random ids there.
  StepFactory factory = [&cfg](Device d) {
    auto run = std::make_shared<Run>(cfg, d);
    return StepFunction([run, &cfg, d](int) {
      Tensor x = zeros({cfg.batch, cfg.model.block_size}, TensorOptions(kInt64).device(d));
      run->opt->zero_grad();
      Tensor loss;
      {
        AutocastGuard autocast(kBFloat16, cfg.bf16);
        autocast.cast_parameters(run->model->autocast_parameters());
        loss = run->model->loss(x, x);
      }
      loss.backward();
      nn::utils::clip_grad_norm_tensor_(run->model->parameters(), cfg.clip);
      run->opt->step();
    });
  };
  const MemoryPrediction p = predict_memory(
      factory, PredictOptions().steps(2).capacity(kNoCapacityLimit).mirror(device.type));
  std::printf("predict_memory (%s): peak allocated %.1f MiB, peak reserved %.1f MiB per step\n",
              p.device.c_str(), static_cast<double>(p.peak_allocated) / (1 << 20),
              static_cast<double>(p.peak_reserved) / (1 << 20));
}

std::string clock_str(double seconds) {
  char buf[32];
  const auto s = static_cast<long long>(seconds);
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  bool tiny = false, check_resume = false, fp32 = false;
  int64_t steps = -1;
  std::string device_name = cuda::is_available() ? "cuda" : "cpu";
  std::string out_dir = "gpt_char_out", resume, data = EMBER_EXAMPLES_DATA_DIR "/alice/alice29.txt";
  double max_val_loss = -1, dropout = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("gpt_char: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--tiny")
      tiny = true;
    else if (a == "--fp32")
      fp32 = true;
    else if (a == "--check-resume")
      check_resume = true;
    else if (a == "--steps")
      steps = std::atoll(next().c_str());
    else if (a == "--device")
      device_name = next();
    else if (a == "--out")
      out_dir = next();
    else if (a == "--resume")
      resume = next();
    else if (a == "--data")
      data = next();
    else if (a == "--max-val-loss")
      max_val_loss = std::atof(next().c_str());
    else if (a == "--dropout")
      dropout = std::atof(next().c_str());
    else
      throw Error("gpt_char: unknown argument " + a);
  }
  TrainConfig cfg = tiny ? tiny_config() : full_config();
  if (steps > 0) cfg.steps = steps;
  if (dropout >= 0) cfg.model.dropout = dropout;
  // The tiny bound: measured here, its best held-out loss was 2.41 (200 steps,
  // 3 s on 2 cores); predicting by the training text's character frequencies
  // (add-one unigram) costs 3.20 on the held-out text, by the previous character
  // (add-one bigram) 2.41. 2.6 fails a model that learned no more than frequencies.
  if (max_val_loss < 0) max_val_loss = tiny ? 2.6 : 1e9;
  const Device device(device_name);
  cfg.bf16 = device.is_cuda() && !fp32;  // nanoGPT trains in bf16 where it can
  manual_seed(1337);

  const Corpus corpus = load_corpus(data);
  cfg.model.vocab_size = static_cast<int64_t>(corpus.alphabet.size());
  std::printf("gpt_char: %zu training and %zu held-out characters, vocabulary %lld, on %s\n",
              corpus.train.size(), corpus.val.size(), static_cast<long long>(cfg.model.vocab_size),
              device.str().c_str());
  std::filesystem::create_directories(out_dir);
  const std::string ckpt_path = out_dir + "/gpt_char.ckp";       // the best validation loss
  const std::string last_path = out_dir + "/gpt_char_last.ckp";  // the latest evaluation

  if (check_resume) {
    // Straight through, saving half-way; then from that checkpoint to the end.
    const int64_t half = cfg.steps / 2;
    Run a(cfg, device);
    for (int64_t s = 1; s <= cfg.steps; ++s) {
      a.step(corpus, cfg, device);
      if (s == half) a.checkpoint().set("step", half).save(ckpt_path);
    }
    manual_seed(999);  // anything: the checkpoint restores the generator
    Run b(cfg, device);
    nn::Checkpoint ckp = b.checkpoint();
    ckp.load(ckpt_path);
    for (int64_t s = ckp.get<int64_t>("step") + 1; s <= cfg.steps; ++s) b.step(corpus, cfg, device);
    const auto pa = a.model->named_parameters(), pb = b.model->named_parameters();
    bool same = pa.size() == pb.size();
    for (size_t i = 0; same && i < pa.size(); ++i)
      same = pa[i].second.to(kCPU).to_vector<float>() == pb[i].second.to(kCPU).to_vector<float>();
    std::printf("resume from step %lld of %lld: parameters %s\n", static_cast<long long>(half),
                static_cast<long long>(cfg.steps), same ? "bitwise equal" : "DIFFER");
    return same ? 0 : 1;
  }

  print_prediction(cfg, device);
  Run run(cfg, device);
  std::printf(
      "model: %.2fM parameters (non-embedding), %lld layers, %lld heads, %lld dims, "
      "block %lld, batch %lld, %lld steps\n",
      static_cast<double>(run.model->num_parameters()) / 1e6,
      static_cast<long long>(cfg.model.n_layer), static_cast<long long>(cfg.model.n_head),
      static_cast<long long>(cfg.model.n_embd), static_cast<long long>(cfg.model.block_size),
      static_cast<long long>(cfg.batch), static_cast<long long>(cfg.steps));
  int64_t start = 1;
  double best_val = INFINITY;
  if (!resume.empty()) {
    nn::Checkpoint ckp = run.checkpoint();
    ckp.load(resume);
    start = ckp.get<int64_t>("step") + 1;
    best_val = ckp.get<double>("best_val");
    std::printf("resumed from %s at step %lld\n", resume.c_str(), static_cast<long long>(start));
  }

  const double tokens_per_step = static_cast<double>(cfg.batch * cfg.model.block_size);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double val = NAN, window_start = 0;
  Tensor running = zeros({}, TensorOptions(kFloat32).device(device));
  int64_t in_window = 0;
  for (int64_t s = start; s <= cfg.steps; ++s) {
    running = running + run.step(corpus, cfg, device);
    ++in_window;
    if (s % cfg.eval_every == 0 || s == cfg.steps) {
      val = estimate_loss(*run.model, corpus.val, cfg, device);
      if (val < best_val) {
        best_val = val;
        run.checkpoint().set("step", s).set("best_val", best_val).save(ckpt_path);
      }
      run.checkpoint().set("step", s).set("best_val", best_val).save(last_path);
    }
    if (s % cfg.log_every == 0 || s == cfg.steps) {
      const double now = elapsed(), loss = running.item() / static_cast<double>(in_window);
      const double tok_s = tokens_per_step * static_cast<double>(in_window) / (now - window_start);
      const double eta =
          now / static_cast<double>(s - start + 1) * static_cast<double>(cfg.steps - s);
      std::printf("step %5lld | loss %.4f | val loss %.4f | %8.0f tokens/s | elapsed %s | ETA %s\n",
                  static_cast<long long>(s), loss, val, tok_s, clock_str(now).c_str(),
                  clock_str(eta).c_str());
      std::fflush(stdout);
      running = zeros({}, TensorOptions(kFloat32).device(device));
      in_window = 0;
      window_start = now;
    }
  }
  if (device.is_cuda())
    std::printf("measured on %s: peak allocated %.1f MiB, peak reserved %.1f MiB\n",
                device.str().c_str(), static_cast<double>(max_memory_allocated(device)) / (1 << 20),
                static_cast<double>(max_memory_reserved(device)) / (1 << 20));
  std::printf("best validation loss %.4f (checkpoint %s), %.1f s\n", best_val, ckpt_path.c_str(),
              elapsed());
  std::printf("sample (temperature 0.8, top-k 20):\n%s\n",
              generate(*run.model, corpus, "Alice ", tiny ? 120 : 500, 0.8, 20, device).c_str());
  if (best_val > max_val_loss) {
    std::printf("FAILED: best validation loss %.4f is above the bound %.4f\n", best_val,
                max_val_loss);
    return 1;
  }
  std::printf("gpt_char: ok (best validation loss %.4f <= %.4f)\n", best_val, max_val_loss);
  return 0;
}
