// Autograd on the CPU: hand-computed gradients, gradcheck (f64 finite differences) for every
// differentiable op, PyTorch's corner rules, what backward frees (measured through the allocator's
// per-tag statistics), hooks, modes, and every misuse that must be an error.
#include <doctest/doctest.h>

#include <cmath>

#include "core/random.h"
#include "kernels/elementwise.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/gradcheck.h"
#include "nn/layers.h"
#include "nn/node.h"
#include "nn/saved_activations.h"

using namespace frugal;
using namespace frugal::autograd;
namespace F = frugal::functional;

namespace {
Tensor leaf(Shape shape, double low = -1.0, double high = 1.0) {
  Tensor t = uniform(std::move(shape), low, high, {.dtype = DType::f64});
  return set_requires_grad(t);
}

Tensor constant(Shape shape, double low = -1.0, double high = 1.0) {
  return uniform(std::move(shape), low, high, {.dtype = DType::f64});
}

std::int64_t tag_bytes(MemoryTag tag) { return allocator_for(Device::cpu()).stats().tag_bytes[static_cast<int>(tag)].current; }
}  // namespace

TEST_CASE("autograd: a hand-computed gradient, accumulated over two backward passes") {
  Tensor x = from_vector<double>({1.0, -2.0, 3.0}, {3});
  set_requires_grad(x);
  const Tensor y = F::sum(F::add(F::mul(x, x), F::mul(x, 3.0)));  // d/dx = 2x + 3
  CHECK(grad_fn(y) != nullptr);
  CHECK(grad_fn(y)->name() == "sum");
  backward(y);
  CHECK(grad(x).to_vector<double>() == std::vector<double>{5.0, -1.0, 9.0});
  backward(F::sum(F::mul(x, 2.0)));  // a second graph: .grad accumulates
  CHECK(grad(x).to_vector<double>() == std::vector<double>{7.0, 1.0, 11.0});
  CHECK(is_leaf(x));
  CHECK_FALSE(is_leaf(y));
}

TEST_CASE("autograd: two leaves fed the same gradient get separate .grad tensors") {
  Tensor a = leaf({4}), b = leaf({4});
  backward(F::sum(F::add(a, b)));  // add passes one gradient tensor to both inputs
  backward(F::sum(F::add(a, b)));
  CHECK(grad(a).to_vector<double>() == std::vector<double>(4, 2.0));
  CHECK(grad(b).to_vector<double>() == std::vector<double>(4, 2.0));
  CHECK_FALSE(grad(a).shares_storage_with(grad(b)));
}

TEST_CASE("autograd: gradcheck of every elementwise, reduction and shape op") {
  const Tensor a = leaf({3, 4}), b = leaf({4}), positive = leaf({3, 4}, 0.5, 2.0);
  gradcheck([](const auto& in) { return F::add(in[0], in[1]); }, {a, b});
  gradcheck([](const auto& in) { return F::sub(in[0], in[1]); }, {a, b});
  gradcheck([](const auto& in) { return F::mul(in[0], in[1]); }, {a, b});
  gradcheck([](const auto& in) { return F::div(in[0], in[1]); }, {a, positive});
  gradcheck([](const auto& in) { return F::add(F::mul(F::neg(in[0]), 2.5), 1.0); }, {a});
  gradcheck([](const auto& in) { return F::exp(in[0]); }, {a});
  gradcheck([](const auto& in) { return F::log(in[0]); }, {positive});
  gradcheck([](const auto& in) { return F::sqrt(in[0]); }, {positive});
  gradcheck([](const auto& in) { return F::pow(in[0], 3.0); }, {a});
  gradcheck([](const auto& in) { return F::relu(in[0]); }, {a});
  gradcheck([](const auto& in) { return F::relu6(F::mul(in[0], 8.0)); }, {a});
  gradcheck([](const auto& in) { return F::sigmoid(in[0]); }, {a});
  gradcheck([](const auto& in) { return F::tanh(in[0]); }, {a});
  gradcheck([](const auto& in) { return F::sum(in[0], {1}, true); }, {a});
  gradcheck([](const auto& in) { return F::mean(in[0], {0}); }, {a});
  gradcheck([](const auto& in) { return F::mean(in[0]); }, {a});
  gradcheck([](const auto& in) { return F::flatten(F::permute(F::reshape(in[0], {2, 6}), {1, 0})); }, {a});
  gradcheck([](const auto& in) { return F::transpose(in[0], 0, 1); }, {a});
}

TEST_CASE("autograd: gradcheck of matmul, linear and convolution") {
  gradcheck([](const auto& in) { return F::matmul(in[0], in[1]); }, {leaf({3, 5}), leaf({5, 2})});
  gradcheck([](const auto& in) { return F::matmul(in[0], in[1]); }, {leaf({2, 3, 5}), leaf({2, 5, 4})});
  gradcheck([](const auto& in) { return F::matmul(in[0], in[1]); }, {leaf({2, 3, 5}), leaf({5, 4})});
  gradcheck([](const auto& in) { return F::linear(in[0], in[1], in[2]); }, {leaf({4, 3}), leaf({2, 3}), leaf({2})});
  gradcheck([](const auto& in) { return F::conv2d(in[0], in[1], in[2], {.stride = {2, 1}, .padding = {1, 1}}); },
            {leaf({2, 3, 5, 6}), leaf({4, 3, 3, 3}), leaf({4})});
  gradcheck([](const auto& in) { return F::conv2d(in[0], in[1], Tensor(), {.padding = {1, 1}, .groups = 3}); },
            {leaf({2, 3, 5, 5}), leaf({6, 1, 3, 3})});
}

TEST_CASE("autograd: gradcheck of pooling, batch norm, dropout, softmax and losses") {
  const Tensor x = leaf({2, 3, 6, 6});
  gradcheck([](const auto& in) { return F::max_pool2d(in[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}); }, {x});
  gradcheck([](const auto& in) { return F::avg_pool2d(in[0], {.kernel = {2, 2}}); }, {x});
  gradcheck([](const auto& in) { return F::adaptive_avg_pool2d(in[0], {1, 1}); }, {x});
  for (bool fuse : {false, true}) {
    CAPTURE(fuse);
    gradcheck(
        [fuse](const auto& in) {
          // Fresh running statistics every call: the finite differences must see the same function.
          const Tensor mean = zeros({3}, {.dtype = DType::f64}), var = ones({3}, {.dtype = DType::f64});
          return F::batch_norm(F::mul(in[0], 3.0), mean, var, in[1], in[2], true, 0.1, 1e-5, fuse);
        },
        {x, leaf({3}, 0.5, 1.5), leaf({3})});
  }
  const Tensor running_mean = constant({3}), running_var = constant({3}, 0.5, 2.0);
  gradcheck([&](const auto& in) { return F::batch_norm(in[0], running_mean, running_var, in[1], in[2], false, 0.1, 1e-5); },
            {x, leaf({3}), leaf({3})});
  gradcheck(
      [](const auto& in) {
        Generator generator(7);  // the same mask every call
        return F::dropout(in[0], 0.3, true, &generator);
      },
      {x});
  gradcheck([](const auto& in) { return F::log_softmax(in[0], 1); }, {leaf({4, 5})});
  gradcheck([](const auto& in) { return F::softmax(in[0], 0); }, {leaf({4, 5})});
  const Tensor targets = from_vector<std::int64_t>({2, 0, -100, 4}, {4});
  gradcheck([&](const auto& in) { return F::cross_entropy(in[0], targets, {.label_smoothing = 0.1}); }, {leaf({4, 5})});
  gradcheck([&](const auto& in) { return F::mse_loss(in[0], in[1]); }, {leaf({3, 4}), leaf({3, 4})});
}

TEST_CASE("autograd: ReLU6 passes no gradient at exactly 0 and 6 (PyTorch's rule)") {
  Tensor x = from_vector<float>({-1.0f, 0.0f, 3.0f, 6.0f, 7.0f}, {5});
  set_requires_grad(x);
  backward(F::sum(F::relu6(x)));
  CHECK(grad(x).to_vector<double>() == std::vector<double>{0, 0, 1, 0, 0});
}

TEST_CASE("autograd: in-place ReLU6 reuses its input and still differentiates") {
  Tensor w = leaf({3, 4});
  Tensor y = F::mul(w, 10.0);
  Tensor& z = F::relu6_(y);
  CHECK(z.is_same(y));
  CHECK(grad_fn(y)->name() == "relu6_");
  backward(F::sum(z));
  const auto wv = w.to_vector<double>(), g = grad(w).to_vector<double>();
  for (std::size_t i = 0; i < wv.size(); ++i) CHECK(g[i] == (wv[i] > 0 && wv[i] < 0.6 ? 10.0 : 0.0));
  Tensor leaf_tensor = leaf({2});
  CHECK_THROWS_AS(F::relu6_(leaf_tensor), ValueError);
}

TEST_CASE("autograd: after backward, the graph's saved activations are freed") {
  const std::int64_t before = tag_bytes(MemoryTag::activation);
  Tensor w = leaf({64, 64});
  {
    const Tensor x = constant({32, 64});
    Tensor loss = F::sum(F::tanh(F::matmul(F::relu(F::matmul(x, w)), w)));
    // Held for backward: relu's output (the second matmul saves it too: one tensor) and tanh's
    // output, [32, 64] f64 each, and the loss; the matmuls' outputs were freed once consumed.
    CHECK(tag_bytes(MemoryTag::activation) - before == 2 * 32 * 64 * 8 + 8);
    backward(loss);
    // Only the loss itself (one f64) is still an activation: the caller holds it.
    CHECK(tag_bytes(MemoryTag::activation) - before == 8);
  }
  CHECK(tag_bytes(MemoryTag::activation) == before);
  CHECK(grad(w).defined());
}

TEST_CASE("autograd: hooks, retain_grad and post-accumulate hooks") {
  Tensor x = leaf({3});
  Tensor y = F::mul(x, 2.0);
  retain_grad(y);
  register_hook(y, [](const Tensor& g) { return frugal::mul(g, 10.0); });  // scales what flows on to x
  int accumulated = 0;
  register_post_accumulate_grad_hook(x, [&](const Tensor& param) {
    ++accumulated;
    CHECK(grad(param).defined());
  });
  backward(F::sum(y));
  CHECK(grad(x).to_vector<double>() == std::vector<double>(3, 20.0));
  CHECK(accumulated == 1);
  CHECK(grad(y).defined());
}

TEST_CASE("autograd: no-grad mode records nothing") {
  Tensor x = leaf({3});
  NoGradGuard no_grad;
  const Tensor y = F::mul(x, 2.0);
  CHECK_FALSE(requires_grad(y));
  CHECK(grad_fn(y) == nullptr);
}

TEST_CASE("autograd: anomaly mode names the op that made the first NaN") {
  Tensor x = from_vector<double>({-1.0, 2.0}, {2});
  set_requires_grad(x);
  AnomalyModeGuard anomaly;
  const Tensor y = F::sum(F::sqrt(x));  // sqrt(-1) = NaN, and so is its gradient
  CHECK_THROWS_WITH_AS(backward(y), doctest::Contains("sqrt"), ValueError);
}

TEST_CASE("autograd: misuse is a clear error") {
  Tensor x = leaf({3});
  CHECK_THROWS_WITH_AS(backward(F::mul(x, 2.0)), doctest::Contains("scalar"), ShapeError);
  const Tensor y = F::sum(F::exp(x));
  backward(y);
  CHECK_THROWS_WITH_AS(backward(y), doctest::Contains("retain_graph"), ValueError);
  const Tensor z = F::sum(F::exp(x));
  backward(z, Tensor(), true);
  CHECK_NOTHROW(backward(z));  // retained once, so a second pass works
  Tensor saved = F::mul(x, 1.0);
  Tensor s2 = F::sigmoid(x);
  const Tensor v = F::sum(F::mul(s2, x));  // mul saves s2
  frugal::relu_(s2);                        // ... which is then modified in place
  CHECK_THROWS_WITH_AS(backward(v), doctest::Contains("modified in place"), ValueError);
  CHECK_THROWS_AS(set_requires_grad(saved, false), ValueError);  // not a leaf
  Tensor ints = zeros({2}, {.dtype = DType::i64});
  CHECK_THROWS_AS(set_requires_grad(ints), DTypeError);
  CHECK_THROWS_AS(backward(constant({1})), ValueError);  // nothing requires grad
  CHECK_THROWS_AS(backward(F::sum(x), ones({2}, {.dtype = DType::f64})), ShapeError);
}

TEST_CASE("autograd: a root gradient takes the root's dtype, integer outputs do not require grad") {
  Tensor w = from_vector<float>({1.0f, 2.0f}, {2});
  set_requires_grad(w);
  backward(F::add(w, 1.0), ones({2}, {.dtype = DType::f64}));  // an f64 gradient for an f32 root
  CHECK(grad(w).dtype() == DType::f32);
  CHECK(grad(w).to_vector<float>() == std::vector<float>{1, 1});

  const Tensor as_int = F::to(w, DType::i64);
  CHECK_FALSE(requires_grad(as_int));  // as in PyTorch: no gradient flows through integers
  CHECK(grad_fn(as_int) == nullptr);
}

TEST_CASE("autograd: retain_grad stores the gradient after the tensor's hooks ran, whatever the order they were added") {
  Tensor x = from_vector<double>({1.0, 2.0}, {2});
  set_requires_grad(x);
  const Tensor y = F::mul(x, 3.0);
  retain_grad(y);
  register_hook(y, [](const Tensor& g) { return frugal::mul(g, 2.0); });  // added after retain_grad
  backward(F::sum(y));
  CHECK(grad(y).to_vector<double>() == std::vector<double>{2, 2});  // the doubled gradient, as PyTorch
  CHECK(grad(x).to_vector<double>() == std::vector<double>{6, 6});
}

TEST_CASE("autograd: pow(x, 0) has a zero gradient, also at x = 0") {
  Tensor x = from_vector<double>({0.0, 2.0}, {2});
  set_requires_grad(x);
  backward(F::sum(F::pow(x, 0.0)));
  CHECK(grad(x).to_vector<double>() == std::vector<double>{0, 0});
}

namespace {

// A BatchNorm (affine, training), with or without ReLU6, on a [4, 3, 5, 5] f64 map made by an op.
struct BatchNormCase {
  Tensor x = leaf({4, 3, 5, 5}, -2.0, 2.0), weight = leaf({3}, 0.5, 1.5), bias = leaf({3}, -0.5, 0.5);
  Tensor running_mean = zeros({3}, {.dtype = DType::f64}), running_var = ones({3}, {.dtype = DType::f64});
  Tensor forward(bool relu6 = true) const {
    return F::batch_norm(F::mul(x, 3.0), running_mean, running_var, weight, bias, true, 0.1, 1e-5, relu6,
                         nn::activation_saving());
  }
};

}  // namespace

TEST_CASE("saving less: a rebuilt output still catches an in-place change made after it was saved") {
  const nn::ActivationSavingGuard saving({.bn_from_output = true});
  const BatchNormCase c;
  Tensor y = c.forward();                      // BatchNorm keeps x-hat; y carries how to rebuild it
  const Tensor loss = F::sum(F::mul(y, y));    // mul saves y: the rebuild, not y's memory
  frugal::relu_(y);                            // y changes after it was saved
  CHECK_THROWS_WITH_AS(backward(loss), doctest::Contains("modified in place"), ValueError);
}

TEST_CASE("saving less: an output changed in place before it is saved is kept as it is, not rebuilt") {
  // BatchNorm without ReLU6 has negative outputs; an in-place ReLU then zeroes them, so a rebuild
  // (BatchNorm's output as it was) would give w's gradient, which is y, the wrong values.
  const auto weight_gradient = [](const nn::ActivationSaving& way) {
    const nn::ActivationSavingGuard saving(way);
    manual_seed(7);  // the same x, weight, bias and w both times
    const BatchNormCase c;
    const Tensor w = leaf({4, 3, 5, 5});
    Tensor y = c.forward(false);
    F::relu_(y);
    backward(F::sum(F::mul(y, w)));
    return grad(w).to_vector<double>();
  };
  const std::vector<double> standard = weight_gradient({}), rebuilt = weight_gradient({.bn_from_output = true});
  REQUIRE(standard.size() == rebuilt.size());
  for (std::size_t i = 0; i < standard.size(); ++i) CHECK(rebuilt[i] == doctest::Approx(standard[i]).epsilon(1e-12));
}

TEST_CASE("saving less: a feature map two nodes save is compressed once, and an op that saves its own output compresses it") {
  const Tensor x = leaf({4, 8, 16, 16});
  const Tensor h = F::mul(x, 2.0);  // made by an op: a feature map the graph may compress
  const nn::ActivationSavingGuard saving({.compress = nn::SavedCompression::bf16});
  const std::int64_t before = tag_bytes(MemoryTag::activation);
  const Tensor a = F::mul(h, h);  // saves h twice: one bf16 copy
  const std::int64_t one_copy = tag_bytes(MemoryTag::activation) - before - static_cast<std::int64_t>(a.nbytes());
  CHECK(one_copy == h.numel() * 2);  // bf16: 2 bytes an element
  const Tensor b = F::mul(h, 3.0);   // a scalar multiply saves nothing
  const Tensor c = F::sigmoid(h);    // saves its output, a new map: its own copy
  const Tensor d = F::mul(h, c);     // h again: shared; c: shared with sigmoid's
  CHECK(tag_bytes(MemoryTag::activation) - before ==
        one_copy + static_cast<std::int64_t>(a.nbytes() + b.nbytes() + c.nbytes() + d.nbytes()) + c.numel() * 2);
  backward(F::sum(F::add(F::add(a, b), d)));
  CHECK(grad(x).defined());
}

TEST_CASE("saving less: what backward rebuilds or decompresses is tagged activation, not grad") {
  const MemoryTagScope in_backward(MemoryTag::grad);  // as backward allocates
  const auto made_again = [](const autograd::SavedTensor& saved) {
    const std::int64_t activation = tag_bytes(MemoryTag::activation), gradient = tag_bytes(MemoryTag::grad);
    const Tensor t = saved.unpack("test");
    CHECK(tag_bytes(MemoryTag::grad) == gradient);
    return tag_bytes(MemoryTag::activation) - activation - static_cast<std::int64_t>(t.nbytes());
  };
  {
    const nn::ActivationSavingGuard saving({.compress = nn::SavedCompression::int8});
    const Tensor h = F::mul(leaf({2, 4, 8, 8}), 2.0);
    CHECK(made_again(autograd::SavedTensor(h)) == 0);
  }
  {
    const nn::ActivationSavingGuard saving({.bn_from_output = true});
    const BatchNormCase c;
    CHECK(made_again(autograd::SavedTensor(c.forward())) == 0);
  }
}

TEST_CASE("saving less: ReLU and ReLU6 keep bit masks when their caller passes them, as the layers do under the guard") {
  // F::relu and F::relu6 do not read the guard: nn::ReLU and nn::ReLU6 read it and pass it.
  const nn::ActivationSavingGuard saving({.bit_masks = true});
  const Tensor h = F::mul(leaf({4, 8, 16, 16}), 2.0);  // 8192 elements: a mask of 1024 bytes
  const auto saved_beside_output = [](const auto& op) {
    const std::int64_t before = tag_bytes(MemoryTag::activation);
    const Tensor y = op();
    return tag_bytes(MemoryTag::activation) - before - static_cast<std::int64_t>(y.nbytes());
  };
  const std::int64_t mask = h.numel() / 8;
  CHECK(saved_beside_output([&] { return F::relu(h); }) == 0);  // standard by default: the output itself
  CHECK(saved_beside_output([&] { return F::relu6(h); }) == 0);
  CHECK(saved_beside_output([&] { return F::relu(h, {.bit_masks = true}); }) == mask);
  CHECK(saved_beside_output([&] { return F::relu6(h, {.bit_masks = true}); }) == mask);
  CHECK(saved_beside_output([&] { return nn::ReLU()(h); }) == mask);
  CHECK(saved_beside_output([&] { return nn::ReLU6()(h); }) == mask);
}
