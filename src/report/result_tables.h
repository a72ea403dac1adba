// The tables vrambench prints and writes: one row per configuration of a sweep, for the estimate
// alone (`vrambench estimate`) and for the search (estimate versus the device).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "device/device.h"
#include "estimate/estimate.h"
#include "measure/measure.h"
#include "report/table.h"

namespace vrambench {

// `at_batch`: rows give the peak at cfg.batch (and whether it fits) instead of the max batch,
// from a breakdown analysed with DeviceOverhead::share_at_batch; the batch is a column of its own
// unless the sweep varies it (a key column then). Every row has the formula's peak at the same
// batch (estimate/formula.h, with the device's context) and its error against the estimate's;
// without a batch also the formula's max batch.
//
// Columns some grids add: `deepspeed` (a ZeRO-2/3 strategy in the grid) the model states as
// DeepSpeed's estimator counts them on the rank's program, DeepSpeed's own estimate and the
// difference (estimate/deepspeed.h); `host` (an offload in the grid) the bytes kept in host
// memory, outside every peak; `moe` (a mixture of experts in the grid) the parameters one token
// uses (model/weights.h active_parameter_count).
struct EstimateExtras {
  bool deepspeed = false;
  bool host = false;
  bool moe = false;  // a mixture of experts: the parameters a token uses beside all of them
};
// The extras a grid of these configurations needs.
EstimateExtras estimate_extras(const std::vector<RunConfig>& configs);
Table estimate_table(const std::vector<std::string>& varying, bool at_batch,
                     EstimateExtras extras = {});
// The row of a configuration's estimate (measure/measure.h computes its figures).
std::vector<Cell> estimate_row(const EstimateFigures& e, const std::vector<std::string>& varying,
                               bool at_batch, EstimateExtras extras = {});

// `measured`: the column prefix of the device's figures, "sim" or "meas".
//
// On sim a row is a prediction: the estimate replays the allocator the sim runs, so est and sim
// are equal by construction and the row shows them once, as the sim's: the max batch, the peak
// there as allocated (tensor bytes) and reserved (segments and context), what max + 1 needs, the
// formula's max batch and peak and the formula's error against the estimate; no est against sim.
// The note gives the estimate's max batch where it is not the sim's.
//
// On a real device ("meas") a row is a measurement: est, the sim replay of the same
// configuration (`sim`, given to search_row) and the device side by side, est's error against
// the device and whether it under-estimated, the formula's error against est and the device.
//
// The formula's figures are the measurement's (Measurement::formula): its peak at the batch
// compared (the max batch, or 1 when nothing fits) with the context the measurement used, its max
// batch on the device's total.
// with_paged: a column of the paged optimizer state (managed memory, outside the peaks), for
// grids with a paged optimizer.
Table search_table(const std::vector<std::string>& varying, const std::string& measured,
                   bool with_paged = false);
std::vector<Cell> search_row(const Measurement& m, const std::vector<std::string>& varying,
                             const Measurement* sim = nullptr, bool with_paged = false);
// `search --over seq`: the longest sequence (a multiple of 64) at cfg.batch per configuration. Key
// columns are those of key_columns() without seq (what the search finds), then the batch.
std::vector<std::string> seq_key_columns(const std::vector<std::string>& varying);
Table seq_search_table(const std::vector<std::string>& varying, const std::string& measured);
std::vector<Cell> seq_search_row(const SeqMeasurement& m, const std::vector<std::string>& varying,
                                 Bytes capacity);
// "3 configurations on DEVICE, 40 trials in 0.5 s: longest sequence 1024..8192 at batch 1".
// The rows are read once, one at a time: a sweep's need not be held.
std::string seq_search_summary_line(const std::vector<Column>& columns, const RowSource& rows,
                                    const std::string& device, double seconds);

// Extra JSON per row: capacity, peaks at max and max + 1 by role, the trial log, the reason.
nlohmann::json search_details(const Measurement& m, const DeviceInfo& device);

// The summary of a search table, from its rows alone, so that a table resumed (--resume) or merged
// from shards gets the figures of one run in one go.
struct ErrorSummary {
  int compared = 0;
  double median_abs = 0.0;  // median |relative error|
  double max_abs = 0.0;     // largest |relative error|
  double max_signed = 0.0;  // the signed error of the row with the largest |error|
};
struct SearchSummary {
  std::string measured;  // the device's column prefix, "sim" or "meas"
  std::int64_t configurations = 0, trials = 0;
  ErrorSummary errors;      // est against a real device's peak (rel_error); none on sim
  int under_estimates = 0;  // rows where est < a real device's peak
  // The formula's peak against a real device's (formula_vs_meas), on sim against est's
  // (formula_vs_est).
  ErrorSummary formula;
  ErrorSummary vs_sim;   // a real device's peak against the sim replay's (meas_vs_sim)
  int non_monotone = 0;  // rows whose note says the search was not monotone
  int failed = 0;        // rows that failed or crashed
  int timed_out = 0;     // rows whose trial timed out
};
SearchSummary summarize_search(const Table& table);
// The same over rows read once, one at a time (a sweep's, from its partial).
SearchSummary summarize_search(const std::vector<Column>& columns, const RowSource& rows);
// "5 configurations on DEVICE, 15 trials (3.0 per configuration) in 0.12 s; formula vs est
// peak: median |err| ..." (on a real device: "est vs meas peak: ...; formula vs meas peak: ...").
std::string search_summary_line(const SearchSummary& s, const std::string& device, double seconds);
// The JSON summary's figures (the caller adds details).
nlohmann::json search_summary_json(const SearchSummary& s, const std::string& line, double seconds);
// Whether `table` is a search table (an estimate table otherwise).
bool is_search_table(const Table& table);

// Field names shown as key columns: the varying fields, or "preset" and "seq" when nothing varies.
std::vector<std::string> key_columns(const std::vector<std::string>& varying);
// The key cells of `cfg`, the first cells of its row in either table.
std::vector<Cell> key_cells(const RunConfig& cfg, const std::vector<std::string>& varying);
// "5 configurations on DEVICE: estimated max batch 12..40; formula vs est peak: median |err|
// ...", the formula's errors from the table's rows.
std::string estimate_summary_line(const std::vector<Column>& columns, const RowSource& rows,
                                  const std::string& device, std::int64_t smallest,
                                  std::int64_t largest);

// The recipe of a grid's configurations as the summary lines name it: "dtype bf16, finetune full,
// quant none, optimizer adamw, recompute none" (the dtype a --model's torch_dtype may have set); a
// field that varies lists its values in grid order
// ("recompute none/selective/full"). quant is the base's storage (nf4 under qlora unless given).
std::string recipe_text(const std::vector<RunConfig>& configs);

}  // namespace vrambench
