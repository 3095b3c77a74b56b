// libFuzzer target: arbitrary bytes as an encoded image (data/image_folder.h). decode_image (stb_image's
// PNG, JPEG and BMP decoders, then the resize) must return a [3, 5, 7] u8 tensor or throw a
// frugal::Error. The odd output size makes the resize run on almost every input that decodes.
#include <cstddef>
#include <cstdint>

#include "data/image_folder.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    // At most 2^20 pixels: larger images reach no code that small ones do not, and a 16-megapixel
    // JPEG of a few bytes (stb_image decodes missing data as zeros) takes 10 s under the sanitizers.
    const frugal::Tensor image = frugal::data::decode_image({data, size}, 5, 7, "fuzz input", std::int64_t{1} << 20);
    if (image.shape() != frugal::Shape{3, 5, 7} || image.dtype() != frugal::DType::u8) __builtin_trap();
  } catch (const frugal::Error&) {
    // bad input, reported as it should be
  }
  return 0;
}
