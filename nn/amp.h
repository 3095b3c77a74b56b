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
  // f16 or bf16. enabled = false turns autocast off inside the guard, an enclosing one included
  // (torch.autocast(enabled=False): the way to run one region in f32).
  explicit AutocastGuard(DType dtype = DType::f16, bool enabled = true);
  // Sets the state autocast_dtype() reported earlier: a dtype, or off (checkpoint's recompute).
  explicit AutocastGuard(std::optional<DType> state);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

// The low-precision dtype of the innermost active AutocastGuard on this thread, if any.
std::optional<DType> autocast_dtype();

}  // namespace frugal::nn
