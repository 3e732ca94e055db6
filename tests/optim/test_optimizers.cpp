// SGD, Adam and AdamW against reference updates written here, in double, from
// the published update rules (PyTorch's documentation and implementation), for
// every option combination that changes the arithmetic; hand-computed values for
// the simplest cases; param groups, skipped parameters, option checks,
// state_dict round trips; CUDA's fused kernels against the CPU loops.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "error_text.h"
#include "gradcheck.h"
#include "optim/optim.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using Vec = std::vector<double>;

namespace {

// --- reference updates, one parameter, in double

struct RefSgd {
  RefSgd(double lr_, double momentum_ = 0, double dampening_ = 0, double wd_ = 0,
         bool nesterov_ = false)
      : lr(lr_), momentum(momentum_), dampening(dampening_), wd(wd_), nesterov(nesterov_) {}
  double lr, momentum, dampening, wd;
  bool nesterov;
  Vec buf;
  void step(Vec& p, const Vec& grad) {
    const bool first = buf.empty();
    if (first) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double d_p = grad[i] + wd * p[i];
      if (momentum != 0) {
        buf[i] = first ? d_p : momentum * buf[i] + (1 - dampening) * d_p;
        d_p = nesterov ? d_p + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d_p;
    }
  }
};

struct RefAdam {
  RefAdam(double lr_, double beta1_ = 0.9, double beta2_ = 0.999, double eps_ = 1e-8,
          double wd_ = 0, bool amsgrad_ = false, bool decoupled_ = false)
      : lr(lr_),
        beta1(beta1_),
        beta2(beta2_),
        eps(eps_),
        wd(wd_),
        amsgrad(amsgrad_),
        decoupled(decoupled_) {}
  double lr, beta1, beta2, eps, wd;
  bool amsgrad, decoupled;
  Vec m, v, v_max;
  int t = 0;
  void step(Vec& p, const Vec& grad) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0), v_max.assign(p.size(), 0.0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (decoupled)
        p[i] = p[i] - lr * wd * p[i];
      else
        g = g + wd * p[i];
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      const double m_hat = m[i] / (1 - std::pow(beta1, t));
      // AMSGrad keeps the running max of the raw second moment, then corrects it.
      v_max[i] = std::max(v_max[i], v[i]);
      const double v_hat = (amsgrad ? v_max[i] : v[i]) / (1 - std::pow(beta2, t));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

// Runs `steps` steps of `opt` over params with fresh gradients each step, and
// the reference alongside; checks they agree to `tol` (relative).
struct Harness {
  std::vector<Tensor> params;
  std::vector<Vec> ref_values;

  Harness(const std::vector<Shape>& shapes, DType dtype, Device device, uint64_t seed) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      Tensor p = testing::randn64(shapes[k], seed + k).to(dtype);
      ref_values.push_back(p.to_vector<double>());
      p = p.to(device);
      p.set_requires_grad(true);
      params.push_back(p);
    }
  }
  // Gradient of parameter k at step s (same on every device and dtype).
  Tensor grad(size_t k, int s, DType dtype) const {
    return testing::randn64(params[k].sizes(), 1000 + 31 * k + static_cast<uint64_t>(s))
        .to(dtype)
        .to(params[k].device());
  }
  void set_grads(int s) {
    for (size_t k = 0; k < params.size(); ++k) params[k].set_grad(grad(k, s, params[k].dtype()));
  }
};

template <typename Ref>
void check_against_reference(
    const std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>& make,
    const Ref& ref_proto, int steps = 4) {
  Harness h({{2, 3}, {5}}, kFloat64, kCPU, 7);
  auto opt = make(h.params);
  std::vector<Ref> refs(h.params.size(), ref_proto);
  for (int s = 0; s < steps; ++s) {
    h.set_grads(s);
    opt->step();
    for (size_t k = 0; k < h.params.size(); ++k)
      refs[k].step(h.ref_values[k], h.grad(k, s, kFloat64).to_vector<double>());
  }
  for (size_t k = 0; k < h.params.size(); ++k) {
    Tensor want = from_vector(h.ref_values[k], h.params[k].sizes(), kFloat64);
    CHECK(testing::rel_error(h.params[k], want) <= 1e-13);
  }
}

}  // namespace

TEST_CASE("optim/sgd: hand-computed steps") {
  Tensor p = tensor({1.0}, TensorOptions(kFloat64).requires_grad());
  optim::SGD plain({p}, optim::SGDOptions(0.1));
  p.set_grad(tensor({0.5}, kFloat64));
  plain.step();
  CHECK(p.item() == doctest::Approx(0.95));

  Tensor q = tensor({1.0}, TensorOptions(kFloat64).requires_grad());
  optim::SGD heavy({q}, optim::SGDOptions(0.1).momentum(0.9));
  // g = 1 each step: buf 1, 1.9, 2.71; p 0.9, 0.71, 0.439
  for (double want : {0.9, 0.71, 0.439}) {
    q.set_grad(tensor({1.0}, kFloat64));
    heavy.step();
    CHECK(q.item() == doctest::Approx(want).epsilon(1e-12));
  }
}

TEST_CASE("optim/sgd: every option combination follows the update rule") {
  struct Case {
    const char* name;
    optim::SGDOptions opts;
    RefSgd ref;
  };
  std::vector<Case> cases = {
      {"plain", optim::SGDOptions(0.1), RefSgd{0.1}},
      {"momentum", optim::SGDOptions(0.1).momentum(0.9), RefSgd{0.1, 0.9}},
      {"dampening", optim::SGDOptions(0.05).momentum(0.8).dampening(0.3), RefSgd{0.05, 0.8, 0.3}},
      {"nesterov", optim::SGDOptions(0.1).momentum(0.9).nesterov(true),
       RefSgd{0.1, 0.9, 0, 0, true}},
      {"weight decay", optim::SGDOptions(0.1).weight_decay(0.2), RefSgd{0.1, 0, 0, 0.2}},
      {"all", optim::SGDOptions(0.03).momentum(0.7).nesterov(true).weight_decay(0.1),
       RefSgd{0.03, 0.7, 0, 0.1, true}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    check_against_reference<RefSgd>(
        [&](std::vector<Tensor> ps) { return std::make_unique<optim::SGD>(ps, c.opts); }, c.ref);
  }
}

TEST_CASE("optim/adam: the first step moves each weight by about lr against its gradient") {
  Tensor p = tensor({1.0, -2.0}, TensorOptions(kFloat64).requires_grad());
  optim::Adam adam({p}, optim::AdamOptions(0.1));
  p.set_grad(tensor({0.5, -4.0}, kFloat64));
  adam.step();
  // m_hat = g, v_hat = g^2: p -= lr * g / (|g| + eps)
  CHECK(p.to_vector<double>()[0] == doctest::Approx(1.0 - 0.1 * 0.5 / (0.5 + 1e-8)).epsilon(1e-14));
  CHECK(p.to_vector<double>()[1] ==
        doctest::Approx(-2.0 + 0.1 * 4.0 / (4.0 + 1e-8)).epsilon(1e-14));
  CHECK(adam.state(p)->step == 1);
}

TEST_CASE("optim/adam: every option combination follows the update rule") {
  auto adam = [](optim::AdamOptions o) {
    return [o](std::vector<Tensor> ps) { return std::make_unique<optim::Adam>(ps, o); };
  };
  auto adamw = [](optim::AdamWOptions o) {
    return [o](std::vector<Tensor> ps) { return std::make_unique<optim::AdamW>(ps, o); };
  };
  SUBCASE("adam defaults") {
    check_against_reference<RefAdam>(adam(optim::AdamOptions(1e-2)), RefAdam{1e-2});
  }
  SUBCASE("adam betas and eps") {
    check_against_reference<RefAdam>(adam(optim::AdamOptions(0.05).betas({0.5, 0.9}).eps(1e-3)),
                                     RefAdam{0.05, 0.5, 0.9, 1e-3});
  }
  SUBCASE("adam weight decay (L2 in the gradient)") {
    check_against_reference<RefAdam>(adam(optim::AdamOptions(1e-2).weight_decay(0.1)),
                                     RefAdam{1e-2, 0.9, 0.999, 1e-8, 0.1});
  }
  SUBCASE("adam amsgrad") {
    check_against_reference<RefAdam>(adam(optim::AdamOptions(1e-2).amsgrad(true)),
                                     RefAdam{1e-2, 0.9, 0.999, 1e-8, 0, true}, 8);
  }
  SUBCASE("adam amsgrad with weight decay") {
    check_against_reference<RefAdam>(adam(optim::AdamOptions(1e-2).amsgrad(true).weight_decay(0.3)),
                                     RefAdam{1e-2, 0.9, 0.999, 1e-8, 0.3, true}, 8);
  }
  SUBCASE("adamw default decoupled decay") {
    check_against_reference<RefAdam>(adamw(optim::AdamWOptions(1e-2)),
                                     RefAdam{1e-2, 0.9, 0.999, 1e-8, 1e-2, false, true});
  }
  SUBCASE("adamw amsgrad, strong decay") {
    check_against_reference<RefAdam>(
        adamw(optim::AdamWOptions(0.1).weight_decay(0.5).amsgrad(true)),
        RefAdam{0.1, 0.9, 0.999, 1e-8, 0.5, true, true}, 8);
  }
  SUBCASE("adamw without decay is adam") {
    check_against_reference<RefAdam>(adamw(optim::AdamWOptions(1e-2).weight_decay(0)),
                                     RefAdam{1e-2});
  }
}

TEST_CASE("optim/optimizer: groups have their own options; parameters without grad are skipped") {
  Tensor a = ones({2}, TensorOptions(kFloat64).requires_grad());
  Tensor b = ones({2}, TensorOptions(kFloat64).requires_grad());
  Tensor c = ones({2}, TensorOptions(kFloat64).requires_grad());
  optim::SGD sgd({optim::ParamGroup({a}), optim::ParamGroup({b, c}, optim::SGDOptions(0.5))},
                 optim::SGDOptions(0.1));
  CHECK(sgd.param_groups().size() == 2);
  CHECK(sgd.param_groups()[0].options().get_lr() == 0.1);
  a.set_grad(ones_like(a.detach()));
  b.set_grad(ones_like(b.detach()));
  sgd.step();
  CHECK(a.to_vector<double>() == Vec{0.9, 0.9});
  CHECK(b.to_vector<double>() == Vec{0.5, 0.5});
  CHECK(c.to_vector<double>() == Vec{1, 1});
  CHECK(sgd.state(c) == nullptr);
  sgd.param_groups()[1].options().set_lr(0.25);  // schedulers change lr like this
  sgd.step();
  CHECK(b.to_vector<double>() == Vec{0.25, 0.25});
  sgd.zero_grad();
  CHECK(!a.grad().defined());
}

TEST_CASE("optim/optimizer: bad options and parameters are rejected with a reason") {
  Tensor p = ones({2}, TensorOptions().requires_grad());
  CHECK(contains(error_of([&] { optim::SGD({p}, optim::SGDOptions(-1)); }),
                 "learning rate must be >= 0, got -1"));
  CHECK(contains(error_of([&] { optim::SGD({p}, optim::SGDOptions(0.1).nesterov(true)); }),
                 "nesterov momentum needs momentum > 0"));
  CHECK(contains(error_of([&] {
                   optim::SGD({p},
                              optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true));
                 }),
                 "dampening = 0"));
  CHECK(contains(error_of([&] { optim::SGD({p}, optim::SGDOptions(0.1).weight_decay(-1)); }),
                 "weight_decay must be >= 0"));
  CHECK(contains(error_of([&] {
                   optim::Adam({p}, optim::AdamOptions().betas({1.0, 0.999}));
                 }),
                 "Adam: beta1 must be in [0, 1), got 1"));
  CHECK(contains(error_of([&] {
                   optim::AdamW({p}, optim::AdamWOptions().betas({0.9, -0.1}));
                 }),
                 "AdamW: beta2 must be in [0, 1)"));
  CHECK(contains(error_of([&] { optim::Adam({p}, optim::AdamOptions().eps(-1)); }),
                 "eps must be >= 0"));
  CHECK(contains(error_of([&] { optim::Adam({p, p}); }), "appears twice"));
  CHECK(contains(error_of([&] {
                   optim::Adam({optim::ParamGroup({p}), optim::ParamGroup({p})});
                 }),
                 "already appears in another parameter group"));
  CHECK(contains(error_of([&] { optim::Adam({p * 2.0}); }), "not a leaf"));
  Tensor bf = ones({2}, TensorOptions(kBFloat16).requires_grad());
  optim::Adam adam({bf});
  bf.set_grad(ones({2}, kBFloat16));
  CHECK(contains(error_of([&] { adam.step(); }), "must be float32 or float64, got bfloat16"));
}

TEST_CASE("optim/optimizer: state_dict round trip continues identically") {
  for (bool amsgrad : {false, true}) {
    CAPTURE(amsgrad);
    Harness h1({{3, 2}, {4}}, kFloat32, kCPU, 3), h2({{3, 2}, {4}}, kFloat32, kCPU, 3);
    optim::Adam a(h1.params, optim::AdamOptions(1e-2).amsgrad(amsgrad));
    for (int s = 0; s < 3; ++s) {
      h1.set_grads(s);
      a.step();
    }
    StateDict sd = a.state_dict();
    CHECK(sd.contains("param_groups.0.lr"));
    CHECK(sd.contains("param_groups.0.params"));
    CHECK(sd.at("state.1.step").item() == 3);
    CHECK(sd.contains("state.0.exp_avg_sq"));
    CHECK(sd.contains("state.0.max_exp_avg_sq") == amsgrad);
    // A second optimizer (other lr) over parameters equal to the first's.
    for (size_t k = 0; k < h2.params.size(); ++k) {
      NoGradGuard ng;
      h2.params[k].copy_(h1.params[k]);
    }
    optim::Adam b(h2.params, optim::AdamOptions(0.5));
    b.load_state_dict(sd);
    CHECK(b.param_groups()[0].options().get_lr() == doctest::Approx(1e-2));
    for (int s = 3; s < 6; ++s) {
      h1.set_grads(s);
      h2.set_grads(s);
      a.step();
      b.step();
    }
    for (size_t k = 0; k < h1.params.size(); ++k)
      CHECK(h1.params[k].to_vector<double>() == h2.params[k].to_vector<double>());
  }
  SUBCASE("mismatches are reported before anything changes") {
    Tensor p = ones({2}, TensorOptions().requires_grad());
    optim::SGD src({p}, optim::SGDOptions(0.1).momentum(0.9));
    p.set_grad(ones({2}));
    src.step();
    Tensor q = ones({3}, TensorOptions().requires_grad());
    optim::SGD dst({q}, optim::SGDOptions(0.2).momentum(0.9));
    const std::string msg = error_of([&] { dst.load_state_dict(src.state_dict()); });
    CHECK(contains(
        msg, "shape mismatch for 'state.0.momentum_buffer': state has [2], parameter has [3]"));
    CHECK(dst.param_groups()[0].options().get_lr() == 0.2);
    optim::SGD two(
        {optim::ParamGroup({q}), optim::ParamGroup({ones({1}, TensorOptions().requires_grad())})},
        optim::SGDOptions(0.1));
    CHECK(contains(error_of([&] { two.load_state_dict(src.state_dict()); }),
                   "missing key 'param_groups.1.lr'"));
  }
}

TEST_CASE("optim/cuda: fused kernels match the CPU loops" * doctest::test_suite("cuda")) {
  const std::vector<Shape> shapes = {{3}, {40000}, {128, 65}, {1}, {16385}};
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  std::vector<std::pair<const char*, Make>> makers = {
      {"sgd",
       [](std::vector<Tensor> ps) {
         return std::make_unique<optim::SGD>(ps, optim::SGDOptions(0.1));
       }},
      {"sgd momentum nesterov wd",
       [](std::vector<Tensor> ps) {
         return std::make_unique<optim::SGD>(
             ps, optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01));
       }},
      {"sgd dampening",
       [](std::vector<Tensor> ps) {
         return std::make_unique<optim::SGD>(ps,
                                             optim::SGDOptions(0.1).momentum(0.5).dampening(0.5));
       }},
      {"adam",
       [](std::vector<Tensor> ps) {
         return std::make_unique<optim::Adam>(ps, optim::AdamOptions(1e-2));
       }},
      {"adam amsgrad wd",
       [](std::vector<Tensor> ps) {
         return std::make_unique<optim::Adam>(
             ps, optim::AdamOptions(1e-2).amsgrad(true).weight_decay(0.1));
       }},
      {"adamw",
       [](std::vector<Tensor> ps) {
         return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions(1e-2));
       }},
      {"adamw amsgrad",
       [](std::vector<Tensor> ps) {
         return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions(1e-2).amsgrad(true));
       }},
  };
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const auto& [name, make] : makers) {
      CAPTURE(name);
      CAPTURE(dtype);
      Harness cpu(shapes, dtype, kCPU, 9), gpu(shapes, dtype, kCUDA, 9);
      auto oc = make(cpu.params), og = make(gpu.params);
      for (int s = 0; s < 4; ++s) {
        cpu.set_grads(s);
        gpu.set_grads(s);
        oc->step();
        og->step();
      }
      for (size_t k = 0; k < shapes.size(); ++k) {
        CHECK(gpu.params[k].is_cuda());
        CHECK(testing::rel_error(gpu.params[k].to(kCPU), cpu.params[k]) <=
              (dtype == kFloat32 ? 1e-6 : 1e-13));
      }
    }
  }
}

TEST_CASE("optim/cuda: groups longer than one fused launch (32 tensors), empty tensors included" *
          doctest::test_suite("cuda")) {
  std::vector<Shape> shapes;
  for (int k = 0; k < 70; ++k) shapes.push_back(k % 9 == 4 ? Shape{0} : Shape{1 + 37 * k % 1000});
  shapes.push_back({20000});  // two chunks
  for (bool adam : {true, false}) {
    CAPTURE(adam);
    Harness cpu(shapes, kFloat32, kCPU, 11), gpu(shapes, kFloat32, kCUDA, 11);
    auto make = [&](std::vector<Tensor> ps) -> std::unique_ptr<optim::Optimizer> {
      if (adam) return std::make_unique<optim::Adam>(ps, optim::AdamOptions(1e-2));
      return std::make_unique<optim::SGD>(ps, optim::SGDOptions(0.1).momentum(0.9));
    };
    auto oc = make(cpu.params), og = make(gpu.params);
    for (int s = 0; s < 3; ++s) {
      cpu.set_grads(s);
      gpu.set_grads(s);
      oc->step();
      og->step();
    }
    for (size_t k = 0; k < shapes.size(); ++k) {
      CAPTURE(k);
      CHECK(testing::rel_error(gpu.params[k].to(kCPU), cpu.params[k]) <= 1e-6);
    }
    if (adam) {  // the device step counts went up once per step, every launch
      const StateDict sd = og->state_dict();
      CHECK(sd.at("state.0.step").item() == 3);
      CHECK(sd.at("state.70.step").item() == 3);
    }
  }
}
