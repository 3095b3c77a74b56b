// Random tensors from a counter-based generator (Philox 4x32-10, core/philox.h).
// A Generator is only (seed, offset): each draw takes the next offset, and element i of the draw is
// a pure function of (seed, offset, i). So the same seed gives the same numbers on CPU and GPU,
// whatever the thread count, and a generator's state is two integers that a checkpoint can save.
// Uniform values lie on the 2^-24 grid (float precision) for every dtype; normals use Box-Muller in
// double precision, so CPU and GPU agree to the last bit or within one unit of the last place.
// Not here: dropout masks (kernels/dropout.h), which use the same Philox counters.
#pragma once

#include <cstdint>
#include <mutex>

#include "core/tensor.h"

namespace frugal {

struct GeneratorState {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  bool operator==(const GeneratorState&) const = default;
};

class Generator {
 public:
  explicit Generator(std::uint64_t seed = kDefaultSeed) : state_{seed, 0} {}
  static constexpr std::uint64_t kDefaultSeed = 67280421310721ULL;  // PyTorch's default_rng_seed_val

  void manual_seed(std::uint64_t seed);
  GeneratorState state() const;
  void set_state(GeneratorState state);
  // Reserves one offset for a draw and returns the (seed, offset) pair to draw with.
  GeneratorState next_draw();

 private:
  mutable std::mutex mutex_;  // draws may come from loader worker threads
  GeneratorState state_;
};

Generator& default_generator();         // used when a function is given no generator
void manual_seed(std::uint64_t seed);   // seeds the default generator

// `generator == nullptr` means the default generator. uniform and normal need a floating dtype.
Tensor uniform(Shape shape, double low = 0.0, double high = 1.0, TensorOptions options = {}, Generator* generator = nullptr);
Tensor normal(Shape shape, double mean = 0.0, double stddev = 1.0, TensorOptions options = {}, Generator* generator = nullptr);
// Integers in [low, high); high - low must be in [1, 2^32].
Tensor randint(std::int64_t low, std::int64_t high, Shape shape, TensorOptions options = {.dtype = DType::i64},
               Generator* generator = nullptr);
// 1 with probability p, else 0.
Tensor bernoulli(Shape shape, double p, TensorOptions options = {}, Generator* generator = nullptr);

// In place: overwrite an existing tensor (any layout, any device) with a fresh draw. Initialisers
// use these; they allocate nothing when the tensor is contiguous.
Tensor& uniform_(Tensor& tensor, double low = 0.0, double high = 1.0, Generator* generator = nullptr);
Tensor& normal_(Tensor& tensor, double mean = 0.0, double stddev = 1.0, Generator* generator = nullptr);

}  // namespace frugal
