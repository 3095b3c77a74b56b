// Small files for tests: bytes written (folders created) and read back, gzip-compressed copies, and
// IDX files of u8 elements. Header-only, shared by the suites that make fixture files on the fly.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace frugal::test {

using Bytes = std::vector<std::uint8_t>;

inline void write_bytes(const std::string& path, const Bytes& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::ssize(bytes));
}

inline Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

inline void write_gz(const std::string& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

// An IDX file of u8 elements: magic 0x0000 08 NDIMS, the dims big-endian, then the values.
inline Bytes idx_u8(const std::vector<std::uint32_t>& dims, const Bytes& values) {
  Bytes bytes = {0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (const std::uint32_t dim : dims)
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<std::uint8_t>(dim >> shift));
  bytes.insert(bytes.end(), values.begin(), values.end());
  return bytes;
}

}  // namespace frugal::test
