// The flags more than one command takes (see shared_flags.h).
#include "cli/shared_flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "cli/subcommand.h"
#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/error.h"
#include "models/registry.h"
#include "train/planner.h"

namespace frugal::cli {

namespace {

constexpr std::int64_t kMaxBatchSize = 1 << 20;  // a bound the planner still plans in little memory (cli.plan_bounded)

// "(default V)"; eval's model options default to the checkpoint's first.
std::string default_words(FlagsFor flags_for, const std::string& value) {
  return flags_for == FlagsFor::eval ? "(default: the checkpoint's, else " + value + ")" : "(default " + value + ")";
}

std::string batch_size_help(FlagsFor flags_for) {
  const std::string default_size = std::to_string(train::TrainOptions{}.batch_size);
  switch (flags_for) {
    case FlagsFor::train:
      return "Samples per micro-batch, or auto: the largest that fits --memory-limit or the free memory (default " +
             default_size + ")";
    case FlagsFor::plan: return "Samples per micro-batch (default " + default_size + ")";
    case FlagsFor::eval: return "Images per forward (default " + std::to_string(StepFlags::kEvalBatchSize) + ")";
  }
  return "";
}

// plan has no data: its classes default to the planner's stand-in for Fashion-MNIST's.
std::string num_classes_help(FlagsFor flags_for) {
  switch (flags_for) {
    case FlagsFor::train: return "Classes of the classifier (default: the dataset's)";
    case FlagsFor::plan: return "Classes of the classifier (default " + std::to_string(train::PlanShape{}.num_classes) + ")";
    case FlagsFor::eval: return "Classes of the classifier (default: the checkpoint's, else the dataset's)";
  }
  return "";
}

}  // namespace

std::string default_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return std::string(text);
}

void ModelFlags::add_to(CLI::App& c, FlagsFor flags_for) {
  const train::TrainOptions defaults;
  c.add_option("--model", model, "Model: " + models::model_names() + " " + default_words(flags_for, defaults.model))
      ->check(not_empty());
  c.add_option("--width", width, "MobileNetV2's width multiplier " + default_words(flags_for, "1.0"));
  c.add_flag("--cifar-stem", cifar_stem,
             std::string("MobileNetV2's stem for 32x32 inputs (stride 1 twice: 12x the compute") +
                 (flags_for == FlagsFor::eval ? "; on when the checkpoint's run had it)" : ")"));
  if (flags_for == FlagsFor::eval) return;  // what a training step saves is not eval's concern
  c.add_flag("--checkpoint-activations", checkpoint_activations, "Recompute each block's activations in backward");
  c.add_option("--checkpoint-blocks", checkpoint_blocks,
               "Recompute only these blocks' activations: 2-7, 1,3,5-9 or all (frugal plan --budget suggests some)");
  c.add_flag("--inplace-activations,!--no-inplace-activations", inplace_activations,
             "ReLU/ReLU6 overwrite their input, as torchvision's (default on)");
  c.add_flag("--bn-from-output", bn_from_output,
             "BatchNorm saves its normalised input alone; its output is rebuilt in backward (one tensor per Conv-BN-ReLU6)");
  c.add_flag("--bit-masks", bit_masks, "ReLU/ReLU6 masks kept as 1 bit per element, not as the layer's output");
  c.add_option("--compress-activations", compress_activations,
               "Keep saved feature maps in bf16 or as 8-bit codes per channel (int8); compute stays f32 (default none)")
      ->check(CLI::IsMember({"none", "bf16", "int8"}));
}

void ModelFlags::apply(train::TrainOptions& o) const {
  if (model) o.model = *model;
  o.width = width;
  o.cifar_stem = cifar_stem;
  o.checkpoint_activations = checkpoint_activations;
  if (checkpoint_blocks) o.checkpoint_blocks = models::BlockSelection::parse(*checkpoint_blocks);
  o.inplace_activations = inplace_activations;
  o.saving = {.bn_from_output = bn_from_output,
              .bit_masks = bit_masks,
              .compress = nn::parse_saved_compression(compress_activations)};
}

// eval adds the flags of a forward pass alone: what it holds per batch, and what the model it builds is shaped by.
void StepFlags::add_to(CLI::App& c, FlagsFor flags_for) {
  const train::TrainOptions defaults;
  CLI::Option* batch = c.add_option("--batch-size", batch_size, batch_size_help(flags_for));
  if (flags_for != FlagsFor::train) batch->type_name("INT")->check(between(1, kMaxBatchSize));  // train parses auto too
  if (flags_for != FlagsFor::eval) {
    c.add_option("--accum", accum, "Micro-batches accumulated per optimizer step (default " + std::to_string(defaults.accum) + ")")
        ->check(between(1, 65536));
    c.add_option("--optimizer", optimizer,
                 "sgd (Nesterov momentum), adamw, adamw8bit (AdamW with 8-bit moments) or adafactor (factored second "
                 "moments, no momentum) (default " + train::optimizer_name(defaults.optimizer) + ")")
        ->check(CLI::IsMember({"sgd", "adamw", "adamw8bit", "adafactor"}));
    c.add_flag("--optimizer-in-backward", optimizer_in_backward,
               "Update each weight inside backward the moment its gradient is complete, and free that gradient "
               "(the same numbers; not with --accum > 1, --amp f16 or --ddp)");
    c.add_option("--offload", offload,
                 "What to keep in pinned host memory instead of on the device; both: --offload optimizer,activations. "
                 "optimizer: its state, updated there, the weights and gradients copied across each step (not with "
                 "--optimizer-in-backward or --zero). activations: the feature maps forward saves, copied back "
                 "during backward (not with --compress-activations)")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->delimiter(',')
        ->check(CLI::IsMember({"optimizer", "activations"}));
    c.add_option("--momentum", momentum,
                 "SGD's momentum, AdamW's beta1 (default " + default_number(defaults.momentum) + "; 0: SGD keeps no momentum buffers)");
    c.add_option("--amp", amp, "Autocast to f16 (with loss scaling) or bf16")->check(CLI::IsMember({"f16", "bf16"}));
  }
  c.add_option("--workers", workers,
               "Loader threads, each holding prefetched batches (default " + std::to_string(defaults.workers) + ")")
      ->check(between(0, 64));
  c.add_option("--image-size", image_size,
               "Side of the square images the model sees " +
                   default_words(flags_for, std::to_string(defaults.image_size) + ": Fashion-MNIST's 28x28 padded"))
      ->check(between(8, 4096));
  c.add_option("--num-classes", num_classes, num_classes_help(flags_for))->check(between(2, 1'000'000));
}

std::int64_t StepFlags::batch_size_number() const {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(batch_size, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  // Only train's text reaches a failure here: plan's and eval's were range-checked as they parsed.
  FRUGAL_CHECK_VALUE(used == batch_size.size() && value >= 1 && value <= kMaxBatchSize,
                     "--batch-size must be auto or a whole number in [1, ", kMaxBatchSize, "], got '", batch_size, "'");
  return value;
}

void StepFlags::apply(train::TrainOptions& o) const {
  if (batch_size_given()) o.batch_size = batch_size_number();
  if (accum) o.accum = *accum;
  if (!optimizer.empty()) o.optimizer = train::parse_optimizer(optimizer);
  o.optimizer_in_backward = optimizer_in_backward;
  o.offload_optimizer = std::ranges::find(offload, "optimizer") != offload.end();
  o.offload_activations = std::ranges::find(offload, "activations") != offload.end();
  if (momentum) o.momentum = *momentum;
  if (!amp.empty()) o.amp = parse_dtype(amp);
  if (workers) o.workers = *workers;
  if (image_size) o.image_size = *image_size;
  o.num_classes = num_classes;
}

void DdpFlags::add_to(CLI::App& c) {
  c.add_option("--bucket-cap", bucket_cap, "With --ddp: gradient bucket size, e.g. 25MiB (default, PyTorch's)");
  c.add_flag("--bucket-views", bucket_views, "With --ddp: gradients live inside the buckets (no second copy)");
  c.add_option("--zero", zero,
               "With --ddp: ZeRO stage 1 shards the optimizer state across the ranks, 2 the gradients too, 3 the "
               "parameters too, gathered per layer around its use (2 and 3: not with --bucket-views)")
      ->check(CLI::IsMember({1, 2, 3}));
}

void DdpFlags::apply(train::TrainOptions& o) const {
  if (!bucket_cap.empty()) o.bucket_cap_bytes = parse_size(bucket_cap);
  o.bucket_views = bucket_views;
  o.zero = zero.value_or(0);
}

void DataFlags::add_to(CLI::App& c, FlagsFor flags_for) {
  c.add_option("--data", data,
               std::string(flags_for == FlagsFor::eval ? "Data whose test split is evaluated" : "Training data") +
                   ": an IDX or CIFAR folder, a shard, an image folder (default: Debian's Fashion-MNIST)");
  c.add_option("--test-data", test_data, "Test split (default: the one found beside --data)");
}

void DeviceFlag::add_to(CLI::App& c) {
  c.add_option("--device", device, "cpu, cuda or cuda:N (default: cuda:0 when usable, else cpu)");
}

Device DeviceFlag::resolve() const {
  if (device == "auto") return cuda_available() ? Device::cuda(0) : Device::cpu();
  const Device parsed = Device::parse(device);
  check_device_usable(parsed);
  return parsed;
}

}  // namespace frugal::cli
