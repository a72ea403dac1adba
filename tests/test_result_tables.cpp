// The rows of the estimate and search tables.
#include <gtest/gtest.h>

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

TEST(ResultTables, SearchRowComparesAtTheMaxBatch) {
  RunConfig cfg;
  cfg.model = find_preset("tiny").model;
  cfg.seq = 64;
  DeviceInfo d;
  d.total = 64 * MiB;
  d.fixed_overhead = 8 * MiB;
  const Measurement m = measure(cfg, simulated(d), {});
  ASSERT_GT(m.search.max_batch, 0);
  const Table t = search_table({"seq"}, "sim");
  const std::vector<Cell> row = search_row(m, {"seq"});
  ASSERT_EQ(row.size(), t.columns.size());
  EXPECT_EQ(row[column_index(t, "seq")].integer, 64);
  EXPECT_EQ(row[column_index(t, "sim_max_batch")].integer, m.search.max_batch);
  EXPECT_EQ(row[column_index(t, "compared_batch")].integer, m.search.max_batch);
  const std::int64_t sim_peak = row[column_index(t, "sim_peak_bytes")].integer;
  const std::int64_t est_peak = row[column_index(t, "est_peak_bytes")].integer;
  EXPECT_LE(sim_peak, d.total);
  EXPECT_GT(row[column_index(t, "sim_next_peak_bytes")].integer, d.total);
  EXPECT_DOUBLE_EQ(row[column_index(t, "rel_error")].real,
                   static_cast<double>(est_peak - sim_peak) / static_cast<double>(sim_peak));
  EXPECT_EQ(row[column_index(t, "under_estimate")].integer != 0, est_peak < sim_peak);
}

TEST(ResultTables, ErrorSummaryTakesMedianAndMaxOfAbsoluteErrors) {
  RunConfig cfg;
  cfg.model = find_preset("tiny").model;
  DeviceInfo d;
  d.total = 64 * MiB;
  d.fixed_overhead = 8 * MiB;
  std::vector<Measurement> rows;
  for (std::int64_t seq : {32, 64, 128}) {
    cfg.seq = seq;
    rows.push_back(measure(cfg, simulated(d), {}));
  }
  const ErrorSummary s = summarize_errors(rows);
  ASSERT_EQ(s.compared, 3);
  std::vector<double> errors;
  for (const Measurement& m : rows) errors.push_back(std::fabs(m.relative_error()));
  std::sort(errors.begin(), errors.end());
  EXPECT_DOUBLE_EQ(s.median_abs, errors[1]);
  EXPECT_DOUBLE_EQ(s.max_abs, errors[2]);
}

}  // namespace
}  // namespace vrambench
