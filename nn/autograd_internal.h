// Autograd's own bookkeeping, shared by nn/autograd.cpp and nn/engine.cpp only: the metadata in a
// tensor's autograd slot, and the node that accumulates into a leaf's .grad.
#pragma once

#include <memory>
#include <vector>

#include "nn/node.h"

namespace frugal::autograd {

struct Meta final : AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;   // null for leaves
  int output_nr = 0;               // which output of grad_fn this tensor is
  std::weak_ptr<Node> accumulator;  // leaves: their AccumulateGrad, alive while some graph uses it
  std::vector<GradHook> leaf_hooks;
  std::vector<PostAccumulateHook> post_hooks;
  bool retains_grad = false;
  // Below the standard minimum (nn/saved_activations.h): how to make this tensor again, valid while
  // its storage is still at `rebuild_version`; and what stands in for it in backward (its compressed
  // form, or its copy in host memory), shared by the nodes that save it.
  std::shared_ptr<const Rebuild> rebuild;
  std::uint64_t rebuild_version = 0;
  std::weak_ptr<const SavedForm> stand_in;
};

Meta* meta_of(const Tensor& t);  // null when autograd never touched t
Meta& ensure_meta(const Tensor& t);

// The sink of a leaf's gradient: runs the leaf's hooks, then adopts (first time) or adds into .grad,
// then runs the post-accumulate hooks. Holds the leaf weakly: a graph does not keep parameters alive.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const Tensor& leaf);
  std::string_view name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> backward(std::vector<Tensor> grad_outputs) override;

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

std::shared_ptr<Node> accumulator_of(const Tensor& leaf);

}  // namespace frugal::autograd
