// Errors: message formatting for frugal::Error (see error.h).
#include "core/error.h"

#include <cstdio>
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

namespace {

// The length of the UTF-8 sequence at `text[i]` and its code point, or 0 when it is not one.
std::size_t utf8_sequence(std::string_view text, std::size_t i, char32_t& code) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char first = byte(i);
  const std::size_t length = first >= 0xC2 && first <= 0xDF   ? 2
                             : first >= 0xE0 && first <= 0xEF ? 3
                             : first >= 0xF0 && first <= 0xF4 ? 4
                                                              : 0;  // 0x80-0xC1 and 0xF5-0xFF never lead
  if (length == 0 || i + length > text.size()) return 0;
  code = first & (0x7F >> length);
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  const char32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < smallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;  // overlong, surrogate
  return length;
}

// Code points a terminal acts on, or that reorder the text around them.
bool is_control(char32_t code) {
  return code < 0x20 || (code >= 0x7F && code <= 0x9F) || (code >= 0x202A && code <= 0x202E) ||
         (code >= 0x2066 && code <= 0x2069) || code == 0x200E || code == 0x200F;
}

}  // namespace

std::string printable(std::string_view text, std::size_t max_chars) {
  std::string out;
  char escaped[16];
  for (std::size_t i = 0; i < text.size() && out.size() < max_chars;) {
    char32_t code = 0;
    const std::size_t length = static_cast<unsigned char>(text[i]) < 0x80 ? 1 : utf8_sequence(text, i, code);
    if (length == 1) code = static_cast<unsigned char>(text[i]);
    if (length == 0) {
      std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned char>(text[i]));
      out += escaped, ++i;
    } else if (is_control(code)) {
      std::snprintf(escaped, sizeof escaped, code < 0x100 ? "\\x%02x" : "\\u{%04x}", static_cast<unsigned>(code));
      out += escaped, i += length;
    } else {
      out.append(text.substr(i, length)), i += length;
    }
    if (out.size() >= max_chars && i < text.size()) out += "...";
  }
  return out;
}

}  // namespace frugal
