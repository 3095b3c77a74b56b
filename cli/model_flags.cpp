// ModelFlags (see model_flags.h).
#include "cli/model_flags.h"

#include <CLI/CLI.hpp>

#include "cli/subcommand.h"
#include "core/caching_allocator.h"
#include "models/registry.h"

namespace frugal::cli {

void ModelFlags::add_to(CLI::App& c) {
  c.add_option("--model", model, "Model: " + models::model_names())->check(not_empty());
  c.add_option("--width", width, "MobileNetV2's width multiplier (default 1.0)");
  c.add_flag("--cifar-stem", cifar_stem, "MobileNetV2's stem for 32x32 inputs (stride 1 twice: 12x the compute)");
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
  o.model = model;
  o.width = width;
  o.cifar_stem = cifar_stem;
  o.checkpoint_activations = checkpoint_activations;
  if (checkpoint_blocks) o.checkpoint_blocks = models::BlockSelection::parse(*checkpoint_blocks);
  o.inplace_activations = inplace_activations;
  o.saving = {.bn_from_output = bn_from_output,
              .bit_masks = bit_masks,
              .compress = nn::parse_saved_compression(compress_activations)};
}

void DdpFlags::add_to(CLI::App& c) {
  c.add_option("--bucket-cap", bucket_cap, "With --ddp: gradient bucket size, e.g. 25MiB (default, PyTorch's)");
  c.add_flag("--bucket-views", bucket_views, "With --ddp: gradients live inside the buckets (no second copy)");
  c.add_flag("--zero1", zero1, "With --ddp: shard the optimizer state across the ranks (ZeRO stage 1)");
}

void DdpFlags::apply(train::TrainOptions& o) const {
  if (!bucket_cap.empty()) o.bucket_cap_bytes = parse_size(bucket_cap);
  o.bucket_views = bucket_views;
  o.zero1 = zero1;
}

}  // namespace frugal::cli
