// Mixed precision and activation checkpointing, measured through the allocator's per-tag
// statistics: autocast halves the activation bytes of a conv stack and keeps f32 parameters' gradients
// in f32; checkpointing lowers the peak of saved activations while the gradients stay the same, and
// replays dropout's random numbers.
#include <doctest/doctest.h>

#include <cmath>

#include "core/random.h"
#include "nn/amp.h"
#include "nn/autograd.h"
#include "nn/checkpoint.h"
#include "nn/functional.h"
#include "nn/layers.h"

using namespace frugal;
using namespace frugal::autograd;
namespace F = frugal::functional;

namespace {
Allocator& cpu_allocator() { return allocator_for(Device::cpu()); }
std::int64_t activation_bytes() { return cpu_allocator().stats().tag_bytes[static_cast<int>(MemoryTag::activation)].current; }
std::int64_t activation_peak() { return cpu_allocator().stats().tag_bytes[static_cast<int>(MemoryTag::activation)].peak; }

Tensor parameter(Shape shape, double scale) {
  Tensor t = uniform(std::move(shape), -scale, scale);
  return set_requires_grad(t);
}

struct ConvStack {
  std::vector<Tensor> weights;
  ConvStack() {
    for (int i = 0; i < 3; ++i) weights.push_back(parameter({8, 8, 3, 3}, 0.2));
  }
  Tensor operator()(Tensor x) const {
    for (const Tensor& w : weights) x = F::relu(F::conv2d(x, w, Tensor(), {.padding = {1, 1}}));
    return x;
  }
};

double max_difference(const Tensor& a, const Tensor& b) {
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < av.size(); ++i) worst = std::max(worst, std::abs(av[i] - bv[i]));
  return worst;
}
}  // namespace

TEST_CASE("autocast: conv runs in f16, the activations it keeps take half the bytes") {
  const ConvStack stack;
  const Tensor x = uniform({4, 8, 16, 16}, -1.0, 1.0);
  const auto layer_output = static_cast<std::int64_t>(x.nbytes());  // each layer's output has x's shape
  const auto layers = static_cast<std::int64_t>(stack.weights.size());
  for (DType low : {DType::f16, DType::bf16}) {
    CAPTURE(low);
    const std::int64_t base = activation_bytes();
    std::int64_t full = 0, mixed = 0;
    {
      const Tensor y = stack(x);
      full = activation_bytes() - base;
    }
    {
      nn::AutocastGuard autocast(low);
      const Tensor y = stack(x);
      CHECK(y.dtype() == low);
      mixed = activation_bytes() - base;
      const Tensor loss = F::cross_entropy(F::flatten(y, 1), zeros({4}, {.dtype = DType::i64}));
      CHECK(loss.dtype() == DType::f32);  // losses are computed in f32 under autocast
      backward(loss);
    }
    for (const Tensor& w : stack.weights) {
      CHECK(grad(w).dtype() == DType::f32);  // the cast is recorded: f32 parameters get f32 gradients
      set_grad(w, Tensor());
    }
    MESSAGE("activation bytes held by the stack: f32 ", full, ", autocast ", mixed);
    // f32: each layer keeps its ReLU output (the next conv saves the same tensor).
    CHECK(full == layers * layer_output);
    // autocast: the same outputs at 2 bytes an element, plus what the convs save of the casts: the
    // f16 copy of the f32 input and of each f32 weight.
    const std::int64_t weight_copies = layers * stack.weights[0].numel() * 2;
    CHECK(mixed == layers * layer_output / 2 + layer_output / 2 + weight_copies);
  }
}

TEST_CASE("autocast: gradients close to the f32 ones") {
  const ConvStack stack;
  const Tensor x = uniform({2, 8, 8, 8}, -1.0, 1.0);
  backward(F::mean(stack(x)));
  std::vector<Tensor> reference;
  for (const Tensor& w : stack.weights) {
    reference.push_back(grad(w));
    set_grad(w, Tensor());
  }
  {
    nn::AutocastGuard autocast(DType::f16);
    backward(F::mean(F::to(stack(x), DType::f32)));
  }
  for (std::size_t i = 0; i < reference.size(); ++i)
    CHECK(max_difference(grad(stack.weights[i]), reference[i]) < 2e-3);
}

TEST_CASE("checkpoint: a chain of blocks keeps less, and computes the same gradients") {
  std::vector<Tensor> weights;
  for (int i = 0; i < 4; ++i) weights.push_back(parameter({64, 64}, 0.2));
  const Tensor x = uniform({32, 64}, -1.0, 1.0);
  auto block = [&](std::size_t i) {
    return [&, i](const std::vector<Tensor>& in) { return F::sigmoid(F::tanh(F::relu(F::matmul(in[0], weights[i])))); };
  };
  auto run = [&](bool checkpointed) {
    for (const Tensor& w : weights) set_grad(w, Tensor());
    cpu_allocator().reset_peak_stats();
    const std::int64_t base = activation_bytes();
    Tensor h = x;
    for (std::size_t i = 0; i < weights.size(); ++i) h = checkpointed ? nn::checkpoint(block(i), {h}) : block(i)({h});
    const std::int64_t held = activation_bytes() - base;
    backward(F::sum(h));
    std::vector<Tensor> grads;
    for (const Tensor& w : weights) grads.push_back(grad(w));
    return std::make_tuple(held, activation_peak() - base, grads);
  };
  const auto [held_plain, peak_plain, grads_plain] = run(false);
  const auto [held_checkpointed, peak_checkpointed, grads_checkpointed] = run(true);
  MESSAGE("held after forward: plain ", held_plain, ", checkpointed ", held_checkpointed, "; peak ", peak_plain, " vs ",
          peak_checkpointed);
  CHECK(held_checkpointed < held_plain / 2);  // each block's output alone instead of its three saved outputs
  CHECK(peak_checkpointed < peak_plain);
  for (std::size_t i = 0; i < weights.size(); ++i) CHECK(max_difference(grads_checkpointed[i], grads_plain[i]) == 0.0);
}

TEST_CASE("checkpoint: dropout's mask is replayed, and the recomputation is flagged") {
  Tensor w = parameter({16, 16}, 0.5);
  const Tensor x = uniform({8, 16}, -1.0, 1.0);
  int runs = 0, recomputations = 0;
  auto block = [&](const std::vector<Tensor>& in) {
    ++runs;
    if (nn::checkpoint_recomputing()) ++recomputations;
    return F::dropout(F::matmul(in[0], w), 0.5);
  };
  default_generator().manual_seed(11);
  backward(F::sum(block({x})));
  const Tensor plain = grad(w).clone();
  set_grad(w, Tensor());
  default_generator().manual_seed(11);
  backward(F::sum(nn::checkpoint(block, {x})));
  CHECK(max_difference(grad(w), plain) == 0.0);
  CHECK(runs == 3);
  CHECK(recomputations == 1);
  CHECK_FALSE(nn::checkpoint_recomputing());
}

TEST_CASE("checkpoint and autocast: bad use is an error") {
  CHECK_THROWS_AS(nn::AutocastGuard(DType::f64), DTypeError);
  Tensor w = parameter({4, 4}, 1.0);
  const Tensor y = F::sum(nn::checkpoint([&](const std::vector<Tensor>& in) { return F::matmul(in[0], w); },
                                         {uniform({2, 4}, -1.0, 1.0)}));
  backward(y);
  CHECK_THROWS_WITH_AS(backward(y), doctest::Contains("retain_graph"), ValueError);
}

TEST_CASE("checkpoint: BatchNorm2d's running statistics are updated once, not again in the recomputation") {
  nn::Sequential block({std::make_shared<nn::Conv2d>(3, 4, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(4)});
  auto& bn = dynamic_cast<nn::BatchNorm2d&>(*block[1]);
  const Tensor x = uniform({2, 3, 6, 6}, -1.0, 1.0);
  const Tensor loss = F::mean(nn::checkpoint([&](const std::vector<Tensor>& in) { return block(in[0]); }, {x}));
  const std::vector<double> mean_after_forward = bn.running_mean().to_vector<double>();
  const std::vector<double> var_after_forward = bn.running_var().to_vector<double>();
  CHECK(bn.num_batches_tracked().item<std::int64_t>() == 1);
  backward(loss);
  CHECK(bn.running_mean().to_vector<double>() == mean_after_forward);
  CHECK(bn.running_var().to_vector<double>() == var_after_forward);
  CHECK(bn.num_batches_tracked().item<std::int64_t>() == 1);
  CHECK(grad(block.parameters()[0]).defined());
}

TEST_CASE("checkpoint under autocast, backward outside it: recomputed in the forward's precision") {
  const ConvStack stack;
  const Tensor x = uniform({2, 8, 8, 8}, -1.0, 1.0);
  // The usual loop: forward (and the loss) under the guard, backward after it.
  auto gradients = [&](bool checkpointed) {
    Tensor loss;
    {
      nn::AutocastGuard autocast(DType::bf16);
      const Tensor y = checkpointed ? nn::checkpoint([&](const std::vector<Tensor>& in) { return stack(in[0]); }, {x})
                                    : stack(x);
      CHECK(y.dtype() == DType::bf16);
      loss = F::mean(F::to(y, DType::f32));
    }
    backward(loss);
    std::vector<Tensor> grads;
    for (const Tensor& w : stack.weights) {
      grads.push_back(grad(w));
      set_grad(w, Tensor());
    }
    return grads;
  };
  const std::vector<Tensor> plain = gradients(false), checkpointed = gradients(true);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    CHECK(checkpointed[i].dtype() == DType::f32);
    CHECK(max_difference(checkpointed[i], plain[i]) == 0.0);  // the same bf16 computation, replayed
  }
  CHECK_FALSE(nn::autocast_dtype().has_value());  // the recomputation's guard is gone again
}

TEST_CASE("AutocastGuard with enabled = false turns an enclosing autocast off inside it") {
  nn::AutocastGuard outer(DType::f16);
  CHECK(nn::autocast_dtype() == DType::f16);
  {
    nn::AutocastGuard off(DType::f16, false);
    CHECK_FALSE(nn::autocast_dtype().has_value());
    const Tensor y = F::matmul(uniform({2, 3}, -1.0, 1.0), uniform({3, 2}, -1.0, 1.0));
    CHECK(y.dtype() == DType::f32);
  }
  CHECK(nn::autocast_dtype() == DType::f16);
}

TEST_CASE("checkpoint of a block that returns its input, and eval-mode dropout, leave the input's history alone") {
  Tensor w = parameter({3}, 1.0);
  const Tensor same = F::dropout(w, 0.5, /*training=*/false);
  CHECK(same.impl_ptr() == w.impl_ptr());  // the input itself, as PyTorch returns it
  CHECK(is_leaf(w));
  backward(F::sum(same));
  CHECK(grad(w).to_vector<float>() == std::vector<float>{1, 1, 1});
  set_grad(w, Tensor());

  const Tensor through = nn::checkpoint([](const std::vector<Tensor>& in) { return in[0]; }, {w});
  CHECK(is_leaf(w));  // the node went onto an alias, not onto w
  CHECK(grad_fn(through) != nullptr);
  backward(F::sum(F::mul(through, 2.0)));
  CHECK(grad(w).to_vector<float>() == std::vector<float>{2, 2, 2});
}
