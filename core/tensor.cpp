#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <type_traits>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/device_services.h"
#include "core/kernel_table.h"
#include "core/kernels/cpu_loops.h"
#include "core/ops.h"

namespace ember {

namespace {

Tensor make_tensor(const Shape& sizes, DType dtype, Device device, const char* op) {
  OpSite site(op);  // names the allocation after the factory unless an op already did
  check_sizes(sizes, op);
  size_t nbytes = 0;
  EMBER_CHECK(
      !__builtin_mul_overflow(static_cast<size_t>(numel_of(sizes)), element_size(dtype), &nbytes),
      op, ": shape ", shape_str(sizes), " of ", dtype, " needs more bytes than size_t holds");
  kernels::kernels_for(device).hooks.check(device.index);  // check_device, inlined: every op
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  impl->storage = std::make_shared<Storage>(nbytes, device);
  return Tensor(std::move(impl));
}

AutogradMeta& autograd_meta(const Tensor& t) {
  TensorImpl& impl = t.impl();
  if (!impl.autograd) impl.autograd = std::make_unique<AutogradMeta>();
  return *impl.autograd;
}

// Copies contiguous bytes between any two devices; synchronises when the
// destination is the host. The device that is not the host does the copy.
void copy_bytes(void* dst, Device dd, const void* src, Device sd, size_t n) {
  const Device runner = dd.is_cpu() ? sd : dd;
  kernels::kernels_for(runner).copy_bytes({runner, dst, dd, src, sd, n});
}

}  // namespace

// ---------------------------------------------------------------- metadata

void Tensor::throw_undefined() {
  EMBER_FAIL("tensor is undefined (default-constructed or moved-from)");
}

int64_t Tensor::size(int64_t d) const {
  return impl().sizes[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  return impl().strides[wrap_dim(d, dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  const TensorImpl& t = impl();
  if (numel_of(t.sizes) == 0) return true;  // as PyTorch: no element is out of place
  int64_t expected = 1;
  for (size_t i = t.sizes.size(); i-- > 0;) {
    if (t.sizes[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.sizes[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  const TensorImpl& t = impl();
  return static_cast<char*>(t.storage->data()) + t.offset * element_size(t.dtype);
}

Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->site_op = base.impl().site_op;  // a view was made where its storage was
  impl->site_scope = base.impl().site_scope;
  return Tensor(std::move(impl));
}

// ---------------------------------------------------------------- factories

Tensor empty(const Shape& sizes, TensorOptions o) {
  Tensor t = make_tensor(sizes, o.dtype_, o.device_, "empty");
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}

namespace {

// full() under the name of the factory the user called (zeros, ones, ...), so
// that an error names it rather than the function it delegates to.
Tensor filled(const Shape& sizes, double value, TensorOptions o, const char* op) {
  Tensor t = make_tensor(sizes, o.dtype_, o.device_, op);
  fill_(t, value);
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}

const Tensor& like_source(const Tensor& t, const char* op) {
  EMBER_CHECK(t.defined(), op, ": the tensor to copy the shape, dtype and device of is undefined");
  return t;
}

}  // namespace

Tensor full(const Shape& sizes, double value, TensorOptions o) {
  return filled(sizes, value, o, "full");
}
Tensor zeros(const Shape& sizes, TensorOptions o) {
  return filled(sizes, 0.0, o, "zeros");
}
Tensor ones(const Shape& sizes, TensorOptions o) {
  return filled(sizes, 1.0, o, "ones");
}

Tensor empty_like(const Tensor& t) {
  const Tensor& s = like_source(t, "empty_like");
  Tensor out = make_tensor(s.sizes(), s.dtype(), s.device(), "empty_like");
  return out;
}
Tensor zeros_like(const Tensor& t) {
  const Tensor& s = like_source(t, "zeros_like");
  return filled(s.sizes(), 0.0, s.options(), "zeros_like");
}
Tensor ones_like(const Tensor& t) {
  const Tensor& s = like_source(t, "ones_like");
  return filled(s.sizes(), 1.0, s.options(), "ones_like");
}
Tensor full_like(const Tensor& t, double v) {
  const Tensor& s = like_source(t, "full_like");
  return filled(s.sizes(), v, s.options(), "full_like");
}

Tensor arange(double start, double end, double step, TensorOptions o) {
  EMBER_CHECK(step != 0 && std::isfinite(step) && std::isfinite(start) && std::isfinite(end),
              "arange: step must be finite and non-zero, bounds finite (got start=", start,
              ", end=", end, ", step=", step, ")");
  double count = std::ceil((end - start) / step);
  // Converting a count past int64's range is undefined behaviour: refuse it first.
  EMBER_CHECK(count < 9.0e15, "arange: [", start, ", ", end, ") in steps of ", step, " has ", count,
              " elements, too many");
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  if (o.dtype_ == kInt64 && n > 0) {
    const double last = std::fma(step, static_cast<double>(n - 1), start);
    constexpr double kTwo63 = 9223372036854775808.0;
    EMBER_CHECK(std::max(start, last) < kTwo63 && std::min(start, last) >= -kTwo63, "arange: [",
                start, ", ", end, ") in steps of ", step, " leaves int64's range");
  }
  // Filled on the tensor's own device by the fill kernel (value i: fma(step, i, start),
  // one rounding in double, then the dtype's), so that no host buffer is copied: a CUDA
  // graph can hold it.
  Tensor t = make_tensor({n}, o.dtype_, o.device_, "arange");
  kernels::kernels_for(t.device())
      .fill({t.device(), t.dtype(), t.raw_data(), flat_layout(n), n, start, step});
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}

Tensor from_vector(const std::vector<double>& values, const Shape& sizes, TensorOptions o) {
  check_sizes(sizes, "from_vector");
  EMBER_CHECK(numel_of(sizes) == static_cast<int64_t>(values.size()),
              "from_vector: ", values.size(), " values do not fill shape ", shape_str(sizes), " (",
              numel_of(sizes), " elements)");
  Tensor host = make_tensor(sizes, o.dtype_, kCPU, "from_vector");
  detail::dispatch_cpu(o.dtype_, [&](auto tag) {
    using S = decltype(tag);
    S* p = static_cast<S*>(host.raw_data());
    for (size_t i = 0; i < values.size(); ++i) detail::store_from_double(p + i, values[i]);
  });
  Tensor t = o.device_.is_cpu() ? host : host.to(o.device_);
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}

Tensor from_vector(const std::vector<float>& values, const Shape& sizes, TensorOptions o) {
  return from_vector(std::vector<double>(values.begin(), values.end()), sizes, o);
}

Tensor tensor(std::initializer_list<double> values, TensorOptions o) {
  return from_vector(std::vector<double>(values), {static_cast<int64_t>(values.size())}, o);
}

Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions o) {
  std::vector<double> v;
  int64_t cols = rows.size() ? static_cast<int64_t>(rows.begin()->size()) : 0;
  for (const auto& r : rows) {
    EMBER_CHECK(static_cast<int64_t>(r.size()) == cols, "tensor: ragged rows (", r.size(), " vs ",
                cols, " values)");
    v.insert(v.end(), r.begin(), r.end());
  }
  return from_vector(v, {static_cast<int64_t>(rows.size()), cols}, o);
}

namespace {

// Integer (and bool) host values into a new tensor: integer dtypes element by
// element as integers, floating ones through double as a cast does.
template <typename V>
Tensor from_integers(const std::vector<V>& values, const Shape& sizes, TensorOptions o) {
  check_sizes(sizes, "from_vector");
  EMBER_CHECK(numel_of(sizes) == static_cast<int64_t>(values.size()),
              "from_vector: ", values.size(), " values do not fill shape ", shape_str(sizes), " (",
              numel_of(sizes), " elements)");
  EMBER_CHECK(!o.requires_grad_ || is_floating(o.dtype_),
              "from_vector: only floating-point tensors can require grad, got ", o.dtype_);
  Tensor host = make_tensor(sizes, o.dtype_, kCPU, "from_vector");
  detail::dispatch_cpu(o.dtype_, [&](auto tag) {
    using S = decltype(tag);
    S* p = static_cast<S*>(host.raw_data());
    for (size_t i = 0; i < values.size(); ++i) {
      const V v = values[i];
      if constexpr (std::is_integral_v<S>)
        p[i] = static_cast<S>(v);
      else
        detail::store_from_double(p + i, static_cast<double>(v));
    }
  });
  Tensor t = o.device_.is_cpu() ? host : host.to(o.device_);
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}

}  // namespace

Tensor from_vector(const std::vector<int64_t>& values, const Shape& sizes, TensorOptions o) {
  return from_integers(values, sizes, o);
}
Tensor from_vector(const std::vector<bool>& values, const Shape& sizes, TensorOptions o) {
  return from_integers(values, sizes, o);
}
Tensor tensor(const std::vector<int64_t>& values, TensorOptions o) {
  return from_integers(values, {static_cast<int64_t>(values.size())}, o);
}
Tensor tensor(const std::vector<bool>& values, TensorOptions o) {
  return from_integers(values, {static_cast<int64_t>(values.size())}, o);
}

// ---------------------------------------------------------------- random

Generator& default_generator() {
  static Generator g;
  return g;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

static Tensor& fill_random(Tensor& t, bool normal, double p0, double p1, Generator* gen,
                           const char* op) {
  check_floating(op, t);
  check_inplace(op, t);
  // Inside a CUDA graph the counters come from a word each replay sets (draw_counters).
  Generator& g = gen ? *gen : default_generator();
  uint64_t n = static_cast<uint64_t>(t.numel());
  const RandomCounters c = draw_counters(t.device(), g, n, op);
  Tensor dst = t.is_contiguous() ? t : empty_like(t);
  if (n > 0)
    kernels::kernels_for(dst.device())
        .random({dst.device(), dst.dtype(), dst.raw_data(), dst.numel(), c.seed, c.offset, normal,
                 p0, p1, false, c.base});
  if (!dst.is_same(t))
    copy_(t, dst);
  else
    t.bump_version();
  return t;
}

Tensor& uniform_(Tensor& t, double lo, double hi, Generator* gen) {
  EMBER_CHECK(lo <= hi, "uniform_: lower bound ", lo, " is above upper bound ", hi);
  return fill_random(t, false, lo, hi, gen, "uniform_");
}

Tensor& normal_(Tensor& t, double mean, double stddev, Generator* gen) {
  EMBER_CHECK(stddev >= 0, "normal_: standard deviation must be >= 0, got ", stddev);
  return fill_random(t, true, mean, stddev, gen, "normal_");
}

Tensor rand(const Shape& sizes, TensorOptions o, Generator* gen) {
  Tensor t = make_tensor(sizes, o.dtype_, o.device_, "rand");
  fill_random(t, false, 0.0, 1.0, gen, "rand");
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}

Tensor randn(const Shape& sizes, TensorOptions o, Generator* gen) {
  Tensor t = make_tensor(sizes, o.dtype_, o.device_, "randn");
  fill_random(t, true, 0.0, 1.0, gen, "randn");
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions o, Generator* gen) {
  EMBER_CHECK(low < high, "randint: low (", low, ") must be below high (", high, ")");
  // Computed through double: every integer of the range must be exact there.
  EMBER_CHECK(std::fabs(static_cast<double>(low)) <= 9007199254740992.0 &&
                  std::fabs(static_cast<double>(high)) <= 9007199254740992.0,
              "randint: bounds must be within +-2^53, got [", low, ", ", high, ")");
  EMBER_CHECK(o.dtype_ != kBool && !o.requires_grad_,
              "randint: the dtype must be numeric and the result cannot require grad");
  Tensor t = make_tensor(sizes, o.dtype_, o.device_, "randint");
  Generator& g = gen ? *gen : default_generator();
  const RandomCounters c =
      draw_counters(t.device(), g, static_cast<uint64_t>(t.numel()), "randint");
  if (t.numel() > 0)
    kernels::kernels_for(t.device())
        .random({t.device(), t.dtype(), t.raw_data(), t.numel(), c.seed, c.offset, false,
                 static_cast<double>(low), static_cast<double>(high), true, c.base});
  return t;
}

Tensor randint(int64_t high, const Shape& sizes, TensorOptions o, Generator* gen) {
  return randint(0, high, sizes, o, gen);
}

Tensor randperm(int64_t n, TensorOptions o, Generator* gen) {
  OpSite site("randperm");
  EMBER_CHECK(n >= 0, "randperm: n must be >= 0, got ", n);
  EMBER_CHECK(o.dtype_ == kInt64 && !o.requires_grad_, "randperm: the result is int64, asked for ",
              o.dtype_);
  Tensor t = make_tensor({n}, kInt64, o.device_, "randperm");
  check_not_capturing(t.device(), "randperm",
                      "draw random numbers (every replay would repeat the captured ones)");
  Generator& g = gen ? *gen : default_generator();
  const uint64_t offset = g.advance(static_cast<uint64_t>(n));
  if (n == 0) return t;
  const kernels::KernelTable& k = kernels::kernels_for(t.device());
  const size_t ws_bytes = k.randperm_workspace_bytes({t.device(), n, n});
  Tensor ws = ws_bytes == 0 ? Tensor()
                            : empty({static_cast<int64_t>((ws_bytes + 7) / 8)},
                                    TensorOptions(kFloat64).device(t.device()));
  k.randperm({t.device(), t.data_ptr<int64_t>(), n, g.seed(), offset,
              ws.defined() ? ws.raw_data() : nullptr});
  return t;
}

// ---------------------------------------------------------------- copies

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  if (kernels::kernels_for(d).hooks.holds_data) [[likely]]
    check_holds_data(device(), d.is_cpu() ? "to(cpu)" : "to(cuda)");
  check_device(d);
  check_not_capturing(device(), "to()");  // the copy synchronises
  check_not_capturing(d, "to()",
                      is_cpu() ? "copy from host memory (a replay would read it again)"
                               : "synchronise with the host");
  Tensor src = ember::contiguous(detach());
  Tensor out = make_tensor(sizes(), dtype(), d, "to");
  copy_bytes(out.raw_data(), d, src.raw_data(), src.device(), nbytes());
  if (any_requires_grad({this})) {
    Device from = device();
    attach_grad_fn(out, "ToDeviceBackward", {this},
                   [from](const Tensor& g) { return std::vector<Tensor>{g.to(from)}; });
  }
  return out;
}

Tensor Tensor::to(DType t) const {
  return t == dtype() ? *this : cast(*this, t);
}
Tensor Tensor::to(Device d, DType t) const {
  return to(d).to(t);
}

Tensor Tensor::contiguous() const {
  return ember::contiguous(*this);
}

Tensor Tensor::clone() const {
  Tensor out = make_tensor(sizes(), dtype(), device(), "clone");
  {
    NoGradGuard ng;
    ember::copy_(out, *this);
  }
  if (any_requires_grad({this}))
    attach_grad_fn(out, "CloneBackward", {this},
                   [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor Tensor::detach() const {
  return make_view(*this, sizes(), strides(), storage_offset());
}

Tensor& Tensor::detach_() {
  if (impl().autograd) {
    impl().autograd->grad_fn.reset();
    impl().autograd->requires_grad = false;
  }
  return *this;
}

double Tensor::item() const {
  // A capture's refusal first: the meta device's simulated capture (core/meta.h) has
  // no values either, and the capture is the thing to report there.
  check_not_capturing(device(), "item()");
  check_holds_data(device(), "item()");
  EMBER_CHECK(numel() == 1, "item: tensor has ", numel(), " elements (shape ", shape_str(sizes()),
              "), expected exactly one");
  Tensor host = detach().to(kCPU);
  return detail::dispatch_cpu(dtype(), [&](auto tag) {
    using S = decltype(tag);
    return detail::load_as_double(static_cast<const S*>(host.raw_data()));
  });
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_not_capturing(device(), "to_vector()");  // first, as item()
  check_holds_data(device(), "to_vector()");
  Tensor host = ember::contiguous(detach().to(kCPU));
  std::vector<T> out(static_cast<size_t>(numel()));
  detail::dispatch_cpu(dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* p = static_cast<const S*>(host.raw_data());
    if constexpr (std::is_integral_v<S> && std::is_integral_v<T>) {
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(p[i]);  // exact, no double
    } else {
      for (size_t i = 0; i < out.size(); ++i)
        out[i] = static_cast<T>(detail::load_as_double(p + i));
    }
  });
  return out;
}

int64_t Tensor::item_int64() const {
  check_holds_data(device(), "item()");
  EMBER_CHECK(numel() == 1, "item: tensor has ", numel(), " elements (shape ", shape_str(sizes()),
              "), expected exactly one");
  return to_vector<int64_t>()[0];
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;

// ---------------------------------------------------------------- printing

namespace {
// How elements print: as floats (4 decimals), integers, or True/False (PyTorch's).
enum class Print { Float, Integer, Bool };
void print_one(std::ostream& os, int64_t v, Print) {
  os << v;  // int64 read as int64: exact
}
void print_one(std::ostream& os, double v, Print how) {
  if (how == Print::Integer)
    os << static_cast<int64_t>(v);
  else if (how == Print::Bool)
    os << (v != 0 ? "True" : "False");
  else
    os << std::fixed << std::setprecision(4) << v;
}

template <typename V>
void print_values(std::ostream& os, const std::vector<V>& v, const Shape& sizes, size_t dim,
                  size_t& pos, int indent, Print integral) {
  if (sizes.empty()) {
    print_one(os, v[pos++], integral);
    return;
  }
  os << '[';
  int64_t n = sizes[dim];
  const bool summarize = v.size() > 1000 && n > 6;
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && i == 3) {
      os << "...";
      int64_t skip = n - 6;
      int64_t inner = 1;
      for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= sizes[d];
      pos += static_cast<size_t>(skip * inner);
      i += skip - 1;
      os << (dim + 1 == sizes.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
      continue;
    }
    if (dim + 1 == sizes.size()) {
      print_one(os, v[pos++], integral);
    } else {
      print_values(os, v, sizes, dim + 1, pos, indent + 1, integral);
    }
    if (i + 1 < n) os << (dim + 1 == sizes.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  check_holds_data(device(), "printing a tensor (str(), operator<<)");
  std::ostringstream os;
  os << "tensor(";
  size_t pos = 0;
  if (numel() == 0)
    os << "[]";
  else if (dtype() == kInt64)
    print_values(os, to_vector<int64_t>(), sizes(), 0, pos, 7, Print::Integer);
  else
    print_values(os, to_vector<double>(), sizes(), 0, pos, 7,
                 dtype() == kBool ? Print::Bool : Print::Float);
  if (dim() != 1 || numel() == 0) os << ", size=" << shape_str(sizes());
  if (dtype() != kFloat32 && dtype() != kBool) os << ", dtype=" << dtype();  // as PyTorch
  if (!is_cpu()) os << ", device=" << device();
  if (grad_fn())
    os << ", grad_fn=<" << grad_fn()->name() << ">";
  else if (requires_grad())
    os << ", requires_grad=true";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.str();
}

// ---------------------------------------------------------------- autograd accessors

bool Tensor::requires_grad() const {
  return impl().autograd != nullptr && impl().autograd->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool r) {
  EMBER_CHECK(is_leaf(),
              "set_requires_grad: only leaf tensors can change requires_grad; "
              "use detach() to get a leaf");
  EMBER_CHECK(!r || is_floating(dtype()),
              "set_requires_grad: only floating-point tensors can "
              "require grad, this one is ",
              dtype());
  autograd_meta(*this).requires_grad = r;
  return *this;
}

bool Tensor::is_leaf() const {
  return !impl().autograd || !impl().autograd->grad_fn;
}

const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  return impl().autograd ? impl().autograd->grad : undefined;
}

Tensor& Tensor::mutable_grad() const {
  return autograd_meta(*this).grad;
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined()) {
    EMBER_CHECK(g.sizes() == sizes() && g.dtype() == dtype() && g.device() == device(),
                "set_grad: gradient ", shape_str(g.sizes()), " ", g.dtype(), " on ", g.device(),
                " does not match tensor ", shape_str(sizes()), " ", dtype(), " on ", device());
  }
  autograd_meta(*this).grad = g;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return impl().autograd ? impl().autograd->grad_fn : none;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  run_backward({*this}, {gradient}, retain_graph);
}

void Tensor::register_post_accumulate_grad_hook(GradHook hook) const {
  EMBER_CHECK(requires_grad() && is_leaf(),
              "register_post_accumulate_grad_hook: only leaf "
              "tensors that require grad accumulate gradients");
  autograd_meta(*this).post_accumulate_hooks.push_back(std::move(hook));
}

// ---------------------------------------------------------------- method forwards

Tensor Tensor::view(Shape s) const {
  return ember::view(*this, std::move(s));
}
Tensor Tensor::reshape(Shape s) const {
  return ember::reshape(*this, std::move(s));
}
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  return ember::flatten(*this, start_dim, end_dim);
}
Tensor Tensor::transpose(int64_t a, int64_t b) const {
  return ember::transpose(*this, a, b);
}
Tensor Tensor::t() const {
  EMBER_CHECK(dim() == 2, "t: expects a 2-D tensor, got shape ", shape_str(sizes()));
  return ember::transpose(*this, 0, 1);
}
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const {
  return ember::slice(*this, d, s, e, st);
}
Tensor Tensor::select(int64_t d, int64_t i) const {
  return ember::select(*this, d, i);
}
Tensor Tensor::unsqueeze(int64_t d) const {
  return ember::unsqueeze(*this, d);
}
Tensor Tensor::squeeze(int64_t d) const {
  return ember::squeeze(*this, d);
}
Tensor Tensor::expand(Shape s) const {
  return ember::expand(*this, std::move(s));
}
Tensor Tensor::sum() const {
  return ember::sum(*this);
}
Tensor Tensor::sum(int64_t d, bool k) const {
  return ember::sum(*this, d, k);
}
Tensor Tensor::mean() const {
  return ember::mean(*this);
}
Tensor Tensor::mean(int64_t d, bool k) const {
  return ember::mean(*this, d, k);
}
Tensor Tensor::max() const {
  return ember::max(*this);
}
Tensor Tensor::min() const {
  return ember::min(*this);
}
ValuesAndIndices Tensor::max(int64_t d, bool k) const {
  return ember::max(*this, d, k);
}
ValuesAndIndices Tensor::min(int64_t d, bool k) const {
  return ember::min(*this, d, k);
}
Tensor Tensor::argmax(int64_t d, bool k) const {
  return ember::argmax(*this, d, k);
}
Tensor Tensor::argmin(int64_t d, bool k) const {
  return ember::argmin(*this, d, k);
}
Tensor Tensor::matmul(const Tensor& o) const {
  return ember::matmul(*this, o);
}
Tensor Tensor::softmax(int64_t d) const {
  return ember::softmax(*this, d);
}
Tensor Tensor::log_softmax(int64_t d) const {
  return ember::log_softmax(*this, d);
}
Tensor Tensor::index_select(int64_t d, const Tensor& i) const {
  return ember::index_select(*this, d, i);
}
Tensor Tensor::gather(int64_t d, const Tensor& i) const {
  return ember::gather(*this, d, i);
}
Tensor Tensor::masked_fill(const Tensor& m, Scalar v) const {
  return ember::masked_fill(*this, m, v);
}
Tensor Tensor::clamp(Scalar lo, Scalar hi) const {
  return ember::clamp(*this, lo, hi);
}
// shapeops (issue 26)
Tensor Tensor::tril(int64_t d) const {
  return ember::tril(*this, d);
}
Tensor Tensor::triu(int64_t d) const {
  return ember::triu(*this, d);
}
std::vector<Tensor> Tensor::split(int64_t s, int64_t d) const {
  return ember::split(*this, s, d);
}
std::vector<Tensor> Tensor::split(const std::vector<int64_t>& s, int64_t d) const {
  return ember::split(*this, s, d);
}
std::vector<Tensor> Tensor::chunk(int64_t c, int64_t d) const {
  return ember::chunk(*this, c, d);
}
std::vector<Tensor> Tensor::unbind(int64_t d) const {
  return ember::unbind(*this, d);
}
Tensor Tensor::sum(const std::vector<int64_t>& ds, bool k) const {
  return ember::sum(*this, ds, k);
}
Tensor Tensor::mean(const std::vector<int64_t>& ds, bool k) const {
  return ember::mean(*this, ds, k);
}
Tensor Tensor::amax(const std::vector<int64_t>& ds, bool k) const {
  return ember::amax(*this, ds, k);
}
Tensor Tensor::amin(const std::vector<int64_t>& ds, bool k) const {
  return ember::amin(*this, ds, k);
}
Tensor Tensor::var(const std::vector<int64_t>& ds, double c, bool k) const {
  return ember::var(*this, ds, c, k);
}
Tensor Tensor::var(int64_t d, double c, bool k) const {
  return ember::var(*this, d, c, k);
}
Tensor Tensor::std(const std::vector<int64_t>& ds, double c, bool k) const {
  return ember::std(*this, ds, c, k);
}
Tensor Tensor::std(int64_t d, double c, bool k) const {
  return ember::std(*this, d, c, k);
}
Tensor Tensor::cumsum(int64_t d) const {
  return ember::cumsum(*this, d);
}
ValuesAndIndices Tensor::sort(int64_t d, bool desc, bool stable) const {
  return ember::sort(*this, d, desc, stable);
}
Tensor Tensor::argsort(int64_t d, bool desc, bool stable) const {
  return ember::argsort(*this, d, desc, stable);
}
ValuesAndIndices Tensor::topk(int64_t k, int64_t d, bool largest, bool sorted) const {
  return ember::topk(*this, k, d, largest, sorted);
}
#define EMBER_X(name, ...)      \
  Tensor Tensor::name() const { \
    return ember::name(*this);  \
  }
EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, ...)              \
  Tensor Tensor::name(Scalar s) const { \
    return ember::name(*this, s);       \
  }
EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, ...)                         \
  Tensor Tensor::name(const Tensor& other) const { \
    return ember::name(*this, other);              \
  }
EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X

Tensor& Tensor::fill_(double v) {
  return ember::fill_(*this, v);
}
Tensor& Tensor::zero_() {
  return ember::fill_(*this, 0.0);
}
Tensor& Tensor::copy_(const Tensor& s) {
  return ember::copy_(*this, s);
}
Tensor& Tensor::add_(const Tensor& o, double alpha) {
  return ember::add_(*this, o, alpha);
}
Tensor& Tensor::add_(Scalar v) {
  return ember::add_(*this, v);
}
Tensor& Tensor::mul_(const Tensor& o) {
  return ember::mul_(*this, o);
}
Tensor& Tensor::mul_(Scalar v) {
  return ember::mul_(*this, v);
}

}  // namespace ember
