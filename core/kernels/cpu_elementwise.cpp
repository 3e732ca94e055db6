// CPU element-wise kernels: plain loops computing in double, the reference every
// CUDA kernel is tested against. The formulas are core/base/elementwise_ops.h's.
#include <cstring>

#include "core/base/random.h"
#include "core/kernels/cpu_loops.h"
#include "core/kernels/registration.h"

namespace ember::kernels {

namespace {

using detail::dispatch_cpu;
using detail::load_as_double;
using detail::store_from_double;

void unary(const UnaryArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* x = static_cast<const S*>(a.x);
    S* y = static_cast<S*>(a.y);
    for (int64_t i = 0; i < a.n; ++i)
      store_from_double(y + a.yl.offset_of(i),
                        unary_forward<double>(a.op, load_as_double(x + a.xl.offset_of(i)), a.a));
  });
}

void unary_backward(const UnaryBackwardArgs& a) {
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

void binary(const BinaryArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* x = static_cast<const S*>(a.x);
    const S* y = static_cast<const S*>(a.y);
    S* o = static_cast<S*>(a.out);
    for (int64_t i = 0; i < a.n; ++i)
      store_from_double(o + a.ol.offset_of(i),
                        binary_forward<double>(a.op, load_as_double(x + a.xl.offset_of(i)),
                                               load_as_double(y + a.yl.offset_of(i)), a.a));
  });
}

void binary_backward(const BinaryBackwardArgs& a) {
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

void cast(const CastArgs& a) {
  if (a.xl.contiguous && a.yl.contiguous && a.from == a.to) {
    std::memmove(static_cast<char*>(a.y) + a.yl.offset * static_cast<int64_t>(element_size(a.to)),
                 static_cast<const char*>(a.x) + a.xl.offset * static_cast<int64_t>(element_size(a.from)),
                 static_cast<size_t>(a.n) * element_size(a.to));
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

void fill(const FillArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    S* y = static_cast<S*>(a.y);
    S v{};
    store_from_double(&v, a.value);
    for (int64_t i = 0; i < a.n; ++i) y[a.yl.offset_of(i)] = v;
  });
}

void random(const RandomArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    S* p = static_cast<S*>(a.y);
    for (int64_t i = 0; i < a.n; ++i) {
      const uint64_t c = a.offset + static_cast<uint64_t>(i);
      double v = a.normal ? a.p0 + a.p1 * random_normal(a.seed, c)
                          : a.p0 + (a.p1 - a.p0) * random_uniform(a.seed, c);
      store_from_double(p + i, v);
    }
  });
}

}  // namespace

void register_cpu_elementwise(KernelTable& t) {
  t.unary = &unary;
  t.unary_backward = &unary_backward;
  t.binary = &binary;
  t.binary_backward = &binary_backward;
  t.cast = &cast;
  t.fill = &fill;
  t.random = &random;
}

}  // namespace ember::kernels
