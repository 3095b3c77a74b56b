// Errors: message formatting for frugal::Error (see error.h).
#include "core/error.h"

#include <cstring>

namespace frugal {

namespace {
std::string format(const std::string& message, const char* file, int line, const std::string& expression) {
  std::ostringstream out;
  out << file << ':' << line << ": " << message;
  if (!expression.empty()) out << " (check failed: " << expression << ')';
  return out.str();
}
}  // namespace

Error::Error(std::string message, const char* file, int line, std::string expression)
    : std::runtime_error(format(message, file, line, expression)),
      message_(std::move(message)),
      file_(file),
      line_(line),
      expression_(std::move(expression)) {}

namespace detail {
const char* short_path(const char* file) {
  // __FILE__ is absolute in CMake builds; keep the part from the top-level source folder on.
  static constexpr const char* kTopLevelFolders[] = {"/core/", "/emu/", "/kernels/", "/nn/", "/data/", "/dist/",
                                                     "/models/", "/cli/", "/bench/", "/tests/", "/samples/"};
  const char* best = nullptr;
  for (const char* folder : kTopLevelFolders) {
    const char* found = std::strstr(file, folder);
    if (found && (!best || found > best)) best = found;
  }
  return best ? best + 1 : file;
}
}  // namespace detail

}  // namespace frugal
