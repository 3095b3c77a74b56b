// GEMM on the CPU: both implementations exact on small integers against a triple loop, through
// every transpose, batched and broadcast; linear and its backward against finite differences;
// shape errors. The hand-written CUDA kernels are compared in tests/cpu/test_kernels_emulated.cpp.
#include <doctest/doctest.h>

#include <omp.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/random.h"
#include "kernels/cpu_runtime.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "tests/cpu/thread_scopes.h"
#include "tests/skip.h"

using namespace frugal;

namespace {
// Small integers in [-4, 4]: every product and sum is exact in f32, so any index error shows.
Tensor small_ints(Shape shape, DType dtype = DType::f32) {
  return randint(-4, 5, std::move(shape), {.dtype = DType::i64}).to(dtype);
}

std::vector<double> reference(const Tensor& a, const Tensor& b) {
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  const std::int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p) c[i * n + j] += av[i * k + p] * bv[p * n + j];
  return c;
}
}  // namespace

TEST_CASE("matmul: exact on small integers, every transpose, both CPU implementations") {
  for (GemmImpl impl : {GemmImpl::library, GemmImpl::blocked}) {
    const test::CpuGemmScope scope(impl);
    CAPTURE(gemm_impl_name(impl));
    for (auto [m, k, n] : {std::array<std::int64_t, 3>{1, 1, 1}, {7, 13, 5}, {65, 300, 70}, {3, 0, 4}}) {
      const Tensor a = small_ints({m, k}), b = small_ints({k, n});
      CHECK(matmul(a, b).to_vector<double>() == reference(a, b));
      const Tensor at = small_ints({k, m}).t(), bt = small_ints({n, k}).t();  // transposed views: no copy
      CHECK(matmul(at, b).to_vector<double>() == reference(at, b));
      CHECK(matmul(a, bt).to_vector<double>() == reference(a, bt));
      CHECK(matmul(at, bt).to_vector<double>() == reference(at, bt));
      const Tensor strided = small_ints({m, 2 * k}).slice(1, 0, 2 * k, 2);  // neither layout: packed first
      CHECK(matmul(strided, b).to_vector<double>() == reference(strided, b));
    }
    for (DType dtype : {DType::f64, DType::f16, DType::bf16}) {
      const Tensor a = small_ints({9, 11}, dtype), b = small_ints({11, 6}, dtype);
      CHECK(matmul(a, b).to_vector<double>() == reference(a, b));
    }
  }
}

TEST_CASE("matmul: batched, with a shared right operand") {
  const Tensor a = small_ints({3, 4, 5}), b = small_ints({3, 5, 2}), shared = small_ints({5, 2});
  const Tensor c = matmul(a, b), d = matmul(a, shared);
  CHECK(c.shape() == Shape{3, 4, 2});
  for (std::int64_t i = 0; i < 3; ++i) {
    CHECK(c.select(0, i).to_vector<double>() == reference(a.select(0, i), b.select(0, i)));
    CHECK(d.select(0, i).to_vector<double>() == reference(a.select(0, i), shared));
  }
}

TEST_CASE("matmul: errors name both shapes") {
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3}), zeros({4, 5})), doctest::Contains("inner sizes differ: [2, 3] x [4, 5]"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})), doctest::Contains("batch sizes differ"), ShapeError);
  CHECK_THROWS_AS(matmul(zeros({3}), zeros({3, 2})), ShapeError);
  CHECK_THROWS_AS(matmul(zeros({2, 2}), zeros({2, 2}, {.dtype = DType::f64})), DTypeError);
  CHECK_THROWS_AS(set_gemm_impl(DeviceType::CPU, GemmImpl::tiled), ValueError);
  CHECK_THROWS_AS(parse_gemm_impl("fast"), ValueError);
}

TEST_CASE("linear and its backward against finite differences in double") {
  Generator g(3);
  const Tensor x = uniform({4, 3}, -1.0, 1.0, {.dtype = DType::f64}, &g);
  const Tensor w = uniform({2, 3}, -1.0, 1.0, {.dtype = DType::f64}, &g);
  const Tensor b = uniform({2}, -1.0, 1.0, {.dtype = DType::f64}, &g);
  const Tensor upstream = uniform({4, 2}, -1.0, 1.0, {.dtype = DType::f64}, &g);
  // loss = sum(upstream * linear(x, w, b)); its gradient with respect to each input, numerically.
  auto loss = [&](const Tensor& xx, const Tensor& ww, const Tensor& bb) {
    return sum(mul(upstream, linear(xx, ww, bb))).item<double>();
  };
  const LinearGrads grads = linear_backward(upstream, x, w, true);
  auto check_numeric = [&](const Tensor& analytic, int which) {
    const double h = 1e-6;
    const Tensor original = which == 0 ? x : which == 1 ? w : b;
    const auto base = original.to_vector<double>();
    const auto expected = analytic.to_vector<double>();
    for (std::size_t i = 0; i < base.size(); ++i) {
      auto plus = base, minus = base;
      plus[i] += h;
      minus[i] -= h;
      const Tensor p = from_vector(plus, original.shape()), q = from_vector(minus, original.shape());
      const double numeric = which == 0   ? (loss(p, w, b) - loss(q, w, b)) / (2 * h)
                             : which == 1 ? (loss(x, p, b) - loss(x, q, b)) / (2 * h)
                                          : (loss(x, w, p) - loss(x, w, q)) / (2 * h);
      CHECK(expected[i] == doctest::Approx(numeric).epsilon(1e-7));
    }
  };
  check_numeric(grads.input, 0);
  check_numeric(grads.weight, 1);
  check_numeric(grads.bias, 2);
  CHECK_FALSE(linear_backward(upstream, x, w, false).bias.defined());
  CHECK_THROWS_AS(linear(x, w, zeros({3}, {.dtype = DType::f64})), ShapeError);
}

// kernels/cpu_runtime.h: the test binary's main re-executes itself with OPENBLAS_CORETYPE set when
// OpenBLAS fell back to its SSE3 kernels on a CPU with AVX2 or AVX-512, and GOMP_SPINCOUNT set
// unless whoever ran the tests chose a wait policy (scripts/test.sh: passive).
TEST_CASE("the CPU runtime: OpenBLAS runs the kernels for this CPU, OpenMP's waiting is set") {
  CHECK((std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr));
  if (frugal::blas_core().empty()) FRUGAL_SKIP("built without OpenBLAS");
  const char* chosen = std::getenv("OPENBLAS_CORETYPE");
  if (chosen != nullptr && (std::string(chosen) == "SkylakeX" || std::string(chosen) == "Haswell"))
    CHECK(frugal::blas_core() == chosen);  // the re-executed process loaded the core asked for
  if (chosen == nullptr) CHECK_FALSE(frugal::better_blas_core().has_value());
}

TEST_CASE("spin_count_for: iterations for a time, more for longer, never below 1000") {
  const long long short_wait = frugal::spin_count_for(10.0), long_wait = frugal::spin_count_for(10000.0);
  CHECK(short_wait >= 1000);
  CHECK(long_wait > short_wait);
  CHECK(frugal::spin_count_for(0.0) == 1000);
}

// Note [OpenBLAS threads and bits] (kernels/cpu_runtime.h): with its AVX2 kernels OpenBLAS's threaded
// product differs from its one-thread product; a cap of one thread makes the bits independent of
// OpenMP's thread count (whatever the CPU: where OpenBLAS is exact anyway, this holds trivially).
TEST_CASE("the CPU runtime: a cap of one BLAS thread gives a product the same bits on 1 and 2 threads") {
  const int saved_threads = omp_get_max_threads(), saved_cap = frugal::blas_threads();
  if (std::getenv("FRUGAL_BLAS_THREADS") == nullptr) CHECK(saved_cap == 0);  // the default: OpenMP's count
  frugal::set_blas_threads(1);
  const Tensor a = uniform({144, 24}, -1.0, 1.0), b = uniform({24, 4096}, -1.0, 1.0);
  omp_set_num_threads(1);
  const std::vector<float> one = matmul(a, b).to_vector<float>();
  omp_set_num_threads(2);
  const std::vector<float> two = matmul(a, b).to_vector<float>();
  omp_set_num_threads(saved_threads);
  frugal::set_blas_threads(saved_cap);
  CHECK(one == two);
  CHECK_THROWS_WITH_AS(frugal::set_blas_threads(-1), doctest::Contains("set_blas_threads: -1 threads"), ValueError);
}
