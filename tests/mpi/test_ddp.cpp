// DistributedDataParallel and ZeRO-1, -2 and -3 across real ranks (MpiCommunicator): N ranks each on
// B/N samples end with the parameters of one process trained on all B (every rank computes that
// reference itself, from the same seeds), with and without ZeRO-2 and -3; ZeRO-1, -2 and -3 end
// where plain DDP ends, gradients as bucket
// views end where copies end, construction makes differently initialised ranks equal, and a model
// that differs between ranks fails on every rank. The small CNN has no BatchNorm, so the averaged
// gradient of the per-rank means is the full batch's gradient up to float rounding.
#include <doctest/doctest.h>

#include <cmath>
#include <tuple>

#include "core/random.h"
#include "dist/ddp.h"
#include "dist/mpi_communicator.h"
#include "models/registry.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/optim.h"
#include "tests/mpi/mpi_fixtures.h"

using namespace frugal;
using namespace frugal::dist;
namespace F = frugal::functional;

namespace {

constexpr std::int64_t kBatch = 24;  // shares of 12, 8 or 6 samples for 2, 3 or 4 ranks, halved again by micro-batches
constexpr int kSteps = 3;
// One process and N ranks add the same products in different orders (per-rank sums, then the
// average), so float32 results differ by rounding: a few ulps per step, grown a little by later
// steps. Measured worst differences: 7.5e-9 (DDP against one process, SGD) and 4.2e-7 (ZeRO-1
// against DDP, AdamW, 3 ranks); 1e-5 absolute plus 1e-4 relative leaves room and still catches a
// missing average (a factor of N), a lost bucket or a slice stepped twice (differences of 1e-2 and more).
constexpr double kAbsolute = 1e-5, kRelative = 1e-4;
// AdamW divides by the root of its second moments, which for tiny gradients are tiny: there an ulp
// of a reduced gradient moves an update by far more. Measured worst with 4 ranks: 3.3e-5 (ZeRO-1 and
// -2 against DDP, kBatch 24); 1e-4 still catches the same faults.
constexpr double kAdamAbsolute = 1e-4;

std::shared_ptr<nn::Module> make_cnn(std::uint64_t seed, std::int64_t classes = 4) {
  Generator generator(seed);
  return models::make_model("cnn", {.num_classes = classes, .in_channels = 1, .generator = &generator});
}

struct Batch {
  Tensor x, y;
};
Batch full_batch(int step) {
  Generator generator(100 + static_cast<std::uint64_t>(step));
  return {normal({kBatch, 1, 8, 8}, 0.0, 1.0, {}, &generator), randint(0, 4, {kBatch}, {.dtype = DType::i64}, &generator)};
}
Batch share_of(const Batch& b, int rank, int world) {
  const std::int64_t n = kBatch / world;
  return {b.x.narrow(0, rank * n, n).contiguous(), b.y.narrow(0, rank * n, n).contiguous()};
}

void backward(nn::Module& model, const Batch& b) { autograd::backward(F::cross_entropy(model(b.x), b.y)); }

std::vector<float> flat_values(const nn::Module& model) {
  std::vector<float> out;
  for (const Tensor& p : model.parameters())
    for (const float v : p.to_vector<float>()) out.push_back(v);
  return out;
}

double worst_difference(const std::vector<float>& a, const std::vector<float>& b, double relative) {
  REQUIRE(a.size() == b.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) - relative * std::abs(b[i]));
  return worst;
}

using MakeOptimizer = std::function<std::unique_ptr<nn::Optimizer>(std::vector<nn::ParamGroup>)>;
MakeOptimizer sgd = [](std::vector<nn::ParamGroup> g) { return std::make_unique<nn::SGD>(std::move(g), 0.9); };
MakeOptimizer adamw = [](std::vector<nn::ParamGroup> g) { return std::make_unique<nn::AdamW>(std::move(g)); };

std::vector<nn::ParamGroup> groups_of(const nn::Module& model) {
  std::vector<nn::ParamGroup> groups{{.params = {}, .lr = 0.05, .weight_decay = 0.01}, {.params = {}, .lr = 0.02, .weight_decay = 0.0}};
  for (const auto& [name, p] : model.named_parameters()) groups[name.ends_with("bias") ? 1 : 0].params.push_back(p);
  return groups;
}

// kSteps of training on this rank's share, with `micro` micro-batches per step (no_sync on all but
// the last); with ZeRO the sharded optimizer steps.
std::vector<float> train_ddp(Communicator& comm, const MakeOptimizer& make, DdpOptions options, int micro = 1,
                             bool report = false) {
  auto model = make_cnn(7 + static_cast<std::uint64_t>(comm.rank()));  // rank 0's weights win at construction
  DistributedDataParallel ddp(*model, comm, options);
  const std::unique_ptr<nn::Optimizer> optimizer =
      options.zero > 0 ? ddp.shard_optimizer(make, groups_of(*model)) : make(groups_of(*model));
  for (int step = 0; step < kSteps; ++step) {
    const Batch mine = share_of(full_batch(step), comm.rank(), comm.world_size());
    for (int m = 0; m < micro; ++m) {
      const std::int64_t n = mine.x.size(0) / micro;
      const Batch part{mine.x.narrow(0, m * n, n).contiguous(), mine.y.narrow(0, m * n, n).contiguous()};
      auto loss = [&] { autograd::backward(F::mul(F::cross_entropy((*model)(part.x), part.y), 1.0 / micro)); };
      if (m + 1 < micro) {
        const auto guard = ddp.no_sync();
        loss();
      } else {
        loss();
      }
    }
    ddp.synchronize();
    optimizer->step();
    optimizer->zero_grad();
  }
  CHECK(ddp.start_order().size() == ddp.buckets().size());
  if (report)
    MESSAGE("rank ", comm.rank(), ": ", ddp.buckets().size(), " buckets; ", kSteps, " steps waited ", ddp.wait_seconds() * 1e3,
            " ms of ", ddp.communication_seconds() * 1e3, " ms in flight");
  const auto whole = ddp.full_parameters();  // ZeRO-3: every rank gathers them (nothing to do otherwise)
  return flat_values(*model);
}

std::vector<float> train_alone(const MakeOptimizer& make) {
  auto model = make_cnn(7);
  const std::unique_ptr<nn::Optimizer> optimizer = make(groups_of(*model));
  for (int step = 0; step < kSteps; ++step) {
    backward(*model, full_batch(step));
    optimizer->step();
    optimizer->zero_grad();
  }
  return flat_values(*model);
}

// Small buckets, so the CNN's 94 k parameters make several and their all-reduces overlap backward.
constexpr DdpOptions kSmallBuckets{.bucket_cap_bytes = 64 << 10, .first_bucket_cap_bytes = 16 << 10};

}  // namespace

TEST_CASE("DDP over N ranks on B/N samples each ends where one process on B ends") {
  MpiCommunicator comm;
  comm.set_timeout(test::kTestTimeout);
  const std::vector<float> alone = train_alone(sgd);
  const std::vector<float> ddp = train_ddp(comm, sgd, kSmallBuckets, 1, true);
  const double worst = worst_difference(ddp, alone, kRelative);
  MESSAGE("rank ", comm.rank(), " of ", comm.world_size(), ": worst |ddp - alone| = ", worst_difference(ddp, alone, 0.0));
  CHECK(worst <= kAbsolute);
  // Two micro-batches per step under no_sync: the same again.
  CHECK(worst_difference(train_ddp(comm, sgd, kSmallBuckets, 2), alone, kRelative) <= kAbsolute);
  // ZeRO-2 (the gradients and the state sharded) and ZeRO-3 (the parameters too), one micro-batch and two.
  for (const int stage : {2, 3})
    for (const int micro : {1, 2}) {
      CAPTURE(stage);
      CAPTURE(micro);
      DdpOptions zero = kSmallBuckets;
      zero.zero = stage;
      const std::vector<float> sharded = train_ddp(comm, sgd, zero, micro);
      MESSAGE("rank ", comm.rank(), " of ", comm.world_size(), ", ", micro, " micro-batches: worst |zero", stage,
              " - alone| = ", worst_difference(sharded, alone, 0.0));
      CHECK(worst_difference(sharded, alone, kRelative) <= kAbsolute);
    }
}

TEST_CASE("DDP: gradients as bucket views end exactly where copies end") {
  MpiCommunicator comm;
  comm.set_timeout(test::kTestTimeout);
  DdpOptions views = kSmallBuckets;
  views.gradient_as_bucket_view = true;
  CHECK(train_ddp(comm, adamw, views) == train_ddp(comm, adamw, kSmallBuckets));
}

TEST_CASE("ZeRO-1, -2 and -3 end where plain DDP ends, with AdamW and with SGD, holding 1/N of the state") {
  MpiCommunicator comm;
  comm.set_timeout(test::kTestTimeout);
  for (const auto& [name, make, tolerance] : {std::tuple{"AdamW", adamw, kAdamAbsolute}, std::tuple{"SGD", sgd, kAbsolute}})
    for (const int stage : {1, 2, 3}) {
      CAPTURE(std::string(name));
      CAPTURE(stage);
      DdpOptions zero = kSmallBuckets;
      zero.zero = stage;
      const std::vector<float> plain = train_ddp(comm, make, kSmallBuckets), sharded = train_ddp(comm, make, zero);
      // Not bit-equal: MPI may add the ranks' chunks in another order in reduce_scatter than in
      // all_reduce, and AdamW divides by the root of tiny second moments, so ulps grow.
        MESSAGE(std::string(name), " rank ", comm.rank(), ": worst |zero", stage, " - ddp| = ", worst_difference(sharded, plain, 0.0));
      CHECK(worst_difference(sharded, plain, kRelative) <= tolerance);
    }
  // The state: about a third (or half) here, and the consolidated dict is the unsharded one's.
  auto model = make_cnn(7), reference = make_cnn(7);
  DistributedDataParallel ddp(*model, comm, {.zero = 1});
  const auto sharded = ddp.shard_optimizer(adamw, groups_of(*model));
  const auto plain = adamw(groups_of(*reference));
  const Batch mine = share_of(full_batch(0), comm.rank(), comm.world_size());
  backward(*model, mine);
  ddp.synchronize();
  sharded->step();
  backward(*reference, full_batch(0));
  plain->step();
  const auto params = static_cast<std::size_t>(model->parameter_count());
  CHECK(sharded->state_bytes() <= 2 * sizeof(float) * (params / static_cast<std::size_t>(comm.world_size()) + 1));
  const nn::StateDict ours = sharded->state_dict(), theirs = plain->state_dict();
  REQUIRE(ours.size() == theirs.size());
  for (std::size_t i = 0; i < ours.size(); ++i) {
    CAPTURE(ours[i].first);
    CHECK(ours[i].first == theirs[i].first);
    CHECK(worst_difference(ours[i].second.to_vector<float>(), theirs[i].second.to_vector<float>(), kRelative) <= kAbsolute);
  }
}

TEST_CASE("DDP construction: differently initialised ranks start equal, and a different model fails on every rank") {
  MpiCommunicator comm;
  comm.set_timeout(test::kTestTimeout);
  auto model = make_cnn(50 + static_cast<std::uint64_t>(comm.rank()));
  DistributedDataParallel ddp(*model, comm);
  CHECK(flat_values(*model) == flat_values(*make_cnn(50)));

  auto other = make_cnn(1, comm.rank() == 1 ? 5 : 4);  // rank 1 has five classes
  CHECK_THROWS_WITH_AS(DistributedDataParallel(*other, comm),
                       doctest::Contains("differ at parameter-or-buffer #6 (parameters, then buffers, in registration order): "
                                         "rank 1 differs from rank 0 there"),
                       DistributedError);
}
