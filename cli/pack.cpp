// `frugal pack` (see pack.h): --out is checked, the options become a data::Dataset, whose samples
// are streamed into a ShardWriter in index order. SIGHUP, SIGINT, SIGQUIT and SIGTERM are caught for
// the whole command (reading the input too), so the loop can stop and report; the exit code is then
// 128 + the signal, as a shell reports a command a signal stopped. (A signal nobody can catch,
// SIGKILL, leaves nothing either: the shard is written to a file with no name until it is complete.)
#include "cli/pack.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "cli/interrupt.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/output_paths.h"
#include "data/cifar.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/mapped_file.h"
#include "data/shard.h"

namespace frugal::cli {

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
// --out, checked before any work (core/output_paths.h): a new name or a regular file that is none
// of the inputs; a symbolic link's target is what gets replaced.
void check_out(const std::string& out, const std::vector<std::string>& inputs) {
  std::vector<NamedPath> named;
  for (const std::string& input : inputs) named.push_back({"", input});
  check_output_paths({{"--out", out}}, named);
}

// A ValueError unless `option` was left out or applies to this --from.
void check_applies(const CLI::App& command, const char* option, bool applies, const std::string& from) {
  FRUGAL_CHECK_VALUE(applies || command.count(option) == 0, option, " does not apply to --from ", from);
}

}  // namespace

std::pair<std::int64_t, std::int64_t> parse_image_size(const std::string& text, const char* option) {
  const auto x = text.find('x');
  std::int64_t height = 0, width = 0;
  const auto parse = [](std::string_view digits, std::int64_t& value) {
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    return error == std::errc() && end == digits.data() + digits.size() && value > 0;
  };
  const std::string_view view = text;
  FRUGAL_CHECK_VALUE(x != std::string::npos && parse(view.substr(0, x), height) && parse(view.substr(x + 1), width),
                     option, ": expected HEIGHTxWIDTH with positive integers (e.g. 32x32), got '", text, "'");
  std::int64_t pixels = 0;
  FRUGAL_CHECK_VALUE(!__builtin_mul_overflow(height, width, &pixels) && pixels <= data::kMaxImagePixels, option, ": ",
                     text, " is more than the ", data::kMaxImagePixels, " pixels (8192x8192) an image may have");
  return {height, width};
}

PackCommand::PackCommand(CLI::App& app)
    : Subcommand(app.add_subcommand("pack", "Pack a dataset (IDX files, CIFAR batches, an image folder) into one shard file")) {
  command_->footer("Examples:\n"
                   "  frugal pack --from idx --images IMAGES --labels LABELS --out OUT [--cache-dir DIR]\n"
                   "  frugal pack --from cifar10 --out OUT data_batch_1.bin data_batch_2.bin ...\n"
                   "  frugal pack --from cifar100 [--label fine|coarse] --out OUT train.bin\n"
                   "  frugal pack --from folder --size 32x32 --out OUT DIR   (DIR/CLASS/IMAGE.png|jpg|jpeg|bmp)\n"
                   "The shard appears under OUT only once complete: an error or Ctrl-C leaves nothing there.");
  command_->add_option("--from", from_, "Input format: idx, cifar10, cifar100 or folder")
      ->required()
      ->check(CLI::IsMember({"idx", "cifar10", "cifar100", "folder"}));
  command_->add_option("--out", out_, "The shard file to write (appears only once complete)")
      ->required()
      ->check(not_empty());
  command_->add_option("inputs", inputs_, "CIFAR batch files (--from cifar10|cifar100) or the image folder (--from folder)");
  command_->add_option("--images", images_, "--from idx: the images file (N, H, W) u8, plain or .gz");
  command_->add_option("--labels", labels_, "--from idx: the labels file (N) u8, plain or .gz");
  command_->add_option("--cache-dir", cache_dir_, "--from idx: where .gz files are decompressed (default ~/.cache/frugal)");
  command_->add_option("--label", label_, "--from cifar100: which label to keep, fine (100 classes, default) or coarse (20)")
      ->check(CLI::IsMember({"fine", "coarse"}));
  command_->add_option("--size", size_, "--from folder: every image is resized to HEIGHTxWIDTH, e.g. 32x32");
}

int PackCommand::run() const {
  try {
    // From the start: building the dataset may decompress a .gz into the cache, and an interruption
    // there must not kill the process before the AtomicFile has removed its temporary file.
    InterruptScope catch_interrupts(/*restart_system_calls=*/false);
    const bool idx = from_ == "idx", cifar = from_.starts_with("cifar"), folder = from_ == "folder";
    check_applies(*command_, "--images", idx, from_);
    check_applies(*command_, "--labels", idx, from_);
    check_applies(*command_, "--cache-dir", idx, from_);
    check_applies(*command_, "--label", from_ == "cifar100", from_);
    check_applies(*command_, "--size", folder, from_);
    data::DatasetPtr dataset;
    if (idx) {
      FRUGAL_CHECK_VALUE(!images_.empty() && !labels_.empty(), "--from idx needs --images and --labels");
      FRUGAL_CHECK_VALUE(inputs_.empty(), "--from idx reads --images and --labels, not '", inputs_.front(), "'");
      check_output_paths({{"--out", out_}}, {{"--images", images_}, {"--labels", labels_}});
      dataset = std::make_shared<data::IdxDataset>(images_, labels_, cache_dir_);
    } else if (cifar) {
      FRUGAL_CHECK_VALUE(!inputs_.empty(), "--from ", from_, " needs one or more batch files");
      check_out(out_, inputs_);
      const data::CifarKind kind = from_ == "cifar10" ? data::CifarKind::cifar10
                                   : label_ == "fine" ? data::CifarKind::cifar100_fine
                                                      : data::CifarKind::cifar100_coarse;
      dataset = std::make_shared<data::CifarDataset>(inputs_, kind);
    } else {
      FRUGAL_CHECK_VALUE(inputs_.size() == 1, "--from folder needs one folder, got ", inputs_.size(), " inputs");
      FRUGAL_CHECK_VALUE(!size_.empty(), "--from folder needs --size HxW");
      const auto [height, width] = parse_image_size(size_, "--size");
      check_out(out_, inputs_);  // an existing file inside the folder may be one of its images
      dataset = std::make_shared<data::ImageFolder>(inputs_.front(), height, width);
    }
    if (interrupted_signal() != 0) {
      std::cerr << "frugal pack: interrupted while reading the input; nothing written to " << out_ << "\n";
      return interrupted_exit_code();
    }
    return write(*dataset);
  } catch (const ValueError& error) {
    return report(error, kExitUsage);
  } catch (const data::WriteError& error) {  // the output's failure (a full disk), not the input's
    return report(error, kExitError);
  } catch (const data::FileError& error) {
    return report(error, kExitUsage);
  }
}

int PackCommand::report(const Error& error, int exit_code) const {
  // An error while interrupted is the interruption's doing (a read cut short), not the input's.
  if (interrupted_signal() != 0) {
    std::cerr << "frugal pack: interrupted; nothing written to " << out_ << "\n";
    return interrupted_exit_code();
  }
  std::cerr << "frugal pack: " << (exit_code == kExitError ? "error: " : "") << error.message() << "\n";
  return exit_code;
}

int PackCommand::write(const data::Dataset& dataset) const {
  const auto start = std::chrono::steady_clock::now();
  std::int64_t records = 0;
  {
    data::ShardWriter writer(out_, dataset.sample_shape(), dataset.sample_dtype(), DType::i64, dataset.num_classes());
    for (; records < dataset.size() && interrupted_signal() == 0; ++records) {
      const data::Sample sample = dataset.get(records);
      writer.add(sample.input, sample.label);
    }
    if (interrupted_signal() != 0) {  // the writer's destructor removes its temporary file
      std::cerr << "frugal pack: interrupted after " << records << " of " << dataset.size() << " records; nothing written to "
                << out_ << "\n";
      return interrupted_exit_code();
    }
    writer.finish();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto bytes = static_cast<std::size_t>(std::filesystem::file_size(out_));
  std::cout << dataset.describe() << "\n"
            << "packed " << records << " records of " << shape_str(dataset.sample_shape()) << " "
            << dataset.sample_dtype() << " into " << out_ << ": " << format_size(bytes) << " in " << std::fixed
            << std::setprecision(2) << seconds << " s\n";
  return 0;
}

}  // namespace frugal::cli
