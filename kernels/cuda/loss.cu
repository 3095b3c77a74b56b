// CUDA fused cross-entropy (kernels/loss_backends.h), the same names as the CPU kernels. One block
// per row, as the softmax kernels (kernels/cuda/softmax.cu), around the per-row arithmetic of
// kernels/loss_ops.h:
//   forward:  one pass gathers the row's LogSumExp and logit sum, one block reduction, and thread 0
//             writes the row's loss; for mean and sum a second, one-block kernel adds the rows'
//             losses and counts the counted rows, so the mean's denominator never visits the host.
//   backward: (for mean, the same one-block kernel counts the rows first, into the workspace) one
//             pass gathers the LogSumExp, one block reduction, one pass writes the gradient.
// A kernel cannot throw, so a bad target lowers a flag in device memory (the first bad row, by
// atomicMin) that the launcher reads back after the kernels; see first_bad_row for its cost.
// Built by nvcc and for the CUDA emulator (core/cuda/kernel_support.h).
#include <algorithm>

#include "core/convert.h"
#include "core/cuda/kernel_support.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/loss_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

namespace {
constexpr int kMaxThreadsPerBlock = 256;    // 8 warps per row: enough loads in flight to hide latency
constexpr std::int64_t kMaxBlocks = 65535;  // more rows than this: blocks loop over them
constexpr int kTotalThreads = 256;          // the one block that adds up the rows: 8 warps

// The flag starts as `rows`, an index no row has. Set by a one-thread kernel rather than a copy from
// the host, which would make the host wait for the work queued before it.
__global__ void clear_bad_row_kernel(CrossEntropyArgs a) { *a.workspace.first_bad_row = a.rows; }

__device__ void flag_bad_row(const CrossEntropyArgs& a, std::int64_t row) {
  atomicMin(a.workspace.first_bad_row, static_cast<long long>(row));
}

// Every thread of a block reads the row's target itself, so `kind` is the same across the block and
// the branches on it never split a block at a barrier.
template <typename T, typename C>
__global__ void cross_entropy_kernel(CrossEntropyArgs a, T* out) {
  FRUGAL_DYNAMIC_SHARED(CrossEntropyRow<C>, per_warp);  // one CrossEntropyRow per warp
  const T* logits = static_cast<const T*>(a.logits);
  const C smoothing = static_cast<C>(a.options.label_smoothing);
  for (std::int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const std::int64_t target = a.targets[r * a.target_stride];
    const TargetKind kind = classify_target(target, a.cols, a.options.ignore_index);
    C loss = C(0);
    if (kind == TargetKind::counted) {
      const T* row = logits + r * a.cols;
      CrossEntropyRow<C> acc;
      for (std::int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) acc.add(convert<C>(row[c]));
      loss = cross_entropy_loss(block_reduce(acc, per_warp), convert<C>(row[target]), a.cols, smoothing);
    }
    if (threadIdx.x != 0) continue;
    if (kind == TargetKind::out_of_range) flag_bad_row(a, r);
    if (a.options.reduction == LossReduction::none) out[r] = convert<T>(loss);
    else a.workspace.row_losses[r] = static_cast<double>(loss);
  }
}

// One block over every row: the counted rows' losses added up into the 0-dim `out` (forward), or,
// with `out` null, only their count into the workspace (the backward's mean).
template <typename T>
__global__ void total_kernel(CrossEntropyArgs a, T* out) {
  FRUGAL_DYNAMIC_SHARED(LossTotal, per_warp);  // one LossTotal per warp
  LossTotal acc;
  for (std::int64_t r = threadIdx.x; r < a.rows; r += blockDim.x)
    if (classify_target(a.targets[r * a.target_stride], a.cols, a.options.ignore_index) == TargetKind::counted)
      acc.add(out ? a.workspace.row_losses[r] : 0.0);
  const LossTotal total = block_reduce(acc, per_warp);
  if (threadIdx.x != 0) return;
  if (out) out[0] = convert<T>(total.value(a.options.reduction));
  else *a.workspace.counted = total.count;
}

template <typename T, typename C>
__global__ void cross_entropy_backward_kernel(CrossEntropyArgs a, const T* grad, std::int64_t grad_stride, T* grad_logits) {
  FRUGAL_DYNAMIC_SHARED(LogSumExp<C>, per_warp);  // one LogSumExp per warp
  const T* logits = static_cast<const T*>(a.logits);
  const C smoothing = static_cast<C>(a.options.label_smoothing);
  const double counted = a.options.reduction == LossReduction::mean ? *a.workspace.counted : 1.0;
  for (std::int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const std::int64_t target = a.targets[r * a.target_stride];
    const TargetKind kind = classify_target(target, a.cols, a.options.ignore_index);
    const T* row = logits + r * a.cols;
    T* out = grad_logits + r * a.cols;
    if (kind != TargetKind::counted) {
      for (std::int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) out[c] = convert<T>(0.0);
      if (kind == TargetKind::out_of_range && threadIdx.x == 0) flag_bad_row(a, r);
      continue;
    }
    LogSumExp<C> acc;
    for (std::int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) acc.add(convert<C>(row[c]));
    const SoftmaxRow<C> p(block_reduce(acc, per_warp));
    const C scale = row_scale(convert<C>(grad[r * grad_stride]), a.options.reduction, counted);
    for (std::int64_t c = threadIdx.x; c < a.cols; c += blockDim.x)
      out[c] = convert<T>(cross_entropy_grad(p, convert<C>(row[c]), c == target, a.cols, smoothing, scale));
  }
}

int blocks_for(std::int64_t rows) { return static_cast<int>(std::min(rows, kMaxBlocks)); }

void clear_bad_row(const CrossEntropyArgs& a) { FRUGAL_LAUNCH(1, 1, 0, nullptr, clear_bad_row_kernel)(a); }

// Reading the flag back waits for the kernels to finish: one synchronisation per call, the price of
// an IndexError that names the row. PyTorch checks targets with a device-side assert instead, which
// costs nothing while targets are valid but leaves the CUDA context unusable when one is not.
std::int64_t first_bad_row(const CrossEntropyArgs& a) {
  long long row = 0;
  FRUGAL_CUDA_CHECK(cudaMemcpy(&row, a.workspace.first_bad_row, sizeof row, cudaMemcpyDeviceToHost));
  return row < a.rows ? static_cast<std::int64_t>(row) : -1;
}

template <typename T>
void launch_total(const CrossEntropyArgs& a, T* out) {
  FRUGAL_LAUNCH(1, kTotalThreads, kTotalThreads / kWarpLanes * sizeof(LossTotal), nullptr, total_kernel<T>)(a, out);
}
}  // namespace

std::int64_t cross_entropy_rows(DType dtype, const CrossEntropyArgs& a, void* out) {
  clear_bad_row(a);
  const int threads = threads_for_row(a.cols, kMaxThreadsPerBlock);
  visit_floating(dtype, "cross_entropy", [&]<typename T, typename C>() {
    if (a.rows > 0)
      FRUGAL_LAUNCH(blocks_for(a.rows), threads, threads / kWarpLanes * sizeof(CrossEntropyRow<C>), nullptr,
                    cross_entropy_kernel<T, C>)(a, static_cast<T*>(out));
    if (a.options.reduction != LossReduction::none) launch_total(a, static_cast<T*>(out));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
  return first_bad_row(a);
}

std::int64_t cross_entropy_backward_rows(DType dtype, const CrossEntropyArgs& a, const void* grad, std::int64_t grad_stride,
                                         void* grad_logits) {
  if (a.rows == 0) return -1;
  clear_bad_row(a);
  const int threads = threads_for_row(a.cols, kMaxThreadsPerBlock);
  visit_floating(dtype, "cross_entropy_backward", [&]<typename T, typename C>() {
    if (a.options.reduction == LossReduction::mean) launch_total<T>(a, nullptr);
    FRUGAL_LAUNCH(blocks_for(a.rows), threads, threads / kWarpLanes * sizeof(LogSumExp<C>), nullptr,
                  cross_entropy_backward_kernel<T, C>)(a, static_cast<const T*>(grad), grad_stride, static_cast<T*>(grad_logits));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
  return first_bad_row(a);
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
