// The tensor core on the CPU: creation, views and their strides, copies and conversions, storage
// lifetime, memory tags, printing and error messages.
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <type_traits>
#include <utility>

#include "core/random.h"
#include "core/tensor.h"

using namespace frugal;

namespace {
std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }
Tensor iota(Shape shape) { return arange(static_cast<double>(shape_numel(shape))).view(std::move(shape)); }
}  // namespace

TEST_CASE("creation: shapes, strides, dtypes and contents") {
  const Tensor z = zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.strides() == Shape{3, 1});
  CHECK(z.dtype() == DType::f32);
  CHECK(z.device() == Device::cpu());
  CHECK(z.nbytes() == 24);
  CHECK(values(z) == std::vector<float>(6, 0.0f));
  CHECK(values(ones({2}, {.dtype = DType::f16})) == std::vector<float>{1, 1});
  CHECK(full({2, 2}, 7.5, {.dtype = DType::f64}).to_vector<double>() == std::vector<double>(4, 7.5));
  CHECK(arange(5, {.dtype = DType::i32}).to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1, 2, 3, 4});
  CHECK(values(arange(1, 2, 0.25)) == std::vector<float>{1, 1.25, 1.5, 1.75});
  CHECK(values(arange(3, 0, -1)) == std::vector<float>{3, 2, 1});
  CHECK(arange(0).numel() == 0);
  const Tensor scalar = full({}, 3.0);
  CHECK(scalar.dim() == 0);
  CHECK(scalar.numel() == 1);
  CHECK(scalar.item<float>() == 3.0f);
  const Tensor v = from_vector<std::int64_t>({1, 2, 3, 4, 5, 6}, {3, 2});
  CHECK(v.at<std::int64_t>({2, 1}) == 6);
  CHECK(from_vector<bool>({true, false}).dtype() == DType::boolean);
}

TEST_CASE("view and reshape share storage when strides allow, copy otherwise") {
  const Tensor x = iota({2, 3, 4});
  const Tensor v = x.view({6, -1});
  CHECK(v.shape() == Shape{6, 4});
  CHECK(v.shares_storage_with(x));
  CHECK(x.view({-1}).strides() == Shape{1});
  // A transpose cannot be flattened without a copy: view refuses, reshape copies.
  const Tensor t = x.transpose(1, 2);
  CHECK_FALSE(t.is_contiguous());
  CHECK_THROWS_WITH_AS(t.view({-1}), doctest::Contains("use reshape() to copy"), ShapeError);
  const Tensor r = t.reshape({-1});
  CHECK_FALSE(r.shares_storage_with(x));
  CHECK(r.at<float>({1}) == 4.0f);  // t[0][0][1] = x[0][1][0] = 4
  // Merging the dims that are still contiguous with each other works as a view.
  const Tensor p = x.permute({1, 0, 2});  // [3, 2, 4], the last dim is contiguous
  CHECK(p.view({3, 2, 2, 2}).shares_storage_with(x));
  CHECK_THROWS_AS(p.view({6, 4}), ShapeError);
  CHECK_THROWS_WITH_AS(x.view({5, -1}), doctest::Contains("cannot hold the 24 elements"), ShapeError);
  CHECK_THROWS_AS(x.view({-1, -1}), ShapeError);
  CHECK(x.reshape({4, 6}).shares_storage_with(x));
}

TEST_CASE("permute, transpose and t are views with permuted strides") {
  const Tensor x = iota({2, 3, 4});
  const Tensor p = x.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(p.at<float>({3, 1, 2}) == x.at<float>({1, 2, 3}));
  CHECK(x.transpose(0, -1).shape() == Shape{4, 3, 2});
  const Tensor m = iota({2, 3});
  CHECK(values(m.t().contiguous()) == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_AS(x.t(), ShapeError);
  CHECK_THROWS_AS(x.permute({0, 0, 1}), IndexError);
  CHECK_THROWS_AS(x.permute({0, 1}), ShapeError);
}

TEST_CASE("slice, narrow and select move the offset and scale strides") {
  const Tensor x = iota({4, 5});
  const Tensor s = x.slice(1, 1, 5, 2);  // columns 1 and 3
  CHECK(s.shape() == Shape{4, 2});
  CHECK(s.strides() == Shape{5, 2});
  CHECK(s.offset() == 1);
  CHECK(values(s.contiguous()) == std::vector<float>{1, 3, 6, 8, 11, 13, 16, 18});
  CHECK(x.slice(0, -2, 100).shape() == Shape{2, 5});  // Python-style negative start, clamped end
  CHECK(x.slice(0, 3, 1).numel() == 0);               // empty, not an error
  CHECK(values(x.narrow(0, 1, 2).select(1, -1)) == std::vector<float>{9, 14});
  CHECK(x.select(0, 2).shape() == Shape{5});
  CHECK_THROWS_AS(x.narrow(1, 3, 3), IndexError);
  CHECK_THROWS_AS(x.select(0, 4), IndexError);
  CHECK_THROWS_AS(x.slice(0, 0, 2, 0), ValueError);
  CHECK_THROWS_WITH_AS(x.slice(2, 0, 1), doctest::Contains("dim 2 is out of range for a tensor with 2 dims"), IndexError);
}

TEST_CASE("edge cases: huge steps, negative sizes, scalars and empty tensors") {
  const Tensor x = arange(10);
  CHECK(x.slice(0, 0, 10, INT64_MAX).shape() == Shape{1});  // no overflow in the size computation
  CHECK(x.slice(0, 3, 10, 3).to_vector<float>() == std::vector<float>{3, 6, 9});
  CHECK_THROWS_WITH_AS(ones({1}).expand({-2}), doctest::Contains("invalid size -2"), ShapeError);
  const Tensor scalar = full({}, 4.0);
  CHECK(scalar.squeeze(0).dim() == 0);
  CHECK(scalar.squeeze(-1).dim() == 0);
  CHECK_THROWS_AS(scalar.squeeze(1), IndexError);
  CHECK(scalar.unsqueeze(0).shape() == Shape{1});
  CHECK(scalar.view({1, 1}).item<float>() == 4.0f);
  const Tensor empty_view = zeros({4, 3}).slice(1, 0, 0);
  CHECK(empty_view.shape() == Shape{4, 0});
  CHECK(empty_view.is_contiguous());  // nothing can be out of place
  CHECK(empty_view.contiguous().numel() == 0);
}

TEST_CASE("expand, squeeze and unsqueeze") {
  const Tensor col = from_vector<float>({1, 2, 3}, {3, 1});
  const Tensor e = col.expand({2, 3, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(e.at<float>({1, 2, 3}) == 3.0f);
  CHECK(col.expand({-1, 2}).shape() == Shape{3, 2});
  CHECK_THROWS_WITH_AS(col.expand({2, 2}), doctest::Contains("cannot expand shape [3, 1] to [2, 2]"), ShapeError);
  const Tensor u = col.unsqueeze(0);
  CHECK(u.shape() == Shape{1, 3, 1});
  CHECK(col.unsqueeze(-1).shape() == Shape{3, 1, 1});
  CHECK(u.squeeze().shape() == Shape{3});
  CHECK(u.squeeze(0).shape() == Shape{3, 1});
  CHECK(u.squeeze(1).shape() == Shape{1, 3, 1});  // not size 1: unchanged
  CHECK(u.squeeze().shares_storage_with(col));
}

TEST_CASE("shapes whose element or byte count would wrap 64 bits are ShapeErrors, not tiny allocations") {
  CHECK_THROWS_WITH_AS(empty({(std::int64_t{1} << 61) + 1}, {.dtype = DType::f64}), doctest::Contains("more than 2^60"),
                       ShapeError);
  CHECK_THROWS_AS(empty({std::int64_t{1} << 32, std::int64_t{1} << 32}), ShapeError);  // the product wraps to 0
  CHECK(empty({0, std::int64_t{1} << 30}).numel() == 0);                                // large but fine
}

TEST_CASE("as_strided is checked against the storage") {
  const Tensor x = iota({6});
  CHECK(values(x.as_strided({2, 2}, {1, 2}, 1)) == std::vector<float>{1, 3, 2, 4});
  CHECK_THROWS_WITH_AS(x.as_strided({2, 2}, {3, 2}, 1), doctest::Contains("storage holds 6"), IndexError);
  // A reach that would wrap 64 bits (4 x 2^62 = 0 mod 2^64) is refused, not taken as small.
  CHECK_THROWS_WITH_AS(x.as_strided({5}, {std::int64_t{1} << 62}, 0), doctest::Contains("reach past 2^63"), IndexError);
  CHECK_THROWS_AS(x.narrow(0, 1, INT64_MAX), IndexError);  // start + length would overflow
}

TEST_CASE("contiguous, clone and copy_ with broadcasting and overlap") {
  const Tensor x = iota({2, 3});
  CHECK(x.contiguous().is_same(x));
  const Tensor c = x.clone();
  CHECK_FALSE(c.shares_storage_with(x));
  CHECK(values(c) == values(x));
  Tensor dst = zeros({2, 3});
  dst.copy_(from_vector<float>({10, 20, 30}));  // broadcast a row
  CHECK(values(dst) == std::vector<float>{10, 20, 30, 10, 20, 30});
  dst.select(0, 1).copy_(full({}, 5.0));
  CHECK(values(dst) == std::vector<float>{10, 20, 30, 5, 5, 5});
  CHECK_THROWS_WITH_AS(dst.copy_(zeros({3, 2})), doctest::Contains("cannot expand shape [3, 2] to [2, 3]"), ShapeError);
  Tensor expanded = zeros({3, 1}).expand({3, 4});
  CHECK_THROWS_AS(expanded.copy_(ones({3, 4})), ValueError);
  // Overlapping source and destination: shift a row by one place in its own storage.
  Tensor row = iota({5});
  row.slice(0, 1, 5).copy_(row.slice(0, 0, 4));
  CHECK(values(row) == std::vector<float>{0, 0, 1, 2, 3});
  // Disjoint views of one storage do not overlap: the copy goes straight through, no staging.
  Tensor halves = iota({8});
  const auto allocs = allocator_for(Device::cpu()).stats().allocations.allocated;
  halves.slice(0, 0, 4).copy_(halves.slice(0, 4, 8));
  CHECK(allocator_for(Device::cpu()).stats().allocations.allocated == allocs);
  CHECK(values(halves) == std::vector<float>{4, 5, 6, 7, 4, 5, 6, 7});
  CHECK(memory_overlaps(halves.slice(0, 0, 5), halves.slice(0, 4, 8)));
  CHECK_FALSE(memory_overlaps(halves.slice(0, 0, 8, 2), zeros({8})));
}

TEST_CASE("to(dtype) converts every pair of dtypes through strided views") {
  const Tensor source = from_vector<float>({0, 1, -2.5f, 3.75f, 100, 0.5f}, {2, 3}).t();
  for (DType from : kAllDTypes) {
    const Tensor a = source.to(from);
    for (DType to : kAllDTypes) {
      const Tensor b = a.to(to);
      CHECK(b.dtype() == to);
      // Compare against converting element by element through double.
      const auto got = b.to_vector<double>();
      const auto via = a.to_vector<double>();
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double expected = visit_dtype(to, [&]<typename T>() { return convert<double>(convert<T>(via[i])); });
        CHECK_MESSAGE(got[i] == expected, from << " -> " << to << " element " << i);
      }
    }
  }
  CHECK(from_vector<float>({0.1f}).to(DType::bf16).item<float>() == 0.10009765625f);
  // Negative floats wrap through int64 into u8, the same on CPU and GPU (a direct cast is undefined).
  CHECK(from_vector<float>({-1.0f, -3.2f, 300.0f, 7.9f}).to(DType::u8).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{255, 253, 44, 7});
  // f64 -> f16 rounds once: 1 + 2^-11 + 2^-40 is just above the tie and goes up.
  CHECK(full({1}, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), {.dtype = DType::f16}).item<float>() ==
        1.0f + std::ldexp(1.0f, -10));
  CHECK(from_vector<float>({-0.5f, 0.0f, 2.0f}).to(DType::boolean).to_vector<bool>() == std::vector<bool>{true, false, true});
}

TEST_CASE("fill_ writes through views only") {
  Tensor x = zeros({3, 3});
  x.slice(1, 0, 3, 2).fill_(1.0);
  CHECK(values(x) == std::vector<float>{1, 0, 1, 1, 0, 1, 1, 0, 1});
}

TEST_CASE("fill_ on a contiguous tensor: every dtype, +0 by memset, -0 and other values element by element") {
  // 40000 elements: more than one chunk, and enough work for a parallel region. A fill of +0.0 is a
  // memset (every dtype stores it as zero bytes); -0.0 must keep its sign in the floating dtypes.
  for (const DType dtype : kAllDTypes) {
    CAPTURE(dtype);
    Tensor x = full({40000}, 7.0, {.dtype = dtype});
    for (const double value : {0.0, -0.0, 3.0, 0.0}) {
      CAPTURE(value);
      x.fill_(value);
      const std::vector<double> got = x.to(DType::f64).to_vector<double>();
      const double expected = dtype == DType::boolean ? (value != 0.0 ? 1.0 : 0.0) : value;
      const bool negative_zero = is_floating(dtype) && std::signbit(value);
      CHECK(std::all_of(got.begin(), got.end(), [&](double v) {
        return v == expected && std::signbit(v) == negative_zero;
      }));
    }
  }
}

TEST_CASE("storage lifetime: freed when the last view goes, counted per tag") {
  Allocator& host = allocator_for(Device::cpu());
  const AllocatorStats before = host.stats();
  {
    MemoryTagScope scope(MemoryTag::activation);
    Tensor big = empty({1000}, {.dtype = DType::f64});
    CHECK(big.storage()->tag() == MemoryTag::activation);
    CHECK(host.stats().requested_bytes.current == before.requested_bytes.current + 8000);
    CHECK(host.stats().tag_bytes[static_cast<int>(MemoryTag::activation)].current ==
          before.tag_bytes[static_cast<int>(MemoryTag::activation)].current + 8000);
    Tensor view = big.slice(0, 10, 20);
    big = Tensor();  // the view still holds the storage
    CHECK(host.stats().requested_bytes.current == before.requested_bytes.current + 8000);
    CHECK(current_memory_tag() == MemoryTag::activation);
  }
  CHECK(current_memory_tag() == MemoryTag::other);
  CHECK(host.stats().requested_bytes.current == before.requested_bytes.current);
  CHECK(host.stats().allocations.freed == before.allocations.freed + 1);
  CHECK(host.stats().requested_bytes.peak >= before.requested_bytes.current + 8000);
  CHECK(empty({0, 5}).storage()->data() == nullptr);  // empty tensors allocate nothing
}

namespace {
// Counts what passes through it, to show that set_allocator reroutes every new tensor.
class CountingAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  std::string_view name() const override { return "counting"; }
  int live = 0;

 protected:
  void* raw_allocate(std::size_t bytes, Stream) override { ++live; return ::operator new(bytes); }
  void raw_deallocate(void* ptr, std::size_t) noexcept override { --live; ::operator delete(ptr); }
};
}  // namespace

TEST_CASE("set_allocator swaps the allocator behind every new tensor") {
  CountingAllocator counting;
  CHECK(set_allocator(Device::cpu(), &counting) == nullptr);
  {
    const Tensor t = ones({4});
    CHECK(counting.live == 1);
    CHECK(counting.stats().requested_bytes.current == 16);
  }
  CHECK(counting.live == 0);
  CHECK(set_allocator(Device::cpu(), nullptr) == &counting);
  CHECK(&allocator_for(Device::cpu()) != &counting);
}

TEST_CASE("in-place writes bump the version every view sees") {
  Tensor x = zeros({4});
  const Tensor view = x.slice(0, 1, 3);
  const auto before = view.storage()->version();
  x.fill_(2.0);
  Tensor(view).copy_(ones({2}));
  CHECK(view.storage()->version() == before + 2);
}

TEST_CASE("printing: nested brackets, aligned, with shape, dtype and device") {
  CHECK(from_vector<float>({1, 2, 3, 4}, {2, 2}).str() ==
        "tensor([[1., 2.],\n        [3., 4.]], shape=[2, 2], dtype=f32, device=cpu)");
  CHECK(from_vector<float>({1.5f, -0.25f}).str() == "tensor([ 1.5000, -0.2500], shape=[2], dtype=f32, device=cpu)");
  CHECK(from_vector<std::int32_t>({7, -12}).str() == "tensor([  7, -12], shape=[2], dtype=i32, device=cpu)");
  CHECK(from_vector<std::int64_t>({(std::int64_t{1} << 62) + 1}).str() ==
        "tensor([4611686018427387905], shape=[1], dtype=i64, device=cpu)");  // exact past 2^53
  CHECK(from_vector<bool>({true, false}).str() == "tensor([ True, False], shape=[2], dtype=bool, device=cpu)");
  CHECK(full({}, 2.0).str() == "tensor(2., shape=[], dtype=f32, device=cpu)");
  CHECK(zeros({0, 3}).str() == "tensor([], shape=[0, 3], dtype=f32, device=cpu)");
  CHECK(from_vector<float>({1e-6f, 1.0f}).str() == "tensor([1.0000e-06, 1.0000e+00], shape=[2], dtype=f32, device=cpu)");
  const std::string big = arange(2000).str();
  CHECK(big == "tensor([   0.,    1.,    2., ..., 1997., 1998., 1999.], shape=[2000], dtype=f32, device=cpu)");
  const std::string cube = zeros({2, 1, 2}).str();
  CHECK(cube == "tensor([[[0., 0.]],\n\n        [[0., 0.]]], shape=[2, 1, 2], dtype=f32, device=cpu)");
  CHECK(Tensor().str() == "tensor(undefined)");
  CHECK(arange(1600).view({40, 40}).str() ==
        "tensor([[   0.,    1.,    2., ...,   37.,   38.,   39.],\n"
        "        [  40.,   41.,   42., ...,   77.,   78.,   79.],\n"
        "        [  80.,   81.,   82., ...,  117.,  118.,  119.],\n"
        "        ...,\n"
        "        [1480., 1481., 1482., ..., 1517., 1518., 1519.],\n"
        "        [1520., 1521., 1522., ..., 1557., 1558., 1559.],\n"
        "        [1560., 1561., 1562., ..., 1597., 1598., 1599.]], shape=[40, 40], dtype=f32, device=cpu)");
}

TEST_CASE("printing a large tensor copies only the elements it shows") {
  const Tensor big = zeros({1000, 1000}, {.dtype = DType::f16});
  Allocator& host = allocator_for(Device::cpu());
  host.reset_peak_stats();
  const std::int64_t before = host.stats().requested_bytes.current;
  const std::string text = big.str();
  CHECK(text.find("...") != std::string::npos);
  CHECK(host.stats().requested_bytes.peak - before < 1024);  // 36 shown elements, not a 2 MB copy
}

TEST_CASE("errors name the operands, the location and the failed check") {
  const Tensor a = zeros({2, 3}), b = zeros({3, 2}, {.dtype = DType::f64});
  try {
    check_same_shape(a, b, "add");
    FAIL("no exception");
  } catch (const ShapeError& e) {
    CHECK(e.message() == "add: shape mismatch: first operand is [2, 3], second is [3, 2]");
    CHECK(std::string(e.file()) == "core/tensor.cpp");
    CHECK(e.line() > 0);
    CHECK(std::string(e.what()).starts_with("core/tensor.cpp:"));
    CHECK(std::string(e.what()).ends_with("(check failed: a.shape() == b.shape())"));
  }
  CHECK_THROWS_WITH_AS(check_same_dtype(a, b, "mul"), doctest::Contains("(shape [2, 3]) is f32, second (shape [3, 2]) is f64"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(a.data<double>(), doctest::Contains("data<f64>() called on a f32 tensor"), DTypeError);
  CHECK_THROWS_AS(a.item<float>(), ShapeError);
  CHECK_THROWS_AS(a.at<float>({2, 0}), IndexError);
  CHECK_THROWS_AS(empty({-1}), ShapeError);
  CHECK_THROWS_WITH_AS(Tensor().shape(), doctest::Contains("undefined tensor"), ValueError);
  CHECK_THROWS_AS(zeros({1, 1, 1, 1, 1, 1, 1, 1, 1}).t(), ShapeError);
  CHECK_THROWS_AS(zeros({2, 1, 1, 1, 1, 1, 1, 1, 1}).to(DType::f64), ShapeError);  // kernels take 8 dims at most
}

// A tensor's layout is rewritten in place only through set_data; impl() hands out no mutable access,
// so nothing can put a tensor past the bounds checks of its views.
static_assert(std::is_const_v<std::remove_reference_t<decltype(std::declval<const Tensor&>().impl())>>,
              "Tensor::impl() must be read-only");

TEST_CASE("set_data: every handle follows, the autograd slot stays") {
  struct Marker : AutogradMeta {};
  const Tensor t = zeros({2, 3});
  const Tensor handle = t;  // a second handle on the same TensorImpl
  const auto meta = std::make_shared<Marker>();
  t.set_autograd_meta(meta);
  const Tensor data = iota({4}).to(DType::f64);
  t.set_data(data);
  CHECK(handle.shape() == Shape{4});
  CHECK(handle.dtype() == DType::f64);
  CHECK(handle.storage() == data.storage());
  CHECK(handle.to_vector<double>() == std::vector<double>{0, 1, 2, 3});
  CHECK(handle.autograd_meta() == meta.get());
  CHECK(!handle.is_same(data));  // the data's own handle stays a different tensor
  t.set_data(iota({6}).slice(0, 1, 6, 2));  // a view: offset and stride come along
  CHECK(values(handle) == std::vector<float>{1, 3, 5});
  CHECK_THROWS_AS(t.set_data(Tensor()), ValueError);
  CHECK_THROWS_AS(Tensor().set_data(t), ValueError);
  t.set_data(t);  // onto itself: nothing changes
  CHECK(values(t) == std::vector<float>{1, 3, 5});
}
