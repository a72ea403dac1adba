// The element-wise math shared by CPU and CUDA kernels: rounding bit patterns, activations, the
// dropout RNG, optimizer updates and the RoPE rotation.
#include "common/math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace vrambench {
namespace {

using namespace kmath;

TEST(CpuCommonRounding, Bf16KnownPatterns) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  // 1 + 2^-8 is exactly halfway between 1.0 (0x3F80, even) and 1+2^-7 (0x3F81): ties to even.
  EXPECT_EQ(float_to_bf16(bits_float(0x3F808000u)), 0x3F80);
  // 1 + 3*2^-8 is halfway between 0x3F81 (odd) and 0x3F82 (even): rounds up.
  EXPECT_EQ(float_to_bf16(bits_float(0x3F818000u)), 0x3F82);
  // Just above halfway rounds up.
  EXPECT_EQ(float_to_bf16(bits_float(0x3F808001u)), 0x3F81);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // The largest finite float rounds up into Inf, as in hardware conversion.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  const std::uint16_t nan = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
  // A NaN whose payload lies only in the low bits must not become Inf.
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(bits_float(0x7F800001u)))));
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
}

TEST(CpuCommonRounding, Fp16KnownPatterns) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_fp16(0.5f), 0x3800);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);  // max finite
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7BFF);  // below the rounding threshold
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);  // the tie rounds to even, which is Inf
  EXPECT_EQ(float_to_fp16(1e6f), 0x7C00);
  EXPECT_EQ(float_to_fp16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(float_to_fp16(6.103515625e-05f), 0x0400);  // smallest normal 2^-14
  EXPECT_EQ(float_to_fp16(5.9604644775390625e-08f), 0x0001);  // smallest subnormal 2^-24
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);    // half of it: tie to even (0)
  EXPECT_EQ(float_to_fp16(std::ldexp(1.5f, -25)), 0x0001);    // above the tie
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002);    // 1.5 units: tie to even (2)
  EXPECT_EQ(float_to_fp16(std::ldexp(1023.0f, -24)), 0x03FF); // largest subnormal
  // 1 + 2^-11 is halfway between 1.0 (even) and 1 + 2^-10: ties to even.
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(float_to_fp16(1.0f + 3.0f * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x8400), -std::ldexp(1.0f, -14));
  EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(fp16_to_float(0x7C00)));
}

TEST(CpuCommonRounding, Fp16RoundTripsEveryFiniteHalf) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    if ((bits & 0x7C00u) == 0x7C00u) continue;  // Inf/NaN
    ASSERT_EQ(float_to_fp16(fp16_to_float(bits)), bits) << std::hex << h;
  }
}

TEST(CpuCommonRounding, LoadStoreByDtype) {
  std::uint16_t half[2] = {};
  store(half, DType::bf16, 1, 1.0f);
  EXPECT_EQ(half[1], 0x3F80);
  EXPECT_EQ(load(half, DType::bf16, 1), 1.0f);
  store(half, DType::f16, 0, 0.1f);
  EXPECT_NEAR(load(half, DType::f16, 0), 0.1f, 1e-4f);
  EXPECT_EQ(round_to(DType::bf16, 1.0f + std::ldexp(1.0f, -9)), 1.0f);
  EXPECT_EQ(round_to(DType::f32, 0.1f), 0.1f);
  std::int32_t ids[1] = {};
  store(ids, DType::i32, 0, 7.0f);
  EXPECT_EQ(ids[0], 7);
}

TEST(CpuCommonActivation, GeluValues) {
  EXPECT_EQ(gelu(0.0f), 0.0f);
  EXPECT_NEAR(gelu(1.0f), 0.8411920f, 1e-6f);  // 0.5 (1 + tanh(0.79788 * 1.044715))
  EXPECT_NEAR(gelu(-1.0f), -0.1588080f, 1e-6f);
  EXPECT_NEAR(gelu(3.0f), 2.9963627f, 1e-5f);
  EXPECT_NEAR(gelu_grad(0.0f), 0.5f, 1e-7f);
  for (float x : {-2.5f, -0.7f, 0.3f, 1.9f}) {
    const double h = 1e-3;
    const double fd = (gelu(x + static_cast<float>(h)) - gelu(x - static_cast<float>(h))) / (2 * h);
    EXPECT_NEAR(gelu_grad(x), fd, 2e-3) << x;
  }
}

TEST(CpuCommonActivation, SwigluValuesAndGradient) {
  EXPECT_NEAR(silu(1.0f), 0.7310586f, 1e-6f);
  EXPECT_NEAR(swiglu(1.0f, 2.0f), 1.4621172f, 1e-6f);
  for (float g : {-1.5f, 0.2f, 2.0f}) {
    const float up = 0.7f;
    float dgate = 0, dup = 0;
    swiglu_grad(1.0f, g, up, &dgate, &dup);
    const float h = 1e-3f;
    EXPECT_NEAR(dgate, (swiglu(g + h, up) - swiglu(g - h, up)) / (2 * h), 2e-3f);
    EXPECT_NEAR(dup, (swiglu(g, up + h) - swiglu(g, up - h)) / (2 * h), 2e-3f);
  }
}

TEST(CpuCommonRng, KeepRateNearOneMinusP) {
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const int n = 200000;
    int kept = 0;
    for (int i = 0; i < n; ++i) kept += keep(42, static_cast<std::uint64_t>(i), p) ? 1 : 0;
    // Binomial standard deviation is at most sqrt(n)/2 = 224: 1% of n is > 8 sigma.
    EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.01) << p;
  }
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(keep(7, static_cast<std::uint64_t>(i), 0.0f));
}

TEST(CpuCommonRng, DeterministicAndSeedDependent) {
  int same_seed_diff = 0, other_seed_diff = 0;
  for (std::uint64_t i = 0; i < 4096; ++i) {
    same_seed_diff += keep(3, i, 0.5f) != keep(3, i, 0.5f);
    other_seed_diff += keep(3, i, 0.5f) != keep(4, i, 0.5f);
  }
  EXPECT_EQ(same_seed_diff, 0);
  EXPECT_GT(other_seed_diff, 1500);  // about half of 4096 differ for independent streams
  EXPECT_EQ(hash64(1, 2), hash64(1, 2));
}

TEST(CpuCommonOptimizer, AdamwFirstStepByHand) {
  // Step 1: m = 0.1 g, v = 0.001 g^2, m_hat = g, v_hat = g^2, so the Adam step is lr * sign(g)
  // (up to eps); decoupled decay first shrinks w by lr * wd * w.
  float w = 1.0f, m = 0.0f, v = 0.0f;
  AdamParams p;
  p.lr = 0.1f;
  p.weight_decay = 0.5f;
  adamw_update(&w, 0.2f, &m, &v, p);
  EXPECT_NEAR(m, 0.02f, 1e-7f);
  EXPECT_NEAR(v, 0.001f * 0.04f, 1e-9f);
  EXPECT_NEAR(w, 1.0f - 0.05f - 0.1f * 0.2f / (0.2f + 1e-8f), 1e-6f);
  // Step 2 with the same gradient: m = 0.038, v = 0.0000799..., hats 0.038/0.19, ...
  AdamParams p2 = p;
  p2.step = 2;
  p2.weight_decay = 0.0f;
  const float w_before = w;
  adamw_update(&w, 0.2f, &m, &v, p2);
  const double m2 = 0.9 * 0.02 + 0.1 * 0.2, v2 = 0.999 * 0.00004 + 0.001 * 0.04;
  const double expected = w_before - 0.1 * (m2 / (1 - 0.81)) / (std::sqrt(v2 / (1 - 0.998001)) + 1e-8);
  EXPECT_NEAR(w, expected, 1e-6);
}

TEST(CpuCommonOptimizer, SgdMomentumByHand) {
  float w = 1.0f, buf = 0.0f;
  SgdParams p;
  p.lr = 0.1f;
  p.momentum = 0.9f;
  p.weight_decay = 0.1f;
  sgd_update(&w, 0.5f, &buf, p);
  EXPECT_NEAR(buf, 0.5f, 1e-7f);
  EXPECT_NEAR(w, 1.0f - 0.01f - 0.05f, 1e-6f);
  sgd_update(&w, 0.5f, &buf, p);
  EXPECT_NEAR(buf, 0.95f, 1e-6f);
  EXPECT_NEAR(w, 0.94f - 0.1f * 0.1f * 0.94f - 0.095f, 1e-6f);
}

TEST(CpuCommonRope, RotationAndInverse) {
  EXPECT_EQ(rope_angle(0, 3, 16), 0.0f);
  EXPECT_NEAR(rope_angle(5, 0, 16), 5.0f, 1e-6f);
  EXPECT_NEAR(rope_angle(1, 4, 16), 0.01f, 1e-7f);  // 10000^(-8/16) = 1/100
  float a = 1.0f, b = 0.0f;
  rope_rotate(&a, &b, 1.5707963f, false);  // quarter turn: (1,0) -> (0,1)
  EXPECT_NEAR(a, 0.0f, 1e-6f);
  EXPECT_NEAR(b, 1.0f, 1e-6f);
  float x0 = 0.3f, x1 = -0.8f;
  rope_rotate(&x0, &x1, 0.7f, false);
  rope_rotate(&x0, &x1, 0.7f, true);
  EXPECT_NEAR(x0, 0.3f, 1e-6f);
  EXPECT_NEAR(x1, -0.8f, 1e-6f);
}

}  // namespace
}  // namespace vrambench
