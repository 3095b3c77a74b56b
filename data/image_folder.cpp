// ImageFolder (see image_folder.h): listing the folder as torchvision does, decoding with stb_image,
// and the triangle-filter resize.
#include "data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string_view>

#include "core/allocator.h"
#include "core/error.h"
#include "data/byte_order.h"
#include "data/mapped_file.h"

#include <stb/stb_image.h>  // declarations only: data/stb_image.cpp compiles the implementation

namespace frugal::data {

namespace {

namespace fs = std::filesystem;

constexpr int kRgb = 3;

// ---- resizing

// Where one output pixel reads along one axis: input pixels [first, first + weights.size()).
struct Taps {
  std::int64_t first;
  std::vector<float> weights;  // sum to 1
};

// PIL's bilinear filter along one axis. Output pixel i covers input coordinates [i, i+1) * scale; the
// triangle is centred there and spans `support` input pixels each side. Pixel j's centre is j + 0.5.
std::vector<Taps> triangle_taps(std::int64_t in_size, std::int64_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double support = std::max(scale, 1.0);  // widened when shrinking: every input pixel counts
  std::vector<Taps> taps(static_cast<std::size_t>(out_size));
  for (std::int64_t i = 0; i < out_size; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    const auto first = std::max<std::int64_t>(static_cast<std::int64_t>(std::floor(center - support + 0.5)), 0);
    const auto end = std::min<std::int64_t>(static_cast<std::int64_t>(std::floor(center + support + 0.5)), in_size);
    Taps& t = taps[static_cast<std::size_t>(i)];
    t.first = first;
    double total = 0;
    for (std::int64_t j = first; j < end; ++j) {
      const double weight = std::max(0.0, 1.0 - std::abs(static_cast<double>(j) + 0.5 - center) / support);
      t.weights.push_back(static_cast<float>(weight));
      total += weight;
    }
    for (float& w : t.weights) w = static_cast<float>(w / total);  // edges: the taps outside are dropped
  }
  return taps;
}

// ---- decoding

// The format by its signature, as stb_image tests it; nullptr for anything else. Messages name the
// format themselves: stb_image's failure reason is often left over from testing another format.
const char* image_format(std::span<const std::uint8_t> bytes) {
  const auto starts_with = [&](std::initializer_list<std::uint8_t> magic) {
    return bytes.size() >= magic.size() && std::equal(magic.begin(), magic.end(), bytes.begin());
  };
  if (starts_with({0x89, 'P', 'N', 'G'})) return "PNG";
  if (starts_with({0xFF, 0xD8})) return "JPEG";
  if (starts_with({'B', 'M'})) return "BMP";
  return nullptr;
}

// stb_image grows its buffer for a PNG's compressed pixels to what an IDAT chunk's length claims
// before it finds the bytes missing, so a 100-byte file can make it ask for 2 GiB (fuzz_image found
// it). frugal refuses a PNG with a chunk longer than the rest of the file. stb_image reads the same
// chains of chunks: length, type, data, CRC, until IEND.
bool png_chunks_fit(std::span<const std::uint8_t> bytes) {
  constexpr std::size_t kSignature = 8, kLengthAndType = 8, kCrc = 4;
  constexpr std::uint32_t kEnd = 0x49454E44;  // "IEND"
  for (std::size_t pos = kSignature; pos + kLengthAndType <= bytes.size();) {
    const std::uint64_t length = load_be<std::uint32_t>(&bytes[pos]);
    if (length > bytes.size() - pos - kLengthAndType) return false;
    if (load_be<std::uint32_t>(&bytes[pos + 4]) == kEnd) break;
    pos += kLengthAndType + length + kCrc;
  }
  return true;
}

// stb_image reads the pixels missing from a truncated BMP as zeros; frugal refuses the file instead.
// Checked for the uncompressed layouts (BI_RGB, BI_BITFIELDS) of the 40-byte and longer info
// headers: every row, padded to 4 bytes, must lie inside the file. `width` x `height` is stb_image's
// reading of the same header; it caps each at 2^24, so the products below stay under 2^64.
bool bmp_pixels_fit(std::span<const std::uint8_t> bytes, int width, int height) {
  constexpr std::size_t kFieldsRead = 34;  // file header (14) + info header up to its compression field
  if (bytes.size() < kFieldsRead || load_le<std::uint32_t>(&bytes[14]) < 40) return true;
  const std::uint32_t compression = load_le<std::uint32_t>(&bytes[30]);
  if (compression != 0 && compression != 3) return true;  // run-length encoded: stb_image checks as it reads
  const std::uint64_t pixels_at = load_le<std::uint32_t>(&bytes[10]);
  const std::uint64_t bits_per_pixel = load_le<std::uint16_t>(&bytes[28]);
  const std::uint64_t row_bytes = (static_cast<std::uint64_t>(width) * bits_per_pixel + 31) / 32 * 4;
  return pixels_at + row_bytes * static_cast<std::uint64_t>(height) <= bytes.size();
}

// Note [stb_image's DHT overflow]
// stb_image 2.27 (Debian 12's libstb-dev) builds a Huffman table from a JPEG DHT segment without
// checking that its 16 code counts sum to at most 256, and then writes past the table's arrays
// (stb_image 2.28 checks; fuzz_image found it). frugal refuses such a file before stb_image reads
// it. The walk below visits every DHT stb_image could parse: stb_image reaches a marker only after
// an FF byte, passes over other bytes between segments and in entropy-coded data one at a time, and
// when it accepts a segment it has read exactly its `length` bytes.
bool jpeg_huffman_tables_fit(std::span<const std::uint8_t> bytes) {
  constexpr std::uint8_t kDefineHuffmanTable = 0xC4;
  constexpr std::size_t kMaxCodes = 256;  // a table holds one value byte per code
  const std::size_t size = bytes.size();
  const auto byte_at = [&](std::size_t i) -> std::size_t { return i < size ? bytes[i] : 0; };  // stb_image reads 0 past the end
  for (std::size_t pos = 2; pos < size;) {  // after SOI
    if (bytes[pos++] != 0xFF) continue;
    while (pos < size && bytes[pos] == 0xFF) ++pos;  // fill bytes
    const std::size_t marker = byte_at(pos++);
    const bool no_length = marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD9);  // stuffed FF, TEM, RSTn, SOI, EOI
    if (no_length) continue;
    const std::size_t length = byte_at(pos) << 8 | byte_at(pos + 1);
    if (marker == kDefineHuffmanTable) {  // tables while bytes of the segment remain, as stb_image reads them
      std::size_t table = pos + 2;
      for (std::int64_t left = static_cast<std::int64_t>(length) - 2; left > 0;) {
        std::size_t codes = 0;
        for (std::size_t i = 1; i <= 16; ++i) codes += byte_at(table + i);  // byte 0 is the table's class and id
        if (codes > kMaxCodes) return false;
        table += 17 + codes;
        left -= static_cast<std::int64_t>(17 + codes);
      }
    }
    pos += length;
  }
  return true;
}

// Encoded bytes to [3, h, w] u8 at the image's own size: decode_image before the resize.
Tensor decode_rgb(std::span<const std::uint8_t> bytes, const std::string& name, std::int64_t max_pixels) {
  FRUGAL_CHECK_VALUE(!bytes.empty(), name, ": empty file (0 bytes), not an image");
  const char* format = image_format(bytes);
  FRUGAL_CHECK_VALUE(format != nullptr, name, ": not a PNG, JPEG or BMP image (no known signature)");
  FRUGAL_CHECK_VALUE(std::string_view(format) != "PNG" || png_chunks_fit(bytes), name,
                     ": truncated PNG (a chunk is longer than the rest of the file)");
  FRUGAL_CHECK_VALUE(std::string_view(format) != "JPEG" || jpeg_huffman_tables_fit(bytes), name,
                     ": corrupt JPEG (a Huffman table with more than 256 codes)");  // Note [stb_image's DHT overflow]
  FRUGAL_CHECK_VALUE(bytes.size() <= static_cast<std::size_t>(INT_MAX), name, ": ", bytes.size(),
                     " bytes is more than stb_image reads (2 GiB)");
  const int length = static_cast<int>(bytes.size());
  // The header first, so a huge claimed size is refused before anything is allocated for it.
  int w = 0, h = 0, channels = 0;
  FRUGAL_CHECK_VALUE(stbi_info_from_memory(bytes.data(), length, &w, &h, &channels), name, ": corrupt ", format, " header");
  FRUGAL_CHECK_VALUE(w > 0 && h > 0, name, ": zero-size image (", w, "x", h, ")");
  FRUGAL_CHECK_VALUE(std::int64_t{w} * h <= max_pixels, name, ": ", w, "x", h, " pixels is more than frugal decodes (",
                     max_pixels, ")");
  FRUGAL_CHECK_VALUE(std::string_view(format) != "BMP" || bmp_pixels_fit(bytes, w, h), name,
                     ": truncated BMP (the file ends before its last row of pixels)");
  // stb_image converts to RGB itself: grey replicated, alpha dropped. Its pixels are [h, w, 3].
  const std::unique_ptr<stbi_uc, void (*)(void*)> pixels(stbi_load_from_memory(bytes.data(), length, &w, &h, &channels, kRgb),
                                                         stbi_image_free);
  FRUGAL_CHECK_VALUE(pixels != nullptr, name, ": corrupt or truncated ", format, " data");
  Tensor rgb = empty({kRgb, h, w}, {.dtype = DType::u8});
  std::uint8_t* planes = rgb.data<std::uint8_t>();
  const std::int64_t plane = std::int64_t{h} * w;
  for (std::int64_t c = 0; c < kRgb; ++c)
    for (std::int64_t p = 0; p < plane; ++p) planes[c * plane + p] = pixels.get()[p * kRgb + c];
  return rgb;
}

// ---- listing the folder

bool has_image_extension(const fs::path& file) {
  std::string ext = file.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

// Every image under one class folder, subfolders included, in torchvision's order: sorted(os.walk())
// visits folders by path, and each folder's files by name.
// Runs a folder walk, turning the filesystem_error it may throw (an unreadable folder, a symlink
// loop) into a FileError that names the path: bad input, reported in one line like any other.
template <typename Walk>
void walk_folder(const fs::path& folder, Walk walk) {
  try {
    walk();
  } catch (const fs::filesystem_error& error) {
    FRUGAL_THROW(FileError, error.path1().empty() ? folder.string() : error.path1().string(),
                 ": cannot list the folder: ", error.code().message());
  }
}

std::vector<std::string> list_images(const fs::path& class_folder) {
  std::vector<fs::path> files;
  walk_folder(class_folder, [&] {
    for (const auto& entry : fs::recursive_directory_iterator(class_folder, fs::directory_options::follow_directory_symlink))
      if (!entry.is_directory() && has_image_extension(entry.path())) files.push_back(entry.path());
  });
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    return std::pair(a.parent_path().string(), a.filename().string()) < std::pair(b.parent_path().string(), b.filename().string());
  });
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back(f.string());
  return paths;
}

}  // namespace

Tensor resize_image(const Tensor& image, std::int64_t height, std::int64_t width) {
  FRUGAL_CHECK_VALUE(height > 0 && width > 0, "resize_image: the size must be positive, got ", height, "x", width);
  FRUGAL_CHECK_SHAPE(image.dim() == 3, "resize_image: expects [C, H, W], got ", shape_str(image.shape()));
  FRUGAL_CHECK_DTYPE(image.dtype() == DType::u8, "resize_image: expects u8, got ", image.dtype());
  FRUGAL_CHECK_DEVICE(image.device().is_cpu(), "resize_image: expects a CPU tensor, got one on ", image.device());
  const Tensor in = image.contiguous();
  const std::int64_t channels = in.size(0), in_h = in.size(1), in_w = in.size(2);
  FRUGAL_CHECK_SHAPE(in_h > 0 && in_w > 0, "resize_image: empty image ", shape_str(in.shape()));
  Tensor out = empty({channels, height, width}, {.dtype = DType::u8});
  const std::vector<Taps> across = triangle_taps(in_w, width), down = triangle_taps(in_h, height);
  // Rows first into floats (in_h x width per channel), then columns, rounding once.
  std::vector<float> rows(static_cast<std::size_t>(in_h * width));
  for (std::int64_t c = 0; c < channels; ++c) {
    const std::uint8_t* src = in.data<std::uint8_t>() + c * in_h * in_w;
    std::uint8_t* dst = out.data<std::uint8_t>() + c * height * width;
    for (std::int64_t y = 0; y < in_h; ++y)
      for (std::int64_t x = 0; x < width; ++x) {
        const Taps& t = across[static_cast<std::size_t>(x)];
        float sum = 0;
        for (std::size_t k = 0; k < t.weights.size(); ++k) sum += t.weights[k] * src[y * in_w + t.first + static_cast<std::int64_t>(k)];
        rows[static_cast<std::size_t>(y * width + x)] = sum;
      }
    for (std::int64_t y = 0; y < height; ++y)
      for (std::int64_t x = 0; x < width; ++x) {
        const Taps& t = down[static_cast<std::size_t>(y)];
        float sum = 0;
        for (std::size_t k = 0; k < t.weights.size(); ++k)
          sum += t.weights[k] * rows[static_cast<std::size_t>((t.first + static_cast<std::int64_t>(k)) * width + x)];
        // Weights are non-negative and sum to 1, so `sum` stays within [0, 255] up to rounding.
        dst[y * width + x] = static_cast<std::uint8_t>(std::clamp(std::lround(sum), 0L, 255L));
      }
  }
  return out;
}

Tensor decode_image(std::span<const std::uint8_t> bytes, std::int64_t height, std::int64_t width,
                    const std::string& name, std::int64_t max_pixels) {
  FRUGAL_CHECK_VALUE(height > 0 && width > 0, "decode_image: the size must be positive, got ", height, "x", width);
  const Tensor rgb = decode_rgb(bytes, name, max_pixels);
  return (rgb.size(1) == height && rgb.size(2) == width) ? rgb : resize_image(rgb, height, width);
}

ImageFolder::ImageFolder(std::string root, std::int64_t height, std::int64_t width)
    : root_(std::move(root)), height_(height), width_(width) {
  FRUGAL_CHECK_VALUE(height > 0 && width > 0, "image folder ", root_, ": the size must be positive, got ", height, "x", width);
  std::int64_t pixels = 0;  // checked before a resize allocates height * width per image
  FRUGAL_CHECK_VALUE(!__builtin_mul_overflow(height, width, &pixels) && pixels <= kMaxImagePixels, "image folder ",
                     root_, ": the size ", height, "x", width, " is more than the ", kMaxImagePixels,
                     " pixels an image may have");
  struct stat info {};
  FRUGAL_CHECK_VALUE(::stat(root_.c_str(), &info) == 0, "image folder ", root_, ": ", path_error_text(errno));
  FRUGAL_CHECK_VALUE(S_ISDIR(info.st_mode), "image folder ", root_, ": not a folder");
  std::vector<fs::path> class_folders;
  walk_folder(root_, [&] {
    for (const auto& entry : fs::directory_iterator(root_))
      if (entry.is_directory()) class_folders.push_back(entry.path());
  });
  FRUGAL_CHECK_VALUE(!class_folders.empty(), "image folder ", root_,
                     ": no class folders (expected ROOT/CLASS/IMAGE, one subfolder per class)");
  std::sort(class_folders.begin(), class_folders.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  for (const fs::path& folder : class_folders) {
    const std::vector<std::string> paths = list_images(folder);
    FRUGAL_CHECK_VALUE(!paths.empty(), "image folder ", root_, ": class folder ", folder.string(),
                       " holds no .png, .jpg, .jpeg or .bmp file");
    const auto label = static_cast<std::int64_t>(classes_.size());
    classes_.push_back(folder.filename().string());
    for (const std::string& p : paths) images_.push_back({p, label});
  }
}

void ImageFolder::check_index(std::int64_t index) const {
  FRUGAL_CHECK_INDEX(index >= 0 && index < size(), "image folder ", root_, ": index ", index, " out of range [0, ", size(), ")");
}

const std::string& ImageFolder::path(std::int64_t index) const {
  check_index(index);
  return images_[static_cast<std::size_t>(index)].path;
}

std::int64_t ImageFolder::label(std::int64_t index) const {
  check_index(index);
  return images_[static_cast<std::size_t>(index)].label;
}

Sample ImageFolder::get(std::int64_t index) const {
  const std::string& file = path(index);
  const MappedFile encoded(file, Access::sequential);
  MemoryTagScope tag(MemoryTag::data);
  return {decode_image(encoded.bytes(), height_, width_, file), label(index)};
}

std::string ImageFolder::describe() const {
  return detail::str("image folder ", root_, ": ", size(), " images in ", classes_.size(), " classes, resized to ",
                     height_, "x", width_);
}

}  // namespace frugal::data
