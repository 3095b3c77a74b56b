// Optimizers over plain parameter tensors, as torch.optim: SGD (momentum, dampening, nesterov,
// weight decay) and AdamW (decoupled weight decay, bias correction); AdamW8bit, AdamW with its
// moments kept in 8 bits per element (bitsandbytes' block-wise idea); and Adafactor, with factored
// second moments. Parameters are leaf tensors (a Module hands over module.parameters()); step() reads
// each one's accumulated gradient (autograd::grad) and updates it in place: SGD, AdamW and AdamW8bit
// through the fused kernels of kernels/optimizer.h, many tensors per launch; Adafactor through
// ordinary tensor ops.
//
// Parameter groups: each has its own lr (what LR schedules set) and weight decay (so biases and
// norm weights can go undecayed); the other hyper-parameters (momentum, betas, eps) belong to the
// optimizer. State (momentum buffers, moments, step counts) is created at a parameter's first step,
// on its device and in its dtype, under MemoryTag::optimizer so memory reports show it. Parameters
// without a gradient are skipped, as PyTorch skips them.
// Not here: the update arithmetic (kernels/optimizer_ops.h), LR schedules (nn/lr_schedule.h), loss
// scaling for mixed precision (nn/grad_scaler.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/optimizer_ops.h"
#include "nn/state_dict.h"

namespace frugal::nn {

// Groups are given in full; the constructors taking a plain parameter list make one group from
// their lr and weight_decay arguments.
struct ParamGroup {
  std::vector<Tensor> params;
  double lr = 0.0;
  double weight_decay = 0.0;
  // The lr before any schedule changed it: set by the first LRScheduler made on this group, and
  // what every later schedule counts from (PyTorch's 'initial_lr').
  std::optional<double> initial_lr = std::nullopt;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;  // the state tensors would be shared by both copies
  Optimizer& operator=(const Optimizer&) = delete;

  // step, zero_grad, the state dict and state_bytes are virtual for the optimizers that step through
  // an inner one: ZeRO's sharded optimizer (dist/ddp.h), which updates its slice of every parameter
  // and then gathers the parameters from the other ranks, and the offloaded optimizer
  // (nn/optimizer_offload.h), which updates host copies.

  // One update of every parameter that has a gradient, with no autograd recording.
  virtual void step();
  // The same update of parameter `index` alone (numbered over all groups in order), if it has a
  // gradient: the arithmetic step() does for it, one kernel call of one tensor. What
  // OptimizerInBackward (nn/optimizer_in_backward.h) runs the moment a gradient is complete.
  void step_parameter(std::size_t index);
  std::size_t parameter_count() const { return state_.size(); }
  // Forgets every gradient: set_to_none frees their memory (PyTorch >= 2.0's default); otherwise
  // they are filled with zeros and kept.
  virtual void zero_grad(bool set_to_none = true);
  // GradScaler asks before stepping: given whether this process found an inf or NaN gradient, did
  // any process training with it? Each process alone decides, unless the ranks must step together
  // because each updates a different part of the parameters (ZeRO agrees across ranks).
  virtual bool found_inf_anywhere(bool found_here) { return found_here; }

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }

  // Parameters are numbered over all groups in order. The dict holds, for every parameter that
  // has taken a step, "state.I.NAME" (the optimizer's own tensors, not copies, as PyTorch) and
  // "state.I.step" (0-dim i64); and per group "param_groups.G.lr", "param_groups.G.weight_decay"
  // and, once a schedule set it, "param_groups.G.initial_lr" (0-dim f64). Momentum, betas and eps
  // are the constructor's: make the optimizer as it was made, then load.
  virtual StateDict state_dict() const;
  // Copies a dict made by state_dict() of an optimizer over parameters of the same shapes into
  // this one's state (on each parameter's device and dtype). ValueError for missing or unexpected
  // keys, ShapeError for state of the wrong shape; nothing changes unless everything fits.
  virtual void load_state_dict(const StateDict& dict);
  virtual std::size_t state_bytes() const;  // what the state tensors hold now

 protected:
  // `state_names`: the state tensors kept per parameter, in the order update() receives them.
  Optimizer(std::vector<ParamGroup> groups, std::vector<std::string> state_names, std::string name);

  // One fused update: parameters of one group sharing a device, a dtype and a step count.
  struct Batch {
    std::vector<Tensor> params, grads;
    std::vector<std::vector<Tensor>> state;  // state[k][i]: state tensor k of parameter i
    std::int64_t step = 1;                   // the step these parameters are taking, from 1
  };
  virtual void update(const ParamGroup& group, const Batch& batch) = 0;
  // State tensor k of `param` before its first step: zeros of the parameter's shape, dtype and
  // device, unless a subclass keeps its state in another form (AdamW8bit's codes and scales).
  virtual Tensor initial_state(std::size_t k, const Tensor& param) const;

 private:
  struct ParamState {
    std::vector<Tensor> tensors;  // one per state name; empty until the first step
    std::int64_t step = 0;        // steps this parameter has taken
  };
  void create_state(const Tensor& param, ParamState& state) const;
  void step_selected(const std::function<bool(std::size_t index)>& selected);

  std::vector<ParamGroup> groups_;
  std::vector<std::string> state_names_;
  std::string name_;
  std::vector<ParamState> state_;  // by parameter number over all groups
};

// For the optimizers that step through an inner one (above): the groups' lr, weight decay and
// initial lr that schedules set on `from`, copied into `to`'s groups of the same numbers before it
// steps; and the entries of a state dict that are those settings ("param_groups.*"), which the
// outer optimizer keeps as its own.
void copy_group_settings(const Optimizer& from, Optimizer& to);
StateDict group_entries(const StateDict& dict);

// torch.optim.SGD: g += wd p; buf = g at the first step, then momentum buf + (1 - dampening) g;
// g = nesterov ? g + momentum buf : buf; p -= lr g. nesterov needs momentum > 0 and no dampening.
class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, double momentum = 0.0, double dampening = 0.0, bool nesterov = false);
  SGD(std::vector<Tensor> params, double lr, double momentum = 0.0, double dampening = 0.0, double weight_decay = 0.0,
      bool nesterov = false);

 private:
  void update(const ParamGroup& group, const Batch& batch) override;
  double momentum_, dampening_;
  bool nesterov_;
};

// torch.optim.AdamW: p *= 1 - lr wd (decoupled decay), then Adam with bias correction:
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) m / (sqrt(v / (1 - b2^t)) + eps),
// with t each parameter's own step count.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8);
  explicit AdamW(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
                 double eps = 1e-8, double weight_decay = 1e-2);

 protected:
  // For a subclass that keeps the moments in another form (AdamW8bit), under its own state names.
  AdamW(std::vector<ParamGroup> groups, std::pair<double, double> betas, double eps, std::vector<std::string> state_names,
        std::string name);
  AdamWConfig config(const ParamGroup& group, const Batch& batch) const;  // this step's hyper-parameters

 private:
  void update(const ParamGroup& group, const Batch& batch) override;
  double beta1_, beta2_, eps_;
};

// AdamW with 8-bit moments (bitsandbytes' AdamW8bit idea): the same update as AdamW, run in f32 on
// moments kept as one byte per element plus an f32 scale per block of 256 (kernels/optimizer_ops.h,
// Note [8-bit moments]): about 2.03 bytes of state per parameter instead of 8. The state dict holds
// "exp_avg_codes" and "exp_avg_sq_codes" (u8, flat) and "exp_avg_scales" and "exp_avg_sq_scales" (f32,
// one per block). f32 parameters only.
class AdamW8bit : public AdamW {
 public:
  AdamW8bit(std::vector<ParamGroup> groups, std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8);
  explicit AdamW8bit(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
                     double eps = 1e-8, double weight_decay = 1e-2);

 private:
  void update(const ParamGroup& group, const Batch& batch) override;
  Tensor initial_state(std::size_t k, const Tensor& param) const override;
};

// Adafactor (Shazeer and Stern, 2018; torch.optim.Adafactor's arithmetic and defaults): no first
// moment, and the second moment of a parameter kept factored, as the running mean of the squared
// gradient over each row and over each column of the parameter seen as a matrix, whose outer product
// (divided by the rows' mean) estimates every element's. A parameter of shape [d0, d1, ...] is the
// matrix [d0, d1 x ...] here: for a convolution, output channels against everything an output
// reads, where torch.optim.Adafactor factors the last two dimensions (a 1x1 convolution's 1 x 1,
// which would keep twice its parameters); a vector is [n, 1], which keeps its full second moment.
// State: "row_var" [d0] and "col_var" [numel / d0], of the parameter's dtype. Per step t:
//   the second moments move toward this gradient's by t^beta2_decay (all of it at t = 1);
//   update = g / sqrt(max(row_var x col_var / mean(row_var), eps1^2)), then scaled down to an RMS of d at most;
//   p *= 1 - lr wd;  p -= max(eps2, RMS(p)) min(lr, 1/sqrt(t)) update  (a step relative to the weights).
// Every step is tensor ops (no value comes back to the host), so it runs on any device unchanged.
class Adafactor : public Optimizer {
 public:
  struct Options {
    double beta2_decay = -0.8;
    std::optional<double> eps1;  // the floor of an estimate's root; none: the parameter dtype's epsilon, as torch
    double eps2 = 1e-3;                    // the floor of a parameter's RMS, so zero weights can move
    double d = 1.0;                        // the most an update's RMS may be
  };
  explicit Adafactor(std::vector<ParamGroup> groups, Options options);
  explicit Adafactor(std::vector<ParamGroup> groups) : Adafactor(std::move(groups), Options{}) {}
  explicit Adafactor(std::vector<Tensor> params, double lr = 1e-2, double weight_decay = 0.0);

 private:
  void update(const ParamGroup& group, const Batch& batch) override;
  Tensor initial_state(std::size_t k, const Tensor& param) const override;
  Options options_;
};

}  // namespace frugal::nn
