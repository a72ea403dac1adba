// Result tables as typed cells, and the printers that turn them into Markdown (for people: aligned,
// sizes in MiB/GiB), CSV and JSON (for programs: raw integers, units in the column names).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace vrambench {

enum class CellKind {
  text,     // printed as is
  integer,  // raw integer everywhere
  bytes,    // Markdown: "23.99 GiB"; CSV/JSON: raw integer bytes
  percent,  // value is a fraction (0.031): Markdown "+3.1%"; CSV/JSON: the fraction as a number
  flag,     // Markdown "yes"/""; CSV "1"/"0"; JSON true/false
};

struct Cell {
  CellKind kind = CellKind::text;
  std::string text;
  std::int64_t integer = 0;
  double real = 0.0;
  bool empty = false;  // "no value" (printed as "-" in Markdown, empty in CSV, null in JSON)

  static Cell of_text(std::string s);
  static Cell of_int(std::int64_t v);
  static Cell of_bytes(std::int64_t v);
  static Cell of_percent(double fraction);
  static Cell of_flag(bool v);
  static Cell none(CellKind kind);
};

struct Column {
  std::string key;    // CSV/JSON name with its unit: "est_peak_bytes", "max_batch", "seq"
  std::string title;  // Markdown header: "est peak", "max batch", "seq"
  CellKind kind = CellKind::text;
};

struct Table {
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;
  void add_row(std::vector<Cell> row);  // throws InternalError when the width is wrong
};

// Rows handed one at a time to a visitor, wherever they live: a Table's, or a sweep's read back
// from its partial file (ResultWriter::for_each_row).
using RowVisitor = std::function<void(const std::vector<Cell>&)>;
using RowSource = std::function<void(const RowVisitor&)>;
RowSource rows_of(const Table& table);

// An aligned Markdown table: header, separator (numbers right-aligned), one line per row.
std::string to_markdown(const Table& table);
// The same table printed a row at a time, for rows that are not held together (a sweep's rows live
// in its partial file): every row widens the layout first, then header() and line(row) print it.
class MarkdownLayout {
 public:
  explicit MarkdownLayout(std::vector<Column> columns);
  void widen(const std::vector<Cell>& row);
  std::string header() const;  // the titles and the separator line
  std::string line(const std::vector<Cell>& row) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::size_t> widths_;
  std::string aligned(const std::vector<std::string>& texts) const;  // one line, padded
};
// CSV: header line of keys, then one line per row; text fields quoted when they need it.
std::string csv_header(const Table& table);
std::string csv_row(const Table& table, const std::vector<Cell>& row);
// JSON value of one row: {key: value, ...}.
nlohmann::json json_row(const Table& table, const std::vector<Cell>& row);

// A cell's value as the CSV writes it, unquoted ("" when it has none).
std::string cell_text(const Cell& cell);
// The inverses of the CSV and JSON printers, for tables read back (--resume, compare, merge): the
// cell of `kind` that prints as `text` or as `value`. Throw UsageError naming the value when it is
// not one of that kind.
Cell cell_from_text(CellKind kind, std::string_view text);
Cell cell_from_json(CellKind kind, const nlohmann::json& value);
// "text", "integer", "bytes", "percent", "flag": the JSON's column kinds. kind_from_name throws
// UsageError for another name.
std::string_view kind_name(CellKind kind);
CellKind kind_from_name(std::string_view name);

// Where a result came from; written into the JSON beside the rows (the CSV is rows alone).
struct Provenance {
  std::string tool_version;
  std::string git_commit;
  std::string device;        // "sim:h100-80gb (H100 SXM 80GB)", "cpu", "NVIDIA H100 80GB HBM3"
  std::string utc_time;      // ISO 8601, "2026-11-22T10:00:00Z"
  std::string command_line;  // the full argv, shell-quoted
  std::map<std::string, std::string> extra;  // driver, CUDA, cuDNN versions ...
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Provenance, tool_version, git_commit, device, utc_time,
                                   command_line, extra)
Provenance make_provenance(int argc, const char* const* argv, std::string device);
// The words of a command line as make_provenance quotes it (single quotes, '\'' for a quote).
std::vector<std::string> shell_words(std::string_view command_line);

}  // namespace vrambench
