// The backward pass (nn/autograd.h): a topological walk of the recorded graph by dependency counts.
//   1. From the roots, count for every reachable node how many edges lead into it.
//   2. A node is ready when all its incoming gradients have arrived; ready nodes run latest-created
//      first (the reverse of the forward order, which frees activations in the order they were made
//      last), each summing the gradients it received per output into one.
//   3. Running a node: its tensors' hooks, its backward, then (without retain_graph) it frees what it
//      saved; the gradients it received are dropped as soon as it returns.
// Everything allocated here is tagged MemoryTag::grad, and no op is recorded (no double backward).
#include <cmath>
#include <queue>
#include <unordered_map>

#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "nn/autograd_internal.h"

namespace frugal::autograd {

namespace {

thread_local BackwardNodeObserver* t_node_observer = nullptr;  // BackwardNodeObserverScope's

// Tells the observer, if any, that `node` runs for the scope's length (an exception included).
class ObservedNode {
 public:
  explicit ObservedNode(const Node& node) : node_(node), observer_(t_node_observer) {
    if (observer_) observer_->before_node(node_);
  }
  ~ObservedNode() {
    if (observer_) observer_->after_node(node_);
  }
  ObservedNode(const ObservedNode&) = delete;
  ObservedNode& operator=(const ObservedNode&) = delete;

 private:
  const Node& node_;
  BackwardNodeObserver* observer_;
};

struct Pending {
  int dependencies = 0;               // incoming edges not yet delivered
  std::vector<Tensor> grad_outputs;   // summed per output as they arrive
};

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence() < b->sequence(); }
};

std::unordered_map<Node*, Pending> count_dependencies(const std::vector<Edge>& roots) {
  std::unordered_map<Node*, Pending> pending;
  std::vector<Node*> stack;
  for (const Edge& e : roots)
    if (e.node && pending.emplace(e.node.get(), Pending{}).second) stack.push_back(e.node.get());
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& next : node->next_edges) {
      if (!next.node) continue;
      auto [it, fresh] = pending.emplace(next.node.get(), Pending{});
      ++it->second.dependencies;
      if (fresh) stack.push_back(next.node.get());
    }
  }
  return pending;
}

void deliver(Pending& p, int slot, int num_outputs, Tensor grad) {
  if (p.grad_outputs.empty()) p.grad_outputs.resize(static_cast<std::size_t>(num_outputs));
  Tensor& sum = p.grad_outputs[static_cast<std::size_t>(slot)];
  if (!grad.defined()) return;
  sum = sum.defined() ? add(sum, grad) : std::move(grad);  // out of place: grad may be shared
}

void check_finite(const Tensor& g, const Node& node, std::size_t input) {
  if (!g.defined() || g.numel() == 0) return;
  const double total = sum(g.to(g.device(), DType::f64)).item<double>();  // NaN or Inf anywhere makes this non-finite
  FRUGAL_CHECK_VALUE(std::isfinite(total), "anomaly mode: ", node.name(), " produced a NaN or Inf in the gradient of its input ",
                     input, " (shape ", shape_str(g.shape()), ")");
}

}  // namespace

BackwardNodeObserverScope::BackwardNodeObserverScope(BackwardNodeObserver& observer) : previous_(t_node_observer) {
  t_node_observer = &observer;
}

BackwardNodeObserverScope::~BackwardNodeObserverScope() { t_node_observer = previous_; }

void backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  backward(std::vector<Tensor>{root}, grad.defined() ? std::vector<Tensor>{grad} : std::vector<Tensor>{}, retain_graph);
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  FRUGAL_CHECK_VALUE(grads.empty() || grads.size() == roots.size(), "backward: ", roots.size(), " roots but ",
                     grads.size(), " gradients");
  MemoryTagScope tag(MemoryTag::grad);
  GradModeGuard no_recording(false);
  std::vector<Edge> root_edges;
  std::vector<Tensor> root_grads;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    FRUGAL_CHECK_VALUE(requires_grad(root), "backward: root ", i, " does not require grad and has no grad_fn");
    Tensor g = grads.empty() ? Tensor() : grads[i];
    if (!g.defined()) {
      FRUGAL_CHECK_SHAPE(root.numel() == 1, "backward: a gradient can be implied only for a scalar root; root ", i,
                         " has shape ", shape_str(root.shape()), " (pass its gradient)");
      g = ones(root.shape(), {.dtype = root.dtype(), .device = root.device()});
    }
    FRUGAL_CHECK_SHAPE(g.shape() == root.shape(), "backward: gradient of shape ", shape_str(g.shape()), " for root ", i,
                       " of shape ", shape_str(root.shape()));
    FRUGAL_CHECK_DEVICE(g.device() == root.device(), "backward: gradient on ", g.device(), " for root ", i, " on ",
                        root.device());
    // As PyTorch's engine does: the gradient takes the root's dtype, so what reaches a leaf is the
    // leaf's dtype, not whatever the caller passed.
    if (g.dtype() != root.dtype()) g = g.to(root.dtype());
    root_edges.push_back(gradient_edge(root));
    root_grads.push_back(std::move(g));
  }

  std::unordered_map<Node*, Pending> pending = count_dependencies(root_edges);
  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  for (std::size_t i = 0; i < root_edges.size(); ++i) {
    Node* node = root_edges[i].node.get();
    deliver(pending[node], root_edges[i].input, node->num_outputs, std::move(root_grads[i]));
  }
  for (auto& [node, p] : pending)
    if (p.dependencies == 0) ready.push(node);

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    auto it = pending.find(node);
    std::vector<Tensor> grads_in = std::move(it->second.grad_outputs);
    grads_in.resize(static_cast<std::size_t>(node->num_outputs));
    for (std::size_t i = 0; i < node->output_hooks.size(); ++i) {
      for (const GradHook& hook : node->output_hooks[i])
        if (grads_in[i].defined())
          if (Tensor replaced = hook(grads_in[i]); replaced.defined()) grads_in[i] = std::move(replaced);
      if (grads_in[i].defined() && node->retain_grad_hooks[i]) node->retain_grad_hooks[i](grads_in[i]);
    }
    std::vector<Tensor> grads_out;
    {
      const ObservedNode observed(*node);
      grads_out = node->backward(std::move(grads_in));  // the received gradients die here
      if (!retain_graph) node->release_saved();
    }
    for (std::size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& next = node->next_edges[i];
      if (!next.node) continue;
      Tensor g = i < grads_out.size() ? std::move(grads_out[i]) : Tensor();
      if (anomaly_mode_enabled()) check_finite(g, *node, i);
      Pending& p = pending[next.node.get()];
      deliver(p, next.input, next.node->num_outputs, std::move(g));
      if (--p.dependencies == 0) ready.push(next.node.get());
    }
  }
}

}  // namespace frugal::autograd
