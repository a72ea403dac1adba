// The child-process isolation of a configuration: results survive the pipe, crashes become rows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "core/presets.h"
#include "search/isolate.h"
#include "search/json.h"

namespace vrambench {
namespace {

RunConfig small_config() {
  RunConfig cfg;
  cfg.model = find_preset("tiny").model;
  cfg.seq = 64;
  cfg.device = parse_device("sim:rtx4060");
  cfg.vram = 1 * GiB;
  return cfg;
}

DeviceInfo small_device() {
  DeviceInfo d;
  d.kind = DeviceKind::sim;
  d.label = "sim test";
  d.total = 64 * MiB;
  d.fixed_overhead = 8 * MiB;
  d.gemm_workspace = 1 * MiB;
  return d;
}

TEST(Isolate, ChildResultEqualsInProcessResult) {
  const RunConfig cfg = small_config();
  const Measurement direct = measure(cfg, simulated(small_device()), {});
  const Measurement child = measure_isolated(cfg, simulated(small_device()), {});
  ASSERT_GT(direct.search.max_batch, 0);
  EXPECT_EQ(child.search.max_batch, direct.search.max_batch);
  EXPECT_EQ(child.search.trials.size(), direct.search.trials.size());
  EXPECT_EQ(child.est_max_batch, direct.est_max_batch);
  EXPECT_EQ(child.measured_peak(), direct.measured_peak());
  EXPECT_EQ(child.estimated_peak(), direct.estimated_peak());
  EXPECT_EQ(child.estimate.other_moments.size(), direct.estimate.other_moments.size());
  EXPECT_EQ(child.estimate.max_batch(64 * MiB), direct.estimate.max_batch(64 * MiB));
  ASSERT_NE(child.at_next(), nullptr);
  ASSERT_TRUE(child.at_next()->oom.has_value());
  EXPECT_EQ(child.at_next()->oom->tensor, direct.at_next()->oom->tensor);
  EXPECT_EQ(child.failure, Failure::none);
  EXPECT_TRUE(child.reason.empty()) << child.reason;
}

TEST(Isolate, ObserverSeesEveryTrialInSearchOrder) {
  std::vector<Probe> seen;
  const Measurement m = measure(small_config(), simulated(small_device()), {},
                                [&](std::int64_t batch, const TrialResult& r) {
                                  seen.push_back({batch, r.fit});
                                });
  ASSERT_EQ(seen.size(), m.search.trials.size());
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].batch, m.search.trials[i].batch);
    EXPECT_EQ(seen[i].fits, m.search.trials[i].fits);
  }
}

TEST(Isolate, JsonRoundTripKeepsEveryField) {
  const RunConfig cfg = small_config();
  const Measurement m = measure(cfg, simulated(small_device()), {});
  const Measurement back = measurement_from_json(nlohmann::json(m), cfg);
  EXPECT_TRUE(back == m);
}

TEST(Isolate, AbortInTheChildBecomesAFailedRow) {
  const Measurement m =
      measure_isolated(small_config(), simulated(small_device()), {}, Fault::abort);
  EXPECT_EQ(m.failure, Failure::crashed);
  EXPECT_NE(m.reason.find("signal 6"), std::string::npos) << m.reason;
  EXPECT_EQ(m.note().rfind("crashed: signal 6", 0), 0u) << m.note();
  EXPECT_EQ(m.search.max_batch, 0);
  EXPECT_TRUE(m.search.trials.empty());
  EXPECT_GT(m.est_max_batch, 0);  // the estimate is still there for the row
}

TEST(Isolate, SegfaultAndNonZeroExitAreReported) {
  const Measurement segv =
      measure_isolated(small_config(), simulated(small_device()), {}, Fault::segfault);
  EXPECT_EQ(segv.failure, Failure::crashed);
  EXPECT_NE(segv.reason.find("signal 11"), std::string::npos) << segv.reason;
  const Measurement exited =
      measure_isolated(small_config(), simulated(small_device()), {}, Fault::exit_nonzero);
  EXPECT_EQ(exited.failure, Failure::crashed);
  EXPECT_EQ(exited.reason, "exit code 3");
  const Measurement silent =
      measure_isolated(small_config(), simulated(small_device()), {}, Fault::hang_up);
  EXPECT_EQ(silent.failure, Failure::crashed);
  EXPECT_NE(silent.reason.find("no result"), std::string::npos) << silent.reason;
}

TEST(Isolate, AHangingTrialIsStoppedAndNamed) {
  const Measurement m =
      measure_isolated(small_config(), simulated(small_device()), {}, Fault::hang, {}, 0.5);
  EXPECT_EQ(m.failure, Failure::timeout);
  EXPECT_EQ(m.reason, "the trial at batch 1 ran over 0.5 s");
  EXPECT_EQ(m.note(), "timeout: the trial at batch 1 ran over 0.5 s");
  EXPECT_EQ(m.search.max_batch, 0);
  EXPECT_GT(m.est_max_batch, 0);  // the row keeps its estimate
}

TEST(Isolate, IsolatedTrialsAreReportedToTheParentAsTheyFinish) {
  std::vector<Probe> seen;
  const Measurement m = measure_isolated(
      small_config(), simulated(small_device()), {}, Fault::none,
      [&](std::int64_t batch, const TrialResult& r) {
        seen.push_back({batch, r.fit});
      },
      60);
  ASSERT_EQ(m.failure, Failure::none) << m.note();
  ASSERT_EQ(seen.size(), m.search.trials.size());
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].batch, m.search.trials[i].batch);
    EXPECT_EQ(seen[i].fits, m.search.trials[i].fits);
  }
}

}  // namespace
}  // namespace vrambench
