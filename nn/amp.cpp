// nn/amp.h: the autocast state, one per thread (as PyTorch's).
#include "nn/amp.h"

#include "core/error.h"

namespace frugal::nn {

namespace {
thread_local std::optional<DType> t_autocast;
}

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : previous_(t_autocast) {
  FRUGAL_CHECK_DTYPE(dtype == DType::f16 || dtype == DType::bf16, "AutocastGuard: the low precision is f16 or bf16, got ",
                     dtype);
  if (enabled) t_autocast = dtype;
}

AutocastGuard::~AutocastGuard() { t_autocast = previous_; }

std::optional<DType> autocast_dtype() { return t_autocast; }

}  // namespace frugal::nn
