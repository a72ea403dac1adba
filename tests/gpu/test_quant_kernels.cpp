// The quantisation kernels and 8-bit AdamW (kernels/cuda/quant.h) against the CPU reference
// (kernels/cpu/quant.h), bit for bit: 4-bit codes, absmax, double-quantised absmax, int8 codes,
// 8-bit codes, dequantised weights in every storage type (paired and single stores), and the 8-bit
// AdamW step with and without an fp32 master. Outputs are poisoned twice (all bits clear, then all
// set: every byte value is a valid code) and every element is checked. Without a GPU: the kernels'
// bodies run on the CPU composed as the kernels compose them (lanes, shared tables, block maxima),
// and the launchers' shapes and argument checks, which throw before any CUDA call.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/init_values.h"
#include "common/quant_math.h"
#include "core/quant_layout.h"
#include "cpu/optimizer.h"
#include "cpu/quant.h"
#include "cuda/check.h"
#include "cuda/owners.h"
#include "cuda/quant.h"
#include "cuda/types.h"
#include "gpu/require_gpu.h"
#include "quant_weight.h"

namespace vrambench::cuda {
namespace {

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, __half>) return DType::f16;
  return DType::bf16;
}

// scale * N(0, 1) rounded to T: the weights both sides read.
template <typename T>
std::vector<T> normal_storage(std::int64_t n, std::uint64_t stream, float scale = 0.02f) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[i] = from_f32<T>(scale * kmath::standard_normal(stream, i));
  return v;
}
std::vector<std::uint8_t> random_bytes(std::int64_t n, std::uint64_t stream) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(kmath::hash64(stream, i));
  return v;
}
std::vector<float> random_positive(std::int64_t n, std::uint64_t stream, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[i] = scale * (0.5f + kmath::uniform(stream, static_cast<std::uint64_t>(i)));
  return v;
}

template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer d(v.size() * sizeof(T));
  if (!v.empty()) VB_CUDA_CHECK(cudaMemcpy(d.get(), v.data(), d.bytes(), cudaMemcpyHostToDevice));
  return d;
}
DeviceBuffer poisoned(std::size_t bytes, int byte) {
  DeviceBuffer d(bytes);
  if (bytes > 0) VB_CUDA_CHECK(cudaMemset(d.get(), byte, bytes));
  return d;
}
template <typename T>
std::vector<T> download(const DeviceBuffer& d, std::size_t n) {
  VB_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> h(n);
  if (n > 0) VB_CUDA_CHECK(cudaMemcpy(h.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// Every element the same bits; names the first few that are not.
template <typename T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    if (++bad <= 5) {
      if constexpr (std::is_integral_v<T>)
        first += " [" + std::to_string(i) + "] " + std::to_string(+got[i]) + " vs " +
                 std::to_string(+want[i]) + ";";
      else
        first += " [" + std::to_string(i) + "] " + std::to_string(to_f32(got[i])) + " vs " +
                 std::to_string(to_f32(want[i])) + ";";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ:" << first;
}

constexpr int kPoisons[] = {0x00, 0xFF};

struct Shape {
  std::int64_t rows, cols;
};
// A realistic weight (4096 blocks, 16 nested groups), one with a partial nested group, an odd one.
constexpr Shape kShapes[] = {{256, 1024}, {129, 1000}, {3, 5}};

// Host buffers of one quantised weight (core/quant_layout.h sizes), and their device copies.
using HostWeight = test::QuantizedWeight;
struct DeviceWeight {
  DeviceBuffer data, absmax, qabsmax, absmax2, offset;
  // Poisoned buffers of host's sizes.
  DeviceWeight(const HostWeight& h, int byte)
      : data(poisoned(h.data.size(), byte)),
        absmax(poisoned(h.absmax.size() * 4, byte)),
        qabsmax(poisoned(h.qabsmax.size(), byte)),
        absmax2(poisoned(h.absmax2.size() * 4, byte)),
        offset(poisoned(h.offset.size() * 4, byte)) {}
  // Copies of host's contents.
  explicit DeviceWeight(const HostWeight& h)
      : data(upload(h.data)),
        absmax(upload(h.absmax)),
        qabsmax(upload(h.qabsmax)),
        absmax2(upload(h.absmax2)),
        offset(upload(h.offset)) {}
  kquant::QuantizedWeightBuffers buffers() const {
    return {data.as<std::uint8_t>(), absmax.as<float>(), qabsmax.as<std::uint8_t>(),
            absmax2.as<float>(), offset.as<float>()};
  }
  void expect_equal(const HostWeight& want, const std::string& what) const {
    expect_same_bits(download<std::uint8_t>(data, want.data.size()), want.data, what + " codes");
    expect_same_bits(download<float>(absmax, want.absmax.size()), want.absmax, what + " absmax");
    expect_same_bits(download<std::uint8_t>(qabsmax, want.qabsmax.size()), want.qabsmax,
                     what + " qabsmax");
    expect_same_bits(download<float>(absmax2, want.absmax2.size()), want.absmax2,
                     what + " absmax2");
    expect_same_bits(download<float>(offset, want.offset.size()), want.offset, what + " offset");
  }
};

template <typename T>
class QuantKernels : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(QuantKernels, StorageTypes);

// ---- the CUDA bodies on the CPU (no GPU needed) ------------------------------------------------

// A map's boundaries as the kernels' shared table holds them (fill_shared_map).
std::array<float, kDynamicMapEntries - 1> bounds_table(const kquant::DynamicMap& map) {
  std::array<float, kDynamicMapEntries - 1> bounds{};
  for (int k = 0; k < kDynamicMapEntries - 1; ++k) bounds[k] = kquant::dynamic_bound(map, k);
  return bounds;
}
// The largest of the lanes' absmax parts: what warp_max / block_max return.
template <typename Load>
float lanes_absmax(Load load, std::int64_t begin, std::int64_t end, int lanes) {
  float absmax = 0.0f;
  for (int lane = 0; lane < lanes; ++lane)
    absmax = std::max(absmax, kquant::absmax_part(load, begin, end, lane, lanes));
  return absmax;
}

TYPED_TEST(QuantKernels, FourBitBodiesAsTheKernelsRunThem) {
  // quantize_4bit_kernel (32 lanes, loader on T) and dequantize_4bit_kernel (a byte per lane, the
  // nested absmax from the map table, lanes in reverse) against the CPU reference, which reads the
  // same bits through kmath::load / kmath::store. An odd count: a half byte of padding.
  using T = TypeParam;
  const std::int64_t n = 300 * kQuant4bitBlock + 5, blocks = quant_blocks(n, kQuant4bitBlock);
  const std::vector<T> w = normal_storage<T>(n, 3);
  const TypedLoad<T> load{w.data()};
  const kquant::DynamicMap signed_map = kquant::dynamic_map(true);
  for (QuantKind kind : {QuantKind::nf4, QuantKind::fp4}) {
    SCOPED_TRACE(std::string(quant_kind_name(kind)));
    HostWeight want(kind, 1, n, true);
    cpu::quantize_weight(kind, true, want.buffers(), dtype_of<T>(), w.data(), 1, n);
    std::vector<std::uint8_t> codes(want.data.size(), 0xEE);
    std::vector<float> absmax(want.absmax.size());
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t begin = b * kQuant4bitBlock, end = std::min(begin + kQuant4bitBlock, n);
      absmax[b] = lanes_absmax(load, begin, end, 32);
      for (int lane = 0; lane < 32; ++lane)
        kquant::quantize_4bit_bytes(kind, codes.data(), load, begin, end, lane, 32, absmax[b]);
    }
    expect_same_bits(codes, want.data, "codes");
    expect_same_bits(absmax, want.absmax, "absmax");
    // Dequantise, plain and nested.
    const kquant::Levels4bit levels = kquant::levels_4bit(kind);
    for (bool nested : {false, true}) {
      std::vector<T> back(static_cast<std::size_t>(n)), got(back.size(), from_f32<T>(-7.0f));
      cpu::dequantize_weight(kind, nested, dtype_of<T>(), back.data(), want.buffers(), 1, n);
      for (std::int64_t b = 0; b < blocks; ++b) {
        const float block_absmax =
            nested ? kquant::nested_absmax(signed_map, want.qabsmax.data(), want.absmax2.data(),
                                           want.offset[0], b)
                   : want.absmax[b];
        const std::int64_t begin = b * kQuant4bitBlock, end = std::min(begin + kQuant4bitBlock, n);
        for (std::int64_t lane = 31; lane >= 0; --lane)
          for (std::int64_t i = begin + 2 * lane; i < std::min(begin + 2 * lane + 2, end); ++i)
            got[i] = from_f32<T>(
                kquant::dequantize_4bit_value(levels, want.data.data(), i, block_absmax));
      }
      expect_same_bits(got, back, nested ? "nested dequantised" : "dequantised");
    }
  }
}

TEST(QuantKernelBodies, EightBitBlockwiseAsTheKernelsRunIt) {
  // quantize_8bit_kernel: 256 lanes, block_max, the encoder on the shared boundary table;
  // dequantize_8bit_kernel: the shared map table. Against cpu::quantize_8bit / dequantize_8bit.
  const std::int64_t n = 5000, block = 256, blocks = quant_blocks(n, block);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    x[i] = std::pow(10.0f, -5.0f * kmath::uniform(81, static_cast<std::uint64_t>(i))) *
           (i % 3 == 0 ? -1.0f : 1.0f);
  const float offset = 0.125f;
  for (bool is_signed : {true, false}) {
    SCOPED_TRACE(is_signed ? "signed" : "unsigned");
    const kquant::DynamicMap map = kquant::dynamic_map(is_signed);
    const auto bounds = bounds_table(map);
    std::vector<std::uint8_t> want(static_cast<std::size_t>(n)), got(want.size(), 0xEE);
    std::vector<float> want_absmax(static_cast<std::size_t>(blocks)),
        got_absmax(want_absmax.size());
    cpu::quantize_8bit(want.data(), want_absmax.data(), x.data(), &offset, n, block, is_signed);
    const kquant::OffsetLoad load{x.data(), offset};
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t begin = b * block, end = std::min(begin + block, n);
      got_absmax[b] = lanes_absmax(load, begin, end, kQuantThreads);
      for (int lane = kQuantThreads - 1; lane >= 0; --lane)
        kquant::quantize_8bit_values_bounded(got.data(), load, begin, end, lane, kQuantThreads,
                                             got_absmax[b], bounds);
    }
    expect_same_bits(got, want, "codes");
    expect_same_bits(got_absmax, want_absmax, "absmax");
    std::vector<float> back(x.size()), got_back(x.size());
    cpu::dequantize_8bit(back.data(), want.data(), want_absmax.data(), &offset, n, block,
                         is_signed);
    for (std::int64_t i = 0; i < n; ++i)
      got_back[i] = kquant::dequantize_8bit_value(map.value, want.data(), want_absmax.data(), block,
                                                  offset, i);
    expect_same_bits(got_back, back, "dequantised");
  }
}

TEST(QuantKernelBodies, NestedMeanIsTheMeanInBothStages) {
  // The two stages of the offset (group sums folded in double, then lanes over them) stay within
  // fp32 rounding of the exact mean, with group counts under, at and over the lane count.
  for (std::int64_t blocks : {std::int64_t{1}, std::int64_t{255}, std::int64_t{257},
                              std::int64_t{256} * kquant::kNestedMeanLanes + 3}) {
    SCOPED_TRACE(::testing::Message() << blocks << " blocks");
    const std::vector<float> absmax = random_positive(blocks, 91, 0.05f);
    std::vector<std::uint8_t> qabsmax(static_cast<std::size_t>(blocks));
    std::vector<float> absmax2(static_cast<std::size_t>(quant_blocks(blocks, kQuantNestedBlock)));
    float offset = 0.0f;
    cpu::quantize_nested_absmax(qabsmax.data(), absmax2.data(), &offset, absmax.data(), blocks);
    long double exact = 0.0L;
    for (float a : absmax) exact += a;
    exact /= static_cast<long double>(blocks);
    EXPECT_NEAR(offset, static_cast<double>(exact), 1e-6 * static_cast<double>(exact));
  }
}

TEST(QuantKernelBodies, Int8RowsAsTheKernelsRunThem) {
  // quantize_int8_rows_kernel: 256 lanes a row, block_max; rows narrower and wider than a block.
  for (const Shape s : {Shape{7, 100}, Shape{3, 1000}}) {
    const std::int64_t n = s.rows * s.cols;
    const std::vector<__nv_bfloat16> w = normal_storage<__nv_bfloat16>(n, 92);
    HostWeight want(QuantKind::int8, s.rows, s.cols, false);
    cpu::quantize_weight(QuantKind::int8, false, want.buffers(), DType::bf16, w.data(), s.rows,
                         s.cols);
    std::vector<std::int8_t> got(static_cast<std::size_t>(n));
    std::vector<float> got_absmax(static_cast<std::size_t>(s.rows));
    const TypedLoad<__nv_bfloat16> load{w.data()};
    for (std::int64_t r = 0; r < s.rows; ++r) {
      const std::int64_t begin = r * s.cols, end = begin + s.cols;
      got_absmax[r] = lanes_absmax(load, begin, end, kQuantThreads);
      for (int lane = 0; lane < kQuantThreads; ++lane)
        kquant::quantize_int8_values(got.data(), load, begin, end, lane, kQuantThreads,
                                     got_absmax[r]);
    }
    std::vector<std::uint8_t> got_bytes(got.size());
    std::memcpy(got_bytes.data(), got.data(), got.size());
    expect_same_bits(got_bytes, want.data, "codes");
    expect_same_bits(got_absmax, want.absmax, "row absmax");
  }
}

TYPED_TEST(QuantKernels, AdamW8bitBodyAsTheKernelRunsIt) {
  // adamw_8bit_kernel's steps on the CPU: per block, dequantise from the map tables,
  // adamw_8bit_body per thread, the block's max, requantise on the boundary tables. Against
  // cpu::adamw_8bit_step on the fp32 parameter.
  using T = TypeParam;
  const std::int64_t n = 20 * kOptimizer8bitBlock + 77;
  const std::int64_t blocks = quant_blocks(n, kOptimizer8bitBlock);
  const kquant::DynamicMap signed_map = kquant::dynamic_map(true),
                           unsigned_map = kquant::dynamic_map(false);
  const auto signed_bounds = bounds_table(signed_map), unsigned_bounds = bounds_table(unsigned_map);
  for (bool with_master : {false, true}) {
    SCOPED_TRACE(with_master ? "with master" : "without master");
    const std::vector<T> w0 = normal_storage<T>(n, 11), grad = normal_storage<T>(n, 12, 0.1f);
    std::vector<float> master(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      master[i] = to_f32(w0[i]) + 1e-4f * kmath::standard_normal(13, i);
    std::vector<std::uint8_t> m_codes = random_bytes(n, 14), v_codes = random_bytes(n, 15);
    std::vector<float> absmax_m = random_positive(blocks, 16, 0.01f),
                       absmax_v = random_positive(blocks, 17, 1e-4f);
    AdamWParams p{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 5};
    // The reference.
    std::vector<float> param(static_cast<std::size_t>(n)), g(param.size());
    for (std::int64_t i = 0; i < n; ++i) {
      param[i] = with_master ? master[i] : to_f32(w0[i]);
      g[i] = to_f32(grad[i]);
    }
    std::vector<std::uint8_t> want_m = m_codes, want_v = v_codes;
    std::vector<float> want_am = absmax_m, want_av = absmax_v;
    cpu::adamw_8bit_step(
        param.data(), g.data(),
        {want_m.data(), want_v.data(), want_am.data(), want_av.data(), nullptr, nullptr}, n, p);
    // The kernel's composition.
    std::vector<T> w = w0;
    const float bc1 = p.bias_correction1(), bc2 = p.bias_correction2();
    std::vector<float> m(kQuantThreads), v(kQuantThreads);
    for (std::int64_t b = 0; b < blocks; ++b) {
      float max_m = 0.0f, max_v = 0.0f;
      for (int t = 0; t < kQuantThreads; ++t) {
        const std::int64_t i = b * kOptimizer8bitBlock + t;
        m[t] = v[t] = 0.0f;
        if (i >= n) continue;
        m[t] = kquant::adamw_8bit_moment(signed_map, m_codes[i], absmax_m[b]);
        v[t] = kquant::adamw_8bit_moment(unsigned_map, v_codes[i], absmax_v[b]);
        adamw_8bit_body(i, w.data(), grad.data(), with_master ? master.data() : nullptr, &m[t],
                        &v[t], p, bc1, bc2);
        max_m = std::max(max_m, std::fabs(m[t]));
        max_v = std::max(max_v, std::fabs(v[t]));
      }
      absmax_m[b] = max_m;
      absmax_v[b] = max_v;
      for (int t = 0; t < kQuantThreads && b * kOptimizer8bitBlock + t < n; ++t) {
        const std::int64_t i = b * kOptimizer8bitBlock + t;
        m_codes[i] = static_cast<std::uint8_t>(
            kquant::adamw_8bit_encode_m(signed_map, signed_bounds, m[t], max_m));
        v_codes[i] = static_cast<std::uint8_t>(
            kquant::adamw_8bit_encode_v_bounded(unsigned_bounds, v[t], max_v));
      }
    }
    expect_same_bits(m_codes, want_m, "m codes");
    expect_same_bits(v_codes, want_v, "v codes");
    expect_same_bits(absmax_m, want_am, "absmax m");
    expect_same_bits(absmax_v, want_av, "absmax v");
    std::vector<T> want_w(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) want_w[i] = from_f32<T>(param[i]);
    expect_same_bits(w, want_w, "w");
    if (with_master) expect_same_bits(master, param, "master");
  }
}

// ---- launch shapes and argument checks (no GPU needed) -----------------------------------------

TEST(QuantLaunch, FourBitGridGivesAWarpPerBlockUpToTheCap) {
  // Eight warps per CUDA block, one per 4-bit block of 64 values.
  EXPECT_EQ(quant_4bit_grid(0), 1u);
  EXPECT_EQ(quant_4bit_grid(1), 1u);
  EXPECT_EQ(quant_4bit_grid(8 * 64), 1u);
  EXPECT_EQ(quant_4bit_grid(8 * 64 + 1), 2u);
  EXPECT_EQ(quant_4bit_grid(4096 * 4096), 4096u * 4096 / 512);
  // Beyond the cap (65535 * 16 CUDA blocks) the warps loop over the 4-bit blocks.
  const std::int64_t capped = std::int64_t{65535} * 16 * 512;
  EXPECT_EQ(quant_4bit_grid(capped), 65535u * 16);
  EXPECT_EQ(quant_4bit_grid(capped + 1), 65535u * 16);
  EXPECT_EQ(quant_4bit_grid(std::int64_t{1} << 40), 65535u * 16);
}

TEST(QuantLaunch, NothingToDoLaunchesNothing) {
  // Zero elements return before any CUDA call: these pass with no driver at all, null buffers.
  EXPECT_NO_THROW(
      launch_quantize_4bit(QuantKind::nf4, DType::bf16, nullptr, nullptr, nullptr, 0, nullptr));
  EXPECT_NO_THROW(
      launch_dequantize_4bit(QuantKind::fp4, DType::f16, nullptr, nullptr, nullptr, 0, nullptr));
  EXPECT_NO_THROW(launch_dequantize_4bit_nested(QuantKind::nf4, DType::f32, nullptr, nullptr,
                                                nullptr, nullptr, nullptr, 0, nullptr));
  EXPECT_NO_THROW(launch_quantize_nested_absmax(nullptr, nullptr, nullptr, nullptr, 0, nullptr));
  EXPECT_NO_THROW(launch_quantize_8bit(nullptr, nullptr, nullptr, nullptr, 0, 256, true, nullptr));
  EXPECT_NO_THROW(
      launch_dequantize_8bit(nullptr, nullptr, nullptr, nullptr, 0, 256, false, nullptr));
  EXPECT_NO_THROW(
      launch_quantize_int8_rows(DType::bf16, nullptr, nullptr, nullptr, 0, 4096, nullptr));
  EXPECT_NO_THROW(
      launch_dequantize_int8_rows(DType::bf16, nullptr, nullptr, nullptr, 4096, 0, nullptr));
  EXPECT_NO_THROW(
      launch_quantize_weight(QuantKind::nf4, true, DType::bf16, {}, nullptr, 0, 4096, nullptr));
  EXPECT_NO_THROW(
      launch_dequantize_weight(QuantKind::int8, false, DType::bf16, nullptr, {}, 4096, 0, nullptr));
  EXPECT_NO_THROW(launch_adamw_8bit(DType::bf16, nullptr, nullptr, {}, nullptr, {}, 0, nullptr));
}

// The call throws std::invalid_argument whose message holds `words` (all checks come before any
// CUDA call, so with no driver a CudaError would mean a launch was attempted).
template <typename F>
void expect_refused(F&& call, const std::string& words) {
  try {
    call();
    ADD_FAILURE() << "not refused; expected: " << words;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(QuantLaunch, BadArgumentsThrowBeforeAnyCudaCall) {
  // Stand-ins for device buffers: never dereferenced, since every call below is refused first.
  std::array<std::uint64_t, 4> storage{};
  auto* bytes = reinterpret_cast<std::uint8_t*>(storage.data());
  auto* floats = reinterpret_cast<float*>(storage.data());
  auto* int8s = reinterpret_cast<std::int8_t*>(storage.data());
  const kquant::QuantizedWeightBuffers plain{bytes, floats, nullptr, nullptr, nullptr};
  const kquant::QuantizedWeightBuffers nested_without_offset{bytes, floats, bytes, floats, nullptr};

  expect_refused(
      [&] {
        launch_quantize_4bit(QuantKind::int8, DType::bf16, bytes, floats, floats, 64, nullptr);
      },
      "launch_quantize_4bit: quant kind int8 is not nf4 or fp4");
  expect_refused(
      [&] {
        launch_quantize_4bit(QuantKind::nf4, DType::bf16, bytes, floats, floats, -1, nullptr);
      },
      "launch_quantize_4bit: n is -1, not >= 0");
  expect_refused(
      [&] {
        launch_quantize_4bit(QuantKind::nf4, DType::bf16, bytes, nullptr, floats, 64, nullptr);
      },
      "launch_quantize_4bit: absmax is null");
  expect_refused(
      [&] { launch_quantize_4bit(QuantKind::nf4, DType::u8, bytes, floats, floats, 64, nullptr); },
      "is not a floating storage type");
  expect_refused(
      [&] {
        launch_dequantize_4bit(QuantKind::none, DType::f32, floats, bytes, floats, 64, nullptr);
      },
      "launch_dequantize_4bit: quant kind none is not nf4 or fp4");
  expect_refused(
      [&] {
        launch_dequantize_4bit_nested(QuantKind::nf4, DType::f32, floats, bytes, bytes, floats,
                                      nullptr, 64, nullptr);
      },
      "launch_dequantize_4bit_nested: offset is null");
  expect_refused([&] { launch_quantize_nested_absmax(bytes, nullptr, floats, floats, 5, nullptr); },
                 "launch_quantize_nested_absmax: absmax2 is null");
  expect_refused([&] { launch_quantize_nested_absmax(bytes, floats, floats, floats, -5, nullptr); },
                 "launch_quantize_nested_absmax: blocks is -5, not >= 0");
  expect_refused(
      [&] { launch_quantize_8bit(bytes, floats, floats, nullptr, 10, 0, true, nullptr); },
      "launch_quantize_8bit: block is 0, not >= 1");
  expect_refused(
      [&] { launch_dequantize_8bit(floats, nullptr, floats, nullptr, 10, 256, true, nullptr); },
      "launch_dequantize_8bit: codes is null");
  expect_refused(
      [&] { launch_quantize_int8_rows(DType::bf16, int8s, floats, floats, -2, 8, nullptr); },
      "launch_quantize_int8_rows: rows is -2, not >= 0");
  expect_refused(
      [&] {
        launch_dequantize_int8_rows(DType::bf16, floats, int8s, floats,
                                    std::numeric_limits<std::int64_t>::max() / 2, 4, nullptr);
      },
      "launch_dequantize_int8_rows: 4611686018427387903 x 4 overflows 64 bits");
  expect_refused(
      [&] {
        launch_quantize_weight(QuantKind::none, false, DType::bf16, plain, floats, 4, 64, nullptr);
      },
      "launch_quantize_weight: quant kind none is not nf4 or fp4");
  // With double quantisation every buffer is checked before the 4-bit kernel would run.
  expect_refused(
      [&] {
        launch_quantize_weight(QuantKind::nf4, true, DType::bf16, nested_without_offset, floats, 4,
                               64, nullptr);
      },
      "launch_quantize_weight: out.offset is null");
  expect_refused(
      [&] {
        launch_dequantize_weight(QuantKind::fp4, true, DType::bf16, floats, plain, 4, 64, nullptr);
      },
      "launch_dequantize_4bit_nested: qabsmax is null");
  expect_refused(
      [&] {
        launch_dequantize_weight(QuantKind::nf4, false, DType::bf16, floats, plain, 4, -64,
                                 nullptr);
      },
      "launch_dequantize_weight: cols is -64, not >= 0");
  // 8-bit AdamW: the 8-bit buffers from kMin8bitSize elements on, fp32 m and v under it.
  const kquant::AdamW8bitState eight_bit_only{bytes, bytes, floats, floats, nullptr, nullptr};
  const kquant::AdamW8bitState fp32_only{nullptr, nullptr, nullptr, nullptr, floats, floats};
  expect_refused(
      [&] {
        launch_adamw_8bit(DType::bf16, floats, floats, eight_bit_only, nullptr, {},
                          kMin8bitSize - 1, nullptr);
      },
      "launch_adamw_8bit: state.m (fp32 state under kMin8bitSize elements) is null");
  expect_refused(
      [&] {
        launch_adamw_8bit(DType::bf16, floats, floats, fp32_only, nullptr, {}, kMin8bitSize,
                          nullptr);
      },
      "launch_adamw_8bit: state.m_codes is null");
  expect_refused(
      [&] {
        launch_adamw_8bit(DType::bf16, floats, nullptr, eight_bit_only, nullptr, {}, kMin8bitSize,
                          nullptr);
      },
      "launch_adamw_8bit: grad is null");
  expect_refused(
      [&] {
        launch_adamw_8bit(DType::i32, floats, floats, eight_bit_only, nullptr, {}, kMin8bitSize,
                          nullptr);
      },
      "is not a floating storage type");
}

// ---- on a GPU ----------------------------------------------------------------------------------

TYPED_TEST(QuantKernels, WeightsQuantiseAndDequantiseAsTheCpu) {
  VB_REQUIRE_GPU();
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  for (const Shape s : kShapes)
    for (QuantKind kind : {QuantKind::nf4, QuantKind::fp4, QuantKind::int8})
      for (bool double_quant : {false, true}) {
        if (kind == QuantKind::int8 && double_quant) continue;
        SCOPED_TRACE(::testing::Message() << quant_kind_name(kind) << (double_quant ? " dq " : " ")
                                          << s.rows << " x " << s.cols);
        const std::int64_t n = s.rows * s.cols;
        const std::vector<T> w = normal_storage<T>(n, 21);
        HostWeight want(kind, s.rows, s.cols, double_quant);
        cpu::quantize_weight(kind, double_quant, want.buffers(), dt, w.data(), s.rows, s.cols);
        const DeviceBuffer d_w = upload(w);
        for (int poison : kPoisons) {
          const DeviceWeight got(want, poison);
          launch_quantize_weight(kind, double_quant, dt, got.buffers(), d_w.get(), s.rows, s.cols,
                                 nullptr);
          got.expect_equal(want, "quantise, poison " + std::to_string(poison));
        }
        // Dequantise the CPU's buffers.
        std::vector<T> back(static_cast<std::size_t>(n));
        cpu::dequantize_weight(kind, double_quant, dt, back.data(), want.buffers(), s.rows, s.cols);
        const DeviceWeight in(want);
        for (int poison : kPoisons) {
          DeviceBuffer d_back = poisoned(static_cast<std::size_t>(n) * sizeof(T), poison);
          launch_dequantize_weight(kind, double_quant, dt, d_back.get(), in.buffers(), s.rows,
                                   s.cols, nullptr);
          expect_same_bits(download<T>(d_back, static_cast<std::size_t>(n)), back,
                           "dequantise, poison " + std::to_string(poison));
        }
      }
}

TYPED_TEST(QuantKernels, DequantiseIntoAnOddOffsetStoresSingly) {
  // An output one element into its buffer is not aligned to pairs: the kernel stores each value
  // alone and gives the same result.
  VB_REQUIRE_GPU();
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  const Shape s{33, 130};
  const std::int64_t n = s.rows * s.cols;
  const std::vector<T> w = normal_storage<T>(n, 23);
  for (QuantKind kind : {QuantKind::nf4, QuantKind::fp4})
    for (bool double_quant : {false, true}) {
      SCOPED_TRACE(::testing::Message() << quant_kind_name(kind) << (double_quant ? " dq" : ""));
      HostWeight q(kind, s.rows, s.cols, double_quant);
      cpu::quantize_weight(kind, double_quant, q.buffers(), dt, w.data(), s.rows, s.cols);
      std::vector<T> back(static_cast<std::size_t>(n) + 1, from_f32<T>(3.0f));
      cpu::dequantize_weight(kind, double_quant, dt, back.data() + 1, q.buffers(), s.rows, s.cols);
      const DeviceWeight in(q);
      DeviceBuffer d_back = upload(std::vector<T>(back.size(), from_f32<T>(3.0f)));
      launch_dequantize_weight(kind, double_quant, dt, d_back.as<T>() + 1, in.buffers(), s.rows,
                               s.cols, nullptr);
      expect_same_bits(download<T>(d_back, back.size()), back, "dequantised at offset 1");
    }
}

TEST(QuantKernelsF32, EightBitBlockwiseAsTheCpu) {
  VB_REQUIRE_GPU();
  const std::int64_t n = 70000;
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    x[i] = std::pow(10.0f, -4.0f * kmath::uniform(31, static_cast<std::uint64_t>(i))) *
           (i % 3 == 0 ? -1.0f : 1.0f);
  const std::vector<float> offset = {0.25f};
  const DeviceBuffer d_x = upload(x), d_offset = upload(offset);
  for (std::int64_t block : {64, 256, 4096})
    for (bool is_signed : {true, false})
      for (bool shifted : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "block " << block << (is_signed ? " signed" : "")
                                          << (shifted ? " offset" : ""));
        const std::int64_t blocks = quant_blocks(n, block);
        const float* host_offset = shifted ? offset.data() : nullptr;
        const float* dev_offset = shifted ? d_offset.as<float>() : nullptr;
        std::vector<std::uint8_t> codes(static_cast<std::size_t>(n));
        std::vector<float> absmax(static_cast<std::size_t>(blocks)), back(x.size());
        cpu::quantize_8bit(codes.data(), absmax.data(), x.data(), host_offset, n, block, is_signed);
        cpu::dequantize_8bit(back.data(), codes.data(), absmax.data(), host_offset, n, block,
                             is_signed);
        const DeviceBuffer d_codes_in = upload(codes), d_absmax_in = upload(absmax);
        for (int poison : kPoisons) {
          DeviceBuffer d_codes = poisoned(codes.size(), poison),
                       d_absmax = poisoned(absmax.size() * 4, poison),
                       d_back = poisoned(back.size() * 4, poison);
          launch_quantize_8bit(d_codes.as<std::uint8_t>(), d_absmax.as<float>(), d_x.as<float>(),
                               dev_offset, n, block, is_signed, nullptr);
          launch_dequantize_8bit(d_back.as<float>(), d_codes_in.as<std::uint8_t>(),
                                 d_absmax_in.as<float>(), dev_offset, n, block, is_signed, nullptr);
          expect_same_bits(download<std::uint8_t>(d_codes, codes.size()), codes, "codes");
          expect_same_bits(download<float>(d_absmax, absmax.size()), absmax, "absmax");
          expect_same_bits(download<float>(d_back, back.size()), back, "dequantised");
        }
      }
}

TEST(QuantKernelsF32, NestedAbsmaxOverMoreGroupsThanLanesAsTheCpu) {
  // 2 * 256 * 1024 + 3 blocks: 2049 group sums, so that the mean's lanes add several each and the
  // last group is partial.
  VB_REQUIRE_GPU();
  const std::int64_t blocks = 2 * kQuantNestedBlock * kquant::kNestedMeanLanes + 3;
  const std::int64_t groups = quant_blocks(blocks, kQuantNestedBlock);
  const std::vector<float> absmax = random_positive(blocks, 71, 0.03f);
  std::vector<std::uint8_t> qabsmax(static_cast<std::size_t>(blocks));
  std::vector<float> absmax2(static_cast<std::size_t>(groups)), offset(1);
  cpu::quantize_nested_absmax(qabsmax.data(), absmax2.data(), offset.data(), absmax.data(), blocks);
  const DeviceBuffer d_absmax = upload(absmax);
  for (int poison : kPoisons) {
    DeviceBuffer d_q = poisoned(qabsmax.size(), poison),
                 d_a2 = poisoned(absmax2.size() * 4, poison), d_offset = poisoned(4, poison);
    launch_quantize_nested_absmax(d_q.as<std::uint8_t>(), d_a2.as<float>(), d_offset.as<float>(),
                                  d_absmax.as<float>(), blocks, nullptr);
    expect_same_bits(download<float>(d_offset, 1), offset, "offset");
    expect_same_bits(download<std::uint8_t>(d_q, qabsmax.size()), qabsmax, "qabsmax");
    expect_same_bits(download<float>(d_a2, absmax2.size()), absmax2, "absmax2");
  }
}

TYPED_TEST(QuantKernels, AdamW8bitStepsAsTheCpu) {
  VB_REQUIRE_GPU();
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  for (std::int64_t n : {std::int64_t{1} << 20, std::int64_t{10000}, std::int64_t{4096}})
    for (bool with_master : {false, true}) {
      SCOPED_TRACE(::testing::Message() << n << " elements, master " << with_master);
      const std::int64_t blocks = quant_blocks(n, kOptimizer8bitBlock);
      std::vector<T> w = normal_storage<T>(n, 41);
      std::vector<float> master(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) master[i] = to_f32(w[i]);
      std::vector<std::uint8_t> m_codes = random_bytes(n, 42), v_codes = random_bytes(n, 43);
      std::vector<float> absmax_m = random_positive(blocks, 44, 0.01f),
                         absmax_v = random_positive(blocks, 45, 1e-4f);
      DeviceBuffer d_w = upload(w), d_master = upload(master), d_m = upload(m_codes),
                   d_v = upload(v_codes), d_am = upload(absmax_m), d_av = upload(absmax_v);
      const kquant::AdamW8bitState d_state{d_m.as<std::uint8_t>(),
                                           d_v.as<std::uint8_t>(),
                                           d_am.as<float>(),
                                           d_av.as<float>(),
                                           nullptr,
                                           nullptr};
      const kquant::AdamW8bitState h_state{m_codes.data(),  v_codes.data(), absmax_m.data(),
                                           absmax_v.data(), nullptr,        nullptr};
      std::vector<float> param(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) param[i] = to_f32(w[i]);
      // Three steps, the state carried over on both sides; a loss scale on the last.
      for (int step = 1; step <= 3; ++step) {
        AdamWParams p{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step};
        p.grad_scale = step == 3 ? 1024.0f : 1.0f;
        const std::vector<T> grad = normal_storage<T>(n, 50 + step, 0.1f * p.grad_scale);
        std::vector<float> g(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) g[i] = to_f32(grad[i]);
        cpu::adamw_8bit_step(param.data(), g.data(), h_state, n, p);
        if (!with_master)  // without a master the weight is the parameter, rounded each step
          for (std::int64_t i = 0; i < n; ++i) param[i] = to_f32(from_f32<T>(param[i]));
        const DeviceBuffer d_grad = upload(grad);
        launch_adamw_8bit(dt, d_w.get(), d_grad.get(), d_state,
                          with_master ? d_master.as<float>() : nullptr, p, n, nullptr);
      }
      std::vector<T> want_w(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) want_w[i] = from_f32<T>(param[i]);
      expect_same_bits(download<T>(d_w, want_w.size()), want_w, "w");
      if (with_master) expect_same_bits(download<float>(d_master, param.size()), param, "master");
      expect_same_bits(download<std::uint8_t>(d_m, m_codes.size()), m_codes, "m codes");
      expect_same_bits(download<std::uint8_t>(d_v, v_codes.size()), v_codes, "v codes");
      expect_same_bits(download<float>(d_am, absmax_m.size()), absmax_m, "absmax m");
      expect_same_bits(download<float>(d_av, absmax_v.size()), absmax_v, "absmax v");
    }
}

TYPED_TEST(QuantKernels, AdamW8bitKeepsFp32StateUnderMin8bitSize) {
  // 1,000 elements: launch_adamw_8bit runs launch_adamw on the fp32 m and v (its bias
  // corrections are computed on the device, so within the tolerance of that kernel's own test).
  VB_REQUIRE_GPU();
  using T = TypeParam;
  const std::int64_t n = 1000;
  const std::vector<T> w = normal_storage<T>(n, 61), grad = normal_storage<T>(n, 62, 0.1f);
  std::vector<float> param(static_cast<std::size_t>(n)), g(param.size()), m(param.size(), 0.01f),
      v(param.size(), 1e-4f);
  for (std::int64_t i = 0; i < n; ++i) {
    param[i] = to_f32(w[i]);
    g[i] = to_f32(grad[i]);
  }
  DeviceBuffer d_w = upload(w), d_m = upload(m), d_v = upload(v);
  const DeviceBuffer d_grad = upload(grad);
  AdamWParams p{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 3};
  cpu::adamw_step(param.data(), g.data(), m.data(), v.data(), n, p);
  // 8-bit pointers left null: the fp32 path must not touch them.
  launch_adamw_8bit(dtype_of<T>(), d_w.get(), d_grad.get(),
                    {nullptr, nullptr, nullptr, nullptr, d_m.as<float>(), d_v.as<float>()}, nullptr,
                    p, n, nullptr);
  const std::vector<float> got_m = download<float>(d_m, m.size()),
                           got_v = download<float>(d_v, v.size());
  const std::vector<T> got_w = download<T>(d_w, w.size());
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(got_m[i], m[i], 1e-5 * std::fabs(m[i]) + 1e-9) << i;
    EXPECT_NEAR(got_v[i], v[i], 1e-5 * std::fabs(v[i]) + 1e-12) << i;
    EXPECT_NEAR(to_f32(got_w[i]), to_f32(from_f32<T>(param[i])),
                std::fabs(param[i]) * (std::is_same_v<T, float> ? 1e-5 : 1e-2) + 1e-6)
        << i;
  }
}

}  // namespace
}  // namespace vrambench::cuda
