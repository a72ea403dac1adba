// find_max_batch: bracket the largest fitting batch around the analytic hint, then close it, by
// predictions from the measured peaks where the predicate reports them and by bisection where it
// does not. The trial bounds and the reasoning behind each step are in docs/search.md.
#include "search/search.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/error.h"

namespace vrambench {
namespace {

// Runs the predicate at most once per batch and logs every trial in order.
class Prober {
 public:
  Prober(const MeasuredFits& measure, std::vector<Probe>& log) : measure_(measure), log_(log) {}

  const TrialOutcome& operator()(std::int64_t batch) {
    if (auto it = seen_.find(batch); it != seen_.end()) return it->second;
    const TrialOutcome& outcome = seen_.emplace(batch, measure_(batch)).first->second;
    log_.push_back({batch, outcome.fits});
    if (outcome.capacity > 0) capacity_ = outcome.capacity;
    return outcome;
  }
  bool probed(std::int64_t batch) const { return seen_.contains(batch); }
  const std::map<std::int64_t, TrialOutcome>& seen() const { return seen_; }
  Bytes capacity() const { return capacity_; }  // the last one reported; 0: none

 private:
  const MeasuredFits& measure_;
  std::vector<Probe>& log_;
  std::map<std::int64_t, TrialOutcome> seen_;  // by batch
  Bytes capacity_ = 0;
};

// Doubles a distance without overflowing: once it passes `cap` it stays at `cap`, which the
// callers clamp to anyway.
std::int64_t doubled(std::int64_t distance, std::int64_t cap) {
  return distance > cap / 2 ? cap : distance * 2;
}

struct Point {
  std::int64_t batch = 0;
  Bytes peak = 0;
};

// The largest batch at or above 0 whose peak the line through a and b keeps within `capacity`;
// nullopt when the line does not rise with the batch. Long double holds the products exactly at
// the sizes a device has; the answer is only a prediction, which a trial then checks.
std::optional<std::int64_t> boundary(const Point& a, const Point& b, Bytes capacity) {
  if (a.batch == b.batch) return std::nullopt;
  const auto rise = static_cast<long double>(b.peak - a.peak);
  const auto run = static_cast<long double>(b.batch - a.batch);
  if (rise / run <= 0) return std::nullopt;
  const long double at =
      static_cast<long double>(a.batch) + static_cast<long double>(capacity - a.peak) * run / rise;
  constexpr auto kHuge = static_cast<long double>(std::int64_t{1} << 62);
  return static_cast<std::int64_t>(std::floor(std::clamp(at, 0.0L, kHuge)));
}

// The boundary predicted from the trials so far: the line through the measured peaks nearest to
// it on either side (the largest fit and the smallest failure that report one), else through the
// nearest and the farthest on the one side that has them, else through the hint's fixed bytes at
// batch 0 and the one measured peak. nullopt without a capacity or a line that rises.
std::optional<std::int64_t> predict(const Prober& probe, const SearchHint& hint) {
  const Bytes capacity = probe.capacity();
  if (capacity <= 0) return std::nullopt;
  std::vector<Point> fits;      // ascending batch
  std::vector<Point> failures;  // ascending batch
  for (const auto& [batch, outcome] : probe.seen())
    if (outcome.peak > 0) (outcome.fits ? fits : failures).push_back({batch, outcome.peak});
  if (fits.size() >= 2) return boundary(fits.front(), fits.back(), capacity);
  if (fits.size() == 1 && hint.fixed) return boundary({0, *hint.fixed}, fits.back(), capacity);
  if (fits.size() == 1 && !failures.empty())
    return boundary(fits.back(), failures.front(), capacity);
  // Failures alone: a failure's need overstates what the capped trial needed (a replay without a
  // limit keeps its cache), so a line through one undershoots; the first failure is followed by
  // the batch below it, which the estimate's rounding makes the likeliest answer, and only a
  // second failure predicts.
  if (failures.size() >= 2 && hint.fixed)
    return boundary({0, *hint.fixed}, failures.front(), capacity);
  if (failures.size() >= 2) return boundary(failures.back(), failures.front(), capacity);
  return std::nullopt;
}

}  // namespace

SearchResult find_max_batch(const MeasuredFits& measure, const SearchHint& hint,
                            const SearchLimits& limits) {
  if (limits.max_batch < 1)
    throw InternalError("find_max_batch: limits.max_batch must be at least 1, got " +
                        std::to_string(limits.max_batch));
  const std::int64_t limit = limits.max_batch;
  SearchResult result;
  Prober probe(measure, result.trials);

  // Invariant from here to the end of the loop: every probed batch <= lo fit, every probed
  // batch >= hi failed, and nothing between lo and hi has been probed. lo = 0 means no fit yet,
  // hi = 0 no failure yet (a sentinel of limit + 1 would overflow for the largest limits).
  const std::int64_t start = std::clamp<std::int64_t>(hint.batch, 1, limit);
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  auto run = [&](std::int64_t batch) {
    const bool fit = probe(batch).fits;
    (fit ? lo : hi) = batch;
    return fit;
  };
  run(start);

  std::int64_t distance = 1;  // of the next expansion step from the start
  // A prediction t is checked by the pair t (expected to fit) and t + 1 (expected to fail); a pair
  // that holds closes the bracket. After kMaxMisses predictions that missed, the rest is the
  // expansion and bisection: near the boundary an allocator's rounding and its free-and-retry
  // make the peaks steps rather than a line, and chasing them costs more than halving.
  constexpr int kMaxMisses = 2;
  constexpr int kMaxChecks = 2;
  int misses = 0;
  std::int64_t second_of_pair = 0;  // t + 1 once t fit; 0: none pending
  for (int checks = 0;; ++checks) {
    while (lo < limit && (hi == 0 || hi - lo > 1)) {
      if (second_of_pair > 0) {
        if (run(second_of_pair)) ++misses;  // the prediction was low
        second_of_pair = 0;
        continue;
      }
      const std::optional<std::int64_t> predicted =
          misses < kMaxMisses ? predict(probe, hint) : std::nullopt;
      if (predicted) {
        const std::int64_t at = std::clamp(*predicted, lo, hi > 0 ? hi - 1 : limit);
        if (at == lo) {
          // The largest fit is the predicted boundary: only t + 1 is left to check.
          if (run(lo + 1)) ++misses;
        } else if (run(at)) {
          second_of_pair = at + 1;  // inside the bracket: at fit, and the bracket is still open
        } else {
          ++misses;  // the prediction was high
        }
        continue;
      }
      std::int64_t next = 0;
      if (hi == 0) {
        // Upward: start+1, start+2, start+4, ... so that an error e of the hint costs about
        // log2(e) probes to bracket, and the bracket is at most e wide.
        for (;; distance = doubled(distance, limit)) {
          next = distance >= limit - start ? limit : start + distance;
          if (next > lo) break;
        }
        distance = doubled(distance, limit);
      } else if (lo == 0) {
        // Downward: start-1, start-2, start-4, ... down to batch 1; batch 1 failing means max 0.
        for (;; distance = doubled(distance, limit)) {
          next = distance >= start - 1 ? 1 : start - distance;
          if (next < hi) break;
        }
        distance = doubled(distance, limit);
      } else {
        next = lo + (hi - lo) / 2;
      }
      run(next);
    }

    // A prediction that missed means the peaks are not a line near the boundary: the
    // allocator's rounding and free-and-retry decide it, and a fit there may sit above batches
    // that fail. Check the batch below the largest fit; if it fails, the answer lies below it and
    // the search goes on there (the fit above is reported as non-monotone).
    const std::optional<std::int64_t> below =
        checks < kMaxChecks && misses > 0 && lo > 1 && !probe.probed(lo - 1)
            ? std::optional<std::int64_t>(lo - 1)
            : std::nullopt;
    if (!below) break;
    if (probe(*below).fits) break;
    hi = *below;
    lo = 0;
    for (const auto& [batch, outcome] : probe.seen())
      if (batch < hi && outcome.fits) lo = batch;
    misses = kMaxMisses;  // the peaks have shown they are not a line here: bisect
  }

  // The loop only probes between the last fit and the first failure, so it can never see a
  // contradiction by itself. One trial past the failure can: allocator rounding and
  // fragmentation make the boundary the likeliest place for fit(B+1) && !fit(B).
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

SearchResult find_max_batch(const std::function<bool(std::int64_t)>& fits, std::int64_t hint,
                            const SearchLimits& limits) {
  // No peaks, so no predictions: the expansion and bisection alone.
  return find_max_batch([&fits](std::int64_t batch) { return TrialOutcome{fits(batch)}; },
                        SearchHint{hint, std::nullopt}, limits);
}

}  // namespace vrambench
