// The optimizer step fused into backward (nn/optimizer_in_backward.h): the same weights bit for bit
// as the ordinary step for SGD with momentum and AdamW, each gradient freed inside backward (so the
// weights' gradients are never all alive at once), unarmed hooks that leave gradients alone, and the
// combinations it refuses.
#include <doctest/doctest.h>

#include <algorithm>

#include "core/allocator.h"
#include "core/random.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/optim.h"
#include "nn/optimizer_in_backward.h"

using namespace frugal;
using namespace frugal::nn;
namespace F = frugal::functional;

namespace {

// Three linear layers: every weight's gradient is complete at a different point of backward.
struct Mlp {
  Generator generator{7};
  Linear a{16, 32, true, &generator}, b{32, 32, true, &generator}, c{32, 4, true, &generator};
  std::vector<Tensor> params() const {
    std::vector<Tensor> all;
    for (const Module* m : {static_cast<const Module*>(&a), static_cast<const Module*>(&b), static_cast<const Module*>(&c)})
      for (const Tensor& p : m->parameters()) all.push_back(p);
    return all;
  }
  Tensor loss(const Tensor& x) {
    const Tensor y = c(F::relu(b(F::relu(a(x)))));
    return F::sum(F::mul(y, y));
  }
};

std::int64_t grad_peak_since_reset() {
  return allocator_for(Device::cpu()).stats().tag_bytes[static_cast<int>(MemoryTag::grad)].peak;
}

// Three steps of `make`'s optimizer on the MLP, ordinary or in backward; the weights afterwards.
template <typename Make>
std::vector<std::vector<float>> train_three_steps(Make make, bool in_backward) {
  Mlp mlp;
  const std::vector<Tensor> params = mlp.params();
  auto optimizer = make(params);
  OptimizerInBackward fused(*optimizer);
  Generator data(11);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = normal({8, 16}, 0.0, 1.0, {}, &data);
    if (in_backward) {
      const OptimizerInBackward::Armed armed(fused);
      autograd::backward(mlp.loss(x));
      CHECK(fused.updated() == params.size());
      for (const Tensor& p : params) CHECK_FALSE(autograd::grad(p).defined());  // freed inside backward
    } else {
      autograd::backward(mlp.loss(x));
      optimizer->step();
      optimizer->zero_grad();
    }
  }
  std::vector<std::vector<float>> weights;
  for (const Tensor& p : params) weights.push_back(p.to_vector<float>());
  return weights;
}

}  // namespace

TEST_CASE("optimizer in backward: SGD with momentum and AdamW give the ordinary step's weights bit for bit") {
  const auto sgd = [](std::vector<Tensor> params) {
    return std::make_unique<SGD>(std::move(params), 0.05, /*momentum=*/0.9, 0.0, /*weight_decay=*/1e-3, /*nesterov=*/true);
  };
  const auto adamw = [](std::vector<Tensor> params) { return std::make_unique<AdamW>(std::move(params), 1e-2); };
  CHECK(train_three_steps(sgd, true) == train_three_steps(sgd, false));
  CHECK(train_three_steps(adamw, true) == train_three_steps(adamw, false));
  const auto adamw8bit = [](std::vector<Tensor> params) { return std::make_unique<AdamW8bit>(std::move(params), 1e-2); };
  const auto adafactor = [](std::vector<Tensor> params) { return std::make_unique<Adafactor>(std::move(params), 1e-2); };
  CHECK(train_three_steps(adamw8bit, true) == train_three_steps(adamw8bit, false));
  CHECK(train_three_steps(adafactor, true) == train_three_steps(adafactor, false));
}

TEST_CASE("optimizer in backward: the hooks of one that is gone do nothing") {
  Mlp mlp;
  const std::vector<Tensor> params = mlp.params();
  const std::vector<float> before = params[0].to_vector<float>();
  SGD sgd(params, 0.05);
  {
    OptimizerInBackward fused(sgd);
  }  // its hooks stay registered on the parameters
  autograd::backward(mlp.loss(normal({8, 16})));
  CHECK(params[0].to_vector<float>() == before);
  for (const Tensor& p : params) CHECK(autograd::grad(p).defined());
}

TEST_CASE("optimizer in backward: the weights' gradients are never all alive at once") {
  Mlp mlp;
  const std::vector<Tensor> params = mlp.params();
  std::int64_t weight_bytes = 0;
  for (const Tensor& p : params) weight_bytes += p.numel() * 4;
  SGD sgd(params, 0.05);
  OptimizerInBackward fused(sgd);
  const Tensor x = normal({8, 16});
  allocator_for(Device::cpu()).reset_peak_stats();
  autograd::backward(mlp.loss(x));
  const std::int64_t ordinary = grad_peak_since_reset();
  CHECK(ordinary >= weight_bytes);  // backward ends holding every weight's gradient
  sgd.step();
  sgd.zero_grad();
  allocator_for(Device::cpu()).reset_peak_stats();
  {
    const OptimizerInBackward::Armed armed(fused);
    autograd::backward(mlp.loss(x));
  }
  const std::int64_t fused_peak = grad_peak_since_reset();
  CAPTURE(ordinary);
  CAPTURE(fused_peak);
  // The largest weight (b: 32 x 32) is a third of them; the first layer's gradient is made last.
  CHECK(fused_peak < ordinary);
  CHECK(fused_peak < weight_bytes);
}

TEST_CASE("optimizer in backward: unarmed, the hooks leave gradients to accumulate, and arming twice is an error") {
  Mlp mlp;
  const std::vector<Tensor> params = mlp.params();
  const std::vector<float> before = params[0].to_vector<float>();
  AdamW adamw(params);
  OptimizerInBackward fused(adamw);
  autograd::backward(mlp.loss(normal({8, 16})));
  CHECK(params[0].to_vector<float>() == before);
  for (const Tensor& p : params) CHECK(autograd::grad(p).defined());
  CHECK(fused.updated() == 0);
  adamw.zero_grad();
  const OptimizerInBackward::Armed armed(fused);
  CHECK_THROWS_WITH_AS(OptimizerInBackward::Armed{fused}, doctest::Contains("armed twice"), Error);
  CHECK_THROWS_AS(adamw.step_parameter(params.size()), IndexError);
}
