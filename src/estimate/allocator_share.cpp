// The caching allocator's share of the estimate: the walk's own tensor events (walk.h), replayed
// through the caching policy (src/alloc/caching.cpp) on a virtual source of the device's capacity
// (or without a limit, for what a step that does not fit needs). What the allocator reserves
// beyond the tensors depends on the order of the step's allocations and frees (which freed block
// each new tensor is carved from, which segment a survivor pins), so the estimate follows that
// order rather than a formula; docs/memory-model.md, "The allocator".
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "alloc/caching.h"
#include "alloc/virtual_source.h"
#include "core/error.h"
#include "core/units.h"
#include "estimate/walk.h"

namespace vrambench::estimate_walk {
namespace {

// One replay in progress: the allocator, its source and the blocks of the live slots.
struct Replay {
  VirtualSource source;
  CachingAllocator allocator;
  std::vector<Block> blocks;

  explicit Replay(Bytes capacity) : source(capacity), allocator(source) {}
  // `other`'s state, handed segments up to `capacity` from now on.
  Replay(const Replay& other, Bytes capacity)
      : source(other.source, capacity), allocator(other.allocator, source), blocks(other.blocks) {}

  // Runs events[from..] and returns the index of the first allocation that failed (the events'
  // size when none did). Without `retry` an allocation fails where the source first refuses a
  // segment, with nothing changed, so that the replay can go on from there another way.
  std::size_t run(const TensorEvents& events, std::size_t from, std::int64_t batch, bool retry) {
    for (std::size_t i = from; i < events.size(); ++i) {
      const TensorEvent& e = events[i];
      const auto slot = static_cast<std::size_t>(e.slot);
      if (!e.alloc) {
        allocator.free(blocks[slot]);
        continue;
      }
      const Bytes bytes =
          checked_add(e.fixed, checked_mul(batch, e.per_sample, "tensor bytes"), "tensor bytes");
      const std::optional<Block> block =
          retry ? allocator.allocate(bytes) : allocator.allocate_without_retry(bytes);
      if (!block) return i;
      assign_fields(blocks[slot], *block);
    }
    return events.size();
  }
};

}  // namespace

ReplayedPeak replayed_peak(const TensorEvents& events, std::int64_t batch, Bytes capacity) {
  Replay replay(capacity);
  std::int32_t slots = 0;
  for (const TensorEvent& e : events) slots = std::max(slots, e.slot + 1);
  replay.blocks.resize(static_cast<std::size_t>(slots));
  // Until the source first refuses a segment, the replay at the capacity and one without a limit
  // are the same; from there the first frees its cache and retries, the second goes on.
  const std::size_t refused = replay.run(events, 0, batch, false);
  if (refused == events.size()) return {replay.allocator.stats().reserved_peak, true};
  Replay unlimited(replay, std::numeric_limits<Bytes>::max());
  if (replay.run(events, refused, batch, true) == events.size())
    return {replay.allocator.stats().reserved_peak, true};
  if (unlimited.run(events, refused, batch, true) != events.size())
    throw InternalError("allocator replay: an allocation failed without a limit");
  return {unlimited.allocator.stats().reserved_peak, false};
}

}  // namespace vrambench::estimate_walk
