// nn/function.h: FunctionNode and Recorder.
#include "nn/function.h"

#include <algorithm>

namespace frugal::autograd {

FunctionNode::FunctionNode(std::string name, const std::vector<Tensor>& outputs, std::vector<SavedTensor> saved,
                           BackwardFn backward)
    : name_(std::move(name)), saved_(std::move(saved)), backward_(std::move(backward)) {
  for (const Tensor& t : outputs) outputs_.push_back({t.shape(), {.dtype = t.dtype(), .device = t.device()}});
}

std::vector<Tensor> FunctionNode::backward(std::vector<Tensor> grad_outputs) {
  bool any = false;
  for (const Tensor& g : grad_outputs) any = any || g.defined();
  if (!any) return {};  // nothing reached this op's outputs: nothing flows to its inputs
  for (std::size_t i = 0; i < grad_outputs.size(); ++i)
    if (!grad_outputs[i].defined()) grad_outputs[i] = zeros(outputs_[i].shape, outputs_[i].options);
  Saved saved;
  for (const SavedTensor& s : saved_) saved.push_back(s.unpack(name_));
  FRUGAL_CHECK_VALUE(backward_ != nullptr, name_, ": its graph was freed by an earlier backward; pass retain_graph = true "
                     "the first time to backward twice");
  return backward_(grad_outputs, saved);
}

void FunctionNode::release_saved() {
  for (SavedTensor& s : saved_) s.release();
  backward_ = nullptr;  // also frees whatever the lambda captured
}

Recorder::Recorder(std::string name, const std::vector<Tensor>& inputs)
    : name_(std::move(name)), inputs_(inputs), recording_(should_record(inputs)) {
  if (recording_) tag_.emplace(MemoryTag::activation);
}

std::vector<bool> Recorder::needs_grad() const {
  std::vector<bool> needs;
  for (const Tensor& t : inputs_) needs.push_back(requires_grad(t));
  return needs;
}

Tensor Recorder::finish(Tensor output, const Saved& saved, BackwardFn backward) {
  return std::move(finish(std::vector<Tensor>{std::move(output)}, saved, std::move(backward))[0]);
}

std::vector<Tensor> Recorder::finish(std::vector<Tensor> outputs, const Saved& saved, BackwardFn backward) {
  if (!recording_) {
    tag_.reset();
    return outputs;
  }
  // An op that saves its own output (an activation) hands it over before it has a grad_fn, so it
  // says so; under the activation tag, since a compressed copy is one.
  std::vector<SavedTensor> kept;
  for (const Tensor& t : saved) {
    const bool output = t.defined() && std::any_of(outputs.begin(), outputs.end(), [&t](const Tensor& o) {
      return o.impl_ptr() == t.impl_ptr();
    });
    kept.emplace_back(t, output);
  }
  return record_node(std::move(outputs), std::move(kept), std::move(backward));
}

Tensor Recorder::finish_saved(Tensor output, std::vector<SavedTensor> saved, BackwardFn backward) {
  if (!recording_) {
    tag_.reset();
    return output;
  }
  return std::move(record_node({std::move(output)}, std::move(saved), std::move(backward))[0]);
}

std::vector<Tensor> Recorder::record_node(std::vector<Tensor> outputs, std::vector<SavedTensor> saved,
                                          BackwardFn backward) {
  tag_.reset();
  auto node = std::make_shared<FunctionNode>(name_, outputs, std::move(saved), std::move(backward));
  record(node, inputs_, outputs);
  return outputs;
}

}  // namespace frugal::autograd
