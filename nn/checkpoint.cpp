// nn/checkpoint.h: a node that keeps a block's inputs and, in backward, reruns the block with
// grad mode on and backpropagates through the fresh graph; the container built on it.
#include "nn/checkpoint.h"

#include <algorithm>
#include <optional>

#include "core/random.h"
#include "nn/amp.h"
#include "nn/autograd.h"
#include "nn/node.h"

namespace frugal::nn {

namespace {
thread_local bool t_recomputing = false;
thread_local bool t_first_run = false;

// Sets one of the flags above for its lifetime.
class FlagScope {
 public:
  explicit FlagScope(bool& flag) : flag_(flag), previous_(flag) { flag = true; }
  ~FlagScope() { flag_ = previous_; }
  FlagScope(const FlagScope&) = delete;
  FlagScope& operator=(const FlagScope&) = delete;

 private:
  bool& flag_;
  bool previous_;
};

// Puts the default generator in the state the forward saw, and back afterwards, so the rest of
// the program draws the numbers it would have drawn without checkpointing.
class ReplayRandom {
 public:
  explicit ReplayRandom(const GeneratorState& forward_state) : after_(default_generator().state()) {
    default_generator().set_state(forward_state);
  }
  ~ReplayRandom() { default_generator().set_state(after_); }
  ReplayRandom(const ReplayRandom&) = delete;
  ReplayRandom& operator=(const ReplayRandom&) = delete;

 private:
  GeneratorState after_;
};

class CheckpointNode final : public autograd::Node {
 public:
  CheckpointNode(CheckpointFn fn, const std::vector<Tensor>& inputs, GeneratorState random,
                 std::optional<DType> autocast)
      : fn_(std::move(fn)), random_(random), autocast_(autocast) {
    for (const Tensor& t : inputs) {
      inputs_.push_back(autograd::SavedTensor::exact(t));  // the replay must see the same bits
      needs_grad_.push_back(autograd::requires_grad(t));
    }
  }
  std::string_view name() const override { return "checkpoint"; }

  std::vector<Tensor> backward(std::vector<Tensor> grad_outputs) override {
    FRUGAL_CHECK_VALUE(fn_ != nullptr, "checkpoint: its inputs were freed by an earlier backward; pass retain_graph = "
                       "true the first time to backward twice");
    std::vector<Tensor> inputs;  // fresh leaves, so the recomputed graph ends here
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      Tensor t = inputs_[i].unpack("checkpoint");
      if (t.defined()) t = autograd::detach(t);
      if (needs_grad_[i]) autograd::set_requires_grad(t);
      inputs.push_back(t);
    }
    std::vector<Tensor> grads;
    if (!grad_outputs[0].defined()) return grads;  // no gradient reached the output: none to pass on
    Tensor output;
    {
      ReplayRandom replay(random_);
      AutocastGuard autocast(autocast_);  // the forward's precision: backward usually runs outside the guard
      const FlagScope recomputing(t_recomputing);
      autograd::GradModeGuard grad_on(true);
      MemoryTagScope tag(MemoryTag::activation);
      output = fn_(inputs);
    }
    if (!autograd::requires_grad(output)) return grads;  // nothing inside fn wanted a gradient after all
    autograd::backward(output, grad_outputs[0]);  // reaches the parameters fn uses, and our fresh leaves
    for (std::size_t i = 0; i < inputs.size(); ++i) grads.push_back(needs_grad_[i] ? autograd::grad(inputs[i]) : Tensor());
    return grads;
  }

  void release_saved() override {
    for (autograd::SavedTensor& s : inputs_) s.release();
    fn_ = nullptr;
  }

 private:
  CheckpointFn fn_;
  std::vector<autograd::SavedTensor> inputs_;
  std::vector<bool> needs_grad_;
  GeneratorState random_;
  std::optional<DType> autocast_;
};
}  // namespace

bool checkpoint_recomputing() { return t_recomputing; }
bool checkpoint_first_run() { return t_first_run; }

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  // Recorded whenever grad mode is on, even if no input requires grad: the parameters fn uses may.
  if (!autograd::grad_mode_enabled()) return fn(inputs);
  const GeneratorState random = default_generator().state();
  Tensor output;
  {
    autograd::NoGradGuard no_grad;  // nothing inside is saved for backward
    MemoryTagScope tag(MemoryTag::activation);
    const FlagScope first_run(t_first_run);
    output = fn(inputs);
  }
  // Recorded on an alias: fn may return one of its inputs, or a tensor it captured, whose own
  // history must not be overwritten.
  output = autograd::detach(output);
  autograd::record(std::make_shared<CheckpointNode>(fn, inputs, random, nn::autocast_dtype()), inputs, {output});
  return output;
}

// ---- CheckpointedSequential

void CheckpointedSequential::checkpoint_children(std::size_t first, std::size_t count) {
  const std::size_t end = first + count;
  FRUGAL_CHECK_INDEX(count > 0 && end <= size(), "CheckpointedSequential: children ", first, "..", end,
                     " are not among its ", size());
  const auto at = std::find_if(runs_.begin(), runs_.end(), [&](const auto& run) { return run.first >= first; });
  const bool overlaps = (at != runs_.end() && at->first < end) || (at != runs_.begin() && std::prev(at)->second > first);
  FRUGAL_CHECK_VALUE(!overlaps, "CheckpointedSequential: children ", first, "..", end, " overlap a checkpointed run");
  runs_.insert(at, {first, end});
}

Tensor CheckpointedSequential::forward(const Tensor& x) {
  Tensor y = x;
  auto run = runs_.begin();
  for (std::size_t i = 0; i < size();) {
    if (run == runs_.end() || run->first != i) {
      y = (*(*this)[i++])(y);
      continue;
    }
    // The children by shared_ptr: the graph keeps this function until backward.
    std::vector<std::shared_ptr<Module>> block;
    for (; i < run->second; ++i) block.push_back((*this)[i]);
    y = checkpoint([block](const std::vector<Tensor>& inputs) {
      Tensor out = inputs[0];
      for (const auto& child : block) out = (*child)(out);
      return out;
    }, {y});
    ++run;
  }
  return y;
}

}  // namespace frugal::nn
