// The communicator interface through LocalCommunicator: a world of one keeps every tensor as it
// is, and bad arguments are refused the way every backend refuses them.
#include <doctest/doctest.h>

#include "dist/communicator.h"
#include "dist/mirror_communicator.h"

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

TEST_CASE("LocalCommunicator: reduce_scatter and all_gather of a world of one copy the one chunk") {
  LocalCommunicator comm;
  const Tensor input = from_vector(std::vector<float>{1, 2, 3, 4});
  const Tensor output = zeros({2, 2});
  const WorkHandle work = comm.reduce_scatter_async(input, output, ReduceOp::average);
  CHECK(work->completed());
  work->wait();
  CHECK(output.view({-1}).to_vector<float>() == input.to_vector<float>());
  const Tensor gathered = zeros({4});
  comm.all_gather(output, gathered);
  CHECK(gathered.to_vector<float>() == input.to_vector<float>());
  comm.barrier_async()->wait();
}

TEST_CASE("Communicator: reduce_scatter, all_gather and the timeout refuse what cannot work") {
  LocalCommunicator comm;
  CHECK_THROWS_WITH_AS(comm.reduce_scatter(zeros({4}), zeros({3}), ReduceOp::sum),
                       doctest::Contains("input has 4 elements, but a world of 1 needs 1 x the output's 3"), ShapeError);
  CHECK_THROWS_WITH_AS(comm.all_gather(zeros({4}), zeros({4}, {.dtype = DType::f64})),
                       doctest::Contains("input is f32 but output is f64"), DTypeError);
  CHECK_THROWS_WITH_AS(comm.all_gather(zeros({4}), zeros({5})), doctest::Contains("output has 5 elements"), ShapeError);
  CHECK_THROWS_WITH_AS(comm.reduce_scatter(zeros({4}, {.dtype = DType::i32}), zeros({4}, {.dtype = DType::i32}),
                                           ReduceOp::average),
                       doctest::Contains("average needs a floating dtype"), DTypeError);
  CHECK(comm.timeout() == Communicator::kDefaultTimeout);
  comm.set_timeout(std::chrono::milliseconds(1500));
  CHECK(comm.timeout().count() == 1500);
  CHECK_THROWS_AS(comm.set_timeout(std::chrono::milliseconds(0)), ValueError);
}

TEST_CASE("CollectiveDescriptor: encoded for the exchange, and the first disagreement named") {
  const CollectiveDescriptor d{.sequence = 17, .kind = CollectiveKind::all_reduce, .dtype = DType::f32, .count = 1024,
                               .root = 0, .op = ReduceOp::average};
  const auto words = encode(d);
  const CollectiveDescriptor back = decode(words.data());
  CHECK(describe(back) == "all_reduce #17 of 1024 f32 (average)");
  CHECK(descriptor_mismatch({d, d, d}).empty());
  CollectiveDescriptor smaller = d;
  smaller.count = 512;
  CHECK(descriptor_mismatch({d, d, smaller}) == "all_reduce #17: rank 0 has 1024 f32 elements but rank 2 has 512 f32");
  CollectiveDescriptor other = d;
  other.kind = CollectiveKind::barrier;
  CHECK(descriptor_mismatch({d, other}) == "all_reduce #17: rank 0 called all_reduce #17 of 1024 f32 (average) but rank 1 "
                                           "called barrier #17");
  CollectiveDescriptor summed = d;
  summed.op = ReduceOp::sum;
  CHECK(descriptor_mismatch({d, summed}) == "all_reduce #17: rank 0 reduces with average but rank 1 with sum");
  const CollectiveDescriptor b{.sequence = 3, .kind = CollectiveKind::broadcast, .dtype = DType::u8, .count = 128, .root = 1};
  CHECK(describe(b) == "broadcast #3 of 128 u8 from rank 1");
}

TEST_CASE("MirrorCommunicator: a world of N where every rank holds what this one holds") {
  MirrorCommunicator comm(3);
  CHECK(comm.world_size() == 3);
  CHECK(comm.rank() == 0);
  const Tensor t = from_vector(std::vector<float>{1, -2});
  comm.all_reduce(t, ReduceOp::sum);
  CHECK(t.to_vector<float>() == std::vector<float>{3, -6});
  comm.all_reduce(t, ReduceOp::average);
  comm.all_reduce(t, ReduceOp::max);
  CHECK(t.to_vector<float>() == std::vector<float>{3, -6});
  const Tensor gathered = zeros({6});
  comm.all_gather(t, gathered);
  CHECK(gathered.to_vector<float>() == std::vector<float>{3, -6, 3, -6, 3, -6});
  const Tensor chunk = zeros({2});
  comm.reduce_scatter(gathered, chunk, ReduceOp::sum);
  CHECK(chunk.to_vector<float>() == std::vector<float>{9, -18});
  CHECK_THROWS_AS(comm.reduce_scatter(t, chunk, ReduceOp::sum), ShapeError);
  CHECK_THROWS_AS(MirrorCommunicator(0), ValueError);
  // On the meta device (the planner's) the collectives check shapes and move nothing.
  const Tensor meta = empty({8}, {.device = Device::meta()});
  comm.all_reduce(meta, ReduceOp::sum);
  comm.all_gather(meta, empty({24}, {.device = Device::meta()}));
}
