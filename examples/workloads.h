// The training steps that ember-predict (examples/ember_predict.cpp), the
// prediction tests and tools/gpu_predict.sh run on any device: each is the loop of
// an example or benchmark written as a step factory (core/predict.h), the same
// code whether it runs on the GPU, the CPU or the meta device. Host data (the
// seed scenarios' datasets) are made when a workload is constructed, outside the
// step, so a CPU measurement counts only what the device would hold.
//
//   seed_train        examples/seed_train.cpp: Linear(10, 10), Adam, MSELoss, batches of 32
//   seed_grad_accum   examples/seed_grad_accum.cpp: micro-batches of 8, 4 accumulated per step
//   mlp               benchmarks/train_step.cpp's 4 x Linear(4096, 4096) (ReLU fused), Adam,
//                     batch 8192: fp32, TF32 or bf16 autocast
//   varying_batch     3 x Linear(1024, 1024), Adam, a different batch size every step
//   resnet8           benchmarks/conv.cpp's ResNet-8 (conv, batch norm, pooling), SGD with
//                     momentum, batch 128 of 3x32x32, TF32
//   gpt_char, gpt2    bench_gpt's steps (examples/gpt_model.h): the character GPT (6x384,
//                     T 256, batch 64, dropout 0.2) and GPT-2 124M (12x768, T 1024, batch
//                     16), AdamW, bf16 autocast on CUDA (fp32 elsewhere), clipping
//   leak_*            the leak examples' patterns (examples/leak_*.cpp), leaking or fixed
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/predict.h"
#include "cuda/blas.h"
#include "ember.h"
#include "examples/gpt_model.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace workloads {

using namespace ember;

// ---------------------------------------------------------------- the seed scenarios

// examples/seed_train.cpp's model.
struct SimpleModel : nn::Module {
  SimpleModel() { fc = register_module("fc", std::make_shared<nn::Linear>(10, 10)); }
  Tensor forward(const Tensor& x) { return fc->forward(x); }
  std::shared_ptr<nn::Linear> fc;
};

// A DataLoader walked one batch per step, a new epoch when one ends (what a
// range-for over the loader does, epoch after epoch).
struct BatchStream {
  nn::DataLoader loader;
  nn::DataLoader::Iterator it;
  bool started = false;
  explicit BatchStream(nn::DataLoader l) : loader(std::move(l)) {}
  const nn::Example& current() {
    if (!started || it == loader.end()) {
      it = loader.begin();
      started = true;
    }
    return *it;
  }
  void next() { ++it; }
};

// Seed scenario (a): 320 examples of a random linear map plus noise, batches of
// 32 (shuffled) to the device, Linear(10, 10), Adam(1e-2), MSELoss.
class SeedTrain {
 public:
  SeedTrain() {
    manual_seed(0);
    inputs_ = randn({320, 10});
    targets_ = matmul(inputs_, randn({10, 10})) + 0.1 * randn({320, 10});
  }
  StepFunction make(Device device) const {
    struct State {
      std::shared_ptr<SimpleModel> model;
      std::unique_ptr<optim::Adam> optimizer;
      nn::MSELoss criterion;
      std::unique_ptr<BatchStream> batches;
      double loss_sum = 0;
    };
    auto s = std::make_shared<State>();
    s->batches = std::make_unique<BatchStream>(
        nn::DataLoader(nn::TensorDataset(inputs_, targets_),
                       nn::DataLoaderOptions(32).shuffle(true).device(device)));
    s->model = std::make_shared<SimpleModel>();
    s->model->to(device);
    s->optimizer = std::make_unique<optim::Adam>(s->model->parameters(), optim::AdamOptions(1e-2));
    return [s, device](int) {
      const nn::Example& batch = s->batches->current();
      s->optimizer->zero_grad();
      Tensor loss = s->criterion.forward(s->model->forward(batch.data), batch.target);
      loss.backward();
      s->optimizer->step();
      if (!device.is_meta()) s->loss_sum += loss.item();  // values only where there are any
      s->batches->next();
    };
  }

 private:
  Tensor inputs_, targets_;
};

// Seed scenario (d): micro-batches of 8 (336 examples: 10 groups of 4, then one
// of 2), each loss divided by its group's size, the optimizer stepping once per
// group. One step here is one micro-batch, as the example's loop body.
class SeedGradAccum {
 public:
  SeedGradAccum() {
    manual_seed(0);
    inputs_ = randn({336, 10});
    targets_ = matmul(inputs_, randn({10, 10}));
  }
  StepFunction make(Device device) const {
    static constexpr int kAccumulation = 4;
    struct State {
      std::shared_ptr<nn::Linear> model;
      std::unique_ptr<optim::Adam> optimizer;
      nn::MSELoss criterion;
      std::unique_ptr<BatchStream> batches;
      int micro_batches = 0;
      int i = 0;  // micro-batch within the epoch
    };
    auto s = std::make_shared<State>();
    s->batches = std::make_unique<BatchStream>(
        nn::DataLoader(nn::TensorDataset(inputs_, targets_),
                       nn::DataLoaderOptions(8).shuffle(true).device(device)));
    s->micro_batches = static_cast<int>(s->batches->loader.size());
    s->model = std::make_shared<nn::Linear>(10, 10);
    s->model->to(device);
    s->optimizer = std::make_unique<optim::Adam>(s->model->parameters(), optim::AdamOptions(1e-2));
    s->optimizer->zero_grad();
    return [s](int) {
      const nn::Example& batch = s->batches->current();
      const int group_start = s->i / kAccumulation * kAccumulation;
      const int group_size = std::min(kAccumulation, s->micro_batches - group_start);
      Tensor loss = s->criterion.forward(s->model->forward(batch.data), batch.target);
      (loss / static_cast<double>(group_size)).backward();  // gradients add up in .grad()
      if (++s->i - group_start == group_size) {
        s->optimizer->step();
        s->optimizer->zero_grad();
      }
      if (s->i == s->micro_batches) s->i = 0;  // the next epoch
      s->batches->next();
    };
  }

 private:
  Tensor inputs_, targets_;
};

// ---------------------------------------------------------------- larger models

enum class Precision { fp32, tf32, bf16 };
inline const char* precision_name(Precision p) {
  return p == Precision::fp32 ? "fp32" : p == Precision::tf32 ? "tf32" : "bf16";
}

// benchmarks/train_step.cpp's MLP: `layers` x Linear(width, width), ReLU fused in
// all but the last, MSELoss against a random target, Adam(1e-3); TF32 allowed
// (cuda::set_allow_tf32, process-wide: the factory sets it) or bf16 autocast for
// the forward and the loss. Parameters are made on the device (LinearOptions::device).
inline StepFunction mlp(Device device, int64_t batch, Precision precision, int64_t width = 4096,
                        int layers = 4) {
  struct State {
    std::shared_ptr<nn::Sequential> net;
    std::unique_ptr<optim::Adam> optimizer;
    nn::MSELoss criterion;
    Tensor x, y;
  };
  auto s = std::make_shared<State>();
  manual_seed(1);
  cuda::set_allow_tf32(precision == Precision::tf32);
  s->net = std::make_shared<nn::Sequential>();
  for (int i = 0; i < layers; ++i) {
    nn::LinearOptions o(width, width);
    o.device(device);
    if (i + 1 < layers) o.activation(Activation::Relu);
    s->net->push_back(std::make_shared<nn::Linear>(o));
  }
  s->optimizer = std::make_unique<optim::Adam>(s->net->parameters(), optim::AdamOptions(1e-3));
  const TensorOptions on = TensorOptions(kFloat32).device(device);
  s->x = randn({batch, width}, on);
  s->y = randn({batch, width}, on);
  const bool autocast = precision == Precision::bf16;
  return [s, autocast](int) {
    s->optimizer->zero_grad();
    Tensor loss;
    {
      AutocastGuard guard(kBFloat16, autocast);
      loss = s->criterion.forward(s->net->forward(s->x), s->y);
    }
    loss.backward();
    s->optimizer->step();
  };
}

// A loop whose batch size changes every step (a data pipeline with ragged
// batches, say): the allocator splits and reuses cached blocks of other sizes,
// which is where its rounding and fragmentation show. Smaller for CPU tests:
// width and the batch sizes divided by `divisor`.
inline StepFunction varying_batch(Device device, int64_t width = 1024, int64_t divisor = 1) {
  struct State {
    std::shared_ptr<nn::Sequential> net;
    std::unique_ptr<optim::Adam> optimizer;
    nn::MSELoss criterion;
  };
  auto s = std::make_shared<State>();
  manual_seed(2);
  const int64_t kWidth = width;
  s->net = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 3; ++i)
    s->net->push_back(
        std::make_shared<nn::Linear>(nn::LinearOptions(kWidth, kWidth)
                                         .activation(i < 2 ? Activation::Relu : Activation::None)
                                         .device(device)));
  s->optimizer = std::make_unique<optim::Adam>(s->net->parameters(), optim::AdamOptions(1e-3));
  return [s, device, kWidth, divisor](int step) {
    static constexpr int64_t kBatches[] = {256, 1024, 96, 768, 2048, 384, 1536, 160, 640, 1280};
    const int64_t b = std::max<int64_t>(1, kBatches[step % 10] / divisor);
    const TensorOptions on = TensorOptions(kFloat32).device(device);
    Tensor x = randn({b, kWidth}, on), y = randn({b, kWidth}, on);
    s->optimizer->zero_grad();
    s->criterion.forward(s->net->forward(x), y).backward();
    s->optimizer->step();
  };
}

// The MLP with its batch size as a parameter, for largest_fitting_batch.
inline BatchStepFactory mlp_batched(Precision precision, int64_t width = 4096, int layers = 4) {
  return [=](Device device, int64_t batch) { return mlp(device, batch, precision, width, layers); };
}

// ---------------------------------------------------------------- a small ResNet

// A ResNet basic block: conv-bn-relu-conv-bn plus the shortcut (a 1x1 conv + bn when
// the shape changes), then relu.
struct BasicBlock : nn::Module {
  BasicBlock(int64_t in, int64_t out, int64_t stride) {
    c1 = register_module("conv1",
                         std::make_shared<nn::Conv2d>(
                             nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    b1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
    c2 = register_module("conv2", std::make_shared<nn::Conv2d>(
                                      nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
    b2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
    if (stride != 1 || in != out) {
      sc = register_module(
          "shortcut",
          std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)));
      sb = register_module("shortcut_bn", std::make_shared<nn::BatchNorm2d>(out));
    }
  }
  Tensor forward(const Tensor& x) {
    Tensor y = b1->forward_relu(c1->forward(x));  // relu(b1(.)) in one op
    y = b2->forward(c2->forward(y));
    Tensor s = sc ? sb->forward(sc->forward(x)) : x;
    return relu(add(y, s));
  }
  std::shared_ptr<nn::Conv2d> c1, c2, sc;
  std::shared_ptr<nn::BatchNorm2d> b1, b2, sb;
};

// benchmarks/conv.cpp's ResNet-8: a 3x3 stem to 64 channels, three basic blocks (64,
// 128 and 256 channels, the last two at stride 2), global average pooling, Linear to 10.
struct ResNet8 : nn::Module {
  ResNet8() {
    stem = register_module(
        "stem", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 64, 3).padding(1).bias(false)));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(64));
    l1 = register_module("layer1", std::make_shared<BasicBlock>(64, 64, 1));
    l2 = register_module("layer2", std::make_shared<BasicBlock>(64, 128, 2));
    l3 = register_module("layer3", std::make_shared<BasicBlock>(128, 256, 2));
    fc = register_module("fc", std::make_shared<nn::Linear>(256, 10));
  }
  Tensor forward(const Tensor& x) {
    Tensor y = bn->forward_relu(stem->forward(x));
    y = l3->forward(l2->forward(l1->forward(y)));
    y = flatten(adaptive_avg_pool2d(y, {1, 1}), 1);
    return fc->forward(y);
  }
  std::shared_ptr<nn::Conv2d> stem;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<BasicBlock> l1, l2, l3;
  std::shared_ptr<nn::Linear> fc;
};

// bench_conv's ResNet-8 training step: ResNet8 (seeded: the same weights every time)
// on `device`, SGD with momentum 0.9, cross-entropy on a fixed batch the caller sets;
// bf16: the forward under bf16 autocast (convolutions and the Linear in bf16, batch
// norm on the bf16 activations with its float32 parameters), as PyTorch's recipe.
struct ResNet8Step {
  std::shared_ptr<ResNet8> net;
  std::unique_ptr<optim::SGD> optimizer;
  Tensor images, labels;
  bool bf16 = false;
  explicit ResNet8Step(Device device, bool bf16_autocast = false) : bf16(bf16_autocast) {
    manual_seed(8);
    net = std::make_shared<ResNet8>();
    net->to(device);
    optimizer =
        std::make_unique<optim::SGD>(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  }
  Tensor operator()() {
    optimizer->zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(kBFloat16, bf16);
      loss = cross_entropy(net->forward(images), labels);
    }
    loss.backward();
    optimizer->step();
    return loss;
  }
};

// The step on `batch` random side x side images and labels, TF32 on CUDA (or under
// bf16 autocast).
inline StepFunction resnet8(Device device, int64_t batch, int64_t side = 32, bool bf16 = false) {
  cuda::set_allow_tf32(true);
  auto s = std::make_shared<ResNet8Step>(device, bf16);
  s->images = randn({batch, 3, side, side}, TensorOptions(kFloat32).device(device));
  s->labels = randint(10, {batch}, TensorOptions(kInt64).device(device));
  return [s](int) { (*s)(); };
}

// ---------------------------------------------------------------- the leak patterns

// examples/leak_demo.h's model: 64 -> 256 (ReLU) -> 1, batch 32.
constexpr int64_t kLeakBatch = 32, kLeakIn = 64, kLeakHidden = 256;
struct LeakNet : nn::Module {
  LeakNet() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(kLeakIn, kLeakHidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(kLeakHidden, 1));
  }
  Tensor hidden(const Tensor& x) {
    nn::ForwardScope scope(*this);
    return relu(fc1->forward(x));
  }
  Tensor forward(const Tensor& x) { return fc2->forward(hidden(x)); }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// examples/leak_module_cache.cpp: a running statistic updated with grad on.
struct StatNet : LeakNet {
  Tensor running_energy = zeros({kLeakHidden});
  bool fixed = false;
  Tensor forward(const Tensor& x) {
    Tensor h = hidden(x);
    if (fixed) {
      NoGradGuard no_grad;
      running_energy = running_energy * 0.9 + mul(h, h).mean(0);
    } else {
      running_energy = running_energy * 0.9 + mul(h, h).mean(0);
    }
    return fc2->forward(h);
  }
};

// examples/leak_replica_per_step.cpp: weights cloned per parameter version.
struct Replicating : nn::Module {
  std::shared_ptr<LeakNet> inner = register_module("inner", std::make_shared<LeakNet>());
  std::map<uint64_t, std::vector<Tensor>> replicas;
  bool fixed = false;
  Tensor forward(const Tensor& x) {
    std::vector<Tensor> w;
    if (fixed) {
      w = inner->parameters();
    } else {
      std::vector<Tensor>& cached = replicas[inner->fc1->weight.version()];
      if (cached.empty()) {
        nn::ForwardScope scope(*this);
        for (const Tensor& p : inner->parameters()) cached.push_back(p.clone());
      }
      w = cached;
    }
    return linear(relu(linear(x, w[0], w[1])), w[2], w[3]);
  }
};

enum class Leak {
  loss_accumulation,
  outputs_list,
  module_cache,
  validation_no_grad,
  replica_per_step
};

// One step of the leak example's loop, leaking or fixed. Values are read (the
// fixes keep numbers) only off the meta device.
inline StepFunction leak(Device device, Leak pattern, bool fixed) {
  struct State {
    std::shared_ptr<nn::Module> holder;
    std::shared_ptr<LeakNet> net;
    std::shared_ptr<StatNet> stat;
    std::shared_ptr<Replicating> replicating;
    std::unique_ptr<optim::SGD> optimizer;
    Tensor x, y, total;
    std::vector<Tensor> outputs;
    double value = 0;
  };
  auto s = std::make_shared<State>();
  manual_seed(0);
  std::vector<Tensor> params;
  if (pattern == Leak::module_cache) {
    s->stat = std::make_shared<StatNet>();
    s->stat->to(device);
    s->stat->running_energy = s->stat->running_energy.to(device);
    s->stat->fixed = fixed;
    params = s->stat->parameters();
  } else if (pattern == Leak::replica_per_step) {
    s->replicating = std::make_shared<Replicating>();
    s->replicating->to(device);
    s->replicating->fixed = fixed;
    params = s->replicating->parameters();
  } else {
    s->net = std::make_shared<LeakNet>();
    s->net->to(device);
    if (pattern == Leak::validation_no_grad) s->net->eval();
    params = s->net->parameters();
  }
  if (pattern != Leak::validation_no_grad)
    s->optimizer = std::make_unique<optim::SGD>(params, optim::SGDOptions(1e-3));
  s->x = randn({kLeakBatch, kLeakIn}).to(device);
  s->y = randn({kLeakBatch, 1}).to(device);
  if (pattern == Leak::loss_accumulation || pattern == Leak::validation_no_grad)
    s->total = zeros({}, device);
  return [s, device, pattern, fixed](int) {
    const bool values = !device.is_meta();
    switch (pattern) {
      case Leak::loss_accumulation: {
        s->optimizer->zero_grad();
        Tensor loss = mse_loss(s->net->forward(s->x), s->y);
        loss.backward();
        s->optimizer->step();
        if (!fixed)
          s->total = s->total + loss;
        else if (values)
          s->value += loss.item();
        break;
      }
      case Leak::outputs_list: {
        s->optimizer->zero_grad();
        Tensor out = s->net->forward(s->x);
        mse_loss(out, s->y).backward();
        s->optimizer->step();
        if (!fixed)
          s->outputs.push_back(out);
        else if (values)
          s->value += out.to_vector<float>().front();
        break;
      }
      case Leak::module_cache:
        s->optimizer->zero_grad();
        mse_loss(s->stat->forward(s->x), s->y).backward();
        s->optimizer->step();
        break;
      case Leak::replica_per_step:
        s->optimizer->zero_grad();
        mse_loss(s->replicating->forward(s->x), s->y).backward();
        s->optimizer->step();
        break;
      case Leak::validation_no_grad:
        if (fixed) {
          NoGradGuard no_grad;
          Tensor loss = mse_loss(s->net->forward(s->x), s->y);
          if (values) s->value += loss.item();
        } else {
          s->total = s->total + mse_loss(s->net->forward(s->x), s->y);
        }
        break;
    }
  };
}

// ---------------------------------------------------------------- by name

struct Workload {
  std::string name;
  std::string about;
  std::function<StepFactory()> factory;  // host data made here, once
};

inline std::vector<Workload> all() {
  std::vector<Workload> w;
  w.push_back({"seed_train", "Linear(10,10), Adam, MSELoss, DataLoader batches of 32", [] {
                 auto seed = std::make_shared<SeedTrain>();
                 return StepFactory([seed](Device d) { return seed->make(d); });
               }});
  w.push_back(
      {"seed_grad_accum", "Linear(10,10), Adam, micro-batches of 8, 4 per optimizer step", [] {
         auto seed = std::make_shared<SeedGradAccum>();
         return StepFactory([seed](Device d) { return seed->make(d); });
       }});
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16})
    w.push_back({std::string("mlp_") + precision_name(p),
                 std::string("4 x Linear(4096,4096) ReLU, Adam, batch 8192, ") + precision_name(p),
                 [p] { return StepFactory([p](Device d) { return mlp(d, 8192, p); }); }});
  w.push_back({"varying_batch", "3 x Linear(1024,1024), Adam, batch 96..2048 changing every step",
               [] { return StepFactory([](Device d) { return varying_batch(d); }); }});
  w.push_back({"resnet8",
               "benchmarks/conv.cpp's ResNet-8, SGD momentum, batch 128 of 3x32x32, TF32",
               [] { return StepFactory([](Device d) { return resnet8(d, 128); }); }});
  w.push_back({"resnet8_bf16",
               "benchmarks/conv.cpp's ResNet-8, SGD momentum, batch 128 of 3x32x32, bf16 autocast",
               [] { return StepFactory([](Device d) { return resnet8(d, 128, 32, true); }); }});
  const std::pair<const char*, std::pair<gpt::GPTConfig, int64_t>> gpts[] = {
      {"gpt_char", {gpt::GPTConfig{}, 64}}, {"gpt2", {gpt::gpt2_124m(), 16}}};
  for (const auto& [name, shape] : gpts) {
    const gpt::GPTConfig cfg = shape.first;
    const int64_t batch = shape.second;
    char what[160];
    std::snprintf(what, sizeof what,
                  "bench_gpt's step: %lldx%lld, T %lld, batch %lld, dropout %g, AdamW, bf16 "
                  "autocast",
                  static_cast<long long>(cfg.n_layer), static_cast<long long>(cfg.n_embd),
                  static_cast<long long>(cfg.block_size), static_cast<long long>(batch),
                  cfg.dropout);
    w.push_back({name, what, [cfg, batch] {
                   return StepFactory([cfg, batch](Device d) {
                     auto t = std::make_shared<gpt::TrainStep>(cfg, batch, d, true);
                     return StepFunction([t](int) { t->step(); });
                   });
                 }});
  }
  const std::pair<const char*, Leak> leaks[] = {{"loss_accumulation", Leak::loss_accumulation},
                                                {"outputs_list", Leak::outputs_list},
                                                {"module_cache", Leak::module_cache},
                                                {"validation_no_grad", Leak::validation_no_grad},
                                                {"replica_per_step", Leak::replica_per_step}};
  for (const auto& [name, pattern] : leaks)
    for (bool fixed : {false, true}) {
      const Leak l = pattern;
      w.push_back(
          {std::string("leak_") + name + (fixed ? "_fixed" : ""),
           std::string("examples/leak_") + name + ".cpp, " + (fixed ? "fixed" : "leaking"),
           [l, fixed] { return StepFactory([l, fixed](Device d) { return leak(d, l, fixed); }); }});
    }
  return w;
}

}  // namespace workloads
