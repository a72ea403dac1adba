// The host side of the moe family's CUDA launchers, checked without a GPU: the experts' rows from
// the dispatch's offsets, the plan and operand offsets of each expert's GEMM, and the refusal of a
// top-k the router kernels do not keep per thread.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "common/moe_math.h"
#include "cuda/moe.h"

namespace vrambench::cuda {
namespace {

TEST(MoeLaunch, ExpertRowsSkipEmptyExpertsAndCheckTheOffsets) {
  // Four experts over 10 pairs: 3, none, 7, none.
  const std::vector<ExpertRows> rows = expert_rows({3, 3, 10, 10}, 10);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].expert, 0);
  EXPECT_EQ(rows[0].first, 0);
  EXPECT_EQ(rows[0].rows, 3);
  EXPECT_EQ(rows[1].expert, 2);
  EXPECT_EQ(rows[1].first, 3);
  EXPECT_EQ(rows[1].rows, 7);
  EXPECT_THROW(expert_rows({3, 2, 10, 10}, 10), std::invalid_argument);  // decreasing
  EXPECT_THROW(expert_rows({3, 3, 9, 9}, 10), std::invalid_argument);    // short of the pairs
}

TEST(MoeLaunch, EachExpertsGemmReadsItsWeightAndRows) {
  const ExpertRows e{2, 5, 7};  // expert 2, rows 5..11
  const std::int64_t in = 16, out = 24;
  const ExpertGemm fwd = expert_fwd_gemm(e, in, out);
  const GemmPlan want = plan_linear_fwd(7, in, out);
  EXPECT_EQ(fwd.plan.key(), want.key());
  EXPECT_EQ(fwd.w_offset, 2 * out * in);
  EXPECT_EQ(fwd.x_offset, 5 * in);
  EXPECT_EQ(fwd.y_offset, 5 * out);
  EXPECT_EQ(expert_dx_gemm(e, in, out).plan.key(), plan_linear_bwd_dx(7, in, out).key());
  // The weight gradient of an expert is overwritten: experts without rows are zeroed apart.
  EXPECT_EQ(expert_dw_gemm(e, in, out).plan.key(), plan_linear_bwd_dw(7, in, out, false).key());
}

TEST(MoeLaunch, TheRouterRefusesATopKPastWhatAThreadKeeps) {
  EXPECT_THROW(launch_router_topk(DType::f32, nullptr, nullptr, DType::f32, nullptr, nullptr, 1,
                                  kmath::kMaxTopK + 1, kmath::kMaxTopK + 1, false, true, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace vrambench::cuda
