// kernels/cuda/*.cu in the CUDA emulator against the CPU kernels, under two schedules: every
// elementwise op in every floating dtype with broadcast and strided operands, every reduction, and
// the naive, tiled and register-blocked GEMM kernels (exact on small integers, odd sizes, every transpose),
// and dropout (the same elements kept, the same values, in every floating dtype).
#include <doctest/doctest.h>

#include "emu/emulator.h"
#include "core/random.h"
#include "kernels/dropout_backends.h"
#include "kernels/elementwise.h"
#include "kernels/elementwise_backends.h"
#include "kernels/gemm_backends.h"
#include "kernels/reduce.h"
#include "kernels/reduce_backends.h"

using namespace frugal;

namespace {
// Runs a kernel of one backend into a fresh tensor of `shape`; returns its values.
template <typename Kernel>
std::vector<double> run(const Shape& shape, DType dtype, Kernel&& kernel) {
  Tensor out = empty(shape, {.dtype = dtype});
  kernel(out);
  return out.to_vector<double>();
}
}  // namespace

TEST_CASE("elementwise CUDA kernels in the emulator match the CPU kernels") {
  for (const emu::Options& schedule : {emu::Options{emu::Schedule::forward}, emu::Options{emu::Schedule::shuffle, 3}}) {
    emu::OptionsScope scope(schedule);
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      CAPTURE(dtype);
      const Tensor x = uniform({3, 5, 7}, -8.0, 8.0, {.dtype = dtype}).permute({2, 0, 1});  // strided
      const Tensor y = uniform({7, 1, 5}, 0.5, 4.0, {.dtype = dtype});                     // broadcast over dim 1
      const Shape shape = broadcast_shapes(x.shape(), y.shape(), "test");
      const Tensor xs = x.expand(shape), ys = y.expand(shape);
      for (int op = 0; op <= static_cast<int>(UnaryOp::clamp); ++op) {
        const auto u = static_cast<UnaryOp>(op);
        auto with = [&](auto backend) {
          return run(x.shape(), dtype, [&](Tensor& out) {
            backend(u, 0.75, 2.5, dtype, out.data_ptr(), out.layout(), x.data_ptr(), x.layout());
          });
        };
        const auto expected = with([](auto&&... a) { cpu::unary(a...); });
        const auto emulated = with([](auto&&... a) { cuda_emulated::unary(a...); });
        for (std::size_t i = 0; i < expected.size(); ++i)  // NaN == NaN here (log, sqrt of negatives)
          REQUIRE_MESSAGE((emulated[i] == expected[i] || (std::isnan(emulated[i]) && std::isnan(expected[i]))),
                          "unary op " << op << " element " << i);
      }
      for (int op = 0; op <= static_cast<int>(BinaryOp::tanh_backward); ++op) {
        const auto b = static_cast<BinaryOp>(op);
        auto with = [&](auto backend) {
          return run(shape, dtype, [&](Tensor& out) {
            backend(b, dtype, out.data_ptr(), out.layout(), xs.data_ptr(), xs.layout(), ys.data_ptr(), ys.layout());
          });
        };
        CHECK_MESSAGE(with([](auto&&... a) { cuda_emulated::binary(a...); }) == with([](auto&&... a) { cpu::binary(a...); }),
                      "binary op " << op);
      }
      const Tensor condition = bernoulli({7, 1, 1}, 0.5, {.dtype = DType::boolean}).expand(shape);
      auto with = [&](auto backend) {
        return run(shape, dtype, [&](Tensor& out) {
          backend(dtype, out.data_ptr(), out.layout(), condition.data<bool>(), condition.layout(), xs.data_ptr(), xs.layout(),
                  ys.data_ptr(), ys.layout());
        });
      };
      CHECK(with([](auto&&... a) { cuda_emulated::where(a...); }) == with([](auto&&... a) { cpu::where(a...); }));
    }
  }
}

TEST_CASE("the CUDA dropout kernel in the emulator matches the CPU exactly") {
  for (const emu::Options& schedule : {emu::Options{emu::Schedule::forward}, emu::Options{emu::Schedule::shuffle, 5}}) {
    emu::OptionsScope scope(schedule);
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      CAPTURE(dtype);
      constexpr std::int64_t kOdd = 1027;  // not a multiple of four: the last Philox block is partial
      const Tensor x = uniform({kOdd}, -3.0, 3.0, {.dtype = dtype});
      const DropoutSpec spec{.keep = {.distribution = Distribution::bernoulli, .a = 0.7, .seed = 99, .offset = 4},
                             .scale = 1.0 / 0.7};
      auto with = [&](auto backend) {
        return run({kOdd}, dtype, [&](Tensor& out) { backend(dtype, x.data_ptr(), out.data_ptr(), kOdd, spec); });
      };
      CHECK(with([](auto&&... a) { cuda_emulated::dropout_apply(a...); }) == with([](auto&&... a) { cpu::dropout_apply(a...); }));
    }
  }
}

TEST_CASE("the CUDA reduction kernel in the emulator matches the CPU") {
  for (const emu::Options& schedule : {emu::Options{emu::Schedule::forward}, emu::Options{emu::Schedule::reverse}}) {
    emu::OptionsScope scope(schedule);
    for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
      CAPTURE(dtype);
      // 3 outputs of 700 inputs each (more than a block's 256 threads), read through a transpose.
      const Tensor x = uniform({700, 3}, -5.0, 5.0, {.dtype = dtype}).t();
      for (Reduction op : {Reduction::sum, Reduction::mean, Reduction::var, Reduction::max, Reduction::argmax}) {
        Tensor expected = empty({3}, {.dtype = dtype}), emulated = empty({3}, {.dtype = dtype});
        Tensor expected_index = empty({3}, {.dtype = DType::i64}), emulated_index = empty({3}, {.dtype = DType::i64});
        cpu::reduce(op, dtype, x.data_ptr(), x.layout(), 3, 700, 1, expected.data_ptr(), expected_index.data<std::int64_t>());
        cuda_emulated::reduce(op, dtype, x.data_ptr(), x.layout(), 3, 700, 1, emulated.data_ptr(),
                              emulated_index.data<std::int64_t>());
        const auto e = expected.to_vector<double>(), g = emulated.to_vector<double>();
        for (int i = 0; i < 3; ++i)  // a tree adds in another order: equal up to double rounding, then cast
          CHECK_MESSAGE(std::abs(g[i] - e[i]) <= 1e-12 * (1 + std::abs(e[i])) + (dtype == DType::f64 ? 0.0 : 1e-6 * std::abs(e[i])),
                        "op " << static_cast<int>(op) << " output " << i);
        if (op == Reduction::max || op == Reduction::argmax)
          CHECK(emulated_index.to_vector<std::int64_t>() == expected_index.to_vector<std::int64_t>());
      }
    }
  }
}

TEST_CASE("the naive, tiled and register-blocked CUDA GEMM kernels in the emulator match the CPU exactly") {
  for (const emu::Options& schedule : {emu::Options{emu::Schedule::forward}, emu::Options{emu::Schedule::shuffle, 5}}) {
    emu::OptionsScope scope(schedule);
    // {130, 9, 131}: more than one 128 x 128 tile of the register-blocked kernel, ragged on both edges.
    for (auto [m, k, n] : {std::array<std::int64_t, 3>{17, 33, 19}, {1, 40, 3}, {32, 16, 16}, {130, 9, 131}}) {
      for (bool trans_a : {false, true})
        for (bool trans_b : {false, true})
          for (DType dtype : {DType::f32, DType::bf16}) {
            const Tensor a = randint(-4, 5, {m * k}, {.dtype = DType::i64}).to(DType::f64).to(dtype);
            const Tensor b = randint(-4, 5, {k * n}, {.dtype = DType::i64}).to(DType::f64).to(dtype);
            const Tensor c0 = randint(-4, 5, {m * n}, {.dtype = DType::i64}).to(DType::f64).to(dtype);
            Tensor expected = c0.clone();
            cpu::gemm(GemmImpl::blocked, dtype, trans_a, trans_b, m, n, k, 2.0, a.data_ptr(), b.data_ptr(), -1.0,
                      expected.data_ptr());
            for (GemmImpl impl : {GemmImpl::naive, GemmImpl::tiled, GemmImpl::register_blocked}) {
              if (m > 128 && impl != GemmImpl::register_blocked) continue;  // the big shape is for its 128-wide tiles
              Tensor emulated = c0.clone();
              cuda_emulated::gemm(impl, dtype, trans_a, trans_b, m, n, k, 2.0, a.data_ptr(), b.data_ptr(), -1.0,
                                  emulated.data_ptr());
              CHECK_MESSAGE(emulated.to_vector<double>() == expected.to_vector<double>(),
                            gemm_impl_name(impl) << " " << m << "x" << k << "x" << n << " trans " << trans_a << trans_b);
            }
          }
    }
  }
}
