// Which OpenBLAS kernels this process runs, and the remedy when OpenBLAS picked slow ones.
//
// Note [OpenBLAS core fallback]
// Debian's OpenBLAS (0.3.21) is built for every x86 CPU and chooses its kernels when the library
// loads, before main, by the CPU's model number. A CPU newer than the release (a Sapphire Rapids
// Xeon reads as plain "Intel Xeon Processor") is not in its table, and it falls back to "Prescott":
// SSE3 kernels, which run MobileNetV2's training step at half the speed of the AVX-512 "SkylakeX"
// kernels on the same CPU (measured: 150 against 310 images/s on 2 cores). Only the environment
// variable OPENBLAS_CORETYPE, read at load time, overrides the choice; so a program that wants the
// right kernels sets it and executes itself again, once, first thing in main.
// Not here: the GEMM calls themselves (kernels/cpu/gemm.cpp).
#pragma once

#include <optional>
#include <string>

namespace frugal {

// OpenBLAS's name for the kernels it runs ("SkylakeX", "Haswell", "Prescott", ...); "" in a build
// without OpenBLAS.
std::string blas_core();

// The core OpenBLAS should run on this CPU when it fell back to "Prescott" although the CPU has
// AVX-512 ("SkylakeX") or AVX2 with FMA ("Haswell"); nullopt when its own choice stands.
std::optional<std::string> better_blas_core();

// First thing in main: when better_blas_core() names a core and OPENBLAS_CORETYPE is unset, sets it
// and executes this program again (/proc/self/exe) with the same arguments, which does not return.
// Returns when there is nothing to do, or if the exec fails (the program then runs on the slow
// kernels, correctly). To keep OpenBLAS's own choice, set OPENBLAS_CORETYPE yourself.
void use_best_blas_core(char** argv);

}  // namespace frugal
