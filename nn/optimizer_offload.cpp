// The optimizer offloaded to host memory (see optimizer_offload.h).
#include "nn/optimizer_offload.h"

#include <utility>

#include "core/allocator.h"
#include "core/error.h"
#include "core/stream.h"
#include "nn/autograd.h"

namespace frugal::nn {

namespace {

// A pinned host tensor of `like`'s shape and dtype, under `tag` in the pinned allocator's books.
Tensor pinned_like(const Tensor& like, MemoryTag tag) {
  const MemoryTagScope scope(tag);
  return empty(like.shape(), {.dtype = like.dtype(), .device = Device::cpu(), .pinned = true});
}

void check_copyable(const Tensor& t, const char* what) {
  FRUGAL_CHECK_VALUE(t.is_contiguous(), "offloaded optimizer: a ", what, " of shape ", shape_str(t.shape()),
                     " is not contiguous; the copies to and from the host move whole buffers");
}

}  // namespace

OffloadedOptimizer::OffloadedOptimizer(std::vector<ParamGroup> groups, const MakeInner& make)
    : Optimizer(groups, {}, "offloaded") {
  std::vector<ParamGroup> host_groups;
  for (const ParamGroup& group : groups) {
    ParamGroup host = group;
    host.params.clear();
    for (const Tensor& p : group.params) {
      check_copyable(p, "parameter");
      params_.push_back(p);
      // On the meta device the inner optimizer keeps the meta parameters: it never steps there.
      host_params_.push_back(p.device().is_meta() ? p : pinned_like(p, MemoryTag::optimizer));
      host_grads_.push_back(p.device().is_meta() ? Tensor() : pinned_like(p, MemoryTag::grad));
      host.params.push_back(host_params_.back());
    }
    host_groups.push_back(std::move(host));
  }
  const PinnedHostScope host;
  inner_ = make(std::move(host_groups));
  FRUGAL_CHECK(inner_ != nullptr, "offloaded optimizer: no inner optimizer was made");
}

std::size_t OffloadedOptimizer::staging_bytes() const {
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (host_grads_[i].defined()) bytes += host_params_[i].nbytes() + host_grads_[i].nbytes();
  return bytes;
}

void OffloadedOptimizer::step() {
  if (params_.empty() || params_.front().device().is_meta()) return;  // the planner: no host side to plan
  autograd::NoGradGuard no_grad;
  copy_group_settings(*this, *inner_);  // the groups' lr and weight decay are set here, by schedules
  const Device device = params_.front().device();
  const Stream stream = side_stream(device, kOffloadStreamSlot);
  // 1. Backward's kernels run on the default stream, which the side stream does not wait for: the
  // host waits for them, then queues every parameter's and gradient's copy to the host.
  synchronize_stream(device, Stream{});
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor grad = autograd::grad(params_[i]);
    if (!grad.defined()) {
      autograd::set_grad(host_params_[i], Tensor());  // no gradient: the inner optimizer skips it, as PyTorch
      continue;
    }
    check_copyable(grad, "gradient");
    copy_bytes_async(host_params_[i].data_ptr(), Device::cpu(), params_[i].data_ptr(), device, params_[i].nbytes(), stream);
    copy_bytes_async(host_grads_[i].data_ptr(), Device::cpu(), grad.data_ptr(), device, grad.nbytes(), stream);
    autograd::set_grad(host_params_[i], host_grads_[i]);
  }
  synchronize_stream(device, stream);
  // 2. Each parameter updated on the host, and its copy back queued at once: the copies of the
  // earlier ones run while the host updates the later ones.
  const PinnedHostScope host;  // the inner optimizer's state and temporaries: page-locked host memory
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!autograd::grad(host_params_[i]).defined()) continue;
    inner_->step_parameter(i);
    copy_bytes_async(params_[i].data_ptr(), device, host_params_[i].data_ptr(), Device::cpu(), params_[i].nbytes(), stream);
  }
  // 3. The next forward reads the parameters on the default stream.
  synchronize_stream(device, stream);
  for (const Tensor& p : params_) p.storage()->bump_version();  // written in place, as every optimizer does
}

StateDict OffloadedOptimizer::state_dict() const {
  StateDict dict;
  {
    const PinnedHostScope host;  // the step counts it makes are host tensors, as the state is
    dict = inner_->state_dict();
  }
  // The groups' lr and weight decay are this optimizer's (schedules set them here; the inner one has
  // them from the last step only): its own dict holds just those, having no state of its own.
  std::erase_if(dict, [](const auto& entry) { return entry.first.starts_with("param_groups."); });
  for (auto& entry : group_entries(Optimizer::state_dict())) dict.push_back(std::move(entry));
  return dict;
}

void OffloadedOptimizer::load_state_dict(const StateDict& dict) {
  {
    const PinnedHostScope host;
    inner_->load_state_dict(dict);
  }  // checks every key: nothing changes unless everything fits
  Optimizer::load_state_dict(group_entries(dict));  // this optimizer's own: the groups' settings schedules set
}

void OffloadedOptimizer::update(const ParamGroup&, const Batch&) {
  FRUGAL_THROW(Error, "offloaded optimizer: step() updates through the inner optimizer, never through update()");
}

}  // namespace frugal::nn
