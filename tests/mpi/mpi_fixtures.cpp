// The reference reductions of the MPI test cases (see mpi_fixtures.h).
#include "tests/mpi/mpi_fixtures.h"

#include <algorithm>

namespace frugal::test {

namespace {
double average_in(DType dtype, double sum, int world_size) {
  return visit_dtype(dtype, [&]<typename T>() -> double {
    if constexpr (std::is_same_v<T, double>)
      return sum / world_size;
    else
      return static_cast<double>(static_cast<float>(T(static_cast<float>(sum) / static_cast<float>(world_size))));
  });
}
}  // namespace

std::vector<double> reference(dist::ReduceOp op, int world_size, std::int64_t n, DType dtype) {
  std::vector<double> out = contributions(0, n, dtype == DType::u8);
  for (int r = 1; r < world_size; ++r) {
    const std::vector<double> theirs = contributions(r, n, dtype == DType::u8);
    for (std::size_t i = 0; i < out.size(); ++i) {
      switch (op) {
        case dist::ReduceOp::sum:
        case dist::ReduceOp::average: out[i] += theirs[i]; break;
        case dist::ReduceOp::max: out[i] = std::max(out[i], theirs[i]); break;
        case dist::ReduceOp::min: out[i] = std::min(out[i], theirs[i]); break;
      }
    }
  }
  if (op == dist::ReduceOp::average)
    for (double& v : out) v = average_in(dtype, v, world_size);
  return out;
}

}  // namespace frugal::test
