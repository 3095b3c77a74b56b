// Per-tensor autograd state (nn/autograd.h) and the recording side of nn/node.h: the metadata
// kept in Tensor's autograd slot, leaf accumulators, hooks, saved tensors and the modes.
// Not here: the backward pass (nn/engine.cpp).
#include "nn/autograd.h"

#include <atomic>

#include "kernels/activation_codec.h"
#include "kernels/elementwise.h"
#include "nn/activation_offload.h"
#include "nn/autograd_internal.h"
#include "nn/node.h"
#include "nn/saved_activations.h"

namespace frugal::autograd {

namespace {
thread_local bool t_grad_mode = true;
thread_local bool t_anomaly_mode = false;
std::atomic<std::uint64_t> g_next_sequence{0};
}  // namespace

Meta* meta_of(const Tensor& t) { return t.defined() ? static_cast<Meta*>(t.autograd_meta()) : nullptr; }

Meta& ensure_meta(const Tensor& t) {
  if (Meta* m = meta_of(t)) return *m;
  t.set_autograd_meta(std::make_shared<Meta>());
  return *meta_of(t);
}

// ---- the leaf accumulator

AccumulateGrad::AccumulateGrad(const Tensor& leaf) : leaf_(leaf.impl_ptr()) {}

std::vector<Tensor> AccumulateGrad::backward(std::vector<Tensor> grad_outputs) {
  const std::shared_ptr<TensorImpl> impl = leaf_.lock();
  Tensor g = std::move(grad_outputs[0]);
  if (!impl || !g.defined()) return {};  // the leaf is gone, or no gradient reached it
  const Tensor leaf(impl);
  Meta& m = ensure_meta(leaf);
  for (const GradHook& hook : m.leaf_hooks)
    if (Tensor replaced = hook(g); replaced.defined()) g = std::move(replaced);
  if (!m.grad.defined()) {
    // Adopt the gradient when nothing else can see it (no other handle, no other view of its
    // memory); otherwise copy, or a later in-place accumulation would change someone else's tensor.
    const bool unshared = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous();
    m.grad = unshared ? std::move(g) : g.clone();
  } else {
    add_(m.grad, g);
  }
  for (const PostAccumulateHook& hook : m.post_hooks) hook(leaf);
  return {};
}

std::shared_ptr<Node> accumulator_of(const Tensor& leaf) {
  Meta& m = ensure_meta(leaf);
  std::shared_ptr<Node> node = m.accumulator.lock();
  if (!node) {
    node = std::make_shared<AccumulateGrad>(leaf);
    m.accumulator = node;  // weak: the graphs that use it keep it alive, not the leaf
  }
  return node;
}

// ---- per-tensor state

bool requires_grad(const Tensor& t) {
  const Meta* m = meta_of(t);
  return m && m->requires_grad;
}

Tensor& set_requires_grad(Tensor& t, bool enabled) {
  FRUGAL_CHECK_VALUE(t.defined(), "set_requires_grad: the tensor is undefined");
  FRUGAL_CHECK_DTYPE(!enabled || is_floating(t.dtype()), "set_requires_grad: only floating tensors can require grad, got ",
                     t.dtype());
  FRUGAL_CHECK_VALUE(is_leaf(t), "set_requires_grad: only leaves can be changed; this tensor was made by ",
                     grad_fn(t)->name(), " (use detach() to start a new leaf)");
  ensure_meta(t).requires_grad = enabled;
  return t;
}

bool is_leaf(const Tensor& t) {
  const Meta* m = meta_of(t);
  return !m || !m->grad_fn;
}

Tensor grad(const Tensor& t) {
  const Meta* m = meta_of(t);
  return m ? m->grad : Tensor();
}

void set_grad(const Tensor& t, const Tensor& g) {
  if (g.defined()) {
    FRUGAL_CHECK_SHAPE(g.shape() == t.shape(), "set_grad: gradient of shape ", shape_str(g.shape()),
                       " for a tensor of shape ", shape_str(t.shape()));
    check_same_dtype(g, t, "set_grad");
    check_same_device(g, t, "set_grad");
  }
  if (g.defined() || meta_of(t)) ensure_meta(t).grad = g;
}

std::shared_ptr<Node> grad_fn(const Tensor& t) {
  const Meta* m = meta_of(t);
  return m ? m->grad_fn : nullptr;
}

Tensor detach(const Tensor& t) {
  FRUGAL_CHECK_VALUE(t.defined(), "detach: the tensor is undefined");
  return t.as_strided(t.shape(), t.strides(), t.offset());  // a new handle on the same memory, no history
}

// ---- hooks

void register_hook(const Tensor& t, GradHook hook) {
  FRUGAL_CHECK_VALUE(requires_grad(t), "register_hook: the tensor does not require grad, so no gradient will reach it");
  Meta& m = ensure_meta(t);
  if (!m.grad_fn) {
    m.leaf_hooks.push_back(std::move(hook));
    return;
  }
  m.grad_fn->output_hooks[static_cast<std::size_t>(m.output_nr)].push_back(std::move(hook));
}

void register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateHook hook) {
  FRUGAL_CHECK_VALUE(requires_grad(leaf) && is_leaf(leaf),
                     "register_post_accumulate_grad_hook: needs a leaf that requires grad (a parameter)");
  ensure_meta(leaf).post_hooks.push_back(std::move(hook));
}

void retain_grad(const Tensor& t) {
  FRUGAL_CHECK_VALUE(requires_grad(t), "retain_grad: the tensor does not require grad");
  Meta& m = ensure_meta(t);
  if (!m.grad_fn || m.retains_grad) return;  // leaves keep their gradient anyway
  m.retains_grad = true;
  std::weak_ptr<TensorImpl> weak = t.impl_ptr();  // weak: the node must not keep its own output alive
  m.grad_fn->retain_grad_hooks[static_cast<std::size_t>(m.output_nr)] = [weak](const Tensor& g) {
    if (const std::shared_ptr<TensorImpl> impl = weak.lock()) {
      Meta& target = ensure_meta(Tensor(impl));
      target.grad = target.grad.defined() ? add(target.grad, g) : g.clone();
    }
    return Tensor();
  };
}

// ---- modes

bool grad_mode_enabled() { return t_grad_mode; }
GradModeGuard::GradModeGuard(bool enabled) : previous_(t_grad_mode) { t_grad_mode = enabled; }
GradModeGuard::~GradModeGuard() { t_grad_mode = previous_; }

bool anomaly_mode_enabled() { return t_anomaly_mode; }
AnomalyModeGuard::AnomalyModeGuard(bool enabled) : previous_(t_anomaly_mode) { t_anomaly_mode = enabled; }
AnomalyModeGuard::~AnomalyModeGuard() { t_anomaly_mode = previous_; }

// ---- recording

Node::Node() : sequence_(g_next_sequence.fetch_add(1)), forward_context_(current_memory_context()) {}

// ---- saved tensors

void set_rebuild(const Tensor& t, std::shared_ptr<const Rebuild> rebuild) {
  Meta& m = ensure_meta(t);
  m.rebuild = std::move(rebuild);
  m.rebuild_version = t.storage()->version();
}

bool has_rebuild(const Tensor& t) {
  const Meta* m = meta_of(t);
  return m && m->rebuild && m->rebuild_version == t.storage()->version();
}

// What a SavedTensor keeps: the tensor itself, its Rebuild, its compressed form, or its copy in host
// memory. For all but the first the original's storage is watched (weakly: keeping it would defeat
// the purpose) so that an in-place change after saving is still caught while anyone else holds the
// original.
struct SavedForm {
  enum class Kind : std::uint8_t { as_is, rebuilt, bf16, int8, offloaded };
  Kind kind = Kind::as_is;
  Tensor data;        // as_is: a detached alias; bf16: the bf16 copy
  ChannelCodes codes;  // int8: 8-bit codes per channel (kernels/activation_codec.h)
  std::shared_ptr<const Rebuild> rebuild;
  std::shared_ptr<nn::OffloadedActivation> offloaded;  // in host memory until backward (nn/activation_offload.h)
  std::weak_ptr<Storage> original;
  std::uint64_t version = 0;
  DType dtype = DType::f32;  // the original's, which decompression gives back
  // Note [One decompression per saved tensor]: the nodes that share a compressed tensor run next to
  // each other in backward (BatchNorm's x-hat in 8-bit codes: the next convolution's rebuild, then
  // BatchNorm's own backward), so the first unpack keeps what it decompressed for the others, until
  // the last of them lets the form go; the second decompression took a tenth of a CIFAR-stem step
  // with bf16. (An f32 x-hat kept in bf16 is no longer decompressed here: BatchNorm's kernels write
  // and read it in bf16 themselves, kernels/batch_norm.h's NormalizedForm.) An offloaded tensor is
  // copied back once for the same reason (OffloadedActivation keeps its device copy).
  mutable Tensor decompressed;
};

namespace {

std::shared_ptr<const SavedForm> as_is(const Tensor& t) {
  auto form = std::make_shared<SavedForm>();
  form->data = detach(t);
  form->version = t.storage()->version();
  return form;
}

// Whether t is a feature map: of at least 3 dims (images, not a linear layer's [N, features] or a
// BatchNorm's per-channel statistics), that an op produced or the caller says is an activation.
// Leaves (the batch, parameters) are held elsewhere anyway: a compressed or offloaded copy of them
// would add bytes, not save them. (Autocast's 16-bit copy of a convolution's weight is made by an
// op for the forward and kept only for backward: it counts, and is offloaded with the maps.)
bool feature_map(const Tensor& t, bool activation) {
  const Meta* m = meta_of(t);
  const bool produced = activation || (m && m->grad_fn);
  return produced && t.dim() >= 3;
}

// Compression makes 16 or 8 bits of an f32 or f64 map; a 16-bit map (autocast's) stays as it is.
bool compressible(const Tensor& t, bool activation) {
  return feature_map(t, activation) && (t.dtype() == DType::f32 || t.dtype() == DType::f64);
}

// The form that already stands in for t, if another node saved t (unchanged since) the same way.
std::shared_ptr<const SavedForm> shared_stand_in(const Tensor& t, SavedForm::Kind kind) {
  if (const Meta* m = meta_of(t))
    if (auto shared = m->stand_in.lock(); shared && shared->kind == kind && shared->version == t.storage()->version())
      return shared;
  return nullptr;
}

// A form standing in for t, watching t's storage, for the next node that saves t to share.
std::shared_ptr<SavedForm> stand_in_for(const Tensor& t, SavedForm::Kind kind) {
  auto form = std::make_shared<SavedForm>();
  form->kind = kind;
  form->original = t.storage();
  form->version = t.storage()->version();
  form->dtype = t.dtype();
  ensure_meta(t).stand_in = form;
  return form;
}

std::shared_ptr<const SavedForm> compressed(const Tensor& t, nn::SavedCompression compression) {
  const auto kind = compression == nn::SavedCompression::bf16 ? SavedForm::Kind::bf16 : SavedForm::Kind::int8;
  if (auto shared = shared_stand_in(t, kind)) return shared;
  const std::shared_ptr<SavedForm> form = stand_in_for(t, kind);
  const MemoryTagScope tag(MemoryTag::activation);  // the compressed copy is what backward keeps
  if (kind == SavedForm::Kind::bf16)
    form->data = detach(t).to(DType::bf16);
  else
    form->codes = encode_per_channel_u8(detach(t));
  return form;
}

// Whether moving a feature map to host memory frees its device memory: it must be the whole of its
// storage (a view's storage stays alive for the rest of it) and contiguous (the copies move one
// buffer). Any dtype: the copies move bytes.
bool offloadable(const Tensor& t, bool activation) {
  return feature_map(t, activation) && t.is_contiguous() && t.nbytes() == t.storage()->bytes();
}

std::shared_ptr<const SavedForm> offloaded(const Tensor& t) {
  if (auto shared = shared_stand_in(t, SavedForm::Kind::offloaded)) return shared;
  const std::shared_ptr<SavedForm> form = stand_in_for(t, SavedForm::Kind::offloaded);
  form->offloaded = nn::offload_saved(t);
  return form;
}

std::shared_ptr<const SavedForm> rebuilt(const Tensor& t, std::shared_ptr<const Rebuild> rebuild) {
  auto form = std::make_shared<SavedForm>();
  form->kind = SavedForm::Kind::rebuilt;
  form->rebuild = std::move(rebuild);
  form->original = t.storage();
  form->version = t.storage()->version();
  return form;
}

}  // namespace

SavedTensor::SavedTensor(const Tensor& t, bool activation) {
  if (!t.defined()) return;
  if (has_rebuild(t)) {
    form_ = rebuilt(t, meta_of(t)->rebuild);
    return;
  }
  // Whether saved feature maps are compressed is the run's ActivationSaving, set around forward and
  // backward by the training step's ActivationSavingGuard (train/step.cpp); none outside it. Read
  // here, where every op's saved tensors pass, rather than by each op (nn/README.md, "Saving less").
  const nn::SavedCompression compression = nn::activation_saving().compress;
  if (compression != nn::SavedCompression::none && compressible(t, activation)) {
    form_ = compressed(t, compression);
    return;
  }
  // Under an ActivationOffloadScope (forward with --offload activations, nn/activation_offload.h).
  if (nn::offloading_activations() && offloadable(t, activation)) {
    form_ = offloaded(t);
    return;
  }
  form_ = as_is(t);
}

SavedTensor SavedTensor::exact(const Tensor& t) {
  SavedTensor saved;
  if (t.defined()) saved.form_ = as_is(t);
  return saved;
}

Tensor SavedTensor::unpack(std::string_view op) const {
  FRUGAL_CHECK_VALUE(!released_, op, ": its saved tensors were freed by an earlier backward; to backward through the "
                     "graph a second time, pass retain_graph = true the first time");
  if (!form_) return Tensor();
  const std::shared_ptr<Storage> original = form_->kind == SavedForm::Kind::as_is ? form_->data.storage()
                                                                                 : form_->original.lock();
  FRUGAL_CHECK_VALUE(!original || original->version() == form_->version, op, ": a tensor it saved for backward was "
                     "modified in place (version ", form_->version, " when saved, ", original->version(),
                     " now); clone it before modifying it, or use the out-of-place op");
  // What is rebuilt or decompressed is an activation made again, as checkpointing's recomputed ones
  // are (nn/checkpoint.cpp): tagged so, not as the gradients backward allocates around it.
  MemoryTagScope tag(MemoryTag::activation);
  switch (form_->kind) {
    case SavedForm::Kind::as_is:
      // A ZeRO-3 parameter saved in forward has given its memory back since: its owner gathers it
      // again now (core/storage.h), in the order backward needs it, the same on every rank.
      form_->data.storage()->ensure_resident();
      return form_->data;
    case SavedForm::Kind::rebuilt: return form_->rebuild->rebuild(op);
    case SavedForm::Kind::bf16:
    case SavedForm::Kind::int8:
      if (!form_->decompressed.defined())
        form_->decompressed = form_->kind == SavedForm::Kind::bf16 ? form_->data.to(form_->dtype)
                                                                    : decode_per_channel_u8(form_->codes);
      return form_->decompressed;
    case SavedForm::Kind::offloaded: return form_->offloaded->unpack();
  }
  return Tensor();
}

Edge gradient_edge(const Tensor& t) {
  const Meta* m = meta_of(t);
  if (!m || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  return {accumulator_of(t), 0};
}

bool should_record(const std::vector<Tensor>& inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor& t : inputs)
    if (requires_grad(t)) return true;
  return false;
}

void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  node->next_edges.clear();
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  node->num_outputs = static_cast<int>(outputs.size());
  node->output_hooks.assign(outputs.size(), {});
  node->retain_grad_hooks.assign(outputs.size(), {});
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    // Integer and bool outputs (a cast to i64, say) carry no gradient, as in PyTorch.
    if (!outputs[i].defined() || !is_floating(outputs[i].dtype())) continue;
    Meta& m = ensure_meta(outputs[i]);
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = static_cast<int>(i);
  }
}

}  // namespace frugal::autograd
