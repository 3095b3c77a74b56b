// Modules, layers, init and losses on the CPU: PyTorch's dotted names and their order, train/eval,
// batch norm's running statistics (momentum and cumulative), state dicts (round trip, strict errors,
// dtype conversion), moving in place with identity kept, PyTorch's default initialisation measured
// statistically, memory tags (parameters, gradients freed by zero_grad, in-place ReLU6), a small
// MLP and CNN trained by hand, and a gradcheck through a whole Conv-BN-ReLU6-pool-Linear stack.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/random.h"
#include "kernels/elementwise.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/gradcheck.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/losses.h"

using namespace frugal;
using namespace frugal::nn;
using frugal::autograd::backward;
using frugal::autograd::grad;
using frugal::autograd::requires_grad;
namespace F = frugal::functional;

namespace {
std::int64_t tag_bytes(MemoryTag tag) { return allocator_for(Device::cpu()).stats().tag_bytes[static_cast<int>(tag)].current; }

template <typename Named>
std::vector<std::string> names(const Named& named) {
  std::vector<std::string> out;
  for (const auto& [name, value] : named) out.push_back(name);
  return out;
}

// p -= lr * grad, by hand (the optimizers are elsewhere), then the gradients are dropped.
void sgd_step(Module& model, double lr) {
  autograd::NoGradGuard no_grad;
  for (Tensor p : model.parameters()) add_(p, frugal::mul(grad(p), -lr));
  model.zero_grad();
}

struct ChannelStats {
  std::vector<double> mean, unbiased_var;
};

// Per-channel mean and unbiased variance of x [N, C, H, W], by hand.
ChannelStats channel_stats(const Tensor& x) {
  const auto v = x.to_vector<double>();
  const std::int64_t n = x.size(0), c = x.size(1), plane = x.size(2) * x.size(3), count = n * plane;
  ChannelStats s{std::vector<double>(static_cast<std::size_t>(c)), std::vector<double>(static_cast<std::size_t>(c))};
  for (std::int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, squares = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < plane; ++j) sum += v[static_cast<std::size_t>((i * c + ch) * plane + j)];
    const double mean = sum / static_cast<double>(count);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < plane; ++j) squares += std::pow(v[static_cast<std::size_t>((i * c + ch) * plane + j)] - mean, 2);
    s.mean[static_cast<std::size_t>(ch)] = mean;
    s.unbiased_var[static_cast<std::size_t>(ch)] = squares / static_cast<double>(count - 1);
  }
  return s;
}

void check_values(const Tensor& t, const std::vector<double>& expected, double epsilon = 1e-12) {
  const auto got = t.to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    CHECK_MESSAGE(got[i] == doctest::Approx(expected[i]).epsilon(epsilon), "element ", i);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

double sample_std(const std::vector<double>& v) {
  double mean = 0, squares = 0;
  for (double x : v) mean += x / static_cast<double>(v.size());
  for (double x : v) squares += (x - mean) * (x - mean);
  return std::sqrt(squares / static_cast<double>(v.size() - 1));
}

// Conv -> BN -> ReLU -> pool -> Linear over [N, 1, 4, 4] images, two classes.
std::shared_ptr<Sequential> small_cnn(std::uint64_t seed) {
  Generator generator(seed);
  auto net = std::make_shared<Sequential>();
  net->push_back(std::make_shared<Conv2d>(1, 3, 3, 1, 1, 1, 1, true, &generator));
  net->push_back(std::make_shared<BatchNorm2d>(3));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<MaxPool2d>(2));
  net->push_back(std::make_shared<Flatten>());
  net->push_back(std::make_shared<Linear>(3 * 2 * 2, 2, true, &generator));
  return net;
}

// A module whose two parameter names hold one tensor (tied weights).
struct Tied : Module {
  Tied() : Module("Tied") {
    Tensor w = zeros({2});  // allocated under MemoryTag::other: registering moves it into param memory
    register_parameter("a", w);
    register_parameter("b", w);
    shared = w;
  }
  Tensor forward(const Tensor& x) override { return x; }
  Tensor shared;
};
}  // namespace

TEST_CASE("nn modules: dotted names and their order in a nested Sequential, as PyTorch") {
  auto conv = std::make_shared<Conv2d>(3, 4, 3);
  auto inner = std::make_shared<Sequential>();
  auto linear = inner->push_back(std::make_shared<Linear>(4, 2));
  inner->push_back(std::make_shared<ReLU>());
  Sequential model{conv, std::make_shared<BatchNorm2d>(4), inner};

  CHECK(names(model.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "2.0.weight", "2.0.bias"});
  CHECK(names(model.named_buffers()) == std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"});
  CHECK(names(model.state_dict()) == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                                              "1.running_var", "1.num_batches_tracked", "2.0.weight", "2.0.bias"});
  std::vector<std::string> types;
  for (const auto& [name, module] : model.named_modules()) types.push_back(name + ":" + module->type_name());
  CHECK(types == std::vector<std::string>{":Sequential", "0:Conv2d", "1:BatchNorm2d", "2:Sequential", "2.0:Linear", "2.1:ReLU"});
  CHECK(model.parameter_count() == 4 * 3 * 3 * 3 + 4 + 4 + 4 + 2 * 4 + 2);
  CHECK(model.size() == 3);
  CHECK(model[0] == conv);

  const std::vector<Tensor> params = model.parameters();
  CHECK(params[0].is_same(conv->weight()));  // the registered handles themselves
  CHECK(params[5].is_same(linear->bias()));
  for (const Tensor& p : params) CHECK(requires_grad(p));
  for (const Tensor& b : model.buffers()) CHECK_FALSE(requires_grad(b));

  CHECK_THROWS_AS(model[3], IndexError);
  CHECK_THROWS_AS(model.register_parameter("0", zeros({1})), ValueError);      // taken by a child
  CHECK_THROWS_AS(model.register_parameter("a.b", zeros({1})), ValueError);    // dots separate levels
  CHECK_THROWS_AS(model.register_buffer("", zeros({1})), ValueError);
  Tensor learning = zeros({1});
  autograd::set_requires_grad(learning);
  CHECK_THROWS_AS(model.register_buffer("stats", learning), ValueError);
  CHECK_THROWS_AS(model.register_parameter("count", zeros({1}, {.dtype = DType::i64})), DTypeError);
}

TEST_CASE("nn modules: tied parameters are listed once, saved under each name, and moved into param memory") {
  Tied tied;
  CHECK(names(tied.named_parameters()) == std::vector<std::string>{"a"});
  CHECK(names(tied.state_dict()) == std::vector<std::string>{"a", "b"});
  CHECK(tied.parameters()[0].is_same(tied.shared));
  CHECK(tied.shared.storage()->tag() == MemoryTag::param);
}

TEST_CASE("nn modules: train and eval reach every descendant") {
  auto inner = std::make_shared<Sequential>();
  auto dropout = inner->push_back(std::make_shared<Dropout>());
  Sequential model{std::make_shared<Linear>(2, 2), inner};
  CHECK(dropout->is_training());
  model.eval();
  for (const auto& [name, module] : model.named_modules()) CHECK_MESSAGE(!module->is_training(), name);
  inner->train();  // a subtree alone
  CHECK(dropout->is_training());
  CHECK_FALSE(model.is_training());
  model.train();
  for (const auto& [name, module] : model.named_modules()) CHECK_MESSAGE(module->is_training(), name);
}

TEST_CASE("nn modules: BatchNorm2d running statistics with momentum 0.1, unbiased variance, num_batches_tracked") {
  BatchNorm2d bn(3);
  bn.to(DType::f64);
  CHECK(bn.num_batches_tracked().dtype() == DType::i64);  // counts are not converted
  const Tensor x1 = uniform({4, 3, 3, 5}, -1.0, 3.0, {.dtype = DType::f64});
  const Tensor x2 = uniform({4, 3, 3, 5}, -2.0, 1.0, {.dtype = DType::f64});
  const ChannelStats s1 = channel_stats(x1), s2 = channel_stats(x2);
  bn(x1);
  bn(x2);
  std::vector<double> mean(3), var(3);
  for (std::size_t c = 0; c < 3; ++c) {
    mean[c] = 0.9 * (0.9 * 0.0 + 0.1 * s1.mean[c]) + 0.1 * s2.mean[c];
    var[c] = 0.9 * (0.9 * 1.0 + 0.1 * s1.unbiased_var[c]) + 0.1 * s2.unbiased_var[c];
  }
  check_values(bn.running_mean(), mean);
  check_values(bn.running_var(), var);
  CHECK(bn.num_batches_tracked().item<std::int64_t>() == 2);

  // Eval: normalised with the running statistics, which stay as they are.
  bn.eval();
  const Tensor y = bn(x1);
  const auto xv = x1.to_vector<double>();
  std::vector<double> expected(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const std::size_t c = (i / 15) % 3;
    expected[i] = (xv[i] - mean[c]) / std::sqrt(var[c] + 1e-5);
  }
  check_values(y, expected);
  check_values(bn.running_mean(), mean);
  CHECK(bn.num_batches_tracked().item<std::int64_t>() == 2);
}

TEST_CASE("nn modules: BatchNorm2d with momentum nullopt keeps the cumulative average") {
  BatchNorm2d bn(2, 1e-5, std::nullopt);
  bn.to(DType::f64);
  std::vector<Tensor> batches;
  for (int i = 0; i < 3; ++i) batches.push_back(uniform({3, 2, 2, 3}, -1.0 - i, 2.0 + i, {.dtype = DType::f64}));
  std::vector<double> mean(2, 0.0), var(2, 0.0);
  for (const Tensor& x : batches) {
    bn(x);
    const ChannelStats s = channel_stats(x);
    for (std::size_t c = 0; c < 2; ++c) {
      mean[c] += s.mean[c] / 3;
      var[c] += s.unbiased_var[c] / 3;
    }
  }
  check_values(bn.running_mean(), mean);
  check_values(bn.running_var(), var);  // the initial 1 is forgotten at the first batch (momentum 1/1)
  CHECK(bn.num_batches_tracked().item<std::int64_t>() == 3);
}

TEST_CASE("nn modules: BatchNorm2d without running statistics normalises with the batch in eval mode too") {
  BatchNorm2d bn(3, 1e-5, 0.1, false, false);
  CHECK(bn.named_buffers().empty());
  CHECK(bn.named_parameters().empty());
  bn.to(DType::f64);
  bn.eval();
  const Tensor x = uniform({2, 3, 4, 4}, 1.0, 5.0, {.dtype = DType::f64});
  const ChannelStats s = channel_stats(bn(x));
  for (double m : s.mean) CHECK(std::abs(m) < 1e-12);
  CHECK_THROWS_AS(bn(zeros({2, 4, 4, 4}, {.dtype = DType::f64})), ShapeError);
}

TEST_CASE("nn modules: a state dict round trip reproduces the outputs") {
  auto a = small_cnn(1), b = small_cnn(2);
  const Tensor x = uniform({4, 1, 4, 4}, -1.0, 1.0);
  (*a)(x);  // moves a's running statistics away from their initial values
  const StateDict state = a->state_dict();
  for (const auto& [name, t] : state) {
    CHECK_MESSAGE(!requires_grad(t), name);  // detached ...
    CHECK_MESSAGE(t.storage()->tag() == MemoryTag::param, name);  // ... views of the module's own memory
  }
  CHECK(state[0].second.shares_storage_with(a->parameters()[0]));

  const LoadResult result = b->load_state_dict(state);
  CHECK(result.missing_keys.empty());
  CHECK(result.unexpected_keys.empty());
  a->eval();
  b->eval();
  CHECK((*a)(x).to_vector<double>() == (*b)(x).to_vector<double>());
  const auto* bn = dynamic_cast<const BatchNorm2d*>((*b)[1].get());
  REQUIRE(bn != nullptr);
  CHECK(bn->num_batches_tracked().item<std::int64_t>() == 1);
}

TEST_CASE("nn modules: strict loading lists every missing key, unexpected key and shape mismatch at once") {
  auto source = small_cnn(1), target = small_cnn(2);
  StateDict state;
  for (const auto& [name, t] : source->state_dict()) {
    if (name == "0.bias" || name == "1.running_var") continue;
    if (name == "0.weight" || name == "5.weight") {
      state.emplace_back(name, zeros({2, 7}));
      continue;
    }
    state.emplace_back(name, t);
  }
  state.emplace_back("extra.weight", zeros({1}));
  state.emplace_back("9.bias", zeros({1}));
  const auto before = target->state_dict()[8].second.to_vector<double>();  // "5.bias", which would load

  std::string message;
  try {
    target->load_state_dict(state);
  } catch (const ValueError& e) {
    message = e.what();
  }
  for (const char* key : {"\"0.bias\"", "\"1.running_var\"", "\"extra.weight\"", "\"9.bias\"", "\"0.weight\"", "\"5.weight\""})
    CHECK_MESSAGE(message.find(key) != std::string::npos, key, " in: ", message);
  CHECK(message.find("[3, 1, 3, 3]") != std::string::npos);  // the module's shape of 0.weight
  CHECK(target->state_dict()[8].second.to_vector<double>() == before);  // nothing was loaded

  // Non-strict: shape mismatches are still an error (and only they are listed) ...
  try {
    target->load_state_dict(state, false);
    message.clear();
  } catch (const ValueError& e) {
    message = e.what();
  }
  CHECK(message.find("\"5.weight\"") != std::string::npos);
  CHECK(message.find("extra.weight") == std::string::npos);
  // ... and without them, the keys that match are loaded and the rest reported.
  StateDict partial;
  for (const auto& [name, t] : state)
    if (name != "0.weight" && name != "5.weight") partial.emplace_back(name, t);
  const LoadResult result = target->load_state_dict(partial, false);
  CHECK(result.missing_keys == std::vector<std::string>{"0.weight", "0.bias", "1.running_var", "5.weight"});
  CHECK(result.unexpected_keys == std::vector<std::string>{"extra.weight", "9.bias"});
  CHECK(target->named_parameters()[5].second.to_vector<double>() == source->named_parameters()[5].second.to_vector<double>());  // 5.bias
}

TEST_CASE("nn modules: loading converts dtypes, to(DType) converts in place and keeps every handle") {
  Generator generator(5);
  Linear wide(3, 2, true, &generator);
  wide.to(DType::f64);
  Linear narrow(3, 2);
  narrow.load_state_dict(wide.state_dict());
  CHECK(narrow.weight().dtype() == DType::f32);
  check_values(narrow.weight(), wide.weight().to_vector<double>(), 1e-6);

  const std::vector<Tensor> before = narrow.parameters();  // what an optimizer would hold
  backward(F::sum(narrow(ones({4, 3}))));
  narrow.to(DType::f64);
  CHECK(before[0].is_same(narrow.weight()));
  CHECK(before[0].dtype() == DType::f64);
  CHECK(before[0].storage()->tag() == MemoryTag::param);
  CHECK(requires_grad(before[0]));
  CHECK(grad(before[1]).dtype() == DType::f64);  // the gradient follows
  check_values(grad(before[1]), {4.0, 4.0});
  CHECK_THROWS_AS(narrow.to(DType::i64), DTypeError);
  narrow.to(Device::cpu());
  CHECK(before[0].is_same(narrow.weight()));
}

TEST_CASE("nn init: PyTorch's default initialisation, measured") {
  Linear linear(1000, 500);
  const double bound = 1.0 / std::sqrt(1000.0);
  const auto w = linear.weight().to_vector<double>(), b = linear.bias().to_vector<double>();
  CHECK(max_abs(w) <= bound);
  CHECK(max_abs(b) <= bound);
  CHECK(sample_std(w) == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.01));  // uniform(-b, b): std b / sqrt(3)

  Conv2d conv(16, 8, 3);
  const double conv_bound = 1.0 / std::sqrt(16.0 * 9.0);
  CHECK(max_abs(conv.weight().to_vector<double>()) <= conv_bound);
  CHECK(sample_std(conv.weight().to_vector<double>()) == doctest::Approx(conv_bound / std::sqrt(3.0)).epsilon(0.05));

  BatchNorm2d bn(4);
  CHECK(bn.weight().to_vector<double>() == std::vector<double>(4, 1.0));
  CHECK(bn.bias().to_vector<double>() == std::vector<double>(4, 0.0));
  CHECK(bn.running_mean().to_vector<double>() == std::vector<double>(4, 0.0));
  CHECK(bn.running_var().to_vector<double>() == std::vector<double>(4, 1.0));

  Generator g1(9), g2(9);  // the same seed gives the same model
  CHECK(Linear(5, 3, true, &g1).weight().to_vector<double>() == Linear(5, 3, true, &g2).weight().to_vector<double>());
}

TEST_CASE("nn init: fans, gains and kaiming_normal_ (torchvision's conv init)") {
  const Tensor weight = empty({64, 32, 3, 3});
  const init::Fans fans = init::calculate_fan_in_and_fan_out(weight);
  CHECK(fans.fan_in == 32 * 9);
  CHECK(fans.fan_out == 64 * 9);
  CHECK_THROWS_AS(init::calculate_fan_in_and_fan_out(empty({5})), ValueError);
  CHECK(init::calculate_gain("relu") == doctest::Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain("leaky_relu") == doctest::Approx(std::sqrt(2.0 / (1.0 + 0.01 * 0.01))));
  CHECK(init::calculate_gain("leaky_relu", 0.2) == doctest::Approx(std::sqrt(2.0 / 1.04)));
  CHECK(init::calculate_gain("tanh") == doctest::Approx(5.0 / 3.0));
  CHECK(init::calculate_gain("linear") == 1.0);
  CHECK_THROWS_AS(init::calculate_gain("swish"), ValueError);

  for (init::FanMode mode : {init::FanMode::fan_in, init::FanMode::fan_out}) {
    init::kaiming_normal_(weight, 0.0, mode, "relu");
    const double fan = static_cast<double>(mode == init::FanMode::fan_in ? fans.fan_in : fans.fan_out);
    CHECK(sample_std(weight.to_vector<double>()) == doctest::Approx(std::sqrt(2.0 / fan)).epsilon(0.05));
  }
  const Tensor linear_weight = init::normal_(empty({100, 200}), 0.0, 0.01);
  CHECK(sample_std(linear_weight.to_vector<double>()) == doctest::Approx(0.01).epsilon(0.05));
  CHECK(init::constant_(empty({3}), 2.5).to_vector<double>() == std::vector<double>(3, 2.5));
  CHECK(init::zeros_(ones({2})).to_vector<double>() == std::vector<double>(2, 0.0));
  CHECK(init::ones_(zeros({2})).to_vector<double>() == std::vector<double>(2, 1.0));
}

TEST_CASE("nn modules: parameters live in param memory, zero_grad gives the gradients' memory back") {
  const std::int64_t params_before = tag_bytes(MemoryTag::param);
  Linear linear(64, 32);
  CHECK(tag_bytes(MemoryTag::param) - params_before == (64 * 32 + 32) * 4);  // exactly the parameters, nothing else
  const std::int64_t grads_before = tag_bytes(MemoryTag::grad);
  backward(F::sum(linear(uniform({8, 64}))));
  CHECK(tag_bytes(MemoryTag::grad) - grads_before == (64 * 32 + 32) * 4);
  linear.zero_grad();
  CHECK(tag_bytes(MemoryTag::grad) == grads_before);
  CHECK_FALSE(grad(linear.weight()).defined());
}

TEST_CASE("nn modules: ReLU6(inplace) overwrites its input instead of allocating an activation") {
  Conv2d conv(2, 4, 3, 1, 1);
  const Tensor x = uniform({2, 2, 5, 5}, -3.0, 3.0);
  Tensor h = conv(x);
  const auto pre = F::relu6(h).to_vector<double>();
  std::int64_t before = tag_bytes(MemoryTag::activation);
  const Tensor copy = ReLU6()(h);
  CHECK(tag_bytes(MemoryTag::activation) - before == static_cast<std::int64_t>(h.nbytes()));
  before = tag_bytes(MemoryTag::activation);
  const Tensor y = ReLU6(true)(h);
  CHECK(tag_bytes(MemoryTag::activation) == before);
  CHECK(y.is_same(h));  // the caller's tensor now holds the result
  CHECK(h.to_vector<double>() == pre);
  backward(F::sum(y));
  CHECK(grad(conv.weight()).defined());
}

TEST_CASE("nn modules: the simple layers and the losses") {
  const Tensor image = arange(16.0).reshape({1, 1, 4, 4});
  CHECK(MaxPool2d(2)(image).to_vector<double>() == std::vector<double>{5, 7, 13, 15});
  CHECK(AvgPool2d(2)(image).to_vector<double>() == std::vector<double>{2.5, 4.5, 10.5, 12.5});
  CHECK(AdaptiveAvgPool2d(1)(image).to_vector<double>() == std::vector<double>{7.5});
  CHECK(Flatten()(zeros({2, 3, 4, 5})).shape() == Shape{2, 60});
  CHECK(Identity()(image).is_same(image));

  Generator generator(3);
  Dropout dropout(0.5, &generator);
  const Tensor x = ones({1000});
  int zeros_seen = 0;
  for (double v : dropout(x).to_vector<double>()) {
    CHECK((v == 0.0 || v == 2.0));
    zeros_seen += v == 0.0;
  }
  CHECK(zeros_seen > 400);
  CHECK(zeros_seen < 600);
  dropout.eval();
  CHECK(dropout(x).to_vector<double>() == x.to_vector<double>());

  const Tensor input = from_vector<double>({1, 2, 3}), target = zeros({3}, {.dtype = DType::f64});
  CHECK(MSELoss()(input, target).item<double>() == doctest::Approx(14.0 / 3.0));
  CHECK(MSELoss(LossReduction::sum)(input, target).item<double>() == doctest::Approx(14.0));
  CHECK(MSELoss(LossReduction::none)(input, target).to_vector<double>() == std::vector<double>{1, 4, 9});
  // Logits [0, log 3]: p = [1/4, 3/4].
  const Tensor logits = from_vector<double>({0.0, std::log(3.0), 0.0, std::log(3.0)}, {2, 2});
  const Tensor classes = from_vector<std::int64_t>({1, 0});
  const double nll1 = -std::log(0.75), nll0 = -std::log(0.25);
  CHECK(CrossEntropyLoss()(logits, classes).item<double>() == doctest::Approx((nll1 + nll0) / 2));
  CHECK(CrossEntropyLoss(LossReduction::sum, 0.0, 0)(logits, classes).item<double>() == doctest::Approx(nll1));
  CHECK(CrossEntropyLoss(LossReduction::none, 0.2)(logits, classes).to_vector<double>()[0] ==
        doctest::Approx(0.8 * nll1 + 0.2 * (nll0 + nll1) / 2));
}

TEST_CASE("nn modules: bad arguments are typed errors") {
  CHECK_THROWS_AS(Linear(0, 3), ValueError);
  CHECK_THROWS_AS(Conv2d(3, 4, 3, 1, 0, 1, 2), ValueError);  // 3 channels in 2 groups
  CHECK_THROWS_AS(Conv2d(3, 4, 3, 0), ValueError);           // stride 0
  CHECK_THROWS_AS(BatchNorm2d(4, 1e-5, 1.5), ValueError);
  CHECK_THROWS_AS(Dropout(1.0), ValueError);
  CHECK_THROWS_AS(CrossEntropyLoss(LossReduction::mean, 1.5), ValueError);
  CHECK_THROWS_AS(BatchNorm2d(3)(zeros({2, 3, 4})), ShapeError);
  CHECK_THROWS_AS(Linear(3, 2)(zeros({2, 4})), ShapeError);
}

TEST_CASE("nn modules: an MLP trained by hand fits XOR-like quadrants") {
  Generator generator(11);
  Sequential mlp{std::make_shared<Linear>(2, 16, true, &generator), std::make_shared<ReLU>(),
                 std::make_shared<Linear>(16, 2, true, &generator)};
  const Tensor x = uniform({64, 2}, -1.0, 1.0, {}, &generator);
  const auto xv = x.to_vector<double>();
  std::vector<std::int64_t> labels;
  for (std::size_t i = 0; i < 64; ++i) labels.push_back(xv[2 * i] * xv[2 * i + 1] > 0 ? 1 : 0);
  const Tensor y = from_vector(labels);
  const CrossEntropyLoss loss_fn;
  double first = 0, last = 0;
  for (int step = 0; step < 400; ++step) {
    const Tensor loss = loss_fn(mlp(x), y);
    (step == 0 ? first : last) = loss.item<double>();
    backward(loss);
    sgd_step(mlp, 0.5);
  }
  CAPTURE(first);
  CHECK(last < 0.1);
}

TEST_CASE("nn modules: a CNN trained by hand tells horizontal bars from vertical ones") {
  auto cnn = small_cnn(4);
  Generator generator(12);
  Tensor images = uniform({16, 1, 4, 4}, 0.0, 0.3, {}, &generator);
  std::vector<std::int64_t> labels;
  float* pixels = images.data<float>();
  for (std::int64_t i = 0; i < 16; ++i) {
    const std::int64_t line = i % 4;
    for (std::int64_t k = 0; k < 4; ++k) pixels[i * 16 + (i % 2 == 0 ? line * 4 + k : k * 4 + line)] += 1.0f;
    labels.push_back(i % 2);  // 0: a row lit, 1: a column lit
  }
  const Tensor targets = from_vector(labels);
  double last = 0;
  for (int step = 0; step < 150; ++step) {
    const Tensor loss = CrossEntropyLoss()((*cnn)(images), targets);
    last = loss.item<double>();
    backward(loss);
    sgd_step(*cnn, 0.2);
  }
  CHECK(last < 0.05);
  cnn->eval();
  CHECK(count_correct((*cnn)(images), targets).item<std::int64_t>() == 16);
}

TEST_CASE("nn modules: gradcheck through Conv2d, BatchNorm2d, ReLU6, MaxPool2d and Linear in f64") {
  Generator generator(3);
  Sequential net{std::make_shared<Conv2d>(2, 3, 3, 1, 1, 1, 1, true, &generator), std::make_shared<BatchNorm2d>(3),
                 std::make_shared<ReLU6>(), std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(),
                 std::make_shared<Linear>(3 * 2 * 2, 2, true, &generator)};
  net.to(DType::f64);
  Tensor x = uniform({2, 2, 4, 4}, -1.0, 1.0, {.dtype = DType::f64}, &generator);
  autograd::set_requires_grad(x);
  std::vector<Tensor> inputs{x};
  for (const Tensor& p : net.parameters()) inputs.push_back(p);  // perturbed in place: the module's own tensors
  autograd::gradcheck([&net](const std::vector<Tensor>& in) { return net(in[0]); }, inputs);
}

namespace {
// Writes "+Type" when a call starts and "-Type" (or "!Type" when forward threw) when it ends.
struct CallLog : ModuleCallObserver {
  std::string log;
  void before_call(const Module& m) override { log += "+" + m.type_name() + " "; }
  void after_call(const Module& m, const Tensor* out) override { log += (out ? "-" : "!") + m.type_name() + " "; }
};
}  // namespace

TEST_CASE("module call observers see nested calls in order, and calls that throw") {
  auto net = std::make_shared<Sequential>(
      std::initializer_list<std::shared_ptr<Module>>{std::make_shared<Linear>(3, 2), std::make_shared<ReLU>()});
  CallLog outer, inner;
  {
    ModuleCallObserverScope outer_scope(outer);
    {
      ModuleCallObserverScope inner_scope(inner);
      (*net)(zeros({4, 3}));
    }
    CHECK_THROWS_AS((*net)(zeros({4, 5})), ShapeError);  // Linear expects 3 features
  }
  (*net)(zeros({1, 3}));  // no observer in force: nothing is logged
  CHECK(inner.log == "+Sequential +Linear -Linear +ReLU -ReLU -Sequential ");
  CHECK(outer.log == inner.log + "+Sequential +Linear !Linear !Sequential ");
}
