// nn/batch_slices.h: the thread's modes, carried to another thread, and the loop over slices.
#include "nn/batch_slices.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/error.h"
#include "nn/checkpoint.h"
#include "nn/module.h"

namespace frugal::nn {

ThreadModes ThreadModes::current() {
  return {.grad_mode = autograd::grad_mode_enabled(),
          .anomaly_mode = autograd::anomaly_mode_enabled(),
          .autocast = autocast_dtype(),
          .saving = activation_saving(),
          .tag = current_memory_tag(),
          .context = current_memory_context(),
          .default_device = frugal::default_device()};
}

ThreadModesScope::ThreadModesScope(const ThreadModes& modes)
    : grad_mode_(modes.grad_mode),
      anomaly_mode_(modes.anomaly_mode),
      autocast_(modes.autocast),
      saving_(modes.saving),
      tag_(modes.tag),
      context_(modes.context),
      default_device_(modes.default_device) {}

void for_each_batch_slice(std::int64_t batch, std::int64_t slice,
                          const std::function<void(std::int64_t first, std::int64_t count)>& body) {
  FRUGAL_CHECK_VALUE(batch >= 0 && slice >= 1, "for_each_batch_slice: batch (", batch, ") must be >= 0 and slice (",
                     slice, ") >= 1");
  FRUGAL_CHECK_VALUE(!autograd::grad_mode_enabled() && !module_calls_observed() && !checkpoint_first_run() &&
                         !checkpoint_recomputing(),
                     "for_each_batch_slice: slices run on other threads, so not with grad mode on, module calls "
                     "observed or inside a checkpoint (their graphs and observers are this thread's)");
  const std::int64_t slices = (batch + slice - 1) / slice;
  const auto run = [&](std::int64_t s) { body(s * slice, std::min(slice, batch - s * slice)); };
  if (slices < 2 || omp_get_max_threads() < 2) {
    for (std::int64_t s = 0; s < slices; ++s) run(s);
    return;
  }
  const ThreadModes modes = ThreadModes::current();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(slices));  // an exception must not leave the region
  cpu::parallel_for_in_region(slices, [&](std::int64_t s) {  // a slice is worth a thread: no work threshold
    omp_set_num_threads(1);  // for this slice's own regions and GEMMs (this thread's setting, inside this region)
    try {
      const ThreadModesScope in_callers_modes(modes);
      const ThreadOwnBlocksScope own_blocks;  // Note [A thread's own host blocks] in core/allocator.h
      run(s);
    } catch (...) {
      errors[static_cast<std::size_t>(s)] = std::current_exception();
    }
  });
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
}

}  // namespace frugal::nn
