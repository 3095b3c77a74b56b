// Communicator argument checks and the single-process communicator (see communicator.h).
#include "dist/communicator.h"

namespace frugal::dist {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::average: return "average";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  FRUGAL_THROW(ValueError, "unknown reduce op ", static_cast<int>(op));
}

namespace {
// Collectives hand one flat buffer to MPI or NCCL, so the elements must be packed.
void check_packed(const Tensor& tensor, const char* op) {
  FRUGAL_CHECK_VALUE(tensor.defined(), op, ": the tensor is undefined");
  FRUGAL_CHECK_VALUE(tensor.is_contiguous(), op, ": the tensor of shape ", shape_str(tensor.shape()), " and strides ",
                     shape_str(tensor.strides()), " is not contiguous; collectives need one packed buffer");
}
}  // namespace

void Communicator::check_all_reduce(const Tensor& tensor, ReduceOp op) const {
  check_packed(tensor, "all_reduce");
  FRUGAL_CHECK_DTYPE(op != ReduceOp::average || is_floating(tensor.dtype()), "all_reduce: average needs a floating "
                     "dtype, got ", tensor.dtype());
}

void Communicator::check_broadcast(const Tensor& tensor, int root) const {
  check_packed(tensor, "broadcast");
  FRUGAL_CHECK_INDEX(root >= 0 && root < world_size(), "broadcast: root ", root, " is not a rank of a world of ",
                     world_size());
}

void LocalCommunicator::all_reduce(const Tensor& tensor, ReduceOp op, Stream) {
  check_all_reduce(tensor, op);  // one rank: the sum, average, max and min of one tensor are itself
}

void LocalCommunicator::broadcast(const Tensor& tensor, int root, Stream) {
  check_broadcast(tensor, root);  // the only possible root already holds the data
}

}  // namespace frugal::dist
