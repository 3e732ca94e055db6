// Tensor: a shared handle to (storage, offset, sizes, strides, dtype) plus, for
// tensors that take part in autograd, their gradient and the node that made them.
// Copying a Tensor copies the handle (as in libtorch); clone() copies the data.
// Views (view, reshape of contiguous data, transpose, slice, detach) share storage.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/base/device.h"
#include "core/base/dtype.h"
#include "core/base/elementwise_ops.h"
#include "core/base/error.h"
#include "core/base/scalar.h"
#include "core/base/shape.h"
#include "core/storage.h"

namespace ember {

class Node;
class Tensor;
struct ValuesAndIndices;

constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat64 = DType::Float64;
constexpr DType kBFloat16 = DType::BFloat16;
constexpr DType kInt64 = DType::Int64;
constexpr DType kLong = DType::Int64;  // libtorch's name for int64 (torch::kLong)
constexpr DType kBool = DType::Bool;

// libtorch-style options: zeros({2, 3}, TensorOptions().dtype(kFloat64).device(kCUDA)).
struct TensorOptions {
  DType dtype_ = kFloat32;
  Device device_ = kCPU;
  bool requires_grad_ = false;

  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}
  TensorOptions(Device d) : device_(d) {}
  TensorOptions& dtype(DType t) {
    dtype_ = t;
    return *this;
  }
  TensorOptions& device(Device d) {
    device_ = d;
    return *this;
  }
  TensorOptions& requires_grad(bool r = true) {
    requires_grad_ = r;
    return *this;
  }
};

using GradHook = std::function<void(const Tensor& param)>;

struct AutogradMeta;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape sizes;
  Shape strides;
  DType dtype = kFloat32;
  std::unique_ptr<AutogradMeta> autograd;  // null for tensors outside autograd

  // Where it was made (allocation tag and scope current at construction, see
  // core/alloc_site.h) and its links in the live-tensor registry
  // (core/live_tensors.h); set by the constructor, read by diagnostics.
  const char* site_op = nullptr;
  const char* site_scope = nullptr;
  TensorImpl* live_prev = nullptr;
  TensorImpl* live_next = nullptr;
  unsigned live_shard = 0;

  TensorImpl();  // registers itself as live
  ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  // --- metadata
  int64_t dim() const { return static_cast<int64_t>(impl().sizes.size()); }
  const Shape& sizes() const { return impl().sizes; }
  const Shape& shape() const { return impl().sizes; }
  const Shape& strides() const { return impl().strides; }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return numel_of(impl().sizes); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_contiguous() const;
  // Its dtype and device, for making tensors like it (libtorch's t.options()).
  TensorOptions options() const { return TensorOptions().dtype(dtype()).device(device()); }
  int64_t storage_offset() const { return impl().offset; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  uint64_t version() const { return impl().storage->version(); }
  void bump_version() const { impl().storage->bump_version(); }
  // Address of element [0, 0, ...] (storage base + offset).
  void* raw_data() const;
  template <typename T>
  T* data_ptr() const {
    EMBER_CHECK(dtype_of<T>() == dtype(), "data_ptr: tensor is ", dtype(), ", asked for ",
                dtype_of<T>());
    return static_cast<T*>(raw_data());
  }

  // --- conversion and copies
  Tensor to(Device d) const;
  Tensor to(DType t) const;
  Tensor to(Device d, DType t) const;
  Tensor cpu() const { return to(kCPU); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor detach() const;  // same storage, no autograd history
  Tensor& detach_();      // drops this tensor's history in place
  // single-element tensor -> value (synchronises on CUDA). A double: an int64
  // value past 2^53 rounds; item<int64_t>() (any integer type) reads it exactly.
  double item() const;
  template <typename T>
  T item() const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
      return static_cast<T>(item_int64());
    else
      return static_cast<T>(item());
  }
  template <typename T>
  std::vector<T> to_vector() const;  // contiguous copy in row-major order, on the host
  std::string str() const;           // readable printing, as PyTorch's repr

  // --- autograd
  bool requires_grad() const;
  Tensor& set_requires_grad(bool r);
  Tensor& requires_grad_(bool r = true) { return set_requires_grad(r); }
  bool is_leaf() const;
  const Tensor& grad() const;
  Tensor& mutable_grad() const;
  void set_grad(const Tensor& g) const;
  const std::shared_ptr<Node>& grad_fn() const;
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // Called after a gradient has been accumulated into this leaf's grad().
  void register_post_accumulate_grad_hook(GradHook hook) const;

  // --- shape views and movement (see core/ops.h)
  Tensor view(Shape sizes) const;
  Tensor reshape(Shape sizes) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(Shape sizes) const;
  Tensor operator[](int64_t index) const { return select(0, index); }

  // --- math (see core/ops.h)
  Tensor sum() const;
  Tensor sum(int64_t dim, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(int64_t dim, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  ValuesAndIndices max(int64_t dim, bool keepdim = false) const;  // auto [values, indices]
  ValuesAndIndices min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;
  Tensor clamp(Scalar min, Scalar max) const;
  // shapeops (issue 26), as the free functions of core/ops.h
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const std::vector<int64_t>& split_sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor amax(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor amin(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor var(const std::vector<int64_t>& dims = {}, double correction = 1.0,
             bool keepdim = false) const;
  Tensor var(int64_t dim, double correction = 1.0, bool keepdim = false) const;
  Tensor std(const std::vector<int64_t>& dims = {}, double correction = 1.0,
             bool keepdim = false) const;
  Tensor std(int64_t dim, double correction = 1.0, bool keepdim = false) const;
  Tensor cumsum(int64_t dim) const;
  ValuesAndIndices sort(int64_t dim = -1, bool descending = false, bool stable = true) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = true) const;
  ValuesAndIndices topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  // The element-wise ops of core/base/elementwise_ops.h's lists, as methods:
  // t.exp(), t.pow(2.0), t.mul(other), t.ge(0.5), t.eq(other), ...
#define EMBER_X(name, ...) Tensor name() const;
  EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, ...) Tensor name(Scalar s) const;
  EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, ...) Tensor name(const Tensor& other) const;
  EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X

  // --- in place (bump the version counter)
  Tensor& fill_(double value);
  Tensor& zero_();
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(Scalar value);
  Tensor& sub_(const Tensor& other) {
    return add_(other, -1.0);
  }
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar value);
  Tensor& div_(double value) {
    return mul_(1.0 / value);
  }

  // Every accessor goes through here, several times per op: the check is one
  // branch, its message built out of line so that this always inlines.
  TensorImpl& impl() const {
    if (impl_ == nullptr) [[unlikely]]
      throw_undefined();
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const {
    return impl_;
  }
  bool is_same(const Tensor& other) const {
    return impl_ == other.impl_;
  }

 private:
  [[noreturn]] static void throw_undefined();
  int64_t item_int64() const;  // the element as int64, without a double in between
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// What max(dim) and min(dim) return: the values and the int64 indices where they
// were found (the first on ties). As libtorch's tuple, `auto [values, indices] =
// max(x, 1);`; as Python's named tuple, `.values` and `.indices`. It converts to
// its values, so `Tensor m = max(x, 1);` keeps the values.
struct ValuesAndIndices {
  Tensor values;
  Tensor indices;
  operator Tensor() const { return values; }
};

// --- factories (sizes checked: no negative size)
Tensor empty(const Shape& sizes, TensorOptions opts = {});
Tensor zeros(const Shape& sizes, TensorOptions opts = {});
Tensor ones(const Shape& sizes, TensorOptions opts = {});
Tensor full(const Shape& sizes, double value, TensorOptions opts = {});
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = {});
inline Tensor arange(double end, TensorOptions opts = {}) {
  return arange(0, end, 1, opts);
}
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// From host values (row-major); sizes defaults to a 1-D tensor of values.size().
Tensor from_vector(const std::vector<double>& values, const Shape& sizes, TensorOptions opts = {});
Tensor from_vector(const std::vector<float>& values, const Shape& sizes, TensorOptions opts = {});
Tensor tensor(std::initializer_list<double> values, TensorOptions opts = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions opts = {});
// int64 and bool host values, without a double in between (every int64 exact);
// int64 by default, as torch::tensor of integers, bool for bools. Into a floating
// dtype they convert as a cast does.
Tensor from_vector(const std::vector<int64_t>& values, const Shape& sizes,
                   TensorOptions opts = kInt64);
Tensor from_vector(const std::vector<bool>& values, const Shape& sizes, TensorOptions opts = kBool);
Tensor tensor(const std::vector<int64_t>& values, TensorOptions opts = kInt64);
Tensor tensor(const std::vector<bool>& values, TensorOptions opts = kBool);
// tensor({int64_t{1}, int64_t{1} << 60}) and tensor({true, false}): a template, so
// that a list of plain int literals, tensor({1, 2}), still means the double list
// above (float32 by default, as ember always had) rather than being ambiguous.
template <typename I>
requires std::is_same_v<I, int64_t> || std::is_same_v<I, bool> Tensor
tensor(std::initializer_list<I> values,
       TensorOptions opts = std::is_same_v<I, bool> ? kBool : kInt64) {
  return tensor(std::vector<I>(values), opts);
}

// A view of caller memory, as torch::from_blob: no copy; the bytes must stay valid
// while any view of them lives, and `deleter` (if given) runs on `data` when the
// last one dies. CPU memory, or a CUDA device pointer when opts say CUDA (on that
// device). strides in elements, non-negative; contiguous when left out.
Tensor from_blob(void* data, const Shape& sizes, TensorOptions opts = {});
Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, TensorOptions opts = {});
Tensor from_blob(void* data, const Shape& sizes, const std::function<void(void*)>& deleter,
                 TensorOptions opts = {});
Tensor from_blob(void* data, const Shape& sizes, const Shape& strides,
                 const std::function<void(void*)>& deleter, TensorOptions opts = {});

// A seedable source of random numbers. Values depend only on (seed, position),
// through a counter-based generator that CPU and CUDA compute identically:
// the same seed gives the same numbers on both devices.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  // Reserves n consecutive counters and returns the first.
  uint64_t advance(uint64_t n) {
    uint64_t o = offset_;
    offset_ += n;
    return o;
  }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t o) { offset_ = o; }
  // The offset itself, for a CUDA graph that draws from this generator
  // (core/device_services.h's draw_counters): each replay reads and advances it.
  uint64_t* offset_slot() { return &offset_; }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};
Generator& default_generator();
void manual_seed(uint64_t seed);  // reseeds the default generator

Tensor rand(const Shape& sizes, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randn(const Shape& sizes, TensorOptions opts = {}, Generator* gen = nullptr);
// Integers uniform in [low, high) (int64 unless opts say otherwise), as torch.randint.
Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions opts = kInt64,
               Generator* gen = nullptr);
Tensor randint(int64_t high, const Shape& sizes, TensorOptions opts = kInt64,
               Generator* gen = nullptr);
// A random permutation of 0..n-1 (int64), as torch.randperm; the same on every device.
Tensor randperm(int64_t n, TensorOptions opts = kInt64, Generator* gen = nullptr);
Tensor& uniform_(Tensor& t, double lo, double hi, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean, double stddev, Generator* gen = nullptr);

// Internal: a new tensor viewing `base`'s storage with other geometry.
Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset);

}  // namespace ember
