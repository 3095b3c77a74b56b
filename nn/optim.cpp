// Optimizers (see optim.h): parameter bookkeeping, lazily created state, batching of parameters
// into fused kernel calls, state dicts; SGD and AdamW only translate a batch into their kernel call.
#include "nn/optim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/allocator.h"
#include "kernels/elementwise.h"
#include "kernels/optimizer.h"
#include "kernels/reduce.h"
#include "nn/autograd.h"

namespace frugal::nn {

namespace {

std::string state_key(std::size_t index, const std::string& name) { return "state." + std::to_string(index) + "." + name; }
std::string group_key(std::size_t group, const char* name) { return "param_groups." + std::to_string(group) + "." + name; }

Tensor scalar_f64(double value) { return full({}, value, {.dtype = DType::f64}); }

void check_groups(const std::vector<ParamGroup>& groups, const std::string& name) {
  std::set<const TensorImpl*> seen;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    FRUGAL_CHECK_VALUE(groups[g].lr >= 0.0, name, ": invalid learning rate ", groups[g].lr, " in group ", g);
    FRUGAL_CHECK_VALUE(groups[g].weight_decay >= 0.0, name, ": invalid weight_decay ", groups[g].weight_decay,
                       " in group ", g);
    for (const Tensor& p : groups[g].params) {
      FRUGAL_CHECK_VALUE(p.defined() && is_floating(p.dtype()) && autograd::is_leaf(p), name,
                         ": parameters must be defined floating leaf tensors (group ", g, ")");
      // The fused kernels update parameters in place, so they need their elements in one block.
      FRUGAL_CHECK_VALUE(p.is_contiguous(), name, ": parameter of shape ", shape_str(p.shape()), " is not contiguous");
      FRUGAL_CHECK_VALUE(seen.insert(p.impl_ptr().get()).second, name,
                         ": a parameter appears more than once (shape ", shape_str(p.shape()), ")");
    }
  }
  FRUGAL_CHECK_VALUE(!seen.empty(), name, ": got an empty parameter list");
}

// Reads the one number of a 0-dim (or one-element) tensor saved by state_dict().
double read_scalar(const std::map<std::string, Tensor>& dict, const std::string& key, const std::string& name) {
  const auto it = dict.find(key);
  FRUGAL_CHECK_VALUE(it != dict.end(), name, ".load_state_dict: missing key '", key, "'");
  FRUGAL_CHECK_SHAPE(it->second.numel() == 1, name, ".load_state_dict: '", key, "' should hold one number, got shape ",
                     shape_str(it->second.shape()));
  return it->second.item<double>();
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::vector<std::string> state_names, std::string name)
    : groups_(std::move(groups)), state_names_(std::move(state_names)), name_(std::move(name)) {
  check_groups(groups_, name_);
  std::size_t count = 0;
  for (const ParamGroup& group : groups_) count += group.params.size();
  state_.resize(count);
}

Tensor Optimizer::initial_state(std::size_t /*k*/, const Tensor& param) const {
  return zeros(param.shape(), {.dtype = param.dtype(), .device = param.device()});
}

void Optimizer::create_state(const Tensor& param, ParamState& state) const {
  MemoryTagScope tag(MemoryTag::optimizer);
  for (std::size_t k = 0; k < state_names_.size(); ++k) state.tensors.push_back(initial_state(k, param));
}

void Optimizer::step() {
  step_selected([](std::size_t) { return true; });
}

void Optimizer::step_parameter(std::size_t index) {
  FRUGAL_CHECK_INDEX(index < state_.size(), name_, ".step_parameter: parameter ", index, " of ", state_.size());
  step_selected([index](std::size_t i) { return i == index; });
}

void Optimizer::step_selected(const std::function<bool(std::size_t)>& selected) {
  autograd::NoGradGuard no_grad;
  std::size_t index = 0;  // the parameter's number over all groups
  for (const ParamGroup& group : groups_) {
    std::vector<Batch> batches;
    for (const Tensor& param : group.params) {
      const std::size_t number = index++;
      if (!selected(number)) continue;
      ParamState& state = state_[number];
      const Tensor grad = autograd::grad(param);
      if (!grad.defined()) continue;
      if (state.step == 0) create_state(param, state);
      ++state.step;
      auto fits = [&](const Batch& b) {
        return b.step == state.step && b.params[0].device() == param.device() && b.params[0].dtype() == param.dtype();
      };
      auto batch = std::find_if(batches.begin(), batches.end(), fits);
      if (batch == batches.end()) {
        batch = batches.insert(batches.end(), Batch());
        batch->state.resize(state_names_.size());
        batch->step = state.step;
      }
      batch->params.push_back(param);
      batch->grads.push_back(grad.contiguous());  // the kernels read gradients as flat arrays
      for (std::size_t k = 0; k < state_names_.size(); ++k) batch->state[k].push_back(state.tensors[k]);
    }
    for (const Batch& batch : batches) update(group, batch);
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const ParamGroup& group : groups_)
    for (const Tensor& param : group.params) {
      if (set_to_none) {
        autograd::set_grad(param, Tensor());
      } else if (Tensor grad = autograd::grad(param); grad.defined()) {
        grad.fill_(0.0);
      }
    }
}

void copy_group_settings(const Optimizer& from, Optimizer& to) {
  FRUGAL_CHECK(from.param_groups().size() == to.param_groups().size(), "copy_group_settings: ",
               from.param_groups().size(), " groups into ", to.param_groups().size());
  for (std::size_t g = 0; g < from.param_groups().size(); ++g) {
    ParamGroup& inner = to.param_groups()[g];
    inner.lr = from.param_groups()[g].lr;
    inner.weight_decay = from.param_groups()[g].weight_decay;
    inner.initial_lr = from.param_groups()[g].initial_lr;
  }
}

StateDict group_entries(const StateDict& dict) {
  StateDict groups;
  for (const auto& [key, value] : dict)
    if (key.starts_with("param_groups.")) groups.emplace_back(key, value);
  return groups;
}

StateDict Optimizer::state_dict() const {
  StateDict dict;
  for (std::size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].step == 0) continue;
    for (std::size_t k = 0; k < state_names_.size(); ++k) dict.emplace_back(state_key(i, state_names_[k]), state_[i].tensors[k]);
    dict.emplace_back(state_key(i, "step"), full({}, static_cast<double>(state_[i].step), {.dtype = DType::i64}));
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    dict.emplace_back(group_key(g, "lr"), scalar_f64(groups_[g].lr));
    dict.emplace_back(group_key(g, "weight_decay"), scalar_f64(groups_[g].weight_decay));
    if (groups_[g].initial_lr) dict.emplace_back(group_key(g, "initial_lr"), scalar_f64(*groups_[g].initial_lr));
  }
  return dict;
}

void Optimizer::load_state_dict(const StateDict& dict) {
  std::map<std::string, Tensor> remaining(dict.begin(), dict.end());
  auto take_scalar = [&](const std::string& key) {
    const double value = read_scalar(remaining, key, name_);
    remaining.erase(key);
    return value;
  };
  // Everything is read into copies first, so a dict that does not fit changes nothing.
  std::vector<ParamGroup> groups = groups_;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    groups[g].lr = take_scalar(group_key(g, "lr"));
    groups[g].weight_decay = take_scalar(group_key(g, "weight_decay"));
    const std::string initial = group_key(g, "initial_lr");
    groups[g].initial_lr = remaining.contains(initial) ? std::optional(take_scalar(initial)) : std::nullopt;
  }
  check_groups(groups, name_);
  std::vector<ParamState> state(state_.size());
  std::size_t index = 0;
  for (const ParamGroup& group : groups)
    for (const Tensor& param : group.params) {
      ParamState& s = state[index];
      const std::string step = state_key(index++, "step");
      if (!remaining.contains(step)) continue;  // this parameter had not taken a step
      s.step = static_cast<std::int64_t>(take_scalar(step));
      FRUGAL_CHECK_VALUE(s.step > 0, name_, ".load_state_dict: '", step, "' is ", s.step, ", not a step count");
      create_state(param, s);
      for (std::size_t k = 0; k < state_names_.size(); ++k) {
        const std::string key = state_key(index - 1, state_names_[k]);
        const auto it = remaining.find(key);
        FRUGAL_CHECK_VALUE(it != remaining.end(), name_, ".load_state_dict: missing key '", key, "'");
        FRUGAL_CHECK_SHAPE(it->second.shape() == s.tensors[k].shape(), name_, ".load_state_dict: '", key, "' has shape ",
                           shape_str(it->second.shape()), " but its parameter's needs ", shape_str(s.tensors[k].shape()));
        // Floating state converts (copy_ casts); codes (AdamW8bit's u8) must be codes.
        FRUGAL_CHECK_DTYPE(it->second.dtype() == s.tensors[k].dtype() ||
                               (is_floating(it->second.dtype()) && is_floating(s.tensors[k].dtype())),
                           name_, ".load_state_dict: '", key, "' is ", it->second.dtype(), " but its parameter's is ",
                           s.tensors[k].dtype());
        s.tensors[k].copy_(it->second);
        remaining.erase(it);
      }
    }
  FRUGAL_CHECK_VALUE(remaining.empty(), name_, ".load_state_dict: unexpected key '", remaining.begin()->first,
                     "' (a dict of another optimizer, or of other parameters?)");
  groups_ = std::move(groups);
  state_ = std::move(state);
}

std::size_t Optimizer::state_bytes() const {
  std::size_t bytes = 0;
  for (const ParamState& s : state_)
    for (const Tensor& t : s.tensors) bytes += t.nbytes();
  return bytes;
}

// ---- SGD

SGD::SGD(std::vector<ParamGroup> groups, double momentum, double dampening, bool nesterov)
    : Optimizer(std::move(groups), momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{},
                "SGD"),
      momentum_(momentum),
      dampening_(dampening),
      nesterov_(nesterov) {
  FRUGAL_CHECK_VALUE(momentum >= 0.0, "SGD: invalid momentum ", momentum);
  FRUGAL_CHECK_VALUE(!nesterov || (momentum > 0.0 && dampening == 0.0),
                     "SGD: nesterov momentum requires a momentum > 0 and zero dampening, got momentum ", momentum,
                     " and dampening ", dampening);
}

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double dampening, double weight_decay, bool nesterov)
    : SGD(std::vector<ParamGroup>{{.params = std::move(params), .lr = lr, .weight_decay = weight_decay}}, momentum, dampening,
          nesterov) {}

void SGD::update(const ParamGroup& group, const Batch& batch) {
  const SgdConfig config{.lr = group.lr,
                         .momentum = momentum_,
                         .dampening = dampening_,
                         .weight_decay = group.weight_decay,
                         .nesterov = nesterov_,
                         .first_step = batch.step == 1};
  sgd_step(batch.params, batch.grads, batch.state.empty() ? std::span<const Tensor>() : batch.state[0], config);
}

// ---- AdamW

AdamW::AdamW(std::vector<ParamGroup> groups, std::pair<double, double> betas, double eps)
    : AdamW(std::move(groups), betas, eps, {"exp_avg", "exp_avg_sq"}, "AdamW") {}

AdamW::AdamW(std::vector<ParamGroup> groups, std::pair<double, double> betas, double eps, std::vector<std::string> state_names,
             std::string name)
    : Optimizer(std::move(groups), std::move(state_names), name), beta1_(betas.first), beta2_(betas.second), eps_(eps) {
  FRUGAL_CHECK_VALUE(beta1_ >= 0.0 && beta1_ < 1.0, name, ": invalid beta parameter at index 0: ", beta1_);
  FRUGAL_CHECK_VALUE(beta2_ >= 0.0 && beta2_ < 1.0, name, ": invalid beta parameter at index 1: ", beta2_);
  FRUGAL_CHECK_VALUE(eps >= 0.0, name, ": invalid epsilon value ", eps);
}

AdamWConfig AdamW::config(const ParamGroup& group, const Batch& batch) const {
  return {.lr = group.lr, .beta1 = beta1_, .beta2 = beta2_, .eps = eps_, .weight_decay = group.weight_decay, .step = batch.step};
}

AdamW::AdamW(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps, double weight_decay)
    : AdamW(std::vector<ParamGroup>{{.params = std::move(params), .lr = lr, .weight_decay = weight_decay}}, betas, eps) {}

void AdamW::update(const ParamGroup& group, const Batch& batch) {
  adamw_step(batch.params, batch.grads, batch.state[0], batch.state[1], config(group, batch));
}

// ---- AdamW8bit

AdamW8bit::AdamW8bit(std::vector<ParamGroup> groups, std::pair<double, double> betas, double eps)
    : AdamW(std::move(groups), betas, eps, {"exp_avg_codes", "exp_avg_sq_codes", "exp_avg_scales", "exp_avg_sq_scales"},
            "AdamW8bit") {
  for (const ParamGroup& group : param_groups())
    for (const Tensor& p : group.params)
      FRUGAL_CHECK_DTYPE(p.dtype() == DType::f32, "AdamW8bit: a parameter of shape ", shape_str(p.shape()), " is ",
                         p.dtype(), "; 8-bit moments are kept for f32 parameters");
}

AdamW8bit::AdamW8bit(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps, double weight_decay)
    : AdamW8bit(std::vector<ParamGroup>{{.params = std::move(params), .lr = lr, .weight_decay = weight_decay}}, betas, eps) {}

Tensor AdamW8bit::initial_state(std::size_t k, const Tensor& param) const {
  const bool codes = k < 2;  // the state names' order: two code tensors, then their two scale tensors
  return zeros({codes ? param.numel() : quant_blocks(param.numel())},
               {.dtype = codes ? DType::u8 : DType::f32, .device = param.device()});
}

void AdamW8bit::update(const ParamGroup& group, const Batch& batch) {
  adamw8bit_step(batch.params, batch.grads, batch.state[0], batch.state[1], batch.state[2], batch.state[3],
                 config(group, batch));
}

// ---- Adafactor

namespace {
// The matrix Adafactor sees a parameter as: [d0, numel / d0]; a vector is [n, 1].
Shape factored_shape(const Tensor& param) {
  const std::int64_t rows = param.dim() == 0 ? 1 : param.size(0);
  return {rows, rows == 0 ? 0 : param.numel() / rows};
}
Tensor rms(const Tensor& x) { return sqrt(mean(mul(x, x))); }
// torch.finfo(dtype).eps: the gap above 1 in the parameter's own dtype.
double epsilon_of(DType dtype) {
  switch (dtype) {
    case DType::f64: return std::numeric_limits<double>::epsilon();
    case DType::f16: return 0.0009765625;  // 2^-10
    case DType::bf16: return 0.0078125;    // 2^-7
    default: return std::numeric_limits<float>::epsilon();
  }
}
Tensor at_least(const Tensor& x, double floor) { return clamp(x, floor, std::numeric_limits<double>::infinity()); }
// a + w (b - a), what torch's lerp_ leaves in a.
Tensor lerp(const Tensor& a, const Tensor& b, double w) { return add(a, mul(sub(b, a), w)); }
}  // namespace

Adafactor::Adafactor(std::vector<ParamGroup> groups, Options options)
    : Optimizer(std::move(groups), {"row_var", "col_var"}, "Adafactor"), options_(options) {
  FRUGAL_CHECK_VALUE(options_.beta2_decay <= 0.0, "Adafactor: beta2_decay must be <= 0, got ", options_.beta2_decay);
  FRUGAL_CHECK_VALUE(options_.eps1.value_or(0.0) >= 0.0 && options_.eps2 >= 0.0, "Adafactor: invalid epsilon values ",
                     options_.eps1.value_or(0.0), " and ", options_.eps2);
  FRUGAL_CHECK_VALUE(options_.d > 0.0, "Adafactor: the clipping threshold d must be positive, got ", options_.d);
}

Adafactor::Adafactor(std::vector<Tensor> params, double lr, double weight_decay)
    : Adafactor(std::vector<ParamGroup>{{.params = std::move(params), .lr = lr, .weight_decay = weight_decay}}, Options{}) {}

Tensor Adafactor::initial_state(std::size_t k, const Tensor& param) const {
  const Shape matrix = factored_shape(param);
  return zeros({matrix[k]}, {.dtype = param.dtype(), .device = param.device()});  // k 0: a value per row, 1: per column
}

void Adafactor::update(const ParamGroup& group, const Batch& batch) {
  const auto t = static_cast<double>(batch.step);
  const double toward = std::pow(t, options_.beta2_decay);  // how far the moments move toward this step's
  const double rho = std::min(group.lr, 1.0 / std::sqrt(t));  // the step relative to the weights' RMS
  for (std::size_t i = 0; i < batch.params.size(); ++i) {
    Tensor param = batch.params[i], row_var = batch.state[0][i], col_var = batch.state[1][i];  // handles on the same memory
    const Shape matrix = factored_shape(param);
    const Tensor grad = batch.grads[i].view(matrix);
    const double eps1 = options_.eps1.value_or(epsilon_of(param.dtype()));
    const Tensor alpha = mul(at_least(rms(param), options_.eps2), rho);  // before the decay, as torch
    if (group.weight_decay != 0.0) param.copy_(mul(param, 1.0 - group.lr * group.weight_decay));
    // The running means; each temporary the size of the parameter is dropped as soon as the next is
    // made, so at most two are alive at once (this may run inside backward: nn/optimizer_in_backward.h).
    Tensor x;
    if (matrix[1] == 1) {  // a vector: its full second moment, as torch keeps it (col_var is not used)
      row_var.copy_(lerp(row_var, mul(grad, grad).view({matrix[0]}), toward));
      x = row_var.view(matrix);
    } else {
      {
        const Tensor squared = mul(grad, grad);
        row_var.copy_(lerp(row_var, mean(squared, {1}), toward));
        col_var.copy_(lerp(col_var, mean(squared, {0}), toward));
      }
      const Tensor row_scaled = div(row_var, at_least(mean(row_var), eps1));
      x = mul(row_scaled.view({matrix[0], 1}), col_var.view({1, matrix[1]}));  // the estimate of every element's
    }
    x = at_least(x, eps1 * eps1);
    x = rsqrt(x);
    x = mul(x, grad);                                                    // the update
    x = mul(x, div(alpha, at_least(div(rms(x), options_.d), 1.0)));    // its RMS at most d, times the step
    param.copy_(sub(param, x.view(param.shape())));
  }
}

}  // namespace frugal::nn
