// Leak diagnostics: allocation sites, the live-tensor census, graph retention,
// StepLeakCheck and LeakTracker on each classic leak pattern and its fixed twin,
// and a plain training loop that must stay exactly flat. All on the host
// allocator, which is a CachingAllocator like the device ones.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/leak_check.h"
#include "core/live_tensors.h"
#include "core/memory.h"
#include "core/memory/memory_timeline.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

namespace {

constexpr int64_t kBatch = 8, kIn = 16, kHidden = 64;

struct Net : nn::Module {
  Net() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(kIn, kHidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(kHidden, 1));
  }
  Tensor hidden(const Tensor& x) {
    nn::ForwardScope scope(*this);
    return relu(fc1->forward(x));
  }
  Tensor forward(const Tensor& x) { return fc2->forward(hidden(x)); }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

struct Setup {
  std::shared_ptr<Net> model = std::make_shared<Net>();
  optim::SGD opt{model->parameters(), optim::SGDOptions(1e-3)};
  nn::MSELoss criterion;
  Tensor x = randn({kBatch, kIn});
  Tensor y = randn({kBatch, 1});

  Tensor step() {
    opt.zero_grad();
    Tensor loss = criterion.forward(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  }
};

const GrowingSite* find_site(const LeakTrend& t, const std::string& site,
                             const std::string& shape) {
  for (const GrowingSite& s : t.sites)
    if (s.site == site && s.shape == shape) return &s;
  return nullptr;
}

std::string sites_of(const LeakTrend& t) {
  std::string out;
  for (const GrowingSite& s : t.sites) out += s.site + " " + s.shape + "; ";
  return out;
}

}  // namespace

TEST_CASE("leak/site: module forwards and ops name the allocations they make") {
  Net net;
  CHECK(std::string(net.fc1->forward_scope()) == "model.fc1.forward");
  Tensor out = net.forward(randn({kBatch, kIn}));
  auto snap = memory_snapshot(kCPU);
  bool found = false;
  for (const auto& seg : snap.segments)
    for (const auto& b : seg.blocks)
      if (b.address == reinterpret_cast<uintptr_t>(out.storage()->data())) {
        CHECK(site_name(b.scope, b.tag) == "model.fc2.forward / linear");
        found = true;
      }
  CHECK(found);
  // Backward allocations carry the node's name and the forward's scope.
  CHECK(std::string(out.grad_fn()->name()).find("Linear") != std::string::npos);
  CHECK(std::string(out.grad_fn()->scope) == "model.fc2.forward");
  // Outermost op wins: a composite op is named by what the user called.
  {
    OpSite outer("outer");
    Tensor t = add(randn({3}), 1.0);
    CHECK(std::string(t.impl().site_op) == "outer");
  }
  CHECK(std::string(add(randn({3}), 1.0).impl().site_op) == "add");
}

TEST_CASE("leak/site: scope paths follow registration, at any depth, and the root can be renamed") {
  struct Outer : nn::Module {
    std::shared_ptr<nn::Sequential> body = register_module(
        "body", std::make_shared<nn::Sequential>(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2)));
  } outer;
  CHECK(std::string(outer.body->at<nn::Linear>(2)->forward_scope()) == "model.body.2.forward");
  outer.set_scope_root("net");
  CHECK(std::string(outer.body->at<nn::Linear>(0)->forward_scope()) == "net.body.0.forward");
  Tensor y = outer.body->forward(randn({3, 4}));
  CHECK(std::string(y.impl().site_scope) == "net.body.2.forward");
  CHECK(std::string(y.impl().site_op) == "linear");
  CHECK(intern_site_name("net.body.2.forward") == y.impl().site_scope);  // one pointer per name
}

TEST_CASE("leak/census: live_tensors lists shape, bytes, op and graph, largest first") {
  const size_t before = live_tensor_count();
  Tensor big = zeros({100, 10});
  Tensor w = randn({10}).requires_grad_();
  Tensor y = mul(w, w);
  // Three tensors, plus the two aliases mul saved for its backward.
  CHECK(live_tensor_count() == before + 5);
  auto live = live_tensors(kCPU);
  auto it = std::find_if(live.begin(), live.end(), [&](const LiveTensor& l) {
    return l.storage_data == big.storage()->data();
  });
  REQUIRE(it != live.end());
  CHECK(it->bytes == 4000);
  CHECK(it->sizes == Shape{100, 10});
  CHECK(std::string(it->op) == "zeros");  // the factory called, not the one it uses
  CHECK(it->grad_fn == nullptr);
  auto yi = std::find_if(live.begin(), live.end(), [&](const LiveTensor& l) {
    return l.storage_data == y.storage()->data();
  });
  REQUIRE(yi != live.end());
  CHECK(std::string(yi->grad_fn) == "MulBackward");
  CHECK(std::string(yi->op) == "mul");
  for (size_t i = 1; i < live.size(); ++i)
    CHECK(live[i - 1].storage_bytes >= live[i].storage_bytes);
  std::string table = live_tensors_table(kCPU, 1000);
  CHECK(table.find("MulBackward") != std::string::npos);
  CHECK(table.find("views") != std::string::npos);
}

TEST_CASE("leak/graph: graph_stats counts saved activations until backward frees them") {
  Tensor w = randn({kIn, kHidden}).requires_grad_();
  Tensor v = randn({kHidden}).requires_grad_();
  Tensor x = randn({kBatch, kIn});
  Tensor h = relu(matmul(x, w));          // matmul saves x (data) for d_w
  Tensor loss = mul(mul(h, h), v).sum();  // mul(h, h) saves h twice: one storage
  GraphStats st = graph_stats(loss);
  CHECK(st.saved_activation_bytes >= static_cast<size_t>((kBatch * kHidden + kBatch * kIn) * 4));
  CHECK(st.saved_leaf_bytes == static_cast<size_t>(kHidden * 4));  // v, a weight
  loss.backward();
  st = graph_stats(loss);
  CHECK(st.saved_activation_bytes == 0);
  CHECK(st.saved_leaf_bytes == 0);
  CHECK(st.nodes == count_graph_nodes(loss));
}

TEST_CASE("leak/pattern: loss accumulated with its graph is named, its .item() twin is clean") {
  manual_seed(1);
  Setup s;
  const size_t params = s.model->parameters().size();
  SUBCASE("leaking: total = total + loss") {
    LeakTracker tracker(LeakMode::record);
    Tensor total = zeros({});
    size_t step_nodes = 0;
    for (int i = 0; i < 6; ++i) {
      StepLeakCheck check(tracker, "step");
      Tensor loss = s.step();
      step_nodes = count_graph_nodes(loss);
      total = total + loss;
    }
    LeakTrend t = tracker.trend();
    REQUIRE(t.graphs.size() == 1);
    CHECK(t.graphs[0].site == "add");
    CHECK(t.graphs[0].grad_fn == "AddBackward");
    // Each step adds its loss graph (less the shared AccumulateGrad sinks) and one add.
    CHECK(t.graphs[0].nodes_per_step == doctest::Approx(double(step_nodes - params + 1)));
    CHECK(t.graphs[0].saved_activation_bytes == 0);  // backward freed them; the nodes remain
    const LeakReport& last = tracker.reports().back();
    CHECK(last.leaked());
    CHECK(last.graphs[0].nodes_before > 0);
    CHECK(t.str().find("AddBackward") != std::string::npos);
  }
  SUBCASE("fixed: total += loss.item()") {
    LeakTracker tracker(LeakMode::record);
    double total = 0;
    for (int i = 0; i < 6; ++i) {
      StepLeakCheck check(tracker, "step");
      total += s.step().item();
    }
    CHECK_FALSE(tracker.trend().leaked());
    for (const LeakReport& r : tracker.reports()) CHECK_FALSE(r.leaked());
    CHECK(total > 0);
  }
}

TEST_CASE("leak/pattern: outputs kept in a list grow at the output's site by its bytes") {
  manual_seed(2);
  Setup s;
  LeakTracker tracker(LeakMode::record);
  std::vector<Tensor> outputs;
  std::vector<double> fixed_outputs;
  SUBCASE("leaking") {
    for (int i = 0; i < 5; ++i) {
      StepLeakCheck check(tracker, "step");
      s.opt.zero_grad();
      Tensor out = s.model->forward(s.x);
      s.criterion.forward(out, s.y).backward();
      s.opt.step();
      outputs.push_back(out);
    }
    LeakTrend t = tracker.trend();
    const GrowingSite* g = find_site(t, "model.fc2.forward / linear", "[8, 1] float32");
    REQUIRE_MESSAGE(g != nullptr, sites_of(t));
    CHECK(g->bytes_per_step == kBatch * 4);
    CHECK(g->allocated_bytes_per_step == 512);  // the allocator's rounding unit
    CHECK(t.sites.size() == 1);
    CHECK(t.allocated_last - t.allocated_first == 512 * 3);
  }
  SUBCASE("fixed: keep what you need as numbers") {
    for (int i = 0; i < 5; ++i) {
      StepLeakCheck check(tracker, "step");
      s.opt.zero_grad();
      Tensor out = s.model->forward(s.x);
      s.criterion.forward(out, s.y).backward();
      s.opt.step();
      fixed_outputs.push_back(out.sum().item());
    }
    CHECK_FALSE(tracker.trend().leaked());
  }
}

namespace {
// A model that keeps a running statistic of its activations in a member.
struct StatNet : Net {
  Tensor running = zeros({kHidden});
  bool fixed = false;
  Tensor forward(const Tensor& x) {
    Tensor h = hidden(x);
    if (fixed) {
      NoGradGuard no_grad;
      running = running * 0.9 + mul(h, h).mean(0);
    } else {
      running = running * 0.9 + mul(h, h).mean(0);  // chains every step's graph onto the last
    }
    return fc2->forward(h);
  }
};
}  // namespace

TEST_CASE("leak/pattern: a tensor cached in a module member every step keeps activations") {
  manual_seed(3);
  auto model = std::make_shared<StatNet>();
  optim::SGD opt(model->parameters(), optim::SGDOptions(1e-3));
  Tensor x = randn({kBatch, kIn}), y = randn({kBatch, 1});
  LeakTracker tracker(LeakMode::record);
  SUBCASE("leaking") {
    for (int i = 0; i < 5; ++i) {
      StepLeakCheck check(tracker, "step");
      opt.zero_grad();
      mse_loss(model->forward(x), y).backward();
      opt.step();
    }
    LeakTrend t = tracker.trend();
    const GrowingSite* g = find_site(t, "model.forward / relu", "[8, 64] float32");
    REQUIRE_MESSAGE(g != nullptr, sites_of(t));
    CHECK(g->bytes_per_step == kBatch * kHidden * 4);
    REQUIRE(t.graphs.size() == 1);
    CHECK(t.graphs[0].site == "add");
    CHECK(t.graphs[0].saved_bytes_per_step == doctest::Approx(kBatch * kHidden * 4));
  }
  SUBCASE("fixed: update the statistic under NoGradGuard") {
    model->fixed = true;
    for (int i = 0; i < 5; ++i) {
      StepLeakCheck check(tracker, "step");
      opt.zero_grad();
      mse_loss(model->forward(x), y).backward();
      opt.step();
    }
    CHECK_FALSE(tracker.trend().leaked());
  }
}

TEST_CASE("leak/pattern: validation without NoGradGuard keeps every batch's activations") {
  manual_seed(4);
  Setup s;
  s.step();
  Tensor xv = randn({kBatch, kIn}), yv = randn({kBatch, 1});
  LeakTracker tracker(LeakMode::record);
  SUBCASE("leaking") {
    Tensor val_total = zeros({});
    for (int i = 0; i < 5; ++i) {
      StepLeakCheck check(tracker, "val batch");
      val_total = val_total + s.criterion.forward(s.model->forward(xv), yv);
    }
    LeakTrend t = tracker.trend();
    const GrowingSite* h = find_site(t, "model.forward / relu", "[8, 64] float32");
    REQUIRE_MESSAGE(h != nullptr, sites_of(t));
    CHECK(h->bytes_per_step == kBatch * kHidden * 4);
    REQUIRE(t.graphs.size() == 1);
    CHECK(t.graphs[0].grad_fn == "AddBackward");
    CHECK(t.graphs[0].saved_bytes_per_step >= kBatch * kHidden * 4);
  }
  SUBCASE("fixed: NoGradGuard and .item()") {
    double val_total = 0;
    for (int i = 0; i < 5; ++i) {
      StepLeakCheck check(tracker, "val batch");
      NoGradGuard no_grad;
      val_total += s.criterion.forward(s.model->forward(xv), yv).item();
    }
    CHECK_FALSE(tracker.trend().leaked());
  }
}

namespace {
// Re-replicates the weights on every forward, caching replicas by the weights'
// version; the optimizer bumps the version each step, so the cache never hits.
struct ReplicatingNet : nn::Module {
  std::shared_ptr<Net> inner = register_module("inner", std::make_shared<Net>());
  std::map<uint64_t, std::vector<Tensor>> cache;
  bool fixed = false;

  std::vector<Tensor> replicate() {
    nn::ForwardScope scope(*this);
    std::vector<Tensor> r;
    for (const Tensor& p : inner->parameters()) r.push_back(p.clone());
    return r;
  }
  Tensor forward(const Tensor& x) {
    std::vector<Tensor> own;
    std::vector<Tensor>* w;
    if (fixed) {  // one device: the model is its own persistent replica
      own = inner->parameters();
      w = &own;
    } else {
      w = &cache.try_emplace(inner->fc1->weight.version()).first->second;
      if (w->empty()) *w = replicate();
    }
    return linear(relu(linear(x, (*w)[0], (*w)[1])), (*w)[2], (*w)[3]);
  }
};
}  // namespace

TEST_CASE("leak/pattern: replicas re-made every step are named with the bytes of the weights") {
  manual_seed(5);
  auto model = std::make_shared<ReplicatingNet>();
  optim::SGD opt(model->parameters(), optim::SGDOptions(1e-3));
  Tensor x = randn({kBatch, kIn}), y = randn({kBatch, 1});
  LeakTracker tracker(LeakMode::record);
  auto train = [&] {
    for (int i = 0; i < 5; ++i) {
      StepLeakCheck check(tracker, "step");
      opt.zero_grad();
      mse_loss(model->forward(x), y).backward();
      opt.step();
    }
  };
  SUBCASE("leaking") {
    train();
    LeakTrend t = tracker.trend();
    const GrowingSite* w1 = find_site(t, "model.forward / clone", "[64, 16] float32");
    REQUIRE_MESSAGE(w1 != nullptr, sites_of(t));
    CHECK(w1->bytes_per_step == kHidden * kIn * 4);
    int64_t total = 0;
    for (const GrowingSite& g : t.sites) total += g.bytes_per_step;
    CHECK(total == (kHidden * kIn + kHidden + kHidden + 1) * 4);  // every weight, every step
  }
  SUBCASE("fixed: one persistent replica") {
    model->fixed = true;
    train();
    CHECK_FALSE(tracker.trend().leaked());
  }
}

TEST_CASE("leak/plain loop: 1,000 training steps, no alarm, allocated memory exactly flat") {
  manual_seed(6);
  Setup s;
  optim::Adam adam(s.model->parameters(), optim::AdamOptions(1e-3));
  LeakTracker tracker(LeakMode::raise, 2);
  std::vector<int64_t> allocated;
  for (int i = 0; i < 1000; ++i) {
    StepLeakCheck check(tracker, "step");
    adam.zero_grad();
    Tensor loss = s.criterion.forward(s.model->forward(s.x), s.y);
    loss.backward();
    adam.step();
    allocated.push_back(memory_allocated(kCPU));
  }
  CHECK_NOTHROW(tracker.check());
  CHECK_FALSE(tracker.trend().leaked());
  int leaked_steps = 0;
  for (const LeakReport& r : tracker.reports()) leaked_steps += r.leaked();
  CHECK(leaked_steps == 0);
  for (size_t i = 2; i < allocated.size(); ++i) REQUIRE(allocated[i] == allocated[1]);
}

TEST_CASE("leak/modes: raise throws the report, record returns it") {
  manual_seed(7);
  std::vector<Tensor> kept;
  auto leak_one = [&] { kept.push_back(randn({32})); };
  {
    StepLeakCheck check("warmup", LeakMode::record);
    leak_one();  // the first randn may reserve a segment; reports compare blocks only
  }
  try {
    StepLeakCheck check("step 2", LeakMode::raise, {kCPU});
    leak_one();
    check.finish();
    FAIL("raise mode did not throw");
  } catch (const Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("randn") != std::string::npos);
    CHECK(msg.find("[32] float32") != std::string::npos);
    CHECK(msg.find("128 bytes") != std::string::npos);
  }
  StepLeakCheck check("step 3", LeakMode::record, {kCPU});
  leak_one();
  LeakReport r = check.finish();
  REQUIRE(r.survivors.size() == 1);
  CHECK(r.survivors[0].site == "randn");
  CHECK(r.survivors[0].count == 1);
  CHECK(r.survivors[0].bytes == 128);
  CHECK(r.survivors[0].allocated_bytes == 512);
}

TEST_CASE("leak/empty_cache: drops reserved memory, never allocated memory") {
  manual_seed(8);
  Setup s;
  s.step();
  s.step();
  const int64_t allocated = memory_allocated(kCPU);
  s.step();
  CHECK(memory_allocated(kCPU) == allocated);
  empty_cache(kCPU);
  CHECK(memory_allocated(kCPU) == allocated);  // live tensors are untouched
  const int64_t reserved_after = memory_reserved(kCPU);
  s.step();
  CHECK(memory_allocated(kCPU) == allocated);
  CHECK(memory_reserved(kCPU) >= reserved_after);  // the step had to reserve again
}

TEST_CASE("leak/timeline: step markers reach the history, the trace and the HTML page") {
  auto& alloc = caching_allocator(kCPU);
  alloc.record_memory_history(true);
  std::vector<Tensor> kept;
  for (int i = 0; i < 4; ++i) {
    mark_step("step " + std::to_string(i), {kCPU});
    kept.push_back(zeros({1024}));
    Tensor tmp = ones({2048});
  }
  auto snap = alloc.memory_snapshot();
  alloc.record_memory_history(false);
  int steps = 0;
  for (const auto& e : snap.trace) steps += e.action == memory::TraceAction::step;
  CHECK(steps == 4);
  std::ostringstream trace, html;
  memory::write_chrome_trace(snap, trace);
  CHECK(trace.str().find("\"name\":\"step 3\"") != std::string::npos);
  memory::write_memory_timeline_html(snap, html, "test <timeline>");
  CHECK(html.str().find("<svg") != std::string::npos);
  CHECK(html.str().find("test &lt;timeline&gt;") != std::string::npos);
  CHECK(html.str().find("step 2") != std::string::npos);
  memory::MemorySnapshot empty;
  CHECK_THROWS_AS(memory::write_memory_timeline_html(empty, html), Error);
}

TEST_CASE("leak/cuda: a leak on the GPU is named with its site, shape and bytes" *
          doctest::test_suite("cuda")) {
  manual_seed(9);
  auto model = std::make_shared<Net>();
  model->to(kCUDA);
  optim::SGD opt(model->parameters(), optim::SGDOptions(1e-3));
  Tensor x = randn({kBatch, kIn}).to(kCUDA), y = randn({kBatch, 1}).to(kCUDA);
  LeakTracker tracker(LeakMode::record, 1, {kCUDA});
  std::vector<Tensor> outputs;
  for (int i = 0; i < 5; ++i) {
    StepLeakCheck check(tracker, "step");
    opt.zero_grad();
    Tensor out = model->forward(x);
    mse_loss(out, y).backward();
    opt.step();
    outputs.push_back(out);
  }
  LeakTrend t = tracker.trend();
  const GrowingSite* g = find_site(t, "model.fc2.forward / linear", "[8, 1] float32");
  REQUIRE_MESSAGE(g != nullptr, sites_of(t));
  CHECK(g->device == kCUDA);
  CHECK(g->bytes_per_step == kBatch * 4);
  CHECK(t.sites.size() == 1);
  outputs.clear();
  // The fixed twin on the same device: nothing grows.
  LeakTracker clean(LeakMode::raise, 1, {kCUDA});
  for (int i = 0; i < 5; ++i) {
    StepLeakCheck check(clean, "step");
    opt.zero_grad();
    mse_loss(model->forward(x), y).backward();
    opt.step();
  }
  CHECK_NOTHROW(clean.check());
}
