// The allocator's share of the estimate: the step program's own allocations and frees, replayed
// through the allocator policy (src/alloc/caching.cpp; `direct` rounds each tensor to its own
// segment) on a virtual source of the device's capacity (or without a limit, for what a step that
// does not fit needs). What the caching allocator reserves beyond the tensors depends on the order
// of the step's allocations and frees (which freed block each new tensor is carved from, which
// segment a survivor pins), so the estimate follows that order rather than a formula;
// docs/memory-model.md, "The allocator".
#include "estimate/allocator_share.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "core/units.h"

namespace vrambench::allocator_share {
namespace {

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

Bytes share_capacity(const DeviceOverhead& overhead) {
  return overhead.capacity > overhead.context ? overhead.capacity - overhead.context
                                              : std::numeric_limits<Bytes>::max() / 4;
}

void fit_allocator_share(Breakdown& out, SimRuns& runs, const RunConfig& cfg,
                         const DeviceOverhead& overhead) {
  // A batch's replayed device peak: on the device when it fits there (its cache freed and retried
  // at the limit, as a trial's is); else what it needs, without a limit. `runs` keeps each run
  // and its run without a limit once replayed, so asking again replays nothing.
  auto replayed = [&](std::int64_t batch) {
    return checked_add(runs.at(batch).needed_reserved(), overhead.context, "replayed peak");
  };
  std::int64_t at = std::max<std::int64_t>(cfg.batch, 1);
  if (overhead.capacity > 0 && !overhead.share_at_batch) {
    // The largest batch whose replay fits, in a bracket: batch 0 fits, and past the tensors' own
    // largest batch nothing does. Each probe is a guess: after a fit, the tensors' line plus the
    // share per sample its replay showed; after a failure, the batches its run lacked at the
    // capacity below it (a failure is never replayed without a limit here: only the batch after
    // the answer is); once both a fit and a failure were seen, the batch between them where the
    // room the fit left and what the failure lacked meet on a line; unless the guess leaves the
    // bracket or, once a batch fit, two probes in a row fell on the same side: then its middle.
    const Bytes capacity = overhead.capacity;
    const std::int64_t most = std::clamp<std::int64_t>(out.max_batch(capacity), 1, kLargestBatch);
    std::int64_t lo = 0, hi = most + 1;
    std::int64_t guess = most;
    int in_a_row = 0;
    bool last_fit = false;
    std::int64_t step_down = 0;  // how far the last failure's guess went below it
    // Once both ends are known: the room left at the last batch that fit and what the last one
    // that failed lacked, between which the batch where the room runs out is interpolated.
    Bytes room = -1, lacking = -1;
    auto between = [&] {
      const double part = static_cast<double>(room) / static_cast<double>(room + lacking);
      const auto ahead = static_cast<std::int64_t>(part * static_cast<double>(hi - lo));
      return std::min(lo + std::max<std::int64_t>(ahead, 1), hi - 1);
    };
    while (hi - lo > 1) {
      const bool creeping = in_a_row >= 2 && lo > 0;
      const std::int64_t b = guess > lo && guess < hi && !creeping ? guess : lo + (hi - lo) / 2;
      // A run fits on the device exactly when it fits at the capacity: one that fails there had
      // a segment refused first, which the run without a limit then takes, passing the capacity.
      const SimRun& run = runs.at(b);
      const bool fit = run.at_capacity.fit;
      in_a_row = fit == last_fit && !creeping ? in_a_row + 1 : 1;
      last_fit = fit;
      (fit ? lo : hi) = b;
      if (fit) {
        const Bytes peak = replayed(b);
        room = capacity - peak;
        guess = out.max_batch(capacity, std::max<Bytes>(peak - out.peak(b), 0) / b);
        if (guess <= b) guess = b + 1;
        if (lacking >= 0) guess = between();
        continue;
      }
      // Where the run at the capacity failed even after freeing its cache, what it lacked there
      // says how far below the answer is: near a cliff (the cache freed and retried until this
      // batch) the share without a limit overstates it by far, and a batch or two less fits.
      // Failures in a row double the step, so that a bracket closes in a few probes; the run
      // without a limit is not replayed for a probe.
      const OomInfo& oom = *run.at_capacity.oom;
      const Bytes slope = std::max<Bytes>(out.per_sample_total(), 1);
      const Bytes lacked = std::max<Bytes>(oom.requested - oom.free, 1);
      std::int64_t step = std::max<std::int64_t>((lacked + slope - 1) / slope, 1);
      if (in_a_row >= 2) step = std::max(step, 2 * step_down);
      guess = b - step;
      step_down = step;
      lacking = lacked;
      if (room >= 0) guess = between();
    }
    at = std::max<std::int64_t>(lo, 1);
    // The bracket closes on a batch that fits (or none) and the next that does not; where fitting
    // is not monotone in the batch (the cache can make a batch fail and the next one fit), the
    // batch after the one it closed on may still fit: the answer goes up while the next one does.
    while (at < kLargestBatch && replayed(at + 1) <= capacity) ++at;
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

}  // namespace vrambench::allocator_share
