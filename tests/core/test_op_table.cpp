// The drivers of the op test table (tests/core/op_table.cpp): every entry's
// samples through
//  - coverage: every op declared in core/ops.h (read at run time) has an entry or
//    an exemption with its reason, and every entry names a declared op;
//  - gradcheck in float64 on the CPU (differentiable entries, the small samples);
//  - the meta device: output and gradient sizes and dtypes equal the CPU's;
//  - CUDA against the CPU float64 reference on the same rounded values, forward
//    and backward, in each of the entry's dtypes (TF32 too for GEMMs), at the
//    entry's tolerances; and the same bits from two CUDA runs (suite "cuda":
//    skipped, not passed, without a GPU).
// A failure names the entry, the sample (its inputs' shapes and views) and the
// dtype.
// GCC 12 under -fsanitize=address,undefined (make test-sanitize, warnings as errors)
// reports -Wmaybe-uninitialized inside <regex>'s std::function members, a false
// positive in libstdc++'s code instantiated here, not in this file's.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/base/elementwise_ops.h"
#include "core/meta.h"
#include "core/ops.h"
#include "cuda/blas.h"
#include "gradcheck.h"
#include "op_table.h"
#include "source_dir.h"

using namespace ember;
using namespace ember::testing::optable;
using ember::testing::rel_error;
using ember::testing::same_bits;

namespace {

// gradcheck runs the samples of at most this many input elements: two forward
// passes per element, so the large samples (kernel row lengths) run on CUDA only.
constexpr int64_t kGradcheckMaxElements = 128;

std::string describe(const Sample& s) {
  std::ostringstream os;
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    const In& in = s.inputs[i];
    os << (i ? ", " : "") << shape_str(in.shape);
    if (in.view == View::Transposed) os << " transposed";
    if (in.view == View::Strided) os << " strided";
    if (in.gen == Gen::Index) os << " int64";
    if (in.gen == Gen::Mask) os << " bool";
  }
  os << "; arg " << s.arg;
  return os.str();
}

// The stored values of each input, float64 (or int64, bool) on the CPU, in the
// layout the view reads (see View).
Inputs make_stored(const Sample& s, uint64_t seed) {
  Inputs stored;
  for (const In& in : s.inputs) {
    Shape shape = in.shape;
    if (in.view == View::Transposed) {
      REQUIRE_MESSAGE(shape.size() >= 2, "a transposed view needs 2 dims: ", shape_str(shape));
      std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
    } else if (in.view == View::Strided) {
      REQUIRE_MESSAGE(!shape.empty(), "a strided view needs a dim");
      shape.back() *= 2;
    }
    ++seed;
    switch (in.gen) {
      case Gen::Normal:
        stored.push_back(ember::testing::randn64(shape, seed));
        break;
      case Gen::Uniform:
        stored.push_back(ember::testing::rand64(shape, seed, in.lo, in.hi));
        break;
      case Gen::Index:
        stored.push_back(
            cast(ember::testing::rand64(shape, seed, in.lo, in.hi - 1e-9), kInt64));  // floor
        break;
      case Gen::Mask:
        stored.push_back(gt(ember::testing::randn64(shape, seed), 0.0));
        break;
    }
  }
  return stored;
}

Tensor view_of(const Tensor& stored, const In& in) {
  switch (in.view) {
    case View::Transposed:
      return stored.transpose(stored.dim() - 2, stored.dim() - 1);
    case View::Strided:
      return stored.slice(stored.dim() - 1, 0, stored.size(stored.dim() - 1), 2);
    case View::Contiguous:
      break;
  }
  return stored;
}

bool takes_grad(const OpEntry& e, const In& in) {
  return e.grad == Grad::Yes && in.floating() && in.grad;
}

struct Run {
  Tensor out;
  Inputs grads;  // one per input that takes a gradient, in order
};

// The op on `device` with the stored values rounded to `dtype` (floating inputs;
// the others only move), computed in `compute` (the dtype itself, or float64 for
// the CPU reference on the rounded values). With `backward`, the gradients of
// sum(out * w), w seeded normals rounded to dtype.
Run run_op(const OpEntry& e, const Sample& s, const Inputs& stored, Device device, DType dtype,
           DType compute, bool backward, uint64_t seed) {
  Inputs leaves, seen;
  for (size_t i = 0; i < stored.size(); ++i) {
    const In& in = s.inputs[i];
    // detach(): a conversion that changes nothing returns the stored tensor itself,
    // whose requires_grad must not leak into the next run (its copies would be
    // non-leaves).
    Tensor t =
        (in.floating() ? stored[i].to(dtype).to(device, compute) : stored[i].to(device)).detach();
    if (backward && takes_grad(e, in)) {
      t.set_requires_grad(true);
      leaves.push_back(t);
    }
    seen.push_back(view_of(t, in));
  }
  Run r;
  r.out = e.fn(seen, s.arg);
  if (!backward || leaves.empty()) return r;
  REQUIRE_MESSAGE(r.out.requires_grad(), "the output of a differentiable entry needs a graph");
  // In the output's dtype (a cast's differs from the inputs').
  const Tensor w = ember::testing::randn64(r.out.sizes(), seed).to(dtype).to(device, r.out.dtype());
  r.grads = grad({r.out}, leaves, {w});
  return r;
}

double tol_for(DType t, const Tol& tol, bool gradient) {
  if (t == kFloat64) return 1e-12;
  if (t == kBFloat16) return tol.bf16;
  return gradient ? tol.f32_grad : tol.f32;
}

bool any_floating(const Sample& s) {
  return std::any_of(s.inputs.begin(), s.inputs.end(), [](const In& in) { return in.floating(); });
}

int64_t input_elements(const Sample& s) {
  int64_t n = 0;
  for (const In& in : s.inputs) n += numel_of(in.shape);
  return n;
}

uint64_t seed_of(size_t entry, size_t sample) {
  return 1000 * (entry + 1) + 10 * sample;
}

// Bit-for-bit equality of two tensors' values (read back on the CPU).
// Runs one sample's check; an exception fails that sample (named by the INFO in
// scope) instead of ending the whole table's test case.
template <typename F>
void guarded(F&& check) {
  try {
    check();
  } catch (const std::exception& err) {
    FAIL_CHECK("threw: ", std::string(err.what()));
  }
}

// --- the ops core/ops.h declares, read from the file

// The names the element-wise lists declare (core/ops.h expands them).
std::map<std::string, std::vector<std::string>> list_names() {
  std::map<std::string, std::vector<std::string>> lists;
#define EMBER_NAME(name, ...) lists[list].push_back(#name);
  std::string list = "EMBER_UNARY_OPS";
  EMBER_UNARY_OPS(EMBER_NAME)
  list = "EMBER_SCALAR_OPS";
  EMBER_SCALAR_OPS(EMBER_NAME)
  list = "EMBER_BINARY_OPS";
  EMBER_BINARY_OPS(EMBER_NAME)
#undef EMBER_NAME
  return lists;
}

// Every function name declared at namespace scope in core/ops.h (outside
// namespace detail, classes and function bodies; operators aside), with the
// names of the element-wise lists it expands. Unknown lists are reported.
std::set<std::string> declared_ops(std::vector<std::string>& problems) {
  const auto path = ember::testing::source_dir() / "core" / "ops.h";
  std::ifstream in(path);
  std::set<std::string> names;
  if (!in) {
    problems.push_back("cannot read " + path.string());
    return names;
  }
  static const std::regex decl(R"(^(?:inline\s+)?[A-Za-z_][\w:<>, ]*[\s&*]+([A-Za-z_]\w*)\s*\()");
  static const std::regex list(R"(^(EMBER_\w+_OPS)\(EMBER_X\))");
  const auto lists = list_names();
  std::vector<std::pair<std::string, int>> namespaces;  // name, depth inside it
  int depth = 0;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find("//"));
    if (line.empty() || line[0] == '#') continue;
    const bool at_namespace_scope = !namespaces.empty() && namespaces.back().second == depth;
    std::smatch m;
    if (line.rfind("namespace ", 0) == 0 && line.find('{') != std::string::npos) {
      std::istringstream words(line.substr(10));
      std::string name;
      words >> name;
      namespaces.emplace_back(name, depth + 1);
    } else if (at_namespace_scope && namespaces.back().first != "detail") {
      if (std::regex_search(line, m, list)) {
        const auto it = lists.find(m[1]);
        if (it == lists.end())
          problems.push_back("core/ops.h expands the list " + m[1].str() +
                             ", which this test does not know (add it to list_names())");
        else
          names.insert(it->second.begin(), it->second.end());
      } else if (std::regex_search(line, m, decl) && m[1] != "operator") {
        names.insert(m[1]);
      }
    }
    depth += static_cast<int>(std::count(line.begin(), line.end(), '{')) -
             static_cast<int>(std::count(line.begin(), line.end(), '}'));
    while (!namespaces.empty() && depth < namespaces.back().second) namespaces.pop_back();
  }
  return names;
}

}  // namespace

TEST_CASE("op_table: every op declared in core/ops.h has an entry, every entry a declared op") {
  std::vector<std::string> problems;
  const std::set<std::string> declared = declared_ops(problems);
  for (const std::string& p : problems) FAIL_CHECK(p);
  // The parse itself: ops of each kind of declaration are found.
  for (const char* known : {"matmul", "sum", "exp", "pow", "maximum", "fill_", "fused_adam_",
                            "multi_tensor_norm_clip_coef", "cross_entropy", "l1_loss"})
    CHECK_MESSAGE(declared.count(known) == 1, "the parse of core/ops.h missed ", known);
  CHECK(declared.count("gather") == 1);
  CHECK(declared.count("unary_op") == 0);      // namespace detail
  CHECK(declared.count("ignore_index") == 0);  // a member of CrossEntropyOptions

  std::set<std::string> covered, exempt;
  for (const OpEntry& e : op_table()) covered.insert(e.op);
  for (const Exemption& x : op_table_exemptions()) {
    exempt.insert(x.name);
    CHECK_MESSAGE(x.reason[0] != '\0', "the exemption of ", x.name, " gives no reason");
  }
  std::vector<std::string> missing;
  for (const std::string& name : declared)
    if (!covered.count(name) && !exempt.count(name)) missing.push_back(name);
  std::string list;
  for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
  CHECK_MESSAGE(missing.empty(), "ops declared in core/ops.h without an entry in ",
                "tests/core/op_table.cpp (or an exemption with its reason): ", list);
  for (const std::string& name : covered)
    CHECK_MESSAGE(declared.count(name) == 1, "the op table's entry ", name,
                  " names no op declared in core/ops.h");
  for (const std::string& name : exempt) {
    CHECK_MESSAGE(declared.count(name) == 1, "the exemption ", name, " names no declared op");
    CHECK_MESSAGE(covered.count(name) == 0, name, " has an entry and an exemption");
  }
  for (const OpEntry& e : op_table()) CHECK_MESSAGE(!e.samples.empty(), e.name(), " has no sample");
  size_t samples = 0;
  for (const OpEntry& e : op_table()) samples += e.samples.size();
  MESSAGE("op_table: ", op_table().size(), " entries with ", samples, " samples cover ",
          covered.size(), " of the ", declared.size(), " names core/ops.h declares (",
          exempt.size(), " exempt)");
}

TEST_CASE("op_table: gradcheck (float64, CPU) of every differentiable entry") {
  const std::vector<OpEntry>& table = op_table();
  int checked = 0;
  for (size_t ei = 0; ei < table.size(); ++ei) {
    const OpEntry& e = table[ei];
    if (e.grad == Grad::InPlace) continue;
    for (size_t si = 0; si < e.samples.size(); ++si) {
      const Sample& s = e.samples[si];
      INFO(e.name(), " (", describe(s), ")");
      const Inputs stored = make_stored(s, seed_of(ei, si));
      if (e.grad == Grad::None) {
        // Never a graph, even from inputs that require grad.
        Inputs seen;
        for (size_t i = 0; i < stored.size(); ++i) {
          Tensor t = stored[i].clone();
          if (s.inputs[i].floating()) t.set_requires_grad(true);
          seen.push_back(view_of(t, s.inputs[i]));
        }
        guarded([&] { CHECK_FALSE(e.fn(seen, s.arg).requires_grad()); });
        continue;
      }
      if (input_elements(s) > kGradcheckMaxElements) continue;
      if (s.no_gradcheck[0] != '\0') {
        MESSAGE(e.name(), " (", describe(s), "): no gradcheck: ", std::string(s.no_gradcheck));
        continue;
      }
      std::vector<size_t> grad_inputs;
      Inputs x;
      for (size_t i = 0; i < stored.size(); ++i)
        if (takes_grad(e, s.inputs[i])) {
          grad_inputs.push_back(i);
          x.push_back(stored[i]);
        }
      REQUIRE_MESSAGE(!x.empty(), "a differentiable entry's sample has no floating input");
      auto f = [&](const Inputs& leaves) {
        Inputs all = stored;
        for (size_t k = 0; k < grad_inputs.size(); ++k) all[grad_inputs[k]] = leaves[k];
        Inputs seen;
        for (size_t i = 0; i < all.size(); ++i) seen.push_back(view_of(all[i], s.inputs[i]));
        return e.fn(seen, s.arg);
      };
      guarded([&] {
        {
          NoGradGuard no_grad;
          if (f(x).dtype() != kFloat64) return;  // a cast to a narrower dtype: CUDA only
        }
        CHECK_GRADCHECK(f, x, 1e-6, e.gradcheck_tol);
        ++checked;
      });
    }
  }
  MESSAGE("op_table: gradcheck ran on ", checked, " samples");
}

namespace {
void meta_agrees_with_cpu(DeviceType mirror) {
  MetaDeviceScope scope(MetaDeviceOptions().mirror_device(mirror));
  const std::vector<OpEntry>& table = op_table();
  for (size_t ei = 0; ei < table.size(); ++ei) {
    const OpEntry& e = table[ei];
    if (e.no_meta[0] != '\0') {
      MESSAGE(e.name(), ": not run on the meta device: ", std::string(e.no_meta));
      continue;
    }
    for (size_t si = 0; si < e.samples.size(); ++si) {
      const Sample& s = e.samples[si];
      const Inputs stored = make_stored(s, seed_of(ei, si));
      for (DType t : {kFloat32, kBFloat16}) {
        if (std::find(e.cuda_dtypes.begin(), e.cuda_dtypes.end(), t) == e.cuda_dtypes.end())
          continue;
        INFO(e.name(), " (", describe(s), ") in ", t);
        guarded([&] {
          const bool backward = e.grad == Grad::Yes;
          const Run cpu = run_op(e, s, stored, kCPU, t, t, backward, 1);
          const Run meta = run_op(e, s, stored, kMeta, t, t, backward, 1);
          CHECK(meta.out.device() == kMeta);
          CHECK(meta.out.sizes() == cpu.out.sizes());
          CHECK(meta.out.dtype() == cpu.out.dtype());
          REQUIRE(meta.grads.size() == cpu.grads.size());
          for (size_t i = 0; i < cpu.grads.size(); ++i) {
            CAPTURE(i);
            REQUIRE(meta.grads[i].defined() == cpu.grads[i].defined());
            if (!cpu.grads[i].defined()) continue;
            CHECK(meta.grads[i].device() == kMeta);
            CHECK(meta.grads[i].sizes() == cpu.grads[i].sizes());
            CHECK(meta.grads[i].dtype() == cpu.grads[i].dtype());
          }
        });
        if (!any_floating(s)) break;  // no dtype to vary
      }
    }
  }
}
}  // namespace

TEST_CASE("op_table: on the meta device (mirroring the CPU), sizes and dtypes are the CPU's") {
  meta_agrees_with_cpu(DeviceType::CPU);
}

TEST_CASE("op_table: on the meta device (mirroring CUDA), sizes and dtypes are the CPU's") {
  meta_agrees_with_cpu(DeviceType::CUDA);
}

namespace {
void cuda_agrees_with_cpu(const OpEntry& e, const Sample& s, const Inputs& stored, DType t,
                          uint64_t seed);

// The CUDA cases run the table in kCudaShards test cases, entry i in shard
// i % kCudaShards, so that tools/gpu_sanitize.sh can spread them over processes
// (under racecheck the whole table in one process takes longer than a device call).
constexpr size_t kCudaShards = 8;

void cuda_matches_cpu_shard(size_t shard) {
  const std::vector<OpEntry>& table = op_table();
  for (size_t ei = shard; ei < table.size(); ei += kCudaShards) {
    const OpEntry& e = table[ei];
    for (size_t si = 0; si < e.samples.size(); ++si) {
      const Sample& s = e.samples[si];
      const uint64_t seed = seed_of(ei, si);
      const Inputs stored = make_stored(s, seed);
      for (DType t : e.cuda_dtypes) {
        INFO(e.name(), " (", describe(s), ") in ", t);
        guarded([&] { cuda_agrees_with_cpu(e, s, stored, t, seed); });
        if (!any_floating(s)) break;  // integer inputs: one run covers it
      }
    }
  }
}

// One sample in dtype t: output and gradients on CUDA against the CPU float64
// reference on the same rounded values, the output's dtype against the CPU's in t,
// and (GEMMs) the same with TF32 at 1e-3.
void cuda_agrees_with_cpu(const OpEntry& e, const Sample& s, const Inputs& stored, DType t,
                          uint64_t seed) {
  {
    const bool backward = e.grad == Grad::Yes && (t != kBFloat16 || e.bf16_grad);
    const Run ref = run_op(e, s, stored, kCPU, t, kFloat64, backward, seed);
    const Run got = run_op(e, s, stored, kCUDA, t, t, backward, seed);
    {
      NoGradGuard no_grad;  // the dtype the CPU gives in t
      CHECK(got.out.dtype() == run_op(e, s, stored, kCPU, t, t, false, seed).out.dtype());
    }
    CHECK(got.out.is_cuda());
    CHECK(rel_error(got.out.to(kCPU).to(kFloat64), ref.out.to(kFloat64)) <=
          tol_for(t, e.tol, false));
    REQUIRE(got.grads.size() == ref.grads.size());
    for (size_t i = 0; i < got.grads.size(); ++i) {
      CAPTURE(i);
      REQUIRE(got.grads[i].defined());
      CHECK(got.grads[i].is_cuda());
      CHECK(got.grads[i].dtype() == t);
      CHECK(rel_error(got.grads[i].to(kCPU).to(kFloat64), ref.grads[i]) <= tol_for(t, e.tol, true));
    }
    if (e.tf32 && t == kFloat32) {
      INFO("with TF32");
      cuda::set_allow_tf32(true);
      const Run tf = run_op(e, s, stored, kCUDA, t, t, backward, seed);
      cuda::set_allow_tf32(false);
      CHECK(rel_error(tf.out.to(kCPU).to(kFloat64), ref.out) <= 1e-3);
      for (size_t i = 0; i < tf.grads.size(); ++i)
        CHECK(rel_error(tf.grads[i].to(kCPU).to(kFloat64), ref.grads[i]) <= 1e-3);
    }
  }
}

void same_bits_twice_shard(size_t shard) {
  const std::vector<OpEntry>& table = op_table();
  for (size_t ei = shard; ei < table.size(); ei += kCudaShards) {
    const OpEntry& e = table[ei];
    if (e.nondeterministic[0] != '\0') {
      MESSAGE(e.name(), ": bits not compared: ", std::string(e.nondeterministic));
      continue;
    }
    for (size_t si = 0; si < e.samples.size(); ++si) {
      const Sample& s = e.samples[si];
      const uint64_t seed = seed_of(ei, si);
      const Inputs stored = make_stored(s, seed);
      for (DType t : {kFloat32, kBFloat16}) {
        if (std::find(e.cuda_dtypes.begin(), e.cuda_dtypes.end(), t) == e.cuda_dtypes.end())
          continue;
        INFO(e.name(), " (", describe(s), ") in ", t);
        guarded([&] {
          const bool backward = e.grad == Grad::Yes;
          const Run a = run_op(e, s, stored, kCUDA, t, t, backward, seed);
          const Run b = run_op(e, s, stored, kCUDA, t, t, backward, seed);
          CHECK(same_bits(a.out, b.out));
          REQUIRE(a.grads.size() == b.grads.size());
          for (size_t i = 0; i < a.grads.size(); ++i) {
            CAPTURE(i);
            CHECK(same_bits(a.grads[i], b.grads[i]));
          }
        });
        if (!any_floating(s)) break;
      }
    }
  }
}
}  // namespace

#define EMBER_OP_TABLE_CUDA_SHARD(k)                                                            \
  TEST_CASE("op_table: CUDA matches the CPU float64 reference, forward and backward [shard " #k \
            " of 8]" *                                                                          \
            doctest::test_suite("cuda")) {                                                      \
    cuda_matches_cpu_shard(k);                                                                  \
  }                                                                                             \
  TEST_CASE(                                                                                    \
      "op_table: the same inputs give the same bits on CUDA twice, forward and backward "       \
      "[shard " #k " of 8]" *                                                                   \
      doctest::test_suite("cuda")) {                                                            \
    same_bits_twice_shard(k);                                                                   \
  }
EMBER_OP_TABLE_CUDA_SHARD(0)
EMBER_OP_TABLE_CUDA_SHARD(1)
EMBER_OP_TABLE_CUDA_SHARD(2)
EMBER_OP_TABLE_CUDA_SHARD(3)
EMBER_OP_TABLE_CUDA_SHARD(4)
EMBER_OP_TABLE_CUDA_SHARD(5)
EMBER_OP_TABLE_CUDA_SHARD(6)
EMBER_OP_TABLE_CUDA_SHARD(7)
static_assert(kCudaShards == 8, "one EMBER_OP_TABLE_CUDA_SHARD line per shard");

// binary_cross_entropy_with_logits on bfloat16 computes in float32 (core/ops/
// cross_entropy.cpp). Op by op in bfloat16 its gradient came out 1.15% from the float64
// result at its entry's samples seeded one index later (where it sat while
// linear_cross_entropy's entry stood among the losses): on the H200 and, the same
// figures, on the CPU. Both seedings, on the CPU, within half the 1% budget now.
TEST_CASE(
    "op_table: binary_cross_entropy_with_logits in bfloat16 keeps its gradient's error "
    "under 0.5%") {
  const std::vector<OpEntry>& table = op_table();
  size_t found = 0;
  for (size_t ei = 0; ei < table.size(); ++ei) {
    const OpEntry& e = table[ei];
    if (e.name() != "binary_cross_entropy_with_logits") continue;
    ++found;
    for (size_t shift : {size_t{0}, size_t{1}})
      for (size_t si = 0; si < e.samples.size(); ++si) {
        const Sample& s = e.samples[si];
        INFO(describe(s), ", seeded as entry ", ei + shift);
        const uint64_t seed = seed_of(ei + shift, si);
        const Inputs stored = make_stored(s, seed);
        const Run ref = run_op(e, s, stored, kCPU, kBFloat16, kFloat64, true, seed);
        const Run got = run_op(e, s, stored, kCPU, kBFloat16, kBFloat16, true, seed);
        CHECK(got.out.dtype() == kBFloat16);
        CHECK(rel_error(got.out.to(kFloat64), ref.out.to(kFloat64)) <= 5e-3);
        REQUIRE(got.grads.size() == ref.grads.size());
        for (size_t i = 0; i < got.grads.size(); ++i) {
          CAPTURE(i);
          CHECK(got.grads[i].dtype() == kBFloat16);
          CHECK(rel_error(got.grads[i].to(kFloat64), ref.grads[i]) <= 5e-3);
        }
      }
  }
  CHECK(found == 1);
}
