// Differentiable ops (nn/functional.h): each runs its kernel, and when recording, saves what its
// backward reads and states that backward in terms of kernels (nn/function.h explains the form).
#include "nn/functional.h"

#include <limits>
#include <numeric>
#include <optional>

#include "kernels/activation_codec.h"
#include "kernels/activation_codec_ops.h"  // kReLU6Top
#include "kernels/batch_norm.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "nn/amp.h"
#include "nn/function.h"
#include "nn/saved_activations.h"

namespace frugal::functional {

using autograd::Grads;
using autograd::Recorder;
using autograd::Saved;
using autograd::SavedTensor;

namespace {

// The gradient of a broadcast operand: g summed over the dims along which the operand was expanded.
Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const std::int64_t lead = g.dim() - static_cast<std::int64_t>(shape.size());
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[static_cast<std::size_t>(d - lead)] == 1 && g.size(d) != 1)) dims.push_back(d);
  return frugal::sum(g, dims, true).reshape(shape);
}

// A reduction's gradient spread back over the reduced dims (a stride-0 view: no memory).
Tensor expand_back(const Tensor& g, const Shape& input_shape, std::vector<std::int64_t> dims, bool keepdim) {
  if (dims.empty()) {
    dims.resize(input_shape.size());
    std::iota(dims.begin(), dims.end(), 0);
  }
  Shape kept = input_shape;
  for (std::int64_t& d : dims) kept[static_cast<std::size_t>(wrap_dim(d, static_cast<std::int64_t>(kept.size())))] = 1;
  return (keepdim ? g : g.reshape(kept)).expand(input_shape);
}

std::int64_t count_reduced(const Shape& shape, const std::vector<std::int64_t>& dims) {
  if (dims.empty()) return shape_numel(shape);
  std::int64_t count = 1;
  for (std::int64_t d : dims) count *= shape[static_cast<std::size_t>(wrap_dim(d, static_cast<std::int64_t>(shape.size())))];
  return count;
}

// x's gradient through an elementwise op whose backward reads one saved tensor.
template <typename Forward, typename Backward>
Tensor unary_op(const char* name, const Tensor& x, Forward forward, Backward backward, bool save_output) {
  Recorder op(name, {x});
  Tensor y = forward(x);
  return op.finish(y, {save_output ? y : x}, [backward](const Grads& g, const Saved& s) { return Grads{backward(g[0], s[0])}; });
}

// Autocast (nn/amp.h): f32 operands of the low-precision ops go down to the autocast dtype, and
// low-precision operands of the f32 ops come back up; outside autocast both are the identity.
Tensor autocast_low(const Tensor& t) {
  const std::optional<DType> low = nn::autocast_dtype();
  return low && t.defined() && t.dtype() == DType::f32 ? to(t, *low) : t;
}
// The autocast copies an op makes of its operands are what it saves: allocate them as activations
// whenever the op records, also the copy of an operand that needs no gradient itself (an input batch).
std::optional<MemoryTagScope> tag_saved_casts(const std::vector<Tensor>& operands) {
  if (!nn::autocast_dtype() || !autograd::should_record(operands)) return std::nullopt;
  return std::optional<MemoryTagScope>(std::in_place, MemoryTag::activation);
}
Tensor autocast_f32(const Tensor& t) {
  const bool low_precision = t.defined() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16);
  return nn::autocast_dtype() && low_precision ? to(t, DType::f32) : t;
}

}  // namespace

// ---- elementwise

namespace {

// A sum made again from its addends (add_rebuilt): a residual sum of a block's input and its last
// BatchNorm's output, both of which can be rebuilt, so the next block's first convolution need not
// keep the sum.
class SumRebuild final : public autograd::Rebuild {
 public:
  SumRebuild(const Tensor& a, const Tensor& b) : a_(a), b_(b) {}
  Tensor rebuild(std::string_view op) const override { return frugal::add(a_.unpack(op), b_.unpack(op)); }

 private:
  SavedTensor a_, b_;
};

}  // namespace

namespace {
Tensor add_impl(const Tensor& a, const Tensor& b, bool rebuilt) {
  Recorder op("add", {a, b});
  Tensor sum = frugal::add(a, b);
  // Only where an addend is itself rebuilt: otherwise keeping the addends would cost what the sum does.
  if (rebuilt && op.recording() && a.shape() == b.shape() && (autograd::has_rebuild(a) || autograd::has_rebuild(b)))
    autograd::set_rebuild(sum, std::make_shared<SumRebuild>(a, b));
  return op.finish(sum, {}, [sa = a.shape(), sb = b.shape()](const Grads& g, const Saved&) {
    return Grads{sum_to(g[0], sa), sum_to(g[0], sb)};
  });
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return add_impl(a, b, false); }

Tensor add_rebuilt(const Tensor& a, const Tensor& b) { return add_impl(a, b, true); }

Tensor sub(const Tensor& a, const Tensor& b) {
  Recorder op("sub", {a, b});
  return op.finish(frugal::sub(a, b), {}, [sa = a.shape(), sb = b.shape()](const Grads& g, const Saved&) {
    return Grads{sum_to(g[0], sa), sum_to(frugal::neg(g[0]), sb)};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Recorder op("mul", {a, b});
  return op.finish(frugal::mul(a, b), {a, b}, [needs = op.needs_grad()](const Grads& g, const Saved& s) {
    return Grads{needs[0] ? sum_to(frugal::mul(g[0], s[1]), s[0].shape()) : Tensor(),
                 needs[1] ? sum_to(frugal::mul(g[0], s[0]), s[1].shape()) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Recorder op("div", {a, b});
  return op.finish(frugal::div(a, b), {a, b}, [needs = op.needs_grad()](const Grads& g, const Saved& s) {
    const Tensor ga = frugal::div(g[0], s[1]);  // d(a/b)/da = 1/b;  d(a/b)/db = -a/b^2 = -(g/b) * a / b
    return Grads{needs[0] ? sum_to(ga, s[0].shape()) : Tensor(),
                 needs[1] ? sum_to(frugal::neg(frugal::div(frugal::mul(ga, s[0]), s[1])), s[1].shape()) : Tensor()};
  });
}

Tensor add(const Tensor& x, double s) {
  Recorder op("add_scalar", {x});
  return op.finish(frugal::add(x, s), {}, [](const Grads& g, const Saved&) { return Grads{g[0]}; });
}

Tensor mul(const Tensor& x, double s) {
  Recorder op("mul_scalar", {x});
  return op.finish(frugal::mul(x, s), {}, [s](const Grads& g, const Saved&) { return Grads{frugal::mul(g[0], s)}; });
}

Tensor neg(const Tensor& x) {
  Recorder op("neg", {x});
  return op.finish(frugal::neg(x), {}, [](const Grads& g, const Saved&) { return Grads{frugal::neg(g[0])}; });
}

Tensor exp(const Tensor& x) {
  return unary_op("exp", x, [](const Tensor& t) { return frugal::exp(t); },
                  [](const Tensor& g, const Tensor& y) { return frugal::mul(g, y); }, true);
}

Tensor log(const Tensor& x) {
  return unary_op("log", x, [](const Tensor& t) { return frugal::log(t); },
                  [](const Tensor& g, const Tensor& t) { return frugal::div(g, t); }, false);
}

Tensor sqrt(const Tensor& x) {
  return unary_op("sqrt", x, [](const Tensor& t) { return frugal::sqrt(t); },
                  [](const Tensor& g, const Tensor& y) { return frugal::div(frugal::mul(g, 0.5), y); }, true);
}

Tensor pow(const Tensor& x, double p) {
  return unary_op("pow", x, [p](const Tensor& t) { return frugal::pow(t, p); },
                  [p](const Tensor& g, const Tensor& t) {
                    // x^0 is constant: its gradient is zero, even at x = 0 where p x^(p-1) = 0 * inf
                    if (p == 0.0) return frugal::mul(g, 0.0);
                    return frugal::mul(frugal::mul(g, frugal::pow(t, p - 1)), p);
                  },
                  false);
}

namespace {

constexpr double kReLUTop = std::numeric_limits<double>::infinity();  // ReLU's mask: 0 < y

// With bit masks (the caller's ActivationSaving, nn/saved_activations.h) a ReLU or ReLU6 keeps its
// mask, 0 < y < top, as 1 bit per element instead of its output: the output then lives only as long
// as the next layer needs it (a pooling layer keeps nothing of it), and the gradient is the same (the
// rule is strict at both edges).
template <typename Forward>
Tensor masked_by_bits(const char* name, const Tensor& x, Forward forward, double top) {
  Recorder op(name, {x});
  Tensor y = forward(x);
  const Tensor bits = op.recording() ? pack_mask_between(y, 0.0, top) : Tensor();
  return op.finish(y, {bits}, [](const Grads& g, const Saved& s) { return Grads{apply_packed_mask(g[0], s[0])}; });
}

}  // namespace

Tensor relu(const Tensor& x, const nn::ActivationSaving& saving) {
  if (saving.bit_masks) return masked_by_bits("relu", x, [](const Tensor& t) { return frugal::relu(t); }, kReLUTop);
  return unary_op("relu", x, [](const Tensor& t) { return frugal::relu(t); },
                  [](const Tensor& g, const Tensor& y) { return frugal::relu_backward(g, y); }, true);
}

Tensor relu6(const Tensor& x, const nn::ActivationSaving& saving) {
  if (saving.bit_masks) return masked_by_bits("relu6", x, [](const Tensor& t) { return frugal::relu6(t); }, kReLU6Top);
  return unary_op("relu6", x, [](const Tensor& t) { return frugal::relu6(t); },
                  [](const Tensor& g, const Tensor& y) { return frugal::relu6_backward(g, y); }, true);
}

Tensor sigmoid(const Tensor& x) {
  return unary_op("sigmoid", x, [](const Tensor& t) { return frugal::sigmoid(t); },
                  [](const Tensor& g, const Tensor& y) { return frugal::sigmoid_backward(g, y); }, true);
}

Tensor tanh(const Tensor& x) {
  return unary_op("tanh", x, [](const Tensor& t) { return frugal::tanh(t); },
                  [](const Tensor& g, const Tensor& y) { return frugal::tanh_backward(g, y); }, true);
}

namespace {
// An in-place activation: x's values are replaced, and x's history continues through a new node
// whose input is x's previous history. Its output is x itself, saved at its new version.
// With bit masks it saves the mask 0 < x < `mask_top` as bits instead (masked_by_bits above).
template <typename Apply, typename Backward>
Tensor& in_place(const char* name, Tensor& x, Apply apply, Backward backward, double mask_top, bool bit_masks) {
  FRUGAL_CHECK_VALUE(!(autograd::requires_grad(x) && autograd::is_leaf(x) && autograd::grad_mode_enabled()), name,
                     ": a leaf that requires grad cannot be modified in place (its gradient would be wrong)");
  Recorder op(name, {x});
  apply(x);
  if (bit_masks) {
    const Tensor bits = op.recording() ? pack_mask_between(x, 0.0, mask_top) : Tensor();
    op.finish(x, {bits}, [](const Grads& g, const Saved& s) { return Grads{apply_packed_mask(g[0], s[0])}; });
    return x;
  }
  op.finish(x, {x}, [backward](const Grads& g, const Saved& s) { return Grads{backward(g[0], s[0])}; });
  return x;
}
}  // namespace

Tensor& relu_(Tensor& x, const nn::ActivationSaving& saving) {
  return in_place("relu_", x, [](Tensor& t) { frugal::relu_(t); },
                  [](const Tensor& g, const Tensor& y) { return frugal::relu_backward(g, y); }, kReLUTop,
                  saving.bit_masks);
}

Tensor& relu6_(Tensor& x, const nn::ActivationSaving& saving) {
  return in_place("relu6_", x, [](Tensor& t) { frugal::relu6_(t); },
                  [](const Tensor& g, const Tensor& y) { return frugal::relu6_backward(g, y); }, kReLU6Top,
                  saving.bit_masks);
}

// ---- reductions

Tensor sum(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  Recorder op("sum", {x});
  return op.finish(frugal::sum(x, dims, keepdim), {}, [shape = x.shape(), dims, keepdim](const Grads& g, const Saved&) {
    return Grads{expand_back(g[0], shape, dims, keepdim)};
  });
}

Tensor mean(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  Recorder op("mean", {x});
  const auto count = static_cast<double>(count_reduced(x.shape(), dims));
  return op.finish(frugal::mean(x, dims, keepdim), {}, [shape = x.shape(), dims, keepdim, count](const Grads& g, const Saved&) {
    return Grads{expand_back(frugal::div(g[0], count), shape, dims, keepdim)};
  });
}

// ---- dtype

Tensor to(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Recorder op("to", {x});
  return op.finish(x.to(dtype), {}, [from = x.dtype()](const Grads& g, const Saved&) { return Grads{g[0].to(from)}; });
}

// ---- shapes

Tensor reshape(const Tensor& x, Shape shape) {
  Recorder op("reshape", {x});
  return op.finish(x.reshape(std::move(shape)), {}, [in = x.shape()](const Grads& g, const Saved&) {
    return Grads{g[0].reshape(in)};
  });
}

Tensor flatten(const Tensor& x, std::int64_t start_dim) {
  start_dim = x.dim() == 0 ? 0 : wrap_dim(start_dim, x.dim());
  Shape shape(x.shape().begin(), x.shape().begin() + start_dim);
  shape.push_back(-1);
  return reshape(x, shape);
}

Tensor permute(const Tensor& x, std::vector<std::int64_t> dims) {
  Recorder op("permute", {x});
  std::vector<std::int64_t> inverse(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i)
    inverse[static_cast<std::size_t>(wrap_dim(dims[i], x.dim()))] = static_cast<std::int64_t>(i);
  return op.finish(x.permute(dims), {}, [inverse](const Grads& g, const Saved&) { return Grads{g[0].permute(inverse)}; });
}

Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1) {
  Recorder op("transpose", {x});
  return op.finish(x.transpose(dim0, dim1), {}, [dim0, dim1](const Grads& g, const Saved&) {
    return Grads{g[0].transpose(dim0, dim1)};
  });
}

// ---- linear algebra and convolution

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const std::optional<MemoryTagScope> tag = tag_saved_casts({a_in, b_in});
  const Tensor a = autocast_low(a_in), b = autocast_low(b_in);
  Recorder op("matmul", {a, b});
  return op.finish(frugal::matmul(a, b), {a, b}, [needs = op.needs_grad()](const Grads& g, const Saved& s) {
    const Tensor &left = s[0], &right = s[1];
    const Tensor right_t = right.dim() == 3 ? right.transpose(1, 2) : right.t();
    Tensor g_left = needs[0] ? frugal::matmul(g[0], right_t) : Tensor();
    Tensor g_right;
    if (needs[1]) {
      if (left.dim() == 3 && right.dim() == 2)  // right was shared by every batch entry: sum their parts
        g_right = frugal::matmul(left.reshape({-1, left.size(-1)}).t(), g[0].reshape({-1, g[0].size(-1)}));
      else
        g_right = frugal::matmul(left.dim() == 3 ? left.transpose(1, 2) : left.t(), g[0]);
    }
    return Grads{g_left, g_right};
  });
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  const std::optional<MemoryTagScope> tag = tag_saved_casts({x_in, weight_in, bias_in});
  const Tensor x = autocast_low(x_in), weight = autocast_low(weight_in), bias = autocast_low(bias_in);
  Recorder op("linear", {x, weight, bias});
  const bool has_bias = bias.defined();
  return op.finish(frugal::linear(x, weight, bias), {x, weight}, [has_bias](const Grads& g, const Saved& s) {
    LinearGrads grads = linear_backward(g[0], s[0], s[1], has_bias);
    return Grads{grads.input, grads.weight, grads.bias};
  });
}

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, const Conv2dOptions& options) {
  const std::optional<MemoryTagScope> tag = tag_saved_casts({x_in, weight_in, bias_in});
  const Tensor x = autocast_low(x_in), weight = autocast_low(weight_in), bias = autocast_low(bias_in);
  Recorder op("conv2d", {x, weight, bias});
  return op.finish(frugal::conv2d(x, weight, bias, options), {x, weight},
                   [options, needs = op.needs_grad()](const Grads& g, const Saved& s) {
                     const Tensor &input = s[0], &filter = s[1];
                     return Grads{needs[0] ? conv2d_backward_input(g[0], filter, input.shape(), options) : Tensor(),
                                  needs[1] ? conv2d_backward_weight(g[0], input, filter.shape(), options) : Tensor(),
                                  needs[2] ? conv2d_backward_bias(g[0]) : Tensor()};
                   });
}

// ---- pooling

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options) {
  Recorder op("max_pool2d", {x});
  MaxPoolResult r = frugal::max_pool2d(x, options);
  return op.finish(r.output, {r.indices}, [shape = x.shape(), options](const Grads& g, const Saved& s) {
    return Grads{max_pool2d_backward(g[0], s[0], shape, options)};
  });
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options) {
  Recorder op("avg_pool2d", {x});
  return op.finish(frugal::avg_pool2d(x, options), {}, [shape = x.shape(), options](const Grads& g, const Saved&) {
    return Grads{avg_pool2d_backward(g[0], shape, options)};
  });
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<std::int64_t, 2> output_size) {
  Recorder op("adaptive_avg_pool2d", {x});
  return op.finish(frugal::adaptive_avg_pool2d(x, output_size), {}, [shape = x.shape()](const Grads& g, const Saved&) {
    return Grads{adaptive_avg_pool2d_backward(g[0], shape)};
  });
}

// ---- normalisation, dropout, softmax

namespace {

// BatchNorm's output made again from the x-hat its node saved (nn/saved_activations.h), by the same
// kernel expression as the forward, so the same bits unless x-hat was kept compressed.
class AffineRebuild final : public autograd::Rebuild {
 public:
  AffineRebuild(SavedTensor normalized, const Tensor& weight, const Tensor& bias, bool relu6, DType dtype,
                const BatchNormBackend& backend)
      : normalized_(std::move(normalized)), weight_(weight), bias_(bias), relu6_(relu6), dtype_(dtype), backend_(backend) {}
  Tensor rebuild(std::string_view op) const override {
    return batch_norm_affine(normalized_.unpack(op), weight_.unpack(op), bias_.unpack(op), relu6_, dtype_, backend_);
  }

 private:
  SavedTensor normalized_, weight_, bias_;
  bool relu6_;
  DType dtype_;  // the output's: an x-hat kept in bf16 still rebuilds an f32 output
  BatchNormBackend backend_;  // the forward's
};

// How BatchNorm keeps x-hat under the caller's ActivationSaving. With bf16 compression of an f32
// input the kernel writes x-hat in bf16 itself (kernels/batch_norm.h's NormalizedForm), in the same
// pass where it can, instead of the graph casting an f32 x-hat afterwards. A fused ReLU6 keeps its
// mask as bits only when x-hat is kept compressed, whose rounding would move values next to 0 and 6
// across the edge; an exact x-hat gives the mask exactly for free.
NormalizedForm normalized_form(const Tensor& x, bool fuse_relu6, const nn::ActivationSaving& saving) {
  return {.bf16 = saving.compress == nn::SavedCompression::bf16 && x.dtype() == DType::f32,
          .relu6_mask = fuse_relu6 && saving.bit_masks && saving.compress != nn::SavedCompression::none};
}

// Saves x-hat alone (and the per-channel invstd), and attaches to the output how to rebuild it.
Tensor batch_norm_from_normalized(Recorder& op, const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                                  const Tensor& weight, const Tensor& bias, bool training, double momentum, double eps,
                                  bool fuse_relu6, const nn::ActivationSaving& saving, const BatchNormBackend& backend) {
  const NormalizedForm form = normalized_form(x, fuse_relu6, saving);
  const BatchNormNormalizedOutput r =
      training ? batch_norm_train_normalized(x, weight, bias, running_mean, running_var, momentum, eps, fuse_relu6, form,
                                             backend)
               : batch_norm_eval_normalized(x, weight, bias, running_mean, running_var, eps, fuse_relu6, form, backend);
  // One copy, shared with the rebuild; compressed by the graph unless the kernel already kept it in bf16.
  const SavedTensor normalized(r.normalized, /*activation=*/true);
  autograd::set_rebuild(r.output, std::make_shared<AffineRebuild>(normalized, weight, bias, fuse_relu6, x.dtype(), backend));
  std::vector<SavedTensor> saved = {normalized, SavedTensor(weight), SavedTensor(bias), SavedTensor(r.save_invstd),
                                    SavedTensor(r.mask)};
  return op.finish_saved(r.output, std::move(saved), [training, fuse_relu6, backend](const Grads& g, const Saved& s) {
    const BatchNormGrads grads =
        batch_norm_backward_normalized(g[0], s[0], s[1], s[2], s[3], training, fuse_relu6, s[4], backend);
    return Grads{grads.input, grads.weight, grads.bias};
  });
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps, bool fuse_relu6,
                  const nn::ActivationSaving& saving, const BatchNormBackend& backend) {
  Recorder op(fuse_relu6 ? "batch_norm_relu6" : "batch_norm", {x, weight, bias});
  if (op.recording() && saving.bn_from_output)
    return batch_norm_from_normalized(op, x, running_mean, running_var, weight, bias, training, momentum, eps,
                                      fuse_relu6, saving, backend);
  Tensor y, mean, invstd;
  if (training) {
    BatchNormOutput r = batch_norm_train(x, weight, bias, running_mean, running_var, momentum, eps, fuse_relu6, backend);
    y = r.output;
    mean = r.save_mean;
    invstd = r.save_invstd;
  } else {
    y = batch_norm_eval(x, weight, bias, running_mean, running_var, eps, fuse_relu6, backend);
    if (op.recording()) {  // the eval backward treats the running statistics as constants
      mean = running_mean.clone();
      invstd = batch_norm_invstd(running_var, eps);
    }
  }
  // The ReLU6 mask is read from the output, which the next layer usually keeps anyway; with bit masks
  // it is kept as bits, so the output lives only as long as someone else needs it.
  const bool bits = op.recording() && fuse_relu6 && saving.bit_masks;
  const Tensor mask_source = bits ? pack_mask_between(y, 0.0, kReLU6Top) : fuse_relu6 ? y : Tensor();
  // The bias lets the CPU recompute the output from x rather than read it (batch_norm_backward).
  return op.finish(y, {x, weight, mean, invstd, mask_source, bias}, [training, bits, backend](const Grads& g, const Saved& s) {
    const Tensor grad = bits ? apply_packed_mask(g[0], s[4]) : g[0];
    BatchNormGrads grads =
        batch_norm_backward(grad, s[0], s[1], s[2], s[3], training, bits ? Tensor() : s[4], backend, s[5]);
    return Grads{grads.input, grads.weight, grads.bias};
  });
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  // Nothing to drop: the kernel hands back `x` itself (after checking p), as PyTorch does. Recording
  // a node on it would overwrite the input's own history (a parameter would stop being a leaf).
  if (!training || p == 0.0) return frugal::dropout(x, p, training, generator).output;
  Recorder op("dropout", {x});
  DropoutResult r = frugal::dropout(x, p, training, generator);
  // Saves no tensor: the backward recomputes the mask from the draw's (seed, offset) (kernels/dropout.h).
  return op.finish(r.output, {}, [p, draw = r.draw](const Grads& g, const Saved&) {
    return Grads{dropout_backward(g[0], draw, p)};
  });
}

Tensor log_softmax(const Tensor& x_in, std::int64_t dim) {
  const Tensor x = autocast_f32(x_in);
  Recorder op("log_softmax", {x});
  Tensor y = frugal::log_softmax(x, dim);
  return op.finish(y, {y}, [dim](const Grads& g, const Saved& s) { return Grads{log_softmax_backward(g[0], s[0], dim)}; });
}

Tensor softmax(const Tensor& x_in, std::int64_t dim) {
  const Tensor x = autocast_f32(x_in);
  Recorder op("softmax", {x});
  Tensor y = frugal::softmax(x, dim);
  return op.finish(y, {y}, [dim](const Grads& g, const Saved& s) { return Grads{softmax_backward(g[0], s[0], dim)}; });
}

// ---- losses

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets, const CrossEntropyOptions& options) {
  const Tensor logits = autocast_f32(logits_in);
  Recorder op("cross_entropy", {logits});
  return op.finish(frugal::cross_entropy(logits, targets, options), {logits, targets},
                   [options](const Grads& g, const Saved& s) { return Grads{cross_entropy_backward(g[0], s[0], s[1], options)}; });
}

Tensor mse_loss(const Tensor& input, const Tensor& target, LossReduction reduction) {
  FRUGAL_CHECK_SHAPE(input.shape() == target.shape(), "mse_loss: input ", shape_str(input.shape()), " and target ",
                     shape_str(target.shape()), " differ (broadcasting a target is almost always a bug)");
  const Tensor squared = functional::pow(functional::sub(autocast_f32(input), autocast_f32(target)), 2.0);
  switch (reduction) {
    case LossReduction::none: return squared;
    case LossReduction::sum: return functional::sum(squared);
    case LossReduction::mean: return functional::mean(squared);
  }
  return squared;
}

}  // namespace frugal::functional
