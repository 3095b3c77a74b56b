// CPU fused optimizer steps (kernels/optimizer_backends.h): every tensor of the list, every element,
// through the per-element updates of kernels/optimizer_ops.h.
#include "core/cpu/parallel.h"
#include "core/convert.h"
#include "kernels/optimizer_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

void sgd_step(DType dtype, const TensorList& list, const SgdConfig& config) {
  visit_floating(dtype, "optimizer steps", [&]<typename T, typename C>() {
    for (int t = 0; t < list.count; ++t) {
      T* p = static_cast<T*>(list.params[t]);
      const T* g = static_cast<const T*>(list.grads[t]);
      T* buffer = static_cast<T*>(list.state1[t]);
      parallel_for(list.sizes[t], list.sizes[t], [&](std::int64_t i) {
        C param = convert<C>(p[i]), b = buffer ? convert<C>(buffer[i]) : C(0);
        optimizer::sgd<C>(param, convert<C>(g[i]), b, config);
        p[i] = convert<T>(param);
        if (buffer) buffer[i] = convert<T>(b);
      });
    }
  });
}

void adamw_step(DType dtype, const TensorList& list, const AdamWConfig& config) {
  const optimizer::AdamWCorrections corrections = optimizer::adamw_corrections(config);
  visit_floating(dtype, "optimizer steps", [&]<typename T, typename C>() {
    for (int t = 0; t < list.count; ++t) {
      T* p = static_cast<T*>(list.params[t]);
      const T* g = static_cast<const T*>(list.grads[t]);
      T* m = static_cast<T*>(list.state1[t]);
      T* v = static_cast<T*>(list.state2[t]);
      parallel_for(list.sizes[t], list.sizes[t], [&](std::int64_t i) {
        C param = convert<C>(p[i]), mi = convert<C>(m[i]), vi = convert<C>(v[i]);
        optimizer::adamw<C>(param, convert<C>(g[i]), mi, vi, config, corrections);
        p[i] = convert<T>(param);
        m[i] = convert<T>(mi);
        v[i] = convert<T>(vi);
      });
    }
  });
}

}  // namespace frugal::cpu
