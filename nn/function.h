// How a differentiable op is written (nn/functional.cpp is made of these):
//
//   Tensor relu6(const Tensor& x) {
//     Recorder op("relu6", {x});               // records only if grad mode is on and x requires grad;
//     Tensor y = frugal::relu6(x);             //   while it lives, allocations are tagged activation
//     return op.finish(y, {x}, [](const Grads& g, const Saved& s) {  // save x for the backward
//       return Grads{frugal::relu6_backward(g[0], s[0])};
//     });
//   }
//
// The backward lambda gets the output gradients (zeros for an output that did not reach the loss)
// and the saved tensors, unpacked with their version checked; it returns one gradient per input
// (undefined for inputs that need none). It must capture shapes and options, never tensors: a
// captured tensor would escape the version check and stay alive after backward.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/allocator.h"
#include "nn/node.h"

namespace frugal::autograd {

using Grads = std::vector<Tensor>;
using Saved = std::vector<Tensor>;
using BackwardFn = std::function<Grads(const Grads& grad_outputs, const Saved& saved)>;

// A node whose backward is a BackwardFn over SavedTensors.
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, const std::vector<Tensor>& outputs, std::vector<SavedTensor> saved, BackwardFn backward);
  std::string_view name() const override { return name_; }
  std::vector<Tensor> backward(std::vector<Tensor> grad_outputs) override;
  void release_saved() override;

 private:
  struct OutputInfo {
    Shape shape;
    TensorOptions options;
  };
  std::string name_;
  std::vector<OutputInfo> outputs_;  // to make zeros for outputs whose gradient never arrived
  std::vector<SavedTensor> saved_;
  BackwardFn backward_;
};

class Recorder {
 public:
  Recorder(std::string name, const std::vector<Tensor>& inputs);
  bool recording() const { return recording_; }
  // Which inputs want a gradient, for backward lambdas to skip work no one needs (capture by value).
  std::vector<bool> needs_grad() const;
  // Attaches the node to the output(s) when recording; returns them unchanged.
  Tensor finish(Tensor output, const Saved& saved, BackwardFn backward);
  std::vector<Tensor> finish(std::vector<Tensor> outputs, const Saved& saved, BackwardFn backward);
  // The same with the SavedTensors made by the op: for an op that shares one of them with a Rebuild
  // it attaches to its output (BatchNorm saving x-hat, nn/saved_activations.h).
  Tensor finish_saved(Tensor output, std::vector<SavedTensor> saved, BackwardFn backward);

 private:
  // Both finishes' tail once recording: ends the tag, makes the node, records it on the outputs.
  std::vector<Tensor> record_node(std::vector<Tensor> outputs, std::vector<SavedTensor> saved, BackwardFn backward);

  std::string name_;
  std::vector<Tensor> inputs_;
  bool recording_;
  std::optional<MemoryTagScope> tag_;
};

}  // namespace frugal::autograd
