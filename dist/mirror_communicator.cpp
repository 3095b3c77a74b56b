// MirrorCommunicator (see mirror_communicator.h): each collective computed from this rank's tensor
// alone, since every rank holds the same. On the meta device the copies and products do nothing.
#include "dist/mirror_communicator.h"

#include "kernels/elementwise.h"

namespace frugal::dist {

namespace {
// N identical contributions: the sum is N times one; average, max and min are the one.
void reduce_identical(const Tensor& target, const Tensor& source, ReduceOp op, int world_size) {
  if (op == ReduceOp::sum && world_size > 1)
    Tensor(target).copy_(mul(source, static_cast<double>(world_size)));
  else if (target.data_ptr() != source.data_ptr())
    Tensor(target).copy_(source);
}
}  // namespace

MirrorCommunicator::MirrorCommunicator(int world_size) : world_size_(world_size) {
  FRUGAL_CHECK_VALUE(world_size >= 1, "MirrorCommunicator: the world size must be >= 1, got ", world_size);
}

WorkHandle MirrorCommunicator::all_reduce_async(const Tensor& tensor, ReduceOp op, Stream) {
  check_all_reduce(tensor, op);
  reduce_identical(tensor, tensor, op, world_size_);
  return std::make_shared<CompletedWork>();
}

WorkHandle MirrorCommunicator::broadcast_async(const Tensor& tensor, int root, Stream) {
  check_broadcast(tensor, root);  // every rank, the root included, holds this tensor already
  return std::make_shared<CompletedWork>();
}

// Rank 0's chunk of everyone's input: the first chunk of this one's, reduced over N identical copies.
WorkHandle MirrorCommunicator::reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op, Stream) {
  check_reduce_scatter(input, output, op);
  reduce_identical(output.view({-1}), input.view({-1}).narrow(0, 0, output.numel()), op, world_size_);
  return std::make_shared<CompletedWork>();
}

WorkHandle MirrorCommunicator::all_gather_async(const Tensor& input, const Tensor& output, Stream) {
  check_all_gather(input, output);
  const Tensor flat = output.view({-1});
  for (int r = 0; r < world_size_; ++r) {
    Tensor chunk = flat.narrow(0, r * input.numel(), input.numel());
    // In place (ZeRO's gather: the input is this rank's chunk of the output) a real backend moves
    // nothing for it; copying a tensor onto itself would make a temporary the planner must not see.
    if (chunk.data_ptr() != input.data_ptr()) chunk.copy_(input.view({-1}));
  }
  return std::make_shared<CompletedWork>();
}

}  // namespace frugal::dist
