// Fused optimizer steps: SGD and AdamW against values worked out by hand from torch.optim's rules,
// lists longer than one launch, bad input, and the CUDA kernels in the emulator against the CPU.
#include <doctest/doctest.h>

#include "emu/emulator.h"
#include "core/random.h"
#include "kernels/optimizer.h"
#include "kernels/optimizer_backends.h"
#include "core/cpu/parallel.h"

using namespace frugal;

namespace {
Tensor f64(std::vector<double> v) { return from_vector(v); }
double first(const Tensor& t) { return t.to_vector<double>()[0]; }
}  // namespace

TEST_CASE("SGD: weight decay, momentum (first step and after), dampening, nesterov") {
  // p = 1, g = 0.5, lr 0.1, momentum 0.9, weight decay 0.01.
  const Tensor p = f64({1.0}), g = f64({0.5}), buffer = f64({0.0});
  SgdConfig c{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .first_step = true};
  sgd_step({&p, 1}, {&g, 1}, {&buffer, 1}, c);
  CHECK(first(buffer) == doctest::Approx(0.51));  // the buffer starts as the decayed gradient
  CHECK(first(p) == doctest::Approx(0.949));
  c.first_step = false;
  sgd_step({&p, 1}, {&g, 1}, {&buffer, 1}, c);
  CHECK(first(buffer) == doctest::Approx(0.9 * 0.51 + 0.50949));
  CHECK(first(p) == doctest::Approx(0.949 - 0.1 * (0.9 * 0.51 + 0.50949)));
  // Dampening scales the new gradient's share; nesterov looks ahead along the buffer.
  const Tensor q = f64({1.0}), b2 = f64({0.2});
  sgd_step({&q, 1}, {&g, 1}, {&b2, 1}, {.lr = 0.1, .momentum = 0.5, .dampening = 0.5, .nesterov = true});
  const double buf = 0.5 * 0.2 + 0.5 * 0.5;
  CHECK(first(b2) == doctest::Approx(buf));
  CHECK(first(q) == doctest::Approx(1.0 - 0.1 * (0.5 + 0.5 * buf)));
  // Without momentum no buffer is needed.
  const Tensor r = f64({1.0});
  sgd_step({&r, 1}, {&g, 1}, {}, {.lr = 0.1});
  CHECK(first(r) == doctest::Approx(0.95));
}

TEST_CASE("AdamW: decoupled weight decay and bias correction") {
  const Tensor p = f64({1.0}), g = f64({0.5}), m = f64({0.0}), v = f64({0.0});
  adamw_step({&p, 1}, {&g, 1}, {&m, 1}, {&v, 1}, {.lr = 0.1, .weight_decay = 0.1, .step = 1});
  CHECK(first(m) == doctest::Approx(0.05));
  CHECK(first(v) == doctest::Approx(0.00025));
  // p *= 1 - lr wd, then p -= lr / (1 - b1) * m / (sqrt(v / (1 - b2)) + eps) = 0.05 / 0.5 = 0.1.
  CHECK(first(p) == doctest::Approx(0.99 - 0.1).epsilon(1e-7));
  // With a zero gradient only the decoupled decay acts (Adam's L2 penalty would not).
  const Tensor q = f64({2.0}), zero = f64({0.0}), m2 = f64({0.0}), v2 = f64({0.0});
  adamw_step({&q, 1}, {&zero, 1}, {&m2, 1}, {&v2, 1}, {.lr = 0.1, .weight_decay = 0.5, .step = 1});
  CHECK(first(q) == doctest::Approx(2.0 * (1 - 0.05)));
}

TEST_CASE("optimizer steps: long lists are split across launches, bad input is named") {
  std::vector<Tensor> params, grads;
  for (int i = 0; i < 40; ++i) {  // more than one launch's 32 tensors
    params.push_back(full({3 + i}, 1.0));
    grads.push_back(full({3 + i}, 2.0));
  }
  sgd_step(params, grads, {}, {.lr = 0.25});
  for (const Tensor& t : params) CHECK(t.to_vector<float>() == std::vector<float>(t.numel(), 0.5f));
  const Tensor a = zeros({2}), b = zeros({3});
  CHECK_THROWS_AS(sgd_step({&a, 1}, {&b, 1}, {}, {}), ShapeError);
  CHECK_THROWS_WITH_AS(sgd_step({&a, 1}, {}, {}, {}), doctest::Contains("1 parameters but 0 gradients"), ValueError);
  const Tensor strided = zeros({4}).slice(0, 0, 4, 2), g2 = zeros({2});
  CHECK_THROWS_AS(sgd_step({&strided, 1}, {&g2, 1}, {}, {}), ValueError);
  CHECK_THROWS_AS(adamw_step({&a, 1}, {&a, 1}, {&a, 1}, {&a, 1}, {.step = 0}), ValueError);
}

TEST_CASE("optimizer steps on the CPU: a list's tensors in one parallel region, each element as alone") {
  // Sizes that put chunk edges (16384 elements) inside tensors and between them, and empty tensors.
  const std::vector<std::int64_t> sizes = {0, 40000, 7, 16384, 0, 33000};
  Generator generator(5);
  std::vector<Tensor> together, alone, grads, buffers_together, buffers_alone;
  for (std::int64_t n : sizes) {
    const Tensor p = normal({n}, 0.0, 1.0, {}, &generator), g = normal({n}, 0.0, 1.0, {}, &generator);
    const Tensor b = normal({n}, 0.0, 1.0, {}, &generator);
    together.push_back(p.clone()), alone.push_back(p.clone()), grads.push_back(g);
    buffers_together.push_back(b.clone()), buffers_alone.push_back(b.clone());
  }
  const SgdConfig config{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  const std::uint64_t regions = cpu::parallel_regions_opened();
  sgd_step(together, grads, buffers_together, config);
  CHECK(cpu::parallel_regions_opened() - regions == 1);  // one region for the whole list
  for (std::size_t i = 0; i < sizes.size(); ++i)
    sgd_step({&alone[i], 1}, {&grads[i], 1}, {&buffers_alone[i], 1}, config);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    CHECK(together[i].to_vector<float>() == alone[i].to_vector<float>());
    CHECK(buffers_together[i].to_vector<float>() == buffers_alone[i].to_vector<float>());
  }
}

TEST_CASE("the fused CUDA optimizer kernels in the emulator match the CPU exactly") {
  for (const emu::Options& schedule : {emu::Options{emu::Schedule::forward}, emu::Options{emu::Schedule::reverse}}) {
    emu::OptionsScope scope(schedule);
    for (DType dtype : {DType::f32, DType::bf16}) {
      auto make = [&](std::uint64_t seed) {
        Generator generator(seed);
        std::vector<Tensor> list;
        for (std::int64_t n : {5, 300, 1})
          list.push_back(uniform({n}, -1.0, 1.0, {.dtype = dtype}, &generator));
        return list;
      };
      auto as_list = [](const std::vector<Tensor>& p, const std::vector<Tensor>& g, const std::vector<Tensor>& s1,
                        const std::vector<Tensor>* s2) {
        TensorList list;
        for (std::size_t i = 0; i < p.size(); ++i) {
          list.params[i] = p[i].data_ptr();
          list.grads[i] = g[i].data_ptr();
          list.state1[i] = s1[i].data_ptr();
          list.state2[i] = s2 ? (*s2)[i].data_ptr() : nullptr;
          list.sizes[i] = p[i].numel();
        }
        list.count = static_cast<int>(p.size());
        return list;
      };
      const SgdConfig sgd{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01, .nesterov = true};
      const AdamWConfig adamw{.lr = 0.01, .step = 3};
      const auto grads = make(2);
      auto cpu_p = make(1), emu_p = make(1), cpu_m = make(3), emu_m = make(3), cpu_v = make(4), emu_v = make(4);
      cpu::sgd_step(dtype, as_list(cpu_p, grads, cpu_m, nullptr), sgd);
      cuda_emulated::sgd_step(dtype, as_list(emu_p, grads, emu_m, nullptr), sgd);
      for (std::size_t i = 0; i < cpu_p.size(); ++i) {
        CHECK(emu_p[i].to_vector<double>() == cpu_p[i].to_vector<double>());
        CHECK(emu_m[i].to_vector<double>() == cpu_m[i].to_vector<double>());
      }
      std::vector<Tensor> cpu_sq, emu_sq;  // second moments must be >= 0: squares of random values
      for (const Tensor& v : cpu_v) {
        auto values = v.to_vector<double>();
        for (double& x : values) x *= x;
        cpu_sq.push_back(from_vector(values).to(dtype));
        emu_sq.push_back(from_vector(values).to(dtype));
      }
      cpu::adamw_step(dtype, as_list(cpu_p, grads, cpu_m, &cpu_sq), adamw);
      cuda_emulated::adamw_step(dtype, as_list(emu_p, grads, emu_m, &emu_sq), adamw);
      for (std::size_t i = 0; i < cpu_p.size(); ++i) {
        CHECK(emu_p[i].to_vector<double>() == cpu_p[i].to_vector<double>());
        CHECK(emu_sq[i].to_vector<double>() == cpu_sq[i].to_vector<double>());
      }
    }
  }
}
