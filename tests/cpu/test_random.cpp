// Philox 4x32-10 against Random123's published known-answer vectors, and the distributions built
// on it: values derived by hand from those vectors, reproducibility, independence from the thread
// count, and sample statistics.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/philox.h"
#include "core/random.h"

using namespace frugal;

TEST_CASE("philox4x32_10 matches the Random123 known-answer vectors") {
  struct Vector {
    std::uint32_t counter[4], key[2], expected[4];
  };
  const Vector vectors[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Vector& v : vectors) {
    const PhiloxWords out = philox4x32_10(v.counter, v.key);
    for (int i = 0; i < 4; ++i) CHECK(out.w[i] == v.expected[i]);
  }
}

TEST_CASE("uniform: the first values for seed 0 follow from the zero known-answer vector") {
  // Seed 0, first draw (offset 0), block 0 is Philox(counter 0, key 0) = the first vector above.
  // uniform = (word >> 8) / 2^24.
  Generator generator(0);
  const auto values = uniform({4}, 0.0, 1.0, {.dtype = DType::f64}, &generator).to_vector<double>();
  const std::uint32_t words[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
  for (int i = 0; i < 4; ++i) CHECK(values[i] == (words[i] >> 8) / 16777216.0);
  CHECK(generator.state().offset == 1);
}

TEST_CASE("random draws are reproducible and independent of the thread count") {
  auto sample = [](int threads) {
    omp_set_num_threads(threads);
    Generator generator(1234);
    auto u = uniform({1001}, -1.0, 1.0, {}, &generator).to_vector<float>();
    auto n = normal({1001}, 0.0, 1.0, {}, &generator).to_vector<float>();
    u.insert(u.end(), n.begin(), n.end());
    return u;
  };
  const int saved = omp_get_max_threads();
  const auto one = sample(1), two = sample(2), again = sample(2);
  omp_set_num_threads(saved);
  CHECK(one == two);
  CHECK(two == again);
}

TEST_CASE("generator state: saving and restoring replays the same draw") {
  manual_seed(7);
  const GeneratorState saved = default_generator().state();
  const auto first = uniform({16}).to_vector<float>();
  const auto second = uniform({16}).to_vector<float>();
  CHECK(first != second);  // a new draw uses a new offset
  default_generator().set_state(saved);
  CHECK(uniform({16}).to_vector<float>() == first);
}

TEST_CASE("distributions: ranges and sample statistics") {
  Generator generator(99);
  constexpr std::int64_t n = 200000;
  SUBCASE("uniform lies in [low, high) with mean (low + high) / 2") {
    const auto v = uniform({n}, 2.0, 5.0, {.dtype = DType::f64}, &generator).to_vector<double>();
    CHECK(*std::min_element(v.begin(), v.end()) >= 2.0);
    CHECK(*std::max_element(v.begin(), v.end()) < 5.0);
    double mean = 0;
    for (double x : v) mean += x / n;
    CHECK(mean == doctest::Approx(3.5).epsilon(0.01));
  }
  SUBCASE("normal has the requested mean and standard deviation") {
    const auto v = normal({n}, 1.0, 2.0, {.dtype = DType::f64}, &generator).to_vector<double>();
    double mean = 0, var = 0;
    for (double x : v) mean += x / n;
    for (double x : v) var += (x - mean) * (x - mean) / (n - 1);
    CHECK(mean == doctest::Approx(1.0).epsilon(0.02));  // standard error 2/sqrt(n) = 0.0045
    CHECK(std::sqrt(var) == doctest::Approx(2.0).epsilon(0.01));
  }
  SUBCASE("randint covers [low, high) evenly") {
    const auto v = randint(-3, 4, {n}, {.dtype = DType::i64}, &generator).to_vector<std::int64_t>();
    std::int64_t counts[7] = {};
    for (std::int64_t x : v) {
      REQUIRE(x >= -3);
      REQUIRE(x < 4);
      ++counts[x + 3];
    }
    for (std::int64_t c : counts) CHECK(c == doctest::Approx(n / 7.0).epsilon(0.03));
  }
  SUBCASE("bernoulli gives ones with probability p") {
    const auto v = bernoulli({n}, 0.25, {.dtype = DType::u8}, &generator).to_vector<std::uint8_t>();
    double ones = 0;
    for (auto x : v) {
      REQUIRE(x <= 1);
      ones += x;
    }
    CHECK(ones / n == doctest::Approx(0.25).epsilon(0.02));
  }
}

TEST_CASE("uniform never returns high, even where rounding to a narrow dtype would") {
  Generator generator(5);
  constexpr std::int64_t n = 1 << 20;
  auto max_of = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  // Without the clamp about 1 in 500 bf16 draws of uniform(0, 1) would round to 1.0.
  CHECK(max_of(uniform({n}, 0.0, 1.0, {.dtype = DType::bf16}, &generator).to_vector<double>()) == 0.99609375);
  CHECK(max_of(uniform({n}, 0.0, 1.0, {.dtype = DType::f16}, &generator).to_vector<double>()) < 1.0);
  CHECK(max_of(uniform({n}, 1000.0, 1001.0, {}, &generator).to_vector<double>()) < 1001.0);
  CHECK(max_of(uniform({n}, -1.0, 0.0, {.dtype = DType::f16}, &generator).to_vector<double>()) < 0.0);
  CHECK(uniform({4}, 2.0, 2.0, {}, &generator).to_vector<float>() == std::vector<float>(4, 2.0f));
}

TEST_CASE("uniform_ and normal_ fill existing tensors in place, any layout") {
  Generator a(11), b(11);
  Tensor dense = empty({3, 4});
  uniform_(dense, -1.0, 1.0, &a);
  CHECK(dense.to_vector<float>() == uniform({3, 4}, -1.0, 1.0, {}, &b).to_vector<float>());
  // A transposed destination receives the draw in its own row-major order.
  Tensor transposed = empty({4, 3}).t();
  normal_(transposed, 0.0, 1.0, &a);
  CHECK(transposed.contiguous().to_vector<float>() == normal({3, 4}, 0.0, 1.0, {}, &b).to_vector<float>());
  Tensor ints = empty({2}, {.dtype = DType::i32});
  CHECK_THROWS_WITH_AS(uniform_(ints), doctest::Contains("needs a floating dtype, got i32"), DTypeError);
}

TEST_CASE("random: bad arguments are rejected with the values in the message") {
  CHECK_THROWS_AS(uniform({2}, 1.0, 0.0), ValueError);
  CHECK_THROWS_AS(normal({2}, 0.0, 1.0, {.dtype = DType::i64}), DTypeError);
  CHECK_THROWS_AS(normal({2}, 0.0, -1.0), ValueError);
  CHECK_THROWS_AS(bernoulli({2}, 1.5), ValueError);
  CHECK_THROWS_WITH_AS(randint(5, 5, {2}), doctest::Contains("got [5, 5)"), ValueError);
  CHECK_THROWS_AS(randint(0, (std::int64_t{1} << 32) + 1, {2}), ValueError);
}
