// find_max_batch guided by measured peaks: the same answer as a scan from batch 1, in the trial
// counts docs/search.md states, over affine peaks with biased hints, peaks that are steps rather
// than a line (where predictions miss), predicates without peaks, and non-monotone fit.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "search/search.h"

namespace vrambench {
namespace {

// A configuration whose peak is fixed + per_sample * batch (rounded up to `granule`, which makes
// it a step function when the granule passes per_sample), against `capacity`.
struct Synthetic {
  Bytes fixed = 0;
  Bytes per_sample = 0;
  Bytes capacity = 0;
  Bytes granule = 1;

  Bytes peak(std::int64_t batch) const {
    const Bytes exact = fixed + per_sample * batch;
    return (exact + granule - 1) / granule * granule;
  }
  bool fits(std::int64_t batch) const { return peak(batch) <= capacity; }
  // The answer a scan from batch 1 gives: the batch before the first failure.
  std::int64_t scanned_max(std::int64_t limit) const {
    std::int64_t b = 1;
    while (b <= limit && fits(b)) ++b;
    return b - 1;
  }
  // The predicate: a fit reports its peak, a failure what it would need.
  MeasuredFits measure(int* calls = nullptr) const {
    return [this, calls](std::int64_t batch) {
      if (calls) ++*calls;
      return TrialOutcome{fits(batch), peak(batch), capacity};
    };
  }
  // The hint an estimate gives whose fixed bytes are right and whose per-sample bytes are off by
  // `error` (0.1 = 10% too many): its max batch and its line's fixed bytes.
  SearchHint estimate(double error) const {
    const auto estimated = static_cast<Bytes>(static_cast<double>(per_sample) * (1.0 + error));
    return {std::max<std::int64_t>(1, (capacity - fixed) / estimated), fixed};
  }
};

// Configurations with true maxima from 1 to about 40,000: fixed bytes from none to most of the
// capacity, per-sample bytes that do not divide it.
std::vector<Synthetic> configurations() {
  std::vector<Synthetic> out;
  const Bytes capacity = 80'000'000'007;
  for (Bytes fixed : {Bytes{0}, Bytes{1'000'000'000}, Bytes{30'000'000'000}, Bytes{70'000'000'000}})
    for (Bytes per_sample : {Bytes{2'000'003}, Bytes{37'000'011}, Bytes{410'000'009},
                             Bytes{3'900'000'001}, Bytes{9'000'000'013}})
      out.push_back({fixed, per_sample, capacity});
  return out;
}

struct Counts {
  double average = 0;
  std::int64_t worst = 0;
};

// Runs every configuration with hints off by each of `errors`, checking the answer and that no
// batch is probed twice; returns the trial counts.
Counts run_all(const std::vector<Synthetic>& configs, const std::vector<double>& errors,
               bool with_fixed) {
  std::int64_t total = 0;
  std::int64_t searches = 0;
  Counts counts;
  const std::int64_t limit = SearchLimits{}.max_batch;
  for (const Synthetic& c : configs)
    for (double error : errors) {
      SearchHint hint = c.estimate(error);
      if (!with_fixed) hint.fixed.reset();
      SCOPED_TRACE(testing::Message()
                   << "fixed " << c.fixed << ", per sample " << c.per_sample << ", granule "
                   << c.granule << ", error " << error << ", hint " << hint.batch);
      int calls = 0;
      const SearchResult r = find_max_batch(c.measure(&calls), hint);
      EXPECT_EQ(r.max_batch, c.scanned_max(limit));
      EXPECT_FALSE(r.non_monotone);
      EXPECT_EQ(calls, static_cast<int>(r.trials.size()));
      std::set<std::int64_t> seen;
      for (const Probe& p : r.trials) EXPECT_TRUE(seen.insert(p.batch).second) << p.batch;
      const auto n = static_cast<std::int64_t>(r.trials.size());
      total += n;
      ++searches;
      counts.worst = std::max(counts.worst, n);
    }
  counts.average = static_cast<double>(total) / static_cast<double>(searches);
  return counts;
}

TEST(SearchMeasured, EstimateWithinOnePercentCostsAtMostTwoTrialsOverTheFloor) {
  // The floor is three: the boundary pair (max fits, max + 1 fails) and the confirmation. A hint
  // below the max costs its own trial; one above it, its own and the batch below it.
  const Counts c = run_all(configurations(), {-0.01, -0.005, 0.0, 0.005, 0.01}, true);
  EXPECT_LE(c.average, 4.0);
  EXPECT_LE(c.worst, 5);
}

TEST(SearchMeasured, HintBelowTheMaxCostsOneTrialOverTheFloor) {
  // Per-sample bytes overestimated: the hint fits, and its peak predicts the max exactly.
  for (const Synthetic& c : configurations())
    for (double error : {0.005, 0.01, 0.1, 0.5}) {
      const SearchResult r = find_max_batch(c.measure(), c.estimate(error));
      EXPECT_EQ(r.max_batch, c.scanned_max(SearchLimits{}.max_batch));
      EXPECT_LE(r.trials.size(), 4u) << "error " << error << ", hint " << c.estimate(error).batch;
    }
}

TEST(SearchMeasured, HintOnTheBoundaryOrJustAboveCostsThreeTrials) {
  for (const Synthetic& c : configurations()) {
    const std::int64_t t = c.scanned_max(SearchLimits{}.max_batch);
    for (std::int64_t hint : {t, t + 1, t + 2}) {
      const SearchResult r = find_max_batch(c.measure(), SearchHint{hint, c.fixed});
      EXPECT_EQ(r.max_batch, t);
      EXPECT_EQ(r.trials.size(), 3u) << "true max " << t << ", hint " << hint;
    }
  }
}

TEST(SearchMeasured, EstimateOffByTenPercentAveragesAtMostFourTrials) {
  const Counts c = run_all(configurations(), {-0.1, -0.05, 0.05, 0.1}, true);
  EXPECT_LE(c.average, 4.0);
  EXPECT_LE(c.worst, 5);
}

TEST(SearchMeasured, EstimateOffByHalfAveragesAtMostSixTrials) {
  const Counts c = run_all(configurations(), {-0.5, -0.3, 0.3, 0.5}, true);
  EXPECT_LE(c.average, 6.0);
  EXPECT_LE(c.worst, 6);
}

TEST(SearchMeasured, HintWithoutFixedBytesPredictsFromTwoMeasuredPeaks) {
  // The first trial alone cannot place the line; the second can.
  const Counts c = run_all(configurations(), {-0.5, -0.1, 0.0, 0.1, 0.5}, false);
  EXPECT_LE(c.average, 6.0);
  EXPECT_LE(c.worst, 8);
}

TEST(SearchMeasured, ExactEstimateProbesTheBoundaryPairAndTheConfirmation) {
  const Synthetic c{1'000, 100, 1'000 + 100 * 50 + 7};  // true max 50
  const SearchResult r = find_max_batch(c.measure(), c.estimate(0.0));
  EXPECT_EQ(r.max_batch, 50);
  std::vector<std::int64_t> batches;
  for (const Probe& p : r.trials) batches.push_back(p.batch);
  EXPECT_EQ(batches, (std::vector<std::int64_t>{50, 51, 52}));
}

TEST(SearchMeasured, LowEstimateJumpsToThePrediction) {
  // Per-sample bytes 50% over: the hint is 33; its measured peak puts the line through the true
  // per-sample bytes, so the next probes are 50 and 51, then the confirmation.
  const Synthetic c{1'000, 100, 1'000 + 100 * 50 + 7};
  const SearchResult r = find_max_batch(c.measure(), c.estimate(0.5));
  std::vector<std::int64_t> batches;
  for (const Probe& p : r.trials) batches.push_back(p.batch);
  EXPECT_EQ(batches, (std::vector<std::int64_t>{33, 50, 51, 52}));
}

TEST(SearchMeasured, StepPeaksStillGiveTheScannedAnswer) {
  // Peaks rounded to granules of up to 64 samples: predictions miss, bisection finishes.
  std::vector<Synthetic> configs;
  for (Synthetic c : configurations())
    for (Bytes samples : {4, 64}) {
      c.granule = c.per_sample * samples + 12'345;
      configs.push_back(c);
    }
  const Counts c = run_all(configs, {-0.5, -0.1, -0.01, 0.0, 0.01, 0.1, 0.5}, true);
  // Two predictions that missed cost at most four trials over the expansion and bisection.
  EXPECT_LE(c.worst, 2 * 17 + 3 + 4);
}

TEST(SearchMeasured, PeaksThatDoNotRiseFallBackToTheSearchWithoutPeaks) {
  // A peak that does not grow with the batch gives no line: the batches probed are those of the
  // search without peaks.
  auto flat = [](std::int64_t batch) { return TrialOutcome{batch <= 100, 5'000, 10'000}; };
  auto plain = [](std::int64_t batch) { return batch <= 100; };
  for (std::int64_t hint : {1, 60, 100, 140, 1000}) {
    const SearchResult guided = find_max_batch(flat, SearchHint{hint, std::nullopt});
    const SearchResult bare = find_max_batch(plain, hint);
    ASSERT_EQ(guided.trials.size(), bare.trials.size()) << "hint " << hint;
    for (std::size_t i = 0; i < bare.trials.size(); ++i)
      EXPECT_EQ(guided.trials[i].batch, bare.trials[i].batch) << "hint " << hint;
    EXPECT_EQ(guided.max_batch, 100);
  }
}

TEST(SearchMeasured, FailureBelowALargerFitIsReported) {
  // The peaks put the boundary at 37, but 37 alone fails (fragmentation) and 38 fits.
  const Synthetic line{1'000, 100, 1'000 + 100 * 37 + 50};
  auto glitch = [&line](std::int64_t batch) {
    return TrialOutcome{batch <= 5000 && batch != 37, line.peak(batch), line.capacity};
  };
  for (std::int64_t hint : {36, 37, 30}) {
    SCOPED_TRACE(testing::Message() << "hint " << hint);
    const SearchResult r = find_max_batch(glitch, SearchHint{hint, line.fixed});
    EXPECT_EQ(r.max_batch, 36);
    ASSERT_TRUE(r.non_monotone);
    EXPECT_EQ(r.non_monotone->first, 37);
    EXPECT_EQ(r.non_monotone->second, 38);
  }
}

TEST(SearchMeasured, NothingFitsAndTheLimitFits) {
  const Synthetic none{10'000, 100, 9'000};
  const SearchResult zero = find_max_batch(none.measure(), SearchHint{5, none.fixed});
  EXPECT_EQ(zero.max_batch, 0);
  EXPECT_FALSE(zero.non_monotone);

  const Synthetic all{0, 1, 1'000'000};
  const SearchResult capped = find_max_batch(all.measure(), SearchHint{400, 0}, {.max_batch = 500});
  EXPECT_EQ(capped.max_batch, 500);
  EXPECT_TRUE(capped.hit_limit);
  for (const Probe& p : capped.trials) EXPECT_LE(p.batch, 500);
}

TEST(SearchMeasured, FailuresWithoutPeaksPredictFromTheFits) {
  // Only fits report a peak (a device that cannot tell what a failure needs).
  const Synthetic c{1'000, 100, 1'000 + 100 * 200 + 3};
  auto fits_only = [&c](std::int64_t batch) {
    const bool fit = c.fits(batch);
    return TrialOutcome{fit, fit ? c.peak(batch) : 0, c.capacity};
  };
  for (double error : {-0.5, -0.1, 0.0, 0.1, 0.5}) {
    const SearchResult r = find_max_batch(fits_only, c.estimate(error));
    EXPECT_EQ(r.max_batch, 200) << error;
  }
}

}  // namespace
}  // namespace vrambench
