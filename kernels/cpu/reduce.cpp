// CPU reductions (kernels/reduce_backends.h): each output's inputs folded with the accumulators of
// kernels/reduce_ops.h, in parallel over outputs, and over pieces of an output's inputs when there
// are few outputs.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/convert.h"
#include "core/cpu/strided_cursor.h"
#include "kernels/reduce_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

namespace {

// One output's inputs [begin, end) folded into the three accumulators (only the op's one is used).
struct Partial {
  SumAccumulator sum;
  Welford welford;
  MaxAccumulator best;
  void merge(const Partial& other) {
    sum.merge(other.sum);
    welford.merge(other.welford);
    best.merge(other.best);
  }
};

template <typename T>
Partial fold(Reduction op, const T* in, const StridedLayout& layout, std::int64_t first, std::int64_t begin,
             std::int64_t end) {
  Partial p;
  if (begin >= end) return p;  // a reduced dim of size 0 has no element to place a cursor on
  StridedCursor cursor(layout, first + begin);
  for (std::int64_t r = begin; r < end; ++r, cursor.advance()) {
    const double v = convert<double>(in[cursor.offset()]);
    if (op == Reduction::sum || op == Reduction::mean) p.sum.add(v);
    else if (op == Reduction::var) p.welford.add(v);
    else p.best.add(v, r);
  }
  return p;
}

double finish(Reduction op, const Partial& p, std::int64_t inner, std::int64_t correction) {
  switch (op) {
    case Reduction::sum: return p.sum.sum;
    case Reduction::mean: return p.sum.sum / static_cast<double>(inner);
    case Reduction::var: return p.welford.variance(correction);
    case Reduction::max:
    case Reduction::argmax: return p.best.value;
  }
  return 0.0;
}

// Few outputs with many inputs each (a whole-tensor sum is one output): each output's inputs are
// cut into this many pieces, folded in parallel, then merged in order. A fixed count, not the
// thread count, so the result is the same bits on any machine.
constexpr std::int64_t kPieces = 64;
constexpr std::int64_t kMinPiece = 1 << 14;  // smaller pieces cost more to merge than they save

}  // namespace

void reduce(Reduction op, DType dtype, const void* x, const StridedLayout& x_layout, std::int64_t outer,
            std::int64_t inner, std::int64_t correction, void* out, std::int64_t* indices) {
  visit_floating(dtype, "reductions", [&]<typename T, typename>() {  // accumulators are double, whatever C
    const T* in = static_cast<const T*>(x);
    T* result = static_cast<T*>(out);
    const std::int64_t pieces = outer >= kPieces ? 1 : std::clamp<std::int64_t>(inner / kMinPiece, 1, kPieces);
    std::vector<Partial> partials(static_cast<std::size_t>(outer * pieces));
    const std::int64_t piece = (inner + pieces - 1) / pieces;
    parallel_for(outer * pieces, outer * inner, [&](std::int64_t job) {
      const std::int64_t o = job / pieces, begin = job % pieces * piece;
      partials[job] = fold(op, in, x_layout, o * inner, begin, std::min(inner, begin + piece));
    });
    for (std::int64_t o = 0; o < outer; ++o) {
      Partial total = partials[o * pieces];
      for (std::int64_t p = 1; p < pieces; ++p) total.merge(partials[o * pieces + p]);
      result[o] = convert<T>(finish(op, total, inner, correction));
      if (indices) indices[o] = total.best.index;
    }
  });
}

}  // namespace frugal::cpu
