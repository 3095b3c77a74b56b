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

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::barrier: return "barrier";
  }
  FRUGAL_THROW(ValueError, "unknown collective ", static_cast<int>(kind));
}

std::array<std::int64_t, kDescriptorWords> encode(const CollectiveDescriptor& d) {
  return {d.sequence, static_cast<std::int64_t>(d.kind), static_cast<std::int64_t>(d.dtype), d.count, d.root,
          static_cast<std::int64_t>(d.op)};
}

CollectiveDescriptor decode(const std::int64_t* words) {
  return {.sequence = words[0],
          .kind = static_cast<CollectiveKind>(words[1]),
          .dtype = static_cast<DType>(words[2]),
          .count = words[3],
          .root = static_cast<int>(words[4]),
          .op = static_cast<ReduceOp>(words[5])};
}

std::string describe(const CollectiveDescriptor& d) {
  std::string text = detail::str(collective_name(d.kind), " #", d.sequence);
  if (d.kind == CollectiveKind::barrier) return text;
  text += detail::str(" of ", d.count, " ", d.dtype);
  if (d.kind == CollectiveKind::all_reduce || d.kind == CollectiveKind::reduce_scatter)
    text += detail::str(" (", reduce_op_name(d.op), ")");
  if (d.kind == CollectiveKind::broadcast) text += detail::str(" from rank ", d.root);
  return text;
}

std::string descriptor_mismatch(const std::vector<CollectiveDescriptor>& by_rank) {
  if (by_rank.empty()) return "";
  const CollectiveDescriptor& first = by_rank.front();
  const std::string name = detail::str(collective_name(first.kind), " #", first.sequence);
  for (std::size_t r = 1; r < by_rank.size(); ++r) {
    const CollectiveDescriptor& other = by_rank[r];
    if (other.sequence != first.sequence || other.kind != first.kind)
      return detail::str(name, ": rank 0 called ", describe(first), " but rank ", r, " called ", describe(other));
    if (other.dtype != first.dtype || other.count != first.count)
      return detail::str(name, ": rank 0 has ", first.count, " ", first.dtype, " elements but rank ", r, " has ",
                         other.count, " ", other.dtype);
    if (other.root != first.root)
      return detail::str(name, ": rank 0 broadcasts from rank ", first.root, " but rank ", r, " from rank ", other.root);
    if (other.op != first.op)
      return detail::str(name, ": rank 0 reduces with ", reduce_op_name(first.op), " but rank ", r, " with ",
                         reduce_op_name(other.op));
  }
  return "";
}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  FRUGAL_CHECK_VALUE(timeout.count() > 0, "Communicator: the timeout must be > 0 ms, got ", timeout.count());
  timeout_ = timeout;
}

namespace {
// Collectives hand one flat buffer to MPI or NCCL, so the elements must be packed.
void check_packed(const Tensor& tensor, const char* op, const char* which) {
  FRUGAL_CHECK_VALUE(tensor.defined(), op, ": the ", which, " tensor is undefined");
  FRUGAL_CHECK_VALUE(tensor.is_contiguous(), op, ": the ", which, " tensor of shape ", shape_str(tensor.shape()),
                     " and strides ", shape_str(tensor.strides()), " is not contiguous; collectives need one packed buffer");
}

void check_reducible(const Tensor& tensor, ReduceOp op, const char* name) {
  FRUGAL_CHECK_DTYPE(op != ReduceOp::average || is_floating(tensor.dtype()), name, ": average needs a floating dtype, got ",
                     tensor.dtype());
}

void check_pair(const Tensor& input, const Tensor& output, const char* op) {
  check_packed(input, op, "input");
  check_packed(output, op, "output");
  FRUGAL_CHECK_DTYPE(input.dtype() == output.dtype(), op, ": input is ", input.dtype(), " but output is ", output.dtype());
  FRUGAL_CHECK_DEVICE(input.device() == output.device(), op, ": input is on ", input.device(), " but output on ",
                      output.device());
}
}  // namespace

void Communicator::check_all_reduce(const Tensor& tensor, ReduceOp op) const {
  check_packed(tensor, "all_reduce", "given");
  check_reducible(tensor, op, "all_reduce");
}

void Communicator::check_broadcast(const Tensor& tensor, int root) const {
  check_packed(tensor, "broadcast", "given");
  FRUGAL_CHECK_INDEX(root >= 0 && root < world_size(), "broadcast: root ", root, " is not a rank of a world of ",
                     world_size());
}

void Communicator::check_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) const {
  check_pair(input, output, "reduce_scatter");
  check_reducible(input, op, "reduce_scatter");
  FRUGAL_CHECK_SHAPE(input.numel() == output.numel() * world_size(), "reduce_scatter: input has ", input.numel(),
                     " elements, but a world of ", world_size(), " needs ", world_size(), " x the output's ",
                     output.numel());
}

void Communicator::check_all_gather(const Tensor& input, const Tensor& output) const {
  check_pair(input, output, "all_gather");
  FRUGAL_CHECK_SHAPE(output.numel() == input.numel() * world_size(), "all_gather: output has ", output.numel(),
                     " elements, but a world of ", world_size(), " needs ", world_size(), " x the input's ",
                     input.numel());
}

// One rank: the sum, average, max and min of one tensor are itself, the root already holds the
// data, and its only chunk (or the gathered whole) is its own input.
WorkHandle LocalCommunicator::all_reduce_async(const Tensor& tensor, ReduceOp op, Stream) {
  check_all_reduce(tensor, op);
  return std::make_shared<CompletedWork>();
}

WorkHandle LocalCommunicator::broadcast_async(const Tensor& tensor, int root, Stream) {
  check_broadcast(tensor, root);
  return std::make_shared<CompletedWork>();
}

WorkHandle LocalCommunicator::reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op, Stream) {
  check_reduce_scatter(input, output, op);
  if (input.data_ptr() != output.data_ptr()) output.view({-1}).copy_(input.view({-1}));
  return std::make_shared<CompletedWork>();
}

WorkHandle LocalCommunicator::all_gather_async(const Tensor& input, const Tensor& output, Stream) {
  check_all_gather(input, output);
  if (input.data_ptr() != output.data_ptr()) output.view({-1}).copy_(input.view({-1}));
  return std::make_shared<CompletedWork>();
}

}  // namespace frugal::dist
