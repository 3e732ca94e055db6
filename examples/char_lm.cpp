// A character-level language model of "Alice's Adventures in Wonderland" (public
// domain; examples/data/alice/README.md): the last kContext characters, each
// embedded, flattened, through an MLP to the logits of the next character (a
// Bengio-style neural LM), trained by cross-entropy with AdamW, a warm-up then
// cosine schedule and gradient clipping. Prints the loss and a sampled line as
// it trains; at the end, the loss on held-out text (the book's last tenth).
// Exits 1 when that loss is above --max-loss. CUDA when there is a GPU, else CPU.
//
//   build/examples/char_lm [--data examples/data/alice/alice29.txt] [--steps 1500]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "ember.h"

using namespace ember;

constexpr int64_t kContext = 8;  // characters the model sees
constexpr int64_t kEmbed = 16;   // per character
constexpr int64_t kHidden = 192;
constexpr int64_t kBatch = 64;

struct CharLM : nn::Module {
  CharLM(int64_t vocab) {
    embed = register_module("embed", std::make_shared<nn::Embedding>(vocab, kEmbed));
    mlp = register_module(
        "mlp", std::make_shared<nn::Sequential>(
                   nn::Flatten(), nn::Linear(kContext * kEmbed, kHidden), nn::GELU(),
                   nn::Linear(kHidden, kHidden), nn::GELU(), nn::Linear(kHidden, vocab)));
  }
  // context: (B, kContext) int64 -> logits (B, vocab)
  Tensor forward(const Tensor& context) {
    nn::ForwardScope scope(*this);
    return mlp->forward(embed->forward(context));
  }
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::Sequential> mlp;
};

// Contexts (B, kContext) and next characters (B) at positions `starts` of `text`.
void batch_at(const std::vector<int64_t>& text, const std::vector<int64_t>& starts, Device device,
              Tensor& x, Tensor& y) {
  std::vector<double> ctx, next;
  for (int64_t s : starts) {
    for (int64_t k = 0; k < kContext; ++k) ctx.push_back(static_cast<double>(text[s + k]));
    next.push_back(static_cast<double>(text[s + kContext]));
  }
  const auto b = static_cast<int64_t>(starts.size());
  x = from_vector(ctx, {b, kContext}, TensorOptions(kInt64).device(device));
  y = from_vector(next, {b}, TensorOptions(kInt64).device(device));
}

// `length` characters drawn one at a time from the model's softmax, after `seed`.
std::string sample(CharLM& model, const std::string& alphabet, std::vector<int64_t> context,
                   int length, Device device, Generator& gen) {
  NoGradGuard no_grad;
  std::string out;
  for (int i = 0; i < length; ++i) {
    Tensor x = from_vector(std::vector<double>(context.end() - kContext, context.end()),
                           {1, kContext}, TensorOptions(kInt64).device(device));
    const std::vector<float> p = softmax(model.forward(x), 1).to_vector<float>();
    const double u = rand({1}, kFloat64, &gen).item();
    double acc = 0;
    size_t c = 0;
    while (c + 1 < p.size() && (acc += p[c]) < u) ++c;
    out += alphabet[c];
    context.push_back(static_cast<int64_t>(c));
  }
  return out;
}

int main(int argc, char** argv) {
  std::string data = EMBER_EXAMPLES_DATA_DIR "/alice/alice29.txt";
  int64_t steps = 1500;
  double max_loss = 2.3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--data")) data = argv[i + 1];
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--max-loss")) max_loss = std::atof(argv[i + 1]);
  }
  const Device device = cuda::is_available() ? kCUDA : kCPU;
  manual_seed(0);

  std::ifstream in(data, std::ios::binary);
  if (!in) throw Error("char_lm: cannot open " + data);
  std::string book((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string alphabet = book;
  std::sort(alphabet.begin(), alphabet.end());
  alphabet.erase(std::unique(alphabet.begin(), alphabet.end()), alphabet.end());
  std::vector<int64_t> text;
  for (char ch : book) text.push_back(alphabet.find(ch));
  const auto vocab = static_cast<int64_t>(alphabet.size());
  const auto split = static_cast<int64_t>(text.size()) * 9 / 10;  // train | held out
  std::printf("%zu characters, %lld distinct; uniform guessing costs %.3f nats\n", text.size(),
              static_cast<long long>(vocab), std::log(static_cast<double>(vocab)));

  auto model = std::make_shared<CharLM>(vocab);
  model->to(device);
  optim::AdamW optimizer(model->parameters(), optim::AdamWOptions(3e-3).weight_decay(1e-2));
  auto warmup = std::make_shared<optim::LinearLR>(optimizer, 0.05, 1.0, 100);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(optimizer, steps - 100, 1e-4);
  optim::SequentialLR schedule(optimizer, {warmup, cosine}, {100});

  Generator sampler(42);
  double running = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    const std::vector<int64_t> starts = randint(0, split - kContext, {kBatch}).to_vector<int64_t>();
    Tensor x, y;
    batch_at(text, starts, device, x, y);
    optimizer.zero_grad();
    Tensor loss = nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
    schedule.step();
    running += loss.item();
    if (step % 250 == 0 || step == steps) {
      std::printf(
          "step %5lld  loss %.3f  | %s\n", static_cast<long long>(step), running / 250,
          sample(*model, alphabet, std::vector<int64_t>(text.begin(), text.begin() + kContext), 60,
                 device, sampler)
              .c_str());
      running = 0;
    }
  }

  // Held-out loss: every position of the book's last tenth, in batches.
  NoGradGuard no_grad;
  double total = 0;
  int64_t count = 0;
  for (int64_t s = split; s + kContext < static_cast<int64_t>(text.size()); s += 512) {
    std::vector<int64_t> starts;
    for (int64_t k = s; k < s + 512 && k + kContext < static_cast<int64_t>(text.size()); ++k)
      starts.push_back(k);
    Tensor x, y;
    batch_at(text, starts, device, x, y);
    total +=
        nn::functional::cross_entropy(model->forward(x), y, CrossEntropyOptions(Reduction::Sum))
            .item();
    count += static_cast<int64_t>(starts.size());
  }
  const double held_out = total / static_cast<double>(count);
  std::printf("held-out loss %.3f nats per character (%.3f bits) on %s\n", held_out,
              held_out / std::log(2.0), device.is_cuda() ? "CUDA" : "CPU");
  if (held_out > max_loss) {
    std::printf("FAILED: above the required %.2f\n", max_loss);
    return 1;
  }
  return 0;
}
