// nn/gradcheck.h: analytic gradients against central differences, element by element.
#include "nn/gradcheck.h"

#include <cmath>

#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "nn/autograd.h"

namespace frugal::autograd {

namespace {
// sum(f(inputs) * r) as a double, with nothing recorded.
double projected(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const Tensor& r) {
  NoGradGuard no_grad;
  return sum(mul(fn(inputs), r)).item<double>();
}
}  // namespace

void gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    FRUGAL_CHECK_VALUE(!t.defined() || (t.dtype() == DType::f64 && t.device().is_cpu() && t.is_contiguous()),
                       "gradcheck: input ", i, " must be a contiguous f64 CPU tensor (finite differences need the precision)");
  }
  std::vector<Tensor> analytic(inputs.size());
  Tensor r;
  {
    const Tensor y = fn(inputs);
    FRUGAL_CHECK_VALUE(requires_grad(y), "gradcheck: the output does not require grad; no input that requires grad reaches it");
    r = uniform(y.shape(), -1.0, 1.0, {.dtype = DType::f64});
    for (const Tensor& t : inputs)
      if (requires_grad(t)) set_grad(t, Tensor());
    backward(y, r);
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (requires_grad(inputs[i])) analytic[i] = grad(inputs[i]);
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!requires_grad(inputs[i])) continue;
    Tensor t = inputs[i];
    const std::vector<double> expected =
        analytic[i].defined() ? analytic[i].to_vector<double>() : std::vector<double>(static_cast<std::size_t>(t.numel()), 0.0);
    double* data = t.data<double>();
    for (std::int64_t e = 0; e < t.numel(); ++e) {
      const double saved = data[e];
      data[e] = saved + options.step;
      const double up = projected(fn, inputs, r);
      data[e] = saved - options.step;
      const double down = projected(fn, inputs, r);
      data[e] = saved;
      const double numeric = (up - down) / (2 * options.step), exact = expected[static_cast<std::size_t>(e)];
      FRUGAL_CHECK_VALUE(std::abs(numeric - exact) <= options.atol + options.rtol * std::abs(exact), "gradcheck: input ", i,
                         " element ", e, ": analytic gradient ", exact, ", numeric ", numeric);
    }
  }
}

}  // namespace frugal::autograd
