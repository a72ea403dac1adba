// The host side of the logprob family's CUDA launchers, checked without a GPU: the tiles of the
// fused LM head cover each scored position of each sequence against each vocabulary column once,
// never a sequence's last position, never across two sequences, within the program's tile.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "cuda/logprob.h"

namespace vrambench::cuda {
namespace {

TEST(LogprobLaunch, TilesCoverEachScoredPositionAndColumnOnce) {
  struct Case {
    std::int64_t R, S, V, T, C;
  };
  for (const Case& c : {Case{3, 10, 7, 4, 3}, Case{1, 2, 5, 4096, 32768}, Case{2, 9, 8, 8, 8},
                        Case{4, 17, 100, 5, 64}}) {
    std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, int> seen;
    for (const LogprobTile& t : logprob_tiles(c.R, c.S, c.V, c.T, c.C)) {
      EXPECT_GE(t.n, 1);
      EXPECT_LE(t.n, c.T);
      EXPECT_GE(t.c, 1);
      EXPECT_LE(t.c, c.C);
      EXPECT_LE(t.t0 + t.n, c.S - 1);  // never the last position, never the next sequence
      EXPECT_LE(t.c0 + t.c, c.V);
      for (std::int64_t i = 0; i < t.n; ++i)
        for (std::int64_t j = 0; j < t.c; ++j) ++seen[{t.r, t.t0 + i, t.c0 + j}];
    }
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()), c.R * (c.S - 1) * c.V);
    for (const auto& [where, count] : seen) EXPECT_EQ(count, 1);
  }
}

TEST(LogprobLaunch, RefusesSizesWithNothingToScore) {
  EXPECT_THROW(logprob_tiles(1, 1, 8, 4, 4), std::invalid_argument);  // one position: no next
  EXPECT_THROW(logprob_tiles(0, 8, 8, 4, 4), std::invalid_argument);
  EXPECT_THROW(logprob_tiles(1, 8, 8, 0, 4), std::invalid_argument);
  EXPECT_THROW(logprob_tiles(1, 8, 8, 4, 0), std::invalid_argument);
}

}  // namespace
}  // namespace vrambench::cuda
