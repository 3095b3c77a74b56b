// The optimizer offloaded to host memory (nn/optimizer_offload.h): on the CPU the same weights and
// state bit for bit as the optimizer run in place, for each optimizer; no optimizer bytes in the
// device's books and all of them in the pinned host allocator's; a state dict any optimizer of the
// same kind loads; schedules' lr reaching the host; parameters without a gradient skipped; and
// PinnedHostScope, which routes an ordinary optimizer's tensors to page-locked memory.
#include <doctest/doctest.h>

#include <functional>

#include "core/allocator.h"
#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/random.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/optim.h"
#include "nn/optimizer_offload.h"

using namespace frugal;
using namespace frugal::nn;
namespace F = frugal::functional;

namespace {

using Make = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

struct Mlp {
  Generator generator{7};
  Linear a{16, 32, true, &generator}, b{32, 4, true, &generator};
  std::vector<ParamGroup> groups(double lr) const {
    return {{.params = {a.weight(), b.weight()}, .lr = lr, .weight_decay = 0.01},
            {.params = {a.bias(), b.bias()}, .lr = lr, .weight_decay = 0.0}};
  }
  Tensor loss(const Tensor& x) {
    const Tensor y = b(F::relu(a(x)));
    return F::sum(F::mul(y, y));
  }
};

struct Trained {
  std::vector<std::vector<float>> weights;
  StateDict state;
};

// Three steps of `make`'s optimizer on the MLP, in place or offloaded; the weights and the state after.
Trained train_three_steps(const Make& make, bool offload) {
  Mlp mlp;
  std::unique_ptr<Optimizer> optimizer = offload ? std::make_unique<OffloadedOptimizer>(mlp.groups(1e-2), make) : make(mlp.groups(1e-2));
  Generator data(11);
  for (int step = 0; step < 3; ++step) {
    autograd::backward(mlp.loss(normal({8, 16}, 0.0, 1.0, {}, &data)));
    optimizer->step();
    optimizer->zero_grad();
  }
  Trained t{.weights = {}, .state = optimizer->state_dict()};
  for (const ParamGroup& g : mlp.groups(0.0))
    for (const Tensor& p : g.params) t.weights.push_back(p.to_vector<float>());
  return t;
}

bool same_state(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || a[i].second.to_vector<double>() != b[i].second.to_vector<double>()) return false;
  return true;
}

const std::vector<std::pair<const char*, Make>>& optimizers() {
  static const std::vector<std::pair<const char*, Make>> all{
      {"sgd", [](std::vector<ParamGroup> g) { return std::make_unique<SGD>(std::move(g), 0.9, 0.0, true); }},
      {"adamw", [](std::vector<ParamGroup> g) { return std::make_unique<AdamW>(std::move(g)); }},
      {"adamw8bit", [](std::vector<ParamGroup> g) { return std::make_unique<AdamW8bit>(std::move(g)); }},
      {"adafactor", [](std::vector<ParamGroup> g) { return std::make_unique<Adafactor>(std::move(g), Adafactor::Options{}); }}};
  return all;
}

std::int64_t optimizer_tag_bytes(Allocator& allocator) {
  return allocator.stats().tag_bytes[static_cast<int>(MemoryTag::optimizer)].current;
}

}  // namespace

TEST_CASE("offloaded optimizer: every optimizer's weights and state are the in-place optimizer's, bit for bit") {
  for (const auto& [name, make] : optimizers()) {
    CAPTURE(name);
    const Trained in_place = train_three_steps(make, false), offloaded = train_three_steps(make, true);
    CHECK(offloaded.weights == in_place.weights);
    CHECK(same_state(offloaded.state, in_place.state));
  }
}

TEST_CASE("offloaded optimizer: the state lives in the pinned host allocator, none of it in the device's") {
  Mlp mlp;
  Allocator& device = allocator_for(Device::cpu());
  const std::int64_t device_before = optimizer_tag_bytes(device), host_before = optimizer_tag_bytes(pinned_host_allocator());
  OffloadedOptimizer optimizer(mlp.groups(1e-2), optimizers()[1].second);  // AdamW
  autograd::backward(mlp.loss(ones({2, 16})));
  optimizer.step();
  std::int64_t parameter_bytes = 0;
  for (const ParamGroup& g : mlp.groups(0.0))
    for (const Tensor& p : g.params) parameter_bytes += static_cast<std::int64_t>(p.nbytes());
  CHECK(optimizer_tag_bytes(device) == device_before);
  // AdamW's two moments (its step counts are host integers), and the host copies of the parameters.
  CHECK(static_cast<std::int64_t>(optimizer.state_bytes()) == 2 * parameter_bytes);
  CHECK(optimizer_tag_bytes(pinned_host_allocator()) - host_before == 3 * parameter_bytes);
  CHECK(static_cast<std::int64_t>(optimizer.staging_bytes()) == 2 * parameter_bytes);
}

TEST_CASE("offloaded optimizer: its state dict loads into the in-place optimizer, which steps on as it would have") {
  const Make& adamw = optimizers()[1].second;
  Mlp offloaded_mlp, plain_mlp;
  OffloadedOptimizer offloaded(offloaded_mlp.groups(1e-2), adamw);
  const std::unique_ptr<Optimizer> plain = adamw(plain_mlp.groups(1e-2));
  const Tensor x = ones({2, 16});
  autograd::backward(offloaded_mlp.loss(x));
  offloaded.step();
  offloaded.zero_grad();
  autograd::backward(plain_mlp.loss(x));
  plain->step();
  plain->zero_grad();
  // Swap: each continues from the other's state, with the same weights.
  const StateDict offloaded_state = offloaded.state_dict(), plain_state = plain->state_dict();
  plain->load_state_dict(offloaded_state);
  offloaded.load_state_dict(plain_state);
  for (auto* mlp : {&offloaded_mlp, &plain_mlp}) autograd::backward(mlp->loss(x));
  offloaded.step();
  plain->step();
  CHECK(offloaded_mlp.a.weight().to_vector<float>() == plain_mlp.a.weight().to_vector<float>());
  CHECK(same_state(offloaded.state_dict(), plain->state_dict()));
  // A dict of another optimizer is refused, and nothing changes.
  const StateDict before = offloaded.state_dict();
  CHECK_THROWS_AS(offloaded.load_state_dict({{"state.0.momentum_buffer", zeros({32, 16})}}), ValueError);
  CHECK(same_state(offloaded.state_dict(), before));
}

TEST_CASE("offloaded optimizer: a schedule's lr reaches the host's update, and parameters without a gradient are left alone") {
  Mlp mlp;
  OffloadedOptimizer optimizer(mlp.groups(1e-2), optimizers()[0].second);  // SGD
  for (ParamGroup& g : optimizer.param_groups()) g.lr = 0.0;                // what a schedule does
  const std::vector<float> before = mlp.a.weight().to_vector<float>();
  autograd::backward(mlp.loss(ones({2, 16})));
  optimizer.step();
  CHECK(mlp.a.weight().to_vector<float>() == before);  // lr 0: no change
  optimizer.zero_grad();
  for (ParamGroup& g : optimizer.param_groups()) g.lr = 0.1;
  autograd::set_grad(mlp.b.weight(), ones(mlp.b.weight().shape()));  // only this one has a gradient
  const std::vector<float> a_before = mlp.a.weight().to_vector<float>(), b_before = mlp.b.weight().to_vector<float>();
  optimizer.step();
  CHECK(mlp.a.weight().to_vector<float>() == a_before);
  CHECK(mlp.b.weight().to_vector<float>() != b_before);
  // A schedule's lr set after the last step is what a checkpoint saves.
  optimizer.param_groups()[0].lr = 0.25;
  for (const auto& [key, value] : optimizer.state_dict())
    if (key == "param_groups.0.lr") CHECK(value.item<double>() == 0.25);
}

TEST_CASE("PinnedHostScope: CPU tensors made inside come from the pinned host allocator, and a pinned tensor off the CPU is refused") {
  CachingAllocator& pinned = pinned_host_allocator();
  const std::int64_t before = pinned.stats().requested_bytes.current;
  Tensor inside, outside = zeros({256});
  {
    const PinnedHostScope host;
    inside = zeros({256});
    CHECK(pinned.stats().requested_bytes.current - before == 1024);
  }
  const Tensor after = zeros({256});
  CHECK(pinned.stats().requested_bytes.current - before == 1024);  // only `inside`
  inside = Tensor();
  CHECK(pinned.stats().requested_bytes.current == before);
  CHECK_THROWS_AS(empty({4}, {.device = Device::meta(), .pinned = true}), DeviceError);
}
