// The fused-attention bodies run over their whole grid on the CPU and compared with the CPU
// reference (kernels/cpu flash_fwd/flash_bwd), with GQA and with dropout. No GPU needed.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cpu/attention.h"
#include "cuda/flash.h"

namespace vrambench::cuda {
namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Case {
  std::int64_t B, S, A, K, D;
  float p;
};

class FlashBodies : public ::testing::TestWithParam<Case> {};

TEST_P(FlashBodies, MatchCpuReference) {
  const Case c = GetParam();
  const FlashShape s{c.B, c.S, c.A, c.K, c.D, c.p, 1234};
  const cpu::AttnShape r{c.B, c.S, c.A, c.K, c.D};
  const auto qkv = random_floats(c.B * c.S * s.width(), 1);
  const auto dy = random_floats(c.B * c.S * c.A * c.D, 2);
  std::vector<float> y(dy.size()), lse(c.B * c.A * c.S), want_y(y.size()), want_lse(lse.size());
  for (std::int64_t row = 0; row < c.B * c.A * c.S; ++row)
    flash_fwd_body(row, y.data(), lse.data(), qkv.data(), s);
  cpu::flash_fwd(want_y.data(), want_lse.data(), qkv.data(), r, c.p, 1234);
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want_y[i], 1e-4) << "y " << i;
  for (std::size_t i = 0; i < lse.size(); ++i)
    ASSERT_NEAR(lse[i], want_lse[i], 1e-4) << "lse " << i;

  std::vector<float> dqkv(qkv.size(), 9.0f), want(qkv.size());
  for (std::int64_t row = 0; row < c.B * c.A * c.S; ++row)
    flash_bwd_dq_body(row, dqkv.data(), dy.data(), qkv.data(), y.data(), lse.data(), s);
  for (std::int64_t row = 0; row < c.B * c.K * c.S; ++row)
    flash_bwd_dkv_body(row, dqkv.data(), dy.data(), qkv.data(), y.data(), lse.data(), s);
  cpu::flash_bwd(want.data(), dy.data(), qkv.data(), want_y.data(), want_lse.data(), r, c.p, 1234);
  for (std::size_t i = 0; i < dqkv.size(); ++i) ASSERT_NEAR(dqkv[i], want[i], 2e-4) << "dqkv " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashBodies,
                         ::testing::Values(Case{2, 7, 2, 2, 4, 0.0f}, Case{1, 9, 4, 2, 8, 0.0f},
                                           Case{2, 6, 4, 1, 4, 0.3f}, Case{1, 5, 2, 2, 16, 0.5f}));

TEST(FlashShapes, RejectsWhatTheKernelsCannotTake) {
  EXPECT_THROW(check_flash_shape(FlashShape{1, 4, 4, 4, 512, 0, 0}), std::invalid_argument);
  EXPECT_THROW(check_flash_shape(FlashShape{1, 4, 6, 4, 64, 0, 0}), std::invalid_argument);
  EXPECT_NO_THROW(check_flash_shape(FlashShape{1, 4, 8, 2, 128, 0, 0}));
}

}  // namespace
}  // namespace vrambench::cuda
