// Devices, dtypes, CUDA status and streams on a machine that may have no GPU: whatever the machine, the
// answers must be consistent, and CUDA tensors must fail with the reason when CUDA is unusable.
#include <doctest/doctest.h>

#include <vector>

#include "core/cuda_status.h"
#include "core/stream.h"
#include "core/tensor.h"

using namespace frugal;

TEST_CASE("Device parses and prints cpu, cuda and cuda:N") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::cuda(1).str() == "cuda:1");
  CHECK(Device::cpu().str() == "cpu");
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU", ""})
    CHECK_THROWS_WITH_AS(Device::parse(bad), doctest::Contains("expected cpu, cuda, cuda:N or meta"), ValueError);
}

TEST_CASE("DType sizes and names") {
  const std::pair<DType, std::size_t> sizes[] = {{DType::f32, 4}, {DType::f64, 8}, {DType::f16, 2}, {DType::bf16, 2},
                                                 {DType::i32, 4}, {DType::i64, 8}, {DType::u8, 1},  {DType::boolean, 1}};
  for (auto [dtype, size] : sizes) {
    CHECK(dtype_size(dtype) == size);
    CHECK(parse_dtype(dtype_name(dtype)) == dtype);
  }
  CHECK(dtype_name(DType::boolean) == "bool");
  CHECK(is_floating(DType::bf16));
  CHECK_FALSE(is_floating(DType::i64));
  CHECK_THROWS_AS(parse_dtype("float32"), ValueError);
}

TEST_CASE("CUDA status is consistent, and unusable CUDA fails with its reason") {
  const CudaStatus& status = cuda_status();
  CHECK(status.compiled == static_cast<bool>(FRUGAL_WITH_CUDA));
  if (status.usable) {
    CHECK(status.device_count > 0);
    return;  // the GPU suite covers usable devices
  }
  CHECK(status.device_count == 0);
  CHECK(status.reason.ends_with("running on CPU"));
  CHECK_THROWS_WITH_AS(zeros({2}, {.device = Device::cuda()}), doctest::Contains(status.reason.c_str()), DeviceError);
  CHECK_THROWS_AS(cuda_device_info(0), DeviceError);
  CHECK_THROWS_AS(ones({2}).to(Device::cuda()), DeviceError);
}

TEST_CASE("library status checks are generated from one macro") {
  auto failing_call = [] { return 7; };
  auto describe = [](int status) { return status == 7 ? "seven is not zero" : "?"; };
  try {
    FRUGAL_LIBRARY_CHECK("FakeLib", failing_call(), 0, describe);
    FAIL("no exception");
  } catch (const LibraryError& e) {
    CHECK(e.message() == "FakeLib error 7: seven is not zero");
    CHECK(e.expression() == "failing_call()");
  }
  CHECK_NOTHROW(FRUGAL_LIBRARY_CHECK("FakeLib", 0, 0, describe));
}

TEST_CASE("streams on the CPU: side streams are the default stream, copies are immediate, bad slots are ValueErrors") {
  for (int slot = 0; slot < kSideStreams; ++slot) CHECK(side_stream(Device::cpu(), slot) == Stream{});
  CHECK_THROWS_AS(side_stream(Device::cpu(), -1), ValueError);
  CHECK_THROWS_WITH_AS(side_stream(Device::cpu(), kSideStreams), doctest::Contains("is not in 0..3"), ValueError);

  const std::vector<float> source = {1, 2, 3, 4, 5};
  std::vector<float> copied(5, 0.0f);
  copy_bytes_async(copied.data(), Device::cpu(), source.data(), Device::cpu(), 5 * sizeof(float), Stream{});
  CHECK(copied == source);  // done before the call returns: nothing runs asynchronously on the host
  synchronize_stream(Device::cpu(), Stream{});

  const Tensor host = empty({4}, {.stream = side_stream(Device::cpu(), 1)});
  CHECK(host.nbytes() == 16);
  record_stream(host, Stream{});  // nothing to record on the host
  if (!cuda_available()) {
    CHECK_THROWS_AS(side_stream(Device::cuda(0), 0), DeviceError);
  }
}

TEST_CASE("printable: a file's text in a message never drives a terminal nor breaks a line") {
  CHECK(printable("plain.name_0") == "plain.name_0");
  CHECK(printable("größe.weight") == "größe.weight");      // valid UTF-8 letters stay
  CHECK(printable("a\x1b[31mred") == "a\\x1b[31mred");     // an escape code is shown, not sent
  CHECK(printable("tab\there\nnew") == "tab\\x09here\\x0anew");
  CHECK(printable(std::string("n\0ul", 4)) == "n\\x00ul");
  CHECK(printable("\xc2\x9b" "2J") == "\\x9b2J");          // U+009B, the 8-bit escape introducer
  CHECK(printable("x\xe2\x80\xaey") == "x\\u{202e}y");      // a right-to-left override
  CHECK(printable("bad\xff\xfe") == "bad\\xff\\xfe");       // not UTF-8
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");             // an overlong '/'
  CHECK(printable("\xf8\x9b\x80z") == "\\xf8\\x9b\\x80z");     // 0xF8 leads nothing: its bytes (0x9B too) escaped
  CHECK(printable(std::string(300, 'a'), 10) == "aaaaaaaaaa...");
}
