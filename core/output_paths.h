// The one way a frugal command decides that it may write a file: every output path of a command is
// checked before any work starts, so a run never trains for an hour and then fails to save, and
// never replaces what it must not.
//
//   check_output_paths({{"--save", save}, {"--json", json}}, {{"--data", data}, {"--resume", resume}});
//
// An output may be a new name in an existing, writable folder, or an existing regular file. It may
// not be a folder, a device (as root, rename() would replace /dev/null), a FIFO or a socket; not the
// same file as another output of the same command (the later write would replace the earlier); not
// the same file as an input, nor in a subfolder of an input folder (an image folder's images are
// ROOT/CLASS/IMAGE, and a new file there would join them; a file directly in ROOT, such as a
// checkpoint, may be written).
// A symbolic link is followed: the file it names (through a chain of links) is what is checked and
// what AtomicFile replaces, so the link stays a link and its target gets the new bytes.
// The write itself is AtomicFile's (core/mapped_file.h): temporary file, fsync, rename, fsync of
// the folder.
// Not here: writing (AtomicFile), which inputs a command has (each command names its own).
#pragma once

#include <string>
#include <vector>

namespace frugal {

// A path as the user gave it, with the flag that gave it ("--save"; "" for a positional argument),
// so an error can name both.
struct NamedPath {
  std::string flag;
  std::string path;
};

// ValueError "FLAG PATH: what is wrong" (one line) for the first output that may not be written:
// see the top of this file. Empty paths (a flag not given) are skipped, in both lists. An input
// that does not exist is skipped too: opening it reports that better.
void check_output_paths(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

// The file a write to `path` replaces: `path` itself, or when it is a symbolic link, the file the
// chain of links ends at (a relative link read from the link's folder). ValueError for a chain of
// more than 40 links (a loop).
std::string resolve_output_path(const std::string& path);

// The folder a write to `path` creates its file in: its parent, "." for a bare name.
std::string folder_of(const std::string& path);

// "a folder", "a device", "a FIFO", "a socket", "a symbolic link", "a regular file": what `path`
// is, for an error; "" when it does not exist.
std::string file_kind(const std::string& path);

}  // namespace frugal
