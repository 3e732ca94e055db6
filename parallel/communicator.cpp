#include "parallel/communicator.h"

#include <mutex>

#include "core/ops.h"

namespace ember::parallel {

const char* reduce_op_name(ReduceOp op) {
  return op == ReduceOp::Sum ? "sum" : "average";
}

FlatBuffer FlatBuffer::of(const Tensor& t) {
  EMBER_CHECK(t.defined(), "communicator: tensor is undefined");
  EMBER_CHECK(t.is_contiguous(), "communicator: tensor of shape ", shape_str(t.sizes()),
              " is not contiguous; call contiguous() first");
  return FlatBuffer{t.raw_data(), t.numel(), t.dtype(), t.device()};
}

void Work::abandon_buffers() {
  static auto* abandoned = new std::vector<Tensor>();  // never freed, on purpose
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  for (Tensor& t : keep_alive_) abandoned->push_back(std::move(t));
  keep_alive_.clear();
}

void Communicator::check_tensor(const char* op, const Tensor& t) const {
  EMBER_CHECK(t.defined(), op, ": tensor is undefined");
  EMBER_CHECK(t.device() == device_, op, ": tensor is on ", t.device(), ", this ", backend(),
              " communicator (rank ", rank_, ") works on ", device_);
  EMBER_CHECK(t.is_contiguous(), op, ": tensor of shape ", shape_str(t.sizes()),
              " is not contiguous; call contiguous() first");
}

void Communicator::all_reduce(FlatBuffer buf, ReduceOp op) {
  all_reduce_async(buf, op)->wait();
}
void Communicator::broadcast(FlatBuffer buf, int root) {
  broadcast_async(buf, root)->wait();
}
void Communicator::all_gather(FlatBuffer in, FlatBuffer out) {
  all_gather_async(in, out)->wait();
}
void Communicator::reduce_scatter(FlatBuffer in, FlatBuffer out, ReduceOp op) {
  reduce_scatter_async(in, out, op)->wait();
}
void Communicator::all_to_all(FlatBuffer in, FlatBuffer out) {
  all_to_all_async(in, out)->wait();
}
void Communicator::barrier() {
  barrier_async()->wait();
}

void Communicator::check_all_gather(const FlatBuffer& in, const FlatBuffer& out) const {
  EMBER_CHECK(out.count == in.count * size_ && out.dtype == in.dtype && out.device == in.device,
              "all_gather: output must hold ", in.count * size_, " ", in.dtype, " elements on ",
              in.device, " (", size_, " ranks x ", in.count, "), got ", out.count, " ", out.dtype,
              " on ", out.device);
}

void Communicator::check_reduce_scatter(const FlatBuffer& in, const FlatBuffer& out) const {
  EMBER_CHECK(in.count == out.count * size_ && out.dtype == in.dtype && out.device == in.device,
              "reduce_scatter: input must hold ", out.count * size_, " ", out.dtype,
              " elements on ", out.device, " (", size_, " ranks x ", out.count, "), got ", in.count,
              " ", in.dtype, " on ", in.device);
}

void Communicator::check_all_to_all(const FlatBuffer& in, const FlatBuffer& out) const {
  EMBER_CHECK(in.count == out.count && in.dtype == out.dtype && in.device == out.device,
              "all_to_all: input (", in.count, " ", in.dtype, " on ", in.device, ") and output (",
              out.count, " ", out.dtype, " on ", out.device,
              ") must match in count, dtype and device");
  EMBER_CHECK(in.count % size_ == 0, "all_to_all: ", in.count, " elements do not split into ",
              size_, " equal blocks");
  EMBER_CHECK(in.data != out.data || in.count == 0,
              "all_to_all: input and output are the same "
              "buffer; it cannot run in place");
}

std::shared_ptr<Work> Communicator::all_reduce_async(const Tensor& t, ReduceOp op,
                                                     const std::string& label) {
  check_tensor("all_reduce", t);
  auto work = all_reduce_async(FlatBuffer::of(t), op, label);
  work->keep_alive(t);
  t.bump_version();
  return work;
}

void Communicator::all_reduce(const Tensor& t, ReduceOp op) {
  all_reduce_async(t, op)->wait();
}

void Communicator::broadcast(const Tensor& t, int root) {
  check_tensor("broadcast", t);
  EMBER_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of ", size_);
  broadcast_async(FlatBuffer::of(t), root)->wait();
  t.bump_version();
}

Tensor Communicator::all_gather(const Tensor& t) {
  check_tensor("all_gather", t);
  EMBER_CHECK(t.dim() >= 1, "all_gather: needs a tensor with at least one dimension");
  Shape out_sizes = t.sizes();
  out_sizes[0] *= size_;
  Tensor out = empty(out_sizes, TensorOptions().dtype(t.dtype()).device(device_));
  all_gather_async(FlatBuffer::of(t), FlatBuffer::of(out))->wait();
  return out;
}

Tensor Communicator::reduce_scatter(const Tensor& t, ReduceOp op) {
  check_tensor("reduce_scatter", t);
  EMBER_CHECK(t.dim() >= 1 && t.size(0) % size_ == 0, "reduce_scatter: dim 0 of shape ",
              shape_str(t.sizes()), " must be a multiple of the ", size_, " ranks");
  Shape out_sizes = t.sizes();
  out_sizes[0] /= size_;
  Tensor out = empty(out_sizes, TensorOptions().dtype(t.dtype()).device(device_));
  reduce_scatter_async(FlatBuffer::of(t), FlatBuffer::of(out), op)->wait();
  return out;
}

}  // namespace ember::parallel
