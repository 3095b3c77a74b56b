// models/mobilenet_v2.h: the blocks, the model built from the paper's table, and its initialisation,
// in the order torchvision builds them (the order is the state dict's order).
#include "models/mobilenet_v2.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "models/torchvision_init.h"
#include "nn/amp.h"
#include "nn/batch_slices.h"
#include "nn/fold_batch_norm.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/saved_activations.h"

namespace frugal::models {

namespace F = frugal::functional;

std::int64_t make_divisible(double value, std::int64_t divisor) {
  const auto d = static_cast<double>(divisor);
  auto rounded = std::max(divisor, static_cast<std::int64_t>(value + d / 2) / divisor * divisor);
  if (static_cast<double>(rounded) < 0.9 * value) rounded += divisor;  // never more than 10% down
  return rounded;
}

Conv2dNormActivation::Conv2dNormActivation(std::int64_t in_channels, std::int64_t out_channels, const Args& args)
    : nn::Sequential("Conv2dNormActivation"), relu6_fused_into_norm_(args.inplace) {
  conv_ = push_back(std::make_shared<nn::Conv2d>(
      in_channels, out_channels,
      nn::Conv2dArgs{.kernel = args.kernel, .stride = args.stride, .padding = (args.kernel - 1) / 2,
                     .groups = args.groups, .bias = false, .generator = args.generator}));
  norm_ = push_back(std::make_shared<nn::BatchNorm2d>(out_channels));
  activation_ = push_back(std::make_shared<nn::ReLU6>(args.inplace));
}

// In place: conv, then BatchNorm with ReLU6 fused into its pass (activation_ is not called). Out of
// place: conv, BatchNorm, ReLU6. Inference: one convolution with BatchNorm folded into it and the
// ReLU6 applied in its pass (nn/fold_batch_norm.h), either way.
Tensor Conv2dNormActivation::forward(const Tensor& x) {
  if (folds(x)) return nn::conv_batch_norm_folded(*conv_, *norm_, x, ConvActivation::relu6);
  const Tensor y = (*conv_)(x);
  if (relu6_fused_into_norm_) return norm_->forward_relu6(y);
  return (*activation_)((*norm_)(y));
}

bool Conv2dNormActivation::folds(const Tensor& x) const { return nn::folds_batch_norm(*conv_, *norm_, x); }

std::int64_t Conv2dNormActivation::inference_gemm_samples(const Tensor& x) const {
  if (!folds(x)) return 0;
  const Tensor& w = conv_->weight();  // [C_out, C_in / groups, kh, kw]
  if (w.size(2) != 1 || w.size(3) != 1 || conv_->options().groups != 1) return 1;  // one sample at a time
  const Shape y = conv2d_output_shape(x.shape(), w.shape(), conv_->options());
  return pointwise_samples_per_gemm(y[2] * y[3]);
}

InvertedResidual::InvertedResidual(std::int64_t in_channels, std::int64_t out_channels, std::int64_t stride,
                                   std::int64_t expand_ratio, Generator* generator, bool inplace)
    : nn::Module("InvertedResidual"), use_residual_(stride == 1 && in_channels == out_channels), stride_(stride) {
  FRUGAL_CHECK_VALUE(stride == 1 || stride == 2, "InvertedResidual: stride must be 1 or 2, got ", stride);
  const auto hidden = static_cast<std::int64_t>(std::lround(static_cast<double>(in_channels * expand_ratio)));
  hidden_channels_ = hidden;
  using Args = Conv2dNormActivation::Args;
  conv_ = register_module("conv", std::make_shared<nn::Sequential>());
  if (expand_ratio != 1)
    conv_->push_back(std::make_shared<Conv2dNormActivation>(
        in_channels, hidden, Args{.kernel = 1, .inplace = inplace, .generator = generator}));
  conv_->push_back(std::make_shared<Conv2dNormActivation>(  // depthwise
      hidden, hidden, Args{.stride = stride, .groups = hidden, .inplace = inplace, .generator = generator}));
  projection_ = conv_->push_back(
      std::make_shared<nn::Conv2d>(hidden, out_channels, nn::Conv2dArgs{.bias = false, .generator = generator}));
  projection_norm_ = conv_->push_back(std::make_shared<nn::BatchNorm2d>(out_channels));  // no activation: the linear bottleneck
}

// conv_ in order, or in inference its modules but the last two, then the projection with its
// BatchNorm folded in (nn/fold_batch_norm.h: no observer then sees the calls this skips).
Tensor InvertedResidual::branch(const Tensor& x) {
  if (!nn::folds_batch_norm(*projection_, *projection_norm_, x)) return (*conv_)(x);
  Tensor y = x;
  for (std::size_t i = 0; i + 2 < conv_->size(); ++i) y = (*(*conv_)[i])(y);
  return nn::conv_batch_norm_folded(*projection_, *projection_norm_, y);
}

// ---- Note [Inference a few samples at a time]
// A block's expansion writes hidden activations 6x the size of its input, the depthwise convolution
// reads them back and writes as many, and the projection reads those: with the CIFAR stem's 32x32
// maps, 64 samples of 144 channels are 37 MiB per tensor, which goes out to L3 and back four times
// per block. In inference (BatchNorm folded, nothing saved for backward) the block runs on a few
// samples at a time instead, so that a chunk's hidden activations take about kChunkCaches L2 caches
// and the depthwise convolution and the projection read what the layer before just wrote from L2.
// The chunk does not depend on the thread count, and it is a multiple of the samples the block's 1x1
// convolutions put in one GEMM (pointwise_samples_per_gemm), so every kernel sees the operands it
// would see for the whole batch: the same bits as the whole batch, on any number of threads.
// Measured 2026-12-05 (docs/benchmarks.md), CIFAR-stem eval, 1 / 2 threads: 287 / 560 img/s whole,
// 331 / 598 with chunks of two L2s; one L2 per thread gave 320-336 / 588-614, half an L2 343 / 545-573
// (chunks of one or two samples leave two threads little to share). The standard stem's maps are
// small enough that most of its blocks fit whole.
constexpr std::int64_t kChunkCaches = 2;

std::int64_t InvertedResidual::inference_chunk(const Tensor& x) const {
  static const std::int64_t l2_bytes = [] {
    const long size = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    return size > 0 ? static_cast<std::int64_t>(size) : std::int64_t{1} << 20;  // 1 MiB when unknown
  }();
  const std::int64_t batch = std::max<std::int64_t>(x.size(0), 1), plane = x.size(2) * x.size(3);
  const std::int64_t hidden_bytes = hidden_channels_ * plane * static_cast<std::int64_t>(x.element_size());
  const std::int64_t fit = std::max<std::int64_t>(1, kChunkCaches * l2_bytes / std::max<std::int64_t>(hidden_bytes, 1));
  const std::int64_t group = gemm_samples(x);
  return std::min(batch, (fit + group - 1) / group * group);
}

// The expansion sees the input's maps, the projection the depthwise convolution's (3x3, padding 1).
std::int64_t InvertedResidual::gemm_samples(const Tensor& x) const {
  const std::int64_t out_plane = ((x.size(2) - 1) / stride_ + 1) * ((x.size(3) - 1) / stride_ + 1);
  return std::lcm(pointwise_samples_per_gemm(x.size(2) * x.size(3)), pointwise_samples_per_gemm(out_plane));
}

std::int64_t InvertedResidual::inference_gemm_samples(const Tensor& x) const {
  return folds_every_norm(x) ? gemm_samples(x) : 0;
}

// Chunks are for inference alone: a BatchNorm in training mode would take each chunk's statistics
// (and count each chunk as a batch), so every one of the block's BatchNorms must fold.
bool InvertedResidual::folds_every_norm(const Tensor& x) const {
  for (std::size_t i = 0; i + 2 < conv_->size(); ++i) {
    const auto* unit = dynamic_cast<const Conv2dNormActivation*>((*conv_)[i].get());
    if (unit == nullptr || !unit->folds(x)) return false;
  }
  return nn::folds_batch_norm(*projection_, *projection_norm_, x);
}

Tensor InvertedResidual::forward(const Tensor& x) {
  // Note [Inference a few samples at a time]
  const std::int64_t samples = x.dim() == 4 ? inference_chunk(x) : 0;
  if (samples > 0 && samples < x.size(0) && folds_every_norm(x)) {
    Tensor out;
    for (std::int64_t first = 0; first < x.size(0); first += samples) {
      const Tensor part = x.narrow(0, first, std::min(samples, x.size(0) - first));
      const Tensor y = use_residual_ ? add(part, branch(part)) : branch(part);
      if (!out.defined()) {
        Shape shape = y.shape();
        shape[0] = x.size(0);
        out = empty(shape, {.dtype = y.dtype(), .device = y.device()});
      }
      out.narrow(0, first, part.size(0)).copy_(y);
    }
    return out;
  }
  if (!use_residual_) return branch(x);
  // The sum saves nothing for backward; the projection's BN output dies here, and the sum is what the
  // next block's first convolution keeps. A sum that can be rebuilt: when its addends can (BatchNorm
  // from its output, which BatchNorm2d applies), that convolution keeps neither, and the sum is made
  // again from the input and the BN output; otherwise it is a plain add (F::add_rebuilt).
  return F::add_rebuilt(x, branch(x));
}

namespace {

// The paper's table 2, as torchvision's inverted_residual_setting: expansion t, output channels c,
// repeats n, stride s of the group's first block.
struct BlockGroup {
  std::int64_t expand, channels, repeats, stride;
};
constexpr BlockGroup kBlockGroups[] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                                       {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
constexpr double kFirstChannels = 32, kLastChannels = 1280;
constexpr std::size_t kCifarGroup = 1;  // the t=6, c=24 group: its stride-2 block runs at stride 1 for 32x32 inputs

}  // namespace

std::vector<std::string> MobileNetV2::block_names() {
  std::vector<std::string> names;
  for (const BlockGroup& group : kBlockGroups)
    for (std::int64_t i = 0; i < group.repeats; ++i) names.push_back("features." + std::to_string(names.size() + 1));
  return names;
}

MobileNetV2::MobileNetV2(const MobileNetV2Options& options)
    : nn::Module("MobileNetV2"),
      options_(options),
      last_channel_(make_divisible(kLastChannels * std::max(1.0, options.width_mult))) {
  FRUGAL_CHECK_VALUE(options.width_mult > 0 && std::isfinite(options.width_mult),
                     "MobileNetV2: width_mult must be positive, got ", options.width_mult);
  FRUGAL_CHECK_VALUE(options.num_classes > 0 && options.in_channels > 0, "MobileNetV2: num_classes (",
                     options.num_classes, ") and in_channels (", options.in_channels, ") must be positive");
  options.checkpoint_blocks.check("mobilenet_v2", block_names());
  Generator* generator = options.generator;
  const bool inplace = options.inplace_activations;
  const BlockSelection checkpointed = checkpointed_blocks(options.checkpoint_activations, options.checkpoint_blocks);
  using Args = Conv2dNormActivation::Args;
  features_ = register_module("features", std::make_shared<nn::CheckpointedSequential>());
  std::int64_t channels = make_divisible(kFirstChannels * options.width_mult);
  features_->push_back(std::make_shared<Conv2dNormActivation>(
      options.in_channels, channels, Args{.stride = options.cifar_stem ? 1 : 2, .inplace = inplace, .generator = generator}));
  for (std::size_t g = 0; g < std::size(kBlockGroups); ++g) {
    const BlockGroup& group = kBlockGroups[g];
    const std::int64_t out = make_divisible(static_cast<double>(group.channels) * options.width_mult);
    const std::int64_t first_stride = options.cifar_stem && g == kCifarGroup ? 1 : group.stride;
    for (std::int64_t i = 0; i < group.repeats; ++i) {
      const std::size_t block = features_->size();  // block i is features.i
      features_->push_back(std::make_shared<InvertedResidual>(channels, out, i == 0 ? first_stride : 1, group.expand,
                                                              generator, inplace));
      if (checkpointed.contains(static_cast<std::int64_t>(block))) features_->checkpoint_children(block);
      channels = out;
    }
  }
  features_->push_back(
      std::make_shared<Conv2dNormActivation>(channels, last_channel_, Args{.kernel = 1, .inplace = inplace, .generator = generator}));
  classifier_ = register_module("classifier", std::make_shared<nn::Sequential>());
  classifier_->push_back(std::make_shared<nn::Dropout>(options.dropout, generator));
  auto linear = classifier_->push_back(std::make_shared<nn::Linear>(last_channel_, options.num_classes, true, generator));

  init_convolutions_and_norms(*this, generator);
  nn::init::normal_(linear->weight(), 0.0, 0.01, generator);
  nn::init::zeros_(linear->bias());
}

namespace {

Tensor pooled(const Tensor& features) { return F::flatten(F::adaptive_avg_pool2d(features, {1, 1}), 1); }

// A unit of `features` (the stem, a block, the last convolution) in inference on x: the samples its
// GEMMs cover at a time, or 0 when it does not run folded (inference_gemm_samples).
std::int64_t unit_gemm_samples(const nn::Module& unit, const Tensor& x) {
  if (const auto* block = dynamic_cast<const InvertedResidual*>(&unit)) return block->inference_gemm_samples(x);
  if (const auto* conv = dynamic_cast<const Conv2dNormActivation*>(&unit)) return conv->inference_gemm_samples(x);
  return 0;
}

}  // namespace

Tensor MobileNetV2::forward(const Tensor& x) {
  FRUGAL_CHECK_SHAPE(x.dim() == 4 && x.size(1) == options_.in_channels, "MobileNetV2: expected input [N, ",
                     options_.in_channels, ", H, W], got ", shape_str(x.shape()));
  // The stem, the blocks (the chosen ones checkpointed), the head, and the average of each map.
  const InferenceSlices slices = inference_slices(x);
  last_sliced_units_ = {};
  const Tensor features = slices.claimed > 0 ? pooled_features_on_slices(x, slices) : pooled((*features_)(x));
  return (*classifier_)(features);
}

// ---- Note [Inference across the batch on the CPU]
// Split among the threads layer by layer, an eval forward makes each thread wait for the others at
// the end of each of some 60 layers, and with the standard stem most of them are a few microseconds
// of work per sample, on maps of 8x8 pixels or fewer. So in inference on the CPU with two or more
// threads, the batch goes in slices and each thread runs the network on the slices it claims
// (nn/batch_slices.h), every kernel of a slice on that thread, none waiting for another until the
// slices are done. Two rounds:
// - kSlicesPerThread slices per thread, so that where one thread runs slower (a shared core) the
//   other claims the slice it has not started (Note [Threads claim pieces of a loop] in
//   core/cpu/parallel.h), while a unit's 1x1 convolutions put no more samples in one GEMM than a
//   slice holds (pointwise_samples_per_gemm divides the slice): with the standard stem at batch 64 on
//   2 threads, slices of 16 through the stem and blocks 1-6.
// - then one slice per thread: on the 2x2 and 1x1 maps a unit's work is its 1x1 GEMMs on a few
//   columns per sample, and the kernel calls' fixed costs, paid per slice, made slices of 16 take
//   1.09-1.18x the whole batch's time on one thread, slices of 32 1.00-1.06x (measured 2026-12-06,
//   standard stem units 7-18, batch 64).
// A unit runs on slices only where that gives the bits the whole batch gives: folded for inference
// (no batch statistics), and its 1x1 convolutions' bits independent of the samples a GEMM covers
// (pointwise_bits_independent_of_samples: the CPU in f32) or else the slice a whole number of each
// GEMM's chunks, so that every GEMM sees the operands it would see for the whole batch (slices start
// at multiples of the slice, so at chunk boundaries). From the first unit that runs on no slice (the
// same in every slice: it depends on the slice and the maps' shape alone) to the end, the units run
// on the whole batch, layer by layer on all threads. So the logits are the bits of the whole batch
// on one thread, on any number of threads, wherever a GEMM's bits do not depend on OpenBLAS's own
// threads (a slice's GEMMs run on its thread, the later units' on all): with its AVX-512 kernels, or
// with FRUGAL_BLAS_THREADS=1 (Note [OpenBLAS threads and bits] in kernels/cpu_runtime.h;
// tests/cpu/test_thread_determinism.cpp, tests/cpu/test_batch_slices.cpp). A round with fewer slices
// than threads does not run (threads would sit idle).
// Measured (docs/benchmarks.md), eval forwards on 2 threads, batch 64, alternating in one process:
// 2026-12-05, slices against the layer-by-layer forward: CIFAR stem (every unit on slices) 10%
// faster, standard stem (the stem and blocks 1-6 on slices) 3.5% faster; 2026-12-06, two slices per
// thread against one: 1.53-1.70x against 1.56-1.75x the 1-thread forward (standard stem) and
// 1.72-1.91x against 1.80-1.96x (CIFAR stem); 2026-12-06, the second round (slices of 32) against
// blocks 7-17 and the head layer by layer (standard stem, three runs of 20 forwards each): 9.28-9.54
// ms against 9.69-10.35 ms, 1.80-1.93x against 1.69-1.80x the 1-thread forward (logits the same bits).
// Slices of 16 through those units instead took 12.8 ms (their GEMMs' columns cut to 16 and 64).
constexpr std::int64_t kSlicesPerThread = 2;

namespace {

// Samples per slice for `per_thread` slices per thread, or 0 when that leaves threads idle (a batch
// of 9 on 16 threads makes 9 slices of 1).
std::int64_t slice_for(std::int64_t batch, std::int64_t threads, std::int64_t per_thread) {
  const std::int64_t slice = (batch + per_thread * threads - 1) / (per_thread * threads);
  return (batch + slice - 1) / slice < threads ? 0 : slice;
}

}  // namespace

MobileNetV2::InferenceSlices MobileNetV2::inference_slices(const Tensor& x) const {
  const std::int64_t threads = omp_get_max_threads(), batch = x.size(0);
  // Module call observers see each call on the calling thread, unfolded (nn/fold_batch_norm.h).
  if (!x.device().is_cpu() || threads < 2 || batch < 2 || nn::module_calls_observed()) return {};
  const std::int64_t claimed = slice_for(batch, threads, kSlicesPerThread);
  if (claimed == 0 || !unit_runs_on_slice(0, x, claimed, false)) return {};
  const std::int64_t per_thread = slice_for(batch, threads, 1);
  return {claimed, per_thread > claimed ? per_thread : 0};
}

// Whether unit `unit` of features_, x a slice's input, runs on slices of `slice` samples in the
// claimed round or in the per-thread one.
bool MobileNetV2::unit_runs_on_slice(std::size_t unit, const Tensor& x, std::int64_t slice,
                                     bool per_thread_round) const {
  const std::int64_t samples = unit_gemm_samples(*(*features_)[unit], x);
  if (samples == 0) return false;  // not folded
  if (slice % samples == 0) return true;
  const DType dtype = nn::autocast_dtype().value_or(x.dtype());  // what its convolutions run in
  return per_thread_round && pointwise_bits_independent_of_samples(x.device(), dtype);
}

struct MobileNetV2::SlicedRun {
  Tensor y;                   // the slices' outputs side by side (pooled when every unit ran)
  std::size_t next_unit = 0;  // the first unit that did not run on slices
};

MobileNetV2::SlicedRun MobileNetV2::units_on_slices(const Tensor& x, std::size_t first_unit, std::int64_t slice,
                                                    bool per_thread_round) {
  const std::int64_t batch = x.size(0), slices = (batch + slice - 1) / slice;
  std::vector<Tensor> parts(static_cast<std::size_t>(slices));
  std::vector<std::size_t> units_run(parts.size());  // the same in every slice
  nn::for_each_batch_slice(batch, slice, [&](std::int64_t first, std::int64_t count) {
    Tensor y = x.narrow(0, first, count);
    std::size_t unit = first_unit;
    for (; unit < features_->size() && unit_runs_on_slice(unit, y, slice, per_thread_round); ++unit)
      y = (*(*features_)[unit])(y);
    const auto s = static_cast<std::size_t>(first / slice);
    parts[s] = unit == features_->size() ? pooled(y) : y;
    units_run[s] = unit;
  });
  FRUGAL_CHECK(std::all_of(units_run.begin(), units_run.end(), [&](std::size_t u) { return u == units_run[0]; }),
               "MobileNetV2: the slices stopped at different units");
  Shape shape = parts[0].shape();
  shape[0] = batch;
  SlicedRun run{empty(shape, {.dtype = parts[0].dtype(), .device = parts[0].device()}), units_run[0]};
  for (std::size_t s = 0; s < parts.size(); ++s) {
    run.y.narrow(0, static_cast<std::int64_t>(s) * slice, parts[s].size(0)).copy_(parts[s]);
    parts[s] = Tensor();  // its memory back before the next units run
  }
  return run;
}

Tensor MobileNetV2::pooled_features_on_slices(const Tensor& x, const InferenceSlices& slices) {
  SlicedRun run = units_on_slices(x, 0, slices.claimed, false);
  last_sliced_units_.claimed_end = last_sliced_units_.per_thread_end = run.next_unit;
  const auto done = [&] { return run.next_unit == features_->size(); };
  if (!done() && slices.per_thread > 0 &&
      unit_runs_on_slice(run.next_unit, run.y.narrow(0, 0, slices.per_thread), slices.per_thread, true)) {
    run = units_on_slices(run.y, run.next_unit, slices.per_thread, true);
    last_sliced_units_.per_thread_end = run.next_unit;
  }
  if (done()) return run.y;
  Tensor y = run.y;  // the units that run on the whole batch
  for (std::size_t unit = run.next_unit; unit < features_->size(); ++unit) y = (*(*features_)[unit])(y);
  return pooled(y);
}

}  // namespace frugal::models
