// The fused-attention kernels' host side, no GPU needed: launch geometry (grid, block, shared
// memory, tiles) for shapes up to grids past 65535 blocks, the tile and block index math the
// kernels share with the host, shape and shared-memory checks, and the backward's scratch check,
// which refuses a short scratch before anything is launched.
#include <gtest/gtest.h>

#include <climits>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>

#include "cuda/attention_flash.h"

namespace vrambench::cuda {
namespace {

constexpr std::int64_t kF32 = 4;

TEST(FlashLaunch, Gpt2ShapeInTilesOf64) {
  const FlashShape s{8, 1024, 12, 12, 64, 0.1f, 1};
  const FlashLaunch fwd = flash_launch(FlashKernel::forward, s);
  EXPECT_EQ(fwd.head_dim_class, 64);
  EXPECT_EQ(fwd.tile, 64);
  EXPECT_EQ(fwd.threads, 256);
  EXPECT_EQ(fwd.blocks, 8 * 12 * 16);
  EXPECT_EQ(fwd.shared_bytes, 2 * 64 * 65 * kF32);  // q and k|v tiles, rows of 65 floats
  EXPECT_LE(fwd.shared_bytes, kFlashDefaultSharedBytes);

  const FlashLaunch dq = flash_launch(FlashKernel::dq, s);
  EXPECT_EQ(dq.tile, 64);
  EXPECT_EQ(dq.blocks, 8 * 12 * 16);
  EXPECT_EQ(dq.shared_bytes, 3 * 64 * 65 * kF32);

  const FlashLaunch dkv = flash_launch(FlashKernel::dkv, s);
  EXPECT_EQ(dkv.tile, 64);
  EXPECT_EQ(dkv.blocks, 8 * 12 * 16);
  EXPECT_EQ(dkv.shared_bytes, 4 * 64 * 65 * kF32);

  const FlashLaunch delta = flash_launch(FlashKernel::delta, s);
  EXPECT_EQ(delta.threads, 256);
  EXPECT_EQ(delta.shared_bytes, 0);
  EXPECT_EQ(delta.blocks, 8 * 12 * 1024 / 8);  // a warp per query row, 8 warps a block
}

TEST(FlashLaunch, GroupedQueryHeadsAndPartialTiles) {
  // D = 128: the forward keeps 64-row tiles, the backward takes 32 rows (three and four tiles).
  const FlashShape s{2, 100, 32, 8, 128, 0.0f, 0};
  const FlashLaunch fwd = flash_launch(FlashKernel::forward, s);
  EXPECT_EQ(fwd.tile, 64);
  EXPECT_EQ(fwd.blocks, 2 * 32 * 2);  // ceil(100 / 64) = 2
  EXPECT_EQ(fwd.shared_bytes, 2 * 64 * 129 * kF32);
  const FlashLaunch dq = flash_launch(FlashKernel::dq, s);
  EXPECT_EQ(dq.tile, 32);
  EXPECT_EQ(dq.blocks, 2 * 32 * 4);  // ceil(100 / 32) = 4
  EXPECT_EQ(dq.shared_bytes, 3 * 32 * 129 * kF32);
  const FlashLaunch dkv = flash_launch(FlashKernel::dkv, s);
  EXPECT_EQ(dkv.tile, 32);
  EXPECT_EQ(dkv.blocks, 2 * 8 * 4);  // a block per kv head
  EXPECT_EQ(dkv.shared_bytes, 4 * 32 * 129 * kF32);
}

TEST(FlashLaunch, HeadSizeClasses) {
  EXPECT_EQ(flash_head_dim_class(1), 32);
  EXPECT_EQ(flash_head_dim_class(32), 32);
  EXPECT_EQ(flash_head_dim_class(33), 64);
  EXPECT_EQ(flash_head_dim_class(80), 96);
  EXPECT_EQ(flash_head_dim_class(96), 96);
  EXPECT_EQ(flash_head_dim_class(128), 128);
  EXPECT_EQ(flash_head_dim_class(160), 256);
  EXPECT_EQ(flash_head_dim_class(256), 256);
  EXPECT_THROW(flash_head_dim_class(257), std::invalid_argument);
  // Odd shared rows, whatever D: the 16 rows a half-warp reads at one column hit 16 banks.
  for (std::int64_t d : {1, 7, 64, 80, 128, 255, 256}) {
    EXPECT_EQ(flash_shared_stride(d) % 2, 1) << d;
    EXPECT_GE(flash_shared_stride(d), d);
    EXPECT_LE(flash_shared_stride(d), d + 1);
  }
  const FlashShape d80{1, 64, 2, 2, 80, 0.0f, 0};
  EXPECT_EQ(flash_launch(FlashKernel::forward, d80).shared_bytes, 2 * 64 * 81 * kF32);
  const FlashShape d256{1, 64, 2, 2, 256, 0.0f, 0};
  for (FlashKernel k : {FlashKernel::forward, FlashKernel::dq, FlashKernel::dkv})
    EXPECT_EQ(flash_launch(k, d256).tile, 32);
  EXPECT_EQ(flash_launch(FlashKernel::dkv, d256).shared_bytes, 4 * 32 * 257 * kF32);
}

TEST(FlashLaunch, GridsPast65535BlocksUseTheFirstDimension) {
  const FlashShape s{64, 2048, 32, 8, 128, 0.0f, 0};
  EXPECT_EQ(flash_launch(FlashKernel::forward, s).blocks, 64LL * 32 * 32);
  EXPECT_EQ(flash_launch(FlashKernel::dq, s).blocks, 64LL * 32 * 64);
  EXPECT_EQ(flash_launch(FlashKernel::dkv, s).blocks, 64LL * 8 * 64);
  EXPECT_GT(flash_launch(FlashKernel::dq, s).blocks, 65535);
  // Past 2^31 - 1 blocks there is no grid: refused with the count.
  const FlashShape huge{1 << 20, 1 << 16, 64, 64, 64, 0.0f, 0};
  try {
    flash_launch(FlashKernel::forward, huge);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(INT_MAX)), std::string::npos) << e.what();
  }
}

TEST(FlashLaunch, EmptyShapesLaunchNothing) {
  for (FlashKernel k :
       {FlashKernel::forward, FlashKernel::delta, FlashKernel::dq, FlashKernel::dkv}) {
    EXPECT_EQ(flash_launch(k, FlashShape{0, 16, 2, 2, 64, 0.0f, 0}).blocks, 0);
    EXPECT_EQ(flash_launch(k, FlashShape{2, 0, 2, 2, 64, 0.0f, 0}).blocks, 0);
  }
  EXPECT_NO_THROW(launch_flash_fwd(DType::bf16, nullptr, nullptr, nullptr,
                                   FlashShape{0, 16, 2, 2, 64, 0.0f, 0}, nullptr));
  EXPECT_NO_THROW(launch_flash_bwd(DType::bf16, nullptr, nullptr, 0, nullptr, nullptr, nullptr,
                                   nullptr, FlashShape{2, 0, 2, 2, 64, 0.0f, 0}, nullptr));
}

TEST(FlashTiles, EveryBlockOwnsOneTile) {
  // Blocks ((b * heads) + h) * tiles + t cover every (batch, head, tile) exactly once.
  const std::int64_t batch = 3, heads = 5, seq = 130;
  const std::int64_t tiles = flash_tiles(seq, 64);
  EXPECT_EQ(tiles, 3);
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> seen;
  for (std::int64_t block = 0; block < batch * heads * tiles; ++block) {
    const FlashTile t = flash_tile_of_block(block, heads, tiles);
    ASSERT_GE(t.batch, 0);
    ASSERT_LT(t.batch, batch);
    ASSERT_GE(t.head, 0);
    ASSERT_LT(t.head, heads);
    ASSERT_GE(t.tile, 0);
    ASSERT_LT(t.tile, tiles);
    seen.insert({t.batch, t.head, t.tile});
  }
  EXPECT_EQ(static_cast<std::int64_t>(seen.size()), batch * heads * tiles);
  const FlashTile last = flash_tile_of_block(batch * heads * tiles - 1, heads, tiles);
  EXPECT_EQ(last.batch, batch - 1);
  EXPECT_EQ(last.head, heads - 1);
  EXPECT_EQ(last.tile, tiles - 1);
  EXPECT_EQ(flash_tiles(1, 64), 1);
  EXPECT_EQ(flash_tiles(64, 64), 1);
  EXPECT_EQ(flash_tiles(65, 64), 2);
  EXPECT_EQ(flash_tiles(100, 32), 4);
}

TEST(FlashTiles, CausalVisibility) {
  EXPECT_TRUE(flash_visible(5, 0, 10));
  EXPECT_TRUE(flash_visible(5, 5, 10));
  EXPECT_FALSE(flash_visible(5, 6, 10));
  EXPECT_TRUE(flash_visible(0, 0, 1));
  // A padding query row (past the sequence) sees only real keys, key 0 among them.
  EXPECT_TRUE(flash_visible(12, 0, 10));
  EXPECT_TRUE(flash_visible(12, 9, 10));
  EXPECT_FALSE(flash_visible(12, 10, 10));
  // Tile bounds: the last key tile a query tile sees is its own.
  for (int tile : {32, 64})
    for (std::int64_t q_tile = 0; q_tile < 4; ++q_tile) {
      const std::int64_t last_row = q_tile * tile + tile - 1, next_key = (q_tile + 1) * tile;
      EXPECT_FALSE(flash_visible(last_row, next_key, 1 << 20));
      EXPECT_TRUE(flash_visible(q_tile * tile, q_tile * tile, 1 << 20));
    }
}

TEST(FlashShapes, RejectsWhatTheKernelsCannotTake) {
  try {
    check_flash_shape(FlashShape{1, 4, 4, 4, 512, 0, 0});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_flash_shape(FlashShape{1, 4, 4, 4, 0, 0, 0}), std::invalid_argument);
  EXPECT_THROW(check_flash_shape(FlashShape{1, 4, 6, 4, 64, 0, 0}), std::invalid_argument);
  EXPECT_THROW(check_flash_shape(FlashShape{1, 4, 4, 0, 64, 0, 0}), std::invalid_argument);
  EXPECT_THROW(check_flash_shape(FlashShape{-1, 4, 4, 4, 64, 0, 0}), std::invalid_argument);
  EXPECT_THROW(flash_launch(FlashKernel::forward, FlashShape{1, 4, 6, 4, 64, 0, 0}),
               std::invalid_argument);
  EXPECT_NO_THROW(check_flash_shape(FlashShape{1, 4, 8, 2, 128, 0, 0}));
  EXPECT_NO_THROW(check_flash_shape(FlashShape{1, 4, 8, 2, 256, 0, 0}));
  EXPECT_NO_THROW(check_flash_shape(FlashShape{1, 1, 1, 1, 1, 0, 0}));
}

TEST(FlashShapes, SharedMemoryAboveTheDeviceLimitIsRefused) {
  const FlashLaunch dkv = flash_launch(FlashKernel::dkv, FlashShape{1, 64, 2, 2, 256, 0, 0});
  EXPECT_NO_THROW(check_flash_shared(dkv, 227 * 1024, "flash_bwd_dkv_kernel"));  // sm_90
  EXPECT_NO_THROW(check_flash_shared(dkv, 163 * 1024, "flash_bwd_dkv_kernel"));  // sm_80
  try {
    check_flash_shared(dkv, 99 * 1024, "flash_bwd_dkv_kernel");  // sm_86 / sm_89
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(99 * 1024)), std::string::npos) << what;
    EXPECT_NE(what.find("flash_bwd_dkv_kernel"), std::string::npos) << what;
  }
  // Up to D = 128 every kernel fits the 99 KB of the smallest opt-in limit since sm_80.
  for (std::int64_t d : {32, 64, 80, 96, 128})
    for (FlashKernel k : {FlashKernel::forward, FlashKernel::dq, FlashKernel::dkv})
      EXPECT_NO_THROW(check_flash_shared(flash_launch(k, FlashShape{1, 64, 2, 2, d, 0, 0}),
                                         99 * 1024, "kernel"));
}

TEST(FlashScratch, BackwardScratchIsTheProgramsWorkspace) {
  // fp32 [B,A,S,D] then [B,A,S]: delta lives in the second region.
  const FlashShape s{2, 100, 8, 2, 64, 0.0f, 0};
  EXPECT_EQ(flash_bwd_scratch_bytes(s), 2 * 8 * 100 * (64 + 1) * kF32);
  EXPECT_EQ(flash_delta_offset(s), 2 * 8 * 100 * 64);
  EXPECT_EQ(flash_delta_offset(s) * kF32 + 2 * 8 * 100 * kF32, flash_bwd_scratch_bytes(s));
}

TEST(FlashScratch, ShortScratchIsRefusedBeforeAnyLaunch) {
  const FlashShape s{2, 100, 8, 2, 64, 0.0f, 0};
  const Bytes need = flash_bwd_scratch_bytes(s);
  // No pointer is dereferenced and no stream touched: the check comes first.
  try {
    launch_flash_bwd(DType::bf16, nullptr, nullptr, need - 1, nullptr, nullptr, nullptr, nullptr, s,
                     nullptr);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(need)), std::string::npos) << e.what();
  }
  EXPECT_THROW(launch_flash_bwd(DType::f32, nullptr, nullptr, need, nullptr, nullptr, nullptr,
                                nullptr, s, nullptr),
               std::invalid_argument)
      << "a null scratch pointer";
  EXPECT_THROW(launch_flash_bwd(DType::f32, nullptr, nullptr, need, nullptr, nullptr, nullptr,
                                nullptr, FlashShape{2, 100, 8, 3, 64, 0.0f, 0}, nullptr),
               std::invalid_argument)
      << "a bad shape";
}

}  // namespace
}  // namespace vrambench::cuda
