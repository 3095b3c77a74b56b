// Dropout: the scaling, the keep rate, the mask equal to bernoulli's for the same draw,
// reproducibility from the generator state, evaluation mode, the backward recomputing the forward's
// mask, the activation bytes it holds for backward (none but its output), and the CPU's f32 loop in
// vector lanes against its one-block-at-a-time reference.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/philox_lanes.h"
#include "kernels/dropout.h"
#include "kernels/dropout_backends.h"
#include "kernels/reduce.h"
#include "nn/autograd.h"
#include "nn/functional.h"

using namespace frugal;
namespace F = frugal::functional;

namespace {
// 1 where dropout kept an element of a tensor whose elements are all nonzero, else 0.
std::vector<double> kept_mask(const Tensor& output) {
  std::vector<double> mask = output.to_vector<double>();
  for (double& v : mask) v = v != 0.0 ? 1.0 : 0.0;
  return mask;
}

Stat activation_stat() {
  return allocator_for(Device::cpu()).stats().tag_bytes[static_cast<int>(MemoryTag::activation)];
}
}  // namespace

TEST_CASE("dropout keeps about 1 - p of the elements, scaled by 1 / (1 - p)") {
  Generator generator(17);
  const Tensor x = ones({100000});
  const DropoutResult r = dropout(x, 0.3, true, &generator);
  const auto out = r.output.to_vector<float>();
  std::size_t kept = 0;
  for (float v : out) {
    REQUIRE((v == 0.0f || v == static_cast<float>(1.0 / 0.7)));
    kept += v != 0.0f;
  }
  CHECK(static_cast<double>(kept) / out.size() == doctest::Approx(0.7).epsilon(0.01));
  CHECK(mean(r.output).item<double>() == doctest::Approx(1.0).epsilon(0.01));  // the expectation is unchanged
}

TEST_CASE("dropout's mask is bernoulli(1 - p) drawn at the same generator state") {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    CAPTURE(dtype);
    Generator generator(23);
    const GeneratorState before = generator.state();
    const DropoutResult r = dropout(uniform({9, 113}, 1.0, 2.0, {.dtype = dtype}), 0.35, true, &generator);
    REQUIRE(r.draw.has_value());
    CHECK(*r.draw == before);
    CHECK(generator.state().offset == before.offset + 1);  // one draw, as bernoulli takes
    Generator replay(0);
    replay.set_state(before);
    CHECK(kept_mask(r.output) == bernoulli({9, 113}, 0.65, {.dtype = DType::f64}, &replay).to_vector<double>());
  }
}

TEST_CASE("dropout: the same seed gives the same output, another seed another, evaluation is the identity") {
  const Tensor x = uniform({64}, 1.0, 2.0);
  Generator a(5), b(5), c(6);
  const auto first = dropout(x, 0.5, true, &a).output.to_vector<float>();
  CHECK(dropout(x, 0.5, true, &b).output.to_vector<float>() == first);
  CHECK(dropout(x, 0.5, true, &c).output.to_vector<float>() != first);
  CHECK(dropout(x, 0.5, true, &a).output.to_vector<float>() != first);  // the next draw: a fresh mask
  const DropoutResult eval = dropout(x, 0.5, false, &a);
  CHECK(eval.output.is_same(x));
  CHECK_FALSE(eval.draw.has_value());
  CHECK(dropout_backward(x, eval.draw, 0.5).is_same(x));
  CHECK(dropout(x, 0.0, true, &a).output.is_same(x));
  CHECK_THROWS_AS(dropout(x, 1.0), ValueError);
  CHECK_THROWS_AS(dropout(x, -0.1), ValueError);
  CHECK_THROWS_AS(dropout(ones({4}, {.dtype = DType::i64}), 0.5), DTypeError);
}

TEST_CASE("dropout backward is grad * mask / (1 - p) with the forward's mask, strided gradients too") {
  Generator generator(8);
  const Tensor x = uniform({40, 25}, 1.0, 2.0, {.dtype = DType::f64});
  const DropoutResult r = dropout(x, 0.25, true, &generator);
  const std::vector<double> mask = kept_mask(r.output);
  const Tensor g = uniform({25, 40}, -1.0, 1.0, {.dtype = DType::f64}).t();  // a transposed view
  const auto grad = dropout_backward(g, r.draw, 0.25).to_vector<double>();
  const auto gv = g.to_vector<double>();
  for (std::size_t i = 0; i < grad.size(); ++i) REQUIRE(grad[i] == gv[i] * mask[i] * (1.0 / 0.75));
}

TEST_CASE("dropout through autograd: x's gradient uses the forward's mask, after other draws in between") {
  Generator generator(31);
  Tensor x = uniform({300}, 1.0, 2.0);
  autograd::set_requires_grad(x);
  const Tensor y = F::dropout(x, 0.4, true, &generator);
  uniform({1000}, 0.0, 1.0, {}, &generator);  // the generator moves on; the backward must not care
  autograd::backward(F::sum(y));
  const std::vector<double> mask = kept_mask(y);
  const auto dx = autograd::grad(x).to_vector<double>();
  for (std::size_t i = 0; i < dx.size(); ++i) REQUIRE(dx[i] == mask[i] * static_cast<float>(1.0 / 0.6));
}

// Before the mask was recomputed, dropout on a [32, 1280] f32 input held 327680 bytes after its
// forward (the output and an f32 mask saved for backward) and peaked at 491520 (the mask, x * mask
// and the output at once). Now it holds and peaks at the output's 163840: 0 bytes per element saved.
TEST_CASE("dropout holds only its output as activation memory: it saves nothing for backward") {
  Tensor x = ones({32, 1280});
  autograd::set_requires_grad(x);
  allocator_for(Device::cpu()).reset_peak_stats();
  const Stat before = activation_stat();
  Generator generator(3);
  {
    const Tensor y = F::dropout(x, 0.5, true, &generator);
    const Stat after = activation_stat();
    MESSAGE("dropout of [32, 1280] f32: activation bytes held ", after.current - before.current, ", peak ",
            after.peak - before.current, " (the output is ", y.nbytes(), ")");
    CHECK(after.current - before.current == static_cast<std::int64_t>(y.nbytes()));
    CHECK(after.peak - before.current == static_cast<std::int64_t>(y.nbytes()));
    autograd::backward(F::sum(y));
  }
  CHECK(activation_stat().current == before.current);
  CHECK(autograd::grad(x).defined());
}

// Note [Philox in vector lanes] (kernels/cpu/dropout.cpp): the lanes against core/philox.h's
// philox_block, and f32 dropout against dropout_block, its reference, bit for bit. On a CPU without
// AVX-512 the lanes are philox_block itself and the f32 loop dropout_block: the comparisons then
// hold trivially, and the first case says so.
namespace {
constexpr std::uint32_t kLastGridStep = (1u << (32 - kUniformShift)) - 1;  // the largest word >> 8

// One f32 dropout of `in` against dropout_block's, bit for bit.
void check_against_one_block(const std::vector<float>& in, const DropoutSpec& spec) {
  const auto numel = static_cast<std::int64_t>(in.size());
  std::vector<float> out(in.size(), -1.0f), expected(in.size(), -2.0f);
  cpu::dropout_apply(DType::f32, in.data(), out.data(), numel, spec);
  for (std::int64_t block = 0; block < philox_blocks_for(numel); ++block)
    dropout_block<float, float>(in.data(), expected.data(), numel, spec, block);
  REQUIRE(std::memcmp(out.data(), expected.data(), in.size() * sizeof(float)) == 0);
}
}  // namespace

TEST_CASE("sixteen Philox blocks in lanes are philox_block's words, across the 2^32 and 2^64 wraps") {
  if (!cpu::philox_in_lanes()) MESSAGE("no AVX-512 here: the lanes are philox_block itself, compared with itself");
  const std::uint64_t firsts[] = {0, 1, 12345, (std::uint64_t{1} << 32) - 7, ~std::uint64_t{0} - 9};
  for (const std::uint64_t seed : {std::uint64_t{0}, std::uint64_t{42}, std::uint64_t{0xDEADBEEFCAFEF00D}})
    for (const std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{7} << 33})
      for (const std::uint64_t first : firsts) {
        cpu::PhiloxWordsInLanes words;
        cpu::philox_sixteen_blocks(seed, offset, first, words);
        for (std::int64_t j = 0; j < cpu::kPhiloxLanes; ++j) {
          const PhiloxWords expected = philox_block(seed, offset, first + static_cast<std::uint64_t>(j));
          for (int w = 0; w < kPhiloxWordsPerBlock; ++w) REQUIRE(words[w][j] == expected.w[w]);
        }
      }
}

TEST_CASE("bernoulli's keep test on integers agrees with uniform_from_word's at the threshold") {
  const double keeps[] = {-0.5, 0.0, 1e-9, 0.3, 0.5, 0.7, 0.9, 1.0 - kTwoPow24Inverse, 1.0, 1.5, std::nan("")};
  for (const double a : keeps) {
    const std::uint32_t threshold = cpu::bernoulli_keep_threshold(a);
    for (const std::uint32_t u : {threshold - 2, threshold - 1, threshold, threshold + 1, 0u, kLastGridStep}) {
      if (u > kLastGridStep) continue;  // not a word's top 24 bits (and the wraps below 0)
      const std::uint32_t word = u << kUniformShift | 0xABu;
      INFO("a " << a << ", word >> 8 = " << u);
      CHECK((u < threshold) == (uniform_from_word(word) < a));
    }
  }
}

TEST_CASE("f32 dropout gives dropout_block's bits for every size, keep rate and draw") {
  // 0.5: a * 2^24 whole (the keep test's boundary); 1 - 2^-24: all but the last grid step kept.
  const double keeps[] = {0.0, 0.5, 0.7, 0.9, 1.0 - kTwoPow24Inverse, 1.0};
  const std::int64_t sizes[] = {1, 3, 4, 63, 64, 65, 127, 128, 200, 4096 + 7, 81920};
  Generator generator(5);
  for (const double keep : keeps)
    for (const std::int64_t numel : sizes) {
      INFO("keep " << keep << ", " << numel << " elements");
      check_against_one_block(normal({numel}, 0.0, 1.0, {}, &generator).to_vector<float>(),
                              {{.distribution = Distribution::bernoulli, .a = keep, .seed = 99, .offset = 1234},
                               keep > 0.0 ? 1.0 / keep : 0.0});
    }
}

TEST_CASE("f32 dropout drops an element whose uniform equals the keep rate, and keeps it one step above") {
  // Element 4 * 5 + 2 = 22 reads word 2 of block 5: a keep rate equal to that word's uniform puts it
  // exactly on the test's boundary (uniform < a fails), one grid step more keeps it.
  constexpr std::uint64_t kSeed = 99, kOffset = 1234;
  constexpr std::int64_t kElement = 22, kNumel = 64;  // 64: sixteen whole blocks, the lanes' path
  const PhiloxWords block = philox_block(kSeed, kOffset, kElement / kPhiloxWordsPerBlock);
  const double on_boundary = uniform_from_word(block.w[kElement % kPhiloxWordsPerBlock]);
  const std::vector<float> in(kNumel, 1.0f);
  for (const double keep : {on_boundary, on_boundary + kTwoPow24Inverse}) {
    INFO("keep " << keep);
    const DropoutSpec spec{{.distribution = Distribution::bernoulli, .a = keep, .seed = kSeed, .offset = kOffset},
                           1.0 / keep};
    std::vector<float> out(kNumel);
    cpu::dropout_apply(DType::f32, in.data(), out.data(), kNumel, spec);
    CHECK((out[kElement] != 0.0f) == (keep > on_boundary));
    check_against_one_block(in, spec);
  }
}
