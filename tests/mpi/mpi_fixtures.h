// What the MPI test cases share: each rank's contribution, a pure function of its rank, so every
// rank computes the reduction of the whole world locally and compares it with what MPI delivered.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"

namespace frugal::test {

// A test that goes wrong on one rank only must end on a timeout, not hang the others.
constexpr std::chrono::seconds kTestTimeout{20};

// Rank `rank`'s element i: small integers in [-8, 24], exact in every dtype that can hold them
// (u8: non-negative only), so sums over a few ranks are exact in f16 and bf16 too.
inline double contribution(int rank, std::int64_t i, bool non_negative) {
  const double v = static_cast<double>((i * 3 + rank * 5) % 17) + rank;
  return non_negative ? v : v - 8;
}

inline std::vector<double> contributions(int rank, std::int64_t n, bool non_negative) {
  std::vector<double> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = contribution(rank, i, non_negative);
  return values;
}

inline Tensor contribution_tensor(int rank, std::int64_t n, DType dtype) {
  return from_vector(contributions(rank, n, dtype == DType::u8)).to(dtype);
}

// The reduction of every rank's contribution, computed here, rounded as the dtype rounds it: sum,
// max and min are exact; average divides the sum in the precision MPI reduces in (f32 for f16/bf16).
std::vector<double> reference(dist::ReduceOp op, int world_size, std::int64_t n, DType dtype);

}  // namespace frugal::test
