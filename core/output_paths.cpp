// check_output_paths, resolve_output_path (see output_paths.h).
#include "core/output_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "core/error.h"

namespace frugal {

namespace fs = std::filesystem;

namespace {

constexpr int kMaxLinks = 40;  // Linux's own bound on links followed in one path lookup (ELOOP)

std::optional<struct stat> stat_of(const std::string& path, bool follow_links) {
  struct stat s {};
  const int result = follow_links ? ::stat(path.c_str(), &s) : ::lstat(path.c_str(), &s);
  if (result != 0) return std::nullopt;
  return s;
}

std::string kind_of(mode_t mode) {
  return S_ISDIR(mode) ? "a folder" : S_ISLNK(mode) ? "a symbolic link" : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket" : (S_ISCHR(mode) || S_ISBLK(mode)) ? "a device"
         : S_ISREG(mode) ? "a regular file" : "not a regular file";
}

// The absolute, link-free spelling of `path`, whose last part may not exist yet: two spellings of
// one new file ("x.json", "./x.json") compare equal.
std::string canonical_name(const std::string& path) {
  std::error_code error;
  const fs::path canonical = fs::weakly_canonical(fs::absolute(path), error);
  return error ? path : canonical.string();
}

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// One output, resolved, checked on its own: what it is, and its folder.
struct CheckedOutput {
  NamedPath given;
  std::string target;                 // the file the write replaces (links followed)
  std::optional<struct stat> exists;  // the target, when it exists
};

CheckedOutput check_one(const NamedPath& output) {
  const std::string where = output.flag + " " + output.path;
  CheckedOutput checked{output, "", std::nullopt};
  try {
    checked.target = resolve_output_path(output.path);
  } catch (const ValueError& e) {  // a loop of links: said with the flag
    FRUGAL_THROW(ValueError, output.flag, " ", e.message());
  }
  const std::string via = checked.target == output.path ? "" : " (the link's target " + checked.target + ")";
  checked.exists = stat_of(checked.target, /*follow_links=*/false);
  if (checked.exists)
    FRUGAL_CHECK_VALUE(S_ISREG(checked.exists->st_mode), where, ": is ", kind_of(checked.exists->st_mode), via,
                       "; frugal writes a new file or replaces a regular one, nothing else");
  const std::string folder = folder_of(checked.target);
  const auto folder_stat = stat_of(folder, /*follow_links=*/true);
  FRUGAL_CHECK_VALUE(folder_stat.has_value(), where, ": its folder ", folder, " does not exist");
  FRUGAL_CHECK_VALUE(S_ISDIR(folder_stat->st_mode), where, ": ", folder, " is not a folder");
  FRUGAL_CHECK_VALUE(::access(folder.c_str(), W_OK | X_OK) == 0, where, ": its folder ", folder,
                     " is not writable");
  return checked;
}

// Linux's fs.protected_symlinks, which a rename onto the link's target would bypass: a link in a
// sticky, world-writable folder (/tmp) is followed only when its owner is this user or the folder's,
// so another user's link planted in /tmp cannot aim this process's write at this user's files.
void check_link_may_be_followed(const std::string& link, const struct stat& link_stat) {
  const auto folder = stat_of(folder_of(link), /*follow_links=*/true);
  if (!folder || !(folder->st_mode & S_ISVTX) || !(folder->st_mode & S_IWOTH)) return;
  FRUGAL_CHECK_VALUE(link_stat.st_uid == ::geteuid() || link_stat.st_uid == folder->st_uid, link,
                     ": a symbolic link of another user in a shared folder (sticky, writable by all); not followed");
}

// Whether the file `output` lies in a subfolder of the folder `input` (both canonical): where an
// image folder keeps its images (ROOT/CLASS/IMAGE). A file directly in the folder (a checkpoint kept
// beside the data) is not the data's.
bool in_subfolder(const std::string& output, const std::string& folder) {
  const std::string prefix = folder.ends_with('/') ? folder : folder + "/";
  return output.starts_with(prefix) && output.find('/', prefix.size()) != std::string::npos;
}

void check_against_input(const CheckedOutput& output, const NamedPath& input) {
  const auto read = stat_of(input.path, /*follow_links=*/true);
  if (!read) return;
  const std::string where = output.given.flag + " " + output.given.path;
  const std::string named = input.flag.empty() ? input.path : input.flag + " " + input.path;
  FRUGAL_CHECK_VALUE(!output.exists || !same_file(*read, *output.exists), where, ": is the input ", named,
                     " (the same file); writing it would destroy what is read");
  // Canonical and as spelled: ROOT/cat may be a link to a folder elsewhere, which the image folder
  // follows, so ROOT/cat/1.png is among its images although its canonical path is not under ROOT.
  const auto lexical = [](const std::string& path) { return fs::absolute(path).lexically_normal().string(); };
  if (S_ISDIR(read->st_mode))
    FRUGAL_CHECK_VALUE(!in_subfolder(canonical_name(output.target), canonical_name(input.path)) &&
                           !in_subfolder(lexical(output.given.path), lexical(input.path)) &&
                           !in_subfolder(lexical(output.target), lexical(input.path)),
                       where,
                       ": is inside the input folder ", named, " (where its images are); a file there would "
                       "destroy or join what is read");
}

}  // namespace

std::string folder_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

std::string file_kind(const std::string& path) {
  const auto s = stat_of(path, /*follow_links=*/false);
  return s ? kind_of(s->st_mode) : "";
}

std::string resolve_output_path(const std::string& path) {
  std::string target = path;
  for (int links = 0;; ++links) {
    const auto s = stat_of(target, /*follow_links=*/false);
    if (!s || !S_ISLNK(s->st_mode)) return target;
    FRUGAL_CHECK_VALUE(links < kMaxLinks, path, ": more than ", kMaxLinks, " symbolic links in a row (a loop?)");
    check_link_may_be_followed(target, *s);
    std::error_code error;
    const fs::path next = fs::read_symlink(target, error);
    FRUGAL_CHECK_VALUE(!error, path, ": cannot read the symbolic link ", target, ": ", error.message());
    target = next.is_absolute() ? next.string() : (fs::path(target).parent_path() / next).string();
  }
}

void check_output_paths(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  std::vector<CheckedOutput> checked;
  for (const NamedPath& output : outputs) {
    if (output.path.empty()) continue;
    CheckedOutput next = check_one(output);
    for (const NamedPath& input : inputs)
      if (!input.path.empty()) check_against_input(next, input);
    for (const CheckedOutput& earlier : checked) {
      const bool same = (next.exists && earlier.exists && same_file(*next.exists, *earlier.exists)) ||
                        canonical_name(next.target) == canonical_name(earlier.target);
      FRUGAL_CHECK_VALUE(!same, output.flag, " ", output.path, ": is also ", earlier.given.flag, " ",
                         earlier.given.path, "; each output needs a file of its own");
    }
    checked.push_back(std::move(next));
  }
}

}  // namespace frugal
