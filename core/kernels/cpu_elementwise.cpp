// CPU element-wise kernels: plain loops computing in double, the reference every
// CUDA kernel is tested against. The formulas are core/base/elementwise_ops.h's.
// The registered kernels try the fast path (cpu_elementwise_fast.cpp) first and
// fall back to these generic strided loops.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/base/error.h"
#include "core/base/random.h"
#include "core/kernels/cpu_elementwise.h"
#include "core/kernels/cpu_loops.h"
#include "core/kernels/cpu_parallel.h"
#include "core/kernels/registration.h"

namespace ember::kernels {

namespace cpu {

using ember::detail::dispatch_cpu;
using ember::detail::load_as_double;
using ember::detail::store_from_double;

namespace {

// Output of the input's storage type, or bool for the comparisons.
template <typename F>
void dispatch_out(DType in, DType out, F&& f) {
  dispatch_cpu(in, [&](auto tag) {
    using S = decltype(tag);
    if (out == DType::Bool)
      f(S{}, bool{});
    else
      f(S{}, S{});
  });
}

}  // namespace

// int64 operands of the ops that keep integers and of the comparisons compute in
// int64 (elementwise_ops.h): exact over the whole range.
void unary_int64(const UnaryArgs& a) {
  const int64_t* x = static_cast<const int64_t*>(a.x);
  auto run = [&](auto* y) {
    using O = std::remove_pointer_t<decltype(y)>;
    for (int64_t i = 0; i < a.n; ++i)
      y[a.yl.offset_of(i)] = static_cast<O>(unary_forward_int64(a.op, x[a.xl.offset_of(i)], a.a));
  };
  if (a.out_dtype == DType::Bool)
    run(static_cast<bool*>(a.y));
  else
    run(static_cast<int64_t*>(a.y));
}

void binary_int64(const BinaryArgs& a) {
  const int64_t* x = static_cast<const int64_t*>(a.x);
  const int64_t* y = static_cast<const int64_t*>(a.y);
  auto run = [&](auto* o) {
    using O = std::remove_pointer_t<decltype(o)>;
    for (int64_t i = 0; i < a.n; ++i)
      o[a.ol.offset_of(i)] = static_cast<O>(
          binary_forward_int64(a.op, x[a.xl.offset_of(i)], y[a.yl.offset_of(i)], a.a));
  };
  if (a.out_dtype == DType::Bool)
    run(static_cast<bool*>(a.out));
  else
    run(static_cast<int64_t*>(a.out));
}

void unary_generic(const UnaryArgs& a) {
  if (a.dtype == DType::Int64 && computes_in_int64(a.op)) return unary_int64(a);
  dispatch_out(a.dtype, a.out_dtype, [&](auto in_tag, auto out_tag) {
    using S = decltype(in_tag);
    using O = decltype(out_tag);
    const S* x = static_cast<const S*>(a.x);
    O* y = static_cast<O*>(a.y);
    for (int64_t i = 0; i < a.n; ++i)
      store_from_double(y + a.yl.offset_of(i),
                        unary_forward<double>(a.op, load_as_double(x + a.xl.offset_of(i)), a.a));
  });
}

void unary_backward_generic(const UnaryBackwardArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* g = static_cast<const S*>(a.g);
    const S* s = static_cast<const S*>(a.s);
    S* out = static_cast<S*>(a.out);
    for (int64_t i = 0; i < a.n; ++i)
      store_from_double(out + a.ol.offset_of(i),
                        ember::unary_backward<double>(a.op, load_as_double(g + a.gl.offset_of(i)),
                                                      load_as_double(s + a.sl.offset_of(i)), a.a));
  });
}

void binary_generic(const BinaryArgs& a) {
  if (a.dtype == DType::Int64 && computes_in_int64(a.op)) return binary_int64(a);
  dispatch_out(a.dtype, a.out_dtype, [&](auto in_tag, auto out_tag) {
    using S = decltype(in_tag);
    using O = decltype(out_tag);
    const S* x = static_cast<const S*>(a.x);
    const S* y = static_cast<const S*>(a.y);
    O* o = static_cast<O*>(a.out);
    for (int64_t i = 0; i < a.n; ++i)
      store_from_double(o + a.ol.offset_of(i),
                        binary_forward<double>(a.op, load_as_double(x + a.xl.offset_of(i)),
                                               load_as_double(y + a.yl.offset_of(i)), a.a));
  });
}

// One operand float32 and the other bfloat16 (BinaryArgs::x_bf16, y_bf16): each
// read as its own type, computed in double as binary_generic, out float32 or bool.
void binary_mixed_generic(const BinaryArgs& a) {
  EMBER_CHECK(a.dtype == DType::Float32 && a.x_bf16 != a.y_bf16, binary_name(a.op),
              ": a bfloat16 operand is read as float32 beside one float32 operand only");
  auto run = [&](const auto* x, const auto* y) {
    auto body = [&](auto* o) {
      for (int64_t i = 0; i < a.n; ++i)
        store_from_double(o + a.ol.offset_of(i),
                          binary_forward<double>(a.op, load_as_double(x + a.xl.offset_of(i)),
                                                 load_as_double(y + a.yl.offset_of(i)), a.a));
    };
    if (a.out_dtype == DType::Bool)
      body(static_cast<bool*>(a.out));
    else
      body(static_cast<float*>(a.out));
  };
  if (a.x_bf16)
    run(static_cast<const BFloat16*>(a.x), static_cast<const float*>(a.y));
  else
    run(static_cast<const float*>(a.x), static_cast<const BFloat16*>(a.y));
}

void binary_backward_generic(const BinaryBackwardArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* g = static_cast<const S*>(a.g);
    const S* x = static_cast<const S*>(a.x);
    const S* y = static_cast<const S*>(a.y);
    S* o = static_cast<S*>(a.out);
    for (int64_t i = 0; i < a.n; ++i)
      store_from_double(
          o + a.ol.offset_of(i),
          ember::binary_backward<double>(a.op, a.side, load_as_double(g + a.gl.offset_of(i)),
                                         load_as_double(x + a.xl.offset_of(i)),
                                         load_as_double(y + a.yl.offset_of(i)), a.a));
  });
}

void cast_generic(const CastArgs& a) {
  if (a.xl.contiguous && a.yl.contiguous && a.from == a.to) {
    std::memmove(
        static_cast<char*>(a.y) + a.yl.offset * static_cast<int64_t>(element_size(a.to)),
        static_cast<const char*>(a.x) + a.xl.offset * static_cast<int64_t>(element_size(a.from)),
        static_cast<size_t>(a.n) * element_size(a.to));
    return;
  }
  if (a.from == a.to) {  // a strided copy: the elements as they are (int64 is not a double)
    dispatch_cpu(a.from, [&](auto tag) {
      using S = decltype(tag);
      const S* x = static_cast<const S*>(a.x);
      S* y = static_cast<S*>(a.y);
      for (int64_t i = 0; i < a.n; ++i) y[a.yl.offset_of(i)] = x[a.xl.offset_of(i)];
    });
    return;
  }
  dispatch_cpu(a.from, [&](auto stag) {
    using SS = decltype(stag);
    dispatch_cpu(a.to, [&](auto dtag) {
      using DS = decltype(dtag);
      const SS* x = static_cast<const SS*>(a.x);
      DS* y = static_cast<DS*>(a.y);
      for (int64_t i = 0; i < a.n; ++i)
        store_from_double(y + a.yl.offset_of(i), load_as_double(x + a.xl.offset_of(i)));
    });
  });
}

void fill_generic(const FillArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    S* y = static_cast<S*>(a.y);
    if (a.step != 0.0) {
      for (int64_t i = 0; i < a.n; ++i)
        store_from_double(y + a.yl.offset_of(i), std::fma(a.step, static_cast<double>(i), a.value));
      return;
    }
    S v{};
    store_from_double(&v, a.value);
    for (int64_t i = 0; i < a.n; ++i) y[a.yl.offset_of(i)] = v;
  });
}

void where_generic(const WhereArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const bool* c = static_cast<const bool*>(a.cond);
    const S* x = static_cast<const S*>(a.a);
    const S* y = static_cast<const S*>(a.b);
    S* o = static_cast<S*>(a.out);
    for (int64_t i = 0; i < a.n; ++i)
      o[a.ol.offset_of(i)] = c[a.cl.offset_of(i)] ? x[a.al.offset_of(i)] : y[a.bl.offset_of(i)];
  });
}

}  // namespace cpu

namespace {

using ember::detail::dispatch_cpu;
using ember::detail::store_from_double;

void unary(const UnaryArgs& a) {
  if (cpu::fast_paths() && cpu::unary_float_approx(a)) return;
  if (!cpu::unary_fast(a)) cpu::unary_generic(a);
}
void unary_backward(const UnaryBackwardArgs& a) {
  if (cpu::fast_paths() && cpu::unary_backward_float_approx(a)) return;
  if (!cpu::unary_backward_fast(a)) cpu::unary_backward_generic(a);
}
void binary(const BinaryArgs& a) {
  if (a.x_bf16 || a.y_bf16) [[unlikely]]
    return cpu::binary_mixed_generic(a);
  if (!cpu::binary_fast(a)) cpu::binary_generic(a);
}
void binary_backward(const BinaryBackwardArgs& a) {
  if (!cpu::binary_backward_fast(a)) cpu::binary_backward_generic(a);
}
void cast(const CastArgs& a) {
  if (!cpu::cast_fast(a)) cpu::cast_generic(a);
}
void fill(const FillArgs& a) {
  if (!cpu::fill_fast(a)) cpu::fill_generic(a);
}

void where(const WhereArgs& a) {
  if (!cpu::where_fast(a)) cpu::where_generic(a);
}

void random(const RandomArgs& a) {
  EMBER_CHECK(a.offset_base == nullptr, "random: the CPU draws no counters from device memory");
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    S* p = static_cast<S*>(a.y);
    for (int64_t i = 0; i < a.n; ++i) {
      const uint64_t c = a.offset + static_cast<uint64_t>(i);
      double v = a.integer  ? a.p0 + std::floor((a.p1 - a.p0) * random_uniform(a.seed, c))
                 : a.normal ? a.p0 + a.p1 * random_normal(a.seed, c)
                            : a.p0 + (a.p1 - a.p0) * random_uniform(a.seed, c);
      store_from_double(p + i, v);
    }
  });
}

// Element-wise, so split over the pool freely: the same values at any thread count.
// Y: X, or bfloat16 beside float32 X (each x rounded to Y first, as a cast then dropout).
template <typename X, typename Y>
void dropout_loop(const DropoutArgs& a) {
  using C = std::conditional_t<std::is_same_v<Y, double>, double, float>;
  const X* x = static_cast<const X*>(a.x);
  Y* y = static_cast<Y*>(a.y);
  const C scale = static_cast<C>(a.scale);
  const uint32_t key = dropout_key(a.seed);  // dropout_keeps's seed part, once
  auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const bool keep = dropout_bits_keyed(key, a.offset + static_cast<uint64_t>(i)) >= a.threshold;
      y[i] = Y(keep ? static_cast<C>(Y(x[i])) * scale : C(0));
    }
  };
  if (cpu::fast_paths())
    cpu::parallel_for(a.n, cpu::kElementwiseGrain, run);
  else
    run(0, a.n);
}

void dropout(const DropoutArgs& a) {
  EMBER_CHECK(a.offset_base == nullptr, "dropout: the CPU draws no counters from device memory");
  if (a.y_bf16) {
    EMBER_CHECK(a.dtype == DType::Float32,
                "dropout: a bfloat16 result is written from float32 input only, got ", a.dtype);
    return dropout_loop<float, BFloat16>(a);
  }
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (std::is_floating_point_v<S> || std::is_same_v<S, BFloat16>)
      dropout_loop<S, S>(a);
    else
      EMBER_CHECK(false, "dropout: takes float32, float64 or bfloat16, got ", a.dtype);
  });
}

// Sorted by (key, index): the order a stable sort by key gives, which is what the
// CUDA radix sort produces.
void randperm(const RandpermArgs& a) {
  std::vector<std::pair<uint64_t, int64_t>> keyed(static_cast<size_t>(a.n));
  for (int64_t i = 0; i < a.n; ++i)
    keyed[static_cast<size_t>(i)] = {random_bits(a.seed, a.offset + static_cast<uint64_t>(i)), i};
  std::sort(keyed.begin(), keyed.end());
  for (int64_t i = 0; i < a.n; ++i) a.out[i] = keyed[static_cast<size_t>(i)].second;
}

size_t no_workspace(const ScatterQuery&) {
  return 0;
}

}  // namespace

void register_cpu_elementwise(KernelFamilies& t) {
  t.unary = &unary;
  t.unary_backward = &unary_backward;
  t.binary = &binary;
  t.binary_backward = &binary_backward;
  t.where = &where;
  t.cast = &cast;
  t.fill = &fill;
  t.random = &random;
  t.dropout = &dropout;
  t.randperm = &randperm;
  t.randperm_workspace_bytes = &no_workspace;
}

}  // namespace ember::kernels
