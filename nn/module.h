// Module: the base of every layer and model, with torch.nn.Module's semantics. A module owns named
// parameters (leaves that require grad), named buffers (state without gradients, such as batch
// norm's running statistics) and named child modules; everything that walks the tree names things
// with dotted paths in registration order, exactly as PyTorch ("features.0.0.weight"), so state
// dicts line up with PyTorch's.
//
// Identity. A Tensor is a handle on a shared TensorImpl (core/tensor.h). parameters() returns
// handles on the very TensorImpls the module registered, and the module never swaps them for
// others: to(Device) and to(DType) move the data and point each registered TensorImpl at its new
// storage with Tensor::set_data, keeping its autograd state (requires_grad, hooks, its .grad,
// converted alongside). So an optimizer that took parameters() before to() still steps the module's parameters after it, as
// with PyTorch's `param.data = ...`. What does not follow: views and state_dict() tensors taken
// before the move (they keep the old memory), a graph recorded before it (call to() between
// steps, not between forward and backward), and an optimizer's state (momentum, moments) made by
// steps before it, which stays where it was: move the module before the first step, as in PyTorch.
//
// Memory. Parameters and buffers live in memory tagged MemoryTag::param: the layers allocate them
// under MemoryTagScope(MemoryTag::param), and register_parameter/register_buffer move a tensor
// allocated under another tag into param memory (the same handle, rebound), so a memory report
// always finds them there. zero_grad() sets gradients to none, giving their memory back.
//
// Not here: the layers (nn/layers.h), losses (nn/losses.h), optimizers, forward functions of more
// than one tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/state_dict.h"

namespace frugal::nn {

class Module;

// Sees every module call made through Module::operator() on this thread: how memory reports (the
// planner, the leak detector, the timeline) tell which layer an allocation belongs to. Calls nest:
// a block's call encloses its layers' calls. after_call runs on the way out whether forward
// returned (output set) or threw (output nullptr), so an observer's stack stays balanced.
class ModuleCallObserver {
 public:
  virtual ~ModuleCallObserver() = default;
  virtual void before_call(const Module& module) = 0;
  virtual void after_call(const Module& module, const Tensor* output) = 0;
};

// Adds an observer for this thread's module calls while the scope lives. Scopes nest; every
// observer in force sees every call, the innermost first.
class ModuleCallObserverScope {
 public:
  explicit ModuleCallObserverScope(ModuleCallObserver& observer);
  ~ModuleCallObserverScope();
  ModuleCallObserverScope(const ModuleCallObserverScope&) = delete;
  ModuleCallObserverScope& operator=(const ModuleCallObserverScope&) = delete;

 private:
  ModuleCallObserver* observer_;
};

// Whether this thread's module calls are observed now (a ModuleCallObserverScope is in force): a
// layer that would run two modules' work in one kernel runs them one by one instead, so each
// observer sees each call.
bool module_calls_observed();

// Named tensors in order; the same type as StateDict.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// What load_state_dict did not match (non-strict mode reports them instead of throwing).
struct LoadResult {
  std::vector<std::string> missing_keys;     // in the module, not in the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, not in the module
};

class Module {
 public:
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  // forward(x), seen by this thread's ModuleCallObservers. Layers call their children this way.
  Tensor operator()(const Tensor& x);

  // The class's name ("Conv2d"), for memory reports and error messages.
  const std::string& type_name() const { return type_name_; }

  // ---- registration: names are unique within a module, non-empty and without dots
  // A parameter is a floating leaf; it is marked requires_grad. Returns the registered handle.
  Tensor register_parameter(std::string name, Tensor tensor);
  // A buffer (any dtype) never requires grad. Returns the registered handle.
  Tensor register_buffer(std::string name, Tensor tensor);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    add_child(std::move(name), module);
    return module;
  }

  // ---- the tree, depth first in registration order. A tensor or module reachable under two names
  // (tied weights, a shared block) is listed once, under its first name, as in PyTorch.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  std::vector<Tensor> buffers() const;
  // This module first (named ""), then every descendant; pointers valid while this module lives.
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  std::int64_t parameter_count() const;  // elements over all parameters

  // ---- modes: recursive
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // ---- moving (in place, identity kept: see the top of this file). to(DType) converts floating
  // parameters and buffers only (num_batches_tracked stays i64), as PyTorch; the dtype must be floating.
  Module& to(Device device);
  Module& to(DType dtype);

  // Sets every parameter's .grad to none (its memory goes back to the allocator).
  void zero_grad();

  // ---- state: parameters and buffers of each module (parameters first), then its children, with
  // dotted names; tied tensors appear under every name, as in PyTorch.
  // The tensors are detached handles on the module's memory (no copy): save them before training on.
  StateDict state_dict() const;
  // Copies values into the module's existing tensors (converting dtype and device). Everything is
  // checked before anything is copied, so a failed load leaves the module as it was. Strict: one
  // ValueError listing every missing key, every unexpected key and every shape mismatch. Non-strict:
  // shape mismatches are still a ValueError; missing and unexpected keys are returned.
  LoadResult load_state_dict(const StateDict& state, bool strict = true);

 protected:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  // Runs `body` as a call of this module, seen by the observers exactly as operator() is: for a
  // layer's second entry point, which memory reports must still attribute to the layer
  // (BatchNorm2d::forward_relu6).
  Tensor observed_call(const std::function<Tensor()>& body);

 private:
  void check_new_name(const std::string& name) const;
  void add_child(std::string name, std::shared_ptr<Module> module);
  // Every (module, prefix) pair depth first; a module reached twice is kept twice unless deduplicate.
  std::vector<std::pair<std::string, const Module*>> walk(bool deduplicate) const;
  // Every registered parameter and buffer (the handles themselves), in state_dict order.
  NamedTensors all_tensors() const;
  NamedTensors unique_tensors(bool parameters) const;

  std::string type_name_;
  bool training_ = true;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace frugal::nn
