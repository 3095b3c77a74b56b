// kernels/cuda/softmax.cu and kernels/cuda/loss.cu in the CUDA emulator against the CPU kernels,
// under two schedules: rows shorter than a warp and longer than a block (300 > 256 threads), -inf
// entries, strided targets, every reduction with and without smoothing and ignored rows, and a bad
// target reported through the device flag. The CUDA kernels gather a row in one pass (LogSumExp)
// and add in a tree, the CPU ones in order, so results agree to rounding, not bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "emu/emulator.h"
#include "core/random.h"
#include "kernels/loss_backends.h"
#include "kernels/softmax_backends.h"

using namespace frugal;

namespace {
const std::vector<emu::Options> kSchedules{emu::Options{emu::Schedule::forward}, emu::Options{emu::Schedule::shuffle, 7}};

struct Shape2 {
  std::int64_t rows, cols;
};
const std::vector<Shape2> kShapes{{5, 7}, {3, 300}};  // one warp per row; a row longer than a block

// |emulated - cpu| <= rtol * (1 + |cpu|); infinities and NaN only against themselves.
void check_close(const Tensor& emulated, const Tensor& cpu, const std::string& what) {
  const double rtol = emulated.dtype() == DType::f64 ? 1e-13 : emulated.dtype() == DType::f32 ? 2e-6 : 1e-2;
  const auto e = emulated.to_vector<double>(), c = cpu.to_vector<double>();
  for (std::size_t i = 0; i < c.size(); ++i)
    REQUIRE_MESSAGE((e[i] == c[i] || std::abs(e[i] - c[i]) <= rtol * (1 + std::abs(c[i])) || (std::isnan(e[i]) && std::isnan(c[i]))),
                    what, " element ", i, ": emulated ", e[i], ", cpu ", c[i]);
}

// Logits with a -inf in the first column of row 0 (a masked class, and the first value a row sees).
Tensor logits_for(Shape2 s, DType dtype, Generator& g) {
  Tensor x = uniform({s.rows, s.cols}, -6.0, 6.0, {.dtype = DType::f64}, &g);
  x.data<double>()[0] = -std::numeric_limits<double>::infinity();
  return x.to(dtype);
}

// Targets for `rows` rows at stride 2: ignored rows every third, the others random classes.
Tensor targets_for(std::int64_t rows, std::int64_t cols, Generator& g) {
  Tensor t = randint(0, cols, {2 * rows}, {.dtype = DType::i64}, &g);
  for (std::int64_t r = 1; r < rows; r += 3) t.data<std::int64_t>()[2 * r] = -100;
  return t.slice(0, 0, 2 * rows, 2);
}

// The workspace kernels/loss.cpp would take from the allocator; emulated device memory is host memory.
struct Workspace {
  std::vector<double> slots;
  explicit Workspace(std::int64_t rows) : slots(cross_entropy_workspace_bytes(rows) / sizeof(double)) {}
};

CrossEntropyArgs args_for(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options, Workspace& w) {
  return {.logits = logits.data_ptr(),
          .targets = targets.data<std::int64_t>(),
          .target_stride = targets.stride(0),
          .rows = logits.size(0),
          .cols = logits.size(1),
          .options = options,
          .workspace = carve_cross_entropy_workspace(w.slots.data())};
}
}  // namespace

TEST_CASE("the CUDA softmax kernels in the emulator match the CPU") {
  Generator g(17);
  for (const emu::Options& schedule : kSchedules) {
    emu::OptionsScope scope(schedule);
    for (DType dtype : {DType::f32, DType::f64, DType::f16})
      for (Shape2 s : kShapes)
        for (bool log : {false, true}) {
          CAPTURE(dtype);
          CAPTURE(s.cols);
          CAPTURE(log);
          const Tensor x = logits_for(s, dtype, g), grad = uniform({s.rows, s.cols}, -1.0, 1.0, {.dtype = dtype}, &g);
          Tensor y = empty({s.rows, s.cols}, {.dtype = dtype}), y_emulated = empty({s.rows, s.cols}, {.dtype = dtype});
          cpu::softmax_rows(dtype, log, x.data_ptr(), y.data_ptr(), s.rows, s.cols);
          cuda_emulated::softmax_rows(dtype, log, x.data_ptr(), y_emulated.data_ptr(), s.rows, s.cols);
          check_close(y_emulated, y, "softmax");
          Tensor dx = empty({s.rows, s.cols}, {.dtype = dtype}), dx_emulated = empty({s.rows, s.cols}, {.dtype = dtype});
          cpu::softmax_backward_rows(dtype, log, grad.data_ptr(), y.data_ptr(), dx.data_ptr(), s.rows, s.cols);
          cuda_emulated::softmax_backward_rows(dtype, log, grad.data_ptr(), y.data_ptr(), dx_emulated.data_ptr(), s.rows, s.cols);
          check_close(dx_emulated, dx, "softmax_backward");
        }
  }
}

TEST_CASE("the CUDA cross-entropy kernels in the emulator match the CPU") {
  Generator g(19);
  for (const emu::Options& schedule : kSchedules) {
    emu::OptionsScope scope(schedule);
    for (DType dtype : {DType::f32, DType::f64, DType::bf16})
      for (Shape2 s : kShapes)
        for (LossReduction reduction : {LossReduction::none, LossReduction::mean, LossReduction::sum})
          for (double eps : {0.0, 0.3}) {
            CAPTURE(dtype);
            CAPTURE(s.cols);
            CAPTURE(static_cast<int>(reduction));
            CAPTURE(eps);
            const Tensor x = uniform({s.rows, s.cols}, -6.0, 6.0, {.dtype = dtype}, &g);
            const Tensor targets = targets_for(s.rows, s.cols, g);
            const CrossEntropyOptions options{.reduction = reduction, .label_smoothing = eps};
            const Shape loss_shape = reduction == LossReduction::none ? Shape{s.rows} : Shape{};
            Workspace w_cpu(s.rows), w_emulated(s.rows);
            Tensor loss = empty(loss_shape, {.dtype = dtype}), loss_emulated = empty(loss_shape, {.dtype = dtype});
            CHECK(cpu::cross_entropy_rows(dtype, args_for(x, targets, options, w_cpu), loss.data_ptr()) == -1);
            CHECK(cuda_emulated::cross_entropy_rows(dtype, args_for(x, targets, options, w_emulated), loss_emulated.data_ptr()) == -1);
            check_close(loss_emulated, loss, "cross_entropy");
            // The upstream gradient: one per row (stride 1) for none, the one scalar (stride 0) otherwise.
            const Tensor grad = uniform(loss_shape, 0.5, 2.0, {.dtype = dtype}, &g);
            const std::int64_t grad_stride = reduction == LossReduction::none ? 1 : 0;
            Tensor dx = empty({s.rows, s.cols}, {.dtype = dtype}), dx_emulated = empty({s.rows, s.cols}, {.dtype = dtype});
            CHECK(cpu::cross_entropy_backward_rows(dtype, args_for(x, targets, options, w_cpu), grad.data_ptr(), grad_stride,
                                                   dx.data_ptr()) == -1);
            CHECK(cuda_emulated::cross_entropy_backward_rows(dtype, args_for(x, targets, options, w_emulated), grad.data_ptr(),
                                                             grad_stride, dx_emulated.data_ptr()) == -1);
            check_close(dx_emulated, dx, "cross_entropy_backward");
          }
  }
}

TEST_CASE("a bad target reaches the host through the CUDA kernels' flag: the first bad row") {
  for (const emu::Options& schedule : {emu::Options{emu::Schedule::forward}, emu::Options{emu::Schedule::reverse}}) {
    emu::OptionsScope scope(schedule);
    const Tensor x = zeros({6, 40});
    const Tensor targets = from_vector<std::int64_t>({0, 39, 40, -100, -1, 3});  // rows 2 and 4 are bad
    Workspace w(6);
    for (LossReduction reduction : {LossReduction::none, LossReduction::mean}) {
      const CrossEntropyOptions options{.reduction = reduction};
      Tensor loss = empty(reduction == LossReduction::none ? Shape{6} : Shape{}), dx = empty({6, 40});
      CHECK(cpu::cross_entropy_rows(DType::f32, args_for(x, targets, options, w), loss.data_ptr()) == 2);
      CHECK(cuda_emulated::cross_entropy_rows(DType::f32, args_for(x, targets, options, w), loss.data_ptr()) == 2);
      const Tensor grad = ones(reduction == LossReduction::none ? Shape{6} : Shape{});
      const std::int64_t stride = reduction == LossReduction::none ? 1 : 0;
      CHECK(cuda_emulated::cross_entropy_backward_rows(DType::f32, args_for(x, targets, options, w), grad.data_ptr(), stride,
                                                       dx.data_ptr()) == 2);
    }
    // The flag is cleared at every call: valid targets after a bad call report nothing.
    Tensor loss = empty({});
    CHECK(cuda_emulated::cross_entropy_rows(DType::f32, args_for(x, from_vector<std::int64_t>({0, 1, 2, 3, 4, 5}), {}, w),
                                            loss.data_ptr()) == -1);
  }
}
