// How far a correct TF32 or bf16 training step lands from fp32's, per element:
// bench_train_step's MLP (4 ReLU layers, a teacher's targets, MSE, one Adam step)
// emulated on the CPU at a smaller width, in float64 (the reference) and with each
// mode's rounding: fp32 (float accumulation), TF32 (GEMM operands rounded to 10
// mantissa bits; swap tf32() for truncation to see that case), bf16 autocast
// (operands and layer outputs rounded to bf16, float accumulation). Prints, per
// mode, the relative error of the loss, the output, each layer's weight gradient,
// and after one Adam step (lr 1e-3, 1e-4) of each layer's parameters (p) and update
// (u). benchmarks/NOTES.md ("Why bench_train_step checks the MLP op by op") quotes
// a run. Not part of the build:
//   g++ -O3 -march=native -o /tmp/precision_emulation tools/precision_emulation.cpp
//   /tmp/precision_emulation [width 1024] [batch 512]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
using V = std::vector<double>;
enum Mode { REF, F32, TF32, BF16 };
// TF32: round to nearest (even) at 10 mantissa bits; tf32_truncate drops the low 13
// bits instead (what some tensor-core paths do with unrounded fp32 inputs).
double tf32(double v) {
  float f = (float)v;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0xFFFu + ((u >> 13) & 1u)) & 0xFFFFE000u;
  std::memcpy(&f, &u, 4);
  return f;
}
[[maybe_unused]] double tf32_truncate(double v) {
  float f = (float)v;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u &= 0xFFFFE000u;
  std::memcpy(&f, &u, 4);
  return f;
}
double bf16(double v) {
  float f = (float)v;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t r = ((u >> 16) & 1) + 0x7FFF;
  u = (u + r) & 0xFFFF0000u;
  std::memcpy(&f, &u, 4);
  return f;
}
double f32(double v) {
  return (float)v;
}
int W = 1024, B = 512, L = 4;
// C(m,n) = A(m,k) * B^T where Bm is (n,k): operands rounded per mode, accumulate in float (or
// double for REF)
V gemm_nt(const V& A, const V& Bm, int m, int n, int k, Mode md) {
  V a(A), b(Bm);
  if (md == TF32) {
    for (auto& x : a) x = tf32(x);
    for (auto& x : b) x = tf32(x);
  }
  if (md == BF16) {
    for (auto& x : a) x = bf16(x);
    for (auto& x : b) x = bf16(x);
  }
  V c((size_t)m * n);
  if (md == REF) {
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) {
        double s = 0;
        for (int p = 0; p < k; p++) s += a[(size_t)i * k + p] * b[(size_t)j * k + p];
        c[(size_t)i * n + j] = s;
      }
  } else {
    std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) {
        float s = 0;
        const float* x = &af[(size_t)i * k];
        const float* y = &bf[(size_t)j * k];
        for (int p = 0; p < k; p++) s += x[p] * y[p];
        c[(size_t)i * n + j] = s;
      }
  }
  return c;
}
V transpose(const V& A, int r, int c) {
  V t((size_t)r * c);
  for (int i = 0; i < r; i++)
    for (int j = 0; j < c; j++) t[(size_t)j * r + i] = A[(size_t)i * c + j];
  return t;
}
double out_round(double v, Mode md) {
  return md == BF16 ? bf16(v) : md == REF ? v : f32(v);
}
struct Net {
  std::vector<V> w, b;
};
Net make(unsigned seed) {
  std::mt19937 g(seed);
  Net n;
  double bound = 1.0 / std::sqrt(W);
  std::uniform_real_distribution<double> u(-bound, bound);
  for (int l = 0; l < L; l++) {
    V w((size_t)W * W), b(W);
    for (auto& x : w) x = (float)u(g);
    for (auto& x : b) x = (float)u(g);
    n.w.push_back(w);
    n.b.push_back(b);
  }
  return n;
}
struct Res {
  double loss;
  std::vector<V> gw, gb;
  V out;
};
Res run(const Net& n, const V& x, const V& y, Mode md) {
  std::vector<V> acts{ md==BF16? [&]{V t(x); for(auto&v:t)v=bf16(v); return t;}() : x };
  for (int l = 0; l < L; l++) {
    V pre = gemm_nt(acts.back(), n.w[l], B, W, W, md);
    for (int i = 0; i < B; i++)
      for (int j = 0; j < W; j++) {
        double v = pre[(size_t)i * W + j] + (md == BF16 ? bf16(n.b[l][j]) : n.b[l][j]);
        if (l < L - 1 && v < 0) v = 0;
        pre[(size_t)i * W + j] = out_round(v, md);
      }
    acts.push_back(pre);
  }
  const V& o = acts.back();
  double loss = 0;
  V d((size_t)B * W);
  for (size_t i = 0; i < o.size(); i++) {
    double e = o[i] - y[i];
    loss += e * e;
    d[i] = 2 * e / (double)o.size();
  }
  loss /= (double)o.size();
  if (md != REF) {
    loss = (float)loss;
    for (auto& v : d) v = out_round(f32(v), md);
  }
  Res r;
  r.loss = loss;
  r.out = o;
  r.gw.resize(L);
  r.gb.resize(L);
  for (int l = L - 1; l >= 0; l--) {
    if (l < L - 1)
      for (size_t i = 0; i < d.size(); i++)
        if (acts[l + 1][i] <= 0) d[i] = 0;  // relu' from y
    V dT = transpose(d, B, W), xT = transpose(acts[l], B, W);
    V gw = gemm_nt(dT, xT, W, W, B, md);
    for (auto& v : gw) v = out_round(v, md);
    r.gw[l] = gw;  // dW = d^T x (out,in)
    V gb(W, 0);
    for (int i = 0; i < B; i++)
      for (int j = 0; j < W; j++) gb[j] += d[(size_t)i * W + j];
    for (auto& v : gb) v = out_round(v, md);
    r.gb[l] = gb;
    if (l > 0) {
      V wT = transpose(n.w[l], W, W);
      V dx = gemm_nt(d, wT, B, W, W, md);
      for (auto& v : dx) v = out_round(v, md);
      d = dx;
    }
  }
  return r;
}
double rel(const V& a, const V& b) {
  double n = 0, dd = 0;
  for (size_t i = 0; i < a.size(); i++) {
    n += (a[i] - b[i]) * (a[i] - b[i]);
    dd += b[i] * b[i];
  }
  return std::sqrt(n / dd);
}
int main(int argc, char** argv) {
  if (argc > 1) W = atoi(argv[1]);
  if (argc > 2) B = atoi(argv[2]);
  Net student = make(1), teacher = make(2);
  std::mt19937 g(3);
  std::normal_distribution<double> nd;
  V x((size_t)B * W);
  for (auto& v : x) v = (float)nd(g);
  // teacher targets in fp32
  V y;
  {
    V a = x;
    for (int l = 0; l < L; l++) {
      V pre = gemm_nt(a, teacher.w[l], B, W, W, F32);
      for (int i = 0; i < B; i++)
        for (int j = 0; j < W; j++) {
          double v = pre[(size_t)i * W + j] + teacher.b[l][j];
          if (l < L - 1 && v < 0) v = 0;
          pre[(size_t)i * W + j] = (float)v;
        }
      a = pre;
    }
    y = a;
  }
  double ys = 0;
  for (double v : y) ys += v * v;
  std::printf("W=%d B=%d mean(y^2)=%.3e\n", W, B, ys / y.size());
  Res ref = run(student, x, y, REF);
  std::printf("ref loss %.6e mean(out^2) %.3e\n", ref.loss, [&] {
    double s = 0;
    for (double v : ref.out) s += v * v;
    return s / ref.out.size();
  }());
  for (Mode md : {F32, TF32, BF16}) {
    Res r = run(student, x, y, md);
    const char* nm = md == F32 ? "f32" : md == TF32 ? "tf32" : "bf16";
    std::printf("%s: loss rel %.2e out rel %.2e", nm, std::fabs(r.loss - ref.loss) / ref.loss,
                rel(r.out, ref.out));
    for (int l = 0; l < L; l++) std::printf(" gw%d %.2e", l, rel(r.gw[l], ref.gw[l]));
    for (double lr : {1e-3, 1e-4})
      for (int l = 0; l < L; l++) {
        V p1 = student.w[l], q1 = student.w[l], u1(p1.size()), u2(p1.size());
        for (size_t i = 0; i < p1.size(); i++) {
          double a = r.gw[l][i], b = ref.gw[l][i];
          u1[i] = -lr * a / (std::fabs(a) + 1e-8);
          u2[i] = -lr * b / (std::fabs(b) + 1e-8);
          p1[i] += u1[i];
          q1[i] += u2[i];
        }
        std::printf(" lr%.0e:p%d %.2e u%d %.2e", lr, l, rel(p1, q1), l, rel(u1, u2));
      }
    for (int l = 0; l < L; l++) std::printf(" gb%d %.2e", l, rel(r.gb[l], ref.gb[l]));
    std::printf("\n");
  }
}
