// The all-reduce measurement of `frugal bench allreduce`, over any Communicator: the seam through
// which other backends' communicators are measured the same way.
#pragma once

#include <vector>

#include "bench/bench.h"
#include "dist/communicator.h"

namespace frugal::bench {

// For each message size (a few KiB to tens of MiB of f32; two small sizes when `quick`), the
// all-reduce (sum) bandwidth as nccl-tests defines it, on tensors of `device`:
//   algbw = bytes / time            (case "all_reduce SIZE algbw")
//   busbw = algbw * 2 (n - 1) / n   (case "all_reduce SIZE busbw", n = world size): what each rank's
//           link carries in a ring all-reduce, comparable across world sizes and with the hardware.
// time is the median over repeats of the slowest rank's time. Collective over `comm`: every rank calls
// it; every rank gets the same rows. impl is "BACKEND (N ranks)".
std::vector<Result> all_reduce_bandwidth(dist::Communicator& comm, Device device, bool quick);

}  // namespace frugal::bench
