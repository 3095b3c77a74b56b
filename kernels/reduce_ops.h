// The accumulators of frugal's reductions, written once as FRUGAL_HOST_DEVICE code for the CPU loop
// and the CUDA kernel: each can take one element (add) and absorb another partial result (merge),
// which is all a sequential loop or a tree of warps needs. All accumulate in double, whatever the
// tensor's dtype: f32 sums of millions of elements then lose nothing visible.
//   SumAccumulator    Kahan (compensated) summation: sum and mean
//   Welford           running mean and sum of squared deviations: var (Chan's formula to merge)
//   MaxAccumulator    the largest value and the index of its first occurrence; NaN wins, as in PyTorch
#pragma once

#include <cstdint>
#include <limits>

#include "core/host_device.h"

namespace frugal {

enum class Reduction : std::uint8_t { sum, mean, var, max, argmax };

struct SumAccumulator {
  double sum = 0.0;
  double compensation = 0.0;  // the low-order bits lost so far, negated: the true sum is sum - compensation
  FRUGAL_HOST_DEVICE void add(double x) {
    const double y = x - compensation;
    const double t = sum + y;
    compensation = (t - sum) - y;
    sum = t;
  }
  FRUGAL_HOST_DEVICE void merge(const SumAccumulator& other) {
    add(other.sum);
    add(-other.compensation);
  }
};

struct Welford {
  double count = 0.0, mean = 0.0, m2 = 0.0;
  FRUGAL_HOST_DEVICE void add(double x) {
    count += 1.0;
    const double delta = x - mean;
    mean += delta / count;
    m2 += delta * (x - mean);
  }
  FRUGAL_HOST_DEVICE void merge(const Welford& other) {
    if (other.count == 0.0) return;
    if (count == 0.0) {
      *this = other;
      return;
    }
    const double total = count + other.count, delta = other.mean - mean;
    mean += delta * other.count / total;
    m2 += other.m2 + delta * delta * count * other.count / total;
    count = total;
  }
  // correction 1: the unbiased estimate (PyTorch's default); 0: the biased one (BatchNorm normalises
  // with it). NaN when count <= correction.
  FRUGAL_HOST_DEVICE double variance(std::int64_t correction) const {
    const double dof = count - static_cast<double>(correction);
    return dof > 0.0 ? m2 / dof : std::numeric_limits<double>::quiet_NaN();
  }
};

struct MaxAccumulator {
  double value = -std::numeric_limits<double>::infinity();  // any element replaces it
  std::int64_t index = -1;
  FRUGAL_HOST_DEVICE static bool is_nan(double x) { return x != x; }
  // Whether (v, i) should replace the current best: NaN first, then larger, then the first index.
  FRUGAL_HOST_DEVICE bool beaten_by(double v, std::int64_t i) const {
    if (index < 0) return true;
    if (is_nan(value)) return is_nan(v) && i < index;
    if (is_nan(v)) return true;
    return v > value || (v == value && i < index);
  }
  FRUGAL_HOST_DEVICE void add(double x, std::int64_t i) {
    if (beaten_by(x, i)) {
      value = x;
      index = i;
    }
  }
  FRUGAL_HOST_DEVICE void merge(const MaxAccumulator& other) {
    if (other.index >= 0) add(other.value, other.index);
  }
};

}  // namespace frugal
