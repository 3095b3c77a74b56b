// GPU suite: the NCCL communicator with one rank (NCCL refuses two ranks on one GPU; more ranks run
// where two or more GPUs exist, through mpirun, see docs/distributed.md). A world of one still runs
// every NCCL call, the events ordering the communication stream after the caller's stream, and the
// watchdog's polling, so this catches wrong dtypes, counts and stream ordering.
#include <doctest/doctest.h>

#include "core/cuda_status.h"
#include "dist/nccl_communicator.h"
#include "tests/skip.h"

using namespace frugal;
using namespace frugal::dist;

namespace {
const Device kGpu = Device::cuda(0);

std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }
}  // namespace

TEST_CASE("NCCL communicator, one rank: every collective keeps or copies the one rank's data") {
  if (!kCudaLibraries) FRUGAL_SKIP("NCCL needs GPUs: this build has no NCCL (FRUGAL_CUDA=emulated)");
  LocalCommunicator bootstrap;
  const std::unique_ptr<Communicator> comm = make_nccl_communicator(bootstrap, 0);
  CHECK(comm->backend() == "nccl");
  CHECK(comm->world_size() == 1);
  const std::vector<float> values{1.5f, -2.0f, 3.0f, 4.0f};
  const Tensor t = from_vector(values).to(kGpu);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max, ReduceOp::min}) {
    comm->all_reduce(t, op);
    CHECK_MESSAGE(host(t) == values, reduce_op_name(op));
  }
  comm->broadcast(t, 0);
  const Tensor chunk = zeros({4}, {.device = kGpu});
  comm->reduce_scatter(t, chunk, ReduceOp::sum);
  CHECK(host(chunk) == values);
  const Tensor gathered = zeros({4}, {.device = kGpu});
  comm->all_gather(chunk, gathered);
  CHECK(host(gathered) == values);
  comm->barrier();
  for (DType dtype : {DType::f16, DType::bf16, DType::f64, DType::i64}) {
    const Tensor typed = t.to(dtype);
    comm->all_reduce(typed, ReduceOp::sum);
    CHECK(host(typed.to(DType::f32)) == values);
  }
}

TEST_CASE("NCCL communicator: the collective waits for the caller's stream and the caller for it") {
  if (!kCudaLibraries) FRUGAL_SKIP("NCCL needs GPUs: this build has no NCCL (FRUGAL_CUDA=emulated)");
  LocalCommunicator bootstrap;
  const std::unique_ptr<Communicator> comm = make_nccl_communicator(bootstrap, 0);
  Tensor big = zeros({1 << 22}, {.device = kGpu});
  big.copy_(full({1 << 22}, 2.0, {.device = kGpu}));  // default stream: queued before the collective
  const WorkHandle work = comm->all_reduce_async(big, ReduceOp::max);
  work->wait();
  CHECK(work->completed());
  CHECK(big.to(Device::cpu()).to_vector<float>()[(1 << 22) - 1] == 2.0f);
  CHECK_THROWS_AS(comm->all_reduce(zeros({4}), ReduceOp::sum), DeviceError);  // a CPU tensor
}
