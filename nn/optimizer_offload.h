// The optimizer offloaded to host memory, as ZeRO-Offload does it: the optimizer's state lives in
// page-locked host memory and its update runs on the host, so the device holds no optimizer state
// at all (AdamW's 8 bytes per parameter, SGD momentum's 4). Each step:
//
//   1. the device finishes backward; every parameter and its gradient is queued for copying into
//      pinned host buffers on a side stream (core/stream.h), and the host waits for the copies;
//   2. the inner optimizer (SGD, AdamW, AdamW8bit, Adafactor: any) updates the host copies, one
//      parameter at a time, with its state on the host; as each is done, its copy back to the
//      device is queued on the side stream, so the copies overlap the host's next updates;
//   3. the host waits for the last copy before the step returns (the next forward reads them).
//
// The parameters are copied to the host every step, not kept there as the truth (ZeRO-Offload keeps
// the host's f32 copy as the master): whatever changes them between steps (loading a checkpoint,
// data parallelism's broadcast) is seen, for one more copy of the weights per step. Under autocast
// the parameters are f32 on the device already, so the host copy is the f32 master. On the CPU the
// "device" is the simulated one (core/allocator_registry.h's memory limit) and the copies are
// memcpy: the pinned host memory is outside its books, which is the saving, shown on any machine.
// On the meta device (the memory planner) nothing is copied and nothing updated: the host side has
// no place in a device's plan.
//
// Not here: the update arithmetic (nn/optim.h), offloading activations (nn/saved_activations.h).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "nn/optim.h"

namespace frugal::nn {

class OffloadedOptimizer final : public Optimizer {
 public:
  // `make` builds the inner optimizer from groups of host tensors, each group keeping the lr and
  // weight decay of its group in `groups`. The pinned host copies are made here, once.
  using MakeInner = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;
  OffloadedOptimizer(std::vector<ParamGroup> groups, const MakeInner& make);

  void step() override;
  // The state dict is the inner optimizer's (its state on the host), with this optimizer's groups'
  // lr and weight decay: the same keys as the inner optimizer run on the device would write.
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& dict) override;
  // Host bytes: the inner optimizer's state. The device holds none.
  std::size_t state_bytes() const override { return inner_->state_bytes(); }
  // What the host holds besides the state: a pinned copy of every parameter and of its gradient.
  std::size_t staging_bytes() const;

 private:
  void update(const ParamGroup&, const Batch&) override;

  std::vector<Tensor> params_;      // the device's parameters, in the inner optimizer's order
  std::vector<Tensor> host_params_; // their pinned host copies, the inner optimizer's parameters
  std::vector<Tensor> host_grads_;  // pinned host copies of their gradients
  std::unique_ptr<Optimizer> inner_;
};

}  // namespace frugal::nn
