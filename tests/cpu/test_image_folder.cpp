// Image folders: listing order as torchvision's ImageFolder, decoding (grey and RGBA to RGB), the
// bilinear resize against hand-computed values, errors that name the image, and parallel reads.
// Every image is written here, with stb_image_write, into a temporary folder.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "core/error.h"
#include "data/image_folder.h"
#include "data/mapped_file.h"
#include "tests/cpu/test_files.h"
#include "tests/skip.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

using namespace frugal;
using frugal::data::ImageFolder;
namespace fs = std::filesystem;

using frugal::test::read_bytes;
using frugal::test::write_bytes;

namespace {

struct TempFolder {
  fs::path path = fs::temp_directory_path() / ("frugal-images-" + std::to_string(std::random_device{}()));
  TempFolder() { fs::create_directories(path); }
  ~TempFolder() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// Writes `pixels` ([h, w, channels] interleaved, as image files store them) as a PNG or BMP by extension.
void write_image(const std::string& file, int w, int h, int channels, const std::vector<std::uint8_t>& pixels) {
  fs::create_directories(fs::path(file).parent_path());
  std::string ext = fs::path(file).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const int ok = ext == ".bmp"   ? stbi_write_bmp(file.c_str(), w, h, channels, pixels.data())
                 : ext == ".png" ? stbi_write_png(file.c_str(), w, h, channels, pixels.data(), w * channels)
                                 : stbi_write_jpg(file.c_str(), w, h, channels, pixels.data(), 90);
  REQUIRE(ok != 0);
}

std::vector<int> values(const Tensor& t) { return t.to_vector<int>(); }

// The message of the ValueError that `f` throws; fails the test if it throws nothing.
template <typename F>
std::string value_error(F&& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.message();
  }
  FAIL("no ValueError thrown");
  return "";
}

}  // namespace

TEST_CASE("image folder: classes are sorted subfolders, images in torchvision's order, any case of extension") {
  TempFolder root;
  const std::vector<std::uint8_t> grey(4, 7);
  write_image(root / "dog/b.Jpeg", 2, 2, 1, grey);
  write_image(root / "cat/x.PNG", 2, 2, 1, grey);
  write_image(root / "cat/a.bmp", 2, 2, 1, grey);
  write_image(root / "cat/sub/0.jpg", 2, 2, 1, grey);  // a subfolder's files come after the folder's own
  write_bytes(root / "cat/notes.txt", {1, 2, 3});     // not an image: skipped
  write_bytes(root / "readme.md", {1});               // a file beside the classes: ignored

  const ImageFolder folder(root.path.string(), 5, 3);
  CHECK(folder.classes() == std::vector<std::string>{"cat", "dog"});
  REQUIRE(folder.size() == 4);
  CHECK(folder.path(0) == root / "cat/a.bmp");
  CHECK(folder.path(1) == root / "cat/x.PNG");
  CHECK(folder.path(2) == root / "cat/sub/0.jpg");
  CHECK(folder.path(3) == root / "dog/b.Jpeg");
  CHECK(folder.label(2) == 0);
  CHECK(folder.label(3) == 1);
  CHECK(folder.num_classes() == 2);
  CHECK(folder.sample_shape() == Shape{3, 5, 3});
  CHECK(folder.sample_dtype() == DType::u8);
  for (std::int64_t i = 0; i < folder.size(); ++i) {
    const data::Sample s = folder.get(i);
    CHECK(s.input.shape() == Shape{3, 5, 3});
    CHECK(s.label == folder.label(i));
    CHECK(values(s.input) == std::vector<int>(45, 7));  // a flat grey survives JPEG and the resize
  }
  CHECK(folder.describe().find("4 images in 2 classes") != std::string::npos);
  CHECK_THROWS_AS(folder.get(4), IndexError);
  CHECK_THROWS_AS(folder.get(-1), IndexError);
}

TEST_CASE("image folder: grey, RGB and RGBA PNG and BMP decode to exact RGB planes") {
  TempFolder root;
  // 3 wide, 2 high; pixel (x, y) of channel c holds 100*c + 10*y + x.
  std::vector<std::uint8_t> rgba;
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x)
      for (int c = 0; c < 4; ++c) rgba.push_back(static_cast<std::uint8_t>(c == 3 ? 128 : 100 * c + 10 * y + x));
  std::vector<std::uint8_t> rgb, grey;
  for (std::size_t p = 0; p < 6; ++p) {
    rgb.insert(rgb.end(), rgba.begin() + static_cast<std::ptrdiff_t>(4 * p), rgba.begin() + static_cast<std::ptrdiff_t>(4 * p + 3));
    grey.push_back(rgba[4 * p]);
  }
  write_image(root / "a/grey.png", 3, 2, 1, grey);
  write_image(root / "a/rgb.bmp", 3, 2, 3, rgb);
  write_image(root / "a/rgba.png", 3, 2, 4, rgba);
  write_image(root / "a/rgba.bmp", 3, 2, 4, rgba);

  const std::vector<int> planes = {0, 1, 2, 10, 11, 12, 100, 101, 102, 110, 111, 112, 200, 201, 202, 210, 211, 212};
  const std::vector<int> grey_planes = {0, 1, 2, 10, 11, 12, 0, 1, 2, 10, 11, 12, 0, 1, 2, 10, 11, 12};
  const ImageFolder folder(root.path.string(), 2, 3);  // the images' own size: no resize
  REQUIRE(folder.size() == 4);
  CHECK(values(folder.get(0).input) == grey_planes);  // grey.png: grey replicated
  CHECK(values(folder.get(1).input) == planes);       // rgb.bmp
  CHECK(values(folder.get(2).input) == planes);       // rgba.bmp: alpha dropped
  CHECK(values(folder.get(3).input) == planes);       // rgba.png: alpha dropped
  // The same bytes through the in-memory entry point.
  const Tensor decoded = data::decode_image(read_bytes(root / "a/rgba.png"), 2, 3, "rgba.png");
  CHECK(values(decoded) == planes);
}

TEST_CASE("resize_image: PIL's bilinear filter, by hand") {
  // 2x2 -> 4x4. Along each axis the outputs read input coordinates 0.25, 0.75, 1.25, 1.75 (pixel
  // centres at 0.5 and 1.5), so the taps are p0, 0.75 p0 + 0.25 p1, 0.25 p0 + 0.75 p1, p1.
  // Rows: [0, 100] -> 0 25 75 100; [200, 40] -> 200 160 80 40. Then down the columns:
  // 0.75*25 + 0.25*160 = 58.75 -> 59, 0.25*75 + 0.75*80 = 78.75 -> 79, and so on.
  const Tensor two = from_vector<std::uint8_t>({0, 100, 200, 40}, {1, 2, 2});
  CHECK(values(data::resize_image(two, 4, 4)) == std::vector<int>{0, 25, 75, 100,     //
                                                                  50, 59, 76, 85,     //
                                                                  150, 126, 79, 55,   //
                                                                  200, 160, 80, 40});
  // Shrinking 4 -> 2 widens the triangle to two input pixels each side (antialiasing): output 0 is
  // centred at 1.0 and weighs pixels 0, 1, 2 by 0.75, 0.75, 0.25: (0 + 30 + 20) / 1.75 = 28.57 -> 29;
  // output 1 weighs pixels 1, 2, 3 by 0.25, 0.75, 0.75: (10 + 60 + 90) / 1.75 = 91.43 -> 91.
  const Tensor row = from_vector<std::uint8_t>({0, 40, 80, 120}, {1, 1, 4});
  CHECK(values(data::resize_image(row, 1, 2)) == std::vector<int>{29, 91});
  // The same size is a copy; a single pixel fills any size; channels are resized independently.
  CHECK(values(data::resize_image(row, 1, 4)) == std::vector<int>{0, 40, 80, 120});
  CHECK(values(data::resize_image(from_vector<std::uint8_t>({9, 250}, {2, 1, 1}), 2, 3)) ==
        std::vector<int>{9, 9, 9, 9, 9, 9, 250, 250, 250, 250, 250, 250});
  // A non-contiguous view reads as its contiguous copy.
  const Tensor transposed = from_vector<std::uint8_t>({0, 200, 100, 40}, {1, 2, 2}).transpose(1, 2);
  CHECK(values(data::resize_image(transposed, 4, 4)) == values(data::resize_image(two, 4, 4)));

  CHECK_THROWS_AS(data::resize_image(two, 0, 4), ValueError);
  CHECK_THROWS_AS(data::resize_image(two.to(DType::f32), 4, 4), DTypeError);
  CHECK_THROWS_AS(data::resize_image(two.view({4}), 4, 4), ShapeError);
}

TEST_CASE("image folder: bad folders and bad images are errors that name them") {
  TempFolder root;
  const std::vector<std::uint8_t> grey(4, 1);
  CHECK(value_error([&] { ImageFolder(root / "missing", 4, 4); }).find("missing: does not exist") != std::string::npos);
  CHECK(value_error([&] { ImageFolder(root.path.string(), 4, 4); }).find(": no class folders") != std::string::npos);
  write_image(root / "a/0.png", 2, 2, 1, grey);
  write_bytes(root / "a/1.png", {});                                      // empty
  write_bytes(root / "a/2.png", {'n', 'o', 't', ' ', 'p', 'n', 'g'});      // not an image
  const std::vector<std::uint8_t> png = read_bytes(root / "a/0.png");
  REQUIRE(png.size() > 18);
  // Without IEND (12 bytes), IDAT's CRC (4) and the last 2 bytes of its data.
  write_bytes(root / "a/3.png", std::vector<std::uint8_t>(png.begin(), png.end() - 18));
  std::vector<std::uint8_t> corrupt = png;
  corrupt[41] = corrupt[42] = 0xFF;  // the zlib header of the IDAT data (after the signature, IHDR and IDAT's length and type)
  write_bytes(root / "a/30.png", corrupt);
  // A BMP header claiming 100000 x 100000 pixels and holding none.
  std::vector<std::uint8_t> huge = {'B', 'M', 0, 0, 0, 0, 0, 0, 0, 0, 54, 0, 0, 0, 40, 0, 0, 0, 0xa0, 0x86, 0x01, 0,
                                    0xa0, 0x86, 0x01, 0, 1, 0, 24, 0};
  huge.resize(54, 0);
  write_bytes(root / "a/4.bmp", huge);
  std::vector<std::uint8_t> flat = huge;  // the same header with width 0
  flat[18] = flat[19] = flat[20] = 0;
  write_bytes(root / "a/5.bmp", flat);
  write_image(root / "b/0.png", 2, 2, 1, grey);

  const ImageFolder folder(root.path.string(), 4, 4);
  REQUIRE(folder.size() == 8);
  CHECK(folder.get(0).input.shape() == Shape{3, 4, 4});
  const std::string empty_file = root / "a/1.png" + ": is empty";
  CHECK_THROWS_WITH_AS(folder.get(1), doctest::Contains(empty_file.c_str()), data::FileError);
  CHECK(value_error([&] { data::decode_image({}, 4, 4, "in memory"); }) == "in memory: empty file (0 bytes), not an image");
  CHECK(value_error([&] { folder.get(2); }) == root / "a/2.png" + ": not a PNG, JPEG or BMP image (no known signature)");
  CHECK(value_error([&] { folder.get(3); }) == root / "a/3.png" + ": truncated PNG (a chunk is longer than the rest of the file)");
  CHECK(value_error([&] { folder.get(4); }) == root / "a/30.png" + ": corrupt or truncated PNG data");
  CHECK(value_error([&] { folder.get(5); }) ==
        root / "a/4.bmp" + ": 100000x100000 pixels is more than frugal decodes (67108864)");
  CHECK(value_error([&] { folder.get(6); }) == root / "a/5.bmp" + ": zero-size image (0x100000)");
  CHECK(folder.get(7).label == 1);

  fs::create_directories(root / "c");  // an empty class folder
  write_bytes(root / "c/readme.txt", {1});
  CHECK(value_error([&] { ImageFolder(root.path.string(), 4, 4); }).ends_with("class folder " + root / "c" + " holds no .png, .jpg, .jpeg or .bmp file"));
  CHECK_THROWS_AS(ImageFolder(root.path.string(), 0, 4), ValueError);
  // A JPEG whose Huffman table (DHT, after an APP0 segment stb_image skips) counts 16 x 255 codes: stb_image
  // 2.27 would write past its 256-entry table (Note [stb_image's DHT overflow]).
  std::vector<std::uint8_t> jpeg = {0xFF, 0xD8, 0xFF, 0xE0, 0, 2, 0xFF, 0xC4, 0, 19, 0x00};
  jpeg.insert(jpeg.end(), 16, 255);
  CHECK(value_error([&] { data::decode_image(jpeg, 4, 4, "dht.jpg"); }) ==
        "dht.jpg: corrupt JPEG (a Huffman table with more than 256 codes)");
  CHECK(value_error([&] { data::decode_image(read_bytes(root / "a/0.png"), 4, 4, "0.png", 3); }) ==
        "0.png: 2x2 pixels is more than frugal decodes (3)");
  CHECK_THROWS_AS(data::decode_image(grey, -1, 4, "x"), ValueError);
}

TEST_CASE("image folder: a folder that cannot be walked (a symlink loop) is a FileError naming it") {
  TempFolder root;
  write_image(root / "a/0.png", 2, 2, 1, std::vector<std::uint8_t>(4, 1));
  fs::create_directory_symlink(root.path / "a", root.path / "a" / "loop");  // a/loop/loop/... until ELOOP
  try {
    ImageFolder(root.path.string(), 4, 4);
    FAIL("a symlink loop must not be walked forever or crash");
  } catch (const frugal::data::FileError& error) {
    CHECK(error.message().find("cannot list the folder") != std::string::npos);
    CHECK(error.message().find(root.path.string()) != std::string::npos);
  }
}

TEST_CASE("image folder: a size past kMaxImagePixels and a root that is a symlink loop are refused by name") {
  TempFolder root;
  write_image(root / "a/0.png", 2, 2, 1, std::vector<std::uint8_t>(4, 1));
  // Refused before a resize would allocate 3 * 10^10 bytes for the first image.
  CHECK_THROWS_WITH_AS(ImageFolder(root.path.string(), 100000, 100000),
                       doctest::Contains("the size 100000x100000 is more than the 67108864 pixels"), ValueError);
  CHECK_THROWS_AS(ImageFolder(root.path.string(), std::int64_t{1} << 62, 4), ValueError);  // the product overflows
  fs::create_symlink(root.path / "loop", root.path / "loop");
  const std::string loop_message = (root.path / "loop").string() + ": is a symlink loop";
  CHECK_THROWS_WITH_AS(ImageFolder((root.path / "loop").string(), 4, 4), doctest::Contains(loop_message.c_str()),
                       ValueError);
}

TEST_CASE("image folder: get() from several threads at once gives what one thread gets") {
  TempFolder root;
  std::mt19937 rng(7);
  for (int i = 0; i < 12; ++i) {
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(5 * 7 * 3));
    for (auto& p : pixels) p = static_cast<std::uint8_t>(rng());
    write_image(root / (std::string(i % 2 ? "odd/" : "even/") + std::to_string(i) + (i % 3 ? ".png" : ".bmp")), 5, 7, 3, pixels);
  }
  write_bytes(root / "odd/bad.png", {1, 2, 3});
  const ImageFolder folder(root.path.string(), 6, 4);
  REQUIRE(folder.size() == 13);
  std::vector<std::vector<int>> expected;
  for (std::int64_t i = 0; i < folder.size(); ++i)
    expected.push_back(folder.path(i).ends_with("bad.png") ? std::vector<int>{} : values(folder.get(i).input));

  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0), errors(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round)
        for (std::int64_t i = 0; i < folder.size(); ++i) {
          const std::int64_t k = (i + t) % folder.size();
          try {
            mismatches[t] += values(folder.get(k).input) != expected[static_cast<std::size_t>(k)];
          } catch (const ValueError&) {
            errors[t] += 1;  // bad.png, every round: each thread's stb_image error is its own
          }
        }
    });
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    CHECK(mismatches[t] == 0);
    CHECK(errors[t] == 5);
  }
}

TEST_CASE("image folder: the fuzz seeds, written by fuzz/make_corpus.py from the formats' specs, decode as expected") {
  const fs::path corpus = fs::path(FRUGAL_SOURCE_DIR) / "fuzz/corpus/fuzz_image";
  if (!fs::exists(corpus)) FRUGAL_SKIP("fuzz/corpus/fuzz_image not found beside the tests' sources");
  const auto decode = [&](const std::string& name, std::int64_t height, std::int64_t width) {
    return values(data::decode_image(read_bytes((corpus / name).string()), height, width, name));
  };
  // Interleaved bytes b0 b1 b2 ... as planes: channel c holds b[c], b[c + channels], ...
  const auto planes = [](std::vector<int> bytes, int channels) {
    std::vector<int> out;
    for (int c = 0; c < 3; ++c)
      for (std::size_t p = static_cast<std::size_t>(c); p < bytes.size(); p += static_cast<std::size_t>(channels)) out.push_back(bytes[p]);
    return out;
  };
  const std::vector<int> grey = {0, 10, 20, 30, 40, 50};
  std::vector<int> grey_rgb = grey;
  grey_rgb.insert(grey_rgb.end(), grey.begin(), grey.end());
  grey_rgb.insert(grey_rgb.end(), grey.begin(), grey.end());
  std::vector<int> range18(18), range16(16), tens(18);
  for (int i = 0; i < 18; ++i) range18[static_cast<std::size_t>(i)] = i, tens[static_cast<std::size_t>(i)] = 10 * i;
  for (int i = 0; i < 16; ++i) range16[static_cast<std::size_t>(i)] = i;
  std::vector<int> rgba_planes = planes(range16, 4);
  CHECK(decode("grey_3x2.png", 2, 3) == grey_rgb);
  CHECK(decode("rgb_3x2.png", 2, 3) == planes(range18, 3));
  CHECK(decode("rgb_3x2.bmp", 2, 3) == planes(tens, 3));
  CHECK(decode("rgba_2x2.png", 2, 2) == rgba_planes);
  CHECK(decode("grey_2x2.jpg", 2, 2).size() == 12);
  CHECK(value_error([&] { decode("bad_truncated.png", 2, 2); }) ==
        "bad_truncated.png: truncated PNG (a chunk is longer than the rest of the file)");
  CHECK(value_error([&] { decode("bad_truncated.bmp", 2, 3); }) ==
        "bad_truncated.bmp: truncated BMP (the file ends before its last row of pixels)");
  CHECK(value_error([&] { decode("bad_truncated.jpg", 2, 2); }) == "bad_truncated.jpg: corrupt or truncated JPEG data");
  CHECK(value_error([&] { decode("bad_zero_width.bmp", 2, 2); }) == "bad_zero_width.bmp: zero-size image (0x2)");
}
