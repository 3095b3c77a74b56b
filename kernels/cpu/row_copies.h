// FRUGAL_NO_MEMCPY_CALLS: the attribute for CPU functions that copy many short rows (the depthwise
// kernels' padded planes, the 1x1 convolution's gathered samples), so their copy loops stay loops.
// Not here: the copies themselves.
#pragma once

// Note [Row copies stay loops]
// The rows copied in and out of scratch are short (1 to 34 floats) and many. GCC turns a plain copy
// loop (or std::copy) into a call to memmove, whose call and size dispatch cost more than the copy
// and took most of the fast path's time on small planes; a helper function with the attribute below
// would itself be a call. So the functions that copy rows carry the attribute that keeps their loops
// inline, as glibc's own `inhibit_loop_to_libcall` does. Clang (the fuzzing build) has no such
// attribute and keeps its calls.
#if defined(__clang__)
#define FRUGAL_NO_MEMCPY_CALLS
#else
#define FRUGAL_NO_MEMCPY_CALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
