// The rows of the estimate and search tables.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "config/gpu_profiles.h"
#include "estimate/formula.h"
#include "model/families.h"
#include "report/result_tables.h"

namespace vrambench {
namespace {

DeviceInfo h100() {
  const GpuProfile& p = find_gpu_profile("h100-80gb");
  DeviceInfo d;
  d.total = p.total;
  d.fixed_overhead = p.context_overhead();
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
  const EstimateFigures e = estimate_figures(cfg, d, false);
  const Breakdown& b = e.breakdown;
  const Table t = estimate_table({}, false);
  const std::vector<Cell> row = estimate_row(e, {}, false);
  ASSERT_EQ(row.size(), t.columns.size());
  EXPECT_EQ(row[column_index(t, "model_state_bytes")].integer, 124'439'808LL * 16);
  EXPECT_EQ(row[column_index(t, "params")].integer, 124'439'808LL);
  EXPECT_EQ(row[column_index(t, "est_max_batch")].integer, b.max_batch(d.total));
  EXPECT_EQ(row[column_index(t, "capacity_bytes")].integer, d.total);
}

bool has_column(const Table& t, const std::string& key) {
  return std::any_of(t.columns.begin(), t.columns.end(),
                     [&](const Column& c) { return c.key == key; });
}

// An estimate row carries the formula at the row's batch (the estimate's max batch, or the batch
// asked for) with the device's context, its error against the estimate's peak there, and without
// a batch the formula's own max batch.
TEST(ResultTables, EstimateRowHasTheFormulaBesideTheModel) {
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model = find_preset("gpt2").model;
  const DeviceInfo d = h100();
  const Breakdown b = analyze(cfg, {d.fixed_overhead, d.gemm_workspace, d.total});
  const Table t = estimate_table({}, false);
  const std::vector<Cell> row = estimate_row(estimate_figures(cfg, d, false), {}, false);
  ASSERT_EQ(row.size(), t.columns.size());
  const std::int64_t max_batch = b.max_batch(d.total);
  RunConfig at = cfg;
  at.batch = max_batch;
  const Bytes formula = formula_peak(at, d.fixed_overhead);
  EXPECT_EQ(row[column_index(t, "formula_peak_bytes")].integer, formula);
  EXPECT_DOUBLE_EQ(
      row[column_index(t, "formula_vs_est")].real,
      static_cast<double>(formula - b.peak(max_batch)) / static_cast<double>(b.peak(max_batch)));
  EXPECT_EQ(row[column_index(t, "formula_max_batch")].integer,
            formula_max_batch(cfg, d.fixed_overhead, d.total));

  // At a batch: the formula there, against the estimate's peak there, the allocator's share taken
  // at that batch.
  cfg.batch = 3;
  const Breakdown b3 = analyze(cfg, {d.fixed_overhead, d.gemm_workspace, d.total, true});
  const Table at_batch = estimate_table({}, true);
  const std::vector<Cell> row3 = estimate_row(estimate_figures(cfg, d, true), {}, true);
  ASSERT_EQ(row3.size(), at_batch.columns.size());
  EXPECT_FALSE(has_column(at_batch, "formula_max_batch"));
  EXPECT_EQ(row3[column_index(at_batch, "formula_peak_bytes")].integer,
            formula_peak(cfg, d.fixed_overhead));
  EXPECT_DOUBLE_EQ(row3[column_index(at_batch, "formula_vs_est")].real,
                   static_cast<double>(formula_peak(cfg, d.fixed_overhead) - b3.peak(3)) /
                       static_cast<double>(b3.peak(3)));
  EXPECT_EQ(row3[column_index(at_batch, "est_peak_bytes")].integer, b3.peak(3));

  // A scope the formula does not describe: no figure, no error.
  cfg.scope = Scope::layer;
  const std::vector<Cell> layer = estimate_row(estimate_figures(cfg, d, true), {}, true);
  EXPECT_TRUE(layer[column_index(at_batch, "formula_peak_bytes")].empty);
  EXPECT_TRUE(layer[column_index(at_batch, "formula_vs_est")].empty);
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
  m.fixed_overhead = 400;
  m.search.max_batch = 7;
  m.search.trials = {{4, true}, {8, false}, {7, true}};
  TrialResult fit;
  fit.fit = true;
  fit.tensor_peak = 1200;
  fit.device_peak = 1650;
  TrialResult oom;
  oom.oom = OomInfo{"matmul", "x", 100, 50};
  oom.device_peak = 1700;
  m.trials = {{7, fit}, {8, oom}};
  TrialResult needed;
  needed.fit = true;
  needed.device_peak = 1800;
  m.next_needed = needed;
  m.formula = formula_figures(m.config, 400, 2000, 7);  // as measure() takes it
  return m;
}

// The formula of m's configuration at `batch` with m's context, and its error against `peak`.
Bytes formula_of(const Measurement& m, std::int64_t batch) {
  RunConfig at = m.config;
  at.batch = batch;
  return formula_peak(at, m.fixed_overhead);
}
double relative(Bytes a, Bytes b) {
  return static_cast<double>(a - b) / static_cast<double>(b);
}

// The formula's figures are taken with the measurement, at the batch it compares, with the context
// it used; a failed one at batch 1; a scope the formula does not describe has none.
TEST(ResultTables, TheMeasurementCarriesTheFormulaAtTheBatchCompared) {
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model = find_preset("tiny").model;
  cfg.seq = 64;
  DeviceInfo d;
  d.total = 64 * MiB;
  d.fixed_overhead = 8 * MiB;
  const Measurement m = measure(cfg, simulated(d), {});
  ASSERT_GT(m.compared_batch(), 1);
  ASSERT_TRUE(m.formula.has_value());
  RunConfig at = cfg;
  at.batch = m.compared_batch();
  EXPECT_EQ(m.formula->peak, formula_peak(at, d.fixed_overhead));
  EXPECT_EQ(m.formula->max_batch, formula_max_batch(cfg, d.fixed_overhead, d.total));
  const Measurement failed = failed_measurement(cfg, d, Failure::crashed, "signal 6 (Aborted)");
  at.batch = 1;
  ASSERT_TRUE(failed.formula.has_value());
  EXPECT_EQ(failed.formula->peak, formula_peak(at, d.fixed_overhead));
  cfg.scope = Scope::layer;
  EXPECT_FALSE(measure(cfg, simulated(d), {}).formula.has_value());
}

// On sim a row is a prediction: the max batch once, the peak there as allocated and reserved,
// what max + 1 needs, the formula and its error against the estimate; no est against sim.
TEST(ResultTables, SimSearchRowIsAPredictionWithTheFormula) {
  const Measurement m = hand_measurement();
  const Table t = search_table({"seq"}, "sim");
  const std::vector<Cell> row = search_row(m, {"seq"});
  ASSERT_EQ(row.size(), t.columns.size());
  for (const char* key : {"est_max_batch", "est_peak_bytes", "sim_peak_bytes", "compared_batch",
                          "rel_error", "under_estimate", "formula_vs_sim"})
    EXPECT_FALSE(has_column(t, key)) << key;
  EXPECT_EQ(row[column_index(t, "seq")].integer, 64);
  EXPECT_EQ(row[column_index(t, "sim_max_batch")].integer, 7);
  EXPECT_EQ(t.columns[column_index(t, "sim_max_batch")].title, "max batch");
  EXPECT_EQ(row[column_index(t, "allocated_peak_bytes")].integer, 1200);
  EXPECT_EQ(row[column_index(t, "reserved_peak_bytes")].integer, 1650);
  EXPECT_EQ(t.columns[column_index(t, "allocated_peak_bytes")].title, "allocated");
  EXPECT_EQ(t.columns[column_index(t, "reserved_peak_bytes")].title, "reserved");
  EXPECT_EQ(row[column_index(t, "sim_next_peak_bytes")].integer, 1800);
  const Bytes formula = formula_of(m, 7);
  EXPECT_EQ(row[column_index(t, "formula_peak_bytes")].integer, formula);
  // Against the estimate's peak, 1000 + 7 * 100.
  EXPECT_DOUBLE_EQ(row[column_index(t, "formula_vs_est")].real, relative(formula, 1700));
  EXPECT_EQ(row[column_index(t, "formula_max_batch")].integer,
            formula_max_batch(m.config, 400, 2000));
  EXPECT_EQ(row[column_index(t, "trials")].integer, 3);
  EXPECT_EQ(row[column_index(t, "note")].text, "");
}

// Where the estimate's max batch is not the sim's, the note says so (on sim it has no column).
TEST(ResultTables, SimSearchRowNotesAnEstimateThatDisagrees) {
  Measurement m = hand_measurement();
  m.est_max_batch = 8;
  const Table t = search_table({"seq"}, "sim");
  EXPECT_EQ(search_row(m, {"seq"})[column_index(t, "note")].text, "est max batch 8");
  m.search.hit_limit = true;  // the limit says why
  EXPECT_EQ(search_row(m, {"seq"})[column_index(t, "note")].text, "hit --max-batch 7");
}

// On a real device est, sim and meas sit side by side, est's error against meas and whether it
// under-estimated, and the formula against both est and meas.
TEST(ResultTables, DeviceSearchRowComparesEstAndTheFormulaWithMeas) {
  const Measurement m = hand_measurement();
  Measurement sim = hand_measurement();
  sim.trials.at(7).device_peak = 1640;
  const Table t = search_table({"seq"}, "meas");
  const std::vector<Cell> row = search_row(m, {"seq"}, &sim);
  ASSERT_EQ(row.size(), t.columns.size());
  EXPECT_FALSE(has_column(t, "allocated_peak_bytes"));
  EXPECT_EQ(row[column_index(t, "est_max_batch")].integer, 7);
  EXPECT_EQ(row[column_index(t, "sim_max_batch")].integer, 7);
  EXPECT_EQ(row[column_index(t, "meas_max_batch")].integer, 7);
  EXPECT_EQ(row[column_index(t, "compared_batch")].integer, 7);
  EXPECT_EQ(row[column_index(t, "est_peak_bytes")].integer, 1700);  // 1000 + 7 * 100
  EXPECT_EQ(row[column_index(t, "sim_peak_bytes")].integer, 1640);
  EXPECT_EQ(row[column_index(t, "meas_peak_bytes")].integer, 1650);
  EXPECT_DOUBLE_EQ(row[column_index(t, "meas_vs_sim")].real, 10.0 / 1640.0);
  EXPECT_EQ(row[column_index(t, "meas_next_peak_bytes")].integer, 1800);
  EXPECT_DOUBLE_EQ(row[column_index(t, "rel_error")].real, 50.0 / 1650.0);
  EXPECT_EQ(row[column_index(t, "under_estimate")].integer, 0);
  const Bytes formula = formula_of(m, 7);
  EXPECT_EQ(row[column_index(t, "formula_peak_bytes")].integer, formula);
  EXPECT_DOUBLE_EQ(row[column_index(t, "formula_vs_est")].real, relative(formula, 1700));
  EXPECT_DOUBLE_EQ(row[column_index(t, "formula_vs_meas")].real, relative(formula, 1650));
  EXPECT_EQ(row[column_index(t, "trials")].integer, 3);
}

// Compared away from the estimate's own max batch, the row and the details give the estimate's
// peak taken at the batch compared.
TEST(ResultTables, SearchRowAndDetailsUseTheEstimatesPeakTakenAtTheBatchCompared) {
  Measurement m = hand_measurement();
  EXPECT_FALSE(search_details(m, h100()).contains("est_peak_at_compared_bytes"));
  m.est_peak_at_compared = 1660;
  const Table t = search_table({"seq"}, "meas");
  const std::vector<Cell> row = search_row(m, {"seq"}, &m);
  EXPECT_EQ(row[column_index(t, "est_peak_bytes")].integer, 1660);  // not 1000 + 7 * 100
  EXPECT_DOUBLE_EQ(row[column_index(t, "rel_error")].real, 10.0 / 1650.0);
  EXPECT_DOUBLE_EQ(row[column_index(t, "formula_vs_est")].real, relative(formula_of(m, 7), 1660));
  EXPECT_EQ(search_details(m, h100()).at("est_peak_at_compared_bytes").get<Bytes>(), 1660);
  // On sim the estimate's figures, shown once as the sim's, are in the details.
  EXPECT_EQ(search_details(m, h100()).at("est_peak_bytes").get<Bytes>(), 1660);
  EXPECT_EQ(search_details(m, h100()).at("est_max_batch").get<std::int64_t>(), 7);
}

TEST(ResultTables, SearchRowOfAFailedMeasurementSaysHowItFailed) {
  Measurement m = hand_measurement();
  m.search = {};
  m.trials.clear();
  m.next_needed.reset();
  m.failure = Failure::timeout;
  m.reason = "the trial at batch 4 ran over 60 s";
  m.formula = formula_figures(m.config, 400, 2000, m.compared_batch());
  const Table t = search_table({"seq"}, "sim");
  const std::vector<Cell> row = search_row(m, {"seq"});
  EXPECT_EQ(row[column_index(t, "sim_max_batch")].integer, 0);
  EXPECT_TRUE(row[column_index(t, "allocated_peak_bytes")].empty);
  EXPECT_TRUE(row[column_index(t, "reserved_peak_bytes")].empty);
  // The formula at batch 1, against the estimate's 1000 + 100 there.
  EXPECT_DOUBLE_EQ(row[column_index(t, "formula_vs_est")].real, relative(formula_of(m, 1), 1100));
  EXPECT_EQ(row[column_index(t, "note")].text, "timeout: the trial at batch 4 ran over 60 s");
}

TEST(ResultTables, ErrorSummaryTakesMedianAndMaxOfAbsoluteErrorsFromTheRows) {
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model = find_preset("tiny").model;
  DeviceInfo d;
  d.total = 64 * MiB;
  d.fixed_overhead = 8 * MiB;
  Table table = search_table({"seq"}, "meas");
  std::vector<Measurement> rows;
  for (std::int64_t seq : {32, 64, 128}) {
    cfg.seq = seq;
    rows.push_back(measure(cfg, simulated(d), {}));
    table.add_row(search_row(rows.back(), {"seq"}, &rows.back()));
  }
  const Measurement failed = failed_measurement(cfg, d, Failure::crashed, "signal 6 (Aborted)");
  table.add_row(search_row(failed, {"seq"}, &failed));
  const SearchSummary s = summarize_search(table);
  EXPECT_EQ(s.measured, "meas");
  EXPECT_EQ(s.configurations, 4);
  ASSERT_EQ(s.errors.compared, 3);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.timed_out, 0);
  std::vector<double> errors, formula_errors;
  std::int64_t trials = 0;
  for (const Measurement& m : rows) {
    errors.push_back(std::fabs(m.relative_error()));
    formula_errors.push_back(
        std::fabs(relative(formula_of(m, m.compared_batch()), m.measured_peak())));
    trials += static_cast<std::int64_t>(m.search.trials.size());
  }
  EXPECT_EQ(s.trials, trials);
  std::sort(errors.begin(), errors.end());
  EXPECT_DOUBLE_EQ(s.errors.median_abs, errors[1]);
  EXPECT_DOUBLE_EQ(s.errors.max_abs, errors[2]);
  ASSERT_EQ(s.formula.compared, 3);
  std::sort(formula_errors.begin(), formula_errors.end());
  EXPECT_DOUBLE_EQ(s.formula.median_abs, formula_errors[1]);
  EXPECT_DOUBLE_EQ(s.formula.max_abs, formula_errors[2]);
  const std::string line = search_summary_line(s, "sim:test", 1.5);
  EXPECT_NE(line.find("4 configurations on sim:test, "), std::string::npos) << line;
  EXPECT_NE(line.find("; est vs meas peak: median |err| "), std::string::npos) << line;
  EXPECT_NE(line.find(fmt::format("; formula vs meas peak: median |err| {:.1f}%",
                                  100 * formula_errors[1])),
            std::string::npos)
      << line;
  EXPECT_NE(line.find(fmt::format("{} trials ({:.1f} per configuration) in 1.50 s", trials,
                                  static_cast<double>(trials) / 4.0)),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("1 failed"), std::string::npos) << line;
  // A sweep of a few sim configurations takes milliseconds: said so, not "0.00 s".
  EXPECT_NE(search_summary_line(s, "sim:test", 0.0034).find(" per configuration) in 3 ms"),
            std::string::npos);
  EXPECT_NE(search_summary_line(s, "sim:test", 0.0).find(" per configuration) in <1 ms"),
            std::string::npos);
  EXPECT_TRUE(is_search_table(table));
  EXPECT_FALSE(is_search_table(estimate_table({"seq"}, false)));
}

// A sim table's summary says its rows are predictions and gives the formula's error against the
// estimate; it has no est against sim and no under-estimates to count.
TEST(ResultTables, SimSummaryIsAPredictionWithTheFormulasError) {
  Table table = search_table({"seq"}, "sim");
  const Measurement m = hand_measurement();
  table.add_row(search_row(m, {"seq"}));
  const SearchSummary s = summarize_search(table);
  EXPECT_EQ(s.measured, "sim");
  EXPECT_EQ(s.errors.compared, 0);
  ASSERT_EQ(s.formula.compared, 1);
  EXPECT_DOUBLE_EQ(s.formula.max_abs, std::fabs(relative(formula_of(m, 7), 1700)));
  const std::string line = search_summary_line(s, "sim:test", 0.5);
  EXPECT_NE(line.find("; a prediction (est and sim agree by construction)"), std::string::npos)
      << line;
  EXPECT_EQ(line.find("est vs sim"), std::string::npos) << line;
  EXPECT_EQ(line.find("under-estimate"), std::string::npos) << line;
  EXPECT_NE(line.find("; formula vs est peak: median |err| "), std::string::npos) << line;
  EXPECT_EQ(search_summary_json(s, line, 0.5).at("formula_compared"), 1);
}

// The recipe the summary lines name: each field (the dtype first) once, its values in grid order
// where it varies; the base's storage under qlora is nf4 though --quant is not given.
TEST(ResultTables, RecipeNamesDtypeFinetuneQuantOptimizerAndRecompute) {
  RunConfig cfg;
  EXPECT_EQ(recipe_text({cfg}),
            "dtype bf16, finetune full, quant none, optimizer adamw, recompute none");
  RunConfig qlora = cfg;
  qlora.finetune = Finetune::qlora;
  qlora.optimizer = Optimizer::paged_adamw_8bit;
  RunConfig full = cfg;
  full.recompute = Recompute::full;
  qlora.dtype = Precision::fp16;
  EXPECT_EQ(recipe_text({cfg, qlora, full, qlora}),
            "dtype bf16/fp16, finetune full/qlora, quant none/nf4, optimizer "
            "adamw/paged-adamw-8bit, recompute none/full");
}

}  // namespace
}  // namespace vrambench
