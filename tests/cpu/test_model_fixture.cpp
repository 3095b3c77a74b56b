// The fixture weight formula (tests/cpu/model_fixture.h) against the values that
// tests/fixtures/models/make_fixtures.py printed when it wrote the fixtures: each case's
// weights_check (state-dict tensor 0, elements 0..15, as its weights_check.safetensors stores them) and
// one value of every other rule. The literals are the script's output, printed with 9 significant
// digits, which name a float32 exactly.
#include <doctest/doctest.h>

#include <array>

#include "tests/cpu/model_fixture.h"

using namespace frugal;
using frugal::test::fixture_weight_value;
using frugal::test::fixture_weights;

namespace {
using Check16 = std::array<double, 16>;

// mobilenet_v2_w050_c1: features.0.0.weight [16, 1, 3, 3] (fan_in 9)
constexpr Check16 kMobileNetW050C1 = {0.625943899,  0.108694598,  0.148912206, -0.631232977, -0.111932181, -0.184907004,
                                      0.391619533,  -0.179907262, 0.193517238, 0.297797114,  -0.762099862, -0.300071657,
                                      0.129171729,  0.43880257,   -0.136103451, 0.0469339602};
// mobilenet_v2_w100_c3_cifar: features.0.0.weight [32, 3, 3, 3] (fan_in 27)
constexpr Check16 kMobileNetW100C3 = {0.361388892,  0.0627548546, 0.085974507,  -0.364442527, -0.0646240711, -0.106756113,
                                      0.226101652,  -0.103869513, 0.11172723,   0.171933234,  -0.439998567,  -0.173246443,
                                      0.0745773315, 0.253342777,  -0.0785793662, 0.0270973351};
// resnet18_c3 and resnet50_c3 (the same stem): conv1.weight [64, 3, 7, 7] (fan_in 147)
constexpr Check16 kResNet18C3 = {0.154880956,  0.0268949382, 0.0368462168,  -0.15618965,   -0.0276960321, -0.0457526185,
                                 0.096900709,  -0.0445155054, 0.0478831008, 0.0736856759,  -0.188570812,  -0.0742484778,
                                 0.031961713,  0.108575478,  -0.0336768702, 0.0116131436};

double as_float(double printed) { return static_cast<double>(static_cast<float>(printed)); }
}  // namespace

TEST_CASE("fixture weights: tensor 0 of each case matches the script's weights_check") {
  struct Case {
    const char* name;
    Shape shape;
    const Check16& expected;
  };
  for (const Case& c : {Case{"features.0.0.weight", {16, 1, 3, 3}, kMobileNetW050C1},
                        Case{"features.0.0.weight", {32, 3, 3, 3}, kMobileNetW100C3},
                        Case{"conv1.weight", {64, 3, 7, 7}, kResNet18C3}}) {
    CAPTURE(shape_str(c.shape));
    for (std::int64_t i = 0; i < 16; ++i)
      CHECK(fixture_weight_value(0, i, c.name, c.shape) == as_float(c.expected[static_cast<std::size_t>(i)]));
  }
}

TEST_CASE("fixture weights: batch norm's weight, bias and buffers follow their rules, in state-dict order") {
  // The script's tensors 1..5 (the stem's batch norm, the same in every case), elements 0 and 3.
  const nn::StateDict like = {{"features.0.0.weight", empty({16, 1, 3, 3})},
                              {"features.0.1.weight", empty({16})},
                              {"features.0.1.bias", empty({16})},
                              {"features.0.1.running_mean", empty({16})},
                              {"features.0.1.running_var", empty({16})},
                              {"features.0.1.num_batches_tracked", empty({}, {.dtype = DType::i64})}};
  const nn::StateDict weights = fixture_weights(like);
  REQUIRE(weights.size() == like.size());
  for (std::size_t k = 0; k < like.size(); ++k) {
    CHECK(weights[k].first == like[k].first);
    CHECK(weights[k].second.shape() == like[k].second.shape());
    CHECK(weights[k].second.dtype() == (k == 5 ? DType::i64 : DType::f32));
  }
  CHECK(weights[0].second.to_vector<double>()[15] == as_float(kMobileNetW050C1[15]));
  const std::array<std::array<double, 2>, 4> expected = {{{1.10652065, 1.05315053},
                                                          {0.0810130462, 0.0860140398},
                                                          {-0.0377516672, -0.069785431},
                                                          {1.28445172, 1.20870316}}};
  for (std::size_t k = 1; k <= 4; ++k) {
    CAPTURE(like[k].first);
    const std::vector<double> values = weights[k].second.to_vector<double>();
    CHECK(values[0] == as_float(expected[k - 1][0]));
    CHECK(values[3] == as_float(expected[k - 1][1]));
  }
  CHECK(weights[5].second.item<std::int64_t>() == 5);
  CHECK_THROWS_AS(fixture_weights({{"features.0.scale", empty({4})}}), ValueError);
}
