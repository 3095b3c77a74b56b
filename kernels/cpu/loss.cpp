// CPU fused cross-entropy (kernels/loss_backends.h): one row per OpenMP iteration, one pass over the
// row for its LogSumExp and logit sum (kernels/loss_ops.h), then the loss, or a second pass writing
// the row's gradient. A bad target cannot throw out of the parallel loop: the loop keeps the first
// bad row (an OpenMP min reduction) and returns it, as the CUDA kernels do through their flag.
// Not here: the checks and the IndexError (kernels/loss.cpp).
#include <algorithm>

#include "core/convert.h"
#include "kernels/loss_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

namespace {

// The counted rows' total: their losses from `row_losses`, or (null) only how many there are.
LossTotal total_of(const CrossEntropyArgs& a, const double* row_losses) {
  LossTotal total;
  for (std::int64_t r = 0; r < a.rows; ++r)
    if (classify_target(a.targets[r * a.target_stride], a.cols, a.options.ignore_index) == TargetKind::counted)
      total.add(row_losses ? row_losses[r] : 0.0);
  return total;
}

}  // namespace

std::int64_t cross_entropy_rows(DType dtype, const CrossEntropyArgs& a, void* out) {
  return visit_floating(dtype, "cross_entropy", [&]<typename T, typename C>() {
    std::int64_t first_bad = a.rows;  // no row has this index
    const T* logits = static_cast<const T*>(a.logits);
    T* result = static_cast<T*>(out);
    const C smoothing = static_cast<C>(a.options.label_smoothing);
#pragma omp parallel for schedule(static) reduction(min : first_bad)
    for (std::int64_t r = 0; r < a.rows; ++r) {
      const std::int64_t target = a.targets[r * a.target_stride];
      const TargetKind kind = classify_target(target, a.cols, a.options.ignore_index);
      if (kind == TargetKind::out_of_range) first_bad = std::min(first_bad, r);
      C loss = C(0);
      if (kind == TargetKind::counted) {
        const T* row = logits + r * a.cols;
        CrossEntropyRow<C> acc;
        for (std::int64_t c = 0; c < a.cols; ++c) acc.add(convert<C>(row[c]));
        loss = cross_entropy_loss(acc, convert<C>(row[target]), a.cols, smoothing);
      }
      if (a.options.reduction == LossReduction::none) result[r] = convert<T>(loss);
      else a.workspace.row_losses[r] = static_cast<double>(loss);
    }
    if (a.options.reduction != LossReduction::none)
      result[0] = convert<T>(total_of(a, a.workspace.row_losses).value(a.options.reduction));
    return first_bad < a.rows ? first_bad : std::int64_t{-1};
  });
}

std::int64_t cross_entropy_backward_rows(DType dtype, const CrossEntropyArgs& a, const void* grad, std::int64_t grad_stride,
                                         void* grad_logits) {
  const double counted = a.options.reduction == LossReduction::mean ? total_of(a, nullptr).count : 1.0;
  return visit_floating(dtype, "cross_entropy_backward", [&]<typename T, typename C>() {
    std::int64_t first_bad = a.rows;
    const T* logits = static_cast<const T*>(a.logits);
    const T* g = static_cast<const T*>(grad);
    T* result = static_cast<T*>(grad_logits);
    const C smoothing = static_cast<C>(a.options.label_smoothing);
#pragma omp parallel for schedule(static) reduction(min : first_bad)
    for (std::int64_t r = 0; r < a.rows; ++r) {
      const std::int64_t target = a.targets[r * a.target_stride];
      const TargetKind kind = classify_target(target, a.cols, a.options.ignore_index);
      const T* row = logits + r * a.cols;
      T* out = result + r * a.cols;
      if (kind != TargetKind::counted) {
        if (kind == TargetKind::out_of_range) first_bad = std::min(first_bad, r);
        std::fill(out, out + a.cols, convert<T>(0.0));
        continue;
      }
      LogSumExp<C> acc;
      for (std::int64_t c = 0; c < a.cols; ++c) acc.add(convert<C>(row[c]));
      const SoftmaxRow<C> p(acc);
      const C scale = row_scale(convert<C>(g[r * grad_stride]), a.options.reduction, counted);
      for (std::int64_t c = 0; c < a.cols; ++c)
        out[c] = convert<T>(cross_entropy_grad(p, convert<C>(row[c]), c == target, a.cols, smoothing, scale));
    }
    return first_bad < a.rows ? first_bad : std::int64_t{-1};
  });
}

}  // namespace frugal::cpu
