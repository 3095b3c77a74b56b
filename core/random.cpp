// Random tensors (see random.h): argument checks and generator bookkeeping; the per-element work
// is core/random_spec.h, run by the device's random_fill (core/copy.h).
#include "core/random.h"

#include <cmath>

#include "core/copy.h"

namespace frugal {

void Generator::manual_seed(std::uint64_t seed) { set_state({seed, 0}); }

GeneratorState Generator::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

void Generator::set_state(GeneratorState state) {
  std::lock_guard lock(mutex_);
  state_ = state;
}

GeneratorState Generator::next_draw() {
  std::lock_guard lock(mutex_);
  GeneratorState draw = state_;
  state_.offset += 1;
  return draw;
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

namespace {
Tensor draw(Shape shape, TensorOptions options, Generator* generator, RandomSpec spec) {
  Tensor out = empty(std::move(shape), options);
  const GeneratorState state = (generator ? *generator : default_generator()).next_draw();
  spec.seed = state.seed;
  spec.offset = state.offset;
  random_fill(out, spec);
  return out;
}
}  // namespace

Tensor uniform(Shape shape, double low, double high, TensorOptions options, Generator* generator) {
  FRUGAL_CHECK_VALUE(std::isfinite(low) && std::isfinite(high) && low <= high, "uniform: need finite low <= high, got [",
                     low, ", ", high, ")");
  return draw(std::move(shape), options, generator, {.distribution = Distribution::uniform, .a = low, .b = high});
}

Tensor normal(Shape shape, double mean, double stddev, TensorOptions options, Generator* generator) {
  FRUGAL_CHECK_VALUE(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0.0,
                     "normal: need a finite mean and a finite stddev >= 0, got mean ", mean, " stddev ", stddev);
  return draw(std::move(shape), options, generator, {.distribution = Distribution::normal, .a = mean, .b = stddev});
}

Tensor randint(std::int64_t low, std::int64_t high, Shape shape, TensorOptions options, Generator* generator) {
  constexpr std::int64_t kMaxRange = std::int64_t{1} << 32;  // one 32-bit Philox word per element
  constexpr std::int64_t kExactInDouble = std::int64_t{1} << 53;  // values travel as doubles
  FRUGAL_CHECK_VALUE(high > low && high - low <= kMaxRange, "randint: need low < high and high - low <= 2^32, got [",
                     low, ", ", high, ")");
  FRUGAL_CHECK_VALUE(low > -kExactInDouble && high < kExactInDouble, "randint: bounds must lie within +-2^53, got [",
                     low, ", ", high, ")");
  return draw(std::move(shape), options, generator,
              {.distribution = Distribution::randint, .a = static_cast<double>(low), .b = static_cast<double>(high - low)});
}

Tensor bernoulli(Shape shape, double p, TensorOptions options, Generator* generator) {
  FRUGAL_CHECK_VALUE(p >= 0.0 && p <= 1.0, "bernoulli: p must be in [0, 1], got ", p);
  return draw(std::move(shape), options, generator, {.distribution = Distribution::bernoulli, .a = p});
}

}  // namespace frugal
