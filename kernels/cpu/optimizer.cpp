// CPU fused optimizer steps (kernels/optimizer_backends.h): every tensor of the list, every element,
// through the per-element updates of kernels/optimizer_ops.h.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/cpu/parallel.h"
#include "core/cpu/strided_cursor.h"
#include "core/convert.h"
#include "kernels/optimizer_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

namespace {

// Note [One region per list of tensors]
// A model's parameters are many small tensors (MobileNetV2 has 158, most of them a BatchNorm's few
// hundred floats): a parallel region per tensor left every small one on the calling thread, one
// after another, while the second core idled. So a list's tensors are walked as one run of
// concatenated elements, cut into chunks of kChunk, shared among threads in one region; a chunk that
// spans two tensors calls `update` for each part. Every element's update is independent of the
// others, so the result is the same whatever the cut and the thread count.
template <typename Update>
void for_each_element_range(const TensorList& list, Update&& update) {
  std::int64_t starts[kMaxTensorsPerLaunch + 1] = {};  // where each tensor begins in the concatenation
  for (int t = 0; t < list.count; ++t) starts[t + 1] = starts[t] + list.sizes[t];
  const std::int64_t total = starts[list.count];
  parallel_for_chunks(total, kChunk, total, [&](std::int64_t begin, std::int64_t end) {
    int t = static_cast<int>(std::upper_bound(starts, starts + list.count + 1, begin) - starts) - 1;
    for (; begin < end; ++t) {
      const std::int64_t stop = std::min(end, starts[t + 1]);
      update(t, begin - starts[t], stop - starts[t]);  // elements [from, to) of tensor t
      begin = stop;
    }
  });
}

// Note [An SGD step in vectors]
// Written once for every dtype, the SGD loop read the step's settings through a reference on every
// element: GCC kept them in memory, tested them per element and converted lr and momentum from
// double per element, all scalar (4.4% of a standard-stem training step on one thread, perf,
// 2026-12-07). For f32, sgd_f32 takes the settings as a local copy, which GCC may treat as the
// loop's constants: it moves the tests out of the loop and vectorises each case, compiled per
// instruction set. The update is optimizer::sgd's, operation for operation, and cpu/optimizer.cpp is
// compiled without multiply-add contraction (kernels/CMakeLists.txt), so every instruction set gives
// the bits the plain x86-64 loop gives.
__attribute__((target_clones("avx512f", "avx2", "default")))
void sgd_f32(float* p, const float* g, float* buffer, std::int64_t from, std::int64_t to, const SgdConfig& config) {
  const SgdConfig c = config;
  if (buffer) {
    for (std::int64_t i = from; i < to; ++i) optimizer::sgd<float>(p[i], g[i], buffer[i], c);
    return;
  }
  for (std::int64_t i = from; i < to; ++i) {
    float dropped = 0.0f;  // no momentum buffer: what sgd puts there is dropped, as the generic loop drops it
    optimizer::sgd<float>(p[i], g[i], dropped, c);
  }
}

}  // namespace

void sgd_step(DType dtype, const TensorList& list, const SgdConfig& config) {
  visit_floating(dtype, "optimizer steps", [&]<typename T, typename C>() {
    for_each_element_range(list, [&](int t, std::int64_t from, std::int64_t to) {
      T* p = static_cast<T*>(list.params[t]);
      const T* g = static_cast<const T*>(list.grads[t]);
      T* buffer = static_cast<T*>(list.state1[t]);
      if constexpr (std::is_same_v<T, float>) return sgd_f32(p, g, buffer, from, to, config);
      for (std::int64_t i = from; i < to; ++i) {
        C param = convert<C>(p[i]), b = buffer ? convert<C>(buffer[i]) : C(0);
        optimizer::sgd<C>(param, convert<C>(g[i]), b, config);
        p[i] = convert<T>(param);
        if (buffer) buffer[i] = convert<T>(b);
      }
    });
  });
}

void adamw_step(DType dtype, const TensorList& list, const AdamWConfig& config) {
  const optimizer::AdamWCorrections corrections = optimizer::adamw_corrections(config);
  visit_floating(dtype, "optimizer steps", [&]<typename T, typename C>() {
    for_each_element_range(list, [&](int t, std::int64_t from, std::int64_t to) {
      T* p = static_cast<T*>(list.params[t]);
      const T* g = static_cast<const T*>(list.grads[t]);
      T* m = static_cast<T*>(list.state1[t]);
      T* v = static_cast<T*>(list.state2[t]);
      for (std::int64_t i = from; i < to; ++i) {
        C param = convert<C>(p[i]), mi = convert<C>(m[i]), vi = convert<C>(v[i]);
        optimizer::adamw<C>(param, convert<C>(g[i]), mi, vi, config, corrections);
        p[i] = convert<T>(param);
        m[i] = convert<T>(mi);
        v[i] = convert<T>(vi);
      }
    });
  });
}

// Note [8-bit moments] (kernels/optimizer_ops.h): a block's codes need its new absmax, so the work is
// cut by whole blocks: the list's blocks are numbered over its tensors and shared among threads;
// each block decodes, updates into a local f32 copy of its moments, finds their absmax, then codes.
void adamw8bit_step(const TensorList& list, const AdamWConfig& config) {
  using optimizer::kQuantBlock;
  const optimizer::AdamWCorrections corrections = optimizer::adamw_corrections(config);
  std::int64_t starts[kMaxTensorsPerLaunch + 1] = {};  // each tensor's first block in the numbering
  for (int t = 0; t < list.count; ++t) starts[t + 1] = starts[t] + (list.sizes[t] + kQuantBlock - 1) / kQuantBlock;
  parallel_for(starts[list.count], starts[list.count] * kQuantBlock, [&](std::int64_t numbered) {
    const int t = static_cast<int>(std::upper_bound(starts, starts + list.count + 1, numbered) - starts) - 1;
    const std::int64_t block = numbered - starts[t], first = block * kQuantBlock;
    const std::int64_t count = std::min<std::int64_t>(kQuantBlock, list.sizes[t] - first);
    float* p = static_cast<float*>(list.params[t]) + first;
    const float* g = static_cast<const float*>(list.grads[t]) + first;
    std::uint8_t* m_codes = static_cast<std::uint8_t*>(list.state1[t]) + first;
    std::uint8_t* v_codes = static_cast<std::uint8_t*>(list.state2[t]) + first;
    float& m_scale = static_cast<float*>(list.state3[t])[block];
    float& v_scale = static_cast<float*>(list.state4[t])[block];
    float m[kQuantBlock], v[kQuantBlock];
    float m_max = 0.0f, v_max = 0.0f;
    for (std::int64_t i = 0; i < count; ++i) {
      optimizer::adamw8bit_element(p[i], g[i], m_codes[i], v_codes[i], m_scale, v_scale, m[i], v[i], config, corrections);
      m_max = std::max(m_max, std::abs(m[i]));
      v_max = std::max(v_max, v[i]);
    }
    for (std::int64_t i = 0; i < count; ++i) {
      m_codes[i] = optimizer::code_in_block<true>(m[i], m_max);
      v_codes[i] = optimizer::code_in_block<false>(v[i], v_max);
    }
    m_scale = m_max;
    v_scale = v_max;
  });
}

}  // namespace frugal::cpu
