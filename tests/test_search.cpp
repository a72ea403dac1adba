// find_max_batch over synthetic predicates: exact answers, the documented trial bound, the saving
// over doubling from batch 1, limits, and non-monotone fit.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "search/search.h"

namespace vrambench {
namespace {

std::function<bool(std::int64_t)> fits_up_to(std::int64_t true_max) {
  return [true_max](std::int64_t batch) { return batch <= true_max; };
}

std::vector<std::int64_t> batches(const SearchResult& r) {
  std::vector<std::int64_t> out;
  for (const Probe& p : r.trials) out.push_back(p.batch);
  return out;
}

// ceil(log2(x)) for x >= 1.
int ceil_log2(std::int64_t x) {
  int bits = 0;
  while ((std::int64_t{1} << bits) < x) ++bits;
  return bits;
}

// The bound of docs/search.md, with e measured from the batch actually probed first.
std::int64_t trial_bound(std::int64_t true_max, std::int64_t hint, std::int64_t limit,
                         bool probe_past_failure) {
  const std::int64_t start = std::clamp<std::int64_t>(hint, 1, limit);
  const std::int64_t error = true_max > start ? true_max - start : start - true_max;
  return 2 * ceil_log2(error + 1) + 2 + (probe_past_failure ? 1 : 0);
}

// The strategy without a hint: 1, 2, 4, ... until a failure (or the limit), then bisect.
std::int64_t doubling_from_one_trials(const std::function<bool(std::int64_t)>& fits,
                                      std::int64_t limit) {
  std::int64_t trials = 0;
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  for (std::int64_t b = 1;; b = std::min(b * 2, limit)) {
    ++trials;
    if (!fits(b)) {
      hi = b;
      break;
    }
    lo = b;
    if (b == limit) return trials;
  }
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    ++trials;
    (fits(mid) ? lo : hi) = mid;
  }
  return trials;
}

// True maxima 0..5000: every value up to 300 (where off-by-one and rounding matter most), then a
// coarser walk with odd steps so that powers of two are not favoured.
std::vector<std::int64_t> true_max_grid() {
  std::vector<std::int64_t> grid;
  for (std::int64_t t = 0; t <= 300; ++t) grid.push_back(t);
  for (std::int64_t t = 301; t <= 5000; t += 37) grid.push_back(t);
  grid.push_back(4096);
  grid.push_back(4097);
  grid.push_back(5000);
  return grid;
}

std::vector<std::int64_t> hints_for(std::int64_t t) {
  return {t, t - 1, t + 1, t + t / 10, t - t / 10, 2 * t, t / 2, 1};
}

TEST(Search, ExactHintCostsOneFitOneFailureAndTheConfirmation) {
  const SearchResult r = find_max_batch(fits_up_to(100), 100);
  EXPECT_EQ(r.max_batch, 100);
  EXPECT_EQ(batches(r), (std::vector<std::int64_t>{100, 101, 102}));
  EXPECT_FALSE(r.hit_limit);
  EXPECT_FALSE(r.non_monotone);
}

TEST(Search, LowHintExpandsUpwardByDoublingDistancesThenBisects) {
  // 90+1, +2, +4, +8 fit, +16 = 106 fails; bisect [98, 106]: 102 fails, 100 fits, 101 fails.
  // 102 was probed already, so the confirmation trial is skipped.
  const SearchResult r = find_max_batch(fits_up_to(100), 90);
  EXPECT_EQ(r.max_batch, 100);
  EXPECT_EQ(batches(r), (std::vector<std::int64_t>{90, 91, 92, 94, 98, 106, 102, 100, 101}));
  const std::vector<bool> expected_fits{true, true, true, true, true, false, false, true, false};
  for (std::size_t i = 0; i < r.trials.size(); ++i) EXPECT_EQ(r.trials[i].fits, expected_fits[i]);
}

TEST(Search, HighHintExpandsDownwardByDoublingDistancesThenBisects) {
  // 110-1, -2, -4, -8 fail, -16 = 94 fits; bisect [94, 102]: 98 and 100 fit, 101 fails.
  const SearchResult r = find_max_batch(fits_up_to(100), 110);
  EXPECT_EQ(r.max_batch, 100);
  EXPECT_EQ(batches(r), (std::vector<std::int64_t>{110, 109, 108, 106, 102, 94, 98, 100, 101}));
}

TEST(Search, NothingFitsGivesZeroWithBatchOneFailing) {
  const SearchResult from_five = find_max_batch(fits_up_to(0), 5);
  EXPECT_EQ(from_five.max_batch, 0);
  // 5, 4, 3, then the distance 4 reaches batch 1; 2 is the confirmation.
  EXPECT_EQ(batches(from_five), (std::vector<std::int64_t>{5, 4, 3, 1, 2}));
  EXPECT_FALSE(from_five.hit_limit);
  EXPECT_FALSE(from_five.non_monotone);

  const SearchResult from_one = find_max_batch(fits_up_to(0), 1);
  EXPECT_EQ(from_one.max_batch, 0);
  ASSERT_FALSE(from_one.trials.empty());
  EXPECT_EQ(from_one.trials.front().batch, 1);
  EXPECT_FALSE(from_one.trials.front().fits);

  const SearchResult bare = find_max_batch(fits_up_to(0), 1, {.probe_past_failure = false});
  EXPECT_EQ(batches(bare), (std::vector<std::int64_t>{1}));
}

TEST(Search, HintsOutsideTheRangeAreClamped) {
  const SearchResult zero_hint = find_max_batch(fits_up_to(3), 0);
  EXPECT_EQ(zero_hint.trials.front().batch, 1);
  EXPECT_EQ(zero_hint.max_batch, 3);
  const SearchResult negative_hint = find_max_batch(fits_up_to(3), -50);
  EXPECT_EQ(negative_hint.trials.front().batch, 1);
  const SearchResult huge_hint = find_max_batch(fits_up_to(3), 1'000'000, {.max_batch = 64});
  EXPECT_EQ(huge_hint.trials.front().batch, 64);
  EXPECT_EQ(huge_hint.max_batch, 3);
}

TEST(Search, ExactOverGridOfTrueMaximaAndHintsWithinTheDocumentedBound) {
  const std::int64_t limit = SearchLimits{}.max_batch;
  for (bool confirm : {true, false}) {
    for (std::int64_t t : true_max_grid()) {
      for (std::int64_t hint : hints_for(t)) {
        SCOPED_TRACE(testing::Message()
                     << "true max " << t << ", hint " << hint << ", confirm " << confirm);
        int calls = 0;
        std::map<std::int64_t, int> calls_per_batch;
        auto fits = [&](std::int64_t b) {
          ++calls;
          ++calls_per_batch[b];
          return b <= t;
        };
        const SearchResult r = find_max_batch(fits, hint, {.probe_past_failure = confirm});
        EXPECT_EQ(r.max_batch, t);
        EXPECT_FALSE(r.hit_limit);
        EXPECT_FALSE(r.non_monotone);
        EXPECT_LE(static_cast<std::int64_t>(r.trials.size()), trial_bound(t, hint, limit, confirm));
        EXPECT_EQ(calls, static_cast<int>(r.trials.size()));
        for (const auto& [batch, n] : calls_per_batch) EXPECT_EQ(n, 1) << "batch " << batch;
        // The answer is backed by trials: max fit and max+1 failed (where max+1 is in range).
        std::set<std::int64_t> fit, failed;
        for (const Probe& p : r.trials) (p.fits ? fit : failed).insert(p.batch);
        if (t > 0) {
          EXPECT_TRUE(fit.contains(t));
        }
        EXPECT_TRUE(failed.contains(t + 1));
        for (const Probe& p : r.trials) {
          EXPECT_GE(p.batch, 1);
          EXPECT_LE(p.batch, limit);
        }
      }
    }
  }
}

TEST(Search, HintWithinTenPercentBeatsDoublingFromOne) {
  std::int64_t hinted_trials = 0;
  std::int64_t baseline_trials = 0;
  const std::int64_t limit = SearchLimits{}.max_batch;
  for (std::int64_t t : true_max_grid()) {
    const std::int64_t baseline = doubling_from_one_trials(fits_up_to(t), limit);
    for (std::int64_t hint : {t - t / 10, t + t / 10}) {
      const auto hinted =
          static_cast<std::int64_t>(find_max_batch(fits_up_to(t), hint).trials.size());
      hinted_trials += hinted;
      baseline_trials += baseline;
      // From a hundred up, the hint pays for itself on every single search, confirmation included.
      if (t >= 100) {
        EXPECT_LT(hinted, baseline) << "true max " << t << ", hint " << hint;
      }
    }
  }
  EXPECT_LT(hinted_trials, baseline_trials);
}

TEST(Search, BaselineCountsAsDocumented) {
  // 1, 2, 4, 8 fit, 16 fails; bisect [8, 16]: 12 fails, 10 fits, 11 fails.
  EXPECT_EQ(doubling_from_one_trials(fits_up_to(10), 65536), 8);
  EXPECT_EQ(doubling_from_one_trials(fits_up_to(0), 65536), 1);
}

TEST(Search, LimitThatFitsIsReportedAsHitLimit) {
  const SearchResult r = find_max_batch(fits_up_to(1000), 400, {.max_batch = 500});
  EXPECT_EQ(r.max_batch, 500);
  EXPECT_TRUE(r.hit_limit);
  // 400, 401, 402, 404, 408, 416, 432, 464, then +128 is clamped to the limit.
  EXPECT_EQ(batches(r), (std::vector<std::int64_t>{400, 401, 402, 404, 408, 416, 432, 464, 500}));

  const SearchResult exactly = find_max_batch(fits_up_to(500), 450, {.max_batch = 500});
  EXPECT_EQ(exactly.max_batch, 500);
  EXPECT_TRUE(exactly.hit_limit);

  const SearchResult below = find_max_batch(fits_up_to(499), 450, {.max_batch = 500});
  EXPECT_EQ(below.max_batch, 499);
  EXPECT_FALSE(below.hit_limit);
  for (const Probe& p : below.trials) EXPECT_LE(p.batch, 500);

  const SearchResult one = find_max_batch(fits_up_to(7), 3, {.max_batch = 1});
  EXPECT_EQ(batches(one), (std::vector<std::int64_t>{1}));
  EXPECT_TRUE(one.hit_limit);
}

TEST(Search, LargestLimitDoesNotOverflow) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const SearchResult all =
      find_max_batch([](std::int64_t) { return true; }, 1, {.max_batch = kMax});
  EXPECT_EQ(all.max_batch, kMax);
  EXPECT_TRUE(all.hit_limit);
  const std::int64_t t = std::int64_t{1} << 40;
  const SearchResult big = find_max_batch(fits_up_to(t), 1, {.max_batch = kMax});
  EXPECT_EQ(big.max_batch, t);
  EXPECT_LE(static_cast<std::int64_t>(big.trials.size()), trial_bound(t, 1, kMax, true));
}

TEST(Search, RejectsALimitBelowOne) {
  EXPECT_THROW(find_max_batch(fits_up_to(3), 1, {.max_batch = 0}), InternalError);
}

// Fits up to 5000 except at batch 37, as allocator fragmentation can make one batch fail while
// the next one fits.
bool fits_except_37(std::int64_t b) {
  return b <= 5000 && b != 37;
}

TEST(Search, FailureBelowALargerFitIsReported) {
  for (std::int64_t hint : {36, 37}) {
    SCOPED_TRACE(testing::Message() << "hint " << hint);
    const SearchResult r = find_max_batch(fits_except_37, hint);
    // The bracket closes at [36, 37]; the trial at 38 contradicts it.
    EXPECT_EQ(r.max_batch, 36);
    ASSERT_TRUE(r.non_monotone);
    EXPECT_EQ(r.non_monotone->first, 37);
    EXPECT_EQ(r.non_monotone->second, 38);
    EXPECT_FALSE(r.hit_limit);
  }
}

TEST(Search, NonMonotoneAnswerIsTheLargestFitBelowTheSmallestFailure) {
  // Batch 1 fails, 2 fits: the trials cannot vouch for any batch, so the answer is 0.
  const SearchResult r = find_max_batch([](std::int64_t b) { return b == 2; }, 1);
  EXPECT_EQ(batches(r), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(r.max_batch, 0);
  ASSERT_TRUE(r.non_monotone);
  EXPECT_EQ(*r.non_monotone, (std::pair<std::int64_t, std::int64_t>{1, 2}));
}

TEST(Search, WithoutTheConfirmationTrialANonMonotoneBoundaryStaysHidden) {
  // What the confirmation trial buys: bracketing and bisection alone stop at [36, 37].
  const SearchResult r = find_max_batch(fits_except_37, 37, {.probe_past_failure = false});
  EXPECT_EQ(batches(r), (std::vector<std::int64_t>{37, 36}));
  EXPECT_EQ(r.max_batch, 36);
  EXPECT_FALSE(r.non_monotone);
}

TEST(Search, GlitchAwayFromTheBoundaryIsNotProbed) {
  // A hint above 37 never looks below itself, so the answer is the true boundary.
  const SearchResult r = find_max_batch(fits_except_37, 4000);
  EXPECT_EQ(r.max_batch, 5000);
  EXPECT_FALSE(r.non_monotone);
}

}  // namespace
}  // namespace vrambench
