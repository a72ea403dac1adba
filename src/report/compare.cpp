// Joining two result tables on their configuration columns and measuring what moved.
#include "report/compare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>

#include "config/fields.h"
#include "core/error.h"
#include "core/units.h"

namespace vrambench {
namespace {

// The figures compared, in this order where a file has them: the max batches, then the peaks
// (a sim table's allocated and reserved, a real device's est, sim and meas), then the formula's.
constexpr std::string_view kCompared[] = {
    "est_max_batch",        "sim_max_batch",       "meas_max_batch", "est_peak_bytes",
    "allocated_peak_bytes", "reserved_peak_bytes", "sim_peak_bytes", "meas_peak_bytes",
    "formula_max_batch",    "formula_peak_bytes"};

bool is_peak(std::string_view key) {
  return key.ends_with("_peak_bytes");
}

std::string title_of(std::string_view key) {
  std::string title(key);
  for (std::string_view suffix : {"_peak_bytes", "_max_batch"})
    if (key.ends_with(suffix))
      title = fmt::format("{} {}", key.substr(0, key.size() - suffix.size()),
                          suffix == "_peak_bytes" ? "peak" : "max batch");
  return title;
}

std::optional<std::size_t> index_of(const Table& table, std::string_view key) {
  for (std::size_t c = 0; c < table.columns.size(); ++c)
    if (table.columns[c].key == key) return c;
  return std::nullopt;
}

std::optional<std::int64_t> number_in(const Cell& cell, const std::string& path,
                                      std::string_view key) {
  const std::string text = cell_text(cell);
  if (text.empty()) return std::nullopt;
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size())
    throw UsageError(fmt::format("'{}', column {}: '{}' is not a whole number", path, key, text));
  return n;
}

// "seq=512 dtype=bf16", the configuration of one row, and its join key.
std::string row_name(const Table& table, const std::vector<std::size_t>& config,
                     const std::vector<Cell>& row) {
  std::string name;
  for (std::size_t c : config)
    name +=
        fmt::format("{}{}={}", name.empty() ? "" : " ", table.columns[c].key, cell_text(row[c]));
  return name.empty() ? "(the one configuration)" : name;
}

std::map<std::string, const std::vector<Cell>*> rows_by_name(
    const ResultFile& file, const std::vector<std::size_t>& config) {
  std::map<std::string, const std::vector<Cell>*> rows;
  for (const auto& row : file.table.rows) {
    const std::string name = row_name(file.table, config, row);
    if (!rows.emplace(name, &row).second)
      throw UsageError(fmt::format("'{}': the configuration {} appears twice", file.path, name));
  }
  return rows;
}

std::string value_text(std::optional<std::int64_t> value, bool peak) {
  if (!value) return "-";
  return peak ? format_bytes(*value) : std::to_string(*value);
}

}  // namespace

std::vector<std::string> configuration_columns(const Table& table) {
  std::vector<std::string> keys;
  for (const Column& column : table.columns)
    for (const FieldInfo& info : fields())
      if (column.key == info.name ||
          (info.kind == FieldKind::size && column.key == std::string(info.name) + "_bytes"))
        keys.push_back(column.key);
  return keys;
}

Comparison compare_results(const ResultFile& base, const ResultFile& fresh,
                           const CompareOptions& options) {
  Comparison out;
  out.config_columns = configuration_columns(base.table);
  const std::vector<std::string> fresh_config = configuration_columns(fresh.table);
  if (out.config_columns != fresh_config)
    throw UsageError(fmt::format(
        "different configuration columns: '{}' has {}, '{}' has {}", base.path,
        out.config_columns.empty() ? "none" : fmt::format("{}", fmt::join(out.config_columns, ",")),
        fresh.path,
        fresh_config.empty() ? "none" : fmt::format("{}", fmt::join(fresh_config, ","))));
  for (std::string_view key : kCompared) {
    const bool in_base = index_of(base.table, key).has_value();
    const bool in_new = index_of(fresh.table, key).has_value();
    if (in_base && in_new) out.compared.emplace_back(key);
    if (in_base && !in_new) out.columns_only_in_base.emplace_back(key);
    if (!in_base && in_new) out.columns_only_in_new.emplace_back(key);
  }
  if (out.compared.empty())
    throw UsageError(
        fmt::format("'{}' and '{}' share no peak or max batch column", base.path, fresh.path));

  if (base.provenance.is_object() && fresh.provenance.is_object())
    for (RunDifference& d : run_differences(base.provenance, fresh.provenance))
      if (d.what != "git_commit") out.provenance.push_back(std::move(d));

  std::vector<std::size_t> base_config, fresh_config_index;
  for (const std::string& key : out.config_columns) {
    base_config.push_back(*index_of(base.table, key));
    fresh_config_index.push_back(*index_of(fresh.table, key));
  }
  const auto base_rows = rows_by_name(base, base_config);
  const auto fresh_rows = rows_by_name(fresh, fresh_config_index);

  for (const std::string& key : out.config_columns)
    out.table.columns.push_back({key, key, CellKind::text});
  for (const std::string& key : out.compared)
    out.table.columns.push_back({key, title_of(key), CellKind::text});
  out.table.columns.push_back({"out_of_tolerance", "out of tolerance", CellKind::text});

  // Base order first, so that the table reads like the files.
  for (const auto& row : base.table.rows) {
    const std::string name = row_name(base.table, base_config, row);
    const auto found = fresh_rows.find(name);
    if (found == fresh_rows.end()) {
      out.only_in_base.push_back(name);
      continue;
    }
    ++out.matched;
    const std::vector<Cell>& other = *found->second;
    std::vector<Cell> shown;
    for (std::size_t c : base_config) shown.push_back(Cell::of_text(cell_text(row[c])));
    std::vector<std::string> beyond;
    for (const std::string& key : out.compared) {
      const bool peak = is_peak(key);
      const auto before = number_in(row[*index_of(base.table, key)], base.path, key);
      const auto after = number_in(other[*index_of(fresh.table, key)], fresh.path, key);
      std::string change;
      bool out_of_tolerance = false;
      if (before == after) {
        change = peak ? "0" : value_text(before, false);
      } else if (!before || !after) {
        change = fmt::format("{} → {}", value_text(before, peak), value_text(after, peak));
        out_of_tolerance = true;
      } else if (peak) {
        const double relative =
            *before == 0 ? INFINITY
                         : static_cast<double>(*after - *before) / static_cast<double>(*before);
        change = fmt::format("{:+.3g}%", 100 * relative);
        out_of_tolerance = std::fabs(100 * relative) > options.tolerance_percent;
      } else {
        change = fmt::format("{} → {}", *before, *after);
        out_of_tolerance = std::llabs(*after - *before) > options.batch_tolerance;
      }
      if (out_of_tolerance) beyond.push_back(fmt::format("{} {}", title_of(key), change));
      shown.push_back(Cell::of_text(change));
    }
    if (!beyond.empty()) ++out.out_of_tolerance;
    shown.push_back(Cell::of_text(fmt::format("{}", fmt::join(beyond, "; "))));
    if (options.all || !beyond.empty()) out.table.add_row(std::move(shown));
  }
  for (const auto& row : fresh.table.rows) {
    const std::string name = row_name(fresh.table, fresh_config_index, row);
    if (!base_rows.count(name)) out.only_in_new.push_back(name);
  }
  return out;
}

bool Comparison::other_configurations() const {
  return std::any_of(provenance.begin(), provenance.end(), [](const RunDifference& d) {
    return d.what == "command" || d.what == "device" || d.what == "framework";
  });
}

std::string format_comparison(const Comparison& comparison, const ResultFile& base,
                              const ResultFile& fresh, const CompareOptions& options) {
  std::string out;
  if (!comparison.provenance.empty())
    out += fmt::format("{} and {} differ in provenance: {}\n\n", base.path, fresh.path,
                       describe(comparison.provenance));
  if (!comparison.table.rows.empty()) out += to_markdown(comparison.table) + "\n";
  for (const auto& [rows, path] : {std::pair{&comparison.only_in_base, &base.path},
                                   std::pair{&comparison.only_in_new, &fresh.path}}) {
    if (rows->empty()) continue;
    out += fmt::format("Only in {}:\n", *path);
    for (const std::string& name : *rows) out += fmt::format("  {}\n", name);
    out += "\n";
  }
  std::string columns;
  for (const auto& [keys, path] : {std::pair{&comparison.columns_only_in_base, &base.path},
                                   std::pair{&comparison.columns_only_in_new, &fresh.path}})
    if (!keys->empty())
      columns += fmt::format("; not compared, only in {}: {}", *path, fmt::join(*keys, ", "));
  out += fmt::format(
      "{} of {} matched row{} out of tolerance (peaks ±{:g}%, max batches ±{}); {} only in {}, {} "
      "only in {}{}{}: {}\n",
      comparison.out_of_tolerance, comparison.matched, comparison.matched == 1 ? "" : "s",
      options.tolerance_percent, options.batch_tolerance, comparison.only_in_base.size(), base.path,
      comparison.only_in_new.size(), fresh.path, columns,
      comparison.other_configurations() ? "; rows of other configurations (see the first line)"
                                        : "",
      comparison.passed() ? "same" : "DIFFERENT");
  return out;
}

}  // namespace vrambench
