// nn/safetensors.h: the reference's golden vectors read and written byte for byte, round trips of
// every dtype (scalars and empty tensors too), the writer's refusals, and one case per rule a file
// can break, each checking that the one-line message names the file, the tensor and the problem.
// Files are built here from their JSON text, so each case reads as the bytes it tests.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "nn/layers.h"
#include "nn/safetensors.h"
#include "tests/cpu/temp_dir.h"
#include "tests/cpu/test_files.h"
#include "tests/skip.h"

using namespace frugal;
using namespace frugal::nn;
namespace fs = std::filesystem;

using frugal::test::TempDir;
using namespace frugal::test;  // write_bytes, read_bytes, write_gz, idx_u8

namespace {

// A file: N as 8 little-endian bytes (`length`, when given, instead of the header's size), the
// header text as given (no padding added), then `data`.
Bytes file_of(const std::string& header, const Bytes& data = {}, std::uint64_t length = ~std::uint64_t{0}) {
  const std::uint64_t n = length == ~std::uint64_t{0} ? header.size() : length;
  Bytes bytes;
  bytes.reserve(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

// The message of the ValueError that parsing `bytes` as "m.safetensors" throws; "" if none.
std::string error_of(const Bytes& bytes) {
  try {
    parse_safetensors(bytes, "m.safetensors");
  } catch (const ValueError& error) {
    return error.message();
  }
  return "";
}

// Checks that parsing fails with one line that starts "m.safetensors: " and contains `expected`.
void check_refused(const Bytes& bytes, const std::string& expected) {
  const std::string message = error_of(bytes);
  INFO("message: ", message);
  CHECK(message.starts_with("m.safetensors: "));
  CHECK(message.find(expected) != std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
}

}  // namespace

TEST_CASE("safetensors: a message never carries the file's raw bytes (invalid UTF-8, escape codes)") {
  for (const std::string& header : {std::string("{\"a\xff\xfe\":1}"), std::string("{\"\x1b[2J\":1}"),
                                   std::string("{\"ok\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\xc3\x28\":{}}"),
                                   std::string(R"({"\u001b[2J":{"dtype":"X","shape":[],"data_offsets":[0,4]}})")}) {
    Bytes bytes(8);
    const std::uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    bytes.insert(bytes.end(), header.begin(), header.end());
    bytes.resize(bytes.size() + 4);
    const std::string message = error_of(bytes);
    INFO("message: ", message);
    CHECK_FALSE(message.empty());
    CHECK(message.find('\x1b') == std::string::npos);
    CHECK(std::none_of(message.begin(), message.end(), [](char c) {
      return static_cast<unsigned char>(c) == 0xff || static_cast<unsigned char>(c) == 0xfe;
    }));
    CHECK(nlohmann::json(message).dump().size() > 0);  // valid UTF-8 (dump throws otherwise)
  }
}

namespace {

const std::string kAttnHeader = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
const Bytes kAttnData = {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,
                         0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40, 0x00, 0x00, 0xa0, 0x40};

// The reference's three golden files (Rust tests of huggingface/safetensors).
Bytes golden_attn() { return file_of(kAttnHeader, kAttnData); }
Bytes golden_empty() { return file_of("{}      "); }
Bytes golden_metadata() { return file_of(R"({"__metadata__":{"framework":"pt"}}     )"); }

// An F32 entry of 2 elements at [begin, begin + 8): many layout cases are made of these.
std::string f32x2(const std::string& name, int begin) {
  return "\"" + name + R"(":{"dtype":"F32","shape":[2],"data_offsets":[)" + std::to_string(begin) + "," +
         std::to_string(begin + 8) + "]}";
}

// A JSON object of the members given: object({f32x2("a", 0), f32x2("b", 8)}).
std::string object(std::initializer_list<std::string> members) {
  std::string text = "{";
  for (const std::string& member : members) {
    if (text.size() > 1) text += ',';
    text += member;
  }
  return text + "}";
}

}  // namespace

TEST_CASE("safetensors: the golden vectors read as the reference says") {
  const Bytes attn = golden_attn();
  REQUIRE(attn.size() == 96);
  const SafetensorsFile file = parse_safetensors(attn, "attn");
  REQUIRE(file.tensors.size() == 1);
  CHECK(file.tensors[0].first == "attn.0");
  CHECK(file.tensors[0].second.dtype() == DType::f32);
  CHECK(file.tensors[0].second.shape() == Shape{1, 2, 3});
  CHECK(file.tensors[0].second.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  CHECK(file.metadata.empty());

  REQUIRE(golden_empty().size() == 16);
  const SafetensorsFile empty = parse_safetensors(golden_empty(), "empty");
  CHECK(empty.tensors.empty());
  CHECK(empty.metadata.empty());

  REQUIRE(golden_metadata().size() == 48);
  const SafetensorsFile meta = parse_safetensors(golden_metadata(), "meta");
  CHECK(meta.tensors.empty());
  CHECK(meta.metadata == Metadata{{"framework", "pt"}});

  const SafetensorsHeader header = parse_safetensors_header(attn, attn.size(), "attn");
  CHECK(header.data_start == 72);
  REQUIRE(header.entries.size() == 1);
  CHECK(header.entries[0].begin == 0);
  CHECK(header.entries[0].end == 24);
}

TEST_CASE("safetensors: the golden vectors are written byte for byte, in memory and as files") {
  const Tensor attn = arange(6, {.dtype = DType::f32}).view({1, 2, 3});
  CHECK(encode_safetensors({{"attn.0", attn}}) == golden_attn());
  CHECK(encode_safetensors({}) == golden_empty());
  CHECK(encode_safetensors({}, {{"framework", "pt"}}) == golden_metadata());

  TempDir dir;
  write_safetensors(dir / "attn.safetensors", {{"attn.0", attn}});
  CHECK(read_bytes(dir / "attn.safetensors") == golden_attn());
  write_safetensors(dir / "empty.safetensors", {});
  CHECK(read_bytes(dir / "empty.safetensors") == golden_empty());
  write_safetensors(dir / "meta.safetensors", {}, {{"framework", "pt"}});
  CHECK(read_bytes(dir / "meta.safetensors") == golden_metadata());
  const SafetensorsFile back = read_safetensors(dir / "attn.safetensors");
  CHECK(back.tensors[0].second.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("safetensors: every dtype round-trips, scalars, empty tensors and strided views included") {
  TempDir dir;
  for (const DType dtype : kAllDTypes) {
    CAPTURE(dtype);
    // Small integers, exact in every dtype; bool gets 0 and 1.
    const Tensor matrix = dtype == DType::boolean ? from_vector<bool>({true, false, false, true, true, false}, {2, 3})
                                                  : arange(6, {.dtype = dtype}).view({2, 3});
    const StateDict tensors = {{"matrix", matrix},
                               {"transposed", matrix.t()},  // not contiguous: written in C order
                               {"scalar", full({}, 1, {.dtype = dtype})},
                               {"empty_rows", empty({0, 3}, {.dtype = dtype})},
                               {"empty_cols", empty({3, 0}, {.dtype = dtype})}};
    const std::string path = dir / "all.safetensors";
    write_safetensors(path, tensors, {{"dtype", std::string(dtype_name(dtype))}, {"a", "b"}});
    const SafetensorsFile back = read_safetensors(path);
    CHECK(back.metadata == Metadata{{"dtype", std::string(dtype_name(dtype))}, {"a", "b"}});
    REQUIRE(back.tensors.size() == tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      CAPTURE(tensors[i].first);
      CHECK(back.tensors[i].first == tensors[i].first);  // the order given, kept
      CHECK(back.tensors[i].second.dtype() == dtype);
      CHECK(back.tensors[i].second.shape() == tensors[i].second.shape());
      CHECK(back.tensors[i].second.to_vector<double>() == tensors[i].second.to_vector<double>());
    }
    CHECK(parse_safetensors(read_bytes(path), "all").tensors.size() == tensors.size());  // from memory the same
  }
}

TEST_CASE("safetensors: a module's state dict, written and read back, loads into a fresh module unchanged") {
  const auto make = [] {
    return nn::Sequential{std::make_shared<nn::Conv2d>(3, 4, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(4),
                          std::make_shared<nn::Linear>(4, 2)};
  };
  nn::Sequential saved = make();
  for (auto& [name, buffer] : saved.named_buffers())
    if (buffer.dtype() == DType::f32) buffer.fill_(0.5);  // running statistics unlike a fresh module's
  TempDir dir;
  write_safetensors(dir / "net.safetensors", saved.state_dict(), {{"format", "pt"}});
  nn::Sequential loaded = make();
  loaded.load_state_dict(read_safetensors(dir / "net.safetensors").tensors);
  const StateDict want = saved.state_dict(), got = loaded.state_dict();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    CAPTURE(want[i].first);
    CHECK(got[i].first == want[i].first);
    CHECK(got[i].second.to_vector<double>() == want[i].second.to_vector<double>());
  }
}

TEST_CASE("safetensors: the header alone lists the entries in the file's order, not sorted") {
  TempDir dir;
  const std::string path = dir / "order.safetensors";
  write_safetensors(path, {{"z", zeros({2}, {.dtype = DType::i64})}, {"a", zeros({3}, {.dtype = DType::bf16})}},
                    {{"b", "2"}, {"a", "1"}});
  const SafetensorsHeader header = read_safetensors_header(path);
  REQUIRE(header.entries.size() == 2);
  CHECK(header.entries[0].name == "z");
  CHECK(header.entries[0].dtype == DType::i64);
  CHECK(header.entries[0].end == 16);
  CHECK(header.entries[1].name == "a");
  CHECK(header.entries[1].begin == 16);
  CHECK(header.entries[1].end == 22);
  CHECK(header.metadata == Metadata{{"b", "2"}, {"a", "1"}});
  CHECK(header.data_start % 8 == 0);  // the header is padded to a multiple of 8
  CHECK(header.data_start + 22 == fs::file_size(path));
}

TEST_CASE("safetensors: the writer refuses what no reader could take back, and leaves nothing") {
  TempDir dir;
  const std::string path = dir / "bad.safetensors";
  const Tensor t = zeros({2});
  const auto refused = [&](const StateDict& tensors, const Metadata& metadata, const std::string& expected) {
    CHECK_THROWS_WITH_AS(write_safetensors(path, tensors, metadata), doctest::Contains(expected.c_str()), ValueError);
    CHECK_FALSE(fs::exists(path));
    CHECK(fs::is_empty(dir.path));  // no temporary file either
  };
  refused({{"a", t}, {"a", t}}, {}, path + ": tensor 'a' is given twice");
  refused({{"__metadata__", t}}, {}, path + ": no tensor may be named '__metadata__'");
  refused({{"a", Tensor()}}, {}, path + ": tensor 'a' is undefined");
  refused({{"bad\xff", t}}, {}, path + ": a tensor name is not valid UTF-8");
  refused({{"a", t}}, {{"k", "v"}, {"k", "w"}}, path + ": metadata key 'k' is given twice");
  refused({}, {{"k", "\xc3"}}, path + ": a metadata value is not valid UTF-8");
}

TEST_CASE("safetensors: names with quotes, backslashes and non-ASCII letters are escaped and read back") {
  const StateDict tensors = {{"a\"b\\c\n", zeros({1})}, {"größe.weight", ones({1})}};
  const SafetensorsFile back = parse_safetensors(encode_safetensors(tensors), "names");
  CHECK(back.tensors[0].first == "a\"b\\c\n");
  CHECK(back.tensors[1].first == "größe.weight");
}

TEST_CASE("safetensors: too short, empty, and header lengths the file cannot hold") {
  check_refused({}, "0 bytes is too short for a safetensors file");
  check_refused({1, 2, 3, 4, 5}, "5 bytes is too short");
  check_refused(file_of("{}", {}, 100'000'001), "the header length is 100000001 bytes, over the limit of 100000000");
  check_refused(file_of("{}", {}, 3), "the header length is 3 bytes, but only 2 bytes follow it (truncated?)");
  check_refused(file_of("{}", {}, ~std::uint64_t{0} - 1), "over the limit");
  TempDir dir;
  write_bytes(dir / "empty.safetensors", {});
  CHECK_THROWS_WITH_AS(read_safetensors(dir / "empty.safetensors"), doctest::Contains("empty.safetensors: is empty"),
                       FileError);
  write_bytes(dir / "short.safetensors", {8, 0, 0});
  CHECK_THROWS_WITH_AS(read_safetensors_header(dir / "short.safetensors"),
                       doctest::Contains("short.safetensors: 3 bytes is too short"), ValueError);
  Bytes cut = golden_attn();
  cut.resize(90);
  write_bytes(dir / "cut.safetensors", cut);
  CHECK_THROWS_WITH_AS(read_safetensors(dir / "cut.safetensors"),
                       doctest::Contains("tensor 'attn.0' ends at byte 24 of the data, but the file holds only 18"),
                       ValueError);
  CHECK_THROWS_WITH_AS(read_safetensors(dir / "missing"), doctest::Contains("missing: cannot open"), FileError);
}

TEST_CASE("safetensors: a header that is not one UTF-8 JSON object") {
  check_refused(file_of("[]      "), "the header does not start with '{'");
  check_refused(file_of(" {}     "), "the header does not start with '{'");
  check_refused(file_of(""), "the header does not start with '{'");
  check_refused(file_of(R"({"a":)"), "the header is not valid JSON: ");
  check_refused(file_of("{} x"), "the header is not valid JSON: ");
  check_refused(file_of("{\"\xff\":1}"), "the header is not valid JSON: ");
  check_refused(file_of("{\"\xc3(\":1}"), "ill-formed UTF-8");
  CHECK(error_of(file_of("{}\n\t \r")) == "");  // JSON whitespace after the object is padding
  // Deeper than {name: {"shape": [dims]}} is refused while scanning: a million '[' once overflowed
  // the stack when the message printed the entry.
  const std::string deep = "{\"a\":" + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}";
  check_refused(file_of(deep), "the header nests arrays and objects deeper than the 3 levels of {name: "
                               "{\"shape\": [dims]}}, in 'a'");
  check_refused(file_of(R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", Bytes(4)), "nests arrays");
}

TEST_CASE("safetensors: a key given twice, which a JSON parser would keep the last of silently") {
  check_refused(file_of(object({f32x2("a", 0), f32x2("a", 0)}), Bytes(8)), "the header names 'a' twice");
  check_refused(file_of(R"({"a":{"dtype":"F32","dtype":"F32","shape":[],"data_offsets":[0,4]}})", Bytes(4)),
                "'a' has the key 'dtype' twice");
  check_refused(file_of(R"({"__metadata__":{"k":"1","k":"2"}})"), "'__metadata__' has the key 'k' twice");
  check_refused(file_of(R"({"__metadata__":{},"__metadata__":{}})"), "the header names '__metadata__' twice");
}

TEST_CASE("safetensors: an entry without exactly dtype, shape and data_offsets of the right types") {
  check_refused(file_of(R"({"a":{"dtype":"F32","shape":[]}})"),
                "tensor 'a': expected exactly the keys dtype, shape and data_offsets, got");
  check_refused(file_of(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":1}})", Bytes(4)),
                "tensor 'a': expected exactly the keys");
  check_refused(file_of(R"({"a":{"dtype":"F32","shape":[],"offsets":[0,4]}})", Bytes(4)), "tensor 'a': expected exactly");
  check_refused(file_of(R"({"a":[1,2]})"), "tensor 'a': expected exactly the keys");
  check_refused(file_of(R"({"a":{"dtype":1,"shape":[],"data_offsets":[0,4]}})", Bytes(4)),
                "tensor 'a': dtype must be a string, got 1");
  check_refused(file_of(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,4]}})", Bytes(4)),
                "tensor 'a': shape must be an array, got 2");
  check_refused(file_of(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", Bytes(4)),
                "tensor 'a': shape must hold integers >= 0, got -1");
  check_refused(file_of(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", Bytes(4)),
                "tensor 'a': shape must hold integers >= 0, got 1.0");
  check_refused(file_of(R"({"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", Bytes(4)),
                "shape must hold integers >= 0, got \"1\"");
  check_refused(file_of(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0]}})", Bytes(4)),
                "tensor 'a': data_offsets must be [begin, end], got [0]");
  check_refused(file_of(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,-4]}})", Bytes(4)),
                "tensor 'a': data_offsets must hold integers >= 0, got -4");
  check_refused(file_of(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[8,4]}})", Bytes(8)),
                "tensor 'a': data_offsets [8,4] end before they begin");
}

TEST_CASE("safetensors: dtypes that are not safetensors', and those frugal has no tensors of") {
  check_refused(file_of(R"({"a":{"dtype":"F33","shape":[],"data_offsets":[0,4]}})", Bytes(4)),
                "tensor 'a': dtype \"F33\" is not a safetensors dtype");
  check_refused(file_of(R"({"a":{"dtype":"f32","shape":[],"data_offsets":[0,4]}})", Bytes(4)),
                "tensor 'a': dtype \"f32\" is not a safetensors dtype");
  check_refused(file_of(R"({"a":{"dtype":"I8","shape":[],"data_offsets":[0,1]}})", Bytes(1)),
                "tensor 'a': dtype \"I8\" has no frugal dtype (frugal reads BOOL, U8, I32, I64, F16, BF16, F32, F64)");
  check_refused(file_of(R"({"a":{"dtype":"F8_E4M3","shape":[],"data_offsets":[0,1]}})", Bytes(1)),
                "dtype \"F8_E4M3\" has no frugal dtype");
  // A name with a newline is shown JSON-escaped, and a long value cut short: the message stays one line.
  check_refused(file_of(R"({"a\nb":{"dtype":"X","shape":[],"data_offsets":[0,4]}})", Bytes(4)),
                "tensor \"a\\nb\": dtype \"X\" is not a safetensors dtype");
  std::string long_shape = "[";
  for (int i = 0; i < 100; ++i) long_shape += "1,";
  long_shape += "-1]";
  const std::string message =
      error_of(file_of(R"({"a":{"dtype":"F32","shape":)" + long_shape + R"(,"data_offsets":[0,4]}})", Bytes(4)));
  CHECK(message.find("shape must hold integers >= 0, got -1") != std::string::npos);
  CHECK(error_of(file_of(R"({"a":{"dtype":"F32","shape":)" + long_shape + R"(,"data_offsets":[0,4],"x":0}})",
                         Bytes(4))).ends_with("..."));
}

TEST_CASE("safetensors: shapes whose size overflows, and sizes that do not match the offsets") {
  check_refused(file_of(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
                "tensor 'a': shape [4294967296,4294967296] has more elements than a 64-bit count holds");
  // Zeros do not hide the overflow: the strides of [0, 2^32, 2^32] overflow as well.
  check_refused(file_of(R"({"a":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})"),
                "has more elements than a 64-bit count holds");
  check_refused(file_of(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
                "tensor 'a': shape [4611686018427387904] has more bytes than a 64-bit count holds");
  check_refused(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", Bytes(4)),
                "tensor 'a': F32 [2] needs 8 bytes, but data_offsets [0,4] hold 4");
  CHECK(error_of(file_of(R"({"a":{"dtype":"U8","shape":[0,4294967296,2],"data_offsets":[0,0]}})")) == "");
}

TEST_CASE("safetensors: entries that leave a gap, overlap, or do not fill the data exactly") {
  check_refused(file_of(object({f32x2("a", 0), f32x2("b", 12)}), Bytes(20)),
                "tensor 'b' starts at byte 12 of the data, but the tensors before it end at byte 8: a gap");
  check_refused(file_of(object({f32x2("a", 4)}), Bytes(12)), "tensor 'a' starts at byte 4 of the data, but the "
                                                               "tensors before it end at byte 0: a gap");
  check_refused(file_of(object({f32x2("a", 0), f32x2("b", 4)}), Bytes(12)),
                "tensor 'b' (bytes 4 to 12) overlaps tensor 'a' (bytes 0 to 8)");
  check_refused(file_of(object({f32x2("a", 0), f32x2("b", 0)}), Bytes(8)), "overlaps tensor");
  check_refused(file_of(object({f32x2("a", 0)}), Bytes(9)),
                "the file holds 9 bytes of data, but its tensors end at byte 8: bytes 8 to 9 belong to no tensor");
  check_refused(file_of("{}", Bytes(3)), "the file holds 3 bytes of data, but it has no tensors");
  check_refused(file_of(object({f32x2("a", 0)}), Bytes(7)),
                "tensor 'a' ends at byte 8 of the data, but the file holds only 7 bytes of data (truncated?)");
  // Sorted by offset they are contiguous, in whatever order the header lists them; empty ones anywhere.
  const std::string empty = R"("e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]})";
  CHECK(error_of(file_of(object({f32x2("b", 8), empty, f32x2("a", 0)}), Bytes(16))) == "");
}

TEST_CASE("safetensors: __metadata__ maps strings to strings, and BOOL holds 0 or 1") {
  check_refused(file_of(R"({"__metadata__":["pt"]})"), "'__metadata__' must map strings to strings, got [\"pt\"]");
  check_refused(file_of(R"({"__metadata__":{"epoch":3}})"), "'__metadata__' must map strings to strings, but 'epoch' is 3");
  check_refused(file_of(R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", Bytes{1, 0, 2}),
                "tensor 'b': BOOL bytes must be 0 or 1");
}

TEST_CASE("safetensors: the fuzz seeds, written by fuzz/make_corpus.py from the format's spec, read as expected") {
  const fs::path corpus = fs::path(FRUGAL_SOURCE_DIR) / "fuzz/corpus/fuzz_safetensors";
  if (!fs::exists(corpus)) FRUGAL_SKIP("fuzz/corpus/fuzz_safetensors not found beside the tests' sources");
  CHECK(read_bytes(corpus / "golden_attn") == golden_attn());
  CHECK(read_bytes(corpus / "golden_empty") == golden_empty());
  CHECK(read_bytes(corpus / "golden_metadata") == golden_metadata());
  const SafetensorsFile all = read_safetensors((corpus / "every_dtype").string());
  REQUIRE(all.tensors.size() == 8);
  CHECK(all.metadata == Metadata{{"format", "pt"}, {"note", "one tensor of each dtype"}});
  const auto values = [&](std::size_t i) { return all.tensors[i].second.to_vector<double>(); };
  CHECK(values(0) == std::vector<double>{0.5, -2});
  CHECK(all.tensors[1].second.shape() == Shape{});
  CHECK(values(1) == std::vector<double>{-7});
  CHECK(values(3) == std::vector<double>{-1, 0, 2147483647});
  CHECK(values(4) == std::vector<double>{1, -0.5});
  CHECK(all.tensors[5].second.dtype() == DType::bf16);
  CHECK(values(5) == std::vector<double>{1, -2});
  CHECK(values(6) == std::vector<double>{0, 128, 255});
  CHECK(values(7) == std::vector<double>{1, 0, 0, 1});
  CHECK(read_safetensors_header((corpus / "out_of_order").string()).entries[0].name == "b");
  for (const auto& entry : fs::directory_iterator(corpus)) {
    const std::string name = entry.path().filename().string();
    CAPTURE(name);
    if (name.starts_with("bad_"))
      CHECK_THROWS_AS(read_safetensors(entry.path().string()), ValueError);
    else
      CHECK_NOTHROW(read_safetensors(entry.path().string()));
  }
}
