// Reverse-mode automatic differentiation, define-by-run, as PyTorch's: a tensor that requires grad
// records the op that made it (its grad_fn, a Node of nn/node.h); backward() walks those nodes from
// the loss in dependency order, frees each node's saved tensors the moment its backward ran, frees
// each intermediate gradient once consumed, and accumulates into the leaves' .grad.
//
// Memory tags: ops recorded for autograd allocate their outputs (what backward will read) under
// MemoryTag::activation; backward allocates gradients under MemoryTag::grad. So the allocator's
// per-tag statistics show what the graph holds, and after backward no activation bytes remain
// beyond the tensors the caller still holds.
//
// Not here: the differentiable ops themselves (nn/functional.h), modules (nn/module.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace frugal::autograd {

class Node;

// ---- per-tensor state
bool requires_grad(const Tensor& t);
// Marks a leaf as a parameter whose gradient backward() accumulates; ValueError for non-floating
// tensors and for non-leaves (tensors an op produced), as PyTorch.
Tensor& set_requires_grad(Tensor& t, bool enabled = true);
bool is_leaf(const Tensor& t);                 // made by the user, not by a recorded op
Tensor grad(const Tensor& t);                  // the accumulated gradient; undefined until backward
void set_grad(const Tensor& t, const Tensor& grad);  // undefined clears it (frees the memory)
std::shared_ptr<Node> grad_fn(const Tensor& t);      // null for leaves

// A tensor sharing t's memory (and version counter) with no autograd history.
Tensor detach(const Tensor& t);

// Computes d roots / d leaves and accumulates it into every leaf's .grad. `grads` (one per root)
// may be empty for scalar roots (ones). Without retain_graph the graph's saved tensors are freed as
// backward goes, and a second backward through it is an error.
void backward(const Tensor& root, const Tensor& grad = Tensor(), bool retain_graph = false);
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

// ---- hooks
// Runs when t's gradient has been computed; may return a replacement (an undefined return keeps it).
using GradHook = std::function<Tensor(const Tensor& grad)>;
void register_hook(const Tensor& t, GradHook hook);
// Runs after backward accumulated into a leaf's .grad (data parallelism starts its all-reduce here).
using PostAccumulateHook = std::function<void(const Tensor& leaf)>;
void register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateHook hook);
// Keeps the gradient of a non-leaf in its .grad too (leaves always keep theirs).
void retain_grad(const Tensor& t);

// ---- watching backward
// Sees each node of this thread's backward just before and just after it runs (the memory timeline
// marks each node's span, so a peak inside backward can name the node running then).
class BackwardNodeObserver {
 public:
  virtual ~BackwardNodeObserver() = default;
  virtual void before_node(const Node& node) = 0;
  virtual void after_node(const Node& node) = 0;  // also when its backward threw
};
// Installs an observer for this thread while the scope lives; an inner scope replaces the outer
// one until it ends.
class BackwardNodeObserverScope {
 public:
  explicit BackwardNodeObserverScope(BackwardNodeObserver& observer);
  ~BackwardNodeObserverScope();
  BackwardNodeObserverScope(const BackwardNodeObserverScope&) = delete;
  BackwardNodeObserverScope& operator=(const BackwardNodeObserverScope&) = delete;

 private:
  BackwardNodeObserver* previous_;
};

// ---- modes
// Grad mode on (the default): ops on tensors that require grad are recorded. Off: nothing is
// recorded and nothing saved (inference, optimizer steps).
bool grad_mode_enabled();
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};
struct NoGradGuard : GradModeGuard {
  NoGradGuard() : GradModeGuard(false) {}
};

// Anomaly mode: backward checks every gradient a node produces and throws ValueError naming the
// node (and the op) that produced the first NaN or Inf. Costs a reduction per gradient.
bool anomaly_mode_enabled();
class AnomalyModeGuard {
 public:
  explicit AnomalyModeGuard(bool enabled = true);
  ~AnomalyModeGuard();
  AnomalyModeGuard(const AnomalyModeGuard&) = delete;
  AnomalyModeGuard& operator=(const AnomalyModeGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace frugal::autograd
