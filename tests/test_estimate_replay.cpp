// The estimate's replay of the allocators (estimate/allocator_share.cpp), over the step program's
// allocations and frees. The caching one runs a step at the device's capacity and, where it fails,
// goes on without a limit from the first refused segment: the same peaks as two replays from the
// start, at capacities where the step fits at once, fits only after the allocator freed its cache,
// and does not fit. The direct one is its rounding summed: the same peaks as the policy's own.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "alloc/allocator.h"
#include "device/device.h"
#include "estimate/replay.h"
#include "estimate_grid.h"
#include "program/program.h"

namespace vrambench {
namespace {

using estimate_replay::TensorEvents;

struct Plain {
  std::optional<Bytes> reserved_peak;  // nullopt: an allocation failed
  std::int64_t retries = 0;
};

// The step from its start through the allocator's public interface, as a trial would run it.
Plain plain_replay(const TensorEvents& events, std::int64_t batch, Bytes capacity,
                   AllocatorKind kind = AllocatorKind::caching) {
  const std::unique_ptr<SegmentSource> source = make_virtual_source(capacity);
  const std::unique_ptr<Allocator> allocator = make_allocator(kind, *source);
  std::vector<Block> blocks;
  for (const estimate_replay::TensorEvent& e : events) {
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

// The events of a sim trial of cfg's step program at batch 2 (two steps), each tensor's bytes its
// line in the batch.
TensorEvents events_of(const RunConfig& cfg) {
  BatchScaledProgram step(cfg, 4 * MiB);
  const Program& program = step.at(2);
  return estimate_replay::step_events(program, step.schedule(), step.byte_lines());
}

TEST(EstimateReplay, ForkedReplayGivesThePeaksOfTwoReplaysFromTheStart) {
  int fit_at_once = 0, fit_after_retry = 0, failed = 0;
  for (std::string_view preset : {"tiny", "tiny-llama"})
    for (Attention att : {Attention::eager, Attention::flash})
      for (Recompute rc : {Recompute::none, Recompute::full}) {
        RunConfig cfg = testing_grid::grid_config(preset, 256, Precision::bf16, att, rc,
                                                  Optimizer::adamw, AllocatorKind::caching);
        cfg.framework = Framework::hf;
        const TensorEvents events = events_of(cfg);
        for (std::int64_t batch : {2, 7}) {
          const Bytes unlimited =
              *plain_replay(events, batch, std::numeric_limits<Bytes>::max()).reserved_peak;
          // From well below the peak to above it, in steps finer than a segment of 20 MiB.
          for (Bytes capacity = unlimited / 2; capacity <= unlimited + 8 * MiB;
               capacity += 3 * MiB) {
            const Plain at_capacity = plain_replay(events, batch, capacity);
            const estimate_replay::ReplayedPeak got =
                estimate_replay::replayed_peak(events, batch, AllocatorKind::caching, capacity);
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

TEST(EstimateReplay, DirectReplayIsThePolicysOwn) {
  int fits = 0, fails = 0;
  for (std::string_view preset : {"tiny", "tiny-llama"})
    for (Finetune finetune : {Finetune::full, Finetune::qlora}) {
      RunConfig cfg =
          testing_grid::grid_config(preset, 256, Precision::bf16, Attention::flash, Recompute::none,
                                    Optimizer::adamw, AllocatorKind::direct);
      cfg.framework = Framework::lean;
      cfg.finetune = finetune;
      const TensorEvents events = events_of(cfg);
      for (std::int64_t batch : {2, 5}) {
        const Bytes unlimited =
            *plain_replay(events, batch, std::numeric_limits<Bytes>::max(), AllocatorKind::direct)
                 .reserved_peak;
        for (Bytes capacity : {unlimited - 1, unlimited, unlimited + 1}) {
          const Plain plain = plain_replay(events, batch, capacity, AllocatorKind::direct);
          const estimate_replay::ReplayedPeak got =
              estimate_replay::replayed_peak(events, batch, AllocatorKind::direct, capacity);
          EXPECT_EQ(got.fits, plain.reserved_peak.has_value()) << preset << " B=" << batch;
          EXPECT_EQ(got.reserved, plain.reserved_peak.value_or(unlimited)) << preset;
          ++(got.fits ? fits : fails);
        }
      }
    }
  EXPECT_EQ(fits, 16);
  EXPECT_EQ(fails, 8);
}

}  // namespace
}  // namespace vrambench
