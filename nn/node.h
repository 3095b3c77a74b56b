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

#include "nn/autograd.h"

namespace frugal::autograd {

struct Edge {
  std::shared_ptr<Node> node;  // null: that input needs no gradient
  int input = 0;               // which of node's outputs this gradient belongs to
};

class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // The saved tensor; ValueError if it was modified in place since it was saved, or if the graph
  // was already freed by an earlier backward (`op` names the node in the message).
  Tensor unpack(std::string_view op) const;
  void release() { data_ = Tensor(); released_ = true; }
  bool defined() const { return data_.defined() || released_; }

 private:
  Tensor data_;
  std::uint64_t version_ = 0;
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

 private:
  std::uint64_t sequence_;
};

// The edge a gradient for `t` travels along: its grad_fn, or its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);

// Whether an op on `inputs` must be recorded: grad mode is on and some input requires grad.
bool should_record(const std::vector<Tensor>& inputs);

// Connects `node` to `inputs` (next edges) and to `outputs` (their grad_fn), and marks the outputs
// as requiring grad.
void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);

}  // namespace frugal::autograd
