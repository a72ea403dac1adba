// The estimate's replay of the caching allocator (estimate/allocator_share.cpp), which runs a step
// at the device's capacity and, where it fails, goes on without a limit from the first refused
// segment: the same peaks as two replays from the start, at capacities where the step fits at
// once, fits only after the allocator freed its cache, and does not fit.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "alloc/allocator.h"
#include "estimate/walk.h"
#include "estimate_grid.h"

namespace vrambench {
namespace {

using estimate_walk::TensorEvents;

struct Plain {
  std::optional<Bytes> reserved_peak;  // nullopt: an allocation failed
  std::int64_t retries = 0;
};

// The step from its start through the allocator's public interface, as a trial would run it.
Plain plain_replay(const TensorEvents& events, std::int64_t batch, Bytes capacity) {
  const std::unique_ptr<SegmentSource> source = make_virtual_source(capacity);
  const std::unique_ptr<Allocator> allocator = make_caching_allocator(*source);
  std::vector<Block> blocks;
  for (const estimate_walk::TensorEvent& e : events) {
    const auto slot = static_cast<std::size_t>(e.slot);
    if (!e.alloc) {
      allocator->free(blocks[slot]);
      continue;
    }
    if (slot >= blocks.size()) blocks.resize(slot + 1);
    const std::optional<Block> block = allocator->allocate(e.fixed + batch * e.per_sample);
    if (!block) return {std::nullopt, allocator->stats().retries};
    blocks[slot] = *block;
  }
  return {allocator->stats().reserved_peak, allocator->stats().retries};
}

TEST(EstimateReplay, ForkedReplayGivesThePeaksOfTwoReplaysFromTheStart) {
  int fit_at_once = 0, fit_after_retry = 0, failed = 0;
  for (std::string_view preset : {"tiny", "tiny-llama"})
    for (Attention att : {Attention::eager, Attention::flash})
      for (Recompute rc : {Recompute::none, Recompute::full}) {
        RunConfig cfg = testing_grid::grid_config(preset, 256, Precision::bf16, att, rc,
                                                  Optimizer::adamw, AllocatorKind::caching);
        cfg.framework = Framework::hf;
        TensorEvents events;
        estimate_walk::walk_hf(cfg, DeviceOverhead{0, 4 * MiB}, &events);
        for (std::int64_t batch : {2, 7}) {
          const Bytes unlimited =
              *plain_replay(events, batch, std::numeric_limits<Bytes>::max()).reserved_peak;
          // From well below the peak to above it, in steps finer than a segment of 20 MiB.
          for (Bytes capacity = unlimited / 2; capacity <= unlimited + 8 * MiB;
               capacity += 3 * MiB) {
            const Plain at_capacity = plain_replay(events, batch, capacity);
            const estimate_walk::ReplayedPeak got =
                estimate_walk::replayed_peak(events, batch, capacity);
            EXPECT_EQ(got.fits, at_capacity.reserved_peak.has_value())
                << preset << " B=" << batch << " capacity " << capacity;
            EXPECT_EQ(got.reserved, at_capacity.reserved_peak.value_or(unlimited))
                << preset << " B=" << batch << " capacity " << capacity;
            if (!at_capacity.reserved_peak)
              ++failed;
            else
              ++(at_capacity.retries > 0 ? fit_after_retry : fit_at_once);
          }
        }
      }
  // Every way a replay can end was met.
  EXPECT_GT(fit_at_once, 0);
  EXPECT_GT(fit_after_retry, 0);
  EXPECT_GT(failed, 0);
}

}  // namespace
}  // namespace vrambench
