// The NCCL communicator across ranks, one GPU per rank: every collective against the reduction each
// rank computes locally (tests/mpi/mpi_fixtures.h), and DDP's gradient average on the GPUs. Built
// with CUDA only, and skipped in the ordinary runs (doctest::skip): `gpu.nccl_ranks2` runs these
// cases alone, under `mpirun -np 2 frugal_mpi_tests --nccl`, where main() first checks that the
// machine has a GPU for every rank (NCCL refuses two ranks on one GPU) and reports Skipped otherwise.
#include <doctest/doctest.h>

#include "core/cuda_status.h"
#include "dist/ddp.h"
#include "dist/mpi_communicator.h"
#include "dist/mpi_runtime.h"
#include "dist/nccl_communicator.h"
#include "models/registry.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "tests/mpi/mpi_fixtures.h"

using namespace frugal;
using namespace frugal::dist;
using frugal::test::contribution_tensor;
using frugal::test::reference;

namespace {
constexpr std::int64_t kElements = 1000;

struct NcclWorld {
  std::unique_ptr<Communicator> mpi = make_mpi_communicator();
  Device gpu = Device::cuda(device_for_local_rank(mpi_local_rank(), cuda_status().device_count));
  std::unique_ptr<Communicator> nccl = make_nccl_communicator(*mpi, gpu.index());
  NcclWorld() {
    mpi->set_timeout(test::kTestTimeout);
    nccl->set_timeout(test::kTestTimeout);
  }
};

std::vector<double> on_host(const Tensor& t) { return t.to(Device::cpu()).to_vector<double>(); }
}  // namespace

TEST_CASE("NCCL across ranks: all_reduce, broadcast, reduce_scatter and all_gather match the reference" *
          doctest::skip()) {
  NcclWorld w;
  const int n = w.nccl->world_size(), rank = w.nccl->rank();
  for (DType dtype : {DType::f32, DType::f64, DType::i64})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      const Tensor t = contribution_tensor(rank, kElements, dtype).to(w.gpu);
      w.nccl->all_reduce(t, op);
      CHECK_MESSAGE(on_host(t) == reference(op, n, kElements, dtype), dtype, " ", reduce_op_name(op));
    }
  const Tensor averaged = contribution_tensor(rank, kElements, DType::f32).to(w.gpu);
  w.nccl->all_reduce(averaged, ReduceOp::average);
  const std::vector<double> expected = reference(ReduceOp::average, n, kElements, DType::f32), got = on_host(averaged);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-6));

  const Tensor rooted = contribution_tensor(rank, kElements, DType::f32).to(w.gpu);
  w.nccl->broadcast(rooted, n - 1);
  CHECK(on_host(rooted) == contribution_tensor(n - 1, kElements, DType::f32).to_vector<double>());

  const Tensor input = contribution_tensor(rank, kElements * n, DType::f32).to(w.gpu);
  const Tensor chunk = zeros({kElements}, {.device = w.gpu});
  w.nccl->reduce_scatter(input, chunk, ReduceOp::sum);
  const std::vector<double> whole = reference(ReduceOp::sum, n, kElements * n, DType::f32);
  CHECK(on_host(chunk) == std::vector<double>(whole.begin() + rank * kElements, whole.begin() + (rank + 1) * kElements));

  const Tensor gathered = zeros({kElements * n}, {.device = w.gpu});
  w.nccl->all_gather(contribution_tensor(rank, kElements, DType::f32).to(w.gpu), gathered);
  const std::vector<double> all = on_host(gathered);
  for (int r = 0; r < n; ++r)
    CHECK(std::vector<double>(all.begin() + r * kElements, all.begin() + (r + 1) * kElements) ==
          contribution_tensor(r, kElements, DType::f32).to_vector<double>());
  w.nccl->barrier();
}

TEST_CASE("NCCL across ranks: DDP's buckets average the ranks' gradients on their GPUs" * doctest::skip()) {
  NcclWorld w;
  const auto model = models::make_model("cnn", {.num_classes = 10, .in_channels = 1});
  model->to(w.gpu);
  DistributedDataParallel ddp(*model, *w.nccl, {.bucket_cap_bytes = 64 << 10, .first_bucket_cap_bytes = 64 << 10});
  // Each rank's own images: the average of the ranks' gradients is what every rank must hold after.
  const Tensor images = full({4, 1, 16, 16}, 0.1 * (w.nccl->rank() + 1), {.device = w.gpu});
  const Tensor labels = zeros({4}, {.dtype = DType::i64, .device = w.gpu});
  autograd::backward(functional::cross_entropy((*model)(images), labels));
  ddp.synchronize();
  for (const Tensor& p : model->parameters()) {
    const Tensor mine = autograd::grad(p).to(Device::cpu()).contiguous();
    const Tensor everyone = mine.clone();
    w.mpi->all_reduce(everyone, ReduceOp::max);  // after averaging, every rank holds the same gradient
    CHECK(mine.to_vector<float>() == everyone.to_vector<float>());
  }
}
