// The models against torchvision: state-dict names, dtypes, shapes and order compared with the
// manifests tests/fixtures/models/make_state_dict_manifests.py wrote from torchvision 0.14, parameter
// counts as torchvision prints them, torchvision's initialisation statistics, the CIFAR stem's
// strides, the registry's refusals, and Conv2dNormActivation's fused BatchNorm + ReLU6 against its
// layers run in turn. Values against torchvision: test_models_vs_torchvision.cpp.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/random.h"
#include "models/mobilenet_v2.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "nn/amp.h"
#include "nn/autograd.h"
#include "nn/checkpoint.h"
#include "nn/fold_batch_norm.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/safetensors.h"

using namespace frugal;
using frugal::models::make_model;
using frugal::models::ModelOptions;

namespace {

struct Manifest {
  std::vector<std::string> lines;  // "NAME DTYPE SHAPE", in order
  std::int64_t parameters = 0;
};

Manifest read_manifest(const std::string& name) {
  const std::string path = std::string(FRUGAL_SOURCE_DIR) + "/tests/fixtures/models/" + name + ".manifest";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read ", path);
  Manifest manifest;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# parameters ", 0) == 0) manifest.parameters = std::stoll(line.substr(13));
    else manifest.lines.push_back(line);
  }
  return manifest;
}

std::vector<std::string> describe_state(const nn::Module& model) {
  std::vector<std::string> lines;
  for (const auto& [name, tensor] : model.state_dict()) {
    std::string shape;
    for (std::int64_t d : tensor.shape()) {
      if (!shape.empty()) shape += 'x';
      shape += std::to_string(d);
    }
    lines.push_back(name + " " + std::string(dtype_name(tensor.dtype())) + " " + (shape.empty() ? "[]" : shape));
  }
  return lines;
}

void check_against_manifest(const nn::Module& model, const std::string& manifest_name) {
  const Manifest expected = read_manifest(manifest_name);
  const std::vector<std::string> got = describe_state(model);
  CHECK(model.parameter_count() == expected.parameters);
  REQUIRE(got.size() == expected.lines.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK_MESSAGE(got[i] == expected.lines[i], "state dict entry ", i);
}

double std_of(const Tensor& t) {
  const auto v = t.to_vector<double>();
  double sum = 0, squares = 0;
  for (double x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  for (double x : v) squares += (x - mean) * (x - mean);
  return std::sqrt(squares / static_cast<double>(v.size() - 1));
}

// A handle to the entry, not a reference into a kept state dict: a static copy of the last model's
// whole state dict (ResNet-50's 98 MiB) outlived the test and held a later test's memory limit.
Tensor state(const nn::Module& model, const std::string& name) {
  for (const auto& [key, tensor] : model.state_dict())
    if (key == name) return tensor;
  FAIL("no state entry " << name);
  return Tensor();
}

}  // namespace

TEST_CASE("models: MobileNetV2's state dict is torchvision's, name for name, at three widths") {
  Generator generator(1);
  check_against_manifest(*make_model("mobilenet_v2", {.generator = &generator}), "mobilenet_v2_w100_c1000");
  check_against_manifest(*make_model("mobilenet_v2", {.num_classes = 10, .width_mult = 0.5, .generator = &generator}),
                         "mobilenet_v2_w050_c10");
  check_against_manifest(*make_model("mobilenet_v2", {.width_mult = 1.4, .generator = &generator}),
                         "mobilenet_v2_w140_c1000");
}

TEST_CASE("models: parameter counts as torchvision prints them") {
  Generator generator(2);
  struct Case {
    ModelOptions options;
    std::int64_t parameters;
  };
  const Case cases[] = {
      {{.num_classes = 1000, .width_mult = 0.35}, 1'677'128}, {{.num_classes = 10, .width_mult = 0.35}, 408'938},
      {{.num_classes = 1000, .width_mult = 0.75}, 2'636'424}, {{.num_classes = 10, .width_mult = 1.0}, 2'236'682},
      {{.num_classes = 10, .width_mult = 1.4}, 4'333'706},
      // One input channel (Fashion-MNIST): the stem loses 2 x 32 x 3 x 3 weights.
      {{.num_classes = 10, .in_channels = 1}, 2'236'106},
      // The CIFAR stem changes strides only.
      {{.num_classes = 10, .cifar_stem = true}, 2'236'682},
  };
  for (Case c : cases) {
    c.options.generator = &generator;
    CHECK(make_model("mobilenet_v2", c.options)->parameter_count() == c.parameters);
  }
  CHECK(make_model("resnet18", {.num_classes = 10, .generator = &generator})->parameter_count() == 11'181'642);
  CHECK(make_model("resnet50", {.num_classes = 10, .generator = &generator})->parameter_count() == 23'528'522);
  // The small CNN: (1*9+1)*32 + (32*9+1)*64 + (64*9+1)*128 + 129*10.
  CHECK(make_model("cnn", {.generator = &generator})->parameter_count() == 93'962);
}

TEST_CASE("models: ResNet-18 and ResNet-50 state dicts are torchvision's") {
  Generator generator(3);
  const auto resnet18 = make_model("resnet18", {.generator = &generator});
  check_against_manifest(*resnet18, "resnet18_c1000");
  CHECK(resnet18->parameter_count() == 11'689'512);
  const auto resnet50 = make_model("resnet50", {.generator = &generator});
  check_against_manifest(*resnet50, "resnet50_c1000");
  CHECK(resnet50->parameter_count() == 25'557'032);
}

TEST_CASE("models: torchvision's initialisation") {
  Generator generator(4);
  const auto model = make_model("mobilenet_v2", {.num_classes = 1000, .generator = &generator});
  // kaiming_normal_(fan_out): std sqrt(2 / (out * kh * kw)), groups not counted.
  CHECK(std_of(state(*model, "features.18.0.weight")) == doctest::Approx(std::sqrt(2.0 / 1280)).epsilon(0.01));
  CHECK(std_of(state(*model, "features.17.conv.1.0.weight")) == doctest::Approx(std::sqrt(2.0 / (960 * 9))).epsilon(0.05));
  CHECK(std_of(state(*model, "classifier.1.weight")) == doctest::Approx(0.01).epsilon(0.01));
  for (const char* zero : {"classifier.1.bias", "features.3.conv.3.bias", "features.3.conv.3.running_mean"})
    for (double v : state(*model, zero).to_vector<double>()) CHECK(v == 0.0);
  for (const char* one : {"features.3.conv.3.weight", "features.3.conv.3.running_var"})
    for (double v : state(*model, one).to_vector<double>()) CHECK(v == 1.0);
  CHECK(state(*model, "features.0.1.num_batches_tracked").item<std::int64_t>() == 0);

  // ResNet keeps Linear's default, uniform(+-1/sqrt(512)); zero_init_residual zeroes each block's last BN.
  const auto resnet = make_model("resnet18", {.generator = &generator});
  const double bound = 1.0 / std::sqrt(512.0);
  for (double v : state(*resnet, "fc.weight").to_vector<double>()) CHECK(std::abs(v) <= bound);
  CHECK(std_of(state(*resnet, "fc.weight")) == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.01));
  for (double v : state(*resnet, "layer1.0.bn2.weight").to_vector<double>()) CHECK(v == 1.0);
  const auto zeroed = make_model("resnet50", {.zero_init_residual = true, .generator = &generator});
  for (double v : state(*zeroed, "layer4.2.bn3.weight").to_vector<double>()) CHECK(v == 0.0);
  for (double v : state(*zeroed, "layer4.2.bn2.weight").to_vector<double>()) CHECK(v == 1.0);
}

TEST_CASE("models: a MobileNetV2 state dict through a safetensors file: torchvision's size, and back unchanged") {
  Generator a(10), b(11);
  const auto model = make_model("mobilenet_v2", {.generator = &a});
  const std::string path = (std::filesystem::temp_directory_path() / ("frugal-mnv2-" + std::to_string(::getpid()) + ".safetensors")).string();
  nn::write_safetensors(path, model->state_dict());
  // The data buffer of torchvision's file: (3,504,872 + 34,112) x 4 + 52 x 8 bytes, after the header.
  const nn::SafetensorsHeader header = nn::read_safetensors_header(path);
  CHECK(std::filesystem::file_size(path) - header.data_start == 14'156'352);
  CHECK(header.entries.size() == 314);
  const auto fresh = make_model("mobilenet_v2", {.generator = &b});
  fresh->load_state_dict(nn::read_safetensors(path).tensors);
  std::filesystem::remove(path);
  const nn::StateDict x = model->state_dict(), y = fresh->state_dict();
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(x[i].second.to_vector<double>() == y[i].second.to_vector<double>());
}

TEST_CASE("models: the same generator seed gives the same weights") {
  Generator a(7), b(7);
  const auto first = make_model("mobilenet_v2", {.num_classes = 10, .width_mult = 0.35, .generator = &a});
  const auto second = make_model("mobilenet_v2", {.num_classes = 10, .width_mult = 0.35, .generator = &b});
  const nn::StateDict x = first->state_dict(), y = second->state_dict();
  REQUIRE(x.size() == y.size());
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(x[i].second.to_vector<double>() == y[i].second.to_vector<double>());
}

TEST_CASE("models: output shapes, and the CIFAR stem keeps a 4x4 map at 32x32") {
  Generator generator(5);
  const Tensor images = normal({2, 1, 32, 32}, 0.0, 1.0, {}, &generator);
  for (const char* name : {"mobilenet_v2", "resnet18", "cnn"}) {
    const auto model = make_model(name, {.num_classes = 10, .in_channels = 1, .generator = &generator});
    model->eval();
    CHECK(model->forward(images).shape() == Shape{2, 10});
  }
  // The feature map entering the head conv: 1x1 with the standard stem, 4x4 with the CIFAR one.
  for (bool cifar : {false, true}) {
    models::MobileNetV2 model({.num_classes = 10, .in_channels = 1, .cifar_stem = cifar, .generator = &generator});
    model.eval();
    const auto& features = *std::dynamic_pointer_cast<nn::Sequential>(model.named_children()[0].second);
    Tensor y = images;
    for (std::size_t i = 0; i + 1 < features.size(); ++i) y = (*features[i])(y);
    CHECK(y.size(2) == (cifar ? 4 : 1));
  }
}

TEST_CASE("models: make_divisible is torchvision's _make_divisible") {
  CHECK(models::make_divisible(32 * 0.35) == 16);  // 11.2 -> 8 is more than 10% down -> 16
  CHECK(models::make_divisible(16 * 0.5) == 8);
  CHECK(models::make_divisible(24 * 0.75) == 24);  // 18 -> int(22) // 8 * 8 = 16 < 0.9 * 18 -> 24
  CHECK(models::make_divisible(1280 * 1.4) == 1792);
  CHECK(models::make_divisible(3.0) == 8);  // never below the divisor
}

TEST_CASE("models: each model's defaults are what the registry says") {
  Generator generator(8);
  for (const models::ModelInfo& info : models::model_infos()) {
    CAPTURE(info.name);
    const auto model = make_model(info.name, {.generator = &generator});
    model->eval();
    const Tensor x = normal({1, info.default_in_channels, 32, 32}, 0.0, 1.0, {}, &generator);
    CHECK(model->forward(x).shape() == Shape{1, info.default_num_classes});
    CHECK(models::model_info(info.name).default_num_classes == info.default_num_classes);
  }
  CHECK_THROWS_AS(models::model_info("alexnet"), ValueError);
}

TEST_CASE("models: loading another model's state dict names the first keys and counts the rest, in one line") {
  Generator generator(9);
  const auto mobilenet = make_model("mobilenet_v2", {.num_classes = 10, .generator = &generator});
  const auto resnet = make_model("resnet18", {.num_classes = 10, .generator = &generator});
  try {
    mobilenet->load_state_dict(resnet->state_dict());
    FAIL("loaded a ResNet state dict into MobileNetV2");
  } catch (const ValueError& e) {
    const std::string message = e.message();
    CHECK(message.find("missing keys: \"features.0.0.weight\"") != std::string::npos);
    CHECK(message.find("(314 in all)") != std::string::npos);
    CHECK(message.find("unexpected keys: \"conv1.weight\"") != std::string::npos);
    CHECK(message.find("(122 in all)") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.size() < 1200);
  }
  // A width mismatch: the shapes differ, and the message says which first.
  const auto narrow = make_model("mobilenet_v2", {.num_classes = 10, .width_mult = 0.5, .generator = &generator});
  CHECK_THROWS_WITH_AS(narrow->load_state_dict(mobilenet->state_dict()),
                       doctest::Contains("\"features.0.0.weight\" is [32, 3, 3, 3] in the state dict but [16, 3, 3, 3]"),
                       ValueError);
}

TEST_CASE("models: the registry refuses unknown names and options a model lacks") {
  CHECK_THROWS_WITH_AS(make_model("vgg16"), doctest::Contains("known: mobilenet_v2, resnet18, resnet50, cnn"),
                       ValueError);
  CHECK_THROWS_WITH_AS(make_model("resnet18", {.width_mult = 0.5}), doctest::Contains("no width option"), ValueError);
  CHECK_THROWS_WITH_AS(make_model("cnn", {.cifar_stem = true}), doctest::Contains("no CIFAR stem"), ValueError);
  CHECK_THROWS_WITH_AS(make_model("mobilenet_v2", {.zero_init_residual = true}),
                       doctest::Contains("no zero_init_residual"), ValueError);
  CHECK_THROWS_AS(make_model("mobilenet_v2", {.width_mult = 0.0}), ValueError);
  CHECK_THROWS_AS(make_model("mobilenet_v2", {.dropout = 1.0}), ValueError);
  CHECK_THROWS_AS(make_model("resnet50", {.num_classes = 0}), ValueError);
  const auto model = make_model("cnn");
  CHECK_THROWS_AS(model->forward(zeros({1, 3, 28, 28})), ShapeError);  // the CNN defaults to one channel
}

namespace {
// Writes "+Type " for every module call that starts.
struct CallTypes : nn::ModuleCallObserver {
  std::string log;
  void before_call(const nn::Module& m) override { log += "+" + m.type_name() + " "; }
  void after_call(const nn::Module&, const Tensor*) override {}
};

void check_close(const Tensor& a, const Tensor& b, const char* what) {
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    REQUIRE_MESSAGE(std::abs(x[i] - y[i]) <= 1e-6 + 1e-5 * std::abs(y[i]), what, ": element ", i, " ", x[i], " vs ", y[i]);
}
}  // namespace

TEST_CASE("models: Conv2dNormActivation in place runs BatchNorm and ReLU6 as one pass, with the layers' results") {
  // In place: the BatchNorm2d's call (observed, as memory reports need) does the ReLU6's work, and the
  // ReLU6 child is not called. Out of place: the three layers in turn. Same outputs, running
  // statistics and gradients, in training and in eval, with BatchNorm weights large enough that the
  // clamp cuts on both sides.
  for (const bool training : {true, false}) {
    CAPTURE(training);
    Generator g1(11), g2(11);
    models::Conv2dNormActivation fused(3, 8, {.inplace = true, .generator = &g1}),
        plain(3, 8, {.inplace = false, .generator = &g2});
    for (nn::Module* m : {static_cast<nn::Module*>(&fused), static_cast<nn::Module*>(&plain)}) {
      for (const auto& [name, p] : m->named_parameters())
        if (name == "1.weight") Tensor(p).fill_(4.0);
      m->train(training);
    }
    Generator data(5);
    const Tensor x = uniform({4, 3, 6, 6}, -2.0, 2.0, {}, &data), probe = uniform({4, 8, 6, 6}, -1.0, 1.0, {}, &data);
    CallTypes calls;
    Tensor y_fused;
    {
      nn::ModuleCallObserverScope scope(calls);
      y_fused = fused(x);
    }
    CHECK(calls.log == "+Conv2dNormActivation +Conv2d +BatchNorm2d ");
    const Tensor y_plain = plain(x);
    const auto v = y_fused.to_vector<double>();
    CHECK(*std::min_element(v.begin(), v.end()) == 0.0);
    CHECK(*std::max_element(v.begin(), v.end()) == 6.0);
    check_close(y_fused, y_plain, "output");
    autograd::backward(functional::sum(functional::mul(y_fused, probe)));
    autograd::backward(functional::sum(functional::mul(y_plain, probe)));
    const auto fused_params = fused.named_parameters(), plain_params = plain.named_parameters();
    for (std::size_t i = 0; i < fused_params.size(); ++i)
      check_close(autograd::grad(fused_params[i].second), autograd::grad(plain_params[i].second),
                  fused_params[i].first.c_str());
    const auto fused_buffers = fused.named_buffers(), plain_buffers = plain.named_buffers();
    for (std::size_t i = 0; i < fused_buffers.size(); ++i)
      check_close(fused_buffers[i].second, plain_buffers[i].second, fused_buffers[i].first.c_str());
  }
}

// nn/fold_batch_norm.h: MobileNetV2 evaluated without autograd folds each BatchNorm into the
// convolution before it, and runs its blocks a few samples at a time (Note [Inference a few samples
// at a time]); with autograd on (or in training, or under an observer) it does neither. The two agree
// to f32 rounding.
TEST_CASE("models: MobileNetV2's inference with BatchNorm folded matches the unfolded forward") {
  Generator generator(5);
  models::MobileNetV2 model({.num_classes = 10, .in_channels = 1, .cifar_stem = true, .generator = &generator});
  // Running statistics away from 0 and 1, so the fold has something to fold.
  for (auto& [name, buffer] : model.named_buffers())
    if (name.ends_with("running_mean")) buffer.copy_(uniform(buffer.shape(), -0.5, 0.5, {}, &generator));
    else if (name.ends_with("running_var")) buffer.copy_(uniform(buffer.shape(), 0.5, 2.0, {}, &generator));
  model.eval();
  const Tensor x = normal({24, 1, 32, 32}, 0.0, 1.0, {}, &generator);
  const Tensor unfolded = model(x);  // autograd on: BatchNorm runs as its own layer
  Tensor folded;
  {
    const autograd::NoGradGuard no_grad;
    auto* block = dynamic_cast<models::Conv2dNormActivation*>((*model.named_children()[0].second).named_children()[0].second.get());
    REQUIRE(block != nullptr);
    CHECK(block->folds(zeros({1, 1, 32, 32})));
    // features.2 expands 24 channels of 32x32 to 144: 576 KiB a sample, so a few samples per chunk
    // (here: two L2s of 2 MiB make chunks of 7, and the forward below runs 4 of them).
    auto* second = dynamic_cast<models::InvertedResidual*>((*model.named_children()[0].second).named_children()[2].second.get());
    REQUIRE(second != nullptr);
    const Tensor huge = empty({4096, 24, 32, 32}, {.device = Device::meta()});  // shape only
    CHECK(second->inference_chunk(huge) < 4096);
    CHECK(second->inference_chunk(huge) >= 1);
    folded = model(x);
  }
  const auto a = unfolded.to_vector<double>(), b = folded.to_vector<double>();
  REQUIRE(a.size() == b.size());
  double worst = 0.0, largest = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i])), largest = std::max(largest, std::abs(a[i]));
  CHECK(largest > 0.0);
  CHECK(worst <= 1e-5 * largest);
  CHECK(worst > 0.0);  // the fold changed the rounding: it ran
}

TEST_CASE("models: BatchNorm is folded only in eval mode, in f32 on the CPU, without autograd, autocast, observers or checkpoints") {
  nn::Conv2d conv(4, 4, 1, 1, 0, 1, 1, false);
  nn::BatchNorm2d norm(4);
  norm.eval();
  const Tensor x = zeros({1, 4, 2, 2});
  CHECK_FALSE(nn::folds_batch_norm(conv, norm, x));  // autograd on
  const autograd::NoGradGuard no_grad;
  CHECK(nn::folds_batch_norm(conv, norm, x));
  CHECK_FALSE(nn::folds_batch_norm(conv, norm, x.to(DType::f64)));
  norm.train();
  CHECK_FALSE(nn::folds_batch_norm(conv, norm, x));
  norm.eval();
  {
    const nn::AutocastGuard autocast(DType::bf16);
    CHECK_FALSE(nn::folds_batch_norm(conv, norm, x));
  }
  struct Quiet : nn::ModuleCallObserver {
    void before_call(const nn::Module&) override {}
    void after_call(const nn::Module&, const Tensor*) override {}
  } observer;
  {
    const nn::ModuleCallObserverScope scope(observer);
    CHECK_FALSE(nn::folds_batch_norm(conv, norm, x));
  }
  {  // a checkpoint's first run is under NoGradGuard, but its recomputation will not be
    const autograd::GradModeGuard grad_on(true);
    const Tensor input = zeros({1, 4, 2, 2});
    bool folded = true;
    nn::checkpoint([&](const std::vector<Tensor>& in) {
      folded = nn::folds_batch_norm(conv, norm, in[0]);
      return in[0];
    }, {input});
    CHECK_FALSE(folded);
  }
  nn::BatchNorm2d no_statistics(4, 1e-5, 0.1, true, false);
  no_statistics.eval();
  CHECK_FALSE(nn::folds_batch_norm(conv, no_statistics, x));
  CHECK_THROWS_AS(nn::conv_batch_norm_folded(conv, no_statistics, x), ValueError);
}
