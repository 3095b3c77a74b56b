// Dropout: the scaling, the keep rate, reproducibility from the generator state, evaluation mode,
// and the backward passing gradient only through kept elements.
#include <doctest/doctest.h>

#include "kernels/dropout.h"
#include "kernels/reduce.h"

using namespace frugal;

TEST_CASE("dropout keeps about 1 - p of the elements, scaled by 1 / (1 - p)") {
  Generator generator(17);
  const Tensor x = ones({100000});
  const DropoutResult r = dropout(x, 0.3, true, &generator);
  const auto out = r.output.to_vector<float>();
  std::size_t kept = 0;
  for (float v : out) {
    REQUIRE((v == 0.0f || v == doctest::Approx(1.0f / 0.7f)));
    kept += v != 0.0f;
  }
  CHECK(static_cast<double>(kept) / out.size() == doctest::Approx(0.7).epsilon(0.01));
  CHECK(mean(r.output).item<double>() == doctest::Approx(1.0).epsilon(0.01));  // the expectation is unchanged
}

TEST_CASE("dropout: the same generator state gives the same mask, evaluation is the identity") {
  Generator generator(5);
  const GeneratorState saved = generator.state();
  const Tensor x = ones({64});
  const Tensor first = dropout(x, 0.5, true, &generator).mask;
  generator.set_state(saved);  // what activation checkpointing does before recomputing
  CHECK(dropout(x, 0.5, true, &generator).mask.to_vector<float>() == first.to_vector<float>());
  const DropoutResult eval = dropout(x, 0.5, false, &generator);
  CHECK(eval.output.is_same(x));
  CHECK_FALSE(eval.mask.defined());
  CHECK(dropout_backward(x, eval.mask, 0.5).is_same(x));
  CHECK_THROWS_AS(dropout(x, 1.0), ValueError);
  CHECK_THROWS_AS(dropout(x, -0.1), ValueError);
}

TEST_CASE("dropout backward passes gradient only through kept elements, scaled") {
  Generator generator(8);
  const Tensor x = ones({1000}, {.dtype = DType::f64});
  const DropoutResult r = dropout(x, 0.25, true, &generator);
  const auto grad = dropout_backward(full({1000}, 2.0, {.dtype = DType::f64}), r.mask, 0.25).to_vector<double>();
  const auto mask = r.mask.to_vector<double>();
  for (std::size_t i = 0; i < grad.size(); ++i) CHECK(grad[i] == (mask[i] != 0.0 ? 2.0 / 0.75 : 0.0));
}
