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
// Fills `out` with one draw from the generator. A strided destination gets a contiguous draw copied
// in, so element i of the draw lands at element i of the tensor whatever its layout.
Tensor& fill_random(Tensor& out, Generator* generator, RandomSpec spec) {
  const GeneratorState state = (generator ? *generator : default_generator()).next_draw();
  spec.seed = state.seed;
  spec.offset = state.offset;
  if (out.is_contiguous()) {
    random_fill(out, spec);
    out.storage()->bump_version();
  } else {
    Tensor packed = empty(out.shape(), {.dtype = out.dtype(), .device = out.device()});
    random_fill(packed, spec);
    out.copy_(packed);
  }
  return out;
}

void check_floating(DType dtype, const char* op) {
  FRUGAL_CHECK_DTYPE(is_floating(dtype), op, ": needs a floating dtype, got ", dtype,
                     " (draw with randint for integers)");
}

RandomSpec uniform_spec(double low, double high) {
  FRUGAL_CHECK_VALUE(std::isfinite(low) && std::isfinite(high) && low <= high, "uniform: need finite low <= high, got [",
                     low, ", ", high, ")");
  return {.distribution = Distribution::uniform, .a = low, .b = high};
}

RandomSpec normal_spec(double mean, double stddev) {
  FRUGAL_CHECK_VALUE(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0.0,
                     "normal: need a finite mean and a finite stddev >= 0, got mean ", mean, " stddev ", stddev);
  return {.distribution = Distribution::normal, .a = mean, .b = stddev};
}

Tensor draw(Shape shape, TensorOptions options, Generator* generator, const RandomSpec& spec) {
  Tensor out = empty(std::move(shape), options);
  return fill_random(out, generator, spec);
}
}  // namespace

Tensor uniform(Shape shape, double low, double high, TensorOptions options, Generator* generator) {
  check_floating(options.dtype, "uniform");
  return draw(std::move(shape), options, generator, uniform_spec(low, high));
}

Tensor normal(Shape shape, double mean, double stddev, TensorOptions options, Generator* generator) {
  check_floating(options.dtype, "normal");
  return draw(std::move(shape), options, generator, normal_spec(mean, stddev));
}

Tensor& uniform_(Tensor& tensor, double low, double high, Generator* generator) {
  check_floating(tensor.dtype(), "uniform_");
  return fill_random(tensor, generator, uniform_spec(low, high));
}

Tensor& normal_(Tensor& tensor, double mean, double stddev, Generator* generator) {
  check_floating(tensor.dtype(), "normal_");
  return fill_random(tensor, generator, normal_spec(mean, stddev));
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
