// Row builders for the estimate and search tables.
#include "report/result_tables.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "config/fields.h"
#include "estimate/formula.h"
#include "measure/measurement_json.h"
#include "model/weights.h"

namespace vrambench {
namespace {

// A run's wall time for a summary line: milliseconds below a tenth of a second (a sim sweep of a
// few configurations takes a few), else seconds.
std::string wall_time(double seconds) {
  if (seconds < 0.1) {
    const std::int64_t ms = std::llround(seconds * 1e3);
    return ms < 1 ? std::string("<1 ms") : fmt::format("{} ms", ms);
  }
  return fmt::format("{:.2f} s", seconds);
}

Column key_column(const std::string& field) {
  const FieldInfo& info = find_field(field);
  if (info.kind == FieldKind::integer)
    return {std::string(info.name), std::string(info.name), CellKind::integer};
  if (info.kind == FieldKind::size)
    return {std::string(info.name) + "_bytes", std::string(info.name), CellKind::bytes};
  return {std::string(info.name), std::string(info.name), CellKind::text};
}

Cell key_cell(const RunConfig& cfg, const std::string& field) {
  const FieldInfo& info = find_field(field);
  const FieldValue value = get_field(cfg, info);
  if (info.kind == FieldKind::integer) return Cell::of_int(std::get<std::int64_t>(value));
  if (info.kind == FieldKind::size) return Cell::of_bytes(std::get<std::int64_t>(value));
  return Cell::of_text(field_text(info, value));
}

}  // namespace

Bytes sim_peak_at(const Measurement& sim, std::int64_t batch) {
  auto it = sim.trials.find(batch);
  return it != sim.trials.end() && it->second.fit ? it->second.device_peak : 0;
}

std::vector<std::string> key_columns(const std::vector<std::string>& varying) {
  if (!varying.empty()) return varying;
  return {"preset", "seq"};
}

std::vector<Cell> key_cells(const RunConfig& cfg, const std::vector<std::string>& varying) {
  std::vector<Cell> cells;
  for (const std::string& f : key_columns(varying)) cells.push_back(key_cell(cfg, f));
  return cells;
}

namespace {

// Whether the key columns hold the batch already (a sweep over it).
bool has_batch_key(const std::vector<std::string>& varying) {
  const std::vector<std::string> keys = key_columns(varying);
  return std::find(keys.begin(), keys.end(), "batch") != keys.end();
}

// (a - b) / b, or none without both.
Cell relative_cell(Bytes a, Bytes b) {
  return a > 0 && b > 0 ? Cell::of_percent(static_cast<double>(a - b) / static_cast<double>(b))
                        : Cell::none(CellKind::percent);
}

Cell bytes_cell(Bytes bytes) {
  return bytes > 0 ? Cell::of_bytes(bytes) : Cell::none(CellKind::bytes);
}

// The formula's max batch and peak, none where the row's configuration has no formula.
Cell formula_max_batch_cell(const std::optional<FormulaFigures>& f) {
  return f ? Cell::of_int(f->max_batch) : Cell::none(CellKind::integer);
}
Bytes formula_peak(const std::optional<FormulaFigures>& f) {
  return f ? f->peak : 0;
}

}  // namespace

EstimateExtras estimate_extras(const std::vector<RunConfig>& configs) {
  EstimateExtras x;
  for (const RunConfig& c : configs) {
    x.deepspeed = x.deepspeed || c.strategy == Strategy::zero2 || c.strategy == Strategy::zero3;
    x.host = x.host || c.offload != Offload::none;
    x.moe = x.moe || is_moe(c.model);
  }
  return x;
}

Table estimate_table(const std::vector<std::string>& varying, bool at_batch,
                     EstimateExtras extras) {
  Table t;
  for (const std::string& f : key_columns(varying)) t.columns.push_back(key_column(f));
  if (at_batch) {
    if (!has_batch_key(varying)) t.columns.push_back({"batch", "batch", CellKind::integer});
    t.columns.push_back({"est_peak_bytes", "est peak", CellKind::bytes});
    t.columns.push_back({"allocated_peak_bytes", "allocated", CellKind::bytes});
    t.columns.push_back({"fits", "fits", CellKind::flag});
  } else {
    t.columns.push_back({"est_max_batch", "est max batch", CellKind::integer});
    t.columns.push_back({"est_peak_bytes", "est peak at max", CellKind::bytes});
    t.columns.push_back({"allocated_peak_bytes", "allocated", CellKind::bytes});
    t.columns.push_back({"formula_max_batch", "formula max batch", CellKind::integer});
  }
  t.columns.push_back({"formula_peak_bytes", "formula", CellKind::bytes});
  t.columns.push_back({"formula_vs_est", "formula vs est", CellKind::percent});
  t.columns.push_back({"params", "params", CellKind::integer});
  if (extras.moe) t.columns.push_back({"active_params", "active params", CellKind::integer});
  t.columns.push_back({"model_state_bytes", "model state", CellKind::bytes});
  t.columns.push_back({"fixed_bytes", "fixed", CellKind::bytes});
  t.columns.push_back({"per_sample_bytes", "per sample", CellKind::bytes});
  t.columns.push_back({"capacity_bytes", "capacity", CellKind::bytes});
  if (extras.host) t.columns.push_back({"host_bytes", "host (offload)", CellKind::bytes});
  if (extras.deepspeed) {
    t.columns.push_back({"deepspeed_count_bytes", "model states, DS count", CellKind::bytes});
    t.columns.push_back({"deepspeed_estimate_bytes", "DeepSpeed est", CellKind::bytes});
    t.columns.push_back({"count_vs_deepspeed", "count vs DS", CellKind::percent});
  }
  return t;
}

std::vector<Cell> estimate_row(const EstimateFigures& e, const std::vector<std::string>& varying,
                               bool at_batch, EstimateExtras extras) {
  std::vector<Cell> row = key_cells(e.config, varying);
  const Cell allocated =
      e.allocated > 0 ? Cell::of_bytes(e.allocated) : Cell::none(CellKind::bytes);
  if (at_batch) {
    if (!has_batch_key(varying)) row.push_back(Cell::of_int(e.batch));
    row.push_back(Cell::of_bytes(e.peak));
    row.push_back(allocated);
    row.push_back(Cell::of_flag(e.fits));
  } else {
    row.push_back(Cell::of_int(e.batch));
    row.push_back(bytes_cell(e.peak));
    row.push_back(allocated);
    row.push_back(formula_max_batch_cell(e.formula));
  }
  row.push_back(bytes_cell(formula_peak(e.formula)));
  row.push_back(relative_cell(formula_peak(e.formula), e.peak));
  row.push_back(Cell::of_int(e.parameters));
  if (extras.moe) row.push_back(Cell::of_int(active_parameter_count(e.config.model)));
  row.push_back(Cell::of_bytes(e.breakdown.model_state));
  row.push_back(Cell::of_bytes(e.breakdown.fixed_total()));
  row.push_back(Cell::of_bytes(e.breakdown.per_sample_total()));
  row.push_back(Cell::of_bytes(e.capacity));
  if (extras.host) row.push_back(Cell::of_bytes(e.host));
  if (extras.deepspeed) {
    const Bytes count = e.deepspeed_count.value_or(0), ds = e.deepspeed_estimate.value_or(0);
    row.push_back(bytes_cell(count));
    row.push_back(bytes_cell(ds));
    row.push_back(relative_cell(count, ds));
  }
  return row;
}

std::vector<std::string> seq_key_columns(const std::vector<std::string>& varying) {
  std::vector<std::string> keys;
  for (const std::string& f : key_columns(varying))
    if (f != "seq") keys.push_back(f);
  if (keys.empty()) keys.push_back("preset");
  return keys;
}

Table seq_search_table(const std::vector<std::string>& varying, const std::string& measured) {
  Table t;
  for (const std::string& f : seq_key_columns(varying)) t.columns.push_back(key_column(f));
  if (std::find(varying.begin(), varying.end(), "batch") == varying.end())
    t.columns.push_back({"batch", "batch", CellKind::integer});
  t.columns.push_back({"est_max_seq", "est max seq", CellKind::integer});
  t.columns.push_back({measured + "_max_seq", measured + " max seq", CellKind::integer});
  t.columns.push_back({measured + "_peak_bytes", measured + " peak at max", CellKind::bytes});
  t.columns.push_back({"capacity_bytes", "capacity", CellKind::bytes});
  t.columns.push_back({"trials", "trials", CellKind::integer});
  t.columns.push_back({"note", "note", CellKind::text});
  return t;
}

std::vector<Cell> seq_search_row(const SeqMeasurement& m, const std::vector<std::string>& varying,
                                 Bytes capacity) {
  std::vector<Cell> row;
  for (const std::string& f : seq_key_columns(varying)) row.push_back(key_cell(m.config, f));
  if (std::find(varying.begin(), varying.end(), "batch") == varying.end())
    row.push_back(Cell::of_int(m.config.batch));
  row.push_back(Cell::of_int(m.est_max_seq));
  row.push_back(Cell::of_int(m.search.max_seq));
  const TrialResult* at = m.at_max();
  row.push_back(at ? Cell::of_bytes(at->device_peak) : Cell::none(CellKind::bytes));
  row.push_back(Cell::of_bytes(capacity));
  row.push_back(Cell::of_int(static_cast<std::int64_t>(m.search.trials.size())));
  std::string note;
  if (m.search.max_seq == 0) note = "64 tokens do not fit";
  if (m.search.hit_limit) note = "the search limit fit";
  if (m.search.non_monotone)
    note = fmt::format("non-monotone: seq {} failed but seq {} fit", m.search.non_monotone->first,
                       m.search.non_monotone->second);
  row.push_back(Cell::of_text(note));
  return row;
}

std::string seq_search_summary_line(const std::vector<Column>& columns, const RowSource& rows,
                                    const std::string& device, double seconds) {
  std::int64_t configurations = 0, trials = 0, shortest = INT64_MAX, longest = 0;
  std::size_t max_col = 0, trials_col = 0;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const std::string& key = columns[c].key;
    if (key.size() > 8 && key.ends_with("_max_seq") && key != "est_max_seq") max_col = c;
    if (key == "trials") trials_col = c;
  }
  rows([&](const std::vector<Cell>& row) {
    ++configurations;
    trials += row[trials_col].integer;
    shortest = std::min(shortest, row[max_col].integer);
    longest = std::max(longest, row[max_col].integer);
  });
  if (configurations == 0) shortest = 0;
  return fmt::format(
      "{} configuration{} on {}, {} trials in {}: longest sequence {}", configurations,
      configurations == 1 ? "" : "s", device, trials, wall_time(seconds),
      shortest == longest ? std::to_string(longest) : fmt::format("{}..{}", shortest, longest));
}

Table search_table(const std::vector<std::string>& varying, const std::string& measured,
                   bool with_paged) {
  Table t;
  for (const std::string& f : key_columns(varying)) t.columns.push_back(key_column(f));
  const auto paged = [&] {
    if (with_paged)
      t.columns.push_back({measured + "_paged_bytes", "paged / host state", CellKind::bytes});
  };
  if (measured == "sim") {
    // A prediction: est and sim are one figure (see result_tables.h).
    t.columns.push_back({"sim_max_batch", "max batch", CellKind::integer});
    t.columns.push_back({"allocated_peak_bytes", "allocated", CellKind::bytes});
    t.columns.push_back({"reserved_peak_bytes", "reserved", CellKind::bytes});
    paged();
    t.columns.push_back({"sim_next_peak_bytes", "needs at max+1", CellKind::bytes});
    t.columns.push_back({"formula_max_batch", "formula max batch", CellKind::integer});
    t.columns.push_back({"formula_peak_bytes", "formula", CellKind::bytes});
    t.columns.push_back({"formula_vs_est", "formula vs est", CellKind::percent});
  } else {
    t.columns.push_back({"est_max_batch", "est max batch", CellKind::integer});
    t.columns.push_back({"sim_max_batch", "sim max batch", CellKind::integer});
    t.columns.push_back({measured + "_max_batch", measured + " max batch", CellKind::integer});
    t.columns.push_back({"compared_batch", "at batch", CellKind::integer});
    t.columns.push_back({"est_peak_bytes", "est peak", CellKind::bytes});
    t.columns.push_back({"sim_peak_bytes", "sim peak", CellKind::bytes});
    t.columns.push_back({measured + "_peak_bytes", measured + " peak", CellKind::bytes});
    paged();
    t.columns.push_back({measured + "_vs_sim", measured + " vs sim", CellKind::percent});
    t.columns.push_back(
        {measured + "_next_peak_bytes", measured + " needs at max+1", CellKind::bytes});
    t.columns.push_back({"rel_error", "rel err", CellKind::percent});
    t.columns.push_back({"under_estimate", "under", CellKind::flag});
    t.columns.push_back({"formula_max_batch", "formula max batch", CellKind::integer});
    t.columns.push_back({"formula_peak_bytes", "formula", CellKind::bytes});
    t.columns.push_back({"formula_vs_est", "formula vs est", CellKind::percent});
    t.columns.push_back({"formula_vs_" + measured, "formula vs " + measured, CellKind::percent});
    t.columns.push_back({"attention_impl", "attention", CellKind::text});
  }
  t.columns.push_back({"trials", "trials", CellKind::integer});
  t.columns.push_back({"note", "note", CellKind::text});
  return t;
}

std::vector<Cell> search_row(const Measurement& m, const std::vector<std::string>& varying,
                             const Measurement* sim, bool with_paged) {
  const RunConfig& cfg = m.config;
  std::vector<Cell> row = key_cells(cfg, varying);
  const TrialResult* at = m.at_max();
  const std::int64_t compared = m.compared_batch();
  const Bytes estimated = m.estimated_peak();
  const Bytes measured = m.measured_peak();
  const Bytes formula = formula_peak(m.formula);
  const auto paged = [&] {
    if (!with_paged) return;
    // Managed memory, outside the peak: the same at every batch.
    const TrialResult* t = at ? at : m.next_needed ? &*m.next_needed : nullptr;
    row.push_back(t ? Cell::of_bytes(t->paged_bytes) : Cell::none(CellKind::bytes));
  };
  // An OOM trial stops at the failing request; what max + 1 would need comes from its replay.
  const Cell next =
      m.next_needed ? Cell::of_bytes(m.next_needed->device_peak) : Cell::none(CellKind::bytes);
  std::string note = m.note();
  if (m.search.hit_limit) note = fmt::format("hit --max-batch {}", m.search.max_batch);
  if (!sim) {
    row.push_back(Cell::of_int(m.search.max_batch));
    row.push_back(at ? Cell::of_bytes(at->tensor_peak) : Cell::none(CellKind::bytes));
    row.push_back(at ? Cell::of_bytes(at->device_peak) : Cell::none(CellKind::bytes));
    paged();
    row.push_back(next);
    row.push_back(formula_max_batch_cell(m.formula));
    row.push_back(bytes_cell(formula));
    row.push_back(relative_cell(formula, estimated));
    // Equal by construction; where they are not, the note says so.
    if (m.failure == Failure::none && !m.search.hit_limit && m.est_max_batch != m.search.max_batch)
      note += fmt::format("{}est max batch {}", note.empty() ? "" : "; ", m.est_max_batch);
  } else {
    row.push_back(Cell::of_int(m.est_max_batch));
    row.push_back(Cell::of_int(sim->search.max_batch));
    row.push_back(Cell::of_int(m.search.max_batch));
    row.push_back(Cell::of_int(compared));
    row.push_back(Cell::of_bytes(estimated));
    // The sim peak at the device's compared batch, so that the two peaks sit side by side.
    const Bytes sim_peak = sim_peak_at(*sim, compared);
    row.push_back(bytes_cell(sim_peak));
    row.push_back(bytes_cell(measured));
    paged();
    row.push_back(relative_cell(measured, sim_peak));
    row.push_back(next);
    if (measured > 0) {
      row.push_back(Cell::of_percent(m.relative_error()));
      row.push_back(Cell::of_flag(estimated < measured));
    } else {
      row.push_back(Cell::none(CellKind::percent));
      row.push_back(Cell::none(CellKind::flag));
    }
    row.push_back(formula_max_batch_cell(m.formula));
    row.push_back(bytes_cell(formula));
    row.push_back(relative_cell(formula, estimated));
    row.push_back(relative_cell(formula, measured));
    row.push_back(m.attention_impl.empty() ? Cell::none(CellKind::text)
                                           : Cell::of_text(m.attention_impl));
  }
  row.push_back(Cell::of_int(static_cast<std::int64_t>(m.search.trials.size())));
  row.push_back(Cell::of_text(note));
  return row;
}

nlohmann::json search_details(const Measurement& m, const DeviceInfo& device) {
  const Bytes fixed = m.fixed_overhead > 0 ? m.fixed_overhead : device.fixed_overhead;
  nlohmann::json j;
  j["capacity_bytes"] = device.total;
  j["fixed_overhead_bytes"] = fixed;
  j["device_fixed_overhead_bytes"] = device.fixed_overhead;  // as resolved before any warm-up
  j["tensor_capacity_bytes"] = std::max<Bytes>(0, device.total - fixed);
  if (const TrialResult* t = m.at_max()) j["at_max"] = *t;
  if (const TrialResult* t = m.at_next()) j["at_max_plus_1"] = *t;
  if (m.next_needed) j["max_plus_1_needed"] = *m.next_needed;
  j["trials"] = m.search.trials;
  j["estimate"] = m.estimate;
  // The estimate's answer and its peak at the batch compared: a sim table shows them once, as
  // the sim's.
  j["est_max_batch"] = m.est_max_batch;
  j["est_peak_bytes"] = m.estimated_peak();
  if (m.est_peak_at_compared) j["est_peak_at_compared_bytes"] = *m.est_peak_at_compared;
  if (m.failure != Failure::none) j["failure"] = m.failure;
  return j;
}

namespace {

// Median and largest of |errors|, and the sign of the largest.
struct Spread {
  double median_abs = 0.0, max_abs = 0.0, max_signed = 0.0;
};
Spread spread_of(const std::vector<double>& errors) {
  Spread s;
  std::vector<double> abs_errors;
  for (double e : errors) {
    abs_errors.push_back(std::fabs(e));
    if (std::fabs(e) >= s.max_abs) {
      s.max_abs = std::fabs(e);
      s.max_signed = e;
    }
  }
  if (!abs_errors.empty()) {
    std::sort(abs_errors.begin(), abs_errors.end());
    const std::size_t n = abs_errors.size();
    s.median_abs = n % 2 ? abs_errors[n / 2] : (abs_errors[n / 2 - 1] + abs_errors[n / 2]) / 2;
  }
  return s;
}

}  // namespace

namespace {

ErrorSummary error_summary(const std::vector<double>& errors) {
  const Spread spread = spread_of(errors);
  return {static_cast<int>(errors.size()), spread.median_abs, spread.max_abs, spread.max_signed};
}

// The place of column `key`, or none when the table has no such column.
std::optional<std::size_t> column_index(const std::vector<Column>& columns, std::string_view key) {
  for (std::size_t c = 0; c < columns.size(); ++c)
    if (columns[c].key == key) return c;
  return std::nullopt;
}

bool has_value(const Cell& cell) {
  return !cell.empty && (cell.kind != CellKind::percent || std::isfinite(cell.real));
}

// "; formula vs est peak: median |err| 30.1%, max |err| 41.0% (+41.0%)", or "" without errors.
std::string formula_errors_text(const ErrorSummary& e, std::string_view against) {
  if (e.compared == 0) return "";
  return fmt::format("; formula vs {} peak: median |err| {:.1f}%, max |err| {:.1f}% ({:+.1f}%)",
                     against, 100 * e.median_abs, 100 * e.max_abs, 100 * e.max_signed);
}

}  // namespace

std::string estimate_summary_line(const std::vector<Column>& columns, const RowSource& rows,
                                  const std::string& device, std::int64_t smallest,
                                  std::int64_t largest) {
  std::int64_t configurations = 0;
  std::vector<double> formula;
  const auto formula_column = column_index(columns, "formula_vs_est");
  rows([&](const std::vector<Cell>& row) {
    ++configurations;
    if (formula_column && has_value(row[*formula_column]))
      formula.push_back(row[*formula_column].real);
  });
  return fmt::format(
      "{} configuration{} on {}: estimated max batch {}{}", configurations,
      configurations == 1 ? "" : "s", device,
      smallest == largest ? std::to_string(largest) : fmt::format("{}..{}", smallest, largest),
      formula_errors_text(error_summary(formula), "est"));
}

std::string recipe_text(const std::vector<RunConfig>& configs) {
  // Each field's values in grid order, once.
  const auto values = [&](auto value_of) {
    std::vector<std::string> seen;
    for (const RunConfig& cfg : configs) {
      std::string v(value_of(cfg));
      if (std::find(seen.begin(), seen.end(), v) == seen.end()) seen.push_back(std::move(v));
    }
    return fmt::format("{}", fmt::join(seen, "/"));
  };
  std::string text =
      fmt::format("dtype {}, finetune {}, quant {}, optimizer {}, recompute {}",
                  values([](const RunConfig& c) { return to_string(c.dtype); }),
                  values([](const RunConfig& c) { return to_string(c.finetune); }),
                  values([](const RunConfig& c) { return to_string(base_quant(c)); }),
                  values([](const RunConfig& c) { return to_string(c.optimizer); }),
                  values([](const RunConfig& c) { return to_string(c.recompute); }));
  // A preference trainer's batch is not SFT's: the summary says what one sample of it is.
  if (std::any_of(configs.begin(), configs.end(),
                  [](const RunConfig& c) { return is_preference(c); })) {
    text += fmt::format(
        ", trainer {} (a batch of {}), reference {}",
        values([](const RunConfig& c) { return to_string(c.trainer); }),
        values([](const RunConfig& c) {
          return c.trainer == Trainer::dpo ? "pairs: chosen and rejected, 2 sequences each"
                 : c.trainer == Trainer::kto
                     ? "examples, each with a KL sequence; KTOTrainer needs 2 or more"
                     : "sequences";
        }),
        values([](const RunConfig& c) {
          return is_preference(c) ? to_string(reference_of(c)) : std::string_view("none");
        }));
  }
  return text;
}

bool is_search_table(const Table& table) {
  return std::any_of(table.columns.begin(), table.columns.end(),
                     [](const Column& c) { return c.key == "trials"; });
}

SearchSummary summarize_search(const Table& table) {
  return summarize_search(table.columns, rows_of(table));
}

SearchSummary summarize_search(const std::vector<Column>& columns, const RowSource& rows) {
  SearchSummary s;
  s.measured = column_index(columns, "meas_max_batch") ? "meas" : "sim";
  const auto trials = column_index(columns, "trials");
  const auto rel_error = column_index(columns, "rel_error");
  const auto under = column_index(columns, "under_estimate");
  const auto vs_sim_column = column_index(columns, s.measured + "_vs_sim");
  const auto note = column_index(columns, "note");
  const auto formula_column =
      column_index(columns, s.measured == "sim" ? "formula_vs_est" : "formula_vs_meas");
  std::vector<double> errors, vs_sim, formula;
  // The note starts with the failure's name ("crashed: signal 6 (Aborted)"), see
  // Measurement::note().
  const auto starts = [](const Cell& cell, std::string_view prefix) {
    return cell.kind == CellKind::text && cell.text.starts_with(prefix);
  };
  rows([&](const std::vector<Cell>& row) {
    ++s.configurations;
    if (trials && has_value(row[*trials])) s.trials += row[*trials].integer;
    if (rel_error && has_value(row[*rel_error])) errors.push_back(row[*rel_error].real);
    if (under && has_value(row[*under]) && row[*under].integer != 0) ++s.under_estimates;
    if (vs_sim_column && has_value(row[*vs_sim_column])) vs_sim.push_back(row[*vs_sim_column].real);
    if (formula_column && has_value(row[*formula_column]))
      formula.push_back(row[*formula_column].real);
    if (!note) return;
    if (starts(row[*note], "non-monotone:")) ++s.non_monotone;
    if (starts(row[*note], to_string(Failure::failed) + ":") ||
        starts(row[*note], to_string(Failure::crashed) + ":"))
      ++s.failed;
    if (starts(row[*note], to_string(Failure::timeout) + ":")) ++s.timed_out;
  });
  s.errors = error_summary(errors);
  s.vs_sim = error_summary(vs_sim);
  s.formula = error_summary(formula);
  return s;
}

std::string search_summary_line(const SearchSummary& s, const std::string& device, double seconds) {
  std::string line =
      fmt::format("{} configuration{} on {}, {} trials ({:.1f} per configuration) in {}",
                  s.configurations, s.configurations == 1 ? "" : "s", device, s.trials,
                  static_cast<double>(s.trials) /
                      static_cast<double>(std::max<std::int64_t>(s.configurations, 1)),
                  wall_time(seconds));
  if (s.measured == "sim") line += "; a prediction (est and sim agree by construction)";
  if (s.errors.compared > 0)
    line += fmt::format(
        "; est vs {} peak: median |err| {:.1f}%, max |err| {:.1f}% ({:+.1f}%), {} under-estimate{}",
        s.measured, 100 * s.errors.median_abs, 100 * s.errors.max_abs, 100 * s.errors.max_signed,
        s.under_estimates, s.under_estimates == 1 ? "" : "s");
  if (s.vs_sim.compared > 0)
    line += fmt::format("; {} vs sim peak: median |diff| {:.1f}%, max |diff| {:.1f}% ({:+.1f}%)",
                        s.measured, 100 * s.vs_sim.median_abs, 100 * s.vs_sim.max_abs,
                        100 * s.vs_sim.max_signed);
  line += formula_errors_text(s.formula, s.measured == "sim" ? "est" : s.measured);
  if (s.non_monotone > 0) line += fmt::format("; {} non-monotone", s.non_monotone);
  if (s.failed > 0) line += fmt::format("; {} failed (see the note column)", s.failed);
  if (s.timed_out > 0)
    line +=
        fmt::format("; {} timed out without a finished trial (see the note column)", s.timed_out);
  return line;
}

nlohmann::json search_summary_json(const SearchSummary& s, const std::string& line,
                                   double seconds) {
  return {{"configurations", s.configurations},
          {"trials", s.trials},
          {"seconds", seconds},
          {"compared", s.errors.compared},
          {"median_abs_rel_error", s.errors.median_abs},
          {"max_abs_rel_error", s.errors.max_abs},
          {"under_estimates", s.under_estimates},
          {"non_monotone", s.non_monotone},
          {"device_vs_sim_compared", s.vs_sim.compared},
          {"device_vs_sim_median_abs", s.vs_sim.median_abs},
          {"device_vs_sim_max_abs", s.vs_sim.max_abs},
          {"formula_compared", s.formula.compared},
          {"formula_median_abs_error", s.formula.median_abs},
          {"formula_max_abs_error", s.formula.max_abs},
          {"failed", s.failed},
          {"timed_out", s.timed_out},
          {"summary", line}};
}

}  // namespace vrambench
