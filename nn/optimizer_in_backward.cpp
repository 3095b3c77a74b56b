// The optimizer step fused into backward (see optimizer_in_backward.h).
#include "nn/optimizer_in_backward.h"

#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "nn/autograd.h"

namespace frugal::nn {

struct OptimizerInBackward::State {
  Optimizer& optimizer;
  bool armed = false;
  std::vector<bool> updated;  // by parameter number, since the last arm()
  std::size_t updated_count = 0;

  // Parameter `index` has its whole gradient: update it and free the gradient.
  void apply(std::size_t index, const Tensor& param) {
    // The engine runs a leaf's accumulator once per backward, with every path's contribution summed;
    // a second call would mean an update from a partial gradient, so it is an error, not a second step.
    FRUGAL_CHECK(!updated[index], "optimizer in backward: parameter ", index, " (shape ", shape_str(param.shape()),
                 ") received a second gradient in one backward; it was already updated from the first");
    const MemoryContextScope made_by("optimizer step");  // as the ordinary step names its state
    optimizer.step_parameter(index);
    autograd::set_grad(param, Tensor());
    updated[index] = true;
    ++updated_count;
  }
};

OptimizerInBackward::OptimizerInBackward(Optimizer& optimizer)
    : state_(std::make_shared<State>(State{optimizer, false, std::vector<bool>(optimizer.parameter_count()), 0})) {
  std::size_t index = 0;
  for (const ParamGroup& group : optimizer.param_groups())
    for (const Tensor& param : group.params) {
      const std::size_t number = index++;
      if (!autograd::requires_grad(param)) continue;  // never gets a gradient: the ordinary step skips it too
      const std::weak_ptr<State> weak = state_;
      autograd::register_post_accumulate_grad_hook(param, [weak, number](const Tensor& leaf) {
        if (const std::shared_ptr<State> state = weak.lock(); state && state->armed) state->apply(number, leaf);
      });
    }
}

OptimizerInBackward::Armed::Armed(OptimizerInBackward& owner) : owner_(owner) {
  State& s = *owner_.state_;
  FRUGAL_CHECK(!s.armed, "optimizer in backward: armed twice at once");
  s.armed = true;
  s.updated.assign(s.updated.size(), false);
  s.updated_count = 0;
}

OptimizerInBackward::Armed::~Armed() { owner_.state_->armed = false; }

std::size_t OptimizerInBackward::updated() const { return state_->updated_count; }

}  // namespace frugal::nn
