// TempDir: a fresh folder for one test case (mkdtemp under the system's temporary directory),
// removed with everything in it when the case ends. `dir / "name"` is the path of a file inside it.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <string>

namespace frugal::test {

struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "frugal-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

}  // namespace frugal::test
