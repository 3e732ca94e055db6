// ember's fused attention (cuda/kernels/attention.h) launched directly on raw
// pointers, against the composed path in float64 on the CPU (matmul, the causal
// mask added as -inf, softmax, matmul; its gradients through autograd) on the
// same bf16-rounded inputs: O, the log-sum-exp, dQ, dK and dV by relative error
// at DESIGN.md's bf16 tolerance 1e-2, in both backward modes; sequence lengths 1,
// 7, 127 and 300 (ragged tiles), query and key lengths that differ, head dims 64
// and 128, causal and not, (B, T, H, D) storage viewed as (B, H, T, D) and
// contiguous (B, H, T, D). Outputs are NaN-poisoned first, so an element never
// written fails. The deterministic mode gives the same bits twice. The wgmma forward
// and backward (version 2) are checked the same way on compute capability 9.0. The
// refusals name what they refuse.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/kernels/attention.h"
#include "cuda/runtime.h"
#include "error_text.h"
#include "gradcheck.h"
#include "switch_guard.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Shape4 {
  int64_t b, h, tq, tk, d;
};

// A (B, H, T, D) tensor in storage (B, T, H, D) when bthd, else contiguous.
Tensor bhtd_view(const Tensor& storage, bool bthd) {
  return bthd ? transpose(storage, 1, 2) : storage;
}
Tensor make_storage(int64_t b, int64_t h, int64_t t, int64_t d, bool bthd, uint64_t seed) {
  const Shape s = bthd ? Shape{b, t, h, d} : Shape{b, h, t, d};
  return randn64(s, seed).to(kBFloat16).to(kFloat64);  // values exact in bf16
}

cuda::AttentionInput in(const Tensor& t) {
  return {t.raw_data(), t.stride(0), t.stride(1), t.stride(2)};
}
cuda::AttentionOutput out(const Tensor& t) {
  return {t.raw_data(), t.stride(0), t.stride(1), t.stride(2)};
}

struct Result {
  double o = 0, lse = 0, dq = 0, dk = 0, dv = 0;
  // NaN (failing any bound) when run_case skipped the deterministic passes.
  double dq_det = kNaN, dk_det = kNaN, dv_det = kNaN;
  bool det_same = false;
};

// v2_tile: 0 runs launch_attention_forward with its defaults, -1 forces version 1
// (mma.sync), 64 or 128 the wgmma forward (launch_attention_forward_sm90) with that key
// tile; backward reads its O and lse. query_tile: the deterministic backward's dK/dV
// query tile (0: its default). bwd_version: the deterministic backward's
// AttentionTuning::backward_version (2: the wgmma kernels, 3: with the
// warp-specialised dK/dV kernel); the atomic mode takes the launcher's default, or with
// bwd_version 4 version 4 (version 2's dK/dV kernel adding dQ's shares atomically; the
// deterministic mode then its default).
// sm90_variant, with v2_tile > 0: 0 version 2, 1 version 2 pipelined (forward_version 3),
// 2 the warp-specialised forward (forward_version 4, launch_attention_forward_sm90_ws),
// persistent; 3 the same with one block a query tile; 4 forward version 5 (version 4 with
// the intra-warpgroup overlap), persistent; 5 the same with three consumer warpgroups at
// head dim 64 (forward version 6; two at 128).
// deterministic_too: also the deterministic backward, twice (its errors and whether its
// dQ repeats bit for bit); false runs the atomic mode's backward alone (the forwards'
// cases, which check only its dQ: half the work under racecheck).
Result run_case(const Shape4& s, bool causal, bool bthd, uint64_t seed, int v2_tile = 0,
                int query_tile = 0, int bwd_version = 0, int sm90_variant = 0,
                bool deterministic_too = true) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  Tensor q64 = make_storage(s.b, s.h, s.tq, s.d, bthd, seed);
  Tensor k64 = make_storage(s.b, s.h, s.tk, s.d, bthd, seed + 1);
  Tensor v64 = make_storage(s.b, s.h, s.tk, s.d, bthd, seed + 2);
  Tensor g64 = make_storage(s.b, s.h, s.tq, s.d, bthd, seed + 3);

  // The composed reference, float64 on the CPU.
  Tensor qc = bhtd_view(q64, bthd).detach().set_requires_grad(true);
  Tensor kc = bhtd_view(k64, bthd).detach().set_requires_grad(true);
  Tensor vc = bhtd_view(v64, bthd).detach().set_requires_grad(true);
  const int64_t bh = s.b * s.h;
  Tensor sc =
      matmul(reshape(qc, {bh, s.tq, s.d}), transpose(reshape(kc, {bh, s.tk, s.d}), 1, 2)) * scale;
  if (causal) {
    std::vector<double> mask(static_cast<size_t>(s.tq * s.tk), 0.0);
    for (int64_t i = 0; i < s.tq; ++i)
      for (int64_t j = i + 1; j < s.tk; ++j)
        mask[static_cast<size_t>(i * s.tk + j)] = -std::numeric_limits<double>::infinity();
    sc = sc + from_vector(mask, {s.tq, s.tk}, TensorOptions(kFloat64));
  }
  Tensor p = softmax(sc, 2);
  Tensor oc = reshape(matmul(p, reshape(vc, {bh, s.tk, s.d})), {s.b, s.h, s.tq, s.d});
  // lse = S[:, :, 0] - log P[:, :, 0] (key 0 is seen by every row).
  Tensor lse_ref = reshape(select(sc, 2, 0) - log(select(p, 2, 0)), {s.b, s.h, s.tq}).detach();
  oc.backward(bhtd_view(g64, bthd));

  // Ours.
  auto gpu = [&](const Tensor& t64) { return t64.to(kCUDA, kBFloat16); };
  Tensor qs = gpu(q64), ks = gpu(k64), vs = gpu(v64), gs = gpu(g64);
  Tensor q = bhtd_view(qs, bthd), k = bhtd_view(ks, bthd), v = bhtd_view(vs, bthd),
         g = bhtd_view(gs, bthd);
  auto poisoned_like = [&](const Tensor& storage) {
    return bhtd_view(full(storage.sizes(), kNaN, TensorOptions(kCUDA).dtype(kBFloat16)), bthd);
  };
  Tensor o = poisoned_like(qs), dq = poisoned_like(qs), dk = poisoned_like(ks),
         dv = poisoned_like(vs);
  Tensor lse = full({s.b, s.h, s.tq}, kNaN, TensorOptions(kCUDA).dtype(kFloat32));
  cuda::AttentionProblem prob;
  prob.dtype = DType::BFloat16;
  prob.batch = s.b;
  prob.heads = s.h;
  prob.q_len = s.tq;
  prob.kv_len = s.tk;
  prob.head_dim = s.d;
  prob.scale = static_cast<float>(scale);
  prob.causal = causal;
  cudaStream_t stream = cuda::current_stream(0);
  if (v2_tile > 0 && sm90_variant >= 2) {
    cuda::launch_attention_forward_sm90_ws(prob, in(q), in(k), in(v), out(o), lse.data_ptr<float>(),
                                           stream, v2_tile, sm90_variant != 3, sm90_variant >= 4,
                                           sm90_variant == 5 && s.d == 64 ? 3 : 2);
  } else if (v2_tile > 0) {
    cuda::launch_attention_forward_sm90(prob, in(q), in(k), in(v), out(o), lse.data_ptr<float>(),
                                        stream, v2_tile, sm90_variant == 1);
  } else {
    cuda::AttentionTuning fwd_tuning;
    fwd_tuning.forward_version = v2_tile < 0 ? 1 : 0;
    cuda::launch_attention_forward(prob, in(q), in(k), in(v), out(o), lse.data_ptr<float>(), stream,
                                   fwd_tuning);
  }
  cuda::AttentionTuning bwd_tuning;
  bwd_tuning.backward_query_tile = query_tile;
  const size_t ws_bytes = std::max(cuda::attention_backward_workspace_bytes(prob, false),
                                   cuda::attention_backward_workspace_bytes(prob, true));
  Tensor ws =
      empty({static_cast<int64_t>(ws_bytes / 4 + 64)}, TensorOptions(kCUDA).dtype(kFloat32));
  auto backward = [&](bool det) {
    cuda::AttentionTuning tuning = bwd_tuning;
    tuning.backward_version = bwd_version == 4 ? (det ? 0 : 4) : det ? bwd_version : 0;
    cuda::launch_attention_backward(prob, in(q), in(k), in(v), in(o), in(g), lse.data_ptr<float>(),
                                    out(dq), out(dk), out(dv), det, ws.raw_data(), ws_bytes, stream,
                                    tuning);
  };
  auto err = [](const Tensor& ours, const Tensor& ref) {
    return rel_error(ours.to(kCPU).to(kFloat64), ref);
  };
  Result r;
  r.o = err(o, oc.detach());
  r.lse = err(lse, lse_ref);
  backward(false);
  r.dq = err(dq, qc.grad()), r.dk = err(dk, kc.grad()), r.dv = err(dv, vc.grad());
  if (!deterministic_too) return r;
  dq.fill_(kNaN), dk.fill_(kNaN), dv.fill_(kNaN);
  backward(true);
  r.dq_det = err(dq, qc.grad()), r.dk_det = err(dk, kc.grad()), r.dv_det = err(dv, vc.grad());
  std::vector<float> first = dq.to(kFloat32).to(kCPU).to_vector<float>();
  dq.fill_(kNaN);
  backward(true);
  std::vector<float> second = dq.to(kFloat32).to(kCPU).to_vector<float>();
  r.det_same = std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0;
  return r;
}

}  // namespace

TEST_CASE("kernels/attention: forward and both backward modes match the float64 composed path" *
          doctest::test_suite("cuda")) {
  const std::vector<Shape4> shapes = {{2, 3, 1, 1, 64},     {2, 3, 7, 7, 64},
                                      {2, 3, 127, 127, 64}, {1, 2, 300, 300, 64},
                                      {2, 3, 127, 300, 64}, {2, 2, 300, 127, 64}};
  uint64_t seed = 11;
  int index = 0;
  for (int64_t d : {64, 128})
    for (Shape4 s : shapes)
      for (bool causal : {false, true}) {
        s.d = d;
        const bool bthd = (seed / 4) % 2 == 0;
        // Half the cases force version 1 of the forward (the default on other GPUs than
        // compute capability 9.0); half run the deterministic backward's other query tile.
        const int forward = index % 2 == 0 ? 0 : -1;
        const int query_tile = (index / 2) % 2 == 0 ? 0 : (d == 128 ? 64 : 32);
        ++index;
        INFO("B=", s.b, " H=", s.h, " Tq=", s.tq, " Tk=", s.tk, " D=", s.d, " causal=", causal,
             " bthd=", bthd, " forward=", forward, " query_tile=", query_tile);
        const Result r = run_case(s, causal, bthd, seed += 4, forward, query_tile);
        CHECK(r.o <= 1e-2);
        CHECK(r.lse <= 1e-2);
        CHECK(r.dq <= 1e-2);
        CHECK(r.dk <= 1e-2);
        CHECK(r.dv <= 1e-2);
        CHECK(r.dq_det <= 1e-2);
        CHECK(r.dk_det <= 1e-2);
        CHECK(r.dv_det <= 1e-2);
        CHECK(r.det_same);
      }
}

// The wgmma forwards' sm90_variants (run_case) against the float64 composed path, each
// variant over 48 problems (key tiles 64 and 128, head dims 64 and 128, the shapes below,
// causal or not). Variant v's problems take the seeds 901 + 4 (48 v + n) + 4, n = 0..47,
// whichever test case runs it. Under racecheck one case of all six variants ran past
// 340 s (one H100, 2026-12-06), so they are three cases of two variants each, each its
// own sanitizer run (tools/gpu_sanitize.sh, slow_cases), and each problem runs the atomic
// backward alone (it ran the deterministic one twice too, unchecked); no comma in their
// names (doctest's -tc and -tce split at commas).
namespace {

void check_wgmma_forwards(std::initializer_list<int> variants) {
  const std::vector<Shape4> shapes = {{2, 3, 1, 1, 64},     {2, 3, 7, 7, 64},
                                      {2, 3, 127, 127, 64}, {1, 2, 300, 300, 64},
                                      {2, 3, 127, 300, 64}, {2, 2, 300, 127, 64}};
  constexpr uint64_t kProblemsPerVariant = 2 * 2 * 6 * 2;
  for (int variant : variants) {
    uint64_t seed = 901 + 4 * kProblemsPerVariant * static_cast<uint64_t>(variant);
    for (int tile : {64, 128})
      for (int64_t d : {64, 128})
        for (Shape4 s : shapes)
          for (bool causal : {false, true}) {
            s.d = d;
            const bool bthd = (seed / 4) % 2 == 1;
            INFO("variant=", variant, " tile=", tile, " B=", s.b, " H=", s.h, " Tq=", s.tq,
                 " Tk=", s.tk, " D=", s.d, " causal=", causal, " bthd=", bthd);
            const Result r = run_case(s, causal, bthd, seed += 4, tile, 0, 0, variant, false);
            CHECK(r.o <= 1e-2);
            CHECK(r.lse <= 1e-2);
            CHECK(r.dq <= 1e-2);  // the atomic backward from this forward's O and lse
          }
  }
}

}  // namespace

TEST_CASE(
    "kernels/attention: the wgmma forward versions 2 and 3 (pipelined) match the float64 "
    "composed path" *
    doctest::test_suite("cuda_sm90")) {
  check_wgmma_forwards({0, 1});
}

TEST_CASE(
    "kernels/attention: the wgmma forward version 4 (warp-specialised; persistent or a block "
    "a tile) matches the float64 composed path" *
    doctest::test_suite("cuda_sm90")) {
  check_wgmma_forwards({2, 3});
}

TEST_CASE(
    "kernels/attention: the wgmma forward versions 5 and 6 (the intra-warpgroup overlap) "
    "match the float64 composed path" *
    doctest::test_suite("cuda_sm90")) {
  check_wgmma_forwards({4, 5});
}

TEST_CASE(
    "kernels/attention: the wgmma backward (v2, v3's warp-specialised dK/dV, v4's atomic dQ) "
    "matches the float64 composed path" *
    doctest::test_suite("cuda_sm90")) {
  const std::vector<Shape4> shapes = {{2, 3, 1, 1, 64},     {2, 3, 7, 7, 64},
                                      {2, 3, 127, 127, 64}, {1, 2, 300, 300, 64},
                                      {2, 3, 127, 300, 64}, {2, 2, 300, 127, 64}};
  uint64_t seed = 1301;
  for (int version : {2, 3, 4})
    for (int64_t d : {64, 128})
      for (Shape4 s : shapes)
        for (bool causal : {false, true}) {
          s.d = d;
          const bool bthd = (seed / 4) % 2 == 0;
          INFO("version=", version, " B=", s.b, " H=", s.h, " Tq=", s.tq, " Tk=", s.tk, " D=", s.d,
               " causal=", causal, " bthd=", bthd);
          const Result r = run_case(s, causal, bthd, seed += 4, 0, 0, version);
          if (version == 4) {  // the atomic mode's gradients
            CHECK(r.dq <= 1e-2);
            CHECK(r.dk <= 1e-2);
            CHECK(r.dv <= 1e-2);
          }
          CHECK(r.dq_det <= 1e-2);
          CHECK(r.dk_det <= 1e-2);
          CHECK(r.dv_det <= 1e-2);
          CHECK(r.det_same);
        }
  // Through the switch that makes it the default (EMBER_ATTENTION_BWD_V2, on unless 0).
  Result r;
  {
    ember::testing::SwitchGuard guard(cuda::attention_backward_v2, cuda::set_attention_backward_v2);
    cuda::set_attention_backward_v2(true);
    r = run_case({2, 3, 300, 300, 64}, true, true, 77);
  }
  CHECK(r.dq_det <= 1e-2);
  CHECK(r.dk_det <= 1e-2);
  CHECK(r.dv_det <= 1e-2);
}

TEST_CASE("kernels/attention: the refusals name the problem" * doctest::test_suite("cuda")) {
  CHECK(cuda::attention_supported(DType::BFloat16, 64));
  CHECK(cuda::attention_supported(DType::BFloat16, 128));
  CHECK_FALSE(cuda::attention_supported(DType::BFloat16, 96));
  CHECK_FALSE(cuda::attention_supported(DType::Float32, 64));
  Tensor x = zeros({1, 1, 8, 64}, TensorOptions(kCUDA).dtype(kBFloat16));
  Tensor lse = zeros({1, 1, 8}, TensorOptions(kCUDA).dtype(kFloat32));
  cuda::AttentionProblem p;
  p.batch = 1, p.heads = 1, p.q_len = 8, p.kv_len = 8, p.head_dim = 64, p.scale = 0.125f;
  auto fwd = [&](cuda::AttentionProblem pp, cuda::AttentionInput qi) {
    return error_of([&] {
      cuda::launch_attention_forward(pp, qi, in(x), in(x), out(x), lse.data_ptr<float>(),
                                     cuda::current_stream(0));
    });
  };
  cuda::AttentionProblem bad_d = p;
  bad_d.head_dim = 96;
  CHECK(contains(fwd(bad_d, in(x)), "head_dim 64 or 128"));
  cuda::AttentionProblem bad_t = p;
  bad_t.dtype = DType::Float32;
  CHECK(contains(fwd(bad_t, in(x)), "bfloat16 only"));
  cuda::AttentionInput odd = in(x);
  odd.stride_t = 60;
  CHECK(contains(fwd(p, odd), "multiples of 8"));
  cuda::AttentionInput shifted = in(x);
  shifted.data = static_cast<const char*>(shifted.data) + 2;
  CHECK(contains(fwd(p, shifted), "16-byte aligned"));
  // Version 4 reads through TMA, which takes no broadcast (0) stride of a dimension longer
  // than 1; a dimension of 1 may have any.
  cuda::AttentionInput shared_head = in(x);
  shared_head.stride_h = 0;
  cuda::AttentionProblem two_heads = p;
  two_heads.heads = 2;
  CHECK(cuda::attention_forward_ws_takes(p, in(x), in(x), in(x)));
  CHECK(cuda::attention_forward_ws_takes(p, shared_head, shared_head, in(x)));
  CHECK_FALSE(cuda::attention_forward_ws_takes(two_heads, in(x), shared_head, in(x)));
  CHECK_FALSE(cuda::attention_forward_ws_takes(two_heads, in(x), in(x), shared_head));
  CHECK_FALSE(cuda::attention_forward_ws_takes(two_heads, shared_head, in(x), in(x)));
  cuda::AttentionProblem d128 = p;
  d128.head_dim = 128;
  CHECK(contains(error_of([&] {
                   cuda::launch_attention_forward_sm90_ws(
                       d128, in(x), in(x), in(x), out(x), lse.data_ptr<float>(),
                       cuda::current_stream(0), 128, true, false, 3);
                 }),
                 "consumers 3 (2, or 3 at head dim 64)"));
  CHECK(cuda::attention_backward_ws_takes(p, in(x), in(x), in(x), in(x)));
  CHECK(cuda::attention_backward_ws_takes(p, shared_head, in(x), in(x), shared_head));
  CHECK_FALSE(cuda::attention_backward_ws_takes(two_heads, in(x), in(x), in(x), shared_head));
  CHECK_FALSE(cuda::attention_backward_ws_takes(two_heads, in(x), in(x), shared_head, in(x)));
  CHECK(contains(error_of([&] {
                   cuda::launch_attention_backward(p, in(x), in(x), in(x), in(x), in(x),
                                                   lse.data_ptr<float>(), out(x), out(x), out(x),
                                                   false, nullptr, 0, cuda::current_stream(0));
                 }),
                 "workspace"));
  cuda::AttentionTuning v2;
  v2.backward_version = 2;
  const size_t ws_bytes = cuda::attention_backward_workspace_bytes(p, false);
  Tensor ws =
      empty({static_cast<int64_t>(ws_bytes / 4 + 64)}, TensorOptions(kCUDA).dtype(kFloat32));
  CHECK(contains(error_of([&] {
                   cuda::launch_attention_backward(
                       p, in(x), in(x), in(x), in(x), in(x), lse.data_ptr<float>(), out(x), out(x),
                       out(x), false, ws.raw_data(), ws_bytes, cuda::current_stream(0), v2);
                 }),
                 "backward versions 2 and 3 are deterministic"));
  v2.backward_version = 4;
  CHECK(contains(error_of([&] {
                   cuda::launch_attention_backward(
                       p, in(x), in(x), in(x), in(x), in(x), lse.data_ptr<float>(), out(x), out(x),
                       out(x), true, ws.raw_data(), ws_bytes, cuda::current_stream(0), v2);
                 }),
                 "backward version 4 is the atomic mode"));
  v2.backward_version = 5;
  CHECK(contains(error_of([&] {
                   cuda::launch_attention_backward(
                       p, in(x), in(x), in(x), in(x), in(x), lse.data_ptr<float>(), out(x), out(x),
                       out(x), true, ws.raw_data(), ws_bytes, cuda::current_stream(0), v2);
                 }),
                 "backward_version 5"));
}

TEST_CASE("kernels/attention: EMBER_ATTENTION_FWD_VERSION's setter picks the forward" *
          doctest::test_suite("cuda_sm90")) {
  ember::testing::SwitchGuard guard(cuda::attention_forward_version,
                                    cuda::set_attention_forward_version);
  CHECK(contains(error_of([] { cuda::set_attention_forward_version(7); }), "version 7"));
  // Head dim 64 with the causal mask: the launcher's own choice there is version 2; version
  // 4 asked through the switch gives version 4's bits (launched directly), not version 2's.
  const Shape4 s{2, 3, 300, 300, 64};
  Tensor q = make_storage(s.b, s.h, s.tq, s.d, false, 5).to(kCUDA, kBFloat16);
  Tensor k = make_storage(s.b, s.h, s.tk, s.d, false, 6).to(kCUDA, kBFloat16);
  Tensor v = make_storage(s.b, s.h, s.tk, s.d, false, 7).to(kCUDA, kBFloat16);
  cuda::AttentionProblem prob;
  prob.dtype = DType::BFloat16;
  prob.batch = s.b, prob.heads = s.h, prob.q_len = s.tq, prob.kv_len = s.tk, prob.head_dim = s.d;
  prob.scale = 0.125f;
  prob.causal = true;
  cudaStream_t stream = cuda::current_stream(0);
  auto run = [&](auto launch) {
    Tensor o = full(q.sizes(), kNaN, TensorOptions(kCUDA).dtype(kBFloat16));
    Tensor lse = full({s.b, s.h, s.tq}, kNaN, TensorOptions(kCUDA).dtype(kFloat32));
    launch(o, lse);
    return o.to(kFloat32).to(kCPU).to_vector<float>();
  };
  const std::vector<float> v4 = run([&](Tensor& o, Tensor& lse) {
    cuda::launch_attention_forward_sm90_ws(prob, in(q), in(k), in(v), out(o), lse.data_ptr<float>(),
                                           stream, 128, true, false, 2);
  });
  const std::vector<float> v2 = run([&](Tensor& o, Tensor& lse) {
    cuda::launch_attention_forward_sm90(prob, in(q), in(k), in(v), out(o), lse.data_ptr<float>(),
                                        stream, 64, false);
  });
  auto through_switch = [&](int version) {
    cuda::set_attention_forward_version(version);
    return run([&](Tensor& o, Tensor& lse) {
      cuda::launch_attention_forward(prob, in(q), in(k), in(v), out(o), lse.data_ptr<float>(),
                                     stream);
    });
  };
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  REQUIRE_FALSE(same(v4, v2));  // else the check below could not tell them apart
  CHECK(same(through_switch(4), v4));
  CHECK(same(through_switch(0), v2));
  CHECK(same(through_switch(2), v2));
}
