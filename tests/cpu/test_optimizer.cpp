// Fused optimizer steps: SGD and AdamW against values worked out by hand from torch.optim's rules,
// the CPU's f32 SGD loop against the shared per-element update bit for bit, lists longer than one
// launch, bad input, and the CUDA kernels in the emulator against the CPU; AdamW8bit's codes (exact
// round trips, nearest rounding), its steps against AdamW's, and its kernel.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "emu/emulator.h"
#include "core/random.h"
#include "kernels/optimizer.h"
#include "kernels/optimizer_backends.h"
#include "kernels/optimizer_ops.h"
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

TEST_CASE("SGD in f32: every setting gives optimizer::sgd's bits, element by element") {
  // The CPU's f32 loop is its own, vectorised per instruction set (Note [An SGD step in vectors] in
  // kernels/cpu/optimizer.cpp); each setting's parameters and buffers must be the bits of the shared
  // per-element update applied one element at a time. Sizes around a vector's width and its tail.
  const SgdConfig configs[] = {{.lr = 0.1},
                               {.lr = 0.1, .weight_decay = 0.05},
                               {.lr = 0.1, .momentum = 0.9, .first_step = true},
                               {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.05},
                               {.lr = 0.1, .momentum = 0.9, .dampening = 0.3},
                               {.lr = 0.1, .momentum = 0.8, .dampening = 0.1, .weight_decay = 0.01, .nesterov = true}};
  const auto bits = [](const Tensor& t) {
    std::vector<std::uint32_t> words(static_cast<std::size_t>(t.numel()));
    const std::vector<float> values = t.to_vector<float>();
    std::memcpy(words.data(), values.data(), values.size() * sizeof(float));
    return words;
  };
  Generator generator(11);
  for (const SgdConfig& config : configs)
    for (std::int64_t n : {1, 5, 17, 300}) {
      CAPTURE(n);
      CAPTURE(config.momentum);
      CAPTURE(config.nesterov);
      const Tensor p = normal({n}, 0.0, 1.0, {}, &generator), g = normal({n}, 0.0, 1.0, {}, &generator);
      const Tensor buffer = normal({n}, 0.0, 1.0, {}, &generator);
      const bool with_buffer = config.momentum != 0.0;
      std::vector<float> want_p = p.to_vector<float>(), want_b = buffer.to_vector<float>();
      const std::vector<float> grad = g.to_vector<float>();
      for (std::int64_t i = 0; i < n; ++i) {
        float dropped = 0.0f;
        optimizer::sgd<float>(want_p[i], grad[i], with_buffer ? want_b[i] : dropped, config);
      }
      if (with_buffer) sgd_step({&p, 1}, {&g, 1}, {&buffer, 1}, config);
      else sgd_step({&p, 1}, {&g, 1}, {}, config);
      CHECK(bits(p) == bits(from_vector(want_p)));
      if (with_buffer) CHECK(bits(buffer) == bits(from_vector(want_b)));
    }
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

TEST_CASE("8-bit moments: every code decodes and codes back to itself, and coding rounds to the nearest code") {
  // Note [8-bit moments]: all codes of magnitude at most 1 (the signed codes above 1 are never made).
  const auto round_trip = [](auto decode, auto encode, bool is_signed) {
    for (int code = 0; code < 256; ++code) {
      const float value = decode(static_cast<std::uint8_t>(code));
      if (std::abs(value) > 1.0f) continue;
      if (value == 0.0f) continue;  // +0 and -0 are the one value with two codes
      CAPTURE(code);
      CHECK(encode(value) == code);
    }
    // The nearest code: any value between two neighbours codes to the closer one.
    std::vector<float> values;
    for (int code = 0; code < (is_signed ? 128 : 256); ++code) values.push_back(decode(static_cast<std::uint8_t>(code)));
    std::sort(values.begin(), values.end());
    Generator generator(5);
    const std::vector<double> draws = uniform({20000}, 0.0, 1.0, {.dtype = DType::f64}, &generator).to_vector<double>();
    for (double draw : draws) {
      const float x = static_cast<float>(std::pow(draw, 12.0));  // spread over many powers of two
      const auto above = std::lower_bound(values.begin(), values.end(), x);
      float best = *above;
      if (above != values.begin() && x - *(above - 1) < *above - x) best = *(above - 1);
      CAPTURE(x);
      CHECK(std::abs(decode(encode(x)) - x) == std::abs(best - x));
    }
  };
  round_trip(optimizer::decode8<true>, optimizer::encode8<true>, true);
  round_trip(optimizer::decode8<false>, optimizer::encode8<false>, false);
  CHECK(optimizer::decode8<true>(optimizer::encode8<true>(-0.5f)) == -0.5f);
  CHECK(optimizer::encode8<true>(1.0f) == optimizer::encode8<true>(3.0f));  // clamped to the absmax
  CHECK(optimizer::decode8<true>(optimizer::encode8<true>(1.0f)) == 1.0f);
  CHECK(optimizer::decode8<false>(optimizer::encode8<false>(1.0f)) == 1.0f);
  // Relative error at most 1/16 of a power of two above the subnormal range (3.2% at worst).
  for (float x = 1e-4f; x < 1.0f; x *= 1.01f)
    CHECK(std::abs(optimizer::decode8<true>(optimizer::encode8<true>(x)) - x) <= x / 16 * 1.0001f);
}

namespace {
// AdamW8bit's state for `params`: zero codes and scales, as the optimizer makes it.
struct Coded {
  std::vector<Tensor> m, v, m_scales, v_scales;
  explicit Coded(const std::vector<Tensor>& params) {
    for (const Tensor& p : params) {
      m.push_back(zeros({p.numel()}, {.dtype = DType::u8}));
      v.push_back(zeros({p.numel()}, {.dtype = DType::u8}));
      m_scales.push_back(zeros({quant_blocks(p.numel())}));
      v_scales.push_back(zeros({quant_blocks(p.numel())}));
    }
  }
};
std::vector<Tensor> copies(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(t.clone());
  return out;
}
}  // namespace

TEST_CASE("AdamW8bit: three steps stay within the codes' rounding of AdamW's, at 2 bytes and a scale per block") {
  Generator generator(3);
  std::vector<Tensor> params, grads;
  for (std::int64_t n : {7, 256, 1000}) {  // a partial block, a whole one, several with a partial last
    params.push_back(uniform({n}, -1.0, 1.0, {}, &generator));
    grads.push_back(Tensor());
  }
  std::vector<Tensor> exact = copies(params), exact_m, exact_v;
  for (const Tensor& p : params) exact_m.push_back(zeros(p.shape())), exact_v.push_back(zeros(p.shape()));
  Coded state(params);
  for (std::int64_t step = 1; step <= 3; ++step) {
    for (std::size_t i = 0; i < params.size(); ++i) grads[i] = uniform(params[i].shape(), -1.0, 1.0, {}, &generator);
    const AdamWConfig config{.lr = 0.01, .weight_decay = 0.01, .step = step};
    adamw_step(exact, grads, exact_m, exact_v, config);
    adamw8bit_step(params, grads, state.m, state.v, state.m_scales, state.v_scales, config);
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto a = params[i].to_vector<double>(), b = exact[i].to_vector<double>();
    double worst = 0;
    for (std::size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::abs(a[k] - b[k]));
    CAPTURE(i);
    CHECK(worst > 0.0);  // the codes did round
    // Each step moves a weight by about lr m / sqrt(v); m is coded to within 1/17 and sqrt(v) to
    // within 1/18 (Note [8-bit moments]), so a step is off by at most about 12% of lr (measured: 11%
    // over the three steps).
    CHECK(worst <= 3 * 0.12 * 0.01);
    CHECK(state.m[i].nbytes() + state.v[i].nbytes() == 2 * static_cast<std::size_t>(params[i].numel()));
  }
  // Bad state is named: codes of the wrong length, scales of the wrong dtype, f64 parameters.
  std::vector<Tensor> short_codes = {zeros({6}, {.dtype = DType::u8}), state.m[1], state.m[2]};
  CHECK_THROWS_WITH_AS(adamw8bit_step(params, grads, short_codes, state.v, state.m_scales, state.v_scales, {}),
                       doctest::Contains("first-moment codes 0 must be 7 contiguous u8"), ValueError);
  const std::vector<Tensor> f64_params = {zeros({7}, {.dtype = DType::f64})}, f64_grads = {zeros({7}, {.dtype = DType::f64})};
  CHECK_THROWS_AS(adamw8bit_step(f64_params, f64_grads, {&state.m[0], 1}, {&state.v[0], 1}, {&state.m_scales[0], 1},
                                 {&state.v_scales[0], 1}, {}),
                  DTypeError);
}

TEST_CASE("AdamW8bit: the CUDA kernel in the emulator gives the CPU's bytes") {
  Generator generator(8);
  std::vector<Tensor> params, grads;
  for (std::int64_t n : {5, 300, 513}) {
    params.push_back(uniform({n}, -1.0, 1.0, {}, &generator));
    grads.push_back(uniform({n}, -1.0, 1.0, {}, &generator));
  }
  std::vector<Tensor> cpu_p = copies(params), emu_p = copies(params);
  Coded cpu_state(params), emu_state(params);
  const auto as_list = [](const std::vector<Tensor>& p, const std::vector<Tensor>& g, const Coded& s) {
    TensorList list;
    for (std::size_t i = 0; i < p.size(); ++i) {
      list.params[i] = p[i].data_ptr();
      list.grads[i] = g[i].data_ptr();
      list.state1[i] = s.m[i].data_ptr();
      list.state2[i] = s.v[i].data_ptr();
      list.state3[i] = s.m_scales[i].data_ptr();
      list.state4[i] = s.v_scales[i].data_ptr();
      list.sizes[i] = p[i].numel();
    }
    list.count = static_cast<int>(p.size());
    return list;
  };
  for (std::int64_t step = 1; step <= 2; ++step) {  // the second step decodes what the first coded
    const AdamWConfig config{.lr = 0.01, .weight_decay = 0.01, .step = step};
    cpu::adamw8bit_step(as_list(cpu_p, grads, cpu_state), config);
    cuda_emulated::adamw8bit_step(as_list(emu_p, grads, emu_state), config);
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(emu_p[i].to_vector<double>() == cpu_p[i].to_vector<double>());
    CHECK(emu_state.m[i].to_vector<double>() == cpu_state.m[i].to_vector<double>());
    CHECK(emu_state.v[i].to_vector<double>() == cpu_state.v[i].to_vector<double>());
    CHECK(emu_state.m_scales[i].to_vector<double>() == cpu_state.m_scales[i].to_vector<double>());
    CHECK(emu_state.v_scales[i].to_vector<double>() == cpu_state.v_scales[i].to_vector<double>());
  }
}
