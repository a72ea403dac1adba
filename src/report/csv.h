// Reading CSV as RFC 4180 writes it: fields separated by commas, a field in double quotes may hold
// commas, line breaks and doubled quotes; records end with LF or CRLF. Lines starting with '#'
// before the header are comments (the provenance our older tables carry).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vrambench {

struct CsvDocument {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;  // each as wide as the header
  // The index of a header field; throws UsageError naming it when absent.
  std::size_t column(std::string_view name) const;
};

// Every record of `text`, fields unquoted. Throws UsageError on an unterminated quote or on
// characters after a closing quote.
std::vector<std::vector<std::string>> parse_csv_records(std::string_view text);

// The header and rows of `text`; `source` names it in errors ("a row of 5 fields in results/x.csv,
// whose header has 6").
CsvDocument parse_csv(std::string_view text, std::string_view source);

}  // namespace vrambench
