// CUDA fused softmax (kernels/softmax_backends.h), the same names as the CPU kernels. One block per
// row (blocks loop over rows beyond the grid), sized to the row (kernels/cuda/block_reduce.cuh): a
// 10-class row gets one warp, a row of 256 or more eight warps, each thread striding over the row.
// Why a block and not a warp per row: a warp per row would save the reduction's shared-memory step
// and barriers on short rows, but would leave a long row (a 50k-word vocabulary) to 32 threads;
// sizing the block to the row keeps short rows at one warp and long rows at 256 threads.
//   forward:  one pass gathers the row's LogSumExp (kernels/softmax_ops.h) and one block reduction
//             combines it; a second pass writes the outputs. The CPU takes max and sum as two
//             passes; here each pass would cost a block reduction and two barriers.
//   backward: one pass sums g * y (or g), one block reduction, one pass writes dx.
// f16/bf16 compute in float. Built by nvcc and for the CUDA emulator (core/cuda/kernel_support.h).
#include <algorithm>

#include "core/convert.h"
#include "core/cuda/kernel_support.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/softmax_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

namespace {
constexpr int kMaxThreadsPerBlock = 256;    // 8 warps per row: enough loads in flight to hide latency
constexpr std::int64_t kMaxBlocks = 65535;  // more rows than this: blocks loop over them

template <typename T, typename C>
__global__ void softmax_kernel(bool log, const T* x, T* y, std::int64_t rows, std::int64_t cols) {
  FRUGAL_DYNAMIC_SHARED(LogSumExp<C>, per_warp);  // one LogSumExp per warp
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* in = x + r * cols;
    LogSumExp<C> acc;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) acc.add(convert<C>(in[c]));
    const SoftmaxRow<C> row(block_reduce(acc, per_warp));
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) y[r * cols + c] = convert<T>(row.output(log, convert<C>(in[c])));
  }
}

template <typename T, typename C>
__global__ void softmax_backward_kernel(bool log, const T* grad, const T* y, T* dx, std::int64_t rows, std::int64_t cols) {
  FRUGAL_DYNAMIC_SHARED(RowSum<C>, per_warp);  // one RowSum per warp
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t first = r * cols;
    RowSum<C> acc;
    for (std::int64_t c = first + threadIdx.x; c < first + cols; c += blockDim.x)
      acc.add(softmax_backward_term(log, convert<C>(grad[c]), convert<C>(y[c])));
    const C sum = block_reduce(acc, per_warp).value;
    for (std::int64_t c = first + threadIdx.x; c < first + cols; c += blockDim.x)
      dx[c] = convert<T>(softmax_backward_output(log, convert<C>(grad[c]), convert<C>(y[c]), sum));
  }
}

int blocks_for(std::int64_t rows) { return static_cast<int>(std::min(rows, kMaxBlocks)); }
}  // namespace

void softmax_rows(DType dtype, bool log, const void* x, void* y, std::int64_t rows, std::int64_t cols) {
  const int threads = threads_for_row(cols, kMaxThreadsPerBlock);
  visit_floating(dtype, "softmax", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(blocks_for(rows), threads, threads / kWarpLanes * sizeof(LogSumExp<C>), nullptr, softmax_kernel<T, C>)(
        log, static_cast<const T*>(x), static_cast<T*>(y), rows, cols);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void softmax_backward_rows(DType dtype, bool log, const void* grad, const void* y, void* dx, std::int64_t rows,
                           std::int64_t cols) {
  const int threads = threads_for_row(cols, kMaxThreadsPerBlock);
  visit_floating(dtype, "softmax_backward", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(blocks_for(rows), threads, threads / kWarpLanes * sizeof(RowSum<C>), nullptr,
                  softmax_backward_kernel<T, C>)(log, static_cast<const T*>(grad), static_cast<const T*>(y),
                                                 static_cast<T*>(dx), rows, cols);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
