// Two settings of the CPU runtime libraries that they read from the environment when they load,
// before main, and that frugal therefore sets by executing itself again, once, first thing in main.
//
// Note [OpenBLAS core fallback]
// Debian's OpenBLAS (0.3.21) is built for every x86 CPU and chooses its kernels when the library
// loads, by the CPU's model number. A CPU newer than the release (a Sapphire Rapids Xeon reads as
// plain "Intel Xeon Processor") is not in its table, and it falls back to "Prescott": SSE3 kernels,
// which run MobileNetV2's training step at half the speed of the AVX-512 "SkylakeX" kernels on the
// same CPU (measured: 150 against 310 images/s on 2 cores). Only OPENBLAS_CORETYPE overrides it.
//
// Note [OpenMP threads spin briefly, then sleep]
// GNU OpenMP's threads spin between parallel regions by default (OMP_WAIT_POLICY unset: 300,000
// iterations of `pause`, milliseconds), which pays on a machine whose cores they own. frugal's are
// shared: the data loader's threads run beside the kernels, and so do other programs (a build, a
// test running alongside), and threads spinning that long take the cores the others need: `frugal
// train` of the small CNN took 103 s against 3.2 s with OMP_WAIT_POLICY=passive on a busy 2-core
// machine. Waiting passively (no spinning at all) costs a futex sleep and wake-up per parallel
// region instead, and a forward pass of MobileNetV2 has hundreds of regions a few microseconds
// apart: its eval forward ran no faster on 2 threads than on 1 (2016 and 2077 img/s, batch 64).
// So frugal sets GOMP_SPINCOUNT to about kSpinMicroseconds of spinning, timed on this CPU at start
// (a `pause` takes 11 ns on one Xeon and 40 on another): long enough to bridge the serial gap
// between two regions of one layer or the next, short enough that an idle wait soon sleeps (and
// GNU OpenMP spins only 100 iterations when it has more threads than cores). Measured on 2 cores,
// 2026-12-05 (docs/benchmarks.md, "The speed of `frugal train` on the CPU"): MobileNetV2's eval
// forward 1993 -> 3394 img/s, its training step 562 -> 791, and the small CNN's busy-machine run
// 8.5 s passive against 3.3-5.1 s spinning briefly (51.6 s with GNU OpenMP's default).
//
// Note [OpenBLAS threads and bits]
// OpenBLAS threads a large GEMM itself when frugal calls it outside a parallel region of its own.
// With its SkylakeX and Sandybridge kernels a product has the same bits on any number of threads;
// with its AVX2 kernels (Haswell, Zen) it does not (measured with Debian's 0.3.21 on an AMD EPYC:
// 6 of 7 shapes of MobileNetV2's layers differed between 1 and 2 threads). frugal's own kernels split
// their work by shape alone, so on such a CPU a training step depends on the thread count only
// through OpenBLAS, and set_blas_threads(1) makes it the same bits on any thread count, with GEMMs
// on one core. (openblas_set_num_threads cannot: Debian's OpenMP build of OpenBLAS takes OpenMP's
// thread count at every call, so frugal's GEMM lowers that count around the call instead.) A whole
// run sets it with the environment variable FRUGAL_BLAS_THREADS=1, which `frugal info` shows.
//
// Not here: the GEMM calls (kernels/cpu/gemm.cpp), the parallel loops (core/cpu/parallel.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace frugal {

// OpenBLAS's name for the kernels it runs ("SkylakeX", "Haswell", "Prescott", ...); "" in a build
// without OpenBLAS.
std::string blas_core();

// The core OpenBLAS should run on this CPU when it fell back to "Prescott" although the CPU has
// AVX-512 ("SkylakeX") or AVX2 with FMA ("Haswell"); nullopt when its own choice stands.
std::optional<std::string> better_blas_core();

// At most how many threads OpenBLAS may take for one GEMM frugal calls outside its own parallel
// regions: 0 for OpenMP's thread count, as OpenBLAS chooses itself. For every thread of the process.
// The default is FRUGAL_BLAS_THREADS for a whole run, else 0; the variable is read at the first call
// (the first GEMM), where a value that is not a whole number of threads is a ValueError, not a silent
// default. set_blas_threads: ValueError below 0.
int blas_threads();
void set_blas_threads(int threads);

// How long an OpenMP thread spins for work before it sleeps (Note [OpenMP threads spin briefly,
// then sleep]).
constexpr double kSpinMicroseconds = 100.0;

// GOMP_SPINCOUNT for about `microseconds` of spinning on this CPU: iterations of `pause`, timed here
// (the fastest of a few short runs, so a preempted run does not count); at least 1000.
long long spin_count_for(double microseconds);

// First thing in main: sets GOMP_SPINCOUNT=spin_count_for(kSpinMicroseconds) where neither it nor
// OMP_WAIT_POLICY is set, and OPENBLAS_CORETYPE=better_blas_core() where it is unset (and a better
// core exists), and if it set either, executes this program again
// (/proc/self/exe) with the same arguments, which does not return. Returns when there is nothing to
// do, or if the exec fails (the program then runs with the libraries' own choices, correctly).
// A variable you set yourself is left alone.
void configure_cpu_runtime(char** argv);

// The environment ("NAME=value" each) for a program frugal starts that is not frugal, such as a
// benchmark's PyTorch peer: the process's own, without the variables configure_cpu_runtime set for
// frugal. Its wait for OpenMP work is frugal's choice for sharing cores (Note [OpenMP threads spin
// briefly, then sleep]); a peer runs as its users run it (the passive waiting frugal once set halved
// PyTorch 2.15's training speed: 384 against 733 images/s for MobileNetV2, batch 64, 2 threads,
// 2026-12-04).
std::vector<std::string> user_environment();

}  // namespace frugal
