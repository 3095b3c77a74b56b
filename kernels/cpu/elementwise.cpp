// CPU elementwise kernels (kernels/elementwise_backends.h): one strided loop, parallel over chunks
// when it is big enough (core/cpu/parallel.h), around the per-element functions of
// kernels/elementwise_ops.h.
#include <array>
#include <utility>

#include "core/convert.h"
#include "core/cpu/parallel.h"
#include "core/cpu/strided_cursor.h"
#include "kernels/elementwise_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

namespace {

// Calls body(offsets) for every element, where offsets[k] is the element's offset in layouts[k].
// All layouts have the same sizes (broadcasting made them so with stride-0 dims).
template <std::size_t N, typename Body>
void strided_loop(const std::array<const StridedLayout*, N>& layouts, Body&& body) {
  const std::int64_t n = layout_numel(*layouts[0]);
  bool all_row_major = true;
  for (const StridedLayout* layout : layouts) all_row_major = all_row_major && is_row_major(*layout);
  if (all_row_major) {  // the common case: element i at offset i everywhere, a loop the compiler vectorises
    parallel_for_chunks(n, kChunk, n, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        std::array<std::int64_t, N> offsets;
        offsets.fill(i);
        body(offsets);
      }
    });
    return;
  }
  parallel_for_chunks(n, kChunk, n, [&](std::int64_t begin, std::int64_t end) {
    auto cursors = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::array<StridedCursor, N>{StridedCursor(*layouts[I], begin)...};
    }(std::make_index_sequence<N>{});
    for (std::int64_t i = begin; i < end; ++i) {
      std::array<std::int64_t, N> offsets;
      for (std::size_t k = 0; k < N; ++k) offsets[k] = cursors[k].offset();
      body(offsets);
      for (auto& cursor : cursors) cursor.advance();
    }
  });
}

// Calls fn.template operator()<Op>() with the op as a compile-time constant, so the switch inside
// the per-element function folds away and each loop compiles to straight, vectorisable code.
template <typename Enum, Enum... kOps, typename Fn>
void with_constant(Enum op, Fn&& fn) {
  bool found = ((op == kOps ? (fn.template operator()<kOps>(), true) : false) || ...);
  FRUGAL_CHECK(found, "unknown elementwise op ", static_cast<int>(op));
}

template <typename Fn>
void visit_unary(UnaryOp op, Fn&& fn) {
  using U = UnaryOp;
  with_constant<U, U::neg, U::exp, U::log, U::sqrt, U::rsqrt, U::abs, U::relu, U::relu6, U::sigmoid, U::tanh,
                U::add_scalar, U::mul_scalar, U::div_scalar, U::pow_scalar, U::clamp>(op, fn);
}

template <typename Fn>
void visit_binary(BinaryOp op, Fn&& fn) {
  using B = BinaryOp;
  with_constant<B, B::add, B::sub, B::mul, B::div, B::maximum, B::minimum, B::relu_backward, B::relu6_backward,
                B::sigmoid_backward, B::tanh_backward>(op, fn);
}

}  // namespace

void unary(UnaryOp op, double a, double b, DType dtype, void* out, const StridedLayout& out_layout, const void* x,
           const StridedLayout& x_layout) {
  visit_floating(dtype, "elementwise kernels", [&]<typename T, typename C>() {
    T* o = static_cast<T*>(out);
    const T* in = static_cast<const T*>(x);
    const C ca = static_cast<C>(a), cb = static_cast<C>(b);
    visit_unary(op, [&]<UnaryOp kOp>() {
      strided_loop<2>({&out_layout, &x_layout}, [&](const auto& at) {
        o[at[0]] = convert<T>(elementwise::unary<C>(kOp, convert<C>(in[at[1]]), ca, cb));
      });
    });
  });
}

void binary(BinaryOp op, DType dtype, void* out, const StridedLayout& out_layout, const void* x,
            const StridedLayout& x_layout, const void* y, const StridedLayout& y_layout) {
  visit_floating(dtype, "elementwise kernels", [&]<typename T, typename C>() {
    T* o = static_cast<T*>(out);
    const T* first = static_cast<const T*>(x);
    const T* second = static_cast<const T*>(y);
    visit_binary(op, [&]<BinaryOp kOp>() {
      strided_loop<3>({&out_layout, &x_layout, &y_layout}, [&](const auto& at) {
        o[at[0]] = convert<T>(elementwise::binary<C>(kOp, convert<C>(first[at[1]]), convert<C>(second[at[2]])));
      });
    });
  });
}

void where(DType dtype, void* out, const StridedLayout& out_layout, const bool* condition,
           const StridedLayout& condition_layout, const void* x, const StridedLayout& x_layout, const void* y,
           const StridedLayout& y_layout) {
  visit_floating(dtype, "elementwise kernels", [&]<typename T, typename C>() {
    T* o = static_cast<T*>(out);
    const T* first = static_cast<const T*>(x);
    const T* second = static_cast<const T*>(y);
    strided_loop<4>({&out_layout, &condition_layout, &x_layout, &y_layout},
                    [&](const auto& at) { o[at[0]] = condition[at[1]] ? first[at[2]] : second[at[3]]; });
  });
}

}  // namespace frugal::cpu
