// Saved activations offloaded to host memory (nn/activation_offload.h): the same gradients bit for
// bit; the feature maps leave the device's books during forward and enter the pinned host
// allocator's, and come back in backward; a tensor saved by two nodes crosses once; views, leaves
// and vectors stay on the device; the copies back of the tensors saved just before are prefetched;
// an in-place change after saving is still caught; a graph dropped without backward gives every host
// byte back; on the meta device nothing is copied and the host bytes are still counted.
#include <doctest/doctest.h>

#include "core/allocator.h"
#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/random.h"
#include "nn/activation_offload.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/layers.h"

using namespace frugal;
namespace F = frugal::functional;

namespace {

std::int64_t device_activation_bytes(Device device = Device::cpu()) {
  return allocator_for(device).stats().tag_bytes[static_cast<int>(MemoryTag::activation)].current;
}
std::int64_t pinned_activation_bytes() {
  return pinned_host_allocator().stats().tag_bytes[static_cast<int>(MemoryTag::activation)].current;
}

// Conv-BN-ReLU6 twice and a pooled linear head on [4, 3, 12, 12] images: feature maps saved by
// several nodes (a ReLU6 output is the next convolution's input too).
struct SmallNet {
  Generator generator{5};
  nn::Conv2d conv1{3, 8, {.kernel = 3, .padding = 1, .bias = false, .generator = &generator}};
  nn::Conv2d conv2{8, 8, {.kernel = 3, .padding = 1, .bias = false, .generator = &generator}};
  nn::BatchNorm2d bn1{8}, bn2{8};
  nn::Linear head{8, 5, true, &generator};

  Tensor loss(const Tensor& x) {
    Tensor h = F::relu6(bn1(conv1(x)));
    h = F::relu6(bn2(conv2(h)));
    const Tensor pooled = F::mean(h, {2, 3});
    return F::sum(F::mul(head(pooled), head(pooled)));
  }
  std::vector<Tensor> parameters() const {
    return {conv1.weight(), conv2.weight(), bn1.weight(), bn1.bias(), bn2.weight(), bn2.bias(), head.weight(), head.bias()};
  }
};

Tensor batch() {
  Generator data(3);
  return normal({4, 3, 12, 12}, 0.0, 1.0, {}, &data);
}

}  // namespace

TEST_CASE("offloaded activations: the same gradients bit for bit, the feature maps in host memory between forward and backward") {
  const Tensor x = batch();
  SmallNet plain, offloaded;
  autograd::backward(plain.loss(x));

  const std::int64_t device_before = device_activation_bytes(), pinned_before = pinned_activation_bytes();
  Tensor loss;
  std::int64_t plain_device = 0;
  {
    SmallNet reference;  // the same forward without offloading, to compare what it keeps on the device
    const Tensor kept = reference.loss(x);
    plain_device = device_activation_bytes() - device_before;
  }
  {
    const nn::ActivationOffloadScope scope;
    CHECK(nn::offloading_activations());
    loss = offloaded.loss(x);
  }
  CHECK_FALSE(nn::offloading_activations());
  const std::int64_t on_host = nn::offloaded_activation_bytes().now;
  // Each of the four [4, 8, 12, 12] f32 maps that two nodes save crosses once; the conv outputs BatchNorm saves too.
  CHECK(on_host >= 4 * 4 * 8 * 12 * 12 * 4);
  CHECK(pinned_activation_bytes() - pinned_before == on_host);
  CHECK(device_activation_bytes() - device_before <= plain_device - on_host);
  autograd::backward(loss);
  CHECK(nn::offloaded_activation_bytes().now == 0);
  CHECK(pinned_activation_bytes() == pinned_before);
  const std::vector<Tensor> a = plain.parameters(), b = offloaded.parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(autograd::grad(a[i]).to_vector<float>() == autograd::grad(b[i]).to_vector<float>());
  }
}

TEST_CASE("offloaded activations: a tensor two nodes save crosses once, views, leaves and vectors stay on the device") {
  Tensor leaf = uniform({2, 3, 4, 4}, -1.0, 1.0);
  autograd::set_requires_grad(leaf);
  const std::int64_t before = nn::offloaded_activation_bytes().now;
  const nn::ActivationOffloadScope scope;
  const Tensor y = F::mul(leaf, leaf);  // saves the leaf twice: a leaf is held by its owner anyway
  CHECK(nn::offloaded_activation_bytes().now == before);
  const Tensor z = F::mul(y, y);  // saves y twice: one copy
  CHECK(nn::offloaded_activation_bytes().now - before == static_cast<std::int64_t>(y.nbytes()));
  const Tensor flat = F::mul(F::sum(z, {2, 3}), F::sum(z, {2, 3}));  // [2, 3]: a vector-like map, not a feature map
  CHECK(nn::offloaded_activation_bytes().now - before == static_cast<std::int64_t>(y.nbytes()));
  (void)flat;
}

TEST_CASE("offloaded activations: unpacking one queues the copies back of the kPrefetchAhead saved before it") {
  const Device device = Device::cpu();
  std::vector<Tensor> maps;
  std::vector<std::shared_ptr<nn::OffloadedActivation>> offloaded;
  {
    const nn::ActivationOffloadScope scope;
    for (int i = 0; i < 6; ++i) {
      maps.push_back(full({2, 4, 8, 8}, static_cast<double>(i)));
      offloaded.push_back(nn::offload_saved(maps.back()));
    }
  }
  const auto map_bytes = static_cast<std::int64_t>(maps.front().nbytes());
  maps.clear();  // the device copies go: forward no longer holds them
  const std::int64_t device_before = device_activation_bytes(device);
  const Tensor last = offloaded.back()->unpack();
  CHECK(last.to_vector<float>() == std::vector<float>(static_cast<std::size_t>(2 * 4 * 8 * 8), 5.0F));
  // The last one back, and the three before it on their way.
  CHECK(device_activation_bytes(device) - device_before == static_cast<std::int64_t>(1 + nn::kPrefetchAhead) * map_bytes);
  CHECK(nn::offloaded_activation_bytes().now >= 5 * map_bytes);  // host copies go as each is unpacked
  const Tensor fourth = offloaded[4]->unpack();
  CHECK(fourth.to_vector<float>().front() == 4.0F);
  CHECK(device_activation_bytes(device) - device_before == static_cast<std::int64_t>(2 + nn::kPrefetchAhead) * map_bytes);
  CHECK(offloaded[4]->unpack().data_ptr() == fourth.data_ptr());  // once: the nodes that share it share the copy
}

TEST_CASE("offloaded activations: an in-place change after saving is caught, and a graph freed without backward frees its host bytes") {
  const std::int64_t before = nn::offloaded_activation_bytes().now;
  Tensor w = uniform({1, 2, 3, 3}, -1.0, 1.0);
  autograd::set_requires_grad(w);
  {
    Tensor loss, h;  // h outlives the forward: a change is caught while someone holds the original
    {
      const nn::ActivationOffloadScope scope;
      h = F::mul(w, 2.0);
      loss = F::sum(F::mul(h, h));
      CHECK(nn::offloaded_activation_bytes().now > before);
      F::relu_(h);  // h's version moves on
    }
    CHECK_THROWS_WITH_AS(autograd::backward(loss), doctest::Contains("modified in place"), ValueError);
  }
  CHECK(nn::offloaded_activation_bytes().now == before);
  {
    const nn::ActivationOffloadScope scope;
    const Tensor h = F::mul(w, 2.0);
    const Tensor dropped = F::sum(F::mul(h, h));
  }
  CHECK(nn::offloaded_activation_bytes().now == before);
}

TEST_CASE("offloaded activations: on the meta device nothing is copied, the device side is as on a real one and the host bytes are counted") {
  const Device meta = Device::meta();
  Tensor w = empty({2, 3, 8, 8}, {.device = meta});
  autograd::set_requires_grad(w);
  const std::int64_t pinned_before = pinned_activation_bytes();
  nn::reset_offloaded_activation_peak();
  const std::int64_t before = nn::offloaded_activation_bytes().now;
  Tensor loss;
  {
    const nn::ActivationOffloadScope scope;
    const Tensor h = F::mul(w, 2.0);
    loss = F::sum(F::mul(h, h));
  }
  const std::int64_t device_after_forward = device_activation_bytes(meta);
  CHECK(nn::offloaded_activation_bytes().now - before == 2 * 3 * 8 * 8 * 4);
  CHECK(pinned_activation_bytes() == pinned_before);
  autograd::backward(loss);
  CHECK(nn::offloaded_activation_bytes().now == before);
  CHECK(nn::offloaded_activation_bytes().peak - before == 2 * 3 * 8 * 8 * 4);
  CHECK(device_activation_bytes(meta) <= device_after_forward);
}
