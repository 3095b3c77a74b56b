// The fused optimizer kernels each backend implements under one name: cpu::, cuda:: and
// cuda_emulated::. A TensorList carries up to kMaxTensorsPerLaunch tensors' raw pointers by value
// (a kernel argument), so one launch updates them all; the dispatcher splits longer lists.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/optimizer_ops.h"

namespace frugal {

// 32 tensors x 7 pointers or sizes x 8 bytes = 1.8 KiB: well inside the 4 KiB every CUDA version
// accepts as kernel arguments.
inline constexpr int kMaxTensorsPerLaunch = 32;

struct TensorList {
  int count = 0;
  void* params[kMaxTensorsPerLaunch] = {};
  const void* grads[kMaxTensorsPerLaunch] = {};
  void* state1[kMaxTensorsPerLaunch] = {};  // SGD: momentum buffer (or null); AdamW: exp_avg (AdamW8bit: its codes)
  void* state2[kMaxTensorsPerLaunch] = {};  // AdamW: exp_avg_sq (AdamW8bit: its codes)
  void* state3[kMaxTensorsPerLaunch] = {};  // AdamW8bit: exp_avg's block scales
  void* state4[kMaxTensorsPerLaunch] = {};  // AdamW8bit: exp_avg_sq's block scales
  std::int64_t sizes[kMaxTensorsPerLaunch] = {};
};

#define FRUGAL_OPTIMIZER_KERNELS                                                    \
  void sgd_step(DType dtype, const TensorList& list, const SgdConfig& config);     \
  void adamw_step(DType dtype, const TensorList& list, const AdamWConfig& config);    \
  void adamw8bit_step(const TensorList& list, const AdamWConfig& config);

namespace cpu { FRUGAL_OPTIMIZER_KERNELS }
namespace cuda { FRUGAL_OPTIMIZER_KERNELS }
namespace cuda_emulated { FRUGAL_OPTIMIZER_KERNELS }

#undef FRUGAL_OPTIMIZER_KERNELS

}  // namespace frugal
