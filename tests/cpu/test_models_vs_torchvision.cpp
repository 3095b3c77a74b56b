// frugal's models against torchvision, value for value: for each case of tests/fixtures/models (written
// once by make_fixtures.py from torchvision 0.14 in float64), the weights the fixture's formula gives
// (tests/cpu/model_fixture.h) are written to a safetensors file, the `frugal` binary runs
// `run-step` on the fixture's input in eval and train mode, in f64 and in f32, and its output file is
// compared with the reference:
//   f64  every value within 1e-9 relative (max |a - b| / max |b|, per tensor);
//   f32  logits and loss within max(1e-4, 8 e), gradients and buffers within max(1e-3, 8 e), where e
//        is PyTorch's own f32 error against the f64 values, stored beside each tensor (f32err.T); for
//        ResNet-50 the largest over three summation orders (tests/fixtures/models/README.md says why).
// Tensors of more than 4096 elements (64 for ResNet-50) are stored as summaries: 256 samples (64),
// the L2 norm and the largest magnitude; the samples are compared relative to the largest magnitude.
// Gradients that are zero by construction: in MobileNetV2, the bias of each projection's BatchNorm
// (conv.3, and conv.2 in block 1) feeds only, through sums and 1x1 convolutions, into BatchNorms
// in training mode, whose normalisation removes any per-channel shift, so its exact gradient is 0
// and both implementations hold rounding noise (about 1e-13 against gradients of about 100). A
// reference below kZeroByConstruction times the step's largest gradient is compared against that
// largest gradient instead of against itself.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "models/registry.h"
#include "nn/safetensors.h"
#include "tests/cpu/model_fixture.h"
#include "tests/cpu/temp_dir.h"

using namespace frugal;
namespace fs = std::filesystem;

using frugal::test::TempDir;

namespace {

std::string quoted(const std::string& text) { return "'" + text + "'"; }

nn::StateDict run_step(const test::FixtureCase& c, const TempDir& dir, const std::string& mode, const std::string& dtype) {
  const std::string out = dir / (mode + "-" + dtype + ".safetensors");
  std::string command = std::string(FRUGAL_BINARY) + " run-step --model " + c.model;
  for (const std::string& flag : c.flags) command += " " + flag;
  command += " --weights " + quoted(dir / "weights.safetensors") + " --input " +
             quoted(test::fixture_folder(c) + "/input.safetensors") + " --mode " + mode + " --dtype " + dtype +
             " --out " + quoted(out);
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
  return nn::read_safetensors(out).tensors;
}

void compare_case(const test::FixtureCase& c) {
  CAPTURE(c.folder);
  TempDir dir;
  const auto model = models::make_model(c.model, c.options);
  const nn::StateDict weights = test::fixture_weights(model->state_dict());
  nn::write_safetensors(dir / "weights.safetensors", weights);
  // The formula agrees with the script's on the first 16 values of tensor 0.
  const auto check = nn::read_safetensors(test::fixture_folder(c) + "/weights_check.safetensors").tensors.at(0).second;
  const auto first = weights.front().second.to_vector<double>();
  const auto check_values = check.to_vector<double>();
  for (std::size_t i = 0; i < check_values.size(); ++i) CHECK(first[i] == check_values[i]);

  for (const std::string mode : {"eval", "train"}) {
    const nn::StateDict reference = nn::read_safetensors(test::fixture_folder(c) + "/" + mode + ".safetensors").tensors;
    for (const std::string dtype : {"f64", "f32"}) {
      CAPTURE(mode);
      CAPTURE(dtype);
      const auto checks = test::compare_with_reference(run_step(c, dir, mode, dtype), reference, parse_dtype(dtype));
      std::size_t zero_by_construction = 0;
      for (const test::ReferenceCheck& result : checks) {
        CAPTURE(result.name);
        CHECK(result.error <= result.tolerance);
        zero_by_construction += result.zero_by_construction ? 1 : 0;
      }
      // Only the projections' BatchNorm biases are zero by construction: one per block (17), in train.
      CHECK(zero_by_construction == (mode == "train" && std::string(c.model) == "mobilenet_v2" ? 17u : 0u));
    }
  }
}

}  // namespace

TEST_CASE("model fixtures: MobileNetV2 width 0.5, one channel, standard stem, against torchvision") {
  compare_case(test::fixture_cases()[0]);
}

TEST_CASE("model fixtures: MobileNetV2 width 1.0, three channels, CIFAR stem, against torchvision") {
  compare_case(test::fixture_cases()[1]);
}

TEST_CASE("model fixtures: ResNet-18 against torchvision") { compare_case(test::fixture_cases()[2]); }

// At 64 x 64 (see make_fixtures.py); its reference summarises every tensor of more than 64 values.
TEST_CASE("model fixtures: ResNet-50 against torchvision") { compare_case(test::fixture_cases()[3]); }

namespace {

// Runs `frugal run-step` on the small CNN (1 channel, 10 classes) with stderr kept; returns the exit code.
int run_cnn_step(const TempDir& dir, const std::string& weights, const std::string& input, std::string& stderr_text,
                 const std::string& extra = "") {
  const std::string err = dir / "stderr.txt";
  const std::string command = std::string(FRUGAL_BINARY) + " run-step --model cnn --weights " + quoted(weights) +
                              " --input " + quoted(input) + " --mode train --out " +
                              quoted(dir / "out.safetensors") + " " + extra + " 2>" + quoted(err);
  const int status = std::system(command.c_str());
  std::ifstream in(err);
  stderr_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("run-step: bad files exit 2 with one line naming the file and the tensor, and write nothing") {
  TempDir dir;
  const auto cnn = models::make_model("cnn");
  const std::string weights = dir / "weights.safetensors";
  nn::write_safetensors(weights, test::fixture_weights(cnn->state_dict()));
  const Tensor x = normal({2, 1, 8, 8}), y = zeros({2}, {.dtype = DType::i64});
  const auto write_input = [&](const nn::StateDict& tensors) {
    const std::string path = dir / "input.safetensors";
    nn::write_safetensors(path, tensors);
    return path;
  };
  const std::string out = dir / "out.safetensors";
  std::string message;
  // The good case first: it writes the output.
  REQUIRE(run_cnn_step(dir, weights, write_input({{"x", x}, {"y", y}}), message) == 0);
  CHECK(nn::read_safetensors(out).tensors.size() == 2 + 2 * 4);  // logits, loss, a grad per parameter
  std::filesystem::remove(out);

  struct Bad {
    nn::StateDict input;
    std::string expected;
  };
  const Tensor labels_out_of_range = full({2}, 10, {.dtype = DType::i64});
  const Bad cases[] = {
      {{{"x", x}, {"y", labels_out_of_range}}, "input.safetensors: tensor 'y' element 0 is 10, outside [0, 10)"},
      {{{"x", x.to(DType::f64)}, {"y", y}}, "input.safetensors: tensor 'x' must be F32 [N, 1, H, W]"},
      {{{"x", normal({2, 3, 8, 8})}, {"y", y}}, "tensor 'x' must be F32 [N, 1, H, W] with N > 0, got f32 [2, 3, 8, 8]"},
      {{{"x", x}, {"y", zeros({3}, {.dtype = DType::i64})}}, "tensor 'y' must be I64 [2]"},
      {{{"x", x}}, "input.safetensors: no tensor 'y'"},
      {{{"x", x}, {"y", y}, {"z", y}}, "input.safetensors: unexpected tensor 'z'"},
  };
  for (const Bad& bad : cases) {
    CAPTURE(bad.expected);
    CHECK(run_cnn_step(dir, weights, write_input(bad.input), message) == 2);
    CHECK(message.find(bad.expected) != std::string::npos);
    CHECK(std::count(message.begin(), message.end(), '\n') == 1);
    CHECK_FALSE(std::filesystem::exists(out));
  }
  const std::string input = write_input({{"x", x}, {"y", y}});
  // Weights of another model: the weights file and the first keys are named.
  const std::string resnet_weights = dir / "resnet.safetensors";
  nn::write_safetensors(resnet_weights, models::make_model("resnet18")->state_dict());
  CHECK(run_cnn_step(dir, resnet_weights, input, message) == 2);
  CHECK(message.find("resnet.safetensors: load_state_dict into SmallCnn: missing keys: \"features.0.weight\"") !=
        std::string::npos);
  // A truncated weights file, a missing one, and an output that is a folder.
  const std::string truncated = dir / "truncated.safetensors";
  std::filesystem::copy_file(weights, truncated);
  std::filesystem::resize_file(truncated, std::filesystem::file_size(weights) - 4);
  CHECK(run_cnn_step(dir, truncated, input, message) == 2);
  CHECK(message.find("truncated.safetensors") != std::string::npos);
  CHECK(run_cnn_step(dir, dir / "absent.safetensors", input, message) == 2);
  CHECK(message.find("absent.safetensors") != std::string::npos);
  std::filesystem::create_directory(out);
  CHECK(run_cnn_step(dir, weights, input, message) != 0);
  CHECK(std::filesystem::is_directory(out));
  std::filesystem::remove(out);
  CHECK_FALSE(std::filesystem::exists(out));
}
