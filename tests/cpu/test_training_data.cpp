// What a training run reads: open_dataset finding each format and its test split (and naming the
// path in every error), image_statistics, and training_transforms (zero padding before
// normalisation, Resize, augmentation keyed by (seed, epoch, index)). Every dataset is generated
// here, in a fresh temporary folder, with pixels predictable by eye; the real Fashion-MNIST is read
// where Debian's package is installed.
#include <doctest/doctest.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "data/idx.h"
#include "data/open_dataset.h"
#include "data/shard.h"
#include "data/transforms.h"
#include "tests/cpu/temp_dir.h"
#include "tests/cpu/test_files.h"
#include "tests/skip.h"

#include <stb/stb_image_write.h>  // declarations: test_image_folder.cpp compiles the implementation

using namespace frugal;
using namespace frugal::data;
namespace fs = std::filesystem;
using frugal::test::TempDir;
using namespace frugal::test;  // write_bytes, read_bytes, write_gz, idx_u8

namespace {

// `labels.size()` images of side x side with pixel (i, y, x) = 10 * i + y + x, and their labels, as
// PREFIX-images-idx3-ubyte and PREFIX-labels-idx1-ubyte in `folder` (gzipped with `gz`).
void write_idx_split(const std::string& folder, const std::string& prefix, std::uint32_t side, const Bytes& labels,
                     bool gz = false) {
  Bytes pixels;
  for (std::uint32_t i = 0; i < labels.size(); ++i)
    for (std::uint32_t y = 0; y < side; ++y)
      for (std::uint32_t x = 0; x < side; ++x) pixels.push_back(static_cast<std::uint8_t>(10 * i + y + x));
  const auto count = static_cast<std::uint32_t>(labels.size());
  const std::string images = folder + "/" + prefix + "-images-idx3-ubyte", labels_file = folder + "/" + prefix + "-labels-idx1-ubyte";
  fs::create_directories(folder);
  if (gz) {
    write_gz(images + ".gz", idx_u8({count, side, side}, pixels));
    write_gz(labels_file + ".gz", idx_u8({count}, labels));
  } else {
    write_bytes(images, idx_u8({count, side, side}, pixels));
    write_bytes(labels_file, idx_u8({count}, labels));
  }
}

// CIFAR-10 records, each its label then 3072 pixel bytes all equal to the label.
void write_cifar(const std::string& path, const Bytes& labels) {
  Bytes bytes;
  for (const std::uint8_t label : labels) bytes.insert(bytes.end(), 3073, label);
  write_bytes(path, bytes);
}

// A shard of `count` u8 [1, side, side] samples, sample i all i, label i % classes.
void write_shard(const std::string& path, std::int64_t count, std::int64_t side, std::int64_t classes) {
  ShardWriter writer(path, {1, side, side}, DType::u8, DType::i64, classes);
  for (std::int64_t i = 0; i < count; ++i) writer.add(full({1, side, side}, static_cast<double>(i), {.dtype = DType::u8}), i % classes);
  writer.finish();
}

// One grey w x h PNG of value `grey`.
void write_png(const std::string& path, int w, int h, std::uint8_t grey) {
  fs::create_directories(fs::path(path).parent_path());
  const Bytes pixels(static_cast<std::size_t>(w * h), grey);
  REQUIRE(stbi_write_png(path.c_str(), w, h, 1, pixels.data(), w) != 0);
}

// The message() of the E that `call` throws: the whole line, with no file or line in front.
template <typename E>
std::string message_of(const auto& call) {
  try {
    call();
  } catch (const E& error) {
    return error.message();
  }
  FAIL("nothing thrown");
  return "";
}

doctest::Contains contains(const std::string& text) { return doctest::Contains(text.c_str()); }  // copies the text

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// A dataset of given u8 [1, side, side] images: sample i is pixels[i], label 0.
class Images final : public Dataset {
 public:
  Images(std::int64_t side, std::vector<Bytes> pixels) : side_(side), pixels_(std::move(pixels)) {}
  std::int64_t size() const override { return std::ssize(pixels_); }
  Sample get(std::int64_t index) const override {
    gets.push_back(index);
    return {from_vector<std::uint8_t>(pixels_.at(static_cast<std::size_t>(index)), {1, side_, side_}), 0};
  }
  Shape sample_shape() const override { return {1, side_, side_}; }
  DType sample_dtype() const override { return DType::u8; }
  std::int64_t num_classes() const override { return 1; }
  std::string describe() const override { return "images"; }
  mutable std::vector<std::int64_t> gets;

 private:
  std::int64_t side_;
  std::vector<Bytes> pixels_;
};

}  // namespace

// ---- open_dataset

TEST_CASE("open_dataset: an IDX folder, plain or gzipped, with its t10k test split") {
  TempDir dir;
  write_idx_split(dir / "mnist", "train", 4, {1, 2, 0});
  write_idx_split(dir / "mnist", "t10k", 4, {2, 0}, /*gz=*/true);
  const DatasetSplits splits = open_dataset(dir / "mnist", "", {.cache_dir = dir / "cache"});
  REQUIRE(splits.test != nullptr);
  CHECK(splits.train->size() == 3);
  CHECK(splits.test->size() == 2);
  CHECK(splits.train->sample_shape() == Shape{1, 4, 4});
  CHECK(splits.train->get(1).label == 2);
  CHECK(splits.train->get(2).input.at<int>({0, 3, 1}) == 24);
  CHECK(splits.test->get(1).input.at<int>({0, 0, 0}) == 10);
  CHECK(splits.description.starts_with("IDX folder " + dir / "mnist" + ": train IDX " + dir / "mnist/train-images-idx3-ubyte"));
  CHECK(splits.description.find("; test IDX " + dir / "mnist/t10k-images-idx3-ubyte.gz") != std::string::npos);

  write_idx_split(dir / "train-only", "train", 4, {1, 2});
  CHECK(open_dataset(dir / "train-only").test == nullptr);
  CHECK(open_dataset(dir / "train-only").description.ends_with("; no test split"));
}

TEST_CASE("open_dataset: a CIFAR-10 folder, its batches in numeric order, test_batch.bin the test split") {
  TempDir dir;
  write_cifar(dir / "cifar/data_batch_10.bin", {3});
  write_cifar(dir / "cifar/data_batch_2.bin", {2, 2});
  write_cifar(dir / "cifar/data_batch_1.bin", {1});
  write_cifar(dir / "cifar/test_batch.bin", {7, 8});
  write_bytes(dir / "cifar/batches.meta.txt", {'a', '\n'});
  const DatasetSplits splits = open_dataset(dir / "cifar");
  CHECK(splits.train->size() == 4);
  CHECK(splits.train->sample_shape() == Shape{3, 32, 32});
  for (const auto& [index, label] : {std::pair{0, 1}, std::pair{1, 2}, std::pair{2, 2}, std::pair{3, 3}})
    CHECK(splits.train->get(index).label == label);
  REQUIRE(splits.test != nullptr);
  CHECK(splits.test->get(1).label == 8);
  CHECK(splits.description.starts_with("CIFAR-10 folder " + dir / "cifar" + ": train CIFAR-10 " + dir / "cifar/data_batch_1.bin"));
}

TEST_CASE("open_dataset: a shard with its sibling test shard, train -> test, else train -> val") {
  TempDir dir;
  write_shard(dir / "fm-train.shard", 5, 3, 4);
  write_shard(dir / "fm-test.shard", 2, 3, 4);
  write_shard(dir / "fm-val.shard", 1, 3, 4);  // test comes first
  const DatasetSplits splits = open_dataset(dir / "fm-train.shard");
  CHECK(splits.train->size() == 5);
  REQUIRE(splits.test != nullptr);
  CHECK(splits.test->size() == 2);
  CHECK(splits.train->get(4).input.at<int>({0, 2, 2}) == 4);
  CHECK(splits.description == "shard " + dir / "fm-train.shard" + ": train " + splits.train->describe() + "; test " +
                                  splits.test->describe());
  fs::remove(dir / "fm-test.shard");
  CHECK(open_dataset(dir / "fm-train.shard").test->size() == 1);
  CHECK(open_dataset(dir / "fm-val.shard").test == nullptr);  // no "train" in the name

  // test_path: a shard is the test split itself, whatever its name.
  const DatasetSplits given = open_dataset(dir / "fm-train.shard", dir / "fm-train.shard");
  CHECK(given.test->size() == 5);
}

TEST_CASE("open_dataset: an image folder, its test split the sibling test/ or val/ folder") {
  TempDir dir;
  for (const std::string split : {"train", "val"})
    for (const std::string cls : {"cat", "dog"}) write_png(dir / ("pets/" + split + "/" + cls + "/a.png"), 6, 6, 200);
  write_png(dir / "pets/train/dog/b.png", 6, 6, 100);
  const DatasetSplits splits = open_dataset(dir / "pets/train/", "", {.image_size = 8});
  CHECK(splits.train->size() == 3);
  CHECK(splits.train->num_classes() == 2);
  CHECK(splits.train->sample_shape() == Shape{3, 8, 8});
  CHECK(splits.train->get(2).input.at<int>({1, 4, 4}) == 100);
  REQUIRE(splits.test != nullptr);
  CHECK(splits.test->size() == 2);
  CHECK(splits.test->describe().starts_with("image folder " + dir / "pets/val"));

  // The folder above them holds the two splits (not two classes named train and val).
  const DatasetSplits above = open_dataset(dir / "pets", "", {.image_size = 8});
  CHECK(above.train->size() == 3);
  REQUIRE(above.test != nullptr);
  CHECK(above.test->size() == 2);
  CHECK(above.description.starts_with("folder of split image folders " + dir / "pets" + ": train image folder " + dir / "pets/train"));
  CHECK(open_dataset(dir / "pets/train", dir / "pets", {.image_size = 8}).test->describe().starts_with("image folder " + dir / "pets/val"));

  // Class counts differ: the labels (positions among the folders) would not mean the same classes.
  write_png(dir / "pets/val/eel/a.png", 6, 6, 1);
  CHECK(message_of<ValueError>([&] { open_dataset(dir / "pets/train/"); }) ==
        (dir / "pets/train/: the test split has 3 classes, the train split 2"));
}

TEST_CASE("open_dataset: a test_path is opened as a test split, and must agree with the train split") {
  TempDir dir;
  write_idx_split(dir / "a", "train", 4, {1, 2, 0});
  write_idx_split(dir / "a", "t10k", 4, {0, 2});
  write_idx_split(dir / "b", "train", 4, {1, 1});
  write_idx_split(dir / "b", "t10k", 4, {2, 2, 2, 1});
  CHECK(open_dataset(dir / "a", dir / "b").test->size() == 4);  // b's t10k files
  CHECK(message_of<ValueError>([&] { open_dataset(dir / "b", dir / "a"); }) ==
        (dir / "a: the test split has 3 classes, the train split 2"));
  write_idx_split(dir / "c", "t10k", 5, {0, 1, 2});
  CHECK(message_of<ValueError>([&] { open_dataset(dir / "a", dir / "c"); }) ==
        (dir / "c: the test split's samples are [1, 5, 5] u8, the train split's [1, 4, 4] u8"));
  CHECK(message_of<ValueError>([&] { open_dataset(dir / "c"); }) ==
        (dir / "c: no train-images-idx3-ubyte[.gz] in this IDX folder"));
  CHECK_THROWS_WITH_AS(open_dataset(dir / "a", dir / "train-only"), contains(dir / "train-only: does not exist"),
                       FileError);
  write_idx_split(dir / "d", "train", 4, {0, 1, 2});
  CHECK(message_of<ValueError>([&] { open_dataset(dir / "a", dir / "d"); }) ==
        (dir / "d: no t10k-images-idx3-ubyte[.gz] in this IDX folder"));
  write_cifar(dir / "cifar/data_batch_1.bin", {1});
  CHECK(message_of<ValueError>([&] { open_dataset(dir / "cifar", dir / "cifar"); }) ==
        (dir / "cifar: no test_batch.bin in this CIFAR-10 folder"));
}

TEST_CASE("open_dataset: paths it cannot open are named in one line, with what was looked for") {
  TempDir dir;
  CHECK(message_of<FileError>([&] { open_dataset(dir / "missing"); }) ==
        (dir / "missing: does not exist"));
  const std::string not_recognised = ": not a dataset format frugal recognises; looked for a shard file (starting "
                                     "FRUGALSH), or a folder of IDX files (train-images-idx3-ubyte[.gz] and labels), of "
                                     "CIFAR-10 batches (data_batch_*.bin) or of class subfolders of images";
  fs::create_directories(dir / "empty");
  CHECK(message_of<ValueError>([&] { open_dataset(dir / "empty"); }) ==
        (dir / "empty" + not_recognised));
  write_bytes(dir / "notes.txt", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
  CHECK(message_of<ValueError>([&] { open_dataset(dir / "notes.txt"); }) ==
        (dir / "notes.txt" + not_recognised));
  write_bytes(dir / "empty.bin", {});
  CHECK_THROWS_WITH_AS(open_dataset(dir / "empty.bin"), contains(dir / "empty.bin"), FileError);

  write_bytes(dir / "nolabels/train-images-idx3-ubyte", idx_u8({1, 2, 2}, {1, 2, 3, 4}));
  CHECK(message_of<ValueError>([&] { open_dataset(dir / "nolabels"); }) ==
        (dir / "nolabels: holds train-images-idx3-ubyte but no train-labels-idx1-ubyte[.gz] beside it"));
  // A damaged file inside is the reader's own error, naming that file.
  write_bytes(dir / "bad/train-images-idx3-ubyte", {0, 0, 0x08, 3, 0});
  write_bytes(dir / "bad/train-labels-idx1-ubyte", idx_u8({1}, {0}));
  CHECK_THROWS_WITH_AS(open_dataset(dir / "bad"), contains(dir / "bad/train-images-idx3-ubyte"), ValueError);
}

TEST_CASE("open_dataset: no path is Debian's Fashion-MNIST, train and test") {
  if (!fs::exists(std::string(kFashionMnistFolder) + "/train-images-idx3-ubyte.gz"))
    FRUGAL_SKIP("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)");
  TempDir dir;
  const DatasetSplits splits = open_dataset("", "", {.cache_dir = dir / "cache"});
  CHECK(splits.train->size() == 60000);
  REQUIRE(splits.test != nullptr);
  CHECK(splits.test->size() == 10000);
  CHECK(splits.train->num_classes() == 10);
  CHECK(splits.description.starts_with("Fashion-MNIST (Debian's dataset-fashion-mnist): train IDX "));

  // image_statistics over all 60000 images: the values published for Fashion-MNIST, fast.
  const auto start = std::chrono::steady_clock::now();
  const ImageStatistics stats = image_statistics(*splits.train, 60000);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("image_statistics of Fashion-MNIST's 60000 train images: ", seconds, " s");
  CHECK(stats.mean.at(0) == doctest::Approx(0.2860).epsilon(0.0005 / 0.2860));
  CHECK(stats.stddev.at(0) == doctest::Approx(0.3530).epsilon(0.0005 / 0.3530));
  const ImageStatistics sampled = image_statistics(*splits.train);  // 10000 of them
  CHECK(std::abs(sampled.mean[0] - stats.mean[0]) < 0.003);
  CHECK(std::abs(sampled.stddev[0] - stats.stddev[0]) < 0.003);
}

// ---- image_statistics and training_transforms

TEST_CASE("image_statistics: exact per-channel mean and std, over evenly spread samples") {
  // Two images of 4 pixels: {0, 255, 0, 255} and four 255s: mean 6/8, E[x^2] 6/8, var 3/16.
  const Images two(2, {{0, 255, 0, 255}, {255, 255, 255, 255}});
  const ImageStatistics stats = image_statistics(two);
  CHECK(stats.mean == std::vector<double>{0.75});
  CHECK(stats.stddev.at(0) == doctest::Approx(std::sqrt(3.0 / 16)));

  const Images four(1, {{0}, {10}, {20}, {30}});
  CHECK(image_statistics(four, 2).mean.at(0) == doctest::Approx(10.0 / 255));
  CHECK(four.gets == std::vector<std::int64_t>{0, 2});
  CHECK_THROWS_AS(image_statistics(four, 0), ValueError);
  CHECK_THROWS_AS(image_statistics(Images(1, {})), ValueError);
}

TEST_CASE("training_transforms: 28 -> 32 pads with black before normalising") {
  Bytes pixels(28 * 28);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i % 251);
  const Images images(28, {pixels});
  const ImageStatistics stats{{0.25}, {0.5}};
  const Tensor out = training_transforms(images, 32, /*augment=*/false, stats)(images.get(0).input, 0, 0, 0);
  REQUIRE(out.shape() == Shape{1, 32, 32});
  CHECK(out.dtype() == DType::f32);
  const auto normalised = [](double v) {  // ToFloat, then Normalize, each rounding to float as they do
    return static_cast<float>((static_cast<double>(static_cast<float>(v * (1.0 / 255))) - 0.25) / 0.5);
  };
  std::vector<double> expected(32 * 32, static_cast<double>(normalised(0)));  // -0.5: black, not 0
  for (std::size_t y = 0; y < 28; ++y)
    for (std::size_t x = 0; x < 28; ++x) expected[(y + 2) * 32 + x + 2] = normalised(pixels[y * 28 + x]);
  CHECK(values(out) == expected);

  // 27 -> 32 as torchvision's CenterCrop pads: 2 before, 3 after.
  const Images odd(27, {Bytes(27 * 27, 255)});
  const std::vector<double> row = values(training_transforms(odd, 32, false, stats)(odd.get(0).input, 0, 0, 0).select(1, 2));
  CHECK(row[1] == -0.5);
  CHECK(row[2] == 1.5);
  CHECK(row[28] == 1.5);
  CHECK(row[29] == -0.5);
}

TEST_CASE("PadCropFlipNormalize gives, bit for bit, what ToFloat, Pad, RandomCrop, RandomHorizontalFlip and Normalize give") {
  // The five transforms are the reference: training_transforms' chain written out one step at a time.
  for (const std::int64_t channels : {1, 3}) {
    for (const std::int64_t side : {27, 28, 32}) {
      for (const bool augment : {false, true}) {
        CAPTURE(channels);
        CAPTURE(side);
        CAPTURE(augment);
        const std::vector<double> mean(static_cast<std::size_t>(channels), 0.3), stddev{0.35, 0.2, 0.9};
        const std::vector<double> std_c(stddev.begin(), stddev.begin() + channels);
        std::vector<TransformPtr> steps{std::make_shared<ToFloat>(1.0 / 255),
                                        std::make_shared<Pad>((32 - side) / 2, 32 - side - (32 - side) / 2, 0.0)};
        if (augment) {
          steps.push_back(std::make_shared<RandomCrop>(32, 32, 4));
          steps.push_back(std::make_shared<RandomHorizontalFlip>());
        }
        steps.push_back(std::make_shared<Normalize>(mean, std_c));
        const Compose reference(steps);
        const Compose fused{std::make_shared<PadCropFlipNormalize>(32, (32 - side) / 2, augment, mean, std_c)};
        std::vector<std::uint8_t> pixels(static_cast<std::size_t>(channels * side * side));
        for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>((i * 37) % 256);
        const Tensor image = from_vector(pixels, {channels, side, side});
        for (std::int64_t epoch = 0; epoch < 6; ++epoch)
          for (std::int64_t index = 0; index < 6; ++index)
            CHECK(values(fused(image, 3, epoch, index)) == values(reference(image, 3, epoch, index)));
      }
    }
  }
  RandomStream random(0, 0, 0);
  const PadCropFlipNormalize transform(32, 2, true, {0.5}, {0.5});
  CHECK_THROWS_AS(transform.apply(zeros({1, 31, 31}, {.dtype = DType::u8}), random), ShapeError);  // 2 before + 31 > 32
  CHECK_THROWS_AS(transform.apply(zeros({3, 28, 28}, {.dtype = DType::u8}), random), ShapeError);
  CHECK_THROWS_AS(transform.apply(zeros({1, 28, 28}), random), DTypeError);
}

TEST_CASE("training_transforms: larger images resized bilinearly, as F.interpolate without antialias") {
  // 8 -> 4 samples between pixels 2i and 2i + 1 on each axis: the mean of each 2 x 2 block.
  Bytes pixels(64);
  for (std::size_t i = 0; i < 64; ++i) pixels[i] = static_cast<std::uint8_t>(4 * i);
  const Images big(8, {pixels});
  const Tensor out = training_transforms(big, 4, false, {{0.0}, {1.0}})(big.get(0).input, 0, 0, 0);
  REQUIRE(out.shape() == Shape{1, 4, 4});
  const float block = (static_cast<float>(0.0) + static_cast<float>(4 / 255.0) + static_cast<float>(32 / 255.0) +
                       static_cast<float>(36 / 255.0)) / 4;
  CHECK(out.at<double>({0, 0, 0}) == doctest::Approx(block).epsilon(1e-6));
  // 3 -> 2 by torch's formula: output 0 reads input 0.25, output 1 reads 1.75.
  const Tensor row = from_vector<float>({0, 4, 8}, {1, 1, 3});
  RandomStream random(0, 0, 0);
  CHECK(values(Resize(1, 2).apply(row, random)) == std::vector<double>{1, 7});
  // Non-square, both axes: the values torch 1.13 gives for this 5 x 6 ramp (value = 6 * y + x).
  std::vector<float> ramp(30);
  for (std::size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i);
  CHECK(values(Resize(3, 4).apply(from_vector<float>(ramp, {1, 5, 6}), random)) ==
        std::vector<double>{2.25, 3.75, 5.25, 6.75, 12.25, 13.75, 15.25, 16.75, 22.25, 23.75, 25.25, 26.75});
  CHECK_THROWS_AS(Resize(2, 2).apply(from_vector<std::uint8_t>({1, 2, 3, 4}, {1, 2, 2}), random), DTypeError);
}

TEST_CASE("training_transforms: augmentation differs between epochs, is the same for the same (seed, epoch, index)") {
  Bytes pixels(28 * 28);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i % 253);
  const Images images(28, {pixels, pixels});
  const Compose augment = training_transforms(images, 32, true, {{0.3}, {0.4}});
  const Tensor input = images.get(0).input;
  CHECK(values(augment(input, 5, 1, 0)) == values(augment(input, 5, 1, 0)));
  CHECK(augment(input, 5, 1, 0).shape() == Shape{1, 32, 32});
  int differ_by_epoch = 0, differ_by_index = 0;
  for (std::int64_t epoch = 0; epoch < 8; ++epoch) {
    differ_by_epoch += values(augment(input, 5, epoch, 0)) != values(augment(input, 5, epoch + 1, 0));
    differ_by_index += values(augment(input, 5, epoch, 0)) != values(augment(input, 5, epoch, 1));
  }
  CHECK(differ_by_epoch >= 6);  // a repeat of crop and flip has odds 1 / (9 * 9 * 2) per pair
  CHECK(differ_by_index >= 6);

  CHECK(message_of<ValueError>([&] { training_transforms(Images(3, {}), 32, false, {{0.1, 0.2}, {1, 1}}); }) ==
        "training_transforms: 1 channel(s), statistics of 2 means and 2 stds");
  TempDir dir;
  ShardWriter writer(dir / "f32.shard", {1, 2, 2}, DType::f32);
  writer.finish();
  CHECK_THROWS_WITH_AS(training_transforms(ShardDataset(dir / "f32.shard"), 32, false, {{0.1}, {1}}),
                       contains("training_transforms: needs u8 [C, H, W] images, shard " + dir / "f32.shard"),
                       ValueError);
  write_bytes(dir / "wide/train-images-idx3-ubyte", idx_u8({1, 2, 3}, {1, 2, 3, 4, 5, 6}));
  write_bytes(dir / "wide/train-labels-idx1-ubyte", idx_u8({1}, {0}));
  CHECK_THROWS_WITH_AS(training_transforms(*open_dataset(dir / "wide").train, 32, false, {{0.1}, {1}}),
                       contains("training_transforms: needs square images, IDX "), ValueError);
}
