// The ember side of the PyTorch check (tools/gpu_interop.sh runs it after
// tools/torch_interop.py): the model PyTorch trained, written again in ember,
// loads PyTorch's safetensors file by name (the "model." prefix stripped) and must
// give PyTorch's outputs to float32 rounding, on the CPU and, where present, CUDA.
//   ember_torch_interop WEIGHTS IO [cpu|cuda]...
// WEIGHTS: safetensors.torch.save_file of {"model." + name: tensor}; IO: "tokens"
// (int64 (N)) and "logits" (float32 (N, classes), PyTorch's float32 output) and
// "logits64" (the same model in float64: the reference both are measured from).
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/runtime.h"
#include "nn/nn.h"

using namespace ember;

namespace {

// As the PyTorch script's nn.Sequential: Embedding, Linear, GELU (exact), LayerNorm, Linear.
std::shared_ptr<nn::Sequential> make_model(int64_t vocab, int64_t dim, int64_t hidden,
                                           int64_t classes) {
  return std::make_shared<nn::Sequential>(nn::Embedding(vocab, dim), nn::Linear(dim, hidden),
                                          nn::GELU(), nn::LayerNorm(nn::LayerNormOptions({hidden})),
                                          nn::Linear(hidden, classes));
}

// Checks |ember - torch| <= 1e-5 + 1e-5 |torch| everywhere; prints the worst
// errors against torch's float32 output and against float64.
bool compare(const char* where, const Tensor& ours, const Tensor& torch32, const Tensor& ref64) {
  const std::vector<float> a = ours.to_vector<float>(), b = torch32.to_vector<float>();
  const std::vector<double> r = ref64.to_vector<double>();
  double worst = 0, ours_vs_64 = 0, torch_vs_64 = 0;
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    worst = std::max(worst, d);
    ours_vs_64 = std::max(ours_vs_64, std::fabs(double(a[i]) - r[i]));
    torch_vs_64 = std::max(torch_vs_64, std::fabs(double(b[i]) - r[i]));
    bad += !(d <= 1e-5 + 1e-5 * std::fabs(double(b[i])));
  }
  std::printf(
      "%s: %zu outputs, max |ember - torch| %.3g, max |ember - float64| %.3g, "
      "max |torch - float64| %.3g: %s\n",
      where, a.size(), worst, ours_vs_64, torch_vs_64, bad ? "FAIL" : "PASS");
  return bad == 0 && a.size() == b.size() && !a.empty();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: ember_torch_interop WEIGHTS IO cpu|cuda...\n");
    return 2;
  }
  try {
    const nn::SafetensorsFile io = nn::read_safetensors(argv[2]);
    const Tensor tokens = io.tensors.at("tokens"), logits = io.tensors.at("logits");
    const Tensor logits64 = io.tensors.at("logits64");
    const nn::SafetensorsFile w = nn::read_safetensors(argv[1]);
    const Tensor& emb = w.tensors.at("model.0.weight");
    const Tensor& fc1 = w.tensors.at("model.1.weight");
    const Tensor& fc2 = w.tensors.at("model.4.weight");
    bool ok = true;
    for (int i = 3; i < argc; ++i) {
      const std::string where = argv[i];
      if (where == "cuda" && !cuda::is_available()) {
        std::printf("cuda: SKIPPED (no GPU)\n");
        continue;
      }
      const Device device = where == "cuda" ? kCUDA : kCPU;
      auto model = make_model(emb.size(0), emb.size(1), fc1.size(0), fc2.size(0));
      model->to(device);
      nn::SafetensorsLoadOptions o;
      o.strip_prefix = "model.";
      nn::load_safetensors(*model, argv[1], o);
      model->eval();
      NoGradGuard no_grad;
      const Tensor out = model->forward(tokens.to(device)).cpu();
      ok &= compare(where.c_str(), out, logits, logits64);
    }
    std::printf("%s\n", ok ? "torch interop: PASSED" : "torch interop: FAILED");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::printf("torch interop: FAILED: %s\n", e.what());
    return 1;
  }
}
