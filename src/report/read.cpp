// Reading result files back: the JSON document (typed by its "columns"), the CSV (text), and the
// JSON Lines partial (typed by the columns the reader expects).
#include "report/read.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "report/csv.h"

namespace vrambench {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    const bool exists = fs::exists(path, ec);
    throw UsageError(
        fmt::format("cannot read '{}': {}", path, exists ? "permission denied" : "no such file"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json parse_json(const std::string& text, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("'{}' is not JSON: {}", path, e.what()));
  }
}

// The row of JSON object `row` in the order of `columns`, typed by their kinds.
std::vector<Cell> json_cells(const std::vector<Column>& columns, const nlohmann::json& row,
                             const std::string& path) {
  if (!row.is_object() || row.size() != columns.size())
    throw UsageError(
        fmt::format("'{}': a row is not an object of its {} columns", path, columns.size()));
  std::vector<Cell> cells;
  for (const Column& column : columns) {
    if (!row.contains(column.key))
      throw UsageError(fmt::format("'{}': a row has no '{}'", path, column.key));
    try {
      cells.push_back(cell_from_json(column.kind, row.at(column.key)));
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("'{}', column {}: {}", path, column.key, e.what()));
    }
  }
  return cells;
}

ResultFile read_json_document(const std::string& path) {
  const nlohmann::json doc = parse_json(read_text(path), path);
  if (!doc.is_object() || !doc.contains("columns") || !doc.contains("rows") ||
      !doc["columns"].is_array() || !doc["rows"].is_array())
    throw UsageError(
        fmt::format("'{}' is not a vrambench result (no \"columns\" and \"rows\")", path));
  ResultFile file;
  file.path = path;
  for (const nlohmann::json& column : doc["columns"]) {
    if (!column.is_object() || !column.contains("key") || !column["key"].is_string())
      throw UsageError(fmt::format("'{}': a column has no key", path));
    file.table.columns.push_back({column["key"].get<std::string>(),
                                  column.value("title", column["key"].get<std::string>()),
                                  kind_from_name(column.value("kind", "text"))});
  }
  for (const nlohmann::json& row : doc["rows"])
    file.table.add_row(json_cells(file.table.columns, row, path));
  file.provenance = doc.value("provenance", nlohmann::json());
  file.summary = doc.value("summary", nlohmann::json());
  return file;
}

// A CSV's cells typed by the kinds of the `typed` columns of the same key (text for the others).
ResultFile csv_result(const std::string& text, const std::string& path,
                      const std::vector<Column>& typed) {
  const CsvDocument csv = parse_csv(text, path);
  ResultFile file;
  file.path = path;
  for (const std::string& key : csv.header) {
    CellKind kind = CellKind::text;
    for (const Column& column : typed)
      if (column.key == key) kind = column.kind;
    file.table.columns.push_back({key, key, kind});
  }
  for (const auto& record : csv.rows) {
    std::vector<Cell> cells;
    for (std::size_t c = 0; c < record.size(); ++c) {
      try {
        cells.push_back(cell_from_text(file.table.columns[c].kind, record[c]));
      } catch (const UsageError& e) {
        throw UsageError(
            fmt::format("'{}', column {}: {}", path, file.table.columns[c].key, e.what()));
      }
    }
    file.table.add_row(std::move(cells));
  }
  return file;
}

std::vector<std::string> keys_of(const std::vector<Column>& columns) {
  std::vector<std::string> keys;
  for (const Column& column : columns) keys.push_back(column.key);
  return keys;
}

void check_columns(const std::vector<Column>& found, const Table& header, const std::string& path) {
  if (keys_of(found) != keys_of(header.columns))
    throw UsageError(
        fmt::format("--resume: '{}' has the columns {}, this command writes {} (another command?)",
                    path, fmt::join(keys_of(found), ","), fmt::join(keys_of(header.columns), ",")));
}

}  // namespace

ResultFile read_result_file(const std::string& path) {
  if (path.ends_with(".json")) return read_json_document(path);
  if (path.ends_with(".csv")) return csv_result(read_text(path), path, {});
  throw UsageError(fmt::format("'{}': a result file is NAME.csv or NAME.json", path));
}

FinishedRows read_finished_rows(const std::string& base, const Table& header) {
  FinishedRows finished;
  const auto exists = [](const std::string& path) {
    std::error_code ec;
    return fs::exists(path, ec);
  };
  // A kill can cut the last line of a partial: only whole lines are finished rows.
  const auto whole_lines = [](std::string text) {
    text.erase(text.find_last_of('\n') == std::string::npos ? 0 : text.find_last_of('\n') + 1);
    return text;
  };
  if (const std::string path = base + ".jsonl.partial"; exists(path)) {
    finished.path = path;
    std::istringstream lines(whole_lines(read_text(path)));
    for (std::string line; std::getline(lines, line);)
      if (!line.empty())
        finished.rows.push_back(json_cells(header.columns, parse_json(line, path), path));
  } else if (const std::string json = base + ".json"; exists(json)) {
    ResultFile file = read_json_document(json);
    check_columns(file.table.columns, header, json);
    finished.path = json;
    finished.rows = std::move(file.table.rows);
    const nlohmann::json details = file.summary.value("details", nlohmann::json());
    for (std::size_t i = 0; i < finished.rows.size(); ++i)
      finished.details.push_back(details.is_array() && i < details.size() ? details[i]
                                                                          : nlohmann::json());
  } else {
    for (const char* ext : {".csv.partial", ".csv"}) {
      const std::string csv = base + ext;
      if (!exists(csv)) continue;
      ResultFile file = csv_result(whole_lines(read_text(csv)), csv, header.columns);
      check_columns(file.table.columns, header, csv);
      finished.path = csv;
      finished.rows = std::move(file.table.rows);
      break;
    }
  }
  finished.details.resize(finished.rows.size());
  return finished;
}

}  // namespace vrambench
