// The caching allocator's share of the estimate: the walk's own tensor events (walk.h), replayed
// through the caching policy (src/alloc/caching.cpp) on a virtual source of the device's capacity
// (or without a limit, for what a step that does not fit needs). What the allocator reserves
// beyond the tensors depends on the order of the step's allocations and frees (which freed block
// each new tensor is carved from, which segment a survivor pins), so the estimate follows that
// order rather than a formula; docs/memory-model.md, "The allocator".
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "alloc/allocator.h"
#include "core/error.h"
#include "core/units.h"
#include "estimate/walk.h"

namespace vrambench::estimate_walk {

std::optional<Bytes> replayed_reserved_peak(const TensorEvents& events, std::int64_t batch,
                                           Bytes capacity) {
  const std::unique_ptr<SegmentSource> source = make_virtual_source(capacity);
  const std::unique_ptr<Allocator> allocator = make_caching_allocator(*source);
  std::vector<Block> blocks;
  blocks.reserve(events.size());  // a slot per allocation, fewer than the events
  for (const TensorEvent& e : events) {
    const auto slot = static_cast<std::size_t>(e.slot);
    if (!e.alloc) {
      allocator->free(blocks[slot]);
      continue;
    }
    if (slot >= blocks.size()) blocks.resize(slot + 1);
    const Bytes bytes =
        checked_add(e.fixed, checked_mul(batch, e.per_sample, "tensor bytes"), "tensor bytes");
    const std::optional<Block> block = allocator->allocate(bytes);
    if (!block) return std::nullopt;
    blocks[slot] = *block;
  }
  return allocator->stats().reserved_peak;
}

}  // namespace vrambench::estimate_walk
