// Optimizers, LR schedules, gradient scaling and accumulation (nn/optim.h, nn/lr_schedule.h,
// nn/grad_scaler.h): steps against torch.optim's formulas worked out by hand, what the state and
// the gradients cost (measured through the allocator's per-tag statistics), state dict round trips,
// schedules' lr sequences, GradScaler's skip/backoff/growth, K-step accumulation against one
// full-batch step, and bad hyper-parameters.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "core/allocator.h"
#include "core/random.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/grad_scaler.h"
#include "nn/lr_schedule.h"
#include "nn/optim.h"

using namespace frugal;
using namespace frugal::nn;
namespace F = frugal::functional;

namespace {
Tensor param(std::vector<double> values) {
  Tensor t = from_vector(values);
  return autograd::set_requires_grad(t);
}

void give_grad(const Tensor& p, std::vector<double> values) { autograd::set_grad(p, from_vector(values, p.shape())); }

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

std::int64_t tag_bytes(MemoryTag tag) { return allocator_for(Device::cpu()).stats().tag_bytes[static_cast<int>(tag)].current; }

const Tensor& entry(const StateDict& dict, const std::string& key) {
  for (const auto& [name, tensor] : dict)
    if (name == key) return tensor;
  FAIL("no key " << key);
  return dict.front().second;
}

std::vector<std::string> keys(const StateDict& dict) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : dict) names.push_back(name);
  return names;
}

// The lrs a schedule sets for epochs 0 .. count-1 (group 0).
std::vector<double> lr_sequence(LRScheduler& schedule, int count) {
  std::vector<double> lrs{schedule.get_last_lr()[0]};
  for (int i = 1; i < count; ++i) {
    schedule.step();
    lrs.push_back(schedule.get_last_lr()[0]);
  }
  return lrs;
}

void check_near(const std::vector<double>& got, const std::vector<double>& want, double tolerance = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(tolerance));
}
}  // namespace

TEST_CASE("SGD: plain steps, weight decay, and groups with their own lr and decay") {
  const Tensor a = param({1.0, -2.0}), b = param({1.0, -2.0});
  SGD sgd({{.params = {a}, .lr = 0.1}, {.params = {b}, .lr = 0.1, .weight_decay = 0.1}});
  give_grad(a, {0.5, 1.0});
  give_grad(b, {0.5, 1.0});
  sgd.step();
  check_near(values(a), {1.0 - 0.1 * 0.5, -2.0 - 0.1 * 1.0});  // p -= lr g
  // g += wd p first: (0.5 + 0.1 * 1, 1 - 0.1 * 2) = (0.6, 0.8).
  check_near(values(b), {1.0 - 0.1 * 0.6, -2.0 - 0.1 * 0.8});
  CHECK(sgd.state_bytes() == 0);  // no momentum, no buffers
}

TEST_CASE("SGD: momentum starts its buffer as the gradient, then dampening and nesterov") {
  // p = 1, lr 0.1, momentum 0.9; g = 0.5 then -1.
  struct Case {
    double dampening;
    bool nesterov;
    double buffer1, p1, buffer2, p2;
  };
  const double m = 0.9, lr = 0.1;
  const double plain_buf2 = m * 0.5 + (-1.0), damped_buf2 = m * 0.5 + (1 - 0.3) * (-1.0);
  const std::vector<Case> cases{
      // buf = g (no dampening on the first step); p -= lr buf.
      {0.0, false, 0.5, 1 - lr * 0.5, plain_buf2, 1 - lr * 0.5 - lr * plain_buf2},
      {0.3, false, 0.5, 1 - lr * 0.5, damped_buf2, 1 - lr * 0.5 - lr * damped_buf2},
      // nesterov: p -= lr (g + m buf).
      {0.0, true, 0.5, 1 - lr * (0.5 + m * 0.5), plain_buf2, 1 - lr * (0.5 + m * 0.5) - lr * (-1.0 + m * plain_buf2)},
  };
  for (const Case& c : cases) {
    CAPTURE(c.dampening);
    CAPTURE(c.nesterov);
    const Tensor p = param({1.0});
    SGD sgd({p}, lr, m, c.dampening, 0.0, c.nesterov);
    give_grad(p, {0.5});
    sgd.step();
    CHECK(values(entry(sgd.state_dict(), "state.0.momentum_buffer"))[0] == doctest::Approx(c.buffer1));
    CHECK(values(p)[0] == doctest::Approx(c.p1));
    give_grad(p, {-1.0});
    sgd.step();
    CHECK(values(entry(sgd.state_dict(), "state.0.momentum_buffer"))[0] == doctest::Approx(c.buffer2));
    CHECK(values(p)[0] == doctest::Approx(c.p2));
  }
}

TEST_CASE("AdamW: two steps with bias correction, decoupled decay, per-parameter step counts") {
  const double lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  const Tensor p = param({1.0}), q = param({2.0});
  AdamW adamw({p, q}, lr, {b1, b2}, eps, wd);
  // Step 1, p only (q has no gradient and is skipped: not even decayed).
  give_grad(p, {0.5});
  adamw.step();
  double m = (1 - b1) * 0.5, v = (1 - b2) * 0.25;
  double expected_p = 1.0 * (1 - lr * wd) - lr * (m / (1 - b1)) / (std::sqrt(v / (1 - b2)) + eps);
  CHECK(values(p)[0] == doctest::Approx(expected_p).epsilon(1e-12));
  CHECK(values(q)[0] == 2.0);
  // Step 2: p's second step, q's first (its bias correction is step 1's).
  give_grad(p, {-0.2});
  give_grad(q, {0.5});
  adamw.step();
  m = b1 * m + (1 - b1) * -0.2;
  v = b2 * v + (1 - b2) * 0.04;
  const double correction1 = 1 - b1 * b1, correction2 = 1 - b2 * b2;
  expected_p = expected_p * (1 - lr * wd) - lr * (m / correction1) / (std::sqrt(v / correction2) + eps);
  CHECK(values(p)[0] == doctest::Approx(expected_p).epsilon(1e-12));
  CHECK(values(q)[0] == doctest::Approx(2.0 * (1 - lr * wd) - lr * 0.5 / (0.5 + eps)).epsilon(1e-12));
  const StateDict dict = adamw.state_dict();
  CHECK(entry(dict, "state.0.step").item<std::int64_t>() == 2);
  CHECK(entry(dict, "state.1.step").item<std::int64_t>() == 1);
  CHECK(values(entry(dict, "state.0.exp_avg"))[0] == doctest::Approx(m));
  CHECK(values(entry(dict, "state.0.exp_avg_sq"))[0] == doctest::Approx(v));
}

TEST_CASE("Adafactor: factored second moments of a matrix, the full one of a vector, relative steps, RMS clipping") {
  // A 2x2 weight (f64: the arithmetic below is exact to rounding) and a vector, at step 1, where the
  // moments take all of the first gradient.
  Tensor w = from_vector(std::vector<double>{1.0, -2.0, 0.5, 3.0}, {2, 2}), b = from_vector(std::vector<double>{0.1, -0.2, 0.0});
  autograd::set_requires_grad(w);
  autograd::set_requires_grad(b);
  Adafactor adafactor({w, b}, /*lr=*/0.01);
  const std::vector<double> g{0.3, -0.4, 1.2, 0.5};
  give_grad(w, g);
  give_grad(b, {2.0, -0.5, 0.25});
  adafactor.step();
  const auto sq = [](double x) { return x * x; };
  const double row0 = (sq(0.3) + sq(-0.4)) / 2, row1 = (sq(1.2) + sq(0.5)) / 2;
  const double col0 = (sq(0.3) + sq(1.2)) / 2, col1 = (sq(-0.4) + sq(0.5)) / 2;
  const StateDict dict = adafactor.state_dict();
  check_near(values(entry(dict, "state.0.row_var")), {row0, row1});
  check_near(values(entry(dict, "state.0.col_var")), {col0, col1});
  const double row_mean = (row0 + row1) / 2;
  std::vector<double> update(4);
  const double rows[2] = {row0, row1}, cols[2] = {col0, col1};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) update[2 * i + j] = g[2 * i + j] / std::sqrt(rows[i] * cols[j] / row_mean);
  double rms_update = 0;
  for (double u : update) rms_update += u * u / 4;
  rms_update = std::sqrt(rms_update);
  const double rms_w = std::sqrt((1.0 + 4.0 + 0.25 + 9.0) / 4);
  const double alpha = std::max(1e-3, rms_w) * std::min(0.01, 1.0) / std::max(1.0, rms_update);
  const std::vector<double> before{1.0, -2.0, 0.5, 3.0};
  std::vector<double> expected(4);
  for (int k = 0; k < 4; ++k) expected[k] = before[k] - alpha * update[k];
  check_near(values(w), expected);
  // A vector keeps its full second moment ([n, 1]: a row each, one column): the first update is the
  // gradient's sign, of RMS 1, so nothing is clipped; its RMS (0.129) is above eps2.
  const double rms_b = std::sqrt((0.01 + 0.04 + 0.0) / 3);
  check_near(values(b), {0.1 - rms_b * 0.01, -0.2 + rms_b * 0.01, 0.0 - rms_b * 0.01}, 1e-9);
  // The state: a value per row and per column: 2 + 2 for the matrix, 3 + 1 for the vector.
  CHECK(adafactor.state_bytes() == (4 + 4) * sizeof(double));
  // A vector's gradients far below eps1 still give the update of their full second moment, the
  // gradient's sign (the factored estimate would divide by a mean clamped at eps1).
  Tensor tiny = from_vector(std::vector<double>{1.0, 1.0});
  autograd::set_requires_grad(tiny);
  Adafactor small({tiny}, 0.01);
  give_grad(tiny, {1e-9, -1e-9});
  small.step();
  check_near(values(tiny), {1.0 - 0.01, 1.0 + 0.01}, 1e-9);
}

TEST_CASE("optimizers: zero_grad frees gradient memory, state appears under MemoryTag::optimizer") {
  Tensor w = zeros({1000});
  autograd::set_requires_grad(w);
  Tensor bias = zeros({10});
  autograd::set_requires_grad(bias);
  AdamW adamw({w, bias});
  const std::int64_t grads_before = tag_bytes(MemoryTag::grad), state_before = tag_bytes(MemoryTag::optimizer);
  autograd::backward(F::add(F::sum(F::mul(w, 2.0)), F::sum(bias)));
  CHECK(tag_bytes(MemoryTag::grad) - grads_before == 1010 * 4);
  CHECK(adamw.state_bytes() == 0);  // created at the first step, not before
  adamw.step();
  CHECK(adamw.state_bytes() == 2 * 1010 * 4);  // exp_avg and exp_avg_sq, f32 like the parameters
  CHECK(tag_bytes(MemoryTag::optimizer) - state_before == 2 * 1010 * 4);
  CHECK(entry(adamw.state_dict(), "state.0.exp_avg").dtype() == DType::f32);
  adamw.zero_grad(false);  // kept, filled with zeros
  CHECK(tag_bytes(MemoryTag::grad) - grads_before == 1010 * 4);
  CHECK(values(autograd::grad(w)) == std::vector<double>(1000, 0.0));
  adamw.zero_grad();  // freed
  CHECK(tag_bytes(MemoryTag::grad) == grads_before);
  CHECK_FALSE(autograd::grad(w).defined());
}

TEST_CASE("optimizers: a state dict round trip continues exactly like the original") {
  auto run = [](Optimizer& optimizer, const std::vector<Tensor>& params, std::uint64_t seed) {
    Generator generator(seed);
    for (const Tensor& p : params) autograd::set_grad(p, normal(p.shape(), 0.0, 1.0, {.dtype = DType::f64}, &generator));
    optimizer.step();
  };
  auto fresh_params = [] {
    Generator generator(7);
    std::vector<Tensor> params{normal({2, 3}, 0.0, 1.0, {.dtype = DType::f64}, &generator),
                               normal({4}, 0.0, 1.0, {.dtype = DType::f64}, &generator)};
    for (Tensor& p : params) autograd::set_requires_grad(p);
    return params;
  };
  auto check_same = [](const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(values(a[i]) == values(b[i]));
  };
  SUBCASE("AdamW") {
    std::vector<Tensor> a = fresh_params(), b = fresh_params();
    AdamW original(a, 0.01), restored(b, 0.01);
    run(original, a, 1);
    run(original, a, 2);
    original.param_groups()[0].lr = 0.005;  // as a schedule would
    const StateDict dict = original.state_dict();
    CHECK(keys(dict) == std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step", "state.1.exp_avg",
                                                 "state.1.exp_avg_sq", "state.1.step", "param_groups.0.lr",
                                                 "param_groups.0.weight_decay"});
    for (std::size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
    restored.load_state_dict(dict);
    CHECK(restored.param_groups()[0].lr == 0.005);
    CHECK(restored.state_bytes() == original.state_bytes());
    run(original, a, 3);
    run(restored, b, 3);
    check_same(a, b);
  }
  SUBCASE("AdamW8bit: codes and scales, and an AdamW dict is refused") {
    std::vector<Tensor> a = fresh_params(), b = fresh_params();
    for (std::vector<Tensor>* list : {&a, &b})
      for (Tensor& p : *list) {
        p = p.to(Device::cpu(), DType::f32);  // 8-bit moments are kept for f32 parameters
        autograd::set_requires_grad(p);
      }
    const auto run_f32 = [](Optimizer& optimizer, const std::vector<Tensor>& params, std::uint64_t seed) {
      Generator generator(seed);
      for (const Tensor& p : params) autograd::set_grad(p, normal(p.shape(), 0.0, 1.0, {}, &generator));
      optimizer.step();
    };
    AdamW8bit original(a, 0.01), restored(b, 0.01);
    run_f32(original, a, 1);
    run_f32(original, a, 2);
    const StateDict dict = original.state_dict();
    CHECK(keys(dict)[0] == "state.0.exp_avg_codes");
    CHECK(entry(dict, "state.0.exp_avg_codes").dtype() == DType::u8);
    CHECK(entry(dict, "state.0.exp_avg_codes").numel() == 6);
    CHECK(entry(dict, "state.0.exp_avg_sq_scales").numel() == 1);  // one block of 256 holds all 6
    CHECK(original.state_bytes() == 2 * (6 + 4) + 2 * 4 * 2);
    for (std::size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
    restored.load_state_dict(dict);
    run_f32(original, a, 3);
    run_f32(restored, b, 3);
    check_same(a, b);
    AdamW plain(fresh_params(), 0.01);
    CHECK_THROWS_WITH_AS(plain.load_state_dict(dict), doctest::Contains("missing key 'state.0.exp_avg'"), ValueError);
    CHECK_THROWS_AS(AdamW8bit{fresh_params()}, DTypeError);  // f64 parameters
  }
  SUBCASE("SGD with momentum, into an optimizer that already stepped") {
    std::vector<Tensor> a = fresh_params(), b = fresh_params();
    SGD original(a, 0.1, 0.9), restored(b, 0.1, 0.9);
    run(original, a, 1);
    run(restored, b, 9);  // its own state, to be replaced
    for (std::size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
    restored.load_state_dict(original.state_dict());
    run(original, a, 2);
    run(restored, b, 2);
    check_same(a, b);
  }
  SUBCASE("a dict that does not fit is an error and changes nothing") {
    std::vector<Tensor> a = fresh_params(), b = fresh_params();
    SGD sgd(a, 0.1, 0.9);
    AdamW adamw(b);
    run(sgd, a, 1);
    CHECK_THROWS_WITH_AS(adamw.load_state_dict(sgd.state_dict()), doctest::Contains("exp_avg"), ValueError);
    CHECK(adamw.state_bytes() == 0);
    StateDict wrong = sgd.state_dict();
    wrong[0].second = zeros({3, 2}, {.dtype = DType::f64});
    CHECK_THROWS_AS(SGD(b, 0.1, 0.9).load_state_dict(wrong), ShapeError);
    StateDict extra = sgd.state_dict();
    extra.emplace_back("param_groups.1.lr", zeros({}));
    CHECK_THROWS_WITH_AS(sgd.load_state_dict(extra), doctest::Contains("unexpected key 'param_groups.1.lr'"), ValueError);
  }
}

TEST_CASE("LR schedules: StepLR, CosineAnnealingLR, OneCycleLR, LinearWarmup and a warm-up then cosine chain") {
  const double pi = std::numbers::pi;
  SUBCASE("StepLR: lr = base * gamma^floor(epoch / step_size)") {
    SGD sgd({param({0.0})}, 1.0);
    StepLR schedule(sgd, 3, 0.5);
    check_near(lr_sequence(schedule, 8), {1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25});
    CHECK(sgd.param_groups()[0].lr == 0.25);
    CHECK(schedule.last_epoch() == 7);
  }
  SUBCASE("CosineAnnealingLR, per group: eta_min + (base - eta_min) (1 + cos(pi e / T_max)) / 2") {
    SGD sgd({{.params = {param({0.0})}, .lr = 1.0}, {.params = {param({0.0})}, .lr = 0.5}});
    CosineAnnealingLR schedule(sgd, 4, 0.1);
    auto cosine = [&](double base, int e) { return 0.1 + (base - 0.1) * (1 + std::cos(pi * e / 4)) / 2; };
    check_near(lr_sequence(schedule, 6), {1.0, cosine(1, 1), 0.55, cosine(1, 3), 0.1, cosine(1, 5)});
    CHECK(sgd.param_groups()[1].lr == doctest::Approx(cosine(0.5, 5)));
    CHECK(schedule.get_last_lr()[1] == sgd.param_groups()[1].lr);
  }
  SUBCASE("LinearWarmup: base * (start + (1 - start) min(e, n) / n), set at construction") {
    SGD sgd({param({0.0})}, 0.8);
    LinearWarmup schedule(sgd, 0.25, 3);
    CHECK(sgd.param_groups()[0].lr == doctest::Approx(0.2));
    CHECK(*sgd.param_groups()[0].initial_lr == 0.8);
    check_near(lr_sequence(schedule, 5), {0.2, 0.4, 0.6, 0.8, 0.8});
  }
  SUBCASE("SequentialLR: warm-up for 2 epochs, then cosine restarted from its epoch 0") {
    SGD sgd({param({0.0})}, 1.0);
    std::vector<std::unique_ptr<LRScheduler>> parts;
    parts.push_back(std::make_unique<LinearWarmup>(sgd, 0.1, 2));
    parts.push_back(std::make_unique<CosineAnnealingLR>(sgd, 4));  // counts from initial_lr, not the warm lr
    SequentialLR schedule(sgd, std::move(parts), {2});
    const double c1 = (1 + std::cos(pi / 4)) / 2, c3 = (1 + std::cos(3 * pi / 4)) / 2;
    check_near(lr_sequence(schedule, 7), {0.1, 0.1 + 0.9 / 2, 1.0, c1, 0.5, c3, 0.0});
  }
  SUBCASE("OneCycleLR: half-cosine rise over pct_start, half-cosine fall, as torch's (cycle_momentum off)") {
    SGD sgd({param({0.0})}, 0.4);
    OneCycleLR schedule(sgd, 10, 0.3);
    // torch.optim.lr_scheduler.OneCycleLR(SGD(lr=0.4), max_lr=0.4, total_steps=10, pct_start=0.3,
    // cycle_momentum=False), printed by torch 1.13.
    check_near(lr_sequence(schedule, 10), {0.016, 0.208, 0.4, 0.38019385280538953, 0.3246982615799052,
                                           0.24450480877451572, 0.1554967912254843, 0.0753033384200948,
                                           0.019807747194610516, 1.6e-06});
    CHECK_THROWS_WITH_AS(OneCycleLR(sgd, 5, 0.3), doctest::Contains("at least 2 steps"), ValueError);
  }
  SUBCASE("a schedule's state dict resumes it where it stopped") {
    SGD a({param({0.0})}, 1.0), b({param({0.0})}, 1.0);
    CosineAnnealingLR original(a, 10);
    for (int i = 0; i < 3; ++i) original.step();
    b.load_state_dict(a.state_dict());
    CosineAnnealingLR resumed(b, 10);
    resumed.load_state_dict(original.state_dict());
    CHECK(resumed.last_epoch() == 3);
    original.step();
    resumed.step();
    CHECK(b.param_groups()[0].lr == a.param_groups()[0].lr);
  }
}

TEST_CASE("GradScaler: scaled backward, unscale, a skipped step halves the scale") {
  Tensor w = from_vector<float>({1.0f, 2.0f});
  autograd::set_requires_grad(w);
  SGD sgd({w}, 0.5);
  GradScaler scaler(1024.0);
  const Tensor scaled = scaler.scale(F::sum(F::mul(w, 3.0)));
  CHECK(scaled.item<double>() == 9.0 * 1024.0);
  autograd::backward(scaled);
  CHECK(values(autograd::grad(w)) == std::vector<double>{3.0 * 1024, 3.0 * 1024});
  scaler.unscale_(sgd);
  CHECK(values(autograd::grad(w)) == std::vector<double>{3.0, 3.0});
  CHECK_THROWS_WITH_AS(scaler.unscale_(sgd), doctest::Contains("already"), Error);
  CHECK(scaler.step(sgd));  // does not unscale again
  CHECK(values(w) == std::vector<double>{1.0 - 1.5, 2.0 - 1.5});
  scaler.update();
  CHECK(scaler.get_scale() == 1024.0);

  // An inf (or NaN) anywhere: the step is skipped and the scale backs off.
  for (double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    autograd::set_grad(w, from_vector<float>({1.0f, static_cast<float>(bad)}));
    const double before = scaler.get_scale();
    CHECK_FALSE(scaler.step(sgd));
    CHECK(values(w) == std::vector<double>{-0.5, 0.5});
    scaler.update();
    CHECK(scaler.get_scale() == before / 2);
  }
  CHECK_THROWS_WITH_AS(scaler.update(), doctest::Contains("no inf checks"), Error);
}

TEST_CASE("GradScaler: growth after growth_interval good steps, and the state round trip") {
  Tensor w = zeros({3});
  autograd::set_requires_grad(w);
  SGD sgd({w}, 0.0);
  GradScaler scaler(8.0, 2.0, 0.5, 3);
  auto good_iteration = [&](GradScaler& s) {
    autograd::set_grad(w, ones({3}));
    CHECK(s.step(sgd));
    s.update();
  };
  good_iteration(scaler);
  good_iteration(scaler);
  CHECK(scaler.get_scale() == 8.0);
  CHECK(entry(scaler.state_dict(), "growth_tracker").item<std::int64_t>() == 2);
  GradScaler restored;
  restored.load_state_dict(scaler.state_dict());
  CHECK(restored.get_scale() == 8.0);
  good_iteration(scaler);  // the third in a row: doubles, the count restarts
  good_iteration(restored);
  CHECK(scaler.get_scale() == 16.0);
  CHECK(restored.get_scale() == 16.0);
  CHECK(entry(restored.state_dict(), "growth_tracker").item<std::int64_t>() == 0);
  CHECK(entry(restored.state_dict(), "growth_interval").item<std::int64_t>() == 3);

  GradScaler disabled(65536.0, 2.0, 0.5, 2000, false);
  const Tensor loss = F::sum(w);
  CHECK(disabled.scale(loss).is_same(loss));
  CHECK(disabled.get_scale() == 1.0);
  CHECK(disabled.state_dict().empty());
  CHECK_THROWS_WITH_AS(scaler.load_state_dict(disabled.state_dict()), doctest::Contains("empty"), ValueError);
}

TEST_CASE("gradient accumulation: K micro-batches of a linear model equal one full-batch step") {
  Generator generator(3);
  const Tensor x = normal({8, 5}, 0.0, 1.0, {.dtype = DType::f64}, &generator);
  const Tensor target = normal({8, 3}, 0.0, 1.0, {.dtype = DType::f64}, &generator);
  auto model = [&] {
    Generator init(11);
    std::vector<Tensor> params{normal({3, 5}, 0.0, 0.5, {.dtype = DType::f64}, &init),
                               normal({3}, 0.0, 0.5, {.dtype = DType::f64}, &init)};
    for (Tensor& p : params) autograd::set_requires_grad(p);
    return params;
  };
  const std::vector<Tensor> full = model(), micro = model();
  SGD full_sgd(full, 0.1, 0.9), micro_sgd(micro, 0.1, 0.9);
  autograd::backward(F::mse_loss(F::linear(x, full[0], full[1]), target));  // the mean over all 8 rows
  full_sgd.step();

  GradientAccumulator accumulate(4);
  int steps = 0;
  for (std::int64_t k = 0; k < 4; ++k) {
    const Tensor loss = F::mse_loss(F::linear(x.narrow(0, 2 * k, 2), micro[0], micro[1]), target.narrow(0, 2 * k, 2));
    autograd::backward(accumulate.scale(loss));  // each micro-batch's mean, divided by K
    CHECK(accumulate.pending() == k);
    if (accumulate.micro_step()) {
      micro_sgd.step();
      ++steps;
    }
  }
  CHECK(steps == 1);
  CHECK(accumulate.pending() == 0);
  for (std::size_t i = 0; i < full.size(); ++i) {
    const std::vector<double> a = values(full[i]), b = values(micro[i]);
    for (std::size_t j = 0; j < a.size(); ++j) CHECK(std::abs(a[j] - b[j]) <= 1e-6);
  }
  CHECK(values(scale_for_accumulation(from_vector<double>({6.0}), 4)) == std::vector<double>{1.5});
}

TEST_CASE("optimizers, schedules and scalers: bad hyper-parameters are ValueErrors naming the value") {
  const Tensor p = param({1.0});
  CHECK_THROWS_WITH_AS(SGD({p}, -0.1), doctest::Contains("-0.1"), ValueError);
  CHECK_THROWS_WITH_AS(SGD({p}, 0.1, -0.5), doctest::Contains("-0.5"), ValueError);
  CHECK_THROWS_WITH_AS(SGD({p}, 0.1, 0.0, 0.0, 0.0, true), doctest::Contains("nesterov"), ValueError);
  CHECK_THROWS_WITH_AS(SGD({p}, 0.1, 0.9, 0.1, 0.0, true), doctest::Contains("dampening 0.1"), ValueError);
  CHECK_THROWS_WITH_AS(SGD({p}, 0.1, 0.0, 0.0, -1e-4), doctest::Contains("-0.0001"), ValueError);
  CHECK_THROWS_WITH_AS(AdamW({p}, 1e-3, {1.0, 0.999}), doctest::Contains("index 0: 1"), ValueError);
  CHECK_THROWS_WITH_AS(AdamW({p}, 1e-3, {0.9, -0.1}), doctest::Contains("index 1: -0.1"), ValueError);
  CHECK_THROWS_WITH_AS(AdamW({p}, 1e-3, {0.9, 0.999}, -1.0), doctest::Contains("-1"), ValueError);
  CHECK_THROWS_WITH_AS(AdamW({p}, -2.0), doctest::Contains("-2"), ValueError);
  CHECK_THROWS_WITH_AS(AdamW(std::vector<Tensor>{}), doctest::Contains("empty"), ValueError);
  CHECK_THROWS_WITH_AS(SGD({p, p}, 0.1), doctest::Contains("more than once"), ValueError);
  CHECK_THROWS_AS(SGD({F::mul(p, 2.0)}, 0.1), ValueError);  // not a leaf
  SGD sgd({p}, 0.1);
  CHECK_THROWS_WITH_AS(StepLR(sgd, 0), doctest::Contains("step_size"), ValueError);
  CHECK_THROWS_WITH_AS(CosineAnnealingLR(sgd, 10, -0.5), doctest::Contains("-0.5"), ValueError);
  CHECK_THROWS_WITH_AS(LinearWarmup(sgd, 1.5, 10), doctest::Contains("1.5"), ValueError);
  CHECK_THROWS_AS(SequentialLR(sgd, {}, {}), ValueError);
  CHECK_THROWS_WITH_AS(GradScaler(1024.0, 1.0), doctest::Contains("growth_factor"), ValueError);
  CHECK_THROWS_WITH_AS(GradScaler(1024.0, 2.0, 1.5), doctest::Contains("1.5"), ValueError);
  CHECK_THROWS_WITH_AS(GradScaler(1024.0, 2.0, 0.5, 0), doctest::Contains("growth_interval"), ValueError);
  CHECK_THROWS_WITH_AS(GradScaler(-1.0), doctest::Contains("-1"), ValueError);
  CHECK_THROWS_AS(scale_for_accumulation(p, 0), ValueError);
  CHECK_THROWS_AS(GradientAccumulator(0), ValueError);
  // Mixed precision keeps f32 master parameters; f16 gradients are refused, as PyTorch refuses them.
  Tensor half = zeros({2}, {.dtype = DType::f16});
  autograd::set_requires_grad(half);
  autograd::set_grad(half, ones({2}, {.dtype = DType::f16}));
  SGD half_sgd({half}, 0.1);
  GradScaler scaler;
  CHECK_THROWS_AS(scaler.unscale_(half_sgd), DTypeError);
  // Refused before anything is unscaled: an f32 gradient beside the f16 one keeps its value.
  Tensor full = zeros({2});
  autograd::set_requires_grad(full);
  autograd::set_grad(full, ones({2}));
  SGD mixed_sgd({full, half}, 0.1);
  CHECK_THROWS_AS(scaler.unscale_(mixed_sgd), DTypeError);
  CHECK(autograd::grad(full).to_vector<float>() == std::vector<float>{1, 1});
}
