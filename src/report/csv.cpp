#include "report/csv.h"

#include <fmt/format.h>

#include "core/error.h"

namespace vrambench {

std::size_t CsvDocument::column(std::string_view name) const {
  for (std::size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return i;
  throw UsageError(fmt::format("no column '{}'", name));
}

std::vector<std::vector<std::string>> parse_csv_records(std::string_view text) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string field;
  std::size_t i = 0;
  const auto end_field = [&] {
    record.push_back(std::move(field));
    field.clear();
  };
  const auto end_record = [&] {
    end_field();
    records.push_back(std::move(record));
    record.clear();
  };
  while (i < text.size()) {
    // At the start of a field.
    if (text[i] == '"') {
      ++i;
      for (;;) {
        if (i >= text.size()) throw UsageError("CSV: a quoted field is not closed");
        if (text[i] == '"') {
          if (i + 1 < text.size() && text[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += text[i++];
      }
      if (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r')
        throw UsageError(fmt::format("CSV: '{}' after a closing quote", text[i]));
    } else {
      while (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r')
        field += text[i++];
    }
    if (i >= text.size()) {
      end_record();
      break;
    }
    if (text[i] == ',') {
      end_field();
      ++i;
      if (i >= text.size()) end_record();  // a trailing comma: one empty last field
      continue;
    }
    // A line break: LF or CRLF.
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    ++i;
    end_record();
  }
  return records;
}

CsvDocument parse_csv(std::string_view text, std::string_view source) {
  // Comment lines before the header.
  while (text.starts_with('#')) {
    const std::size_t eol = text.find('\n');
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
  }
  std::vector<std::vector<std::string>> records = parse_csv_records(text);
  if (records.empty()) throw UsageError(fmt::format("{}: no header", source));
  CsvDocument doc;
  doc.header = std::move(records.front());
  for (std::size_t r = 1; r < records.size(); ++r) {
    if (records[r].size() != doc.header.size())
      throw UsageError(fmt::format("{}: row {} has {} fields, the header {}", source, r,
                                   records[r].size(), doc.header.size()));
    doc.rows.push_back(std::move(records[r]));
  }
  return doc;
}

}  // namespace vrambench
