// DistributedDataParallel and ZeRO-1 (dist/ddp.h) against a recording communicator: a world of
// `world` simulated ranks seen from one of them, in which every other rank's tensor is this rank's
// times a known factor, so every average is known in advance. It records each collective's kind,
// size and how many gradients backward had accumulated when it started. Checked: bucket
// boundaries, the order and moment collectives start, averaging, gradients as bucket views,
// no_sync accumulation, ZeRO-1 against the unsharded optimizers, and the errors. The same code
// over real ranks is tests/mpi/test_ddp.cpp.
#include <doctest/doctest.h>

#include <numeric>

#include "core/allocator.h"
#include "core/random.h"
#include "dist/ddp.h"
#include "kernels/elementwise.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/grad_scaler.h"
#include "nn/layers.h"
#include "nn/optim.h"

using namespace frugal;
using namespace frugal::dist;
namespace F = frugal::functional;

namespace {

class RecordingCommunicator final : public Communicator {
 public:
  struct Call {
    CollectiveKind kind;
    std::int64_t numel;
    int progress;  // gradients accumulated in the running backward when it started
  };

  // factors[j]: rank j's tensors are this rank's times factors[j] (this rank's own factor is 1).
  explicit RecordingCommunicator(int world = 1, int rank = 0, std::vector<double> factors = {})
      : world_(world), rank_(rank), factors_(factors.empty() ? std::vector<double>(static_cast<std::size_t>(world), 1.0) : factors) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string_view backend() const override { return "recording"; }

  WorkHandle all_reduce_async(const Tensor& tensor, ReduceOp op, Stream) override {
    check_all_reduce(tensor, op);
    record(CollectiveKind::all_reduce, tensor.numel());
    if (is_floating(tensor.dtype()) && (op == ReduceOp::sum || op == ReduceOp::average)) scale(tensor, op);
    return std::make_shared<CompletedWork>();
  }
  // Replays what rank 0 sent when given its broadcasts (rank 0's own run records them).
  WorkHandle broadcast_async(const Tensor& tensor, int root, Stream) override {
    check_broadcast(tensor, root);
    record(CollectiveKind::broadcast, tensor.numel());
    if (replay != nullptr) Tensor(tensor).copy_((*replay)[broadcasts_++]);
    sent.push_back(tensor.clone());
    return std::make_shared<CompletedWork>();
  }
  WorkHandle reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op, Stream) override {
    check_reduce_scatter(input, output, op);
    record(CollectiveKind::reduce_scatter, input.numel());
    Tensor(output).copy_(input.view({-1}).narrow(0, rank_ * output.numel(), output.numel()).view(output.shape()));
    scale(output, op);
    return std::make_shared<CompletedWork>();
  }
  // The other ranks' chunks are not known here: only this rank's chunk is written.
  WorkHandle all_gather_async(const Tensor& input, const Tensor& output, Stream) override {
    check_all_gather(input, output);
    record(CollectiveKind::all_gather, output.numel());
    output.view({-1}).narrow(0, rank_ * input.numel(), input.numel()).copy_(input.view({-1}));
    gathered.push_back(input.clone());
    return std::make_shared<CompletedWork>();
  }
  WorkHandle barrier_async() override { return std::make_shared<CompletedWork>(); }

  std::vector<Call> calls;
  std::vector<Tensor> sent, gathered;
  const std::vector<Tensor>* replay = nullptr;
  const int* progress = nullptr;

 private:
  void record(CollectiveKind kind, std::int64_t numel) { calls.push_back({kind, numel, progress ? *progress : -1}); }
  void scale(const Tensor& t, ReduceOp op) const {
    const double total = std::accumulate(factors_.begin(), factors_.end(), 0.0);
    Tensor target = t;
    unary_(UnaryOp::mul_scalar, target, op == ReduceOp::average ? total / world_ : total);
  }
  int world_, rank_;
  std::vector<double> factors_;
  std::size_t broadcasts_ = 0;
};

// Parameters in registration order: 0.weight [8, 4] (128 B), 0.bias (32 B), 2.weight [8, 8] (256 B),
// 2.bias (32 B), 4.weight [3, 8] (96 B), 4.bias (12 B).
std::shared_ptr<nn::Sequential> make_mlp(std::uint64_t seed = 1) {
  Generator generator(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8, true, &generator), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(8, 8, true, &generator), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(8, 3, true, &generator)});
}

Tensor batch(std::uint64_t seed) {
  Generator generator(seed);
  return normal({5, 4}, 0.0, 1.0, {}, &generator);
}

void backward(nn::Module& model, std::uint64_t seed) { autograd::backward(F::mean(F::pow(model(batch(seed)), 2.0))); }

std::vector<std::vector<float>> grads_of(const nn::Module& model) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : model.parameters()) out.push_back(autograd::grad(p).to_vector<float>());
  return out;
}

std::vector<std::vector<float>> values_of(const nn::Module& model) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : model.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

void check_close(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b, double factor = 1.0) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].size() == b[i].size());
    for (std::size_t j = 0; j < a[i].size(); ++j) CHECK(a[i][j] == doctest::Approx(factor * b[i][j]).epsilon(1e-5));
  }
}

std::int64_t tag_bytes(MemoryTag tag) { return allocator_for(Device::cpu()).stats().tag_bytes[static_cast<int>(tag)].current; }
std::int64_t grad_bytes() { return tag_bytes(MemoryTag::grad); }

}  // namespace

TEST_CASE("DDP buckets: reverse order, a small first bucket, the cap, and a parameter larger than the cap alone") {
  auto model = make_mlp();
  RecordingCommunicator comm;
  DistributedDataParallel ddp(*model, comm, {.bucket_cap_bytes = 200, .first_bucket_cap_bytes = 100});
  const auto& buckets = ddp.buckets();
  REQUIRE(buckets.size() == 4);
  CHECK(buckets[0].parameters == std::vector<std::string>{"4.bias"});  // 4.weight would take it past 100 B
  CHECK(buckets[1].parameters == std::vector<std::string>{"4.weight", "2.bias"});
  CHECK(buckets[2].parameters == std::vector<std::string>{"2.weight"});  // 256 B > the 200 B cap: alone
  CHECK(buckets[3].parameters == std::vector<std::string>{"0.bias", "0.weight"});
  CHECK(buckets[0].bytes == 12);
  CHECK(buckets[2].bytes == 256);

  auto whole = make_mlp();
  DistributedDataParallel defaults(*whole, comm);  // 556 B: one bucket under PyTorch's 1 MiB first cap
  CHECK(defaults.buckets().size() == 1);
  CHECK(defaults.buckets()[0].bytes == 556);
  CHECK(defaults.options().bucket_cap_bytes == 25u << 20);
}

TEST_CASE("DDP: collectives start during backward, in bucket order, and gradients end averaged") {
  auto reference = make_mlp();
  backward(*reference, 7);
  auto model = make_mlp();
  // Rank 0 of 2, the other rank's gradients 3 x these: the average is 2 x these.
  RecordingCommunicator comm(2, 0, {1.0, 3.0});
  DistributedDataParallel ddp(*model, comm, {.bucket_cap_bytes = 200, .first_bucket_cap_bytes = 100});
  int progress = 0;
  for (const Tensor& p : model->parameters())  // registered after DDP's hooks, so they run after them
    autograd::register_post_accumulate_grad_hook(p, [&](const Tensor&) { ++progress; });
  comm.progress = &progress;
  comm.calls.clear();

  backward(*model, 7);
  REQUIRE(comm.calls.size() == 4);
  CHECK(ddp.start_order() == std::vector<int>{0, 1, 2, 3});
  const std::vector<std::int64_t> numels{3, 24 + 8, 64, 8 + 32};
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(comm.calls[i].kind == CollectiveKind::all_reduce);
    CHECK(comm.calls[i].numel == numels[i]);
    if (i > 0) CHECK(comm.calls[i].progress >= comm.calls[i - 1].progress);
  }
  // The last layer's bias is among the first two gradients, and its bucket starts right then, with
  // four of the six gradients still to come; the last bucket starts with the last gradient.
  CHECK(comm.calls[0].progress <= 1);
  CHECK(comm.calls[3].progress == 5);
  ddp.synchronize();
  CHECK(comm.calls.size() == 4);  // every bucket had started already
  check_close(grads_of(*model), grads_of(*reference), 2.0);
  CHECK(ddp.wait_seconds() == 0.0);  // every collective of this communicator completes as it starts
}

TEST_CASE("DDP gradient_as_bucket_view: .grad lives in the bucket, with no second copy of the gradients") {
  auto reference = make_mlp();
  backward(*reference, 3);
  auto model = make_mlp();
  RecordingCommunicator comm(3, 2, {1.0, 1.0, 4.0});  // average: 2 x this rank's
  const std::int64_t before = grad_bytes();
  DistributedDataParallel ddp(*model, comm, {.gradient_as_bucket_view = true});
  CHECK(grad_bytes() - before == 556);  // the bucket
  for (int step = 0; step < 2; ++step) {
    backward(*model, 3);
    ddp.synchronize();
    CHECK(grad_bytes() - before == 556);  // the gradients are the bucket
    check_close(grads_of(*model), grads_of(*reference), 2.0);
    // Laid out in the order backward produces them: each right after the previous one.
    const nn::NamedTensors params = model->named_parameters();
    for (std::size_t i = params.size() - 1; i > 0; --i) {
      const Tensor later = autograd::grad(params[i].second), earlier = autograd::grad(params[i - 1].second);
      CHECK(static_cast<char*>(earlier.data_ptr()) == static_cast<char*>(later.data_ptr()) + later.nbytes());
    }
    model->zero_grad();  // set to none: the next backward's gradients are copied in and freed
  }

  auto copies = make_mlp();
  RecordingCommunicator comm2(3, 2, {1.0, 1.0, 4.0});
  const std::int64_t start = grad_bytes();
  DistributedDataParallel plain(*copies, comm2);
  backward(*copies, 3);
  plain.synchronize();
  CHECK(grad_bytes() - start == 2 * 556);  // the bucket and the gradients
  check_close(grads_of(*copies), grads_of(*reference), 2.0);
}

TEST_CASE("DDP no_sync: micro-batches accumulate locally, the last backward averages the sum") {
  for (const bool views : {false, true}) {
    CAPTURE(views);
    auto reference = make_mlp();
    backward(*reference, 1);
    backward(*reference, 2);
    auto model = make_mlp();
    RecordingCommunicator comm(2, 1, {3.0, 1.0});
    DistributedDataParallel ddp(*model, comm, {.gradient_as_bucket_view = views});
    comm.calls.clear();
    {
      const auto guard = ddp.no_sync();
      CHECK_FALSE(ddp.sync_enabled());
      backward(*model, 1);
    }
    CHECK(ddp.sync_enabled());
    CHECK(comm.calls.empty());
    backward(*model, 2);
    CHECK(comm.calls.size() == 1);
    ddp.synchronize();
    check_close(grads_of(*model), grads_of(*reference), 2.0);
  }
}

TEST_CASE("DDP synchronize: buckets whose gradients never came start there, with zeros for the missing ones") {
  auto model = make_mlp();
  RecordingCommunicator comm;
  DistributedDataParallel ddp(*model, comm, {.bucket_cap_bytes = 200, .first_bucket_cap_bytes = 100});
  // Only the last layer's weight gets a gradient: buckets 0 (4.bias), 2 and 3 wait for synchronize().
  comm.calls.clear();
  const Tensor w = model->named_parameters()[4].second;
  autograd::backward(F::sum(F::mul(w, w)));
  CHECK(comm.calls.empty());  // bucket 1 is complete only with 2.bias, which got no gradient
  ddp.synchronize();
  CHECK(ddp.start_order() == std::vector<int>{0, 1, 2, 3});
  for (const auto& [name, p] : model->named_parameters()) {
    CAPTURE(name);
    REQUIRE(autograd::grad(p).defined());  // every rank's optimizer sees the same gradients
    if (name != "4.weight") CHECK(autograd::grad(p).to_vector<float>() == std::vector<float>(static_cast<std::size_t>(p.numel()), 0.0f));
  }
}

TEST_CASE("DDP construction: rank 0's weights everywhere, and a model that differs is an error naming where and which rank") {
  auto rank0 = make_mlp(1);
  RecordingCommunicator comm0(2, 0);
  DistributedDataParallel ddp0(*rank0, comm0);
  CHECK(comm0.sent.size() == 2 + 6);  // the count, the fingerprints, then every parameter

  auto rank1 = make_mlp(2);  // initialised differently
  CHECK(values_of(*rank1) != values_of(*rank0));
  RecordingCommunicator comm1(2, 1);
  comm1.replay = &comm0.sent;
  DistributedDataParallel ddp1(*rank1, comm1);
  CHECK(values_of(*rank1) == values_of(*rank0));

  Generator generator(1);
  auto other = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8, true, &generator), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(8, 6, true, &generator), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(6, 3, true, &generator)});
  RecordingCommunicator comm2(2, 1);
  comm2.replay = &comm0.sent;
  CHECK_THROWS_WITH_AS(DistributedDataParallel(*other, comm2),
                       doctest::Contains("differ at parameter-or-buffer #2 (parameters, then buffers, in registration order): "
                                         "rank 1 differs from rank 0 there; on this rank (1) it is parameter '2.weight' [6, 8] f32"),
                       DistributedError);
  auto shorter = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8, true, &generator)});
  RecordingCommunicator comm3(2, 1);
  comm3.replay = &comm0.sent;
  CHECK_THROWS_WITH_AS(DistributedDataParallel(*shorter, comm3), doctest::Contains("#2 (parameters, then buffers, in registration order): rank 1 differs from rank 0 there; "
                                                                 "on this rank (1) it is missing (this rank has 2 parameters and buffers)"),
                       DistributedError);
}

TEST_CASE("DDP errors: bad caps, two backwards without synchronize, ZeRO misuse") {
  RecordingCommunicator comm;
  auto model = make_mlp();
  CHECK_THROWS_WITH_AS(DistributedDataParallel(*model, comm, {.bucket_cap_bytes = 0}), doctest::Contains("bucket caps must be > 0"),
                       ValueError);
  DistributedDataParallel ddp(*model, comm);
  backward(*model, 1);
  CHECK_THROWS_WITH_AS(backward(*model, 1), doctest::Contains("arrived while its bucket's collective is in flight"), ValueError);
  auto split = make_mlp();  // two buckets: the second backward finds the second one not started yet
  DistributedDataParallel small(*split, comm, {.bucket_cap_bytes = 1 << 20, .first_bucket_cap_bytes = 100});
  autograd::backward(F::sum(F::mul(split->named_parameters()[4].second, 2.0)));  // 4.weight alone: bucket 1 waits
  CHECK_THROWS_WITH_AS(autograd::backward(F::sum(F::mul(split->named_parameters()[4].second, 2.0))),
                       doctest::Contains("arrived twice before synchronize()"), ValueError);
  auto make_sgd = [](std::vector<nn::ParamGroup> groups) { return std::make_unique<nn::SGD>(std::move(groups)); };
  CHECK_THROWS_WITH_AS(ddp.shard_optimizer(make_sgd, {{.params = model->parameters(), .lr = 0.1}}),
                       doctest::Contains("ZeRO is off"), ValueError);
  CHECK_THROWS_WITH_AS(DistributedDataParallel(*make_mlp(), comm, {.gradient_as_bucket_view = true, .zero = 2}),
                       doctest::Contains("ZeRO-2 frees each bucket once it is reduced"), ValueError);
  CHECK_THROWS_WITH_AS(DistributedDataParallel(*make_mlp(), comm, {.zero = 4}), doctest::Contains("ZeRO stage 4 is not 0, 1, 2 or 3"),
                       ValueError);

  auto sharded_model = make_mlp();
  DistributedDataParallel zero(*sharded_model, comm, {.zero = 1});
  CHECK_THROWS_WITH_AS(backward(*sharded_model, 1), doctest::Contains("call shard_optimizer() before the first backward"),
                       ValueError);
  CHECK_THROWS_WITH_AS(zero.shard_optimizer(make_sgd, {{.params = model->parameters(), .lr = 0.1}}),
                       doctest::Contains("is not one of the model's parameters"), ValueError);
  auto optimizer = zero.shard_optimizer(make_sgd, {{.params = sharded_model->parameters(), .lr = 0.1}});
  CHECK_THROWS_WITH_AS(optimizer->step(), doctest::Contains("call synchronize() after backward"), ValueError);
  CHECK_THROWS_WITH_AS(zero.shard_optimizer(make_sgd, {{.params = sharded_model->parameters(), .lr = 0.1}}),
                       doctest::Contains("already called"), ValueError);
}

namespace {

using MakeOptimizer = std::function<std::unique_ptr<nn::Optimizer>(std::vector<nn::ParamGroup>)>;

// Two groups (weights decayed, biases not), so each slice must keep its group's settings.
std::vector<nn::ParamGroup> two_groups(const nn::Module& model) {
  std::vector<nn::ParamGroup> groups{{.params = {}, .lr = 0.05, .weight_decay = 0.1}, {.params = {}, .lr = 0.02, .weight_decay = 0.0}};
  for (const auto& [name, p] : model.named_parameters()) groups[name.ends_with("bias") ? 1 : 0].params.push_back(p);
  return groups;
}

// The same keys in the same order, the values equal up to rounding (a slice may be updated by
// other vector lanes than its whole parameter).
void check_same_dict(const nn::StateDict& ours, const nn::StateDict& theirs) {
  REQUIRE(ours.size() == theirs.size());
  for (std::size_t i = 0; i < ours.size(); ++i) {
    CHECK(ours[i].first == theirs[i].first);
    CHECK(ours[i].second.shape() == theirs[i].second.shape());
    const std::vector<double> a = ours[i].second.to_vector<double>(), b = theirs[i].second.to_vector<double>();
    REQUIRE(a.size() == b.size());
    for (std::size_t j = 0; j < a.size(); ++j) CHECK(a[j] == doctest::Approx(b[j]).epsilon(1e-6));
  }
}

void train_steps(nn::Module& model, nn::Optimizer& optimizer, DistributedDataParallel* ddp, int steps) {
  for (int step = 0; step < steps; ++step) {
    backward(model, 10 + static_cast<std::uint64_t>(step));
    if (ddp) ddp->synchronize();
    optimizer.param_groups()[0].lr *= 0.5;  // a schedule: the sharded step must follow it
    optimizer.step();
    optimizer.zero_grad();
  }
}

}  // namespace

TEST_CASE("ZeRO-1 in a world of one: the same steps and state dict as the unsharded optimizer") {
  const std::vector<std::pair<const char*, MakeOptimizer>> kinds{
      {"AdamW", [](std::vector<nn::ParamGroup> g) { return std::make_unique<nn::AdamW>(std::move(g)); }},
      {"SGD", [](std::vector<nn::ParamGroup> g) { return std::make_unique<nn::SGD>(std::move(g), 0.9); }}};
  for (const auto& [kind, make] : kinds)
    for (const bool views : {false, true}) {
      CAPTURE(kind);
      CAPTURE(views);
      auto reference = make_mlp();
      const auto plain = make(two_groups(*reference));
      train_steps(*reference, *plain, nullptr, 3);

      auto model = make_mlp();
      RecordingCommunicator comm;
      DistributedDataParallel ddp(*model, comm, {.gradient_as_bucket_view = views, .zero = 1});
      const auto sharded = ddp.shard_optimizer(make, two_groups(*model));
      train_steps(*model, *sharded, &ddp, 3);
      check_close(values_of(*model), values_of(*reference));
      CHECK(sharded->state_bytes() == plain->state_bytes());

      const nn::StateDict theirs = plain->state_dict();
      check_same_dict(sharded->state_dict(), theirs);
      // Back in through load_state_dict: the same dict comes out again.
      auto fresh_model = make_mlp();
      RecordingCommunicator comm2;
      DistributedDataParallel fresh(*fresh_model, comm2, {.zero = 1});
      const auto loaded = fresh.shard_optimizer(make, two_groups(*fresh_model));
      loaded->load_state_dict(theirs);
      check_same_dict(loaded->state_dict(), theirs);
    }
}

TEST_CASE("ZeRO-1 as rank 1 of 3: reduce-scatter, this rank's chunk updated as unsharded, a third of the state") {
  auto make = [](std::vector<nn::ParamGroup> g) { return std::make_unique<nn::AdamW>(std::move(g)); };
  auto reference = make_mlp();
  const auto plain = make(two_groups(*reference));
  backward(*reference, 10);
  plain->step();

  auto model = make_mlp();
  RecordingCommunicator comm(3, 1);  // every rank with the same data: the averages are this rank's
  DistributedDataParallel ddp(*model, comm, {.zero = 1});
  const auto sharded = ddp.shard_optimizer(make, two_groups(*model));
  comm.calls.clear();
  backward(*model, 10);
  ddp.synchronize();
  const std::int64_t state_before = tag_bytes(MemoryTag::optimizer);
  REQUIRE(comm.calls.size() == 1);
  CHECK(comm.calls[0].kind == CollectiveKind::reduce_scatter);
  CHECK(comm.calls[0].numel == 141);  // 139 elements padded to a multiple of 3
  sharded->step();
  REQUIRE(comm.gathered.size() == 1);

  // This rank's chunk, elements [47, 94) of the bucket (parameters in backward order), as the
  // unsharded optimizer left them.
  std::vector<float> expected;
  const nn::NamedTensors params = reference->named_parameters();
  for (auto it = params.rbegin(); it != params.rend(); ++it)
    for (const float v : it->second.to_vector<float>()) expected.push_back(v);
  const std::vector<float> chunk = comm.gathered[0].to_vector<float>();
  REQUIRE(chunk.size() == 47);
  for (std::size_t i = 0; i < chunk.size(); ++i) CHECK(chunk[i] == doctest::Approx(expected[47 + i]).epsilon(1e-6));
  CHECK(sharded->state_bytes() == 2 * 47 * sizeof(float));  // exp_avg and exp_avg_sq of 47 elements, not 139
  CHECK(tag_bytes(MemoryTag::optimizer) - state_before == static_cast<std::int64_t>(2 * 47 * sizeof(float)));  // and the allocator sees it there
}

TEST_CASE("ZeRO-2 and ZeRO-3 in a world of one: the steps, state dict and micro-batches of the unsharded optimizer") {
  const MakeOptimizer make = [](std::vector<nn::ParamGroup> g) { return std::make_unique<nn::AdamW>(std::move(g)); };
  auto reference = make_mlp();
  const auto plain = make(two_groups(*reference));
  train_steps(*reference, *plain, nullptr, 3);
  for (const int stage : {2, 3}) {
    CAPTURE(stage);
    auto model = make_mlp();
    RecordingCommunicator comm;
    DistributedDataParallel ddp(*model, comm, {.zero = stage});
    const auto sharded = ddp.shard_optimizer(make, two_groups(*model));
    train_steps(*model, *sharded, &ddp, 3);
    {
      const auto whole = ddp.full_parameters();  // ZeRO-3's parameters gathered to be read
      check_close(values_of(*model), values_of(*reference));
    }
    check_same_dict(sharded->state_dict(), plain->state_dict());

    // Two micro-batches under no_sync, then one synchronized: the sum of both, as without ZeRO.
    auto accumulated = make_mlp(), whole_batch = make_mlp();
    RecordingCommunicator comm2;
    DistributedDataParallel zero(*accumulated, comm2, {.zero = stage});
    const auto optimizer = zero.shard_optimizer(make, two_groups(*accumulated));
    const auto whole_optimizer = make(two_groups(*whole_batch));
    {
      const auto no_sync = zero.no_sync();
      backward(*accumulated, 20);
    }
    backward(*accumulated, 21);
    zero.synchronize();
    optimizer->step();
    backward(*whole_batch, 20);
    backward(*whole_batch, 21);
    whole_optimizer->step();
    const auto whole = zero.full_parameters();
    check_close(values_of(*accumulated), values_of(*whole_batch));
  }
}

TEST_CASE("ZeRO-2 as rank 1 of 3: between steps only this rank's chunk of the gradients is kept, no .grad and no bucket") {
  const MakeOptimizer make = [](std::vector<nn::ParamGroup> g) { return std::make_unique<nn::SGD>(std::move(g), 0.9); };
  std::int64_t kept[3] = {};
  for (const int stage : {0, 1, 2}) {
    CAPTURE(stage);
    auto model = make_mlp();
    RecordingCommunicator comm(3, 1);
    const std::int64_t before = grad_bytes();
    DistributedDataParallel ddp(*model, comm, {.zero = stage});
    const auto optimizer = stage > 0 ? ddp.shard_optimizer(make, two_groups(*model)) : make(two_groups(*model));
    backward(*model, 10);
    ddp.synchronize();
    kept[stage] = grad_bytes() - before;  // after synchronize, before the step: what the step reads
    for (const Tensor& p : model->parameters()) CHECK(autograd::grad(p).defined() == (stage < 2));
    optimizer->step();
    optimizer->zero_grad();
  }
  // 139 gradients: plain DDP keeps .grad (556 B) and its bucket; ZeRO-1 the same, its bucket padded
  // to 141 elements, and a 47-element shard; ZeRO-2 the shard alone (47 x 4 = 188 B), its bucket
  // freed once reduced.
  CHECK(kept[2] == 47 * 4);
  CHECK(kept[1] == kept[0] + 2 * 4 + kept[2]);
  CHECK(kept[0] >= 2 * 139 * 4);
}

TEST_CASE("ZeRO-3: weights loaded under full_parameters stay once it ends, each rank keeping its chunk, and guards nest") {
  auto model = make_mlp();
  RecordingCommunicator comm;
  DistributedDataParallel ddp(*model, comm, {.zero = 3});
  auto other = make_mlp(99);
  {
    const auto whole = ddp.full_parameters();
    model->load_state_dict(other->state_dict());
  }
  for (const Tensor& p : model->parameters()) CHECK_FALSE(p.storage()->resident());
  const auto whole = ddp.full_parameters();
  check_close(values_of(*model), values_of(*other));
  {
    const auto inner = ddp.full_parameters();  // nested: the outer one keeps them when it ends
  }
  for (const Tensor& p : model->parameters()) CHECK(p.storage()->resident());
}

TEST_CASE("ZeRO-3 as rank 1 of 3: a third of the parameters between uses, each layer gathered around its forward call and in backward") {
  const MakeOptimizer make = [](std::vector<nn::ParamGroup> g) { return std::make_unique<nn::SGD>(std::move(g), 0.9); };
  auto model = make_mlp();
  RecordingCommunicator comm(3, 1);
  const std::int64_t before = tag_bytes(MemoryTag::param);
  DistributedDataParallel ddp(*model, comm, {.zero = 3});
  // One bucket per layer: the three Linear layers, last first.
  REQUIRE(ddp.buckets().size() == 3);
  CHECK(ddp.buckets()[0].parameters == std::vector<std::string>{"4.bias", "4.weight"});
  const auto optimizer = ddp.shard_optimizer(make, two_groups(*model));
  // The parameters' own memory (556 B) is given back: this rank keeps its chunk of each layer (9 of
  // the last layer's 27 elements, 24 of 72, 14 of 40 padded to 42), and the model's tensors hold none.
  constexpr std::int64_t kShards = (9 + 24 + 14) * 4, kParams = 556;
  CHECK(tag_bytes(MemoryTag::param) - before == kShards - kParams);
  const Tensor weight = model->named_parameters()[0].second;
  CHECK_FALSE(weight.storage()->resident());
  CHECK_THROWS_WITH_AS(weight.data_ptr(), doctest::Contains("parameter sharded by ZeRO-3"), ValueError);
  comm.calls.clear();
  backward(*model, 10);
  ddp.synchronize();
  // Forward gathered the three layers in its order; backward gathered them again, the last first, and
  // reduce-scattered each layer's gradients; everything given back since.
  std::vector<CollectiveKind> kinds;
  for (const auto& call : comm.calls) kinds.push_back(call.kind);
  CHECK(std::count(kinds.begin(), kinds.end(), CollectiveKind::all_gather) == 6);
  CHECK(std::count(kinds.begin(), kinds.end(), CollectiveKind::reduce_scatter) == 3);
  for (const Tensor& p : model->parameters()) CHECK_FALSE(p.storage()->resident());
  comm.gathered.clear();  // the recording communicator's copies of what was sent
  optimizer->step();      // updates the shards: nothing to gather until the next forward
  optimizer->zero_grad();
  CHECK(comm.gathered.empty());
  CHECK(tag_bytes(MemoryTag::param) - before == kShards - kParams);
}

TEST_CASE("ZeRO-1 with loss scaling: the ranks agree whether a gradient overflowed") {
  auto model = make_mlp();
  RecordingCommunicator comm;
  DistributedDataParallel ddp(*model, comm, {.zero = 1});
  const auto optimizer = ddp.shard_optimizer([](std::vector<nn::ParamGroup> g) { return std::make_unique<nn::SGD>(std::move(g)); },
                                             {{.params = model->parameters(), .lr = 0.1}});
  nn::GradScaler scaler(1024.0);
  autograd::backward(scaler.scale(F::mean(F::pow((*model)(batch(1)), 2.0))));
  ddp.synchronize();
  comm.calls.clear();
  CHECK(scaler.step(*optimizer));
  REQUIRE(comm.calls.size() == 2);
  CHECK(comm.calls[0].kind == CollectiveKind::all_reduce);  // found_inf, one number, max over the ranks
  CHECK(comm.calls[0].numel == 1);
  CHECK(comm.calls[1].kind == CollectiveKind::all_gather);
  scaler.update();
}
