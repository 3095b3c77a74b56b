// Checks a differentiable function's backward against central finite differences, in f64 on the
// CPU (as torch.autograd.gradcheck): for a random projection r of the output, the analytic gradient
// of sum(f(x) * r) with respect to every input element must match
// (L(x + h e_i) - L(x - h e_i)) / 2h within atol + rtol * |analytic|.
// Not here: second derivatives (the engine records no graph during backward).
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace frugal::autograd {

struct GradcheckOptions {
  double step = 1e-6;  // h: small against the inputs, large against f64 rounding (1e-16 relative)
  double atol = 1e-5;
  double rtol = 1e-4;
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// `inputs` must be f64 CPU tensors; those that require grad are checked. Throws ValueError naming
// the input, the element and both values at the first mismatch; returns normally otherwise.
void gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace frugal::autograd
