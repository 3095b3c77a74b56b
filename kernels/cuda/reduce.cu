// CUDA reductions (kernels/reduce_backends.h), the same name as the CPU one. One block per output
// element: each thread folds a strided share of the inputs into an accumulator of
// kernels/reduce_ops.h, then the block combines them with block_reduce (kernels/cuda/block_reduce.cuh):
// within each warp by shuffles, then across warps through shared memory.
// Built by nvcc for the GPU and by the host compiler for the emulator (core/cuda/kernel_support.h).
#include <algorithm>
#include <type_traits>

#include "core/convert.h"
#include "core/cuda/kernel_support.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/visit_floating.h"
#include "kernels/reduce_backends.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

namespace {
constexpr int kThreadsPerBlock = 256;  // 8 warps per output: enough to hide memory latency
constexpr int kWarps = kThreadsPerBlock / 32;
constexpr std::int64_t kMaxBlocks = 65535;  // more outputs than this: blocks loop over them

template <typename Acc>
__device__ void add_element(Acc& acc, double v, std::int64_t r) {
  if constexpr (std::is_same_v<Acc, MaxAccumulator>) acc.add(v, r);
  else acc.add(v);
}

template <typename T, typename Acc>
__global__ void reduce_kernel(Reduction op, const T* x, StridedLayout x_layout, std::int64_t outer, std::int64_t inner,
                              std::int64_t correction, T* out, std::int64_t* indices) {
  FRUGAL_DYNAMIC_SHARED(Acc, per_warp);  // one accumulator per warp
  for (std::int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    Acc acc;
    for (std::int64_t r = threadIdx.x; r < inner; r += blockDim.x)
      add_element(acc, convert<double>(x[strided_offset(x_layout, o * inner + r)]), r);
    acc = block_reduce(acc, per_warp);
    if (threadIdx.x == 0) {
      double value = 0.0;
      if constexpr (std::is_same_v<Acc, SumAccumulator>) value = op == Reduction::mean ? acc.sum / static_cast<double>(inner) : acc.sum;
      if constexpr (std::is_same_v<Acc, Welford>) value = acc.variance(correction);
      if constexpr (std::is_same_v<Acc, MaxAccumulator>) {
        value = acc.value;
        if (indices) indices[o] = acc.index;
      }
      out[o] = convert<T>(value);
    }
  }
}

template <typename T, typename Acc>
void launch(Reduction op, const void* x, const StridedLayout& x_layout, std::int64_t outer, std::int64_t inner,
            std::int64_t correction, void* out, std::int64_t* indices) {
  const int blocks = static_cast<int>(std::min(outer, kMaxBlocks));
  FRUGAL_LAUNCH(blocks, kThreadsPerBlock, kWarps * sizeof(Acc), nullptr, reduce_kernel<T, Acc>)(
      op, static_cast<const T*>(x), x_layout, outer, inner, correction, static_cast<T*>(out), indices);
}

template <typename T>
void reduce_as(Reduction op, const void* x, const StridedLayout& x_layout, std::int64_t outer, std::int64_t inner,
               std::int64_t correction, void* out, std::int64_t* indices) {
  switch (op) {
    case Reduction::sum:
    case Reduction::mean: return launch<T, SumAccumulator>(op, x, x_layout, outer, inner, correction, out, indices);
    case Reduction::var: return launch<T, Welford>(op, x, x_layout, outer, inner, correction, out, indices);
    case Reduction::max:
    case Reduction::argmax: return launch<T, MaxAccumulator>(op, x, x_layout, outer, inner, correction, out, indices);
  }
}
}  // namespace

void reduce(Reduction op, DType dtype, const void* x, const StridedLayout& x_layout, std::int64_t outer,
            std::int64_t inner, std::int64_t correction, void* out, std::int64_t* indices) {
  visit_floating(dtype, "reductions", [&]<typename T, typename C>() {
    reduce_as<T>(op, x, x_layout, outer, inner, correction, out, indices);  // accumulators are double, whatever C
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
