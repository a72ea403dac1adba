// The fused-attention kernels on a GPU against the CPU reference (kernels/cpu flash_fwd/flash_bwd):
// y and lse of the forward, all of dqkv from the backward, for f32/f16/bf16 storage, multi-head and
// grouped-query heads, head sizes of every class (64, 128, an odd 80, 32, 96, 256), sequences that
// end inside a tile and S = 1, with and without dropout (which must drop the same probabilities as
// the reference, or the fp32 cases fail), and a grid of more than 65535 blocks. Outputs start as
// NaN and sit before a guard region, so an element never written, or one written out of bounds,
// fails. Skipped, with the reason, only where there is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cpu/attention.h"
#include "cuda/attention_flash.h"
#include "cuda/check.h"
#include "cuda/owners.h"
#include "cuda/types.h"
#include "device/cuda_device.h"
#include "gpu/require_gpu.h"

namespace vrambench::cuda {
namespace {

constexpr std::size_t kGuardBytes = 4096;

// Device memory of `bytes` followed by a guard, all bytes 0xff (NaN in f32, f16 and bf16).
struct Poisoned {
  explicit Poisoned(std::size_t n) : bytes(n), buffer(n + kGuardBytes) {
    VB_CUDA_CHECK(cudaMemset(buffer.get(), 0xff, buffer.bytes()));
  }
  void* get() const { return buffer.get(); }
  // Whether bytes [from, to) still hold the poison (default: the guard after the buffer).
  bool untouched(std::size_t from, std::size_t to) const {
    std::vector<std::uint8_t> h(to - from);
    VB_CUDA_CHECK(cudaMemcpy(h.data(), static_cast<const std::uint8_t*>(buffer.get()) + from,
                             h.size(), cudaMemcpyDeviceToHost));
    return std::all_of(h.begin(), h.end(), [](std::uint8_t b) { return b == 0xff; });
  }
  bool guard_intact() const { return untouched(bytes, bytes + kGuardBytes); }
  std::size_t bytes;
  DeviceBuffer buffer;
};

// Uniform values in [-1.5, 1.5), rounded to the storage type so GPU and CPU read the same numbers.
template <typename T>
std::vector<float> random_values(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  std::vector<float> v(n);
  for (float& x : v) x = to_f32(from_f32<T>(dist(rng)));
  return v;
}
template <typename T>
DeviceBuffer upload(const std::vector<float>& v) {
  std::vector<T> h(v.size());
  std::transform(v.begin(), v.end(), h.begin(), [](float f) { return from_f32<T>(f); });
  DeviceBuffer d(h.size() * sizeof(T));
  VB_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), d.bytes(), cudaMemcpyHostToDevice));
  return d;
}
template <typename T>
std::vector<float> download(const void* d, std::size_t n) {
  std::vector<T> h(n);
  VB_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  std::transform(h.begin(), h.end(), out.begin(), [](T x) { return to_f32(x); });
  return out;
}

// The selftest's tolerances per storage type (src/device/cuda_selftest.cpp).
struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance_for(DType dt) {
  switch (dt) {
    case DType::f16:
      return {1e-2, 2e-3};
    case DType::bf16:
      return {5e-2, 1e-2};
    default:
      return {1e-4, 1e-5};
  }
}

// Largest |got - want| / (atol + rtol |want|) and where; <= 1 passes, NaN (never written) fails.
struct Worst {
  double ratio = 0;
  std::size_t at = 0;
};
Worst worst_ratio(const std::vector<float>& got, const std::vector<float>& want, Tolerance t) {
  Worst w;
  for (std::size_t i = 0; i < want.size(); ++i) {
    double r = std::fabs(static_cast<double>(got[i]) - want[i]) /
               (t.atol + t.rtol * std::fabs(static_cast<double>(want[i])));
    if (std::isnan(r)) r = INFINITY;
    if (r > w.ratio) w = {r, i};
  }
  return w;
}
::testing::AssertionResult within(const char* what, const std::vector<float>& got,
                                  const std::vector<float>& want, Tolerance t) {
  const Worst w = worst_ratio(got, want, t);
  if (w.ratio <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": element " << w.at << " is " << got[w.at] << ", the reference " << want[w.at]
         << " (error " << w.ratio << " x the tolerance)";
}

struct Case {
  DType dtype;
  std::int64_t B, S, A, K, D;
  float p;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << dtype_name(c.dtype) << " B=" << c.B << " S=" << c.S << " A=" << c.A << " K=" << c.K
      << " D=" << c.D << " p=" << c.p;
}
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(dtype_name(c.dtype)) + "_B" + std::to_string(c.B) + "_S" +
         std::to_string(c.S) + "_A" + std::to_string(c.A) + "_K" + std::to_string(c.K) + "_D" +
         std::to_string(c.D) + (c.p > 0 ? "_dropout" : "");
}

template <typename T>
void forward_and_backward(const Case& c, unsigned seed) {
  const FlashShape s{c.B, c.S, c.A, c.K, c.D, c.p, 0x5eed0000u + seed};
  const cpu::AttnShape r{c.B, c.S, c.A, c.K, c.D};
  const auto n_qkv = static_cast<std::size_t>(c.B * c.S * s.width());
  const auto n_y = static_cast<std::size_t>(c.B * c.S * c.A * c.D);
  const auto n_lse = static_cast<std::size_t>(c.B * c.A * c.S);
  const Tolerance tol = tolerance_for(c.dtype);
  std::mt19937 rng(seed);
  const std::vector<float> qkv = random_values<T>(n_qkv, rng), dy = random_values<T>(n_y, rng);

  // Forward.
  std::vector<float> y_ref(n_y), lse_ref(n_lse);
  cpu::flash_fwd(y_ref.data(), lse_ref.data(), qkv.data(), r, s.dropout_p, s.seed);
  const DeviceBuffer d_qkv = upload<T>(qkv);
  const Poisoned d_y(n_y * sizeof(T)), d_lse(n_lse * sizeof(float));
  launch_flash_fwd(c.dtype, d_y.get(), static_cast<float*>(d_lse.get()), d_qkv.get(), s, nullptr);
  VB_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(within("y", download<T>(d_y.get(), n_y), y_ref, tol));
  EXPECT_TRUE(within("lse", download<float>(d_lse.get(), n_lse), lse_ref, tol));
  EXPECT_TRUE(d_y.guard_intact()) << "written past y";
  EXPECT_TRUE(d_lse.guard_intact()) << "written past lse";

  // Backward from the reference's y (rounded to T) and lse, so that only it is measured.
  std::vector<float> y_rounded = y_ref;
  for (float& v : y_rounded) v = to_f32(from_f32<T>(v));
  std::vector<float> dqkv_ref(n_qkv);
  cpu::flash_bwd(dqkv_ref.data(), dy.data(), qkv.data(), y_rounded.data(), lse_ref.data(), r,
                 s.dropout_p, s.seed);
  const DeviceBuffer d_dy = upload<T>(dy), d_y_ref = upload<T>(y_rounded);
  const DeviceBuffer d_lse_ref = upload<float>(lse_ref);
  const Poisoned d_dqkv(n_qkv * sizeof(T));
  const Bytes scratch_bytes = flash_bwd_scratch_bytes(s);
  const Poisoned d_scratch(static_cast<std::size_t>(scratch_bytes));
  launch_flash_bwd(c.dtype, d_dqkv.get(), d_scratch.get(), scratch_bytes, d_dy.get(), d_qkv.get(),
                   d_y_ref.get(), d_lse_ref.as<float>(), s, nullptr);
  VB_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(within("dqkv", download<T>(d_dqkv.get(), n_qkv), dqkv_ref, tol));
  EXPECT_TRUE(d_dqkv.guard_intact()) << "written past dqkv";
  EXPECT_TRUE(d_scratch.guard_intact()) << "written past the scratch";
  const auto delta_at = static_cast<std::size_t>(flash_delta_offset(s)) * sizeof(float);
  EXPECT_TRUE(d_scratch.untouched(0, delta_at)) << "the scratch's [B,A,S,D] region was written";
  // delta_i = dy_i . y_i, kept in the [B,A,S] region.
  const std::vector<float> delta =
      download<float>(static_cast<const std::uint8_t*>(d_scratch.get()) + delta_at, n_lse);
  std::vector<float> delta_ref(n_lse);
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t a = 0; a < c.A; ++a)
      for (std::int64_t i = 0; i < c.S; ++i) {
        double sum = 0;
        for (std::int64_t d = 0; d < c.D; ++d) {
          const auto e = static_cast<std::size_t>(s.y(b, i, a) + d);
          sum += static_cast<double>(dy[e]) * y_rounded[e];
        }
        delta_ref[static_cast<std::size_t>(s.lse(b, a, i))] = static_cast<float>(sum);
      }
  EXPECT_TRUE(within("delta", delta, delta_ref, tolerance_for(DType::f32)));
}

class FlashKernels : public ::testing::TestWithParam<Case> {};

TEST_P(FlashKernels, MatchTheCpuReferenceOnAGpu) {
  VB_REQUIRE_GPU();
  const Case c = GetParam();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("input seed " + std::to_string(seed));
  dispatch_float(c.dtype, [&](auto tag) { forward_and_backward<decltype(tag)>(c, seed); });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashKernels,
    ::testing::Values(
        // fp32: the fp32/tf32 recipes' only flash path; tight tolerances catch a wrong dropout.
        Case{DType::f32, 2, 100, 4, 4, 64, 0.0f}, Case{DType::f32, 1, 100, 8, 2, 128, 0.1f},
        Case{DType::f32, 2, 77, 3, 1, 80, 0.2f}, Case{DType::f32, 3, 1, 2, 1, 64, 0.0f},
        Case{DType::f32, 1, 130, 2, 2, 32, 0.1f}, Case{DType::f32, 2, 256, 2, 1, 64, 0.1f},
        // fp16
        Case{DType::f16, 2, 100, 4, 4, 64, 0.1f}, Case{DType::f16, 1, 100, 8, 2, 128, 0.0f},
        Case{DType::f16, 2, 77, 3, 1, 80, 0.0f}, Case{DType::f16, 1, 64, 4, 2, 96, 0.0f},
        Case{DType::f16, 2, 1, 2, 2, 80, 0.1f},
        // bf16
        Case{DType::bf16, 2, 100, 4, 4, 64, 0.0f}, Case{DType::bf16, 1, 100, 8, 2, 128, 0.2f},
        Case{DType::bf16, 2, 77, 3, 1, 80, 0.1f}, Case{DType::bf16, 3, 1, 2, 2, 128, 0.0f},
        // head size 256: 32-row tiles, 131 KB of shared memory for dK/dV (opted in)
        Case{DType::bf16, 1, 200, 2, 1, 256, 0.0f}, Case{DType::f32, 1, 45, 2, 2, 256, 0.1f}),
    case_name);

// B * A = 70400 blocks in the first grid dimension for the forward and dQ, as many for dK/dV.
TEST(FlashKernelsGrid, MoreThan65535Blocks) {
  VB_REQUIRE_GPU();
  const Case c{DType::bf16, 1100, 2, 64, 64, 32, 0.0f};
  const FlashShape s{c.B, c.S, c.A, c.K, c.D, c.p, 0};
  ASSERT_GT(flash_launch(FlashKernel::forward, s).blocks, 65535);
  ASSERT_GT(flash_launch(FlashKernel::dkv, s).blocks, 65535);
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("input seed " + std::to_string(seed));
  forward_and_backward<__nv_bfloat16>(c, seed);
}

}  // namespace
}  // namespace vrambench::cuda
