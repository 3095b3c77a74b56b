// The fused cross-entropy kernels each backend implements under one name: cpu::, cuda:: and
// cuda_emulated::. CrossEntropyArgs carries everything they read (by value into a CUDA kernel).
//   cross_entropy_rows            out: [rows] losses (reduction none) or the 0-dim mean or sum
//   cross_entropy_backward_rows   grad_logits [rows, cols]; grad: element r at grad[r * grad_stride]
//                                 (grad_stride 0 for the one scalar of mean and sum)
// Each returns the first row whose target is neither ignore_index nor in [0, cols), or -1; when it
// is not -1 the outputs are unspecified, and kernels/loss.cpp throws the IndexError.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/loss_ops.h"

namespace frugal {

// Scratch on the logits' device (kernels/loss.cpp takes it from kernels/workspace.h), carved from
// one block of cross_entropy_workspace_bytes(rows).
struct CrossEntropyWorkspace {
  long long* first_bad_row = nullptr;  // CUDA: the error flag the kernels lower with atomicMin
  double* counted = nullptr;           // CUDA: the number of counted rows, the backward's mean denominator
  double* row_losses = nullptr;        // [rows]: each row's loss before the sum or mean (every backend)
};

inline std::size_t cross_entropy_workspace_bytes(std::int64_t rows) { return static_cast<std::size_t>(rows + 2) * 8; }

inline CrossEntropyWorkspace carve_cross_entropy_workspace(void* memory) {
  static_assert(sizeof(long long) == 8 && sizeof(double) == 8, "the workspace is laid out in 8-byte slots");
  auto* slots = static_cast<double*>(memory);
  return {static_cast<long long*>(memory), slots + 1, slots + 2};
}

struct CrossEntropyArgs {
  const void* logits = nullptr;           // [rows, cols], row-major, in the dtype the call names
  const std::int64_t* targets = nullptr;  // row r's class at targets[r * target_stride]
  std::int64_t target_stride = 1;
  std::int64_t rows = 0, cols = 0;
  CrossEntropyOptions options;
  CrossEntropyWorkspace workspace;
};

#define FRUGAL_LOSS_KERNELS                                                                               \
  std::int64_t cross_entropy_rows(DType dtype, const CrossEntropyArgs& args, void* out);                  \
  std::int64_t cross_entropy_backward_rows(DType dtype, const CrossEntropyArgs& args, const void* grad,    \
                                           std::int64_t grad_stride, void* grad_logits);

namespace cpu { FRUGAL_LOSS_KERNELS }
namespace cuda { FRUGAL_LOSS_KERNELS }
namespace cuda_emulated { FRUGAL_LOSS_KERNELS }

#undef FRUGAL_LOSS_KERNELS

}  // namespace frugal
