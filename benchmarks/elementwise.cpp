// bench_elementwise: the element-wise work of GPT-2's training step, at its shapes
// (B 16, T 1024, C 768: N = 12,582,912 elements), as kernel_census ranks it: the
// residual add (float32 + float32, and float32 + bfloat16 read in place), the
// autocast casts both ways, GELU's backward in bfloat16 over (B, T, 4C), a head
// split's strided copy (B, H, T, D) -> (B, T, H, D) and a gradient added into a
// slice of (B, T, 3C). Each is timed with the strided kernels and with the vector
// kernels (EMBER_ELEMENTWISE_VECTORS), alternating rep by rep in this process, as
// GB/s counting each operand once and as a fraction of a device-to-device copy of
// N float32 in the same run. Every path is checked first against the CPU (the
// exact ops bit for bit, GELU's backward within bfloat16's 1e-2); a failed check
// prints no row and exits non-zero. benchmarks/peer_pytorch.py --only elementwise
// times PyTorch on the same work.
//   bench_elementwise [--reps 5] [--json FILE]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/check.h"
#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"
#include "core/ops/layouts.h"
#include "cuda/kernels/elementwise.h"

using namespace ember;

namespace {

constexpr int64_t kB = 16, kT = 1024, kC = 768, kH = 12, kD = 64, kN = kB * kT * kC;

struct Case {
  const char* name;
  const char* dtype;
  double bytes;                  // each operand once
  std::function<void()> run;     // the timed work, on the current stream
  std::function<Tensor()> out;   // its result after run()
  std::function<Tensor()> want;  // the CPU's
  double tol;                    // 0: bit for bit
};

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.to(kCPU).contiguous(), cb = b.to(kCPU).contiguous();
  return ca.sizes() == cb.sizes() && ca.dtype() == cb.dtype() &&
         std::memcmp(ca.raw_data(), cb.raw_data(),
                     static_cast<size_t>(ca.numel()) * element_size(ca.dtype())) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
      if (reps < 1) {
        std::fprintf(stderr, "bench_elementwise: --reps must be >= 1\n");
        return 2;
      }
    } else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      ++i;
    } else {
      std::fprintf(stderr, "bench_elementwise: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (!bench::have_gpu("bench_elementwise")) return 0;
  bench::Table table("element-wise: GPT-2's step, B 16 x T 1024 x C 768");
  const double copy_gbs = bench::copy_bandwidth_gbs(table, kN, "16x1024x768", 100);

  Generator gen(3);
  const TensorOptions f32 = TensorOptions(kFloat32).device(kCUDA);
  const Tensor x = randn({kB, kT, kC}, f32, &gen), y = randn({kB, kT, kC}, f32, &gen);
  const Tensor h = randn({kB, kT, kC}, f32, &gen).to(kBFloat16);
  const Tensor g4 = randn({kB, kT, 4 * kC}, f32, &gen).to(kBFloat16);
  const Tensor pre4 = randn({kB, kT, 4 * kC}, f32, &gen).to(kBFloat16);
  const Tensor heads = randn({kB, kH, kT, kD}, f32, &gen).to(kBFloat16);
  Tensor qkv_sum = randn({kB, kT, 3 * kC}, f32, &gen).to(kBFloat16);
  const Tensor qkv_start = qkv_sum.clone();

  Tensor out_add, out_mixed, out_f2b, out_b2f, out_gelu, out_heads;
  Tensor gelu_out = empty({kB, kT, 4 * kC}, TensorOptions(kBFloat16).device(kCUDA));
  const kernels::KernelTable& k = kernels::kernels_for(Device(kCUDA));
  auto gelu_backward = [&](const Tensor& g, const Tensor& s, const Tensor& o) {
    const Shape& shape = o.sizes();
    k.unary_backward({o.device(), UnaryOp::Gelu, o.dtype(), g.storage()->data(),
                      detail::layout_of(g, shape, "bench"), s.storage()->data(),
                      detail::layout_of(s, shape, "bench"), o.storage()->data(),
                      detail::layout_of(o, shape, "bench"), o.numel(), 0.0});
  };
  const double n = static_cast<double>(kN);
  std::vector<Case> cases = {
      {"add", "f32", 12 * n, [&] { out_add = add(x, y); }, [&] { return out_add; },
       [&] { return add(x.to(kCPU), y.to(kCPU)); }, 0},
      {"add f32+bf16 (residual)", "mixed", 10 * n, [&] { out_mixed = add(x, h); },
       [&] { return out_mixed; }, [&] { return add(x.to(kCPU), h.to(kCPU).to(kFloat32)); }, 0},
      {"cast f32->bf16", "f32", 6 * n, [&] { out_f2b = x.to(kBFloat16); }, [&] { return out_f2b; },
       [&] { return x.to(kCPU).to(kBFloat16); }, 0},
      {"cast bf16->f32", "bf16", 6 * n, [&] { out_b2f = h.to(kFloat32); }, [&] { return out_b2f; },
       [&] { return h.to(kCPU).to(kFloat32); }, 0},
      {"gelu backward (B,T,4C)", "bf16", 24 * n, [&] { gelu_backward(g4, pre4, gelu_out); },
       [&] { return gelu_out; },
       [&] {
         Tensor p = pre4.to(kCPU).to(kFloat64).set_requires_grad(true);
         return grad({gelu(p)}, {p}, {g4.to(kCPU).to(kFloat64)})[0];
       },
       1e-2},
      {"heads (B,H,T,D)->(B,T,H,D)", "bf16", 4 * n,
       [&] { out_heads = contiguous(transpose(heads, 1, 2)); }, [&] { return out_heads; },
       [&] { return contiguous(transpose(heads.to(kCPU), 1, 2)); }, 0},
      {"grad into a slice of (B,T,3C)", "bf16", 6 * n,
       [&] {
         Tensor part = slice(qkv_sum, 2, kC, 2 * kC);
         part.add_(h);
       },
       [&] { return slice(qkv_sum, 2, kC, 2 * kC); },
       [&] { return add(slice(qkv_start.to(kCPU), 2, kC, 2 * kC), h.to(kCPU)); }, 0}};

  // Checks: each case once with each setting, from its starting values.
  for (Case& c : cases)
    for (bool vectors : {false, true}) {
      cuda::set_elementwise_vectors(vectors);
      if (std::strncmp(c.name, "grad into", 9) == 0) copy_(qkv_sum, qkv_start);
      c.run();
      EMBER_CUDA_CHECK(cudaDeviceSynchronize());
      const Tensor got = c.out(), want = c.want();
      const bool ok = c.tol == 0 ? same_bits(got, want)
                                 : bench::rel_err_on_device(got, want.to(kCUDA)) <= c.tol;
      std::printf("validate %s (%s, vectors %s): %s\n", c.name, c.dtype, vectors ? "on" : "off",
                  ok ? "ok" : "FAILED");
      if (!ok) {
        std::printf("VALIDATION FAILED\n");
        return 1;
      }
    }

  // Timing: per case, `reps` rounds of (strided, vectors), each the median of 50 runs.
  for (Case& c : cases) {
    std::vector<double> ms[2];
    for (int r = 0; r < reps; ++r)
      for (int v = 0; v < 2; ++v) {
        cuda::set_elementwise_vectors(v == 1);
        ms[v].push_back(bench::median_ms(c.run, 5, 50));
      }
    for (int v = 0; v < 2; ++v) {
      const bench::Spread s = bench::spread_of(ms[v]);
      const double gbs = c.bytes / s.median / 1e6;
      char note[96];
      std::snprintf(note, sizeof note, "%.2f of copy", gbs / copy_gbs);
      table.add({c.name, c.dtype, "16x1024x768", v == 1 ? "ours-vec" : "ours", s.median, gbs,
                 "GB/s", note, s.min, s.max});
    }
  }
  cuda::set_elementwise_vectors(false);
  table.write_json(bench::json_path(argc, argv));
  return 0;
}
