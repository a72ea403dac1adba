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

// The row of JSON object `row` in the order of `columns`, typed by their kinds; `where` names it
// in errors ("'x.json'", "'x.jsonl.partial' line 4").
std::vector<Cell> json_cells(const std::vector<Column>& columns, const nlohmann::json& row,
                             const std::string& where) {
  if (!row.is_object() || row.size() != columns.size())
    throw UsageError(
        fmt::format("{}: a row is not an object of its {} columns", where, columns.size()));
  std::vector<Cell> cells;
  for (const Column& column : columns) {
    if (!row.contains(column.key))
      throw UsageError(fmt::format("{}: a row has no '{}'", where, column.key));
    try {
      cells.push_back(cell_from_json(column.kind, row.at(column.key)));
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("{}, column {}: {}", where, column.key, e.what()));
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
    file.table.add_row(json_cells(file.table.columns, row, fmt::format("'{}'", path)));
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

// Line 1 of a JSON Lines partial: {"provenance": {...}}.
nlohmann::json partial_provenance(const std::string& line, const std::string& where) {
  try {
    const nlohmann::json head = nlohmann::json::parse(line);
    if (head.is_object() && head.size() == 1 && head["provenance"].is_object())
      return head["provenance"];
  } catch (const nlohmann::json::exception&) {
  }
  throw UsageError(fmt::format(
      "{} is not the provenance of a run (a damaged partial: remove it to run again)", where));
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

FinishedRow partial_row(const std::vector<Column>& columns, std::string_view line,
                        const std::string& where) {
  nlohmann::json row;
  try {
    row = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{} is not a row: {} (a damaged partial: remove it to run again)",
                                 where, e.what()));
  }
  FinishedRow finished;
  if (row.is_object() && row.contains("details")) {
    finished.details = std::move(row["details"]);
    row.erase("details");
  }
  try {
    finished.cells = json_cells(columns, row, where);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format(
        "{} (a damaged partial, or another table's: remove it to run again)", e.what()));
  }
  return finished;
}

std::string read_finished_rows(
    const std::string& base, const Table& header,
    const std::function<void(const std::string& path, const nlohmann::json& provenance)>& found,
    const std::function<void(FinishedRow&&)>& visit) {
  const auto exists = [](const std::string& path) {
    std::error_code ec;
    return fs::exists(path, ec);
  };
  if (const std::string path = base + ".jsonl.partial"; exists(path)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError(fmt::format("cannot read '{}': permission denied", path));
    std::size_t number = 0;
    bool announced = false;
    // A line is a row only once its newline is there: a kill can cut the last one.
    for (std::string line; std::getline(in, line) && !in.eof();) {
      ++number;
      if (line.empty()) continue;
      const std::string where = fmt::format("'{}' line {}", path, number);
      if (number == 1 && line.starts_with("{\"provenance\":")) {
        found(path, partial_provenance(line, where));
        announced = true;
        continue;
      }
      // No provenance line: an older vrambench's partial when its first line is a row.
      FinishedRow row = partial_row(header.columns, line, where);
      if (!announced) found(path, nullptr);
      announced = true;
      visit(std::move(row));
    }
    if (!announced) found(path, nullptr);
    return path;
  }
  if (const std::string json = base + ".json"; exists(json)) {
    ResultFile file = read_json_document(json);
    check_columns(file.table.columns, header, json);
    found(json, file.provenance);
    const nlohmann::json details = file.summary.is_object()
                                       ? file.summary.value("details", nlohmann::json())
                                       : nlohmann::json();
    for (std::size_t i = 0; i < file.table.rows.size(); ++i)
      visit({0, std::move(file.table.rows[i]),
             details.is_array() && i < details.size() ? details[i] : nlohmann::json()});
    return json;
  }
  for (const char* ext : {".csv.partial", ".csv"}) {
    const std::string csv = base + ext;
    if (!exists(csv)) continue;
    std::string text = read_text(csv);
    text.erase(text.find_last_of('\n') == std::string::npos ? 0 : text.find_last_of('\n') + 1);
    ResultFile file = csv_result(text, csv, header.columns);
    check_columns(file.table.columns, header, csv);
    found(csv, nullptr);
    for (auto& row : file.table.rows) visit({0, std::move(row), nullptr});
    return csv;
  }
  return "";
}

}  // namespace vrambench
