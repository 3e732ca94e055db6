// from_blob: a tensor viewing memory the caller owns (core/tensor.h), as
// torch::from_blob. The storage is a view of external bytes (core/storage.h); the
// caller's deleter, when given, is its owner's release.
#include <functional>
#include <memory>
#include <utility>

#include "core/kernel_table.h"
#include "core/tensor.h"

namespace ember {

Tensor from_blob(void* data, const Shape& sizes, const Shape& strides,
                 const std::function<void(void*)>& deleter, TensorOptions o) {
  check_sizes(sizes, "from_blob");
  EMBER_CHECK(strides.size() == sizes.size(), "from_blob: ", strides.size(),
              " strides for a shape of ", sizes.size(), " dims ", shape_str(sizes));
  EMBER_CHECK(o.device_.is_cpu() || o.device_.is_cuda(),
              "from_blob: views CPU or CUDA memory, not ", o.device_);
  EMBER_CHECK(!o.requires_grad_ || is_floating(o.dtype_),
              "from_blob: only floating-point tensors can require grad, got ", o.dtype_);
  // The elements reached: the last one's offset plus one (none for an empty shape).
  int64_t extent = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    EMBER_CHECK(strides[d] >= 0, "from_blob: strides must be non-negative, got ", strides[d],
                " for dim ", d, " of shape ", shape_str(sizes));
    if (sizes[d] == 0) extent = 0;
  }
  if (extent > 0)
    for (size_t d = 0; d < sizes.size(); ++d) extent += (sizes[d] - 1) * strides[d];
  EMBER_CHECK(data != nullptr || extent == 0, "from_blob: data is null for shape ",
              shape_str(sizes));
  kernels::kernels_for(o.device_).hooks.check(o.device_.index);
  std::shared_ptr<const void> owner;
  if (deleter)
    owner = std::shared_ptr<const void>(
        data, [deleter](const void* p) { deleter(const_cast<void*>(p)); });
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = sizes;
  impl->strides = strides;
  impl->dtype = o.dtype_;
  impl->storage = std::make_shared<Storage>(
      data, static_cast<size_t>(extent) * element_size(o.dtype_), o.device_, std::move(owner));
  Tensor t(std::move(impl));
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}

Tensor from_blob(void* data, const Shape& sizes, TensorOptions o) {
  return from_blob(data, sizes, contiguous_strides(sizes), {}, o);
}
Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, TensorOptions o) {
  return from_blob(data, sizes, strides, {}, o);
}
Tensor from_blob(void* data, const Shape& sizes, const std::function<void(void*)>& deleter,
                 TensorOptions o) {
  return from_blob(data, sizes, contiguous_strides(sizes), deleter, o);
}

}  // namespace ember
