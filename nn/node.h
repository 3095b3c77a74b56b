// What a differentiable op records (for authors of ops; users need nn/autograd.h only).
//
//   Node         one recorded op: its backward, the edges to the nodes of its inputs, what it saved.
//   SavedTensor  a tensor a node keeps for its backward, with the version it had when saved, so an
//                in-place change before backward is an error instead of a silently wrong gradient.
//   record()     attaches a node to the outputs of an op when grad mode is on and an input
//                requires grad; the op's outputs are then allocated under MemoryTag::activation.
//
// A node must not keep a plain Tensor of its own output (output -> node -> output is a cycle that
// never frees): SavedTensor keeps a detached alias instead.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/allocator.h"
#include "nn/autograd.h"

namespace frugal::autograd {

struct Edge {
  std::shared_ptr<Node> node;  // null: that input needs no gradient
  int input = 0;               // which of node's outputs this gradient belongs to
};

// How a tensor can be made again from what other nodes already keep, so that a node that saves the
// tensor need not keep it (nn/saved_activations.h): BatchNorm's output from its saved x-hat, a
// residual sum from its addends. An op attaches one to its output (set_rebuild); a SavedTensor of
// that output, made while the output is unchanged, keeps the Rebuild instead of the tensor.
class Rebuild {
 public:
  virtual ~Rebuild() = default;
  // The tensor again, the same bits as when it was attached (unless what it keeps was compressed).
  virtual Tensor rebuild(std::string_view op) const = 0;
};
void set_rebuild(const Tensor& t, std::shared_ptr<const Rebuild> rebuild);
bool has_rebuild(const Tensor& t);  // one attached, and t unchanged since

struct SavedForm;  // nn/autograd.cpp: what a SavedTensor keeps, shared by its copies

class SavedTensor {
 public:
  SavedTensor() = default;
  // Keeps t for backward as this thread's ActivationSaving says (nn/saved_activations.h): a Rebuild
  // when t has one; compressed when compression is on and t is a feature map an op produced (3 or
  // more dims, with a grad_fn), or `activation` says it is one; a copy in host memory when such a
  // feature map is the whole of its storage, contiguous, and an ActivationOffloadScope lives
  // (nn/activation_offload.h); otherwise t itself. Copies share what is kept: a tensor saved by two
  // nodes is compressed or offloaded once.
  explicit SavedTensor(const Tensor& t, bool activation = false);
  // Keeps t itself whatever the ActivationSaving (checkpoint's inputs must replay exactly).
  static SavedTensor exact(const Tensor& t);
  // The saved tensor (rebuilt, decompressed or copied back if so kept); ValueError if it was modified in place
  // since it was saved, or if the graph was already freed by an earlier backward (`op` names the
  // node in the message).
  Tensor unpack(std::string_view op) const;
  void release() {
    form_.reset();
    released_ = true;
  }
  bool defined() const { return form_ != nullptr || released_; }

 private:
  std::shared_ptr<const SavedForm> form_;
  bool released_ = false;
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual std::string_view name() const = 0;
  // d loss / d inputs (one per next edge; undefined where an input needs none) from d loss / d outputs
  // (one per output; undefined means zero, for outputs that did not reach the loss). Taken by value:
  // the engine hands over its buffers, so a node can adopt a gradient instead of copying it.
  virtual std::vector<Tensor> backward(std::vector<Tensor> grad_outputs) = 0;
  // Frees what the node saved; backward() calls it after the node ran unless retain_graph.
  virtual void release_saved() {}

  std::vector<Edge> next_edges;              // one per input, in the op's input order
  int num_outputs = 1;
  std::vector<std::vector<GradHook>> output_hooks;  // per output: the hooks of that tensor
  // Per output: retain_grad's store, run after that output's hooks (as PyTorch), so .grad holds
  // the gradient the hooks made. Empty where nobody retains it.
  std::vector<GradHook> retain_grad_hooks;
  std::uint64_t sequence() const { return sequence_; }  // creation order: later nodes run first
  // This thread's memory context when the op ran forward: the layer that recorded it, under
  // train::LayerMemoryContexts ("features.3.conv.0 (Conv2d)"); what its backward is working for.
  MemoryContextId forward_context() const { return forward_context_; }

 private:
  std::uint64_t sequence_;
  MemoryContextId forward_context_;
};

// The edge a gradient for `t` travels along: its grad_fn, or its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);

// Whether an op on `inputs` must be recorded: grad mode is on and some input requires grad.
bool should_record(const std::vector<Tensor>& inputs);

// Connects `node` to `inputs` (next edges) and to `outputs` (their grad_fn), and marks the outputs
// as requiring grad.
void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);

}  // namespace frugal::autograd
