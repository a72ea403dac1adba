// The allocator's share of the estimate: the step program's own allocations and frees, replayed
// through the allocator policy (src/alloc/caching.cpp; `direct` rounds each tensor to its own
// segment) on a virtual source of the device's capacity (or without a limit, for what a step that
// does not fit needs). What the caching allocator reserves beyond the tensors depends on the order
// of the step's allocations and frees (which freed block each new tensor is carved from, which
// segment a survivor pins), so the estimate follows that order rather than a formula;
// docs/memory-model.md, "The allocator".
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "alloc/caching.h"
#include "alloc/virtual_source.h"
#include "core/error.h"
#include "core/units.h"
#include "estimate/replay.h"

namespace vrambench::estimate_replay {
namespace {

Bytes bytes_at(const TensorEvent& e, std::int64_t batch) {
  return checked_add(e.fixed, checked_mul(batch, e.per_sample, "tensor bytes"), "tensor bytes");
}

// One caching replay in progress: the allocator, its source and the blocks of the live slots.
struct CachingReplay {
  VirtualSource source;
  CachingAllocator allocator;
  std::vector<Block> blocks;

  explicit CachingReplay(Bytes capacity) : source(capacity), allocator(source) {}
  // `other`'s state, handed segments up to `capacity` from now on.
  CachingReplay(const CachingReplay& other, Bytes capacity)
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
      const Bytes bytes = bytes_at(e, batch);
      const std::optional<Block> block =
          retry ? allocator.allocate(bytes) : allocator.allocate_without_retry(bytes);
      if (!block) return i;
      assign_fields(blocks[slot], *block);
    }
    return events.size();
  }
};

ReplayedPeak caching_peak(const TensorEvents& events, std::int64_t batch, Bytes capacity) {
  CachingReplay replay(capacity);
  std::int32_t slots = 0;
  for (const TensorEvent& e : events) slots = std::max(slots, e.slot + 1);
  replay.blocks.resize(static_cast<std::size_t>(slots));
  // Until the source first refuses a segment, the replay at the capacity and one without a limit
  // are the same; from there the first frees its cache and retries, the second goes on.
  const std::size_t refused = replay.run(events, 0, batch, false);
  if (refused == events.size()) return {replay.allocator.stats().reserved_peak, true};
  CachingReplay unlimited(replay, std::numeric_limits<Bytes>::max());
  if (replay.run(events, refused, batch, true) == events.size())
    return {replay.allocator.stats().reserved_peak, true};
  if (unlimited.run(events, refused, batch, true) != events.size())
    throw InternalError("allocator replay: an allocation failed without a limit");
  return {unlimited.allocator.stats().reserved_peak, false};
}

// Raw cudaMalloc: a segment per tensor, rounded (direct_segment_bytes), returned at its free; a
// request fails where the segments in use would pass the capacity, so the step fits exactly when
// its peak does.
ReplayedPeak direct_peak(const TensorEvents& events, std::int64_t batch, Bytes capacity) {
  std::int32_t slots = 0;
  for (const TensorEvent& e : events) slots = std::max(slots, e.slot + 1);
  std::vector<Bytes> held(static_cast<std::size_t>(slots), 0);
  Bytes reserved = 0, peak = 0;
  for (const TensorEvent& e : events) {
    Bytes& segment = held[static_cast<std::size_t>(e.slot)];
    if (!e.alloc) {
      reserved -= segment;
      continue;
    }
    segment = direct_segment_bytes(bytes_at(e, batch));
    reserved = checked_add(reserved, segment, "reserved bytes");
    peak = std::max(peak, reserved);
  }
  return {peak, peak <= capacity};
}

// Adds `fixed + batch * per_sample` (the allocator's share) to every moment of `out`.
void add_allocator_share(Breakdown& out, Bytes fixed, Bytes per_sample) {
  constexpr MemoryComponent kShare = MemoryComponent::allocator_fragmentation;
  if (fixed > 0) out.fixed.push_back({kShare, fixed});
  if (per_sample > 0) out.per_sample.push_back({kShare, per_sample});
  for (Moment& m : out.other_moments) {
    m.fixed = checked_add(m.fixed, fixed, "allocator share");
    m.per_sample = checked_add(m.per_sample, per_sample, "allocator share");
  }
}

// Where the search below stops looking when the tensors alone would allow more.
constexpr std::int64_t kLargestBatch = std::int64_t{1} << 24;

}  // namespace

TensorEvents step_events(const Program& program, const Schedule& schedule,
                         const std::vector<BatchScaledProgram::Line>& lines) {
  TensorEvents events;
  events.reserve(schedule.events().size());
  for (const RunEvent& e : schedule.events()) {
    if (e.kind != RunEvent::Kind::alloc && e.kind != RunEvent::Kind::free) continue;
    if (!program.tensor(e.id).on_device()) continue;
    if (e.kind == RunEvent::Kind::free) {
      events.push_back({e.id, false, 0, 0});
      continue;
    }
    const auto i = static_cast<std::size_t>(e.id);
    const BatchScaledProgram::Line line =
        lines.empty() ? BatchScaledProgram::Line{program.tensors[i].bytes, 0} : lines[i];
    events.push_back({e.id, true, line.intercept, line.slope});
  }
  return events;
}

ReplayedPeak replayed_peak(const TensorEvents& events, std::int64_t batch, AllocatorKind allocator,
                           Bytes capacity) {
  return allocator == AllocatorKind::caching ? caching_peak(events, batch, capacity)
                                             : direct_peak(events, batch, capacity);
}

void fit_allocator_share(Breakdown& out, const TensorEvents& events, const TensorEvents& batch_one,
                         const RunConfig& cfg, const DeviceOverhead& overhead) {
  std::vector<std::pair<std::int64_t, Bytes>> seen;  // batch, replayed device peak
  const Bytes limit = overhead.capacity > overhead.context ? overhead.capacity - overhead.context
                                                           : std::numeric_limits<Bytes>::max();
  auto replayed = [&](std::int64_t batch) {
    for (const auto& [b, peak] : seen)
      if (b == batch) return peak;
    // On the device when it fits there (its cache freed and retried at the limit, as a trial's
    // is); else what it needs, without a limit.
    const TensorEvents& step = batch == 1 && !batch_one.empty() ? batch_one : events;
    const Bytes peak = checked_add(replayed_peak(step, batch, cfg.allocator, limit).reserved,
                                   overhead.context, "replayed peak");
    seen.emplace_back(batch, peak);
    return peak;
  };
  std::int64_t at = std::max<std::int64_t>(cfg.batch, 1);
  if (overhead.capacity > 0 && !overhead.share_at_batch) {
    // The largest batch whose replay fits, in a bracket: batch 0 fits, and past the tensors' own
    // largest batch nothing does. Each probe is a guess, the tensors' line plus the share per
    // sample the last replay showed (a failure's is too large, a fit's too small near a cliff,
    // so they close in from both sides), unless the guess leaves the bracket or two probes in a
    // row fell on the same side: then its middle.
    const Bytes capacity = overhead.capacity;
    const std::int64_t most = std::clamp<std::int64_t>(out.max_batch(capacity), 1, kLargestBatch);
    std::int64_t lo = 0, hi = most + 1;
    std::int64_t guess = most;
    int in_a_row = 0;
    bool last_fit = false;
    while (hi - lo > 1) {
      const bool creeping = in_a_row >= 2;
      const std::int64_t b = guess > lo && guess < hi && !creeping ? guess : lo + (hi - lo) / 2;
      const Bytes peak = replayed(b);
      const bool fit = peak <= capacity;
      in_a_row = fit == last_fit && !creeping ? in_a_row + 1 : 1;
      last_fit = fit;
      (fit ? lo : hi) = b;
      guess = out.max_batch(capacity, std::max<Bytes>(peak - out.peak(b), 0) / b);
      if (fit && guess <= b) guess = b + 1;
    }
    at = std::max<std::int64_t>(lo, 1);
  }
  const Bytes tensors_at = out.peak(at), tensors_next = out.peak(at + 1);
  const Bytes share_at = std::max<Bytes>(replayed(at) - tensors_at, 0);
  const Bytes share_next = std::max<Bytes>(replayed(at + 1) - tensors_next, 0);
  // The line through both; a share that shrinks with the batch is held at its larger value.
  Bytes per_sample = share_next - share_at;
  Bytes fixed = share_at - at * per_sample;
  if (per_sample < 0) {
    per_sample = 0;
    fixed = share_at;
  } else if (fixed < 0) {
    // A cliff: the next batch needs much more than the line from no share at all would give (at
    // the largest batch that fits, the allocator freed its cache and retried; at the next one
    // that no longer helps). The share is the line from the origin to `at`, its slope rounded
    // down and the remainder fixed, so that the peak at `at` is the replay's to the byte (rounded
    // up, a replay that filled the capacity exactly was estimated a few bytes over it, one batch
    // short); a moment of its own, the line through both replays, holds the next batch to what it
    // needs.
    per_sample = share_at / at;
    fixed = share_at - at * per_sample;
    add_allocator_share(out, fixed, per_sample);
    const Bytes steep = replayed(at + 1) - replayed(at);
    out.other_moments.push_back(
        {"allocator: the next batch after its cache is freed", replayed(at) - at * steep, steep});
    return;
  }
  add_allocator_share(out, fixed, per_sample);
}

}  // namespace vrambench::estimate_replay
