// 2-D convolution (see conv.h): shape checks, the choice between cuDNN and the native path, and the
// native path's plan, one sample and one group at a time:
//   forward          y[n, g]  = W[g] x col(x[n, g])                 (col = im2col, or x itself for 1x1)
//   backward input   dx[n, g] = col2im(W[g]^T x dy[n, g])
//   backward weight  dW[g]   += dy[n, g] x col(x[n, g])^T           (summed over samples with beta = 1)
// where W[g] is [C_out / groups, C_in / groups * KH * KW] and every product is a GEMM through
// kernels/gemm.h, written straight into the result. Depthwise convolutions skip GEMM for the direct
// kernels of kernels/conv_backends.h. On the meta device the paths allocate their buffers and skip
// their loops (Note [Convolutions on the meta device]).
#include "kernels/conv.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "core/cpu/parallel.h"
#include "core/cuda_status.h"
#include "core/dispatch.h"
#include "kernels/conv_backends.h"
#include "kernels/cpu/direct_gemm.h"
#include "kernels/cpu/octets.h"
#include "kernels/cpu/pointwise_weight_grad.h"
#include "kernels/cpu/row_copies.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "kernels/workspace.h"

namespace frugal {

std::string_view conv_impl_name(ConvImpl impl) { return impl == ConvImpl::native ? "native" : "cudnn"; }

ConvImpl parse_conv_impl(std::string_view name) {
  for (ConvImpl impl : {ConvImpl::native, ConvImpl::cudnn})
    if (conv_impl_name(impl) == name) return impl;
  FRUGAL_THROW(ValueError, "unknown convolution implementation '", name, "': expected native or cudnn");
}

namespace {
// The CUDA default, cudnn (native in a build without cuDNN, core/cuda_status.h), or FRUGAL_CONV_IMPL=native|cudnn for the whole run (a bad value is an
// error at the first convolution, not a silent default).
ConvImpl cuda_default() {
  const char* name = std::getenv("FRUGAL_CONV_IMPL");
  return name ? parse_conv_impl(name) : (kCudaLibraries ? ConvImpl::cudnn : ConvImpl::native);
}
// Unlimited, or FRUGAL_CONV_WORKSPACE_MB for the whole run.
std::size_t default_workspace_limit() {
  const char* mib = std::getenv("FRUGAL_CONV_WORKSPACE_MB");
  if (!mib) return std::numeric_limits<std::size_t>::max();
  char* end = nullptr;
  const unsigned long long value = std::strtoull(mib, &end, 10);
  FRUGAL_CHECK_VALUE(end != mib && *end == '\0', "FRUGAL_CONV_WORKSPACE_MB='", mib, "' is not a whole number of MiB");
  return static_cast<std::size_t>(value) << 20;
}
// Function-local statics, so the environment is read at the first convolution (where a bad value
// can be thrown to a caller) rather than during static initialisation.
std::array<ConvImpl, kNumDeviceTypes>& impls() {  // by DeviceType
  static std::array<ConvImpl, kNumDeviceTypes> impl = {ConvImpl::native, cuda_default(), ConvImpl::native};
  return impl;
}
std::size_t& workspace_limit() {
  static std::size_t limit = default_workspace_limit();
  return limit;
}
thread_local ConvDecision t_last_decision;
}  // namespace

void set_conv_impl(DeviceType device, ConvImpl impl) {
  FRUGAL_CHECK_VALUE(device == DeviceType::CUDA || impl == ConvImpl::native,
                     "set_conv_impl: the CPU has the native convolution only");
  impls()[static_cast<int>(device)] = impl;
}

ConvImpl conv_impl(DeviceType device) { return impls()[static_cast<int>(device)]; }
void set_conv_workspace_limit(std::size_t bytes) { workspace_limit() = bytes; }
std::size_t conv_workspace_limit() { return workspace_limit(); }
const ConvDecision& last_conv2d_decision() { return t_last_decision; }

namespace {

// A checked convolution: the batch, the channel split, and one group's geometry.
struct Problem {
  std::int64_t batch = 0, in_channels = 0, out_channels = 0, groups = 1;
  ConvGeometry g;  // channels = C_in / groups

  std::int64_t group_out() const { return out_channels / groups; }
  std::int64_t rows() const { return g.channels * g.taps(); }  // of im2col: the GEMMs' inner size K
  bool depthwise() const { return g.channels == 1; }           // each output channel reads one input channel
  ConvGeometry whole_sample() const {                          // what the depthwise kernels take
    ConvGeometry sample = g;
    sample.channels = in_channels;
    return sample;
  }
  bool pointwise() const {  // im2col would copy x unchanged: use x itself
    return g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
  }
  Shape output_shape() const { return {batch, out_channels, g.out_height, g.out_width}; }
};

Problem make_problem(const Shape& x, const Shape& w, const Conv2dOptions& o, const char* op) {
  const std::string shapes = "input " + shape_str(x) + ", weight " + shape_str(w);
  FRUGAL_CHECK_SHAPE(x.size() == 4 && w.size() == 4, op, ": expects a 4-D input [N, C, H, W] and a 4-D weight, got ",
                     shapes);
  FRUGAL_CHECK_VALUE(o.stride[0] > 0 && o.stride[1] > 0 && o.dilation[0] > 0 && o.dilation[1] > 0 && o.padding[0] >= 0 &&
                         o.padding[1] >= 0 && o.groups > 0,
                     op, ": stride and dilation must be positive, padding non-negative and groups positive (", shapes,
                     ", stride ", shape_str(o.stride), ", padding ", shape_str(o.padding), ", dilation ",
                     shape_str(o.dilation), ", groups ", o.groups, ")");
  FRUGAL_CHECK_SHAPE(x[0] >= 0 && x[1] > 0 && x[2] > 0 && x[3] > 0 && w[0] > 0 && w[1] > 0 && w[2] > 0 && w[3] > 0, op,
                     ": every size but the batch must be positive, got ", shapes);
  FRUGAL_CHECK_SHAPE(x[1] % o.groups == 0 && w[0] % o.groups == 0, op, ": groups = ", o.groups,
                     " must divide both the input channels and the output channels (", shapes, ")");
  FRUGAL_CHECK_SHAPE(w[1] * o.groups == x[1], op, ": the weight expects ", w[1] * o.groups, " input channels (",
                     w[1], " per group x ", o.groups, " groups), got ", shapes);
  for (int d = 0; d < 2; ++d) {
    const std::int64_t padded = x[2 + d] + 2 * o.padding[d], span = o.dilation[d] * (w[2 + d] - 1) + 1;
    FRUGAL_CHECK_SHAPE(span <= padded, op, ": the kernel spans ", span, " pixels (dilation included) but the padded input has ",
                       padded, " along ", d == 0 ? "H" : "W", " (", shapes, ")");
  }
  const ConvGeometry g{.channels = w[1], .height = x[2], .width = x[3],
                       .out_height = conv_output_size(x[2], w[2], o.stride[0], o.padding[0], o.dilation[0]),
                       .out_width = conv_output_size(x[3], w[3], o.stride[1], o.padding[1], o.dilation[1]),
                       .kernel_h = w[2], .kernel_w = w[3], .stride_h = o.stride[0], .stride_w = o.stride[1],
                       .pad_h = o.padding[0], .pad_w = o.padding[1], .dilation_h = o.dilation[0], .dilation_w = o.dilation[1]};
  const Problem p{.batch = x[0], .in_channels = x[1], .out_channels = w[0], .groups = o.groups, .g = g};
  return p;
}

void check_operands(const Tensor& a, const Tensor& b, const char* op) {
  FRUGAL_CHECK_VALUE(a.defined() && b.defined(), op, ": an operand is undefined");
  FRUGAL_CHECK_DTYPE(is_floating(a.dtype()), op, ": needs a floating dtype, got ", a.dtype());
  check_same_dtype(a, b, op);
  check_same_device(a, b, op);
}

// The native kernels of the tensors' device: the one switch by device of the native path.
struct NativeKernels {
  decltype(&cpu::im2col) im2col;
  decltype(&cpu::col2im) col2im;
  decltype(&cpu::depthwise_forward) depthwise_forward;
  decltype(&cpu::depthwise_backward_input) depthwise_backward_input;
  decltype(&cpu::depthwise_backward_weight) depthwise_backward_weight;
};

// A kernel of the same signature as F that does nothing: the meta device's.
template <typename F>
struct DoNothing;
template <typename... Args>
struct DoNothing<void (*)(Args...)> {
  static void run(Args...) {}
};

const NativeKernels& native_kernels(Device device, const char* op) {
  static const NativeKernels on_cpu{cpu::im2col, cpu::col2im, cpu::depthwise_forward, cpu::depthwise_backward_input,
                                    cpu::depthwise_backward_weight};
  static const NativeKernels on_meta{
      DoNothing<decltype(&cpu::im2col)>::run, DoNothing<decltype(&cpu::col2im)>::run,
      DoNothing<decltype(&cpu::depthwise_forward)>::run, DoNothing<decltype(&cpu::depthwise_backward_input)>::run,
      DoNothing<decltype(&cpu::depthwise_backward_weight)>::run};
  switch (device.type()) {
    case DeviceType::CPU: return on_cpu;
    case DeviceType::Meta: return on_meta;
    case DeviceType::CUDA: {
#if FRUGAL_WITH_CUDA
      static const NativeKernels on_cuda{cuda::im2col, cuda::col2im, cuda::depthwise_forward,
                                         cuda::depthwise_backward_input, cuda::depthwise_backward_weight};
      return on_cuda;
#else
      throw_no_cuda(op);
#endif
    }
  }
  throw_no_cuda(op);
}

bool use_cudnn(Device device) { return device.is_cuda() && conv_impl(DeviceType::CUDA) == ConvImpl::cudnn; }

// Slices of sample n, group g, as the GEMMs see them.
Tensor group_input(const Tensor& x, const Problem& p, std::int64_t n, std::int64_t g) {  // [C_in / groups, H * W]
  return x.select(0, n).narrow(0, g * p.g.channels, p.g.channels).view({p.g.channels, p.g.plane()});
}
Tensor group_output(const Tensor& y, const Problem& p, std::int64_t n, std::int64_t g) {  // [C_out / groups, OH * OW]
  return y.select(0, n).narrow(0, g * p.group_out(), p.group_out()).view({p.group_out(), p.g.out_plane()});
}
Tensor group_weight(const Tensor& w, const Problem& p, std::int64_t g) {  // [C_out / groups, K]
  return w.narrow(0, g * p.group_out(), p.group_out()).view({p.group_out(), p.rows()});
}

// The im2col buffer for one sample's group, from the allocator (tag `workspace`); none for 1x1.
Tensor make_columns(const Tensor& like, const Problem& p) {
  if (p.pointwise()) return Tensor();
  return empty_workspace({p.rows(), p.g.out_plane()}, {.dtype = like.dtype(), .device = like.device()});
}

// col(x[n, g]): x's own slice for 1x1 convolutions, otherwise im2col into `columns`.
Tensor columns_of(const NativeKernels& k, const Tensor& x, const Problem& p, std::int64_t n, std::int64_t g,
                  const Tensor& columns) {
  const Tensor slice = group_input(x, p, n, g);
  if (!columns.defined()) return slice;
  k.im2col(x.dtype(), p.g, slice.data_ptr(), columns.data_ptr());
  return columns;
}

void record(ConvDecision decision) { t_last_decision = std::move(decision); }

// `extra`: scratch beside the columns (the f32 sum of a 16-bit weight gradient).
void record_native(const Problem& p, const Tensor& columns, std::size_t extra = 0) {
  record({ConvImpl::native, p.depthwise() ? "depthwise" : p.pointwise() ? "1x1 gemm" : "im2col+gemm",
          (columns.defined() ? columns.nbytes() : 0) + extra});
}

// A per-channel [C_out] tensor (bias, scale) as [1, C_out, 1, 1], to broadcast over an output.
Tensor channel_view(const Tensor& per_channel, const Problem& p) { return per_channel.view({1, p.out_channels, 1, 1}); }

// ---- Note [Convolutions on the meta device]
// A meta tensor has a shape and no values (core/device.h); the memory planner runs convolutions there
// to see what they allocate. Each native path below allocates its buffers before its loop over the
// samples (or chunks of them), and the loop allocates nothing: it only slices and calls GEMMs, which
// do nothing on the meta device. So there the paths return before their loops: the same allocations
// as on the CPU, at a cost that does not grow with the batch (a million samples looped over took
// `frugal plan` two minutes).

// ---- Note [Pointwise convolutions over the batch]
// A 1x1 convolution (stride 1, no padding, one group) is one GEMM per sample, y[n] = W x[n] with
// x[n] the [C_in, H * W] matrix of sample n. Late in MobileNetV2 H * W is 16, 4 or 1: per-sample
// GEMMs are then matrix-vector products that read all of W for a handful of columns, and OpenBLAS
// runs them on one thread. So the samples go in chunks of at least kChunkColumns columns: a chunk's
// [samples, C, H * W] block is gathered into one [C, samples * H * W] matrix (a transposing copy,
// tag `workspace`) and one GEMM serves the chunk; from H * W >= kChunkColumns on a chunk is one
// sample and x itself is the operand. On the CPU the chunks run in parallel, each GEMM on one
// thread (OpenBLAS inside an OpenMP region runs on its caller's thread); a lone chunk leaves the
// threading to OpenBLAS, or on the CPU in f32 shares direct_gemm's pieces among the threads. How
// the batch is cut depends on the shapes alone, and every output value comes from one GEMM whose
// shape is fixed by them, so the results do not depend on the thread count. On the CPU in f32 the
// forward and input gradient gather only planes that are not a whole number of vectors (Note
// [Planes of whole vectors, sample by sample]), and on 1x1 maps the gradients gather nothing on any
// device (Note [Maps of one pixel: the batch is the matrix]).
constexpr std::int64_t kChunkColumns = 256;  // OpenBLAS's AVX-512 kernels reach their rate from a few hundred columns
// Gathered chunks are processed kChunksPerWave at a time, so the workspace holds (C_in + C_out) x
// (a wave's columns) values however large the batch: enough chunks for 8 threads.
constexpr std::int64_t kChunksPerWave = 8;
// A weight gradient of at most kSmallWeight elements is summed by kWeightGroups fixed groups of
// chunks in parallel (a partial gradient each, added in group order): its GEMMs are too small for
// OpenBLAS to thread. A larger one is summed chunk by chunk, each GEMM threaded by OpenBLAS.
constexpr std::int64_t kSmallWeight = 64 * 1024;  // 256 KiB of f32: kWeightGroups partials stay in L2
constexpr std::int64_t kWeightGroups = 4;

// Runs body(i) for each of `count` chunks: in parallel on the CPU (when there are two or more),
// in order on other devices.
template <typename Body>
void for_each_chunk(Device device, std::int64_t count, std::int64_t work, Body&& body) {
  if (device.is_cpu() && count > 1) return cpu::parallel_for(count, work, body);
  for (std::int64_t i = 0; i < count; ++i) body(i);
}

struct Chunking {
  std::int64_t samples = 1;  // per chunk
  std::int64_t plane = 1;    // H * W
  std::int64_t chunks = 1;   // in the batch, the last possibly shorter
  bool gathered() const { return samples > 1; }
  std::int64_t columns() const { return samples * plane; }
};

}  // namespace

std::int64_t pointwise_samples_per_gemm(std::int64_t plane) {
  return std::max<std::int64_t>(1, (kChunkColumns + plane - 1) / std::max<std::int64_t>(plane, 1));
}

namespace {

Chunking pointwise_chunking(const Problem& p) {
  const std::int64_t plane = p.g.out_plane();
  const std::int64_t samples = std::clamp<std::int64_t>(pointwise_samples_per_gemm(plane), 1, std::max<std::int64_t>(p.batch, 1));
  return {samples, plane, (p.batch + samples - 1) / samples};
}

bool batched_pointwise(const Problem& p) { return p.pointwise() && p.groups == 1; }

// Slot `slot` of a gathering buffer: a contiguous [channels, columns] matrix.
Tensor slot_matrix(const Tensor& buffer, std::int64_t slot, std::int64_t channels, std::int64_t columns,
                   std::int64_t slot_columns) {
  return buffer.narrow(0, slot * channels * slot_columns, channels * columns).view({channels, columns});
}

// Samples [first, first + count) of the contiguous [N, C, H, W] tensor t as a [C, count, H * W] view.
Tensor samples_by_channel(const Tensor& t, std::int64_t first, std::int64_t count) {
  return t.narrow(0, first, count).view({count, t.size(1), t.size(2) * t.size(3)}).permute({1, 0, 2});
}

// ---- Note [The pointwise forward's epilogue]
// A 1x1 convolution's scale, bias and activation (ConvEpilogue) would each be a pass over the whole
// output after the GEMMs. On the CPU in f32 they are applied to each GEMM's result instead, a
// chunk's [C_out, columns] while it is still in cache: v * scale[row] + bias[row], then the clamp.
// Without a scale the bias is added to the finished sum, as add_ after the GEMMs adds it, so the bits
// are those of the separate passes. Elsewhere (CUDA, other dtypes) the passes run after the GEMMs.
struct Epilogue {
  const float* scale = nullptr;  // [C_out] each, or none
  const float* bias = nullptr;
  bool relu6 = false;
  bool any() const { return scale != nullptr || bias != nullptr || relu6; }
  Epilogue from_row(std::int64_t r) const {  // the same for rows r, r + 1, ...
    return {scale ? scale + r : nullptr, bias ? bias + r : nullptr, relu6};
  }
};

// Each row r of the dense [rows, columns] f32 matrix `data`: v * scale[r] + bias[r], then the clamp.
// Compiled for AVX-512, AVX2 and plain x86-64, picked at load time, as the CPU kernels are.
__attribute__((target_clones("avx512f", "avx2", "default")))
void apply_epilogue(float* data, std::int64_t rows, std::int64_t columns, const Epilogue& e) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = data + r * columns;
    const float scale = e.scale ? e.scale[r] : 1.0f, bias = e.bias ? e.bias[r] : 0.0f;
    for (std::int64_t i = 0; i < columns; ++i) {  // GCC moves the tests out of the loop (one loop per case)
      float v = row[i];
      if (e.scale) v *= scale;
      if (e.bias) v += bias;
      row[i] = e.relu6 ? clamp_relu6(v) : v;
    }
  }
}

// Note [Gathering samples on the CPU]
// A chunk's samples [count, C, plane] are gathered into the GEMM's [C, count * plane] operand and its
// product scattered back, rows of `plane` floats (1 to 255). Through Tensor::copy_ each row costs a
// strided copy's bookkeeping, and the two copies took 10% of an eval forward; on the CPU in f32 they
// are these plain loops. The epilogue runs on the product before the scatter, along its rows of
// count * plane floats: in the scatter's short rows its clamp compiled to branches, mispredicted on
// half the values (the scatter took 19% of an eval forward that way). Both
// transpose [a, b] blocks of rows to [b, a]; with small planes walking one side in order would touch
// a new cache line per row on the other, so they go kTransposeTile rows of the channel side at a
// time, whose lines stay in L1 while the sample side is walked (1-pixel planes, a plain transpose,
// go by 4x4 blocks across the whole sample side instead: Note [Short runs]).
constexpr std::int64_t kTransposeTile = 64;  // 64 lines of 64 bytes: 4 KiB of L1

// Note [Short runs]
// With `plane` known only at run time GCC vectorises a run's copy for long runs and leaves short ones
// to its scalar tail, a load and a store per float: on the standard stem's 2x2 and 1x1 maps that was
// 10% of an eval forward on one thread (perf, 2026-12-07). A run of 4 (2x2 maps) is a constant, one
// 16-byte move; runs of 1 (1x1 maps: the copy is a plain matrix transpose, one side's floats
// contiguous along a and the other's along b) go by 4x4 blocks transposed in registers
// (transpose_4x4, kernels/cpu/octets.h). Values only move: the same bits.

// transpose_runs with runs of kPlane floats when kPlane > 0, of `plane` floats otherwise.
template <std::int64_t kPlane>
[[gnu::always_inline]] inline void transpose_runs_of(const float* src, std::int64_t src_a, std::int64_t src_b,
                                                     float* dst, std::int64_t dst_a, std::int64_t dst_b,
                                                     std::int64_t count, std::int64_t plane, std::int64_t begin,
                                                     std::int64_t end) {
  const std::int64_t run = kPlane > 0 ? kPlane : plane;
  for (std::int64_t tile = begin; tile < end; tile += kTransposeTile)
    for (std::int64_t b = 0; b < count; ++b)
      for (std::int64_t a = tile; a < std::min(end, tile + kTransposeTile); ++a) {
        const float* from = src + a * src_a + b * src_b;
        float* to = dst + a * dst_a + b * dst_b;
        for (std::int64_t i = 0; i < run; ++i) to[i] = from[i];
      }
}

// transpose_runs with runs of one float (Note [Short runs]): 4x4 blocks where the gathering's or the
// scattering's strides make each block's rows contiguous (src_a and dst_b 1, or src_b and dst_a 1),
// the edges float by float.
[[gnu::always_inline]] inline void transpose_floats(const float* src, std::int64_t src_a, std::int64_t src_b,
                                                    float* dst, std::int64_t dst_a, std::int64_t dst_b,
                                                    std::int64_t count, std::int64_t begin, std::int64_t end) {
  const bool a_rows = src_a == 1 && dst_b == 1, b_rows = src_b == 1 && dst_a == 1;
  const std::int64_t a_blocks = a_rows || b_rows ? begin + (end - begin) / 4 * 4 : begin;
  const std::int64_t b_blocks = a_rows || b_rows ? count / 4 * 4 : 0;
  for (std::int64_t a = begin; a < a_blocks; a += 4)
    for (std::int64_t b = 0; b < b_blocks; b += 4) {
      if (a_rows) cpu::transpose_4x4(src + a + b * src_b, src_b, dst + a * dst_a + b, dst_a);
      else cpu::transpose_4x4(src + a * src_a + b, src_a, dst + a + b * dst_b, dst_b);
    }
  for (std::int64_t a = begin; a < end; ++a)
    for (std::int64_t b = a < a_blocks ? b_blocks : 0; b < count; ++b)
      dst[a * dst_a + b * dst_b] = src[a * src_a + b * src_b];
}

// dst(a, b) = src(a, b) for a in [begin, end) and b < count, each a run of `plane` floats at
// a * src_a + b * src_b in src and a * dst_a + b * dst_b in dst: the gathering (a = channel, b = sample)
// and the scattering (a = product row, b = sample) below, both a transpose of plane-sized runs.
__attribute__((target_clones("avx512f", "avx2", "default")))
FRUGAL_NO_MEMCPY_CALLS void transpose_runs(const float* src, std::int64_t src_a, std::int64_t src_b, float* dst,
                                           std::int64_t dst_a, std::int64_t dst_b, std::int64_t count,
                                           std::int64_t plane, std::int64_t begin, std::int64_t end) {
  if (plane == 4) return transpose_runs_of<4>(src, src_a, src_b, dst, dst_a, dst_b, count, plane, begin, end);
  if (plane == 1) return transpose_floats(src, src_a, src_b, dst, dst_a, dst_b, count, begin, end);
  transpose_runs_of<0>(src, src_a, src_b, dst, dst_a, dst_b, count, plane, begin, end);
}

// Channels [begin, end) of `count` samples [count, channels, plane] into operand [channels, count, plane].
void gather_samples(const float* samples, std::int64_t count, std::int64_t channels, std::int64_t plane,
                    float* operand, std::int64_t begin, std::int64_t end) {
  transpose_runs(samples, plane, channels * plane, operand, count * plane, plane, count, plane, begin, end);
}

// Rows [begin, end) of product [rows, count, plane] to samples [count, rows, plane].
void scatter_samples(const float* product, std::int64_t rows, std::int64_t count, std::int64_t plane, float* samples,
                     std::int64_t begin, std::int64_t end) {
  transpose_runs(product, count * plane, plane, samples, plane, rows * plane, count, plane, begin, end);
}

// body(begin, end) over tiles of [0, n): shared among the threads when a chunk runs alone (its GEMM is
// threaded by OpenBLAS, and its copies would otherwise hold the other threads waiting: on the
// standard stem's 2x2 and 1x1 maps one chunk is the whole batch), on the caller's thread otherwise.
template <typename Body>
void over_tiles(std::int64_t n, std::int64_t work, bool alone, Body&& body) {
  if (alone) return cpu::parallel_for_chunks(n, kTransposeTile, work, body);
  body(std::int64_t{0}, n);
}

// A lone GEMM's share of work for one direct_gemm call: 64 rows (eight of AVX-512's tiles,
// kernels/cpu/direct_gemm.cpp) by 64 columns (two of its panels). Rows are cut too, since on the
// standard stem's 1x1 maps a lone chunk is the whole batch's 64 columns.
constexpr std::int64_t kDirectRows = 64, kDirectColumns = 64;

// product = a x operand, f32 on the CPU ([rows, inner] x [inner, columns], operand's and product's
// rows contiguous): direct_gemm (Note [A GEMM that does not pack], kernels/cpu/direct_gemm.cpp), in
// pieces shared among the threads when no other GEMM runs beside this one (`alone`), on the calling
// thread otherwise. Each element's bits do not depend on the pieces.
void direct_product(const Tensor& product, const Tensor& a, const Tensor& operand, bool alone) {
  const std::int64_t rows = a.size(0), inner = a.size(1), columns = operand.size(1);
  FRUGAL_CHECK(operand.size(0) == inner && product.size(0) == rows && product.size(1) == columns &&
                   (columns <= 1 || (operand.stride(1) == 1 && product.stride(1) == 1)),
               "direct_product: [", rows, ", ", inner, "] x ", shape_str(operand.shape()), " into ",
               shape_str(product.shape()), " needs row-major operand and product");
  const float* weight = static_cast<const float*>(a.data_ptr());
  const float* from = static_cast<const float*>(operand.data_ptr());
  float* to = static_cast<float*>(product.data_ptr());
  if (!alone)
    return cpu::direct_gemm(rows, columns, inner, weight, a.stride(0), a.stride(1), from, operand.stride(0), to,
                            product.stride(0));
  const std::int64_t row_pieces = (rows + kDirectRows - 1) / kDirectRows;
  const std::int64_t column_pieces = (columns + kDirectColumns - 1) / kDirectColumns;
  cpu::parallel_for(row_pieces * column_pieces, rows * inner * columns, [&](std::int64_t piece) {
    const std::int64_t row = piece / column_pieces * kDirectRows, column = piece % column_pieces * kDirectColumns;
    cpu::direct_gemm(std::min(kDirectRows, rows - row), std::min(kDirectColumns, columns - column), inner,
                     weight + row * a.stride(0), a.stride(0), a.stride(1), from + column, operand.stride(0),
                     to + row * product.stride(0) + column, product.stride(0));
  });
}

// product = left x right: direct_gemm's pieces when it applies (`direct`; right's and product's rows
// contiguous), matmul_into otherwise. `alone`: no other GEMM runs beside this one.
void product_where_they_lie(const Tensor& product, const Tensor& left, const Tensor& right, bool direct, bool alone) {
  if (direct) return direct_product(product, left, right, alone);
  matmul_into(product, left, right);
}

// Note [Planes of whole vectors, sample by sample]
// direct_gemm reads B where it lies (Note [A GEMM that does not pack]), so a chunk's gathering copy
// and the scatter of its product buy nothing where a sample's plane is a whole number of vectors
// (16x16, 8x8 and 4x4 maps): sample by sample its tiles are full as they are in the gathered matrix.
// There the CPU's f32 forward and input gradient multiply each sample in place, the samples shared
// among the threads, and write the product straight into the output: two copies of the layer's
// input and output fewer, and the same bits (each element's sum is the same chain whatever columns
// a call covers). Measured 2026-12-06 (docs/benchmarks.md, "The speed of `frugal train` on the
// CPU"). The weight gradient has its own path on these planes but the 4x4 ones (dot products along
// the pixels, kDotPlane below; on 4x4 maps it gathers for OpenBLAS), and the meta device gathers for
// the forward and input gradient (the path of the other devices, CUDA's native one among them): a
// plan of a CPU run counts gathering buffers this path does not allocate, transient scratch counted
// over rather than under.
constexpr std::int64_t kWholeVector = 16;  // floats: an AVX-512 register, two AVX2 ones (direct_gemm's narrowest tile)

bool plane_of_whole_vectors(const Problem& p) { return p.g.out_plane() % kWholeVector == 0; }

// The 1x1 forward and input gradient (and on 1x1 maps the weight gradient) run on direct_gemm: on the
// CPU in f32, unless the hand-written blocked GEMM was chosen (set_gemm_impl).
bool direct_gemm_applies(Device device, DType dtype) {
  return device.is_cpu() && dtype == DType::f32 && gemm_impl(DeviceType::CPU) == GemmImpl::library;
}

}  // namespace

// Each element's bits do not depend on the columns a direct_gemm call covers, nor on whether its
// samples were gathered (the same chain of multiply-adds, the epilogue applied per element).
bool pointwise_bits_independent_of_samples(Device device, DType dtype) { return direct_gemm_applies(device, dtype); }

namespace {

// Note [Maps of one pixel: the batch is the matrix]
// On 1x1 maps (the standard stem's last blocks and head) a contiguous [N, C, 1, 1] tensor is the
// row-major [N, C] matrix of its samples, so the gradients need no gathering: the input gradient is
// dX = dY W and the weight gradient dW = dY^T X, GEMMs over the tensors as they lie (a transposed
// view is a GEMM's transpose flag). On the CPU in f32 they run on direct_gemm (W's and X's rows are
// contiguous), the product's pieces shared among the threads; elsewhere through matmul_into
// (OpenBLAS, cuBLAS, the hand-written GEMMs). Before, each gathered its operands into [C, N]
// matrices first (two transposing copies per GEMM, each a parallel region of a few microseconds'
// work, and a workspace buffer for each). Every device's native path takes it for the input gradient
// and for f32 and f64 weight gradients (16-bit ones sum per sample in f32: native_backward_weight),
// the meta device included, so a plan counts what a run allocates. On the CPU in f32 the input gradient's elements are the gathered
// product's chains (the same bits); the weight gradient's are chains of multiply-adds over the batch
// in sample order, deterministic and independent of the thread count as every direct_gemm product
// (OpenBLAS summed them the same way on the development host: a MobileNetV2 step's every gradient
// byte for byte the same on both paths, which it does not promise). Through OpenBLAS (f64) the weight
// gradient is one GEMM over the batch, threaded by OpenBLAS, so its bits depend on OpenBLAS's thread
// count where its kernels' do (Note [OpenBLAS threads and bits] in kernels/cpu_runtime.h; before, a
// small one was summed in fixed groups of one-thread GEMMs). The forward, Y = X W^T, would
// need W^T's rows on direct_gemm: it gathers as before. Measured 2026-12-06 (docs/benchmarks.md).
bool one_pixel_maps(const Problem& p) { return p.g.out_plane() == 1; }  // a pointwise Problem's input too

// dst = a x src per sample, src and dst [N, *, H, W]: the forward (a = W) and the input gradient
// (a = W^T) of a pointwise convolution; `epilogue` applied to each GEMM's result (f32 on the CPU).
// On the CPU in f32 the GEMMs are direct_gemm's unless the hand-written blocked GEMM was chosen
// (set_gemm_impl), which then runs as everywhere else.
void pointwise_over_batch(const Tensor& a, const Tensor& src, const Tensor& dst, const Problem& p,
                          const Epilogue& epilogue = {}) {
  const bool cpu_f32 = src.device().is_cpu() && src.dtype() == DType::f32;  // Note [Gathering samples on the CPU]
  const bool direct = direct_gemm_applies(src.device(), src.dtype());
  const std::int64_t rows = a.size(0), inner = a.size(1);
  // Note [Maps of one pixel: the batch is the matrix]: where a^T's rows are contiguous, the input
  // gradient's a = W^T (the forward's a = W has rows C_in >= 2 floats apart: one input channel is the
  // depthwise path), and no epilogue applies (it goes along the rows of a [C, columns] product).
  if (one_pixel_maps(p) && a.stride(0) == 1 && !epilogue.any()) {
    if (src.device().is_meta()) return record_native(p, Tensor());  // Note [Convolutions on the meta device]
    // dst[N, rows] = src[N, inner] x a^T: for the input gradient dX = dY W.
    product_where_they_lie(dst.view({p.batch, rows}), src.view({p.batch, inner}), a.t(), direct, true);
    return record_native(p, Tensor());
  }
  // Note [Planes of whole vectors, sample by sample]
  const Chunking c = direct && plane_of_whole_vectors(p) ? Chunking{1, p.g.out_plane(), p.batch} : pointwise_chunking(p);
  const std::int64_t chunks = c.chunks;
  const std::int64_t work = rows * inner * c.columns();  // multiply-adds per chunk
  if (!c.gathered()) {
    if (src.device().is_meta()) return record_native(p, Tensor());  // Note [Convolutions on the meta device]
    const bool alone = p.batch == 1;  // for_each_chunk runs samples in parallel from two on
    for_each_chunk(src.device(), p.batch, work * p.batch, [&](std::int64_t n) {
      const Tensor product = dst.select(0, n).view({rows, c.plane});
      product_where_they_lie(product, a, src.select(0, n).view({inner, c.plane}), direct, alone);
      if (epilogue.any()) apply_epilogue(static_cast<float*>(product.data_ptr()), rows, c.plane, epilogue);
    });
    return record_native(p, Tensor());
  }
  const std::int64_t slots = std::min(chunks, kChunksPerWave);
  const TensorOptions like{.dtype = src.dtype(), .device = src.device()};
  const Tensor in = empty_workspace({slots * inner * c.columns()}, like), out = empty_workspace({slots * rows * c.columns()}, like);
  if (src.device().is_meta())  // Note [Convolutions on the meta device]
    return record({ConvImpl::native, "1x1 gemm", in.nbytes() + out.nbytes()});
  for (std::int64_t wave = 0; wave < chunks; wave += slots) {
    const std::int64_t in_wave = std::min(slots, chunks - wave);
    for_each_chunk(src.device(), in_wave, work * in_wave, [&](std::int64_t slot) {
      const std::int64_t first = (wave + slot) * c.samples, count = std::min(c.samples, p.batch - first);
      Tensor operand = slot_matrix(in, slot, inner, count * c.plane, c.columns());
      Tensor product = slot_matrix(out, slot, rows, count * c.plane, c.columns());
      if (!cpu_f32) {
        operand.view({inner, count, c.plane}).copy_(samples_by_channel(src, first, count));
        matmul_into(product, a, operand);
        samples_by_channel(dst, first, count).copy_(product.view({rows, count, c.plane}));
        return;
      }
      const bool alone = in_wave == 1;
      const float* from = static_cast<const float*>(src.select(0, first).data_ptr());
      float* gathered = static_cast<float*>(operand.data_ptr());
      over_tiles(inner, inner * count * c.plane, alone, [&](std::int64_t begin, std::int64_t end) {
        gather_samples(from, count, inner, c.plane, gathered, begin, end);
      });
      product_where_they_lie(product, a, operand, direct, alone);
      float* result = static_cast<float*>(product.data_ptr());
      float* to = static_cast<float*>(dst.select(0, first).data_ptr());
      const std::int64_t columns = count * c.plane;
      over_tiles(rows, rows * columns, alone, [&](std::int64_t begin, std::int64_t end) {
        if (epilogue.any()) apply_epilogue(result + begin * columns, end - begin, columns, epilogue.from_row(begin));
        scatter_samples(result, rows, count, c.plane, to, begin, end);
      });
    });
  }
  record({ConvImpl::native, "1x1 gemm", in.nbytes() + out.nbytes()});
}

// On the CPU in f32 the weight gradient on maps of kDotPlane pixels or more, planes of whole vectors,
// is summed as dot products along the pixels (Note [The 1x1 weight gradient as dot products],
// kernels/cpu/pointwise_weight_grad.cpp) instead of by OpenBLAS's GEMMs: no gathering and no packing
// copies, no partial gradients; its running totals are borrowed as workspace, on the meta device too
// (Note [Convolutions on the meta device]). Per layer of MobileNetV2 (batch 64), its time over
// OpenBLAS's: 1.27-1.47x on 32x32 maps (the smallest layer, [16, 32], 0.95-0.99x), 1.08-1.54x on 16x16,
// 1.01-1.26x on 8x8, on one thread and on two; on 4x4 maps it lost (0.59-0.87x: there the weights are
// the largest, up to 1280 x 320, and their totals, 16 floats per element, outgrow the caches), so
// they keep OpenBLAS's. Measured 2026-12-06, docs/benchmarks.md.
constexpr std::int64_t kDotPlane = 8 * 8;

bool dot_weight_gradient_applies(const Tensor& dy, const Tensor& x, const Tensor& dw, const Problem& p) {
  const std::int64_t plane = p.g.out_plane();
  return (dw.device().is_cpu() || dw.device().is_meta()) && dw.dtype() == DType::f32 && plane >= kDotPlane &&
         cpu::pointwise_weight_gradient_applies(plane) && dy.is_contiguous() && x.is_contiguous();
}

// dW = sum over samples of dy[n] x[n]^T for a pointwise convolution, f32 or f64: a GEMM per chunk
// (K = the chunk's columns) added up in chunk order. A small gradient is summed by up to
// kWeightGroups groups of consecutive chunks in parallel, each into a partial of its own (with its
// own gathering buffers), and the partials are added in group order.
void pointwise_weight_over_batch(const Tensor& dy, const Tensor& x, const Tensor& dw, const Problem& p) {
  const Chunking c = pointwise_chunking(p);
  const std::int64_t rows = p.out_channels, cols = p.in_channels, chunks = c.chunks;
  const Tensor weight = dw.view({rows, cols});
  if (one_pixel_maps(p)) {  // Note [Maps of one pixel: the batch is the matrix]: dW = dY^T X
    if (dw.device().is_meta()) return record({ConvImpl::native, "1x1 gemm", 0});  // Note [Convolutions on the meta device]
    const bool direct = direct_gemm_applies(dw.device(), dw.dtype());
    product_where_they_lie(weight, dy.view({p.batch, rows}).t(), x.view({p.batch, cols}), direct, true);
    return record({ConvImpl::native, "1x1 gemm", 0});
  }
  if (dot_weight_gradient_applies(dy, x, dw, p)) {  // Note [The 1x1 weight gradient as dot products]
    const Tensor totals = empty_workspace({rows * cols * cpu::kDotLanes}, {.device = dw.device()});
    if (!dw.device().is_meta())
      cpu::pointwise_weight_gradient(p.batch, rows, cols, c.plane, static_cast<const float*>(dy.data_ptr()),
                                     static_cast<const float*>(x.data_ptr()), static_cast<float*>(dw.data_ptr()),
                                     static_cast<float*>(totals.data_ptr()));
    return record({ConvImpl::native, "1x1 gemm", totals.nbytes()});
  }
  const TensorOptions like{.dtype = dw.dtype(), .device = dw.device()};
  // Groups of per_group consecutive chunks, the last one possibly shorter but never empty.
  const std::int64_t per_group = rows * cols <= kSmallWeight ? (chunks + kWeightGroups - 1) / kWeightGroups : chunks;
  const std::int64_t groups = (chunks + per_group - 1) / per_group;
  const std::int64_t buffers = c.gathered() ? groups : 0;
  const Tensor in = empty_workspace({buffers * cols * c.columns()}, like);
  const Tensor grad = empty_workspace({buffers * rows * c.columns()}, like);
  const Tensor partials = groups > 1 ? empty_workspace({groups, rows, cols}, like) : Tensor();
  const bool cpu_f32 = dw.device().is_cpu() && dw.dtype() == DType::f32;  // Note [Gathering samples on the CPU]
  // Gathers samples [sample, sample + count) of t ([N, channels, H, W]) into the [channels, count * plane]
  // matrix `to`; `alone`: no other chunk runs beside this one.
  auto gather = [&](const Tensor& t, const Tensor& to, std::int64_t channels, std::int64_t sample, std::int64_t count,
                    bool alone) {
    if (!cpu_f32) {
      Tensor(to).view({channels, count, c.plane}).copy_(samples_by_channel(t, sample, count));
      return;
    }
    const float* from = static_cast<const float*>(t.select(0, sample).data_ptr());
    over_tiles(channels, channels * count * c.plane, alone, [&](std::int64_t begin, std::int64_t end) {
      gather_samples(from, count, channels, c.plane, static_cast<float*>(to.data_ptr()), begin, end);
    });
  };
  // Adds chunks [first, last) into target, gathering through buffer slot `slot` when chunks are gathered.
  auto chunk_sum = [&](const Tensor& target, std::int64_t first, std::int64_t last, std::int64_t slot, bool alone) {
    for (std::int64_t chunk = first; chunk < last; ++chunk) {
      const std::int64_t sample = chunk * c.samples, count = std::min(c.samples, p.batch - sample);
      Tensor xs = x.select(0, sample).view({cols, c.plane}), dys = dy.select(0, sample).view({rows, c.plane});
      if (c.gathered()) {
        xs = slot_matrix(in, slot, cols, count * c.plane, c.columns());
        dys = slot_matrix(grad, slot, rows, count * c.plane, c.columns());
        gather(x, xs, cols, sample, count, alone);
        gather(dy, dys, rows, sample, count, alone);
      }
      matmul_into(target, dys, xs.t(), 1.0, chunk == first ? 0.0 : 1.0);
    }
  };
  const std::size_t scratch = in.nbytes() + grad.nbytes() + (partials.defined() ? partials.nbytes() : 0);
  // Note [Convolutions on the meta device]
  if (dw.device().is_meta()) return record({ConvImpl::native, "1x1 gemm", scratch});
  if (groups == 1) {  // one GEMM at a time, threaded by OpenBLAS
    chunk_sum(weight, 0, chunks, 0, true);
    return record({ConvImpl::native, "1x1 gemm", scratch});
  }
  for_each_chunk(dw.device(), groups, rows * cols * c.plane * p.batch, [&](std::int64_t g) {
    chunk_sum(partials.select(0, g), g * per_group, std::min(chunks, (g + 1) * per_group), g, false);
  });
  Tensor(weight).copy_(partials.select(0, 0));
  for (std::int64_t g = 1; g < groups; ++g) {
    Tensor total = weight;
    add_(total, partials.select(0, g));
  }
  record({ConvImpl::native, "1x1 gemm", scratch});
}

// The epilogue's parts as passes of their own over y, for the paths that did not apply them: the
// scale (`scale_done` when the path did) and the bias (`bias_done`), then the activation.
void epilogue_after(const Tensor& y, const Tensor& bias, const ConvEpilogue& e, const Problem& p, bool scale_done,
                    bool bias_done) {
  Tensor out = y;
  if (e.scale.defined() && !scale_done) mul_(out, channel_view(e.scale, p));
  if (bias.defined() && !bias_done) add_(out, channel_view(bias, p));  // sum + bias, the order of a GEMM with beta = 1
  if (e.activation == ConvActivation::relu6) relu6_(out);
}

// A depthwise filter's few weights take the epilogue's scale: scaling them costs less than scaling
// the outputs. On the CPU in f32 a plain loop: the broadcasting multiply took up to 170 us for
// MobileNetV2's 960 filters, long enough for the idle OpenMP thread to fall asleep before the
// convolution (Note [OpenMP threads spin briefly, then sleep]). The same products either way.
Tensor scaled_filters(const Tensor& w, const Tensor& scale, const Problem& p) {
  if (!w.device().is_cpu() || w.dtype() != DType::f32) return mul(w, scale.view({p.out_channels, 1, 1, 1}));
  Tensor filters = empty(w.shape(), {.dtype = w.dtype(), .device = w.device()});
  const float* from = static_cast<const float*>(w.data_ptr());
  const float* s = static_cast<const float*>(scale.data_ptr());
  float* to = static_cast<float*>(filters.data_ptr());
  const std::int64_t taps = w.numel() / p.out_channels;
  for (std::int64_t c = 0; c < p.out_channels; ++c)
    for (std::int64_t t = 0; t < taps; ++t) to[c * taps + t] = from[c * taps + t] * s[c];
  return filters;
}

void native_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Problem& p,
                    const ConvEpilogue& epilogue) {
  const NativeKernels& k = native_kernels(x.device(), "conv2d");
  if (p.depthwise()) {
    const Tensor filters = epilogue.scale.defined() ? scaled_filters(w, epilogue.scale, p) : w;
    k.depthwise_forward(x.dtype(), p.whole_sample(), p.batch, p.group_out(), x.data_ptr(), filters.data_ptr(),
                        bias.defined() ? bias.data_ptr() : nullptr, y.data_ptr(), epilogue.activation == ConvActivation::relu6);
    return record_native(p, Tensor());
  }
  if (batched_pointwise(p)) {
    // Note [The pointwise forward's epilogue]
    if (x.device().is_cpu() && x.dtype() == DType::f32) {
      const auto floats = [](const Tensor& t) { return t.defined() ? static_cast<const float*>(t.data_ptr()) : nullptr; };
      const Epilogue fused{.scale = floats(epilogue.scale), .bias = floats(bias),
                           .relu6 = epilogue.activation == ConvActivation::relu6};
      return pointwise_over_batch(group_weight(w, p, 0), x, y, p, fused);
    }
    pointwise_over_batch(group_weight(w, p, 0), x, y, p);
    return epilogue_after(y, bias, epilogue, p, false, false);
  }
  // With a bias (and no scale), y starts as the bias broadcast and each GEMM adds onto it (beta = 1):
  // no temporary.
  const bool bias_first = bias.defined() && !epilogue.scale.defined();
  if (bias_first) Tensor(y).copy_(channel_view(bias, p).expand(y.shape()));
  const double beta = bias_first ? 1.0 : 0.0;
  const Tensor columns = make_columns(x, p);
  if (x.device().is_meta()) return record_native(p, columns);  // Note [Convolutions on the meta device]
  for (std::int64_t n = 0; n < p.batch; ++n)
    for (std::int64_t g = 0; g < p.groups; ++g)
      matmul_into(group_output(y, p, n, g), group_weight(w, p, g), columns_of(k, x, p, n, g, columns), 1.0, beta);
  epilogue_after(y, bias, epilogue, p, false, bias_first);
  record_native(p, columns);
}

void native_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx, const Problem& p) {
  const NativeKernels& k = native_kernels(dy.device(), "conv2d_backward_input");
  if (p.depthwise()) {
    k.depthwise_backward_input(dy.dtype(), p.whole_sample(), p.batch, p.group_out(), dy.data_ptr(), w.data_ptr(), dx.data_ptr());
    return record_native(p, Tensor());
  }
  if (batched_pointwise(p)) return pointwise_over_batch(group_weight(w, p, 0).t(), dy, dx, p);
  const Tensor columns = make_columns(dy, p);
  if (dy.device().is_meta()) return record_native(p, columns);  // Note [Convolutions on the meta device]
  for (std::int64_t n = 0; n < p.batch; ++n)
    for (std::int64_t g = 0; g < p.groups; ++g) {
      const Tensor target = columns.defined() ? columns : group_input(dx, p, n, g);
      matmul_into(target, group_weight(w, p, g).t(), group_output(dy, p, n, g));
      if (columns.defined()) k.col2im(dy.dtype(), p.g, columns.data_ptr(), group_input(dx, p, n, g).data_ptr());
    }
  record_native(p, columns);
}

void native_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Problem& p) {
  const NativeKernels& k = native_kernels(dy.device(), "conv2d_backward_weight");
  if (p.depthwise()) {
    k.depthwise_backward_weight(dy.dtype(), p.whole_sample(), p.batch, p.group_out(), dy.data_ptr(), x.data_ptr(), dw.data_ptr());
    return record_native(p, Tensor());
  }
  const bool low_precision = dw.dtype() == DType::f16 || dw.dtype() == DType::bf16;
  if (batched_pointwise(p) && !low_precision && p.batch > 0) return pointwise_weight_over_batch(dy, x, dw, p);
  Tensor(dw).fill_(0.0);  // an empty batch has a zero gradient; otherwise every sample adds onto it
  const Tensor columns = make_columns(x, p);
  // f16/bf16: each sample's product is rounded once and the batch is summed in f32. Summing in the
  // 16-bit dw itself would round the running total once per sample, and a late sample's small
  // contribution would vanish into a large total (bf16 keeps 8 bits of mantissa).
  const Tensor total = low_precision ? empty_workspace(dw.shape(), {.device = dw.device()}) : dw;
  const Tensor part = low_precision ? empty_workspace({p.group_out(), p.rows()}, {.dtype = dw.dtype(), .device = dw.device()})
                                    : Tensor();
  const Tensor part_f32 = low_precision ? empty_workspace(part.shape(), {.device = dw.device()}) : Tensor();
  if (low_precision) Tensor(total).fill_(0.0);
  if (dw.device().is_meta())  // Note [Convolutions on the meta device]
    return record_native(p, columns, low_precision ? total.nbytes() + part.nbytes() + part_f32.nbytes() : 0);
  for (std::int64_t n = 0; n < p.batch; ++n)
    for (std::int64_t g = 0; g < p.groups; ++g) {
      const Tensor sample_columns = columns_of(k, x, p, n, g, columns).t();
      if (!low_precision) {
        matmul_into(group_weight(dw, p, g), group_output(dy, p, n, g), sample_columns, 1.0, 1.0);
        continue;
      }
      matmul_into(part, group_output(dy, p, n, g), sample_columns);
      Tensor(part_f32).copy_(part);  // one buffer for every sample, not a conversion allocated each time
      Tensor total_slice = group_weight(total, p, g);
      add_(total_slice, part_f32);
    }
  if (low_precision) Tensor(dw).copy_(total);
  record_native(p, columns, low_precision ? total.nbytes() + part.nbytes() + part_f32.nbytes() : 0);
}

void check_grad_shape(const Tensor& grad_output, const Problem& p, const char* op) {
  FRUGAL_CHECK_SHAPE(grad_output.shape() == p.output_shape(), op, ": the output gradient has shape ",
                     shape_str(grad_output.shape()), " but the convolution's output has shape ", shape_str(p.output_shape()));
}

}  // namespace

Shape conv2d_output_shape(const Shape& x, const Shape& weight, const Conv2dOptions& options) {
  return make_problem(x, weight, options, "conv2d").output_shape();
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options,
              const ConvEpilogue& epilogue) {
  check_operands(x, weight, "conv2d");
  const Problem p = make_problem(x.shape(), weight.shape(), options, "conv2d");
  if (bias.defined()) {
    check_operands(x, bias, "conv2d");
    FRUGAL_CHECK_SHAPE(bias.dim() == 1 && bias.size(0) == p.out_channels, "conv2d: bias of shape ",
                       shape_str(bias.shape()), " does not match ", p.out_channels, " output channels");
  }
  if (epilogue.scale.defined()) {
    check_operands(x, epilogue.scale, "conv2d");
    FRUGAL_CHECK_SHAPE(epilogue.scale.dim() == 1 && epilogue.scale.size(0) == p.out_channels, "conv2d: scale of shape ",
                       shape_str(epilogue.scale.shape()), " does not match ", p.out_channels, " output channels");
  }
  Tensor y = empty(p.output_shape(), {.dtype = x.dtype(), .device = x.device()});
  if (y.numel() == 0) return y;
  const Tensor xc = x.contiguous(), wc = weight.contiguous(), bc = bias.defined() ? bias.contiguous() : bias;
  const ConvEpilogue ec{.scale = epilogue.scale.defined() ? epilogue.scale.contiguous() : Tensor(),
                        .activation = epilogue.activation};
  if (!use_cudnn(x.device())) {
    native_forward(xc, wc, bc, y, p, ec);
    return y;
  }
#if FRUGAL_WITH_CUDA
  record(cuda::cudnn_conv2d_forward(xc, wc, y, options, workspace_limit()));
  epilogue_after(y, bc, ec, p, false, false);
  return y;
#else
  throw_no_cuda("conv2d");
#endif
}

Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options) {
  check_operands(grad_output, weight, "conv2d_backward_input");
  const Problem p = make_problem(input_shape, weight.shape(), options, "conv2d_backward_input");
  check_grad_shape(grad_output, p, "conv2d_backward_input");
  Tensor dx = empty(input_shape, {.dtype = grad_output.dtype(), .device = grad_output.device()});
  if (dx.numel() == 0) return dx;
  const Tensor dy = grad_output.contiguous(), wc = weight.contiguous();
  if (!use_cudnn(dy.device())) {
    native_backward_input(dy, wc, dx, p);
    return dx;
  }
#if FRUGAL_WITH_CUDA
  record(cuda::cudnn_conv2d_backward_input(dy, wc, dx, options, workspace_limit()));
  return dx;
#else
  throw_no_cuda("conv2d_backward_input");
#endif
}

Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& x, const Shape& weight_shape,
                              const Conv2dOptions& options) {
  check_operands(grad_output, x, "conv2d_backward_weight");
  const Problem p = make_problem(x.shape(), weight_shape, options, "conv2d_backward_weight");
  check_grad_shape(grad_output, p, "conv2d_backward_weight");
  Tensor dw = empty(weight_shape, {.dtype = x.dtype(), .device = x.device()});
  const Tensor dy = grad_output.contiguous(), xc = x.contiguous();
  if (!use_cudnn(dy.device()) || p.batch == 0) {  // cuDNN rejects an empty batch; the native path writes zeros
    native_backward_weight(dy, xc, dw, p);
    return dw;
  }
#if FRUGAL_WITH_CUDA
  record(cuda::cudnn_conv2d_backward_weight(dy, xc, dw, options, workspace_limit()));
  return dw;
#else
  throw_no_cuda("conv2d_backward_weight");
#endif
}

Tensor conv2d_backward_bias(const Tensor& grad_output) {
  FRUGAL_CHECK_SHAPE(grad_output.defined() && grad_output.dim() == 4,
                     "conv2d_backward_bias: expects a 4-D gradient [N, C_out, OH, OW], got ",
                     grad_output.defined() ? shape_str(grad_output.shape()) : std::string("undefined"));
  return sum(grad_output, {0, 2, 3});
}

}  // namespace frugal
