// find_max_batch: bracket the largest fitting batch around the analytic hint, then bisect. The
// trial bound and the reasoning behind each step are in docs/search.md.
#include "search/search.h"

#include <algorithm>
#include <map>
#include <string>

#include "core/error.h"

namespace vrambench {
namespace {

// Runs the predicate at most once per batch and logs every trial in order.
class Prober {
 public:
  Prober(const std::function<bool(std::int64_t)>& fits, std::vector<Probe>& log)
      : fits_(fits), log_(log) {}

  bool operator()(std::int64_t batch) {
    if (auto it = seen_.find(batch); it != seen_.end()) return it->second;
    const bool fit = fits_(batch);
    seen_.emplace(batch, fit);
    log_.push_back({batch, fit});
    return fit;
  }
  bool probed(std::int64_t batch) const { return seen_.contains(batch); }

 private:
  const std::function<bool(std::int64_t)>& fits_;
  std::vector<Probe>& log_;
  std::map<std::int64_t, bool> seen_;
};

// Doubles a distance without overflowing: once it passes `cap` it stays at `cap`, which the
// callers clamp to anyway.
std::int64_t doubled(std::int64_t distance, std::int64_t cap) {
  return distance > cap / 2 ? cap : distance * 2;
}

}  // namespace

SearchResult find_max_batch(const std::function<bool(std::int64_t)>& fits, std::int64_t hint,
                            const SearchLimits& limits) {
  if (limits.max_batch < 1)
    throw InternalError("find_max_batch: limits.max_batch must be at least 1, got " +
                        std::to_string(limits.max_batch));
  const std::int64_t limit = limits.max_batch;
  SearchResult result;
  Prober probe(fits, result.trials);

  // Invariant from here to the end of bisection: every probed batch <= lo fit, every probed
  // batch >= hi failed, and nothing between lo and hi has been probed. lo = 0 means no fit yet,
  // hi = 0 no failure yet (a sentinel of limit + 1 would overflow for the largest limits).
  const std::int64_t start = std::clamp<std::int64_t>(hint, 1, limit);
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  if (probe(start)) {
    // Upward: start+1, start+2, start+4, ... so that an error e of the hint costs about log2(e)
    // probes to bracket, and the bracket is at most e wide.
    lo = start;
    for (std::int64_t distance = 1; lo < limit; distance = doubled(distance, limit)) {
      const std::int64_t next = distance >= limit - start ? limit : start + distance;
      if (probe(next)) {
        lo = next;
      } else {
        hi = next;
        break;
      }
    }
  } else {
    // Downward: start-1, start-2, start-4, ... down to batch 1; batch 1 failing means max 0.
    hi = start;
    for (std::int64_t distance = 1; hi > 1; distance = doubled(distance, limit)) {
      const std::int64_t next = distance >= start - 1 ? 1 : start - distance;
      if (probe(next)) {
        lo = next;
        break;
      }
      hi = next;
    }
  }

  // Without a failure the upward walk ended at the limit, which fit: nothing to bisect.
  while (hi > 0 && hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (probe(mid))
      lo = mid;
    else
      hi = mid;
  }

  // Bracketing and bisection only probe between the last fit and the first failure, so they can
  // never see a contradiction by themselves. One trial past the failure can: allocator rounding
  // and fragmentation make the boundary the likeliest place for fit(B+1) && !fit(B).
  if (limits.probe_past_failure && hi > 0 && hi < limit && !probe.probed(hi + 1)) probe(hi + 1);

  // Judge only from the trials that ran: the answer is the largest fit below the smallest
  // failure, and any fit above that failure is reported rather than trusted.
  std::optional<std::int64_t> smallest_failure;
  for (const Probe& p : result.trials)
    if (!p.fits && (!smallest_failure || p.batch < *smallest_failure)) smallest_failure = p.batch;
  std::int64_t largest_fit_below = 0;
  std::int64_t largest_fit_above = 0;
  for (const Probe& p : result.trials) {
    if (!p.fits) continue;
    if (!smallest_failure || p.batch < *smallest_failure)
      largest_fit_below = std::max(largest_fit_below, p.batch);
    else
      largest_fit_above = std::max(largest_fit_above, p.batch);
  }
  result.max_batch = largest_fit_below;
  result.hit_limit = result.max_batch == limit;
  if (largest_fit_above > 0) result.non_monotone = std::pair{*smallest_failure, largest_fit_above};
  return result;
}

SeqSearchResult find_max_seq(const std::function<bool(std::int64_t)>& fits, std::int64_t hint_seq,
                             const SeqLimits& limits) {
  if (limits.granule < 1 || limits.max_seq < limits.granule)
    throw InternalError("find_max_seq: need 1 <= granule <= max_seq, got granule " +
                        std::to_string(limits.granule) + ", max_seq " +
                        std::to_string(limits.max_seq));
  const std::int64_t granule = limits.granule;
  const std::function<bool(std::int64_t)> fits_steps = [&](std::int64_t steps) {
    return fits(steps * granule);
  };
  const SearchResult steps =
      find_max_batch(fits_steps, std::max<std::int64_t>(hint_seq / granule, 1),
                     SearchLimits{limits.max_seq / granule, true});
  SeqSearchResult result;
  result.max_seq = steps.max_batch * granule;
  result.hit_limit = steps.hit_limit;
  for (const Probe& p : steps.trials) result.trials.push_back({p.batch * granule, p.fits});
  if (steps.non_monotone)
    result.non_monotone =
        std::pair{steps.non_monotone->first * granule, steps.non_monotone->second * granule};
  return result;
}

}  // namespace vrambench
