// The per-row arithmetic of softmax, log-softmax and their backward, written once as
// FRUGAL_HOST_DEVICE code for the CPU loops and the CUDA kernels (and for cross-entropy,
// kernels/loss_ops.h, which builds on LogSumExp). Values are in the compute type C: float, or double
// for f64. Not here: loops, launches, layouts or checks (kernels/softmax.cpp).
//
// Every formula shifts by the row's max so exp never overflows:
//   softmax(x)     = exp(x - max) / sum,   sum = sum_c exp(x_c - max)
//   log_softmax(x) = x - max - log(sum)
#pragma once

#include <limits>

#include "core/host_device.h"
#include "kernels/elementwise_ops.h"

namespace frugal {

// The row's max and sum of exp(x - max), gathered in one pass ("online softmax", Milakov and
// Gimelshein 2018): when a larger value arrives, the sum so far is rescaled to the new max. Two
// partial results merge the same way, which is what a tree of CUDA threads needs. A NaN never
// becomes the max (comparisons with it fail) but makes the sum NaN, so the row's outputs are NaN.
template <typename C>
struct LogSumExp {
  C max = -std::numeric_limits<C>::infinity();
  C sum = C(0);

  // exp(from - to) for from <= to; 1 when they are equal, so a row of -inf (or its first -inf)
  // does not compute exp(-inf - -inf) = NaN here. A later finite max rescales that 1 to 0.
  FRUGAL_HOST_DEVICE static C rescale(C from, C to) { return from == to ? C(1) : elementwise::exp_of(from - to); }

  FRUGAL_HOST_DEVICE void merge(const LogSumExp& other) {
    const C larger = other.max > max ? other.max : max;
    sum = sum * rescale(max, larger) + other.sum * rescale(other.max, larger);
    max = larger;
  }
  FRUGAL_HOST_DEVICE void add(C x) { merge(LogSumExp{x, C(1)}); }
};

// What the forward's write pass needs of a row, log(sum) taken once per row.
template <typename C>
struct SoftmaxRow {
  C max, sum, log_sum;
  FRUGAL_HOST_DEVICE SoftmaxRow(C row_max, C row_sum)
      : max(row_max), sum(row_sum), log_sum(elementwise::log_of(row_sum)) {}
  FRUGAL_HOST_DEVICE explicit SoftmaxRow(const LogSumExp<C>& row) : SoftmaxRow(row.max, row.sum) {}

  // x - max first: exact when x is near the max, so huge logits (1e4) keep their small differences.
  FRUGAL_HOST_DEVICE C softmax(C x) const { return elementwise::exp_of(x - max) / sum; }
  FRUGAL_HOST_DEVICE C log_softmax(C x) const { return x - max - log_sum; }
  FRUGAL_HOST_DEVICE C output(bool log, C x) const { return log ? log_softmax(x) : softmax(x); }
};

// A plain sum, as an accumulator (add, merge) for the backward's row reduction.
template <typename C>
struct RowSum {
  C value = C(0);
  FRUGAL_HOST_DEVICE void add(C x) { value += x; }
  FRUGAL_HOST_DEVICE void merge(const RowSum& other) { value += other.value; }
};

// The backward, given the upstream gradient g and the forward's output y along the row:
//   softmax:      dx = y * (g - sum(g * y))
//   log_softmax:  dx = g - exp(y) * sum(g)
// softmax_backward_term is what the row sums; softmax_backward_output one element of dx.
template <typename C>
FRUGAL_HOST_DEVICE inline C softmax_backward_term(bool log, C g, C y) {
  return log ? g : g * y;
}
template <typename C>
FRUGAL_HOST_DEVICE inline C softmax_backward_output(bool log, C g, C y, C row_sum) {
  return log ? g - elementwise::exp_of(y) * row_sum : y * (g - row_sum);
}

}  // namespace frugal
