// nn/amp.h: the autocast state, one per thread (as PyTorch's).
#include "nn/amp.h"

#include "core/error.h"

namespace frugal::nn {

namespace {
thread_local std::optional<DType> t_autocast;
}

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : AutocastGuard(enabled ? std::optional(dtype) : std::nullopt) {
  FRUGAL_CHECK_DTYPE(dtype == DType::f16 || dtype == DType::bf16, "AutocastGuard: the low precision is f16 or bf16, got ",
                     dtype);
}

AutocastGuard::AutocastGuard(std::optional<DType> state) : previous_(t_autocast) {
  FRUGAL_CHECK_DTYPE(!state || *state == DType::f16 || *state == DType::bf16,
                     "AutocastGuard: the low precision is f16 or bf16, got ", *state);
  t_autocast = state;
}

AutocastGuard::~AutocastGuard() { t_autocast = previous_; }

std::optional<DType> autocast_dtype() { return t_autocast; }

}  // namespace frugal::nn
