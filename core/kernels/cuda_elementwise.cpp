// CUDA element-wise kernels: adapters from the kernel table to the launchers of
// cuda/kernels/elementwise.cu, on the device's current stream.
#include "core/kernels/registration.h"
#include "cuda/check.h"
#include "cuda/kernels/elementwise.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

void unary(const UnaryArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_unary(a.op, a.dtype, a.x, a.xl, a.y, a.yl, a.n, a.a, a.out_dtype,
                     cuda::current_stream(a.device.index));
}

void unary_backward(const UnaryBackwardArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_unary_backward(a.op, a.dtype, a.g, a.gl, a.s, a.sl, a.out, a.ol, a.n, a.a,
                              cuda::current_stream(a.device.index));
}

void binary(const BinaryArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_binary(a.op, a.dtype, a.x, a.xl, a.y, a.yl, a.out, a.ol, a.n, a.a, a.out_dtype,
                      cuda::current_stream(a.device.index));
}

void where(const WhereArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_where(a.dtype, a.cond, a.cl, a.a, a.al, a.b, a.bl, a.out, a.ol, a.n,
                     cuda::current_stream(a.device.index));
}

void binary_backward(const BinaryBackwardArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_binary_backward(a.op, a.side, a.dtype, a.g, a.gl, a.x, a.xl, a.y, a.yl, a.out, a.ol,
                               a.n, a.a, cuda::current_stream(a.device.index));
}

void cast(const CastArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  const cudaStream_t stream = cuda::current_stream(a.device.index);
  if (a.xl.contiguous && a.yl.contiguous && a.from == a.to) {
    const int64_t es = static_cast<int64_t>(element_size(a.to));
    EMBER_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(a.y) + a.yl.offset * es,
                                     static_cast<const char*>(a.x) + a.xl.offset * es,
                                     static_cast<size_t>(a.n * es), cudaMemcpyDeviceToDevice,
                                     stream));
    return;
  }
  cuda::launch_cast(a.from, a.x, a.xl, a.to, a.y, a.yl, a.n, stream);
}

void fill(const FillArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_fill(a.dtype, a.y, a.yl, a.n, a.value, cuda::current_stream(a.device.index));
}

void random(const RandomArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_random(a.dtype, a.y, a.n, a.seed, a.offset, a.normal, a.integer, a.p0, a.p1,
                      cuda::current_stream(a.device.index));
}

}  // namespace

void register_cuda_elementwise(KernelTable& t) {
  t.unary = &unary;
  t.unary_backward = &unary_backward;
  t.binary = &binary;
  t.binary_backward = &binary_backward;
  t.where = &where;
  t.cast = &cast;
  t.fill = &fill;
  t.random = &random;
}

}  // namespace ember::kernels
