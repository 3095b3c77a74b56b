// `frugal plan` (see plan.h): flags into TrainOptions, train::plan_memory, then tables and JSON.
#include "cli/plan.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/train_output.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/output_paths.h"
#include "models/registry.h"
#include "train/planner.h"

namespace frugal::cli {

namespace {

std::string size(std::int64_t bytes) { return bytes < 0 ? "-" + format_size(static_cast<std::size_t>(-bytes)) : format_size(static_cast<std::size_t>(bytes)); }

// The first `depth` dot-separated parts of a layer's name (all of it for depth 0).
std::string group_of(const std::string& name, int depth) {
  if (depth <= 0) return name;
  std::size_t end = 0;
  for (int part = 0; part < depth; ++part) {
    end = name.find('.', end == 0 && part == 0 ? 0 : end + 1);
    if (end == std::string::npos) return name;
  }
  return name.substr(0, end);
}

// Layers summed into groups of `depth` name parts, in the order they first appear.
std::vector<train::LayerPlan> grouped(const std::vector<train::LayerPlan>& layers, int depth) {
  std::vector<train::LayerPlan> groups;
  std::map<std::string, std::size_t> index;
  for (const train::LayerPlan& l : layers) {
    const std::string name = group_of(l.name, depth);
    auto [it, fresh] = index.emplace(name, groups.size());
    if (fresh) groups.push_back({.name = name, .type = name == l.name ? l.type : ""});
    train::LayerPlan& g = groups[it->second];
    g.param_bytes += l.param_bytes;
    g.grad_bytes += l.grad_bytes;
    g.optimizer_bytes += l.optimizer_bytes;
    g.saved_bytes += l.saved_bytes;
    g.workspace_bytes = std::max(g.workspace_bytes, l.workspace_bytes);
  }
  return groups;
}

// ", rank 0 of 4 data-parallel ranks (ZeRO-2)", "... (ZeRO-1, bucket views)", or nothing.
std::string ddp_words(const train::TrainOptions& o) {
  if (!o.ddp) return "";
  std::string words = ", rank 0 of " + std::to_string(o.ranks) + " data-parallel ranks";
  const std::string zero = o.zero > 0 ? "ZeRO-" + std::to_string(o.zero) : "";
  if (o.zero > 0 || o.bucket_views)
    words += " (" + zero + (o.zero > 0 && o.bucket_views ? ", " : "") + (o.bucket_views ? "bucket views" : "") + ")";
  return words;
}

// ", checkpointed blocks" (all of them), ", checkpointed blocks 1-5", or nothing; then what the graph
// saves when not the standard minimum: ", saving bn-from-output+bf16", and where.
std::string checkpoint_words(const train::TrainOptions& o) {
  const std::string saving = (o.saving.standard() ? "" : ", saving " + o.saving.str()) +
                             (o.offload_activations ? ", saved activations on the host" : "");
  const models::BlockSelection blocks = models::checkpointed_blocks(o.checkpoint_activations, o.checkpoint_blocks);
  if (blocks.empty()) return saving;
  return (blocks.is_all() ? ", checkpointed blocks" : ", checkpointed blocks " + blocks.str()) + saving;
}

void print_plan(const train::TrainOptions& o, const train::MemoryPlan& plan, int depth) {
  std::printf("%s, batch %lld x %lld of %lldx%lld, %s%s%s%s: predicted peak %s allocated (in %s), %s reserved\n",
              o.model.c_str(), static_cast<long long>(o.accum), static_cast<long long>(o.batch_size),
              static_cast<long long>(o.image_size), static_cast<long long>(o.image_size),
              (train::optimizer_name(o.optimizer) + (o.optimizer_in_backward ? " in backward" : "") +
               (o.offload_optimizer ? " on the host" : "")).c_str(), o.amp ? (", autocast " + std::string(dtype_name(*o.amp))).c_str() : "",
              checkpoint_words(o).c_str(), ddp_words(o).c_str(), size(plan.peak_bytes).c_str(),
              plan.peak_phase.c_str(), size(plan.peak_reserved_bytes).c_str());
  std::printf("device needed: %s (the smallest --memory-limit the run fits in, fragmentation included)\n",
              size(plan.device_needed_bytes).c_str());
  std::printf("\n%-16s %12s %12s %12s\n", "phase", "start", "peak", "end");
  for (const train::PhasePlan& p : plan.phases)
    std::printf("%-16s %12s %12s %12s\n", p.name.c_str(), size(p.start_bytes).c_str(), size(p.peak_bytes).c_str(),
                size(p.end_bytes).c_str());
  std::printf("(allocated bytes over the %d planned steps: start when the phase first began, in step 1, before the\n"
              "optimizer has state; peak the most at any moment of it; end when it last ended, in step %d)\n",
              train::kPlannedSteps, train::kPlannedSteps);
  std::printf("\n%-28s %-22s %11s %11s %11s %11s %11s\n", "layer", "type", "params", "grads", "optimizer", "saved", "workspace");
  train::LayerPlan total{.name = "total"};
  for (const train::LayerPlan& l : grouped(plan.layers, depth)) {
    std::printf("%-28s %-22s %11s %11s %11s %11s %11s\n", l.name.c_str(), l.type.c_str(), size(l.param_bytes).c_str(),
                size(l.grad_bytes).c_str(), size(l.optimizer_bytes).c_str(), size(l.saved_bytes).c_str(),
                size(l.workspace_bytes).c_str());
    total.param_bytes += l.param_bytes;
    total.grad_bytes += l.grad_bytes;
    total.optimizer_bytes += l.optimizer_bytes;
    total.saved_bytes += l.saved_bytes;
    total.workspace_bytes = std::max(total.workspace_bytes, l.workspace_bytes);
  }
  std::printf("%-28s %-22s %11s %11s %11s %11s %11s\n", "total", "", size(total.param_bytes).c_str(),
              size(total.grad_bytes).c_str(), size(total.optimizer_bytes).c_str(), size(total.saved_bytes).c_str(),
              size(total.workspace_bytes).c_str());
  std::string tags;
  for (const auto& [tag, bytes] : plan.peak_by_tag) {
    if (bytes == 0) continue;
    if (!tags.empty()) tags += ", ";
    tags += tag + " " + size(bytes);
  }
  std::printf("\nat the peak: %s (the loader's batches: %s)\n", tags.c_str(), size(plan.data_bytes).c_str());
  if (o.offload_optimizer)
    std::printf("on the host: %s pinned for the optimizer (its state, and a copy of each weight and gradient)\n",
                size(plan.host_bytes - plan.activation_host_bytes).c_str());
  if (o.offload_activations)
    std::printf("on the host: %s pinned at most for the saved activations (at the end of a forward)\n",
                size(plan.activation_host_bytes).c_str());
}

// What a budget option keeps on the host: "-", "optimizer", "activations" or "both".
std::string offloaded_words(const train::BudgetOption& b) {
  if (b.offload_optimizer && b.offload_activations) return "both";
  if (b.offload_optimizer) return "optimizer";
  return b.offload_activations ? "activations" : "-";
}

void print_budget(const std::vector<train::BudgetOption>& options, std::int64_t budget) {
  std::printf("\nunder a budget of %s (fits: the device needed is within it):\n%-5s %11s %6s %11s %5s %-30s %6s %-9s %-11s %15s %13s  %s\n",
              size(budget).c_str(), "fits", "micro-batch", "accum", "checkpoint", "bf16", "saving", "in-bwd", "optimizer", "host",
              "predicted peak", "device needed", "cost, or why not");
  for (const train::BudgetOption& b : options) {
    const std::string why = b.fits ? b.cost : size(b.device_needed_bytes - budget) + " over (" + b.cost + ")";
    std::printf("%-5s %11lld %6lld %11s %5s %-30s %6s %-9s %-11s %15s %13s  %s\n", b.fits ? "yes" : "no", static_cast<long long>(b.batch_size),
                static_cast<long long>(b.accum), b.checkpoint_blocks.str().c_str(), b.bf16 ? "yes" : "no",
                b.saving.str().c_str(), b.optimizer_in_backward ? "yes" : "no", train::optimizer_name(b.optimizer).c_str(),
                offloaded_words(b).c_str(), size(b.peak_bytes).c_str(),
                size(b.device_needed_bytes).c_str(), why.c_str());
  }
  if (options.empty() || !options.front().fits) std::printf("nothing fits: a smaller model or a larger device is needed\n");
}

nlohmann::json budget_json(const std::vector<train::BudgetOption>& options, std::int64_t budget) {
  nlohmann::json j{{"bytes", budget}, {"options", nlohmann::json::array()}};
  for (const train::BudgetOption& b : options)
    j["options"].push_back({{"batch_size", b.batch_size}, {"accum", b.accum}, {"checkpoint_blocks", b.checkpoint_blocks.str()},
                            {"recomputed", b.recomputed},
                            {"bf16", b.bf16}, {"activation_saving", b.saving.str()},
                            {"optimizer_in_backward", b.optimizer_in_backward},
                            {"optimizer", train::optimizer_name(b.optimizer)},
                            {"offload_optimizer", b.offload_optimizer},
                            {"offload_activations", b.offload_activations}, {"zero", b.zero}, {"peak_bytes", b.peak_bytes},
                            {"device_needed_bytes", b.device_needed_bytes}, {"fits", b.fits}, {"cost", b.cost}});
  return j;
}

nlohmann::json plan_json(const train::TrainOptions& o, const train::MemoryPlan& plan) {
  nlohmann::json j{{"model", o.model},
                   {"batch_size", o.batch_size},
                   {"accum", o.accum},
                   {"image_size", o.image_size},
                   {"optimizer", train::optimizer_name(o.optimizer)},
                   {"optimizer_in_backward", o.optimizer_in_backward},
                   {"offload_optimizer", o.offload_optimizer},
                   {"offload_activations", o.offload_activations},
                   {"amp", o.amp ? nlohmann::json(std::string(dtype_name(*o.amp))) : nlohmann::json(nullptr)},
                   {"checkpoint_activations", o.checkpoint_activations},
                   {"checkpoint_blocks", models::checkpointed_blocks(o.checkpoint_activations, o.checkpoint_blocks).str()},
                   {"inplace_activations", o.inplace_activations},
                   {"activation_saving", o.saving.str()},
                   {"ddp_ranks", o.ddp ? nlohmann::json(o.ranks) : nlohmann::json(nullptr)},
                   {"zero", o.zero},
                   {"bucket_views", o.bucket_views},
                   {"peak_bytes", plan.peak_bytes},
                   {"peak_reserved_bytes", plan.peak_reserved_bytes},
                   {"device_needed_bytes", plan.device_needed_bytes},
                   {"host_bytes", plan.host_bytes},
                   {"activation_host_bytes", plan.activation_host_bytes},
                   {"peak_phase", plan.peak_phase},
                   {"peak_layer", plan.peak_layer_index >= 0 ? nlohmann::json(plan.layers[static_cast<std::size_t>(plan.peak_layer_index)].name) : nlohmann::json(nullptr)},
                   {"data_bytes", plan.data_bytes}};
  for (const auto& [tag, bytes] : plan.peak_by_tag) j["peak_bytes_by_tag"][tag] = bytes;
  for (const train::PhasePlan& p : plan.phases)
    j["phases"].push_back({{"name", p.name}, {"start_bytes", p.start_bytes}, {"peak_bytes", p.peak_bytes},
                           {"end_bytes", p.end_bytes}, {"peak_reserved_bytes", p.peak_reserved_bytes}});
  for (const train::LayerPlan& l : plan.layers)
    j["layers"].push_back({{"name", l.name}, {"type", l.type}, {"param_bytes", l.param_bytes},
                           {"grad_bytes", l.grad_bytes}, {"optimizer_bytes", l.optimizer_bytes},
                           {"host_bytes", l.host_bytes},
                           {"saved_bytes", l.saved_bytes}, {"workspace_bytes", l.workspace_bytes}});
  return j;
}

}  // namespace

PlanCommand::PlanCommand(CLI::App& app)
    : Subcommand(app.add_subcommand("plan", "Predict a training run's memory per phase and layer, without running it")) {
  CLI::App* c = command_;
  model_.add_to(*c, FlagsFor::plan);
  c->add_option("--in-channels", in_channels_, "Channels of the input images (default 1, Fashion-MNIST's)")->check(between(1, 4096));
  step_.add_to(*c, FlagsFor::plan);
  c->add_option("--ddp", ddp_, "Plan one rank of N data-parallel ranks (--batch-size per rank): its gradient buckets "
                "and, with --zero 1, 2 or 3, its shard of the optimizer state (and of the gradients, and of the parameters)")->check(between(1, 65536));
  ddp_flags_.add_to(*c);
  c->add_option("--depth", depth_, "Group the layer table by the first N parts of the names (default 2; 0: every layer)")
      ->check(between(0, 64));
  c->add_option("--budget", budget_, "Also list the ways of running the same steps that fit in SIZE (e.g. 512MiB)")
      ->check(not_empty());
  c->add_option("--json", json_, "Write the plan as one JSON document to this file")->check(not_empty());
}

int PlanCommand::run() const {
  try {
    train::TrainOptions o;
    model_.apply(o);
    step_.apply(o);
    FRUGAL_CHECK_VALUE(ddp_ || !ddp_flags_.any(), "--bucket-cap, --bucket-views and --zero need --ddp N");
    if (ddp_) {
      o.ddp = true;
      o.ranks = *ddp_;
      ddp_flags_.apply(o);
    }
    models::model_info(o.model);  // an unknown model is a bad flag, said before any work
    check_output_paths({{"--json", json_}}, {});
    train::validate(o);           // and so is a checkpoint block the model does not have
    const std::int64_t budget = budget_.empty() ? 0 : static_cast<std::int64_t>(parse_size(budget_));
    FRUGAL_CHECK_VALUE(budget_.empty() || budget > 0, "--budget must be more than 0 bytes, got '", budget_, "'");
    const train::PlanShape shape{.in_channels = in_channels_, .num_classes = o.num_classes.value_or(train::PlanShape{}.num_classes)};
    const train::MemoryPlan plan = train::plan_memory(o, shape);
    print_plan(o, plan, depth_);
    nlohmann::json j = plan_json(o, plan);
    if (budget > 0) {
      const std::vector<train::BudgetOption> options = train::fit_budget(o, budget, shape);
      print_budget(options, budget);
      j["budget"] = budget_json(options, budget);
    }
    if (!json_.empty()) write_json_file(json_, j);
    return 0;
  } catch (const Error& e) {
    return report_error("plan", e);
  }
}

}  // namespace frugal::cli
