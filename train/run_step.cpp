// train/run_step.h: forward, loss, and in training the backward, then every result copied to the CPU.
#include "train/run_step.h"

#include "nn/autograd.h"
#include "nn/functional.h"
#include "train/step.h"

namespace frugal::train {

namespace F = frugal::functional;

namespace {
Tensor to_cpu(const Tensor& t) { return autograd::detach(t).to(Device::cpu()); }
}  // namespace

nn::StateDict run_step(nn::Module& model, const Tensor& x, const Tensor& y, StepMode mode, DType dtype, Device device) {
  FRUGAL_CHECK_VALUE(y.dtype() == DType::i64 && y.dim() == 1 && x.dim() >= 1 && y.size(0) == x.size(0),
                     "run_step: labels must be i64 [N] with N the batch of x ", shape_str(x.shape()), ", got ",
                     dtype_name(y.dtype()), " ", shape_str(y.shape()));
  const bool training = mode == StepMode::train;
  model.train(training);
  const Tensor input = x.to(device).to(dtype), labels = y.to(device);
  nn::StateDict results;
  if (!training) {
    autograd::NoGradGuard no_grad;
    const Tensor logits = model(input);
    results.emplace_back("logits", to_cpu(logits));
    results.emplace_back("loss", to_cpu(F::cross_entropy(logits, labels)));
    return results;
  }
  model.zero_grad();
  const StepHooks hooks{.next_batch = [&] { return data::Batch{input, labels, {}}; }};
  const MicroBatch step = micro_batch({.model = model}, {}, hooks, 0, true, input.size(0));
  results.emplace_back("logits", to_cpu(step.logits));
  results.emplace_back("loss", to_cpu(step.loss));
  for (const auto& [name, parameter] : model.named_parameters()) {
    const Tensor grad = autograd::grad(parameter);
    // A parameter the forward never reached has no gradient; PyTorch leaves it None. Zeros say the same.
    results.emplace_back("grad." + name, grad.defined() ? to_cpu(grad) : zeros(parameter.shape(), {.dtype = parameter.dtype()}));
  }
  for (const auto& [name, buffer] : model.named_buffers()) results.emplace_back("state." + name, to_cpu(buffer));
  return results;
}

}  // namespace frugal::train
