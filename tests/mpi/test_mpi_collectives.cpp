// MpiCommunicator across ranks: every collective, op and dtype against the reduction each rank
// computes locally from what every rank contributes (tests/mpi/mpi_fixtures.h).
#include <doctest/doctest.h>

#include "dist/mpi_communicator.h"
#include "tests/mpi/mpi_fixtures.h"

using namespace frugal;
using namespace frugal::dist;
using frugal::test::contribution_tensor;
using frugal::test::contributions;
using frugal::test::reference;

namespace {
constexpr std::int64_t kElements = 1000;  // not a multiple of anything MPI might split on
constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};

// The world size times kElements, rounded up to a multiple of the world size for reduce_scatter.
std::int64_t chunked(int world_size) { return (kElements / world_size + 1) * world_size; }
}  // namespace

TEST_CASE("MpiCommunicator: the world and the backend") {
  MpiCommunicator comm;
  CHECK(comm.backend() == "mpi");
  CHECK(comm.world_size() >= 2);  // run by mpirun -np 2 or more (tests/CMakeLists.txt)
  CHECK(comm.rank() >= 0);
  CHECK(comm.rank() < comm.world_size());
}

TEST_CASE("MpiCommunicator: all_reduce of every dtype and op matches the local reference") {
  MpiCommunicator comm;
  comm.set_timeout(test::kTestTimeout);
  for (DType dtype : kDTypes) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max, ReduceOp::min}) {
      if (op == ReduceOp::average && !is_floating(dtype)) continue;
      const Tensor t = contribution_tensor(comm.rank(), kElements, dtype);
      comm.all_reduce(t, op);
      CHECK_MESSAGE(t.to_vector<double>() == reference(op, comm.world_size(), kElements, dtype), dtype, " ",
                    reduce_op_name(op));
    }
  }
}

TEST_CASE("MpiCommunicator: broadcast from every root, the non-zero ones too") {
  MpiCommunicator comm;
  comm.set_timeout(test::kTestTimeout);
  for (DType dtype : {DType::f32, DType::bf16, DType::i64, DType::u8, DType::boolean}) {
    for (int root = 0; root < comm.world_size(); ++root) {
      const Tensor t = contribution_tensor(comm.rank(), kElements, dtype);
      comm.broadcast(t, root);
      CHECK_MESSAGE(t.to_vector<double>() == contribution_tensor(root, kElements, dtype).to_vector<double>(), dtype,
                    " from root ", root);
    }
  }
}

TEST_CASE("MpiCommunicator: reduce_scatter gives each rank its chunk of the reduction") {
  MpiCommunicator comm;
  comm.set_timeout(test::kTestTimeout);
  const std::int64_t n = chunked(comm.world_size());
  const std::int64_t chunk = n / comm.world_size();
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::u8}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max, ReduceOp::min}) {
      if (op == ReduceOp::average && !is_floating(dtype)) continue;
      const std::vector<double> whole = reference(op, comm.world_size(), n, dtype);
      const std::vector<double> expected(whole.begin() + comm.rank() * chunk, whole.begin() + (comm.rank() + 1) * chunk);
      const Tensor output = zeros({chunk}, {.dtype = dtype});
      comm.reduce_scatter(contribution_tensor(comm.rank(), n, dtype), output, op);
      CHECK_MESSAGE(output.to_vector<double>() == expected, dtype, " ", reduce_op_name(op));
      // The output may be the rank's own chunk of the input (MPI needs apart buffers: copied through).
      const Tensor input = contribution_tensor(comm.rank(), n, dtype);
      const Tensor own = input.narrow(0, comm.rank() * chunk, chunk);
      comm.reduce_scatter(input, own, op);
      CHECK_MESSAGE(own.to_vector<double>() == expected, dtype, " ", reduce_op_name(op), " into its own chunk");
    }
  }
}

TEST_CASE("MpiCommunicator: all_gather concatenates every rank's input in rank order") {
  MpiCommunicator comm;
  comm.set_timeout(test::kTestTimeout);
  const int world = comm.world_size();
  for (DType dtype : {DType::f32, DType::f16, DType::i64, DType::u8}) {
    std::vector<double> expected;
    for (int r = 0; r < world; ++r) {
      const std::vector<double> theirs = contribution_tensor(r, kElements, dtype).to_vector<double>();
      expected.insert(expected.end(), theirs.begin(), theirs.end());
    }
    const Tensor output = zeros({world * kElements}, {.dtype = dtype});
    comm.all_gather(contribution_tensor(comm.rank(), kElements, dtype), output);
    CHECK_MESSAGE(output.to_vector<double>() == expected, dtype);
    // In place: the input is the rank's own slot of the output.
    const Tensor gathered = zeros({world * kElements}, {.dtype = dtype});
    Tensor slot = gathered.narrow(0, comm.rank() * kElements, kElements);
    slot.copy_(contribution_tensor(comm.rank(), kElements, dtype));
    comm.all_gather(slot, gathered);
    CHECK_MESSAGE(gathered.to_vector<double>() == expected, dtype, " in place");
  }
}

TEST_CASE("MpiCommunicator: barrier and several collectives in flight, waited in any order") {
  MpiCommunicator comm;
  comm.set_timeout(test::kTestTimeout);
  comm.barrier();
  std::vector<Tensor> tensors;
  std::vector<WorkHandle> works;
  for (int i = 0; i < 6; ++i) {
    tensors.push_back(contribution_tensor(comm.rank() + i, kElements, DType::f32));
    works.push_back(i % 2 == 0 ? comm.all_reduce_async(tensors.back(), ReduceOp::sum)
                               : comm.broadcast_async(tensors.back(), i % comm.world_size()));
  }
  works.push_back(comm.barrier_async());
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();  // last first
  for (const WorkHandle& work : works) CHECK(work->completed());
  for (int i = 0; i < 6; ++i) {
    std::vector<double> expected;
    if (i % 2 == 0) {
      expected = std::vector<double>(kElements, 0.0);
      for (int r = 0; r < comm.world_size(); ++r) {
        const std::vector<double> theirs = contributions(r + i, kElements, false);
        for (std::size_t k = 0; k < expected.size(); ++k) expected[k] += theirs[k];
      }
    } else {
      expected = contributions(i % comm.world_size() + i, kElements, false);
    }
    CHECK_MESSAGE(tensors[static_cast<std::size_t>(i)].to_vector<double>() == expected, "collective ", i);
  }
}

TEST_CASE("MpiCommunicator: refuses tensors that are not on the CPU, and bool reductions") {
  MpiCommunicator comm;
  CHECK_THROWS_WITH_AS(comm.all_reduce(zeros({4}, {.device = Device::meta()}), ReduceOp::sum),
                       doctest::Contains("MPI moves CPU tensors only"), DeviceError);
  CHECK_THROWS_WITH_AS(comm.all_reduce(zeros({4}, {.dtype = DType::boolean}), ReduceOp::max),
                       doctest::Contains("bool tensors move but do not reduce"), DTypeError);
  comm.barrier();  // the refusals queued nothing: the ranks are still in step
}
