// ResultWriter: rows appended and flushed to partial files as they complete, final CSV and JSON
// written through a temporary file and rename so that a reader never sees half a file.
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "report/table.h"

namespace vrambench {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

std::string os_reason(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// Writes `text` to `path` ("w" replaces, "a" appends) and flushes it to the OS before returning.
void put_text(const std::string& path, std::string_view text, const char* mode) {
  errno = 0;
  std::FILE* file = std::fopen(path.c_str(), mode);
  if (file == nullptr)
    throw UsageError(fmt::format("cannot write '{}': {}", path, os_reason(errno)));
  const bool written =
      std::fwrite(text.data(), 1, text.size(), file) == text.size() && std::fflush(file) == 0;
  const int err = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed)
    throw UsageError(fmt::format("cannot write '{}': {}", path, os_reason(written ? errno : err)));
}

// The final file appears whole or not at all.
void replace_file(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  put_text(tmp, text, "w");
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw UsageError(fmt::format("cannot write '{}': {}", path, ec.message()));
  }
}

// Everything the CSV file holds: the header, every row, each line ending in a newline. Provenance
// lives in the JSON: any CSV reader opens this file without options.
std::string csv_document(const Table& table) {
  std::string text = csv_header(table) + '\n';
  for (const auto& row : table.rows) text += csv_row(table, row) + '\n';
  return text;
}

void create_folder(const std::string& folder) {
  if (folder.empty()) return;  // the current directory
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw UsageError(fmt::format("cannot create folder '{}': {}", folder, ec.message()));
}

// A row with its keys in column order (nlohmann::json would sort them).
ordered_json ordered_row(const Table& table, const std::vector<Cell>& row) {
  const nlohmann::json values = json_row(table, row);
  ordered_json out = ordered_json::object();
  for (const Column& column : table.columns) out[column.key] = values.at(column.key);
  return out;
}

// One JSON object per line, one line per row.
std::string jsonl_document(const Table& table) {
  std::string text;
  for (const auto& row : table.rows) text += ordered_row(table, row).dump() + '\n';
  return text;
}

}  // namespace

ResultWriter::ResultWriter(std::string folder, std::string name, Table header_only,
                           Provenance provenance, bool write_csv, bool write_json)
    : folder_(std::move(folder)),
      name_(std::move(name)),
      table_(std::move(header_only)),
      provenance_(std::move(provenance)),
      write_csv_(write_csv),
      write_json_(write_json) {}

// Creates the folder and starts both partial files with everything known so far.
void ResultWriter::open_partials() {
  create_folder(folder_);
  if (write_csv_) put_text(path(".csv.partial"), csv_document(table_), "w");
  if (write_json_) put_text(path(".jsonl.partial"), jsonl_document(table_), "w");
  opened_ = true;
}

std::string ResultWriter::path(std::string_view extension) const {
  return (fs::path(folder_) / (name_ + std::string(extension))).string();
}

void ResultWriter::resume(const std::vector<std::vector<Cell>>& kept) {
  if (opened_ || !table_.rows.empty()) throw InternalError("ResultWriter::resume after a row");
  for (const auto& row : kept) table_.add_row(row);
  if (kept.empty() || (!write_csv_ && !write_json_)) return;
  create_folder(folder_);
  // The partials may be what the rows were read from: each is replaced whole, never truncated.
  if (write_csv_) replace_file(path(".csv.partial"), csv_document(table_));
  if (write_json_) replace_file(path(".jsonl.partial"), jsonl_document(table_));
  opened_ = true;
}

void ResultWriter::append(const std::vector<Cell>& row) {
  if (!written_.empty()) throw InternalError("ResultWriter::append after finish");
  table_.add_row(row);
  if (!write_csv_ && !write_json_) return;
  if (!opened_) {
    open_partials();  // writes every row held, this one included
    return;
  }
  if (write_csv_) put_text(path(".csv.partial"), csv_row(table_, row) + '\n', "a");
  if (write_json_) put_text(path(".jsonl.partial"), ordered_row(table_, row).dump() + '\n', "a");
}

void ResultWriter::finish(const Table& table, const nlohmann::json& summary) {
  if (!written_.empty()) throw InternalError("ResultWriter::finish called twice");
  if (table.columns.size() != table_.columns.size())
    throw InternalError("ResultWriter::finish with another table");
  if (!write_csv_ && !write_json_) return;
  if (!opened_) create_folder(folder_);
  std::vector<std::string> finished;
  if (write_csv_) {
    finished.push_back(path(".csv"));
    replace_file(finished.back(), csv_document(table));
  }
  if (write_json_) {
    ordered_json columns = ordered_json::array();
    for (const Column& column : table.columns)
      columns.push_back(
          {{"key", column.key}, {"title", column.title}, {"kind", kind_name(column.kind)}});
    ordered_json rows = ordered_json::array();
    for (const auto& row : table.rows) rows.push_back(ordered_row(table, row));
    ordered_json document = ordered_json::object();
    document["provenance"] = nlohmann::json(provenance_);
    document["summary"] = summary.is_null() ? nlohmann::json::object() : summary;
    document["columns"] = std::move(columns);
    document["rows"] = std::move(rows);
    finished.push_back(path(".json"));
    replace_file(finished.back(), document.dump(2) + '\n');
  }
  // The final files hold every row now; a partial left behind would only confuse a reader.
  std::error_code ec;
  fs::remove(path(".csv.partial"), ec);
  fs::remove(path(".jsonl.partial"), ec);
  written_ = std::move(finished);
}

std::vector<std::string> ResultWriter::written_files() const {
  return written_;
}

}  // namespace vrambench
