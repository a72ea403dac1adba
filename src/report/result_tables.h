// The tables vrambench prints and writes: one row per configuration of a sweep, for the estimate
// alone (`vrambench estimate`) and for the search (estimate versus the device).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "device/device.h"
#include "estimate/estimate.h"
#include "report/table.h"
#include "search/measure.h"

namespace vrambench {

// `at_batch`: rows give the peak at cfg.batch (and whether it fits) instead of the max batch.
Table estimate_table(const std::vector<std::string>& varying, bool at_batch);
std::vector<Cell> estimate_row(const RunConfig& cfg, const Breakdown& breakdown,
                               const std::vector<std::string>& varying, const DeviceInfo& device,
                               bool at_batch);

// `measured`: the column prefix of the device's figures, "sim" or "meas". `with_sim`: a real
// device's rows also carry the sim replay of the same configuration (max batch and peak).
// with_paged: a column of the paged optimizer state (managed memory, outside the peaks), for
// grids with a paged optimizer.
Table search_table(const std::vector<std::string>& varying, const std::string& measured,
                   bool with_sim = false, bool with_paged = false);
std::vector<Cell> search_row(const Measurement& m, const std::vector<std::string>& varying,
                             const Measurement* sim = nullptr, bool with_paged = false);
// Extra JSON per row: capacity, peaks at max and max + 1 by role, the trial log, the reason.
nlohmann::json search_details(const Measurement& m, const DeviceInfo& device);

// The summary of a search: how far est is from the device over the rows that have both.
struct ErrorSummary {
  int compared = 0;
  double median_abs = 0.0;  // median |relative error|
  double max_abs = 0.0;     // largest |relative error|
  double max_signed = 0.0;  // the signed error of the row with the largest |error|
  int under_estimates = 0;  // rows where est < device peak
  int non_monotone = 0;
};
ErrorSummary summarize_errors(const std::vector<Measurement>& rows);

// The sim replay's device peak at `batch`, or 0 when it has no fitting trial there.
Bytes sim_peak_at(const Measurement& sim, std::int64_t batch);
// How far a real device's peak is from the sim replay's at the same batch, over the rows that have
// both: `sims[i]` is the sim of `rows[i]`. Errors are (device - sim) / sim.
struct DeviceVsSim {
  int compared = 0;
  double median_abs = 0.0, max_abs = 0.0, max_signed = 0.0;
};
DeviceVsSim summarize_device_vs_sim(const std::vector<Measurement>& rows,
                                    const std::vector<Measurement>& sims);

// Field names shown as key columns: the varying fields, or "preset" and "seq" when nothing varies.
std::vector<std::string> key_columns(const std::vector<std::string>& varying);

}  // namespace vrambench
