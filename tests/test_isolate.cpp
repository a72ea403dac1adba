// The child-process isolation of a configuration: results survive the pipe, crashes become rows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "measure/isolate.h"
#include "measure/measurement_json.h"
#include "model/families.h"

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

// Every field of a Measurement set to a value other than its default, each distinct, so that a
// field the JSON drops or swaps with another comes back different.
Measurement every_field_set() {
  Measurement m;
  m.config = small_config();
  m.estimate.moment = "inside backward";
  m.estimate.fixed = {{MemoryComponent::weights, 11}, {MemoryComponent::gradients, 12}};
  m.estimate.per_sample = {{MemoryComponent::saved_activations, 13}};
  m.estimate.other_moments = {{"optimizer step", 14, 15}};
  m.estimate.model_state = 16;
  m.est_max_batch = 17;
  m.search.max_batch = 18;
  m.search.hit_limit = true;
  m.search.trials = {{18, true}, {40, false}, {19, false}};
  m.search.non_monotone = std::pair<std::int64_t, std::int64_t>{20, 21};
  TrialResult t;
  t.fit = false;
  t.oom = OomInfo{"attention", "att.probs", 22, 23};
  t.tensor_peak = 24;
  t.reserved_peak = 25;
  t.device_peak = 26;
  t.driver_peak = 27;
  t.peak_op = 28;
  t.paged_bytes = 31;
  for (int r = 0; r < kRoleCount; ++r) t.peak_by_role[static_cast<Role>(r)] = 100 + r;
  m.trials = {{19, t}};
  m.next_needed = t;
  m.next_needed->fit = true;
  m.next_needed->oom.reset();
  m.failure = Failure::timeout;
  m.reason = "the trial at batch 19 ran over 1 s";
  m.attention_impl = "cudnn-sdpa";
  m.fixed_overhead = 29;
  return m;
}

TEST(Isolate, JsonRoundTripKeepsEveryField) {
  const Measurement m = every_field_set();
  const nlohmann::json j = m;
  // The JSON itself, against values written here: plain nested JSON, enums by name.
  EXPECT_EQ(j.at("failure"), "timeout");
  EXPECT_EQ(j.at("est_max_batch"), 17);
  EXPECT_EQ(j.at("search").at("non_monotone"), nlohmann::json::parse("[20, 21]"));
  EXPECT_EQ(j.at("search").at("trials").at(1),
            nlohmann::json::parse(R"({"batch": 40, "fits": false})"));
  const nlohmann::json& trial = j.at("trials").at(0);
  EXPECT_EQ(trial.at(0), 19);
  EXPECT_EQ(trial.at(1).at("oom").at("tensor"), "att.probs");
  EXPECT_EQ(trial.at(1).at("device_peak"), 26);
  EXPECT_EQ(trial.at(1).at("peak_by_role").size(), static_cast<std::size_t>(kRoleCount));
  EXPECT_EQ(trial.at(1).at("peak_by_role").at(std::string(to_string(Role::weight))),
            100 + static_cast<int>(Role::weight));
  EXPECT_EQ(j.at("estimate").at("fixed").at(1),
            nlohmann::json::parse(R"({"kind": "gradients", "bytes": 12})"));
  EXPECT_TRUE(j.at("next_needed").at("oom").is_null());
  // And back: every field equal (operator== compares them all), the configuration from the caller.
  const Measurement back = measurement_from_json(j, m.config);
  EXPECT_TRUE(back == m);
  Measurement other = m;
  other.fixed_overhead = 30;  // the comparison sees a single field
  EXPECT_FALSE(measurement_from_json(j, m.config) == other);
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
