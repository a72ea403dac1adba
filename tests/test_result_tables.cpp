// The rows of the estimate and search tables.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/presets.h"
#include "report/result_tables.h"

namespace vrambench {
namespace {

DeviceInfo h100() {
  const GpuProfile& p = find_gpu_profile("h100-80gb");
  DeviceInfo d;
  d.total = p.total;
  d.fixed_overhead = p.context_overhead;
  d.gemm_workspace = p.gemm_workspace();
  d.label = "sim:h100-80gb";
  return d;
}

std::size_t column_index(const Table& t, const std::string& key) {
  for (std::size_t i = 0; i < t.columns.size(); ++i)
    if (t.columns[i].key == key) return i;
  ADD_FAILURE() << "no column " << key;
  return 0;
}

TEST(ResultTables, ModelStateIsSixteenBytesPerParameterForMixedAdamW) {
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model = find_preset("gpt2").model;
  cfg.dtype = Precision::bf16;
  cfg.optimizer = Optimizer::adamw;
  const DeviceInfo d = h100();
  const Breakdown b = analyze(cfg, {d.fixed_overhead, d.gemm_workspace});
  const Table t = estimate_table({}, false);
  const std::vector<Cell> row = estimate_row(cfg, b, {}, d, false);
  ASSERT_EQ(row.size(), t.columns.size());
  EXPECT_EQ(row[column_index(t, "model_state_bytes")].integer, 124'439'808LL * 16);
  EXPECT_EQ(row[column_index(t, "est_max_batch")].integer, b.max_batch(d.total));
  EXPECT_EQ(row[column_index(t, "capacity_bytes")].integer, d.total);
}

// A measurement made by hand, so that every cell has a value worked out here: est peak at B is
// 1000 + 100 B, the device fit 7 samples (peak 1650) and ran out at 8 (it would need 1800).
Measurement hand_measurement() {
  Measurement m;
  m.config.model = find_preset("tiny").model;
  m.config.seq = 64;
  m.estimate.moment = "end of forward";
  m.estimate.fixed = {{MemoryComponent::weights, 600}, {MemoryComponent::cuda_context, 400}};
  m.estimate.per_sample = {{MemoryComponent::saved_activations, 100}};
  m.est_max_batch = 7;
  m.search.max_batch = 7;
  m.search.trials = {{4, true}, {8, false}, {7, true}};
  TrialResult fit;
  fit.fit = true;
  fit.device_peak = 1650;
  TrialResult oom;
  oom.oom = OomInfo{"matmul", "x", 100, 50};
  oom.device_peak = 1700;
  m.trials = {{7, fit}, {8, oom}};
  TrialResult needed;
  needed.fit = true;
  needed.device_peak = 1800;
  m.next_needed = needed;
  return m;
}

TEST(ResultTables, SearchRowComparesAtTheMaxBatch) {
  const Measurement m = hand_measurement();
  const Table t = search_table({"seq"}, "sim");
  const std::vector<Cell> row = search_row(m, {"seq"});
  ASSERT_EQ(row.size(), t.columns.size());
  EXPECT_EQ(row[column_index(t, "seq")].integer, 64);
  EXPECT_EQ(row[column_index(t, "est_max_batch")].integer, 7);
  EXPECT_EQ(row[column_index(t, "sim_max_batch")].integer, 7);
  EXPECT_EQ(row[column_index(t, "compared_batch")].integer, 7);
  EXPECT_EQ(row[column_index(t, "est_peak_bytes")].integer, 1700);  // 1000 + 7 * 100
  EXPECT_EQ(row[column_index(t, "sim_peak_bytes")].integer, 1650);
  EXPECT_EQ(row[column_index(t, "sim_next_peak_bytes")].integer, 1800);
  EXPECT_DOUBLE_EQ(row[column_index(t, "rel_error")].real, 50.0 / 1650.0);
  EXPECT_EQ(row[column_index(t, "under_estimate")].integer, 0);
  EXPECT_EQ(row[column_index(t, "trials")].integer, 3);
}

// Compared away from the estimate's own max batch, the row and the details give the estimate's
// peak taken at the batch compared.
TEST(ResultTables, SearchRowAndDetailsUseTheEstimatesPeakTakenAtTheBatchCompared) {
  Measurement m = hand_measurement();
  EXPECT_FALSE(search_details(m, h100()).contains("est_peak_at_compared_bytes"));
  m.est_peak_at_compared = 1660;
  const Table t = search_table({"seq"}, "sim");
  const std::vector<Cell> row = search_row(m, {"seq"});
  EXPECT_EQ(row[column_index(t, "est_peak_bytes")].integer, 1660);  // not 1000 + 7 * 100
  EXPECT_DOUBLE_EQ(row[column_index(t, "rel_error")].real, 10.0 / 1650.0);
  EXPECT_EQ(search_details(m, h100()).at("est_peak_at_compared_bytes").get<Bytes>(), 1660);
}

TEST(ResultTables, SearchRowOfAFailedMeasurementSaysHowItFailed) {
  Measurement m = hand_measurement();
  m.search = {};
  m.trials.clear();
  m.next_needed.reset();
  m.failure = Failure::timeout;
  m.reason = "the trial at batch 4 ran over 60 s";
  const Table t = search_table({"seq"}, "sim");
  const std::vector<Cell> row = search_row(m, {"seq"});
  EXPECT_EQ(row[column_index(t, "sim_max_batch")].integer, 0);
  EXPECT_EQ(row[column_index(t, "est_peak_bytes")].integer, 1100);  // compared at batch 1
  EXPECT_EQ(row[column_index(t, "note")].text, "timeout: the trial at batch 4 ran over 60 s");
}

TEST(ResultTables, ErrorSummaryTakesMedianAndMaxOfAbsoluteErrorsFromTheRows) {
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model = find_preset("tiny").model;
  DeviceInfo d;
  d.total = 64 * MiB;
  d.fixed_overhead = 8 * MiB;
  Table table = search_table({"seq"}, "sim");
  std::vector<Measurement> rows;
  for (std::int64_t seq : {32, 64, 128}) {
    cfg.seq = seq;
    rows.push_back(measure(cfg, simulated(d), {}));
    table.add_row(search_row(rows.back(), {"seq"}));
  }
  table.add_row(
      search_row(failed_measurement(cfg, d, Failure::crashed, "signal 6 (Aborted)"), {"seq"}));
  const SearchSummary s = summarize_search(table);
  EXPECT_EQ(s.measured, "sim");
  EXPECT_EQ(s.configurations, 4);
  ASSERT_EQ(s.errors.compared, 3);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.timed_out, 0);
  std::vector<double> errors;
  std::int64_t trials = 0;
  for (const Measurement& m : rows) {
    errors.push_back(std::fabs(m.relative_error()));
    trials += static_cast<std::int64_t>(m.search.trials.size());
  }
  EXPECT_EQ(s.trials, trials);
  std::sort(errors.begin(), errors.end());
  EXPECT_DOUBLE_EQ(s.errors.median_abs, errors[1]);
  EXPECT_DOUBLE_EQ(s.errors.max_abs, errors[2]);
  const std::string line = search_summary_line(s, "sim:test", 1.5);
  EXPECT_NE(line.find("4 configurations on sim:test, "), std::string::npos) << line;
  EXPECT_NE(line.find(fmt::format("{} trials ({:.1f} per configuration) in 1.50 s", trials,
                                  static_cast<double>(trials) / 4.0)),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("1 failed"), std::string::npos) << line;
  EXPECT_TRUE(is_search_table(table));
  EXPECT_FALSE(is_search_table(estimate_table({"seq"}, false)));
}

}  // namespace
}  // namespace vrambench
