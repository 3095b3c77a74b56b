// DistributedDataParallel and ZeRO-1, -2 and -3 (see ddp.h): the model check and broadcast at
// construction, bucket assignment, the hooks that start each bucket's collective, synchronize(),
// ZeRO-3's gathering of each layer's parameters around its use, and the sharded optimizer with its
// consolidated state dict.
#include "dist/ddp.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/allocator.h"
#include "core/stream.h"
#include "nn/autograd.h"
#include "nn/checkpoint.h"

namespace frugal::dist {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// FNV-1a, 64 bits: the same value on every rank and every build, which std::hash does not promise.
std::int64_t fingerprint(const std::string& text) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  return static_cast<std::int64_t>(hash);
}

std::string describe(const char* kind, const std::string& name, const Tensor& t) {
  std::ostringstream out;
  out << kind << " '" << name << "' " << shape_str(t.shape()) << ' ' << t.dtype();
  return out.str();
}

Tensor i64_tensor(std::int64_t value, Device device) {
  return full({1}, static_cast<double>(value), {.dtype = DType::i64, .device = device});
}

// Every rank compares its list of parameters and buffers with rank 0's, by fingerprints, in three
// collectives whose sizes depend on rank 0 alone (so they match even when the models do not): rank
// 0's count, rank 0's fingerprints, then the smallest (index of the first difference, rank) pair
// over the world. Every rank then throws the same error, describing the entry as it sees it. The
// tensors live on the parameters' device: a GPU communicator moves GPU tensors only.
void check_same_model(const nn::Module& model, Communicator& comm) {
  const std::vector<Tensor> params = model.parameters();
  // Meta tensors (the planner's, over a mirrored world) hold no numbers to compare: host ones do.
  const Device device = params.empty() || params[0].device().is_meta() ? Device::cpu() : params[0].device();
  std::vector<std::string> entries;
  for (const auto& [name, t] : model.named_parameters()) entries.push_back(describe("parameter", name, t));
  for (const auto& [name, t] : model.named_buffers()) entries.push_back(describe("buffer", name, t));
  const auto count = static_cast<std::int64_t>(entries.size());

  const Tensor reference_count = i64_tensor(count, device);
  comm.broadcast(reference_count, 0);
  const auto n0 = reference_count.item<std::int64_t>();
  std::vector<std::int64_t> mine;
  for (const std::string& e : entries) mine.push_back(fingerprint(e));
  // Sized by rank 0's count everywhere; the broadcast overwrites what the other ranks put in.
  const Tensor reference = n0 > 0 && n0 == count ? from_vector(mine, {}, device)
                                                 : zeros({std::max<std::int64_t>(n0, 1)}, {.dtype = DType::i64, .device = device});
  comm.broadcast(reference, 0);
  const std::vector<std::int64_t> theirs = reference.to_vector<std::int64_t>();

  const std::int64_t none = n0 + 1;  // past any index where a difference can be
  std::int64_t first = count == n0 ? none : std::min(count, n0);
  for (std::int64_t i = 0; i < std::min(count, n0); ++i)
    if (mine[static_cast<std::size_t>(i)] != theirs[static_cast<std::size_t>(i)]) {
      first = i;
      break;
    }
  const std::int64_t world = comm.world_size();
  const Tensor code = i64_tensor(first * world + comm.rank(), device);
  comm.all_reduce(code, ReduceOp::min);
  const auto smallest = code.item<std::int64_t>();
  const std::int64_t index = smallest / world;
  if (index == none) return;
  const std::string here = index < count ? entries[static_cast<std::size_t>(index)]
                                         : "missing (this rank has " + std::to_string(count) + " parameters and buffers)";
  FRUGAL_THROW(DistributedError, "DistributedDataParallel: the ranks' models differ at parameter-or-buffer #", index,
               " (parameters, then buffers, in registration order): rank ", smallest % world, " differs from rank 0 ",
               "there; on this rank (", comm.rank(), ") it is ", here, ". Every rank must build the same model");
}

// Rank 0's parameters and buffers, every collective started before the first is waited on.
void broadcast_from_rank0(const nn::Module& model, Communicator& comm) {
  std::vector<std::pair<Tensor, Tensor>> pairs;  // (the module's tensor, the packed one sent)
  std::vector<WorkHandle> works;
  for (const nn::NamedTensors& list : {model.named_parameters(), model.named_buffers()})
    for (const auto& [name, t] : list) {
      pairs.emplace_back(t, t.contiguous());
      works.push_back(comm.broadcast_async(pairs.back().second, 0));
    }
  for (std::size_t i = 0; i < works.size(); ++i) {
    works[i]->wait();
    if (!pairs[i].first.is_same(pairs[i].second)) pairs[i].first.copy_(pairs[i].second);
  }
}

}  // namespace

// ---- the shared state

struct DistributedDataParallel::State {
  struct Slot {  // one parameter that requires grad
    std::string name;
    Tensor param;
    int bucket = 0;
    std::int64_t offset = 0;  // elements from the start of its bucket
    bool ready = false;       // its gradient is in the bucket this round
  };
  struct Slice {  // ZeRO: the part of a parameter inside this rank's chunk of its bucket
    int slot = 0;
    Tensor tensor;                  // 1-D, aliasing the parameter; what the inner optimizer updates
    std::int64_t param_offset = 0;  // where it starts in the flattened parameter
    std::int64_t chunk_offset = 0;  // where it starts in this rank's chunk
  };
  struct BucketState {
    std::int64_t numel = 0;     // of the buffer: its parameters', ZeRO padding to a multiple of the world size
    Tensor buffer;              // flat; ZeRO-2: only while a backward fills it and its collective runs
    std::vector<int> slots;     // in the order backward produces them
    std::vector<int> slices;    // ZeRO: this rank's slices of its parameters
    Tensor shard;               // ZeRO: the average of chunk rank() over the ranks
    // ZeRO-3: the bucket is one layer's parameters, and this rank keeps only its chunk of them.
    Tensor param_shard;         // this rank's chunk of the flattened parameters: what the optimizer updates
    Tensor gathering;           // the whole flattened parameters while an all-gather fills them
    WorkHandle gather_work;     // that all-gather, in flight
    bool gathered = false;      // the parameters' own storages hold their values now
    int accumulated = 0;        // ZeRO-3 under no_sync: gradients in this backward, to release the layer after the last
    int pending = 0;            // gradients not in yet this round
    WorkHandle work;            // the collective in flight this round
    bool seen_done = false;     // its completion was observed (for communication_seconds)
  };

  State(Communicator& c, DdpOptions o) : comm(c), options(o) {}

  Communicator& comm;
  DdpOptions options;
  std::vector<Slot> slots;
  std::vector<BucketState> buckets;
  std::vector<Bucket> described;
  std::vector<Slice> slices;
  bool attached = true;        // false once the DistributedDataParallel is gone: the hooks then do nothing
  bool sync = true;
  bool sharded = false;        // shard_optimizer() was called
  bool shards_reduced = false; // ZeRO: synchronize() ran since the last step
  // ZeRO-3: the layers each pass gathered in the first step, in order (Note [Gathering ahead]).
  enum class Pass : std::uint8_t { forward, backward };
  std::vector<int> pass_order[2];
  bool order_known = false;  // after the first synchronize(): the next layer of a pass is gathered ahead
  int full_depth = 0;        // ZeRO-3: FullParameters alive (they nest)
  std::map<const nn::Module*, int> bucket_of_layer;  // ZeRO-3: a layer's bucket
  std::size_t next_bucket = 0; // buckets start in index order
  bool round_started = false;
  std::vector<int> order;
  double wait_seconds = 0.0, communication_seconds = 0.0;
  int in_flight = 0;
  Clock::time_point busy_since;

  bool zero() const { return options.zero >= 1; }
  bool sharded_gradients() const { return options.zero >= 2; }
  bool sharded_parameters() const { return options.zero >= 3; }

  // The bucket's buffer, made (zeros, under the caller's tag: grad in backward, param in the step's
  // gather) if ZeRO-2 freed it.
  Tensor& buffer_of(BucketState& b) const {
    if (!b.buffer.defined()) {
      const Tensor& first = slots[static_cast<std::size_t>(b.slots.front())].param;
      b.buffer = zeros({b.numel}, {.dtype = first.dtype(), .device = first.device()});
    }
    return b.buffer;
  }
  Tensor view_of(const Slot& s) {
    BucketState& b = buckets[static_cast<std::size_t>(s.bucket)];
    return buffer_of(b).narrow(0, s.offset, s.param.numel()).view(s.param.shape());
  }
  std::int64_t chunk_numel(const BucketState& b) const { return b.numel / comm.world_size(); }

  // The part of slot `s`'s parameter inside this rank's chunk of its bucket `b`: where it starts in
  // the flattened parameter and in the chunk, and how many elements (0: none of it).
  struct ChunkPart {
    std::int64_t param_offset = 0, chunk_offset = 0, count = 0;
  };
  ChunkPart part_in_chunk(const BucketState& b, const Slot& s) const {
    const std::int64_t chunk = chunk_numel(b), begin = comm.rank() * chunk, end = begin + chunk;
    const std::int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.param.numel());
    if (lo >= hi) return {};
    return {.param_offset = lo - s.offset, .chunk_offset = lo - begin, .count = hi - lo};
  }

  // ZeRO-3: this rank's part of each of the bucket's parameters copied into its shard.
  void store_shard(BucketState& b) const {
    for (const int index : b.slots) {
      const Slot& s = slots[static_cast<std::size_t>(index)];
      const ChunkPart part = part_in_chunk(b, s);
      if (part.count > 0)
        b.param_shard.narrow(0, part.chunk_offset, part.count)
            .copy_(autograd::detach(s.param).view({-1}).narrow(0, part.param_offset, part.count));
    }
  }

  // View mode: makes the parameter's .grad its bucket view, copying a gradient that arrived as a
  // tensor of its own (after zero_grad set it to none) and freeing that tensor.
  void adopt_view(const Slot& s) {
    Tensor view = view_of(s);
    const Tensor g = autograd::grad(s.param);
    if (g.defined() && g.data_ptr() == view.data_ptr() && g.shares_storage_with(view)) return;
    if (g.defined()) {
      view.copy_(g);
    } else {
      view.fill_(0.0);
    }
    autograd::set_grad(s.param, view);
  }

  void on_gradient(int index) {
    Slot& s = slots[static_cast<std::size_t>(index)];
    // The bucket may be on the wire (a worker thread reading it): a second backward must wait.
    FRUGAL_CHECK_VALUE(!buckets[static_cast<std::size_t>(s.bucket)].work, "DistributedDataParallel: a gradient of '", s.name,
                       "' arrived while its bucket's collective is in flight; call synchronize() after every backward ",
                       "made outside no_sync()");
    if (options.gradient_as_bucket_view) adopt_view(s);
    if (!sync) {  // accumulating: the last micro-batch's backward reduces the sum
      BucketState& b = buckets[static_cast<std::size_t>(s.bucket)];
      if (sharded_parameters() && ++b.accumulated == static_cast<int>(b.slots.size())) {
        b.accumulated = 0;
        release_layer(s.bucket);  // ZeRO-3: this backward is done with the layer
      }
      return;
    }
    FRUGAL_CHECK_VALUE(!s.ready, "DistributedDataParallel: the gradient of '", s.name, "' arrived twice before ",
                       "synchronize(); call synchronize() after every backward made outside no_sync()");
    s.ready = true;
    if (!options.gradient_as_bucket_view) view_of(s).copy_(autograd::grad(s.param));
    if (sharded_gradients()) autograd::set_grad(s.param, Tensor());  // its bucket holds it now
    if (--buckets[static_cast<std::size_t>(s.bucket)].pending == 0) {
      release_layer(s.bucket);  // ZeRO-3: backward is done with this layer's parameters
      start_ready();
    }
    poll();
  }

  // The gradients that did not arrive through a hook this round: what .grad holds (accumulated
  // under no_sync), or zeros for a parameter without one.
  void fill_missing(BucketState& b) {
    for (const int index : b.slots) {
      Slot& s = slots[static_cast<std::size_t>(index)];
      if (s.ready) continue;
      const Tensor g = autograd::grad(s.param);
      if (options.gradient_as_bucket_view && g.defined()) {
        adopt_view(s);
      } else if (g.defined()) {
        view_of(s).copy_(g);
      } else {
        view_of(s).fill_(0.0);
      }
      if (sharded_gradients()) autograd::set_grad(s.param, Tensor());
      s.ready = true;
    }
    b.pending = 0;
  }

  void start_ready() {
    while (next_bucket < buckets.size() && buckets[next_bucket].pending == 0) start(next_bucket++);
  }

  void start(std::size_t index) {
    FRUGAL_CHECK_VALUE(!zero() || sharded, "DistributedDataParallel: ZeRO reduce-scatters each bucket into ",
                       "the shard a sharded optimizer steps; call shard_optimizer() before the first backward");
    if (!round_started) {
      order.clear();
      round_started = true;
    }
    BucketState& b = buckets[index];
    b.work = zero() ? comm.reduce_scatter_async(buffer_of(b), b.shard, ReduceOp::average)
                    : comm.all_reduce_async(buffer_of(b), ReduceOp::average);
    order.push_back(static_cast<int>(index));
    b.seen_done = false;
    if (in_flight++ == 0) busy_since = Clock::now();
  }

  void mark_done(BucketState& b) {
    b.seen_done = true;
    if (--in_flight == 0) communication_seconds += seconds_since(busy_since);
  }

  void poll() {
    for (const int index : order) {
      BucketState& b = buckets[static_cast<std::size_t>(index)];
      if (b.work && !b.seen_done && b.work->completed()) mark_done(b);
    }
  }

  // The averages back where the optimizer reads them.
  void finish(BucketState& b) {
    for (const int index : b.slots) {
      Slot& s = slots[static_cast<std::size_t>(index)];
      s.ready = false;
      if (zero()) continue;
      if (options.gradient_as_bucket_view) {
        adopt_view(s);  // the view already holds the average; this only gives a parameter without a gradient its view
      } else if (Tensor g = autograd::grad(s.param); g.defined()) {
        g.copy_(view_of(s));
      } else {
        autograd::set_grad(s.param, view_of(s).clone());
      }
    }
    for (const int index : b.slices) {
      const Slice& slice = slices[static_cast<std::size_t>(index)];
      autograd::set_grad(slice.tensor, b.shard.narrow(0, slice.chunk_offset, slice.tensor.numel()));
    }
    b.pending = static_cast<int>(b.slots.size());
    b.work.reset();
    if (sharded_gradients()) b.buffer = Tensor();  // its gradients are reduced into the shard
  }

  void synchronize() {
    MemoryTagScope tag(MemoryTag::grad);
    for (std::size_t i = next_bucket; i < buckets.size(); ++i) fill_missing(buckets[i]);
    start_ready();
    for (const int index : order) {
      BucketState& b = buckets[static_cast<std::size_t>(index)];
      if (b.seen_done) {
        b.work->wait();  // returns at once, or rethrows the failure
        continue;
      }
      const Clock::time_point start = Clock::now();
      b.work->wait();
      wait_seconds += seconds_since(start);
      mark_done(b);
    }
    for (BucketState& b : buckets) finish(b);
    next_bucket = 0;
    round_started = false;
    shards_reduced = zero();
    if (sharded_parameters()) {
      drop_gathers_ahead();
      for (BucketState& b : buckets) b.accumulated = 0;
      for (std::size_t i = 0; i < buckets.size(); ++i) release_layer(static_cast<int>(i));  // those no gradient reached
      order_known = true;  // the first step's passes are recorded: from now on the next layer is gathered ahead
    }
  }

  // ---- ZeRO-3: each layer's parameters gathered from the ranks' shards around its use.
  // A layer is gathered at the start of its forward call and released at its end; in backward it is
  // gathered when the first saved parameter of it is unpacked (core/storage.h's materializer; a
  // checkpointed block's recomputation gathers it at its forward call and keeps it) and released
  // once all its gradients are in its bucket.
  // Note [Gathering ahead]: every rank gathers the layers in the same order, so the all-gathers are
  // the same collectives in the same order everywhere. The first step records the order each pass
  // (forward; backward) gathered them in; from the second, gathering a layer also starts the
  // all-gather of the one after it in that pass, as FSDP's prefetch does, so it travels while this
  // one computes. Recorded rather than assumed: under autocast a convolution saves its 16-bit copy
  // of the weight, not the weight, so backward never gathers it. A gather started ahead that its
  // pass did not use is dropped at synchronize(): after the step it would hold the old weights.
  bool full_held() const { return full_depth > 0; }

  void drop_gathers_ahead() {
    for (BucketState& b : buckets)
      if (b.gather_work) {
        b.gather_work->wait();  // every rank started it: waiting is the same on every rank
        b.gather_work.reset();
        b.gathering = Tensor();
      }
  }

  void start_layer_gather(int index) {
    BucketState& b = buckets[static_cast<std::size_t>(index)];
    if (b.gathered || b.gather_work) return;
    const MemoryTagScope tag(MemoryTag::param);
    b.gathering = empty({b.numel}, {.dtype = b.param_shard.dtype(), .device = b.param_shard.device()});
    Tensor mine = b.gathering.narrow(0, comm.rank() * chunk_numel(b), chunk_numel(b));
    mine.copy_(b.param_shard);
    b.gather_work = comm.all_gather_async(mine, b.gathering);
  }

  // The layer's parameters back in their own storages, written byte for byte so that their versions
  // (which saved tensors check) stay what they were.
  void finish_layer_gather(int index) {
    BucketState& b = buckets[static_cast<std::size_t>(index)];
    if (b.gathered) return;
    start_layer_gather(index);
    b.gather_work->wait();
    const MemoryTagScope tag(MemoryTag::param);
    for (const int slot : b.slots) {
      const Tensor& p = slots[static_cast<std::size_t>(slot)].param;
      p.storage()->reallocate();
      const Tensor source = b.gathering.narrow(0, slots[static_cast<std::size_t>(slot)].offset, p.numel());
      copy_bytes_async(p.data_ptr(), p.device(), source.data_ptr(), source.device(), p.nbytes(), Stream{});
    }
    b.gathering = Tensor();
    b.gather_work.reset();
    b.gathered = true;
  }

  void release_layer(int index) {
    BucketState& b = buckets[static_cast<std::size_t>(index)];
    if (!sharded_parameters() || full_held() || !b.gathered) return;
    for (const int slot : b.slots) slots[static_cast<std::size_t>(slot)].param.storage()->release();
    b.gathered = false;
  }

  // Layer `index` gathered for `pass`; in the first step its place in the pass recorded, later the
  // pass's next layer set on its way (Note [Gathering ahead]).
  void gather_for_use(int index, Pass pass) {
    finish_layer_gather(index);
    if (full_held()) return;
    std::vector<int>& layers = pass_order[static_cast<std::size_t>(pass)];
    const auto it = std::find(layers.begin(), layers.end(), index);
    if (!order_known) {
      if (it == layers.end()) layers.push_back(index);
    } else if (it != layers.end() && std::next(it) != layers.end()) {
      start_layer_gather(*std::next(it));
    }
  }

  // A forward call of `module`: in backward, a checkpointed block's recomputation.
  void before_layer(const nn::Module& module) {
    const auto found = bucket_of_layer.find(&module);
    if (found == bucket_of_layer.end() || full_held()) return;
    gather_for_use(found->second, nn::checkpoint_recomputing() ? Pass::backward : Pass::forward);
  }

  // A recomputed layer stays gathered: its backward, about to run, needs it again.
  void after_layer(const nn::Module& module) {
    const auto found = bucket_of_layer.find(&module);
    if (found != bucket_of_layer.end() && !nn::checkpoint_recomputing()) release_layer(found->second);
  }

  // FullParameters: every layer gathered (all started, then each finished), kept until the last
  // (outermost) one ends.
  void gather_all() {
    if (!sharded_parameters() || full_depth++ > 0) return;
    drop_gathers_ahead();  // started before a step, they would hold the old weights
    for (std::size_t i = 0; i < buckets.size(); ++i) start_layer_gather(static_cast<int>(i));
    for (std::size_t i = 0; i < buckets.size(); ++i) finish_layer_gather(static_cast<int>(i));
  }

  // The end of the outermost FullParameters: this rank's chunk of what the parameters hold now
  // copied back into its shard (weights loaded under it stay loaded), then the memory given back.
  void release_all() {
    if (!sharded_parameters() || --full_depth > 0) return;
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      store_shard(buckets[i]);
      release_layer(static_cast<int>(i));
    }
  }

  // ZeRO, after the inner optimizer updated this rank's slices: every bucket's chunks gathered from
  // all ranks into the bucket buffer, then copied into the parameters. Stage 1 gathers every bucket
  // at once into its buffer (its gradients spent by then); stage 2 makes a buffer for one bucket at
  // a time and frees it, so the step holds one bucket of parameters more, not all of them.
  void gather_parameters() {
    if (sharded_parameters()) return;  // the shards are the parameters: the next forward gathers each layer
    MemoryTagScope tag(MemoryTag::param);
    std::vector<WorkHandle> works(buckets.size());
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      works[i] = start_gather(buckets[i]);
      if (sharded_gradients()) finish_gather(buckets[i], *works[i]);
    }
    if (!sharded_gradients())
      for (std::size_t i = 0; i < buckets.size(); ++i) finish_gather(buckets[i], *works[i]);
  }

  // In place: this rank's chunk of the bucket buffer is the all-gather's input, so no temporary copy
  // of 1/world of the parameters is made.
  WorkHandle start_gather(BucketState& b) {
    Tensor chunk = buffer_of(b).narrow(0, comm.rank() * chunk_numel(b), chunk_numel(b));
    for (const int index : b.slices) {
      const Slice& slice = slices[static_cast<std::size_t>(index)];
      chunk.narrow(0, slice.chunk_offset, slice.tensor.numel()).copy_(slice.tensor);
    }
    return comm.all_gather_async(chunk, b.buffer);  // the chunk is a view of the buffer, alive with it
  }

  void finish_gather(BucketState& b, Work& work) {
    work.wait();
    for (const int index : b.slots) {
      const Slot& s = slots[static_cast<std::size_t>(index)];
      s.param.view({-1}).copy_(b.buffer.narrow(0, s.offset, s.param.numel()));
    }
    if (sharded_gradients()) {
      b.buffer = Tensor();
    } else if (options.gradient_as_bucket_view) {
      b.buffer.fill_(0.0);  // the parameters' .grad are views of it: zeros, not parameter values, until the next backward
    }
  }
};

namespace {

using State = DistributedDataParallel::State;

// Consecutive slots (in backward order) up to the cap, the first bucket up to its own cap; a
// parameter larger than the cap gets a bucket of its own; a change of dtype starts a new bucket.
std::vector<std::vector<int>> assign_buckets(const std::vector<State::Slot>& slots, const DdpOptions& options) {
  std::vector<std::vector<int>> result;
  std::vector<int> current;
  std::size_t bytes = 0, cap = options.first_bucket_cap_bytes;
  auto close = [&] {
    result.push_back(std::move(current));
    current.clear();
    bytes = 0;
    cap = options.bucket_cap_bytes;
  };
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const Tensor& p = slots[i].param;
    const bool other_dtype = !current.empty() && slots[static_cast<std::size_t>(current[0])].param.dtype() != p.dtype();
    if (!current.empty() && (bytes + p.nbytes() > cap || other_dtype)) close();
    current.push_back(static_cast<int>(i));
    bytes += p.nbytes();
    if (bytes >= cap) close();
  }
  if (!current.empty()) close();
  return result;
}

// ZeRO-3: a bucket per layer, the parameters each module holds itself (not its children's), in the
// order backward reaches them (by their first slot); the layers are what forward gathers one by one.
std::vector<std::vector<int>> assign_layers(State& state, const nn::Module& model) {
  std::vector<std::pair<const nn::Module*, std::vector<int>>> layers;
  std::vector<bool> taken(state.slots.size(), false);
  for (const auto& [name, module] : model.named_modules()) {
    std::vector<int> members;
    for (const auto& [param_name, param] : module->named_parameters()) {
      if (param_name.find('.') != std::string::npos) continue;  // a child's
      for (std::size_t i = 0; i < state.slots.size(); ++i)
        if (!taken[i] && state.slots[i].param.is_same(param)) {
          taken[i] = true;
          members.push_back(static_cast<int>(i));
        }
    }
    std::sort(members.begin(), members.end());
    if (!members.empty()) layers.emplace_back(module, std::move(members));
  }
  std::sort(layers.begin(), layers.end(), [](const auto& a, const auto& b) { return a.second.front() < b.second.front(); });
  std::vector<std::vector<int>> groups;
  for (auto& [module, members] : layers) {
    state.bucket_of_layer[module] = static_cast<int>(groups.size());
    groups.push_back(std::move(members));
  }
  return groups;
}

void build_buckets(State& state, std::vector<std::vector<int>> groups) {
  const std::int64_t world = state.comm.world_size();
  MemoryTagScope tag(MemoryTag::grad);
  for (std::vector<int>& members : groups) {
    const auto b = static_cast<int>(state.buckets.size());
    State::BucketState bucket;
    DistributedDataParallel::Bucket described{.parameters = {}, .bytes = 0};
    std::int64_t numel = 0;
    for (const int index : members) {
      State::Slot& s = state.slots[static_cast<std::size_t>(index)];
      s.bucket = b;
      s.offset = numel;
      numel += s.param.numel();
      described.parameters.push_back(s.name);
      described.bytes += s.param.nbytes();
    }
    if (state.zero()) numel = (numel + world - 1) / world * world;
    const Tensor& first = state.slots[static_cast<std::size_t>(members[0])].param;
    const TensorOptions options{.dtype = first.dtype(), .device = first.device()};
    bucket.numel = numel;
    if (!state.sharded_gradients()) bucket.buffer = zeros({numel}, options);  // ZeRO-2 makes it when a backward needs it
    if (state.zero()) bucket.shard = zeros({numel / world}, options);
    bucket.pending = static_cast<int>(members.size());
    bucket.slots = std::move(members);
    state.buckets.push_back(std::move(bucket));
    state.described.push_back(std::move(described));
  }
}

// ZeRO-3: each layer's chunk of this rank copied out of its parameters (before the slices, which
// view it), under the param tag.
void make_parameter_shards(State& state) {
  const MemoryTagScope tag(MemoryTag::param);
  for (State::BucketState& b : state.buckets) {
    const Tensor& first = state.slots[static_cast<std::size_t>(b.slots.front())].param;
    b.param_shard = zeros({state.chunk_numel(b)}, {.dtype = first.dtype(), .device = first.device()});
    state.store_shard(b);
  }
}

// ZeRO-3: what giving each parameter's memory back needs, checked before any is given back (a
// failure then leaves the model as it was): each parameter owns its storage, and a layer's
// parameters share a dtype (its flat all-gather is of one).
void check_shardable(const State& state) {
  for (const State::BucketState& b : state.buckets)
    for (const int index : b.slots) {
      const State::Slot& s = state.slots[static_cast<std::size_t>(index)];
      const State::Slot& first = state.slots[static_cast<std::size_t>(b.slots.front())];
      FRUGAL_CHECK_VALUE(s.param.nbytes() == s.param.storage()->bytes(), "DistributedDataParallel: ZeRO-3 gives each ",
                         "parameter's memory back between uses, but '", s.name, "' shares its storage with other tensors");
      FRUGAL_CHECK_DTYPE(s.param.dtype() == first.param.dtype(), "DistributedDataParallel: ZeRO-3 gathers a layer's ",
                         "parameters as one, but '", s.name, "' is ", s.param.dtype(), " and '", first.name, "' ",
                         first.param.dtype());
    }
}

// ZeRO-3, once the shards hold this rank's part: every parameter gives its memory back, and learns
// how to gather it again when a saved tensor of it is unpacked in backward.
void release_parameters(State& state, const std::weak_ptr<State>& weak) {
  for (std::size_t b = 0; b < state.buckets.size(); ++b)
    for (const int index : state.buckets[b].slots) {
      const State::Slot& s = state.slots[static_cast<std::size_t>(index)];
      s.param.storage()->set_materializer([weak, b] {
        if (const std::shared_ptr<State> owner = weak.lock(); owner && owner->attached)
          owner->gather_for_use(static_cast<int>(b), State::Pass::backward);
      });
      s.param.storage()->release();
    }
}

// ZeRO: for every parameter, the part of it inside this rank's chunk of its bucket, if any.
void build_slices(State& state) {
  for (State::BucketState& b : state.buckets) {
    for (const int index : b.slots) {
      const State::Slot& s = state.slots[static_cast<std::size_t>(index)];
      const State::ChunkPart part = state.part_in_chunk(b, s);
      if (part.count == 0) continue;
      // ZeRO-3: the parameters come and go; the slice is this rank's own copy of that part.
      const Tensor tensor = state.sharded_parameters()
                                ? b.param_shard.narrow(0, part.chunk_offset, part.count)
                                : autograd::detach(s.param).view({-1}).narrow(0, part.param_offset, part.count);
      b.slices.push_back(static_cast<int>(state.slices.size()));
      state.slices.push_back({.slot = index, .tensor = tensor, .param_offset = part.param_offset, .chunk_offset = part.chunk_offset});
    }
  }
}

}  // namespace

// ---- DistributedDataParallel

// ZeRO-3's module hooks: a layer's parameters gathered before its forward call, released after.
class DistributedDataParallel::LayerHooks final : public nn::ModuleCallObserver {
 public:
  explicit LayerHooks(std::weak_ptr<State> state) : state_(std::move(state)) {}
  void before_call(const nn::Module& module) override {
    if (const std::shared_ptr<State> state = state_.lock(); state && state->attached) state->before_layer(module);
  }
  void after_call(const nn::Module& module, const Tensor*) override {
    if (const std::shared_ptr<State> state = state_.lock(); state && state->attached) state->after_layer(module);
  }

 private:
  std::weak_ptr<State> state_;
};


DistributedDataParallel::DistributedDataParallel(nn::Module& model, Communicator& comm, DdpOptions options)
    : state_(std::make_shared<State>(comm, options)) {
  FRUGAL_CHECK_VALUE(options.bucket_cap_bytes > 0 && options.first_bucket_cap_bytes > 0,
                     "DistributedDataParallel: bucket caps must be > 0 bytes, got ", options.first_bucket_cap_bytes,
                     " (first) and ", options.bucket_cap_bytes);
  FRUGAL_CHECK_VALUE(options.zero >= 0 && options.zero <= 3, "DistributedDataParallel: ZeRO stage ", options.zero,
                     " is not 0, 1, 2 or 3");
  FRUGAL_CHECK_VALUE(options.zero < 2 || !options.gradient_as_bucket_view, "DistributedDataParallel: ZeRO-", options.zero,
                     " frees each bucket once it is reduced, so gradients cannot live in them as views (gradient_as_bucket_view)");
  check_same_model(model, comm);
  broadcast_from_rank0(model, comm);
  nn::NamedTensors params = model.named_parameters();
  std::reverse(params.begin(), params.end());  // backward produces the last layers' gradients first
  for (auto& [name, param] : params) {
    if (!autograd::requires_grad(param)) continue;  // frozen: no gradient to average
    FRUGAL_CHECK_VALUE(param.is_contiguous(), "DistributedDataParallel: parameter '", name, "' is not contiguous");
    if (!state_->slots.empty()) {
      const Tensor& first = state_->slots[0].param;
      FRUGAL_CHECK_DEVICE(param.device() == first.device(), "DistributedDataParallel: parameter '", name, "' is on ",
                          param.device(), " but '", state_->slots[0].name, "' on ", first.device(),
                          "; the parameters must share one device");
    }
    state_->slots.push_back({.name = name, .param = param});
  }
  FRUGAL_CHECK_VALUE(!state_->slots.empty(), "DistributedDataParallel: the model has no parameter that requires grad");
  const std::weak_ptr<State> weak = state_;
  build_buckets(*state_, options.zero >= 3 ? assign_layers(*state_, model) : assign_buckets(state_->slots, options));
  if (options.zero >= 3) check_shardable(*state_);
  if (options.zero >= 3) make_parameter_shards(*state_);
  if (options.zero >= 1) build_slices(*state_);
  if (options.zero >= 3) {
    release_parameters(*state_, weak);
    layer_hooks_ = std::make_unique<LayerHooks>(weak);
    layer_scope_.emplace(*layer_hooks_);
  }
  for (std::size_t i = 0; i < state_->slots.size(); ++i)
    autograd::register_post_accumulate_grad_hook(state_->slots[i].param, [weak, i](const Tensor&) {
      if (const std::shared_ptr<State> state = weak.lock(); state && state->attached) state->on_gradient(static_cast<int>(i));
    });
}

DistributedDataParallel::~DistributedDataParallel() { state_->attached = false; }

DistributedDataParallel::FullParameters::FullParameters(std::shared_ptr<State> state) : state_(std::move(state)) {
  state_->gather_all();
}

DistributedDataParallel::FullParameters::~FullParameters() {
  if (state_) state_->release_all();
}

DistributedDataParallel::FullParameters DistributedDataParallel::full_parameters() { return FullParameters(state_); }

void DistributedDataParallel::set_sync(bool enabled) { state_->sync = enabled; }
bool DistributedDataParallel::sync_enabled() const { return state_->sync; }

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_enabled()) {
  ddp_.set_sync(false);
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.set_sync(previous_); }

void DistributedDataParallel::synchronize() { state_->synchronize(); }

const std::vector<DistributedDataParallel::Bucket>& DistributedDataParallel::buckets() const { return state_->described; }
std::vector<int> DistributedDataParallel::start_order() const { return state_->order; }
double DistributedDataParallel::wait_seconds() const { return state_->wait_seconds; }
double DistributedDataParallel::communication_seconds() const { return state_->communication_seconds; }
const DdpOptions& DistributedDataParallel::options() const { return state_->options; }

// ---- ZeRO's optimizer

namespace {

std::string state_key(std::size_t index, const std::string& name) { return "state." + std::to_string(index) + "." + name; }

// The optimizer a trainer steps under ZeRO (see shard_optimizer in ddp.h). Its own groups are
// the slice groups (what schedules change); the inner optimizer, built over the same slices,
// holds the state and does the arithmetic.
class ShardedOptimizer final : public nn::Optimizer {
 public:
  // full_slots[g][i]: the slot of parameter i of the caller's group g.
  ShardedOptimizer(std::shared_ptr<State> state, std::vector<nn::ParamGroup> slice_groups, std::unique_ptr<nn::Optimizer> inner,
                   std::vector<std::vector<int>> full_slots)
      : nn::Optimizer(std::move(slice_groups), {}, "ZeRO"),
        state_(std::move(state)),
        inner_(std::move(inner)),
        full_slots_(std::move(full_slots)) {}

  void step() override {
    FRUGAL_CHECK_VALUE(state_->shards_reduced, "ZeRO step(): no reduced gradients; call synchronize() after backward");
    autograd::NoGradGuard no_grad;
    nn::copy_group_settings(*this, *inner_);  // schedules set the groups' lr here
    inner_->step();
    state_->gather_parameters();
    state_->shards_reduced = false;
  }

  void zero_grad(bool set_to_none) override {
    for (const State::Slot& s : state_->slots) {
      if (set_to_none) {
        autograd::set_grad(s.param, Tensor());
      } else if (Tensor g = autograd::grad(s.param); g.defined()) {
        g.fill_(0.0);
      }
    }
    nn::Optimizer::zero_grad(set_to_none);  // the slices' gradients: synchronize() sets them again
  }

  bool found_inf_anywhere(bool found_here) override {
    const Tensor flag = full({1}, found_here ? 1.0 : 0.0, {.device = state_->slots[0].param.device()});
    state_->comm.all_reduce(flag, ReduceOp::max);
    return flag.item<float>() > 0.0f;
  }

  std::size_t state_bytes() const override { return inner_->state_bytes(); }
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& dict) override;

 private:
  void update(const nn::ParamGroup&, const Batch&) override {
    FRUGAL_THROW(Error, "ZeRO: step() updates through the inner optimizer, never through update()");
  }
  // The inner optimizer's number of the slice of `slot` on this rank, or -1.
  int inner_index(int slot) const;

  std::shared_ptr<State> state_;
  std::unique_ptr<nn::Optimizer> inner_;
  std::vector<std::vector<int>> full_slots_;
};

int ShardedOptimizer::inner_index(int slot) const {
  int index = 0;
  for (const nn::ParamGroup& group : inner_->param_groups())
    for (const Tensor& slice : group.params) {
      for (const State::Slice& s : state_->slices)
        if (s.slot == slot && s.tensor.is_same(slice)) return index;
      ++index;
    }
  return -1;
}

// Consolidated: for every state tensor kind, each bucket's chunks are all-gathered (one collective
// per bucket and kind, the same on every rank) and cut into whole-parameter tensors, numbered as an
// unsharded optimizer over the caller's groups numbers them.
nn::StateDict ShardedOptimizer::state_dict() const {
  const nn::StateDict inner = inner_->state_dict();
  std::map<std::string, Tensor> by_key(inner.begin(), inner.end());
  std::vector<std::string> names;  // the inner optimizer's state kinds, in its order
  std::int64_t step = 0;
  const std::string prefix = "state.0.";
  for (const auto& [key, tensor] : inner)
    if (key.starts_with(prefix)) {
      const std::string name = key.substr(prefix.size());
      if (name == "step") {
        step = tensor.item<std::int64_t>();
      } else {
        names.push_back(name);
      }
    }
  std::vector<std::vector<Tensor>> full_state(state_->slots.size(), std::vector<Tensor>(names.size()));
  if (step > 0) {
    // A copy made for a checkpoint and dropped once written, not state training keeps: under `other`,
    // so the optimizer tag keeps showing each rank's 1/world share (the total peak shows the copy).
    MemoryTagScope tag(MemoryTag::other);
    for (std::size_t k = 0; k < names.size(); ++k)
      for (const State::BucketState& b : state_->buckets) {
        const TensorOptions options{.dtype = b.shard.dtype(), .device = b.shard.device()};
        const Tensor chunk = zeros({state_->chunk_numel(b)}, options), gathered = zeros({b.numel}, options);
        for (const int index : b.slices) {
          const State::Slice& slice = state_->slices[static_cast<std::size_t>(index)];
          const int i = inner_index(slice.slot);
          if (i < 0) continue;  // a parameter the caller's groups left out
          chunk.narrow(0, slice.chunk_offset, slice.tensor.numel()).copy_(by_key.at(state_key(static_cast<std::size_t>(i), names[k])));
        }
        state_->comm.all_gather(chunk, gathered);
        for (const int index : b.slots) {
          const Tensor& param = state_->slots[static_cast<std::size_t>(index)].param;
          full_state[static_cast<std::size_t>(index)][k] =
              gathered.narrow(0, state_->slots[static_cast<std::size_t>(index)].offset, param.numel()).view(param.shape()).clone();
        }
      }
  }
  nn::StateDict dict;
  std::size_t number = 0;
  for (const std::vector<int>& group : full_slots_)
    for (const int slot : group) {
      const std::size_t i = number++;
      if (step == 0) continue;
      for (std::size_t k = 0; k < names.size(); ++k) dict.emplace_back(state_key(i, names[k]), full_state[static_cast<std::size_t>(slot)][k]);
      dict.emplace_back(state_key(i, "step"), full({}, static_cast<double>(step), {.dtype = DType::i64}));
    }
  for (auto& entry : nn::group_entries(nn::Optimizer::state_dict())) dict.push_back(std::move(entry));  // lr, wd, initial lr
  return dict;
}

// Each rank keeps its slices of the whole-parameter state; the inner optimizer checks the rest.
void ShardedOptimizer::load_state_dict(const nn::StateDict& dict) {
  std::map<std::string, Tensor> remaining(dict.begin(), dict.end());
  nn::StateDict inner, groups;
  for (auto it = remaining.begin(); it != remaining.end();)
    if (it->first.starts_with("param_groups.")) {
      inner.emplace_back(*it);
      groups.emplace_back(*it);
      it = remaining.erase(it);
    } else {
      ++it;
    }
  std::size_t number = 0;
  for (const std::vector<int>& group : full_slots_)
    for (const int slot : group) {
      const std::string prefix = "state." + std::to_string(number++) + ".";
      const Tensor& param = state_->slots[static_cast<std::size_t>(slot)].param;
      const int i = inner_index(slot);
      for (auto it = remaining.lower_bound(prefix); it != remaining.end() && it->first.starts_with(prefix);) {
        const std::string name = it->first.substr(prefix.size());
        Tensor value = it->second;
        if (name != "step") {
          FRUGAL_CHECK_SHAPE(value.shape() == param.shape(), "ZeRO load_state_dict: '", it->first, "' has shape ",
                             shape_str(value.shape()), " but its parameter has shape ", shape_str(param.shape()));
        }
        if (i >= 0) {
          if (name != "step") {
            const State::Slice& slice = *std::find_if(state_->slices.begin(), state_->slices.end(),
                                                      [&](const State::Slice& s) { return s.slot == slot; });
            value = value.contiguous().view({-1}).narrow(0, slice.param_offset, slice.tensor.numel());
          }
          inner.emplace_back(state_key(static_cast<std::size_t>(i), name), value);
        }
        it = remaining.erase(it);
      }
    }
  FRUGAL_CHECK_VALUE(remaining.empty(), "ZeRO load_state_dict: unexpected key '", remaining.begin()->first,
                     "' (a dict of another optimizer, or of other parameters?)");
  inner_->load_state_dict(inner);
  nn::Optimizer::load_state_dict(groups);
}

}  // namespace

std::unique_ptr<nn::Optimizer> DistributedDataParallel::shard_optimizer(
    std::function<std::unique_ptr<nn::Optimizer>(std::vector<nn::ParamGroup>)> make, std::vector<nn::ParamGroup> groups) {
  State& state = *state_;
  FRUGAL_CHECK_VALUE(state.zero(), "shard_optimizer: ZeRO is off (DdpOptions::zero is 0); step an ordinary optimizer");
  FRUGAL_CHECK_VALUE(!state.sharded, "shard_optimizer: already called; one sharded optimizer per DistributedDataParallel");
  std::vector<nn::ParamGroup> slice_groups;
  std::vector<std::vector<int>> full_slots;
  std::size_t slice_count = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    nn::ParamGroup slices{.params = {}, .lr = groups[g].lr, .weight_decay = groups[g].weight_decay, .initial_lr = groups[g].initial_lr};
    std::vector<int>& members = full_slots.emplace_back();
    for (const Tensor& param : groups[g].params) {
      const auto slot = std::find_if(state.slots.begin(), state.slots.end(), [&](const State::Slot& s) { return s.param.is_same(param); });
      FRUGAL_CHECK_VALUE(slot != state.slots.end(), "shard_optimizer: a parameter of shape ", shape_str(param.shape()),
                         " in group ", g, " is not one of the model's parameters that require grad");
      const int index = static_cast<int>(slot - state.slots.begin());
      members.push_back(index);
      for (const State::Slice& s : state.slices)
        if (s.slot == index) slices.params.push_back(s.tensor);
    }
    slice_count += slices.params.size();
    slice_groups.push_back(std::move(slices));
  }
  FRUGAL_CHECK_VALUE(slice_count > 0, "shard_optimizer: rank ", state.comm.rank(), " of ", state.comm.world_size(),
                     " holds no element of the given parameters (the buckets are too small to share among ",
                     state.comm.world_size(), " ranks)");
  std::unique_ptr<nn::Optimizer> inner = make(slice_groups);
  FRUGAL_CHECK_VALUE(inner && inner->param_groups().size() == slice_groups.size(),
                     "shard_optimizer: `make` must build an optimizer over the groups it is given");
  state.sharded = true;
  return std::make_unique<ShardedOptimizer>(state_, std::move(slice_groups), std::move(inner), std::move(full_slots));
}

}  // namespace frugal::dist
