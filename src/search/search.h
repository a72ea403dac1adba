// The search for the largest batch that fits, over any predicate. Pure: the caller's predicate
// runs the trial (sim, cpu or cuda) and says fit or not, and when it can, the peak it measured.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "core/units.h"

namespace vrambench {

struct Probe {
  std::int64_t batch = 0;
  bool fits = false;
  bool operator==(const Probe&) const = default;
};

struct SearchLimits {
  std::int64_t max_batch = 65536;  // never probe above this
  // One extra trial at (first failure + 1) once the bracket is adjacent. Bracketing and bisection
  // alone never probe past a failure, so without it a non-monotone boundary cannot show.
  bool probe_past_failure = true;
};

struct SearchResult {
  std::int64_t max_batch = 0;  // largest batch that fit (0 when batch 1 does not)
  bool hit_limit = false;  // max_batch == limits.max_batch and it fit: the true max may be larger
  std::vector<Probe> trials;  // in the order they ran
  // Set when the trials contradict monotonicity (a batch failed while a larger one fit).
  std::optional<std::pair<std::int64_t, std::int64_t>> non_monotone;  // {failed batch, larger fit}
  bool operator==(const SearchResult&) const = default;
};

// Probes `hint` (clamped to [1, limits.max_batch]) first, then expands geometrically (doubling away
// from the hint) until one fit and one failure bracket the answer, then bisects to adjacent
// batches. Each batch is probed at most once. With hint error e = |true max - hint| the cost is at
// most 2*ceil(log2(e+1)) + 2 trials, plus the one past the failure; see docs/search.md.
SearchResult find_max_batch(const std::function<bool(std::int64_t)>& fits, std::int64_t hint,
                            const SearchLimits& limits = {});

// The same search over the sequence length, in steps of `granule` tokens (kernels and trainers
// pad to multiples of 64): find_max_batch over k with seq = k * granule.
struct SeqLimits {
  std::int64_t granule = 64;
  std::int64_t max_seq = std::int64_t{1} << 20;  // never probe a longer sequence (rounded down)
};
struct SeqSearchResult {
  std::int64_t max_seq = 0;   // a multiple of granule; 0 when even one granule does not fit
  bool hit_limit = false;     // the limit fit: the true max may be longer
  std::vector<Probe> trials;  // Probe::batch holds the sequence length probed
  std::optional<std::pair<std::int64_t, std::int64_t>> non_monotone;  // {failed seq, longer fit}
  bool operator==(const SeqSearchResult&) const = default;
};
// `fits(seq)` is only called with multiples of limits.granule; `hint_seq` is rounded down to one
// (at least one granule). Throws InternalError for a granule below 1 or a limit below it.
SeqSearchResult find_max_seq(const std::function<bool(std::int64_t)>& fits, std::int64_t hint_seq,
                             const SeqLimits& limits = {});

// What one trial tells the measurement-guided search.
struct TrialOutcome {
  bool fits = false;
  // The batch's peak: what it reached when it fit; when it did not, what it would have needed, if
  // the predicate can tell. 0: unknown.
  Bytes peak = 0;
  Bytes capacity = 0;  // what the peak is held against (fits == peak <= capacity); 0: unknown
};
using MeasuredFits = std::function<TrialOutcome(std::int64_t batch)>;

// Where the measurement-guided search starts: the estimate.
struct SearchHint {
  std::int64_t batch = 1;  // the estimated max batch, probed first
  // The estimate's peak at batch 0 on its line through `batch` (fixed + batch * per_sample): with
  // it, the first measured peak already predicts the boundary. Without it, two measured peaks do.
  std::optional<Bytes> fixed;
};

// The same answer as the search above, found from fewer trials where the predicate reports peaks:
// peaks are affine in the batch, so the line through two measured peaks (or through the hint's
// fixed bytes and one measured peak) predicts the largest batch within the capacity. Each step
// probes the prediction, or the batch after it once the prediction has fit; it falls back to
// the expansion and bisection above without a prediction or after two predictions in a row
// missed. Without peaks it probes exactly the batches the search above probes. See
// docs/search.md.
SearchResult find_max_batch(const MeasuredFits& measure, const SearchHint& hint,
                            const SearchLimits& limits = {});

}  // namespace vrambench
