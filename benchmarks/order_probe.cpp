// bench_order_probe: is the gap between EMBER_GEMM=cublas and the default (auto)
// in bench_linear's TF32 8192x4096->4096 forward+backward (2.65 vs 2.93 ms in two
// runs) in the code, or in the order the two were measured? Both settings run the
// same cuBLASLt calls at this size (cuda/gemm_dispatch.cpp), and bench_linear
// always times cublas first and auto straight after. Here the same op is timed in
// blocks of 33 calls (bench_linear's 3 + 30) that alternate between the settings,
// starting with cublas and then with auto, back to back, and finally once each
// after two idle seconds. If the code differed, auto would be slower in every
// block; if the order (the GPU's clock under sustained tensor-core load) decides,
// a block's time follows its position, not its setting. Each block prints its UTC
// start and end, to be read beside compare.sh's gpu_clocks.csv (SM clock, power,
// throttle reasons every 500 ms). The op is checked first against float64 on the
// CPU (first rows of y and of d_w, TF32 threshold 1e-3), under each setting.
// Usage: bench_order_probe [--json FILE]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/check.h"
#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/blas.h"
#include "cuda/gemm_dispatch.h"

using namespace ember;

namespace {

using bench::f64;
using bench::rel_err;

void use(const char* setting) {
  if (std::string(setting) == "auto")
    unsetenv("EMBER_GEMM");
  else
    setenv("EMBER_GEMM", setting, 1);
}

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t s = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_order_probe")) return 0;
  const int64_t m = 8192, k = 4096, n = 4096;
  cuda::set_allow_tf32(true);
  manual_seed(5);
  const TensorOptions o = TensorOptions(kFloat32).device(kCUDA);
  Tensor x = randn({m, k}, o), w = mul(randn({n, k}, o), 1.0 / std::sqrt(double(k)));
  Tensor b = randn({n}, o), dy = randn({m, n}, o);
  Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true);
  Tensor br = b.detach().set_requires_grad(true);
  auto step = [&] {
    Tensor y = linear(xr, wr, br);
    std::vector<Tensor> g = grad({y}, {xr, wr, br}, {dy});
  };
  // The second setting: auto where the rule picks cuBLASLt at this size (as when
  // bench_linear measured the gap); should the rule ever pick another GEMM here,
  // cublas against itself, which asks the same question.
  use("auto");
  const char* second = cuda::choose_linear_backend(cuda::LinearProduct::Forward, kFloat32, m, n,
                                                   k) == cuda::GemmBackend::Cublas
                           ? "auto"
                           : "cublas";
  // Both settings compute the op right, through cuBLASLt.
  for (const char* setting : {"cublas", second}) {
    use(setting);
    const char* picked = cuda::to_string(
        cuda::choose_linear_backend(cuda::LinearProduct::Forward, kFloat32, m, n, k));
    Tensor y = linear(xr, wr, br);
    std::vector<Tensor> g = grad({y}, {xr, wr, br}, {dy});
    NoGradGuard no_grad;
    const Tensor x8 = f64(x.slice(0, 0, 8)), wt = f64(w).t().contiguous();
    const double ey = rel_err(y.slice(0, 0, 8), matmul(x8, wt) + f64(b));
    const double ew = rel_err(g[1].slice(0, 0, 8), matmul(f64(dy.slice(1, 0, 8)).t(), f64(x)));
    const bool ok = ey <= 1e-3 && ew <= 1e-3 && std::string(picked) == "cublas";
    std::printf(
        "validate EMBER_GEMM=%s: picks %s; y rel err %.2e, d_w rel err %.2e (limit 1e-3)%s\n",
        setting, picked, ey, ew, ok ? "" : "  FAILED");
    if (!ok) return 1;
  }
  bench::Table table("order probe: TF32 Linear fwd+bwd 8192x4096->4096, blocks of 33 calls");
  std::vector<double> by_setting[2];
  // which: 0 the first setting (cublas), 1 the second.
  auto block = [&](int index, int which, const char* when) {
    const char* setting = which == 0 ? "cublas" : second;
    use(setting);
    const std::string start = utc_now();
    const bench::Spread ms = bench::spread_ms(step, 3, 30);
    const std::string note = std::string(when) + " " + start + "-" + utc_now() + " UTC";
    table.add({"block " + std::to_string(index), "tf32", "8192x4096->4096",
               std::string(setting) + (which == 0 ? " (1st)" : " (2nd)"), ms.median,
               6.0 * m * n * k / ms.median / 1e9, "TF/s", note, ms.min, ms.max});
    by_setting[which].push_back(ms.median);
  };
  int index = 0;
  for (int i = 0; i < 6; ++i) block(++index, i % 2, "back to back");
  for (int i = 0; i < 6; ++i) block(++index, 1 - i % 2, "back to back");
  for (int which : {0, 1}) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    block(++index, which, "after 2 s idle");
  }
  const bench::Spread c = bench::spread_of(by_setting[0]), a = bench::spread_of(by_setting[1]);
  std::printf(
      "\ncublas blocks: median %.4f ms [%.4f-%.4f]; %s blocks: median %.4f ms [%.4f-%.4f]\n",
      c.median, c.min, c.max, second, a.median, a.min, a.max);
  std::printf(
      "%s / cublas: %.3f (same code: a ratio near 1, each block's time set by its position "
      "rather than its setting, means bench_linear's gap was the order of measurement)\n",
      second, a.median / c.median);
  unsetenv("EMBER_GEMM");
  cuda::set_allow_tf32(false);
  table.write_json(bench::json_path(argc, argv));
  return 0;
}
