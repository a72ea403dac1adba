// The estimate against the step replayed through the allocators (sim) over a grid of gpt2
// configurations: the closed form with the caching allocator's replayed share within the issue's
// bounds of what that allocator reserves, and `direct` (tensor bytes alone) as close as it is.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/presets.h"
#include "device/device.h"
#include "search/measure.h"

namespace vrambench {
namespace {

struct GridError {
  double most_over = 0.0;   // largest (est - sim) / sim
  double most_under = 0.0;  // smallest, negative when est is below sim
  int configurations = 0;
};

// gpt2 on the h100-80gb profile, bf16, at S = 1024 and 8192, every attention and recompute mode.
GridError grid_error(AllocatorKind allocator) {
  GridError out;
  for (std::int64_t S : {1024, 8192})
    for (Attention attention : {Attention::eager, Attention::flash})
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
        RunConfig cfg;
        cfg.framework = Framework::lean;
        cfg.model = find_preset("gpt2").model;
        cfg.seq = S;
        cfg.dtype = Precision::bf16;
        cfg.attention = attention;
        cfg.recompute = recompute;
        cfg.allocator = allocator;
        cfg.device = parse_device("sim:h100-80gb");
        const Measurement m = measure(cfg, make_device(cfg), {});
        const double err = m.relative_error();
        SCOPED_TRACE(to_string(attention));
        EXPECT_GT(m.search.max_batch, 0) << "S=" << S << " " << to_string(recompute);
        out.most_over = std::max(out.most_over, err);
        out.most_under = std::min(out.most_under, err);
        ++out.configurations;
      }
  return out;
}

TEST(EstimateAgainstSim, CachingAllocatorWithinOnePercentAndNeverHalfAPercentUnder) {
  const GridError g = grid_error(AllocatorKind::caching);
  EXPECT_EQ(g.configurations, 12);
  // Tensor bytes alone, eager attention with selective recompute at S = 8192 was 26 % below the
  // sim; a closed-form term for the attention matrices' segments read from -6 % to +24 %.
  EXPECT_GT(g.most_under, -0.005);
  EXPECT_LT(g.most_over, 0.01);
}

TEST(EstimateAgainstSim, DirectAllocatorStaysWithinHalfAPercent) {
  const GridError g = grid_error(AllocatorKind::direct);
  EXPECT_EQ(g.configurations, 12);
  EXPECT_GT(g.most_under, -0.005);
  EXPECT_LT(g.most_over, 0.005);
}

}  // namespace
}  // namespace vrambench
