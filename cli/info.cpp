// `frugal info`: version, build options, CUDA status with its reason, devices, library versions,
// CPU threads, allocator settings. Everything is gathered once into JSON; the text form is printed from that.
#include "cli/info.h"

#include <omp.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "dist/library_versions.h"
#include "kernels/cpu_runtime.h"
#include "kernels/library_versions.h"
#include "frugal/build_info.h"

namespace frugal::cli {

using nlohmann::json;

int cpu_threads() { return omp_get_max_threads(); }

json collect_info() {
  const CudaStatus& status = cuda_status();
  json info;
  info["version"] = FRUGAL_VERSION_STRING;
  info["build"] = {{"type", FRUGAL_BUILD_TYPE},
                   {"cxx_compiler", FRUGAL_CXX_COMPILER},
                   {"cuda_compiled", status.compiled},
                   {"cuda_emulated", status.emulated},
                   {"cuda_compiler", status.compiled ? FRUGAL_CUDA_COMPILER : ""},
                   {"cuda_architectures", status.compiled ? FRUGAL_CUDA_ARCHITECTURES : ""},
                   {"sanitizers", std::string(FRUGAL_SANITIZE_ENABLED) == "ON"}};
  json cuda = {{"usable", status.usable}, {"device_count", status.device_count}, {"reason", status.reason}};
  if (status.compiled) {
    cuda["runtime_version"] = cuda_version_string(status.runtime_version);
    cuda["driver_version"] = status.driver_version ? cuda_version_string(status.driver_version) : "none";
    // Each library is asked by the layer that links it: cuBLAS and cuDNN by kernels/, NCCL by dist/.
    const auto version = [](const LibraryVersion& v) { return json{{"loaded", v.loaded}, {"built", v.built}}; };
    const KernelLibraryVersions kernel_libraries = kernel_library_versions();
    cuda["cublas"] = version(kernel_libraries.cublas);
    cuda["cudnn"] = version(kernel_libraries.cudnn);
    cuda["nccl"] = version(dist::nccl_version());
  }
  json devices = json::array();
  for (int i = 0; i < status.device_count; ++i) {
    const CudaDeviceInfo device = cuda_device_info(i);
    devices.push_back({{"index", i},
                       {"name", device.name},
                       {"compute_capability", std::to_string(device.compute_major) + "." + std::to_string(device.compute_minor)},
                       {"multiprocessors", device.multiprocessors},
                       {"peak_bandwidth_gb_per_s", device.peak_bandwidth_bytes_per_s / 1e9},
                       {"total_bytes", device.total_bytes},
                       {"free_bytes", device.free_bytes}});
  }
  cuda["devices"] = devices;
  info["cuda"] = cuda;
  info["cpu"] = {{"threads", cpu_threads()},
                 {"hardware_threads", std::thread::hardware_concurrency()},
                 {"openblas_core", blas_core()},
                 {"blas_threads", blas_threads()},  // 0: OpenMP's count (FRUGAL_BLAS_THREADS)
                 {"omp_wait_policy", std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "default"},
                 {"omp_spin_count", std::getenv("GOMP_SPINCOUNT") ? std::getenv("GOMP_SPINCOUNT") : "default"}};
  const CachingOptions allocator = CachingOptions::from_environment();
  info["allocator"] = {{"mode", allocator.bypass ? "direct" : "caching"},
                       {"expandable_segments", allocator.expandable_segments},
                       {"max_split_size", format_size(allocator.max_split_size)}};
  return info;
}

namespace {
std::string gib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}
}  // namespace

void print_info(const json& info) {
  const json& build = info["build"];
  const json& cuda = info["cuda"];
  std::cout << "frugal " << info["version"].get<std::string>() << "\n";
  std::cout << "build:      " << build["type"].get<std::string>() << ", " << build["cxx_compiler"].get<std::string>()
            << ", sanitizers " << (build["sanitizers"].get<bool>() ? "on" : "off") << "\n";
  if (build["cuda_emulated"].get<bool>()) {
    // No nvcc and no NVIDIA library: the CUDA sources built by the host compiler (docs/cuda-emulator.md).
    std::cout << "CUDA build: the emulated runtime (FRUGAL_CUDA=emulated): CUDA sources built by the host compiler, "
                 "kernels run in the emulator, cuda:N on the CPU\n";
    std::cout << "libraries:  none: cuBLAS, cuDNN and NCCL need a GPU; GEMM, convolution and batch norm run frugal's "
                 "own kernels, and --ddp across GPUs is unavailable\n";
  } else if (build["cuda_compiled"].get<bool>()) {
    std::cout << "CUDA build: compiled in (nvcc " << build["cuda_compiler"].get<std::string>() << ", architectures "
              << build["cuda_architectures"].get<std::string>() << ")\n";
    std::cout << "CUDA:       runtime " << cuda["runtime_version"].get<std::string>() << ", driver "
              << cuda["driver_version"].get<std::string>() << "\n";
    const auto library = [&](const char* name, const char* key) {
      return std::string(name) + " " + cuda[key]["loaded"].get<std::string>() + " (built against " +
             cuda[key]["built"].get<std::string>() + ")";
    };
    std::cout << "libraries:  " << library("cuBLAS", "cublas") << ", " << library("cuDNN", "cudnn") << ", "
              << library("NCCL", "nccl") << "\n";
  } else {
    std::cout << "CUDA build: not compiled in (FRUGAL_CUDA=OFF)\n";
  }
  if (cuda["usable"].get<bool>()) {
    std::cout << "devices:    " << cuda["device_count"].get<int>() << " usable\n";
    for (const json& device : cuda["devices"])
      std::cout << "  cuda:" << device["index"].get<int>() << "    " << device["name"].get<std::string>() << ", compute "
                << device["compute_capability"].get<std::string>() << ", " << device["multiprocessors"].get<int>()
                << " SMs, " << gib(device["free_bytes"].get<std::uint64_t>()) << " free of "
                << gib(device["total_bytes"].get<std::uint64_t>()) << "\n";
  } else {
    std::cout << "devices:    none usable (" << cuda["reason"].get<std::string>() << ")\n";
  }
  std::cout << "CPU:        " << info["cpu"]["threads"].get<int>() << " threads for kernels ("
            << info["cpu"]["hardware_threads"].get<unsigned>() << " hardware threads)";
  const std::string core = info["cpu"]["openblas_core"].get<std::string>();
  const int blas = info["cpu"]["blas_threads"].get<int>();
  const std::string blas_text = blas == 0 ? "OpenMP's" : std::to_string(blas);
  std::cout << (core.empty() ? std::string(", no OpenBLAS")
                             : ", OpenBLAS kernels " + core + ", threads per GEMM " + blas_text + " (FRUGAL_BLAS_THREADS)")
            << ", OpenMP wait policy " << info["cpu"]["omp_wait_policy"].get<std::string>() << ", spin count "
            << info["cpu"]["omp_spin_count"].get<std::string>() << " (OMP_WAIT_POLICY, GOMP_SPINCOUNT)\n";
  const json& allocator = info["allocator"];
  std::cout << "allocator:  " << allocator["mode"].get<std::string>() << ", expandable segments "
            << (allocator["expandable_segments"].get<bool>() ? "on" : "off") << ", max_split "
            << allocator["max_split_size"].get<std::string>() << " (FRUGAL_ALLOC, FRUGAL_ALLOC_CONF)\n";
}

InfoCommand::InfoCommand(CLI::App& app)
    : Subcommand(app.add_subcommand("info", "Print version, build options, CUDA status, devices and library versions")) {
  command_->add_flag("--json", json_, "Print the same facts as one JSON object");
}

int InfoCommand::run() const {
  const json facts = collect_info();
  if (json_)
    std::cout << facts.dump(2) << "\n";
  else
    print_info(facts);
  return 0;
}

}  // namespace frugal::cli
