// The communicator interface through LocalCommunicator: a world of one keeps every tensor as it
// is, and bad arguments are refused the way every backend refuses them.
#include <doctest/doctest.h>

#include "dist/communicator.h"

using namespace frugal;
using namespace frugal::dist;

TEST_CASE("LocalCommunicator: a world of one process") {
  LocalCommunicator local;
  Communicator& comm = local;
  CHECK(comm.rank() == 0);
  CHECK(comm.world_size() == 1);
  CHECK(comm.backend() == "local");
  const std::vector<float> original{1.5f, -2.0f, 3.0f};
  const Tensor t = from_vector(original);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max, ReduceOp::min}) {
    comm.all_reduce(t, op);
    CHECK_MESSAGE(t.to_vector<float>() == original, reduce_op_name(op));
  }
  comm.broadcast(t, 0);
  CHECK(t.to_vector<float>() == original);
  comm.barrier();
}

TEST_CASE("Communicator: bad arguments are refused with the reason") {
  LocalCommunicator comm;
  const Tensor m = zeros({2, 3});
  CHECK_THROWS_WITH_AS(comm.all_reduce(m.t(), ReduceOp::sum), doctest::Contains("is not contiguous"), ValueError);
  CHECK_THROWS_WITH_AS(comm.all_reduce(zeros({2}, {.dtype = DType::i64}), ReduceOp::average),
                       doctest::Contains("average needs a floating dtype, got i64"), DTypeError);
  CHECK_NOTHROW(comm.all_reduce(zeros({2}, {.dtype = DType::i64}), ReduceOp::sum));
  CHECK_THROWS_WITH_AS(comm.broadcast(m, 1), doctest::Contains("root 1 is not a rank of a world of 1"), IndexError);
  CHECK_THROWS_AS(comm.broadcast(Tensor(), 0), ValueError);
}
