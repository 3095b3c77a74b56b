// Image folders as torchvision's ImageFolder: ROOT/CLASS/.../IMAGE, where the classes are the sorted
// names of ROOT's subfolders and each class holds its PNG, JPEG and BMP files. Images are decoded
// with stb_image to RGB and resized to one size, so every sample is [3, height, width] u8.
// Not here: augmentation (transforms), packing a folder into a shard (cli/pack.cpp). Images are
// decoded on every get(): pack a folder into a shard once when it is read for many epochs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace frugal::data {

// 2^26 pixels (8192 x 8192) is far beyond any training image; the limit stops a corrupt header from
// making stb_image allocate gigabytes before it finds that the data is missing.
inline constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 26;

// Encoded bytes (PNG, JPEG or BMP) to a [3, height, width] u8 RGB tensor. Grayscale is replicated to
// the three channels and alpha is dropped, as PIL's convert("RGB") does; then resize_image. `name`
// (the file, usually) starts the message of the ValueError that a bad image, or one of more than
// `max_pixels` pixels, raises. Safe to call from several threads at once; this is also the entry
// point of fuzz/fuzz_image.cpp.
Tensor decode_image(std::span<const std::uint8_t> bytes, std::int64_t height, std::int64_t width,
                    const std::string& name, std::int64_t max_pixels = kMaxImagePixels);

// [C, H, W] u8 to [C, height, width] u8 with PIL's bilinear filter, which torchvision's Resize also
// uses (antialias=True): a triangle over the input pixels, widened by the scale when shrinking so
// every input pixel contributes (no aliasing). Upsampling is plain bilinear interpolation between
// pixel centres (align_corners=False), with the edge pixels repeated. Rounds once, at the end, where
// Pillow's 8-bit path rounds after each pass in fixed point: results can differ from it by 1.
Tensor resize_image(const Tensor& image, std::int64_t height, std::int64_t width);

class ImageFolder final : public Dataset {
 public:
  // Lists the images now (decodes none); ValueError if root is not a folder, holds no class
  // folders, or a class folder holds no image.
  ImageFolder(std::string root, std::int64_t height, std::int64_t width);

  std::int64_t size() const override { return static_cast<std::int64_t>(images_.size()); }
  // Reads and decodes image `index`: FileError if it cannot be read (missing, empty), ValueError if
  // it is not an image decode_image reads.
  Sample get(std::int64_t index) const override;
  Shape sample_shape() const override { return {3, height_, width_}; }
  DType sample_dtype() const override { return DType::u8; }
  std::int64_t num_classes() const override { return static_cast<std::int64_t>(classes_.size()); }
  std::string describe() const override;

  const std::vector<std::string>& classes() const { return classes_; }  // class index -> folder name
  const std::string& path(std::int64_t index) const;  // the file of sample `index`
  std::int64_t label(std::int64_t index) const;       // its class, without decoding the image

 private:
  struct Image {
    std::string path;
    std::int64_t label;
  };
  void check_index(std::int64_t index) const;

  std::string root_;
  std::int64_t height_, width_;
  std::vector<std::string> classes_;
  std::vector<Image> images_;  // by class, then in torchvision's order within the class
};

}  // namespace frugal::data
