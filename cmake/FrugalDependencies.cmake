# Finds frugal's dependencies. All come from Debian packages (scripts/common.sh installs them);
# nothing is downloaded or vendored. On the lent GPU machine, where apt cannot reach a mirror,
# scripts/gpu-prepare.sh stages the header-only packages under .gpu-deps/ and passes that folder in
# CMAKE_PREFIX_PATH; cuDNN and NCCL there come from Python wheels, found through CUDNN_ROOT/NCCL_ROOT.

find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.10 CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(ZLIB REQUIRED)  # data/: gzipped IDX files, the shard header's CRC-32
# MPI's C API (Debian libopenmpi-dev): the communicator of CPU ranks, dist/mpi_communicator.h, and
# what starts ranks for data parallelism. Optional (FRUGAL_MPI, ON when found): the lent GPU machine
# has no OpenMPI, and a build without it is one process whose --ddp says so (dist/mpi_absent.cpp).
find_package(MPI COMPONENTS C)
option(FRUGAL_MPI "Build the MPI communicator and data parallelism's rank tests (needs OpenMPI)" ${MPI_C_FOUND})
if(FRUGAL_MPI AND NOT MPI_C_FOUND)
  message(FATAL_ERROR "frugal: FRUGAL_MPI=ON but MPI's C API was not found (Debian: libopenmpi-dev)")
endif()
# stb (Debian libstb-dev), used header-only: data/image_folder.cpp compiles stb_image's implementation
# for the formats it reads, the tests stb_image_write's. Debian's prebuilt libstb.so is not linked.
find_path(FRUGAL_STB_INCLUDE_DIR stb/stb_image.h)
if(NOT FRUGAL_STB_INCLUDE_DIR)
  message(FATAL_ERROR "frugal: stb/stb_image.h not found (Debian: libstb-dev)")
endif()
add_library(frugal::stb INTERFACE IMPORTED)
set_target_properties(frugal::stb PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${FRUGAL_STB_INCLUDE_DIR}")
if(FRUGAL_OPENBLAS)  # the CPU's library GEMM
  # The OpenMP build of OpenBLAS, not the default pthreads one: frugal's CPU kernels are OpenMP loops,
  # and two thread pools on the same cores fight (libgomp's idle threads spin while OpenBLAS's work:
  # an im2col convolution ran 3x slower on 2 cores, measured with samples/03_convolution). Debian
  # installs each build in its own folder (package libopenblas-openmp-dev).
  unset(OpenBLAS_DIR CACHE)  # build folders configured before this choice cached the pthreads build
  find_package(OpenBLAS CONFIG REQUIRED NO_DEFAULT_PATH
               PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp/cmake/openblas)
  if(NOT TARGET OpenBLAS::OpenBLAS)  # Debian's config sets variables only
    add_library(OpenBLAS::OpenBLAS INTERFACE IMPORTED)
    set_target_properties(OpenBLAS::OpenBLAS PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${OpenBLAS_INCLUDE_DIRS}"
                                                        INTERFACE_LINK_LIBRARIES "${OpenBLAS_LIBRARIES}")
  endif()
endif()
if(FRUGAL_EMULATOR)  # fibers for the CUDA emulator (emu/)
  find_package(Boost 1.74 CONFIG COMPONENTS context)
  if(NOT Boost_FOUND)
    message(FATAL_ERROR "frugal: Boost.Context not found (Debian: libboost-context-dev). The CUDA emulator "
                        "needs it; install it, or configure with -DFRUGAL_EMULATOR=OFF to build without the "
                        "emulator, its tests and sample 00.")
  endif()
endif()
if(FRUGAL_BUILD_TESTS)
  find_package(doctest CONFIG REQUIRED)
endif()

# cuDNN and NCCL ship no CMake config of their own. Look in <ROOT>/{include,lib} where ROOT is
# CUDNN_ROOT / NCCL_ROOT (CMake variable or environment), then beside the CUDA toolkit. Wheels ship
# only versioned sonames (libcudnn.so.9), so those names are accepted too.
function(frugal_find_cuda_library name header libnames)
  string(TOUPPER ${name} upper)
  set(hints ${${upper}_ROOT} $ENV{${upper}_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
  find_path(${upper}_INCLUDE_DIR ${header} HINTS ${hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(${upper}_LIBRARY NAMES ${libnames} HINTS ${hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  if(NOT ${upper}_INCLUDE_DIR OR NOT ${upper}_LIBRARY)
    message(FATAL_ERROR "frugal: ${name} not found (header ${header}, library ${libnames}). "
                        "Set ${upper}_ROOT to its install folder, or configure with -DFRUGAL_CUDA=OFF.")
  endif()
  add_library(frugal::${name} SHARED IMPORTED GLOBAL)
  set_target_properties(frugal::${name} PROPERTIES
    IMPORTED_LOCATION ${${upper}_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${${upper}_INCLUDE_DIR})
  message(STATUS "frugal: ${name}: ${${upper}_LIBRARY}")
endfunction()

macro(frugal_find_cuda_libraries)
  frugal_find_cuda_library(cudnn cudnn.h "cudnn;libcudnn.so.9")
  frugal_find_cuda_library(nccl nccl.h "nccl;libnccl.so.2")
endmacro()
