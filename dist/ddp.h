// DistributedDataParallel: data parallelism over a Communicator, as torch.nn.parallel.DDP. Every
// rank holds the whole model and runs forward and backward on its own part of the batch; the
// gradients are averaged over the ranks before the optimizer step, so every rank takes the same
// step and the replicas stay equal. With ZeRO (DdpOptions::zero) each rank also keeps the optimizer
// state of only 1/world_size of the parameters (stage 1), the gradients too (stage 2), and the
// parameters themselves (stage 3, as FSDP).
//
// Gradient buckets. The parameters are packed, in reverse registration order (the order backward
// produces their gradients), into flat buckets of at most bucket_cap_bytes (the first one
// first_bucket_cap_bytes, so communication starts early; a parameter larger than the cap gets a
// bucket of its own). Each parameter's post-accumulate hook (nn/autograd.h) copies its gradient
// into its bucket; when a bucket's last gradient is in, its collective starts asynchronously
// while backward goes on computing the next gradients. Buckets start in index order on every rank
// (a bucket ready early waits for the ones before it), because every rank must issue the same
// collectives in the same order. synchronize() then waits for them and writes the averages back.
// Collectives are given the default stream (Stream{}), where frugal's kernels run: a device
// backend orders each after the gradient copies queued there, and later kernels after it.
// The loop:
//     DistributedDataParallel ddp(model, comm);            // broadcasts rank 0's weights
//     loss = ...(model(x_of_this_rank));  autograd::backward(loss);
//     ddp.synchronize();  optimizer.step();  optimizer.zero_grad();
// Gradient accumulation: backward under no_sync() only accumulates locally; the last micro-batch's
// backward (outside no_sync) averages the accumulated gradients.
//
// gradient_as_bucket_view: each parameter's .grad is a view into its bucket, so gradients are not
// held twice. When a gradient arrives as a new tensor (the first backward after zero_grad set the
// gradients to none), the hook copies it into the bucket and frees it: one parameter's gradient at
// a time is the only extra memory.
//
// ZeRO-1: the buckets are padded to a multiple of the world size and reduce-scattered instead of
// all-reduced: rank r receives the average of chunk r of every bucket. The part of a parameter
// inside this rank's chunk is a contiguous 1-D slice of it; shard_optimizer() builds the inner
// optimizer over those slices (views aliasing the parameters, their gradients the reduced chunk),
// so its state covers 1/world_size of the parameters. Its step() updates the slices, then every
// bucket's parameters are all-gathered (into the gradient bucket, whose gradients are spent by
// then). After a ZeRO-1 synchronize() only this rank's slices hold averaged gradients; the
// parameters' own .grad keep the local ones (in view mode, zeros after the step).
//
// ZeRO-2 shards the gradients as well: a bucket's buffer exists only from its first gradient of a
// backward until its reduce-scatter is done, and each parameter's .grad is freed as soon as it is
// copied into the bucket, so between steps a rank keeps only its chunk of each bucket's averaged
// gradients (the shard), and during backward the buckets in flight. The step's all-gather then
// needs a bucket-sized buffer of its own, made and freed one bucket at a time. Under no_sync the
// micro-batches before the last accumulate whole gradients in .grad, as without ZeRO: the saving
// holds from the last micro-batch's backward on. Not with gradient_as_bucket_view (the buckets are
// not kept).
//
// ZeRO-3 shards the parameters as well. Each layer (a module's own parameters) is one bucket, and
// each rank keeps its chunk of it (the shard its optimizer updates); the parameters' own memory is
// given back (core/storage.h: Storage::release) except while they are used: a layer's parameters
// are all-gathered when its forward call begins and released when it ends (a module-call observer
// this object installs on its thread), gathered again in backward when a node unpacks one that it
// saved, and released once the layer's gradients are in its bucket. From the second step on, the
// next layer's all-gather starts while the current one computes (in the order each pass gathered
// them in the first step). So between steps a rank holds 1/N of the parameters, gradients and
// optimizer state, and at any moment the whole parameters of about two layers (the one in use and
// the next), each held twice for a moment while its gathered values are copied into place. Whoever
// reads or writes the whole model (a checkpoint, an evaluation, weights loaded) does so under
// full_parameters(), on every rank. Once this object is gone the parameters' memory stays given
// back: copy what is needed (model.state_dict(), cloned) under full_parameters() first.
//
// Parameters that no rank produced a gradient for in a synchronized backward get a zero gradient
// (PyTorch's find_unused_parameters keeps them None at the price of an extra all-reduce), so every
// rank's optimizer sees the same gradients. Buffers (BatchNorm's running statistics) are broadcast
// from rank 0 at construction only. Build DDP after moving the model to its device and dtype:
// buckets and slices are views of the memory the parameters have then.
//
// Not here: how the bytes travel (dist/communicator.h and its backends), splitting the data
// between ranks (the trainer), parameters sharded by other units than a layer (FSDP's wrapping).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "nn/module.h"
#include "nn/optim.h"

namespace frugal::dist {

struct DdpOptions {
  std::size_t bucket_cap_bytes = 25 << 20;       // PyTorch's default bucket_cap_mb = 25
  std::size_t first_bucket_cap_bytes = 1 << 20;  // PyTorch's first bucket: small, so communication starts early
  bool gradient_as_bucket_view = false;          // .grad tensors are views into the buckets: no second copy
  // ZeRO stage: 0 off; 1 the optimizer state sharded (reduce-scatter, local update, all-gather);
  // 2 the gradients too (the buckets freed once reduced, .grad freed once in its bucket); 3 the
  // parameters too (gathered per layer around its use; one bucket per layer, whatever the caps).
  int zero = 0;
};

class DistributedDataParallel {
 public:
  struct State;  // everything the hooks and the sharded optimizer share (ddp.cpp)
  struct Bucket {
    std::vector<std::string> parameters;  // dotted names, in the order backward produces their gradients
    std::size_t bytes;                    // its gradients' bytes (ZeRO pads the buffer by < world_size elements)
  };

  // Verifies that every rank's parameters and buffers have the same names, shapes and dtypes (a
  // DistributedError on every rank naming the first difference and a rank that has it), broadcasts
  // them from rank 0, builds the buckets (under MemoryTag::grad) and registers the hooks. The
  // parameters that require grad must share one device. `model` and `comm` must outlive this.
  DistributedDataParallel(nn::Module& model, Communicator& comm, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Off: backward only accumulates gradients locally (the micro-batches before the last).
  void set_sync(bool enabled);
  bool sync_enabled() const;
  // set_sync(false) for its lifetime, then back to what it was.
  class [[nodiscard]] NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // After backward, before the optimizer step: starts every bucket not started yet (all of them
  // after a backward under no_sync, or those holding a parameter that got no gradient), waits for
  // every bucket's collective and leaves the gradients averaged over the ranks (ZeRO: this rank's
  // slices). Every rank must call it the same number of times.
  void synchronize();

  // ZeRO only (ValueError otherwise, or when called twice): the optimizer to step with. `make`
  // builds the inner optimizer (SGD, AdamW, ...) from groups of this rank's slices, each group
  // keeping the lr and weight decay of the group in `groups` its parameters come from; every
  // parameter in `groups` must be one of the model's. The returned optimizer's param_groups() are
  // those slice groups: a schedule changing their lr changes the inner optimizer's at the next
  // step(). Its step() updates the slices and all-gathers the parameters; zero_grad() clears the
  // model's gradients; state_bytes() is this rank's share. state_dict() is consolidated: every
  // rank must call it together, and each gets the dict an unsharded optimizer of the same kind
  // over `groups` would give (so checkpoints do not depend on the world size); load_state_dict
  // takes such a dict on every rank and keeps this rank's slices. With loss scaling, the ranks
  // agree on skipping a step (found_inf_anywhere all-reduces).
  std::unique_ptr<nn::Optimizer> shard_optimizer(std::function<std::unique_ptr<nn::Optimizer>(std::vector<nn::ParamGroup>)> make,
                                                 std::vector<nn::ParamGroup> groups);

  // ZeRO-3: while it lives every layer's parameters are gathered and kept (every rank must make it
  // together: it all-gathers); when it ends each rank keeps its chunk of what they hold then, so
  // weights loaded or changed under it stay, and their memory is given back. Without ZeRO-3 it
  // does nothing.
  class [[nodiscard]] FullParameters {
   public:
    ~FullParameters();
    FullParameters(FullParameters&& other) noexcept = default;
    FullParameters& operator=(FullParameters&&) = delete;
    FullParameters(const FullParameters&) = delete;
    FullParameters& operator=(const FullParameters&) = delete;

   private:
    friend class DistributedDataParallel;
    explicit FullParameters(std::shared_ptr<State> state);
    std::shared_ptr<State> state_;
  };
  FullParameters full_parameters();

  const std::vector<Bucket>& buckets() const;
  std::vector<int> start_order() const;  // bucket indices in the order the last round started their collectives
  // Seconds synchronize() blocked waiting on communication, and seconds at least one collective
  // was in flight (completion is seen when a hook or synchronize() polls): the overlap fraction is
  // 1 - wait / communication. Device backends do not block the host in wait(), so there they
  // measure the host's view only.
  double wait_seconds() const;
  double communication_seconds() const;
  const DdpOptions& options() const;

 private:
  class LayerHooks;  // ZeRO-3: gathers and releases each layer around its forward call (ddp.cpp)
  std::shared_ptr<State> state_;  // the hooks hold it weakly: after this object dies they do nothing
  std::unique_ptr<LayerHooks> layer_hooks_;
  std::optional<nn::ModuleCallObserverScope> layer_scope_;  // after layer_hooks_: ends first
};

}  // namespace frugal::dist
