// Automatic mixed precision, as torch.autocast: inside an AutocastGuard, the ops that gain most from
// low precision and lose least (conv2d, linear, matmul) cast their floating inputs to f16 or bf16
// and run there (the kernels accumulate in f32), so their outputs, and the activations saved for
// backward, take half the bytes; the ops that need range or precision (softmax, log-softmax,
// cross-entropy, mse_loss) cast low-precision inputs back to f32. Everything else runs in whatever
// dtype it is given (batch norm takes f16 input with f32 parameters). Casts are recorded, so the
// gradient of an f32 parameter arrives in f32.
// Not here: loss scaling against f16 gradient underflow (nn/grad_scaler.h).
#pragma once

#include <optional>

#include "core/tensor.h"

namespace frugal::nn {

class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = DType::f16, bool enabled = true);  // f16 or bf16
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

// The low-precision dtype of the innermost active AutocastGuard on this thread, if any.
std::optional<DType> autocast_dtype();

}  // namespace frugal::nn
