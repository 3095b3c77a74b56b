// nn/module.h: registration, the walks over the tree, moving in place, and state dicts.
#include "nn/module.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "nn/autograd.h"

namespace frugal::nn {

// ---- module call observers ----------------------------------------------------------------------

namespace {
thread_local std::vector<ModuleCallObserver*> t_observers;  // innermost last

// Tells every observer that `module`'s call ended, however it ended.
struct CallEnd {
  const Module& module;
  const Tensor* output = nullptr;
  ~CallEnd() {
    for (auto it = t_observers.rbegin(); it != t_observers.rend(); ++it) (*it)->after_call(module, output);
  }
};
}  // namespace

ModuleCallObserverScope::ModuleCallObserverScope(ModuleCallObserver& observer) : observer_(&observer) {
  t_observers.push_back(&observer);
}
// Removes its own observer, the last entry for it: scopes that end out of order (one owned by an
// object that outlives a later scope) still leave every other observer in force.
ModuleCallObserverScope::~ModuleCallObserverScope() {
  const auto it = std::find(t_observers.rbegin(), t_observers.rend(), observer_);
  if (it != t_observers.rend()) t_observers.erase(std::next(it).base());
}

bool module_calls_observed() { return !t_observers.empty(); }

Tensor Module::operator()(const Tensor& x) {
  if (t_observers.empty()) return forward(x);
  return observed_call([&] { return forward(x); });
}

Tensor Module::observed_call(const std::function<Tensor()>& body) {
  for (auto it = t_observers.rbegin(); it != t_observers.rend(); ++it) (*it)->before_call(*this);
  Tensor y;  // declared first, so it outlives `end`, which reads it
  CallEnd end{*this};
  y = body();
  end.output = &y;
  return y;
}

namespace {

std::string join(const std::string& prefix, const std::string& name) { return prefix.empty() ? name : prefix + "." + name; }

// Parameters and buffers live in param-tagged memory, whoever allocated them.
void move_to_param_memory(const Tensor& t) {
  if (t.storage()->tag() == MemoryTag::param) return;
  MemoryTagScope scope(MemoryTag::param);
  t.set_data(t.clone());
}

// One registered tensor to a new device or dtype, in place; its gradient follows it.
void convert(const Tensor& t, Device device, DType dtype) {
  Tensor moved_grad;
  if (const Tensor g = autograd::grad(t); g.defined()) {
    MemoryTagScope scope(MemoryTag::grad);
    moved_grad = g.to(device, dtype);
  }
  {
    MemoryTagScope scope(MemoryTag::param);
    t.set_data(t.to(device, dtype));
  }
  if (moved_grad.defined()) autograd::set_grad(t, moved_grad);
}

// A load error names at most this many keys per kind: a state dict of another model misses hundreds,
// and one line that names the first few and counts the rest is what a reader can use.
constexpr std::size_t kNamedKeys = 8;

std::string quoted(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < std::min(names.size(), kNamedKeys); ++i) {
    out += i == 0 ? "\"" : ", \"";
    out += printable(names[i], 120);  // a name from a file: never its raw control bytes
    out += '"';
  }
  if (names.size() > kNamedKeys) out += detail::str(", ... (", names.size(), " in all)");
  return out;
}

}  // namespace

// ---- registration

void Module::check_new_name(const std::string& name) const {
  FRUGAL_CHECK_VALUE(!name.empty() && name.find('.') == std::string::npos, type_name_,
                     ": a parameter, buffer or module name must be non-empty and have no '.', got \"", name, "\"");
  bool taken = false;
  for (const auto& [existing, t] : parameters_) taken = taken || existing == name;
  for (const auto& [existing, t] : buffers_) taken = taken || existing == name;
  for (const auto& [existing, m] : children_) taken = taken || existing == name;
  FRUGAL_CHECK_VALUE(!taken, type_name_, ": the name \"", name, "\" is already registered");
}

Tensor Module::register_parameter(std::string name, Tensor tensor) {
  check_new_name(name);
  FRUGAL_CHECK_VALUE(tensor.defined(), type_name_, ": parameter \"", name, "\" is undefined");
  autograd::set_requires_grad(tensor);  // DTypeError unless floating, ValueError unless a leaf
  move_to_param_memory(tensor);
  parameters_.emplace_back(std::move(name), tensor);
  return tensor;
}

Tensor Module::register_buffer(std::string name, Tensor tensor) {
  check_new_name(name);
  FRUGAL_CHECK_VALUE(tensor.defined(), type_name_, ": buffer \"", name, "\" is undefined");
  FRUGAL_CHECK_VALUE(!autograd::requires_grad(tensor), type_name_, ": buffer \"", name,
                     "\" requires grad; a tensor that learns is a parameter");
  move_to_param_memory(tensor);
  buffers_.emplace_back(std::move(name), tensor);
  return tensor;
}

void Module::add_child(std::string name, std::shared_ptr<Module> module) {
  check_new_name(name);
  FRUGAL_CHECK_VALUE(module != nullptr, type_name_, ": module \"", name, "\" is null");
  children_.emplace_back(std::move(name), std::move(module));
}

// ---- the tree

std::vector<std::pair<std::string, const Module*>> Module::walk(bool deduplicate) const {
  std::vector<std::pair<std::string, const Module*>> out;
  std::unordered_set<const Module*> seen;
  const auto visit = [&](const auto& self, const std::string& prefix, const Module& m) -> void {
    if (deduplicate && !seen.insert(&m).second) return;
    out.emplace_back(prefix, &m);
    for (const auto& [name, child] : m.children_) self(self, join(prefix, name), *child);
  };
  visit(visit, "", *this);
  return out;
}

NamedTensors Module::unique_tensors(bool parameters) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& [prefix, m] : walk(true))
    for (const auto& [name, t] : parameters ? m->parameters_ : m->buffers_)
      if (seen.insert(t.impl_ptr().get()).second) out.emplace_back(join(prefix, name), t);
  return out;
}

NamedTensors Module::all_tensors() const {
  NamedTensors out;
  for (const auto& [prefix, m] : walk(false)) {
    for (const auto& [name, t] : m->parameters_) out.emplace_back(join(prefix, name), t);
    for (const auto& [name, t] : m->buffers_) out.emplace_back(join(prefix, name), t);
  }
  return out;
}

NamedTensors Module::named_parameters() const { return unique_tensors(true); }
NamedTensors Module::named_buffers() const { return unique_tensors(false); }
std::vector<std::pair<std::string, const Module*>> Module::named_modules() const { return walk(true); }

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(std::move(t));
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers()) out.push_back(std::move(t));
  return out;
}

std::int64_t Module::parameter_count() const {
  std::int64_t count = 0;
  for (const Tensor& p : parameters()) count += p.numel();
  return count;
}

// ---- modes, moving, gradients

void Module::train(bool on) {
  training_ = on;
  for (const auto& [name, child] : children_) child->train(on);
}

Module& Module::to(Device device) {
  for (const Tensor& t : parameters()) convert(t, device, t.dtype());
  for (const Tensor& t : buffers()) convert(t, device, t.dtype());
  return *this;
}

Module& Module::to(DType dtype) {
  FRUGAL_CHECK_DTYPE(is_floating(dtype), type_name_, ".to: modules convert to floating dtypes only, got ", dtype);
  for (const Tensor& t : parameters()) convert(t, t.device(), dtype);
  for (const Tensor& t : buffers())
    if (is_floating(t.dtype())) convert(t, t.device(), dtype);
  return *this;
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) autograd::set_grad(p, Tensor());
}

// ---- state

StateDict Module::state_dict() const {
  StateDict state;
  for (const auto& [name, t] : all_tensors()) state.emplace_back(name, autograd::detach(t));
  return state;
}

LoadResult Module::load_state_dict(const StateDict& state, bool strict) {
  std::unordered_map<std::string_view, const Tensor*> given;
  for (const auto& [name, t] : state) {
    FRUGAL_CHECK_VALUE(t.defined(), "load_state_dict into ", type_name_, ": \"", name, "\" is undefined");
    FRUGAL_CHECK_VALUE(given.emplace(name, &t).second, "load_state_dict into ", type_name_, ": \"", name,
                       "\" appears twice in the state dict");
  }
  const NamedTensors own = all_tensors();
  std::unordered_set<std::string_view> own_names;
  LoadResult result;
  std::vector<std::string> mismatches;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    const auto it = given.find(name);
    if (it == given.end())
      result.missing_keys.push_back(name);
    else if (it->second->shape() != t.shape())
      mismatches.push_back(detail::str("\"", name, "\" is ", shape_str(it->second->shape()), " in the state dict but ",
                                       shape_str(t.shape()), " in the module"));
  }
  for (const auto& [name, t] : state)
    if (!own_names.contains(name)) result.unexpected_keys.push_back(name);

  const bool report_keys = strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty());
  if (report_keys || !mismatches.empty()) {
    std::string problems;
    const auto add = [&](const std::string& what, const std::string& list) {
      if (!list.empty()) problems += (problems.empty() ? "" : "; ") + what + ": " + list;
    };
    if (strict) {
      add("missing keys", quoted(result.missing_keys));
      add("unexpected keys", quoted(result.unexpected_keys));
    }
    std::string shapes;
    for (std::size_t i = 0; i < std::min(mismatches.size(), kNamedKeys); ++i) shapes += (i == 0 ? "" : ", ") + mismatches[i];
    if (mismatches.size() > kNamedKeys) shapes += detail::str(", ... (", mismatches.size(), " in all)");
    add("shape mismatches", shapes);
    FRUGAL_THROW(ValueError, "load_state_dict into ", type_name_, ": ", problems, " (nothing was loaded)");
  }

  autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    const auto it = given.find(name);
    if (it == given.end()) continue;
    Tensor destination = t;  // a handle on the module's own memory
    destination.copy_(*it->second);
  }
  return result;
}

}  // namespace frugal::nn
