// tests/gpu/gpu_compare.h: the GPU suite's tolerance check.
#include "tests/gpu/gpu_compare.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

namespace frugal::test {

Tolerance elementwise_tolerance(DType dtype) {
  const double rtol = dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 2e-6 : dtype == DType::f16 ? 2e-3 : 1.6e-2;
  return {rtol, rtol};
}

Tolerance accumulation_tolerance(DType dtype) {
  if (dtype == DType::f32) return {2e-3, 2e-3};
  return elementwise_tolerance(dtype);
}

void check_close(const Tensor& gpu, const Tensor& cpu, Tolerance tolerance, const char* what) {
  REQUIRE_MESSAGE(gpu.shape() == cpu.shape(), what, ": shapes differ, gpu ", shape_str(gpu.shape()), " cpu ",
                  shape_str(cpu.shape()));
  const auto g = gpu.to_vector<double>(), c = cpu.to_vector<double>();
  double worst = 0;
  std::size_t worst_index = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) && std::isnan(c[i])) continue;
    const double excess = std::abs(g[i] - c[i]) - (tolerance.atol + tolerance.rtol * std::abs(c[i]));
    if (!(excess <= worst)) {  // also catches a NaN on one side only
      worst = std::isnan(excess) ? INFINITY : excess;
      worst_index = i;
    }
  }
  CHECK_MESSAGE(worst <= 0, what, " ", gpu.dtype(), ": worst element ", worst_index, " gpu ", g[worst_index], " cpu ",
                c[worst_index]);
}

void skipped_part(const char* library_name) {
  const std::string library(library_name);
  const std::string text = "the " + library + " part of this case is skipped: this build has no " + library +
                           " (FRUGAL_CUDA=emulated runs on the CPU; NVIDIA's libraries need a GPU)";
  MESSAGE(text);
}

}  // namespace frugal::test
