// Typed cells and the printers that turn a Table into aligned Markdown, CSV lines and JSON rows.
#include "report/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "core/units.h"

namespace vrambench {
namespace {

bool is_numeric(CellKind kind) {
  return kind == CellKind::integer || kind == CellKind::bytes || kind == CellKind::percent;
}

// A percent without a finite value has nothing to print; it reads as an empty cell everywhere.
bool is_empty(const Cell& cell) {
  return cell.empty || (cell.kind == CellKind::percent && !std::isfinite(cell.real));
}

// Characters on screen, not bytes: UTF-8 continuation bytes take no column.
std::size_t display_width(std::string_view s) {
  return static_cast<std::size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// A '|' would end the Markdown cell and a newline the row.
std::string markdown_text(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}

std::string markdown_cell(const Cell& cell) {
  if (is_empty(cell)) return "-";
  switch (cell.kind) {
    case CellKind::text:
      return markdown_text(cell.text);
    case CellKind::integer:
      return std::to_string(cell.integer);
    case CellKind::bytes:
      return format_bytes(cell.integer);
    case CellKind::percent:
      return fmt::format("{:+.1f}%", cell.real * 100.0);
    case CellKind::flag:
      return cell.integer != 0 ? "yes" : "";
  }
  return {};
}

// RFC 4180: a field holding a separator, a quote or a line break is quoted, quotes doubled.
std::string csv_field(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

std::string csv_cell(const Cell& cell) {
  return cell.kind == CellKind::text && !is_empty(cell) ? csv_field(cell.text) : cell_text(cell);
}

nlohmann::json json_cell(const Cell& cell) {
  if (is_empty(cell)) return nullptr;
  switch (cell.kind) {
    case CellKind::text:
      return cell.text;
    case CellKind::integer:
    case CellKind::bytes:
      return cell.integer;
    case CellKind::percent:
      return cell.real;
    case CellKind::flag:
      return cell.integer != 0;
  }
  return nullptr;
}

void check_width(const Table& table, const std::vector<Cell>& row) {
  if (row.size() != table.columns.size())
    throw InternalError(fmt::format("table row has {} cells but the table has {} columns",
                                    row.size(), table.columns.size()));
}

}  // namespace

std::string cell_text(const Cell& cell) {
  if (is_empty(cell)) return "";
  switch (cell.kind) {
    case CellKind::text:
      return cell.text;
    case CellKind::integer:
    case CellKind::bytes:
      return std::to_string(cell.integer);
    case CellKind::percent:
      return fmt::format("{:.6g}", cell.real);
    case CellKind::flag:
      return cell.integer != 0 ? "1" : "0";
  }
  return {};
}

Cell cell_from_text(CellKind kind, std::string_view text) {
  if (kind == CellKind::text) return Cell::of_text(std::string(text));
  if (text.empty()) return Cell::none(kind);
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (kind == CellKind::percent) {
    double fraction = 0;
    const auto [end, ec] = std::from_chars(first, last, fraction);
    if (ec == std::errc() && end == last) return Cell::of_percent(fraction);
  } else {
    std::int64_t n = 0;
    const auto [end, ec] = std::from_chars(first, last, n);
    if (ec == std::errc() && end == last) {
      if (kind == CellKind::integer) return Cell::of_int(n);
      if (kind == CellKind::bytes) return Cell::of_bytes(n);
      if (n == 0 || n == 1) return Cell::of_flag(n == 1);
    }
  }
  throw UsageError(fmt::format("'{}' is not a {} value", text, kind_name(kind)));
}

Cell cell_from_json(CellKind kind, const nlohmann::json& value) {
  if (value.is_null()) return Cell::none(kind);
  switch (kind) {
    case CellKind::text:
      if (value.is_string()) return Cell::of_text(value.get<std::string>());
      break;
    case CellKind::integer:
      if (value.is_number_integer()) return Cell::of_int(value.get<std::int64_t>());
      break;
    case CellKind::bytes:
      if (value.is_number_integer()) return Cell::of_bytes(value.get<std::int64_t>());
      break;
    case CellKind::percent:
      if (value.is_number()) return Cell::of_percent(value.get<double>());
      break;
    case CellKind::flag:
      if (value.is_boolean()) return Cell::of_flag(value.get<bool>());
      break;
  }
  throw UsageError(fmt::format("{} is not a {} value", value.dump(), kind_name(kind)));
}

namespace {

// The JSON's names of the cell kinds, both ways.
constexpr std::pair<CellKind, std::string_view> kKindNames[] = {{CellKind::text, "text"},
                                                                {CellKind::integer, "integer"},
                                                                {CellKind::bytes, "bytes"},
                                                                {CellKind::percent, "percent"},
                                                                {CellKind::flag, "flag"}};

}  // namespace

std::string_view kind_name(CellKind kind) {
  for (const auto& [k, name] : kKindNames)
    if (k == kind) return name;
  return "text";
}

CellKind kind_from_name(std::string_view name) {
  for (const auto& [kind, n] : kKindNames)
    if (n == name) return kind;
  throw UsageError(fmt::format("unknown column kind '{}'", name));
}

Cell Cell::of_text(std::string s) {
  Cell c;
  c.kind = CellKind::text;
  c.text = std::move(s);
  return c;
}

Cell Cell::of_int(std::int64_t v) {
  Cell c;
  c.kind = CellKind::integer;
  c.integer = v;
  return c;
}

Cell Cell::of_bytes(std::int64_t v) {
  Cell c;
  c.kind = CellKind::bytes;
  c.integer = v;
  return c;
}

Cell Cell::of_percent(double fraction) {
  Cell c;
  c.kind = CellKind::percent;
  c.real = fraction;
  return c;
}

Cell Cell::of_flag(bool v) {
  Cell c;
  c.kind = CellKind::flag;
  c.integer = v ? 1 : 0;
  return c;
}

Cell Cell::none(CellKind kind) {
  Cell c;
  c.kind = kind;
  c.empty = true;
  return c;
}

void Table::add_row(std::vector<Cell> row) {
  check_width(*this, row);
  rows.push_back(std::move(row));
}

RowSource rows_of(const Table& table) {
  return [&table](const RowVisitor& visit) {
    for (const auto& row : table.rows) visit(row);
  };
}

MarkdownLayout::MarkdownLayout(std::vector<Column> columns) : columns_(std::move(columns)) {
  // A separator needs at least "---" (and "---:" for numbers).
  for (const Column& column : columns_)
    widths_.push_back(std::max<std::size_t>(is_numeric(column.kind) ? 4 : 3,
                                            display_width(markdown_text(column.title))));
}

void MarkdownLayout::widen(const std::vector<Cell>& row) {
  if (row.size() != columns_.size())
    throw InternalError(fmt::format("table row has {} cells but the table has {} columns",
                                    row.size(), columns_.size()));
  for (std::size_t c = 0; c < row.size(); ++c)
    widths_[c] = std::max(widths_[c], display_width(markdown_cell(row[c])));
}

std::string MarkdownLayout::aligned(const std::vector<std::string>& texts) const {
  std::string out = "|";
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    const std::string pad(widths_[c] - std::min(widths_[c], display_width(texts[c])), ' ');
    const bool right = is_numeric(columns_[c].kind);
    out += ' ';
    if (right) out += pad;
    out += texts[c];
    if (!right) out += pad;
    out += " |";
  }
  return out + '\n';
}

std::string MarkdownLayout::line(const std::vector<Cell>& row) const {
  std::vector<std::string> texts;
  for (const Cell& cell : row) texts.push_back(markdown_cell(cell));
  texts.resize(columns_.size());
  return aligned(texts);
}

std::string MarkdownLayout::header() const {
  std::vector<std::string> titles;
  for (const Column& column : columns_) titles.push_back(markdown_text(column.title));
  std::string out = aligned(titles) + '|';
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    const bool right = is_numeric(columns_[c].kind);
    out += ' ';
    out.append(widths_[c] - (right ? 1 : 0), '-');
    out += right ? ": |" : " |";
  }
  return out + '\n';
}

std::string to_markdown(const Table& table) {
  if (table.columns.empty()) return "";
  MarkdownLayout layout(table.columns);
  for (const auto& row : table.rows) layout.widen(row);
  std::string out = layout.header();
  for (const auto& row : table.rows) out += layout.line(row);
  return out;
}

std::string csv_header(const Table& table) {
  std::string out;
  for (std::size_t c = 0; c < table.columns.size(); ++c) {
    if (c > 0) out += ',';
    out += csv_field(table.columns[c].key);
  }
  return out;
}

std::string csv_row(const Table& table, const std::vector<Cell>& row) {
  check_width(table, row);
  std::string out;
  for (std::size_t c = 0; c < row.size(); ++c) {
    if (c > 0) out += ',';
    out += csv_cell(row[c]);
  }
  return out;
}

nlohmann::json json_row(const Table& table, const std::vector<Cell>& row) {
  check_width(table, row);
  nlohmann::json out = nlohmann::json::object();
  for (std::size_t c = 0; c < row.size(); ++c) out[table.columns[c].key] = json_cell(row[c]);
  return out;
}

}  // namespace vrambench
