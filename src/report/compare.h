// `vrambench compare BASE NEW`: two result tables joined on their configuration columns, the
// change of every estimated and measured peak and max batch, and which rows moved beyond a
// tolerance (the regression gate for the memory model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report/read.h"
#include "report/table.h"

namespace vrambench {

struct CompareOptions {
  double tolerance_percent = 0.0;    // a peak may move this much, relative to BASE
  std::int64_t batch_tolerance = 0;  // a max batch may move this many
  bool all = false;                  // show every row, not only those out of tolerance
};

struct Comparison {
  std::vector<std::string> config_columns;  // the join key
  std::vector<std::string> compared;        // the peak and max batch columns in both files
  Table table;                              // the rows shown: out of tolerance (every row: all)
  std::vector<std::string> only_in_base, only_in_new;  // rows as "seq=512 dtype=bf16"
  int matched = 0, out_of_tolerance = 0;
  bool passed() const {
    return out_of_tolerance == 0 && only_in_base.empty() && only_in_new.empty();
  }
};

// The configuration columns of a result table: those named after a configuration field ("seq",
// "dtype", "vram_bytes" for the size field vram ...), in table order.
std::vector<std::string> configuration_columns(const Table& table);

// Throws UsageError when the files have different configuration columns, when a configuration
// appears twice in one file, or when they share no peak or max batch column.
Comparison compare_results(const ResultFile& base, const ResultFile& fresh,
                           const CompareOptions& options);

// The Markdown table (when it has rows), the rows only in one file, and the summary line.
std::string format_comparison(const Comparison& comparison, const ResultFile& base,
                              const ResultFile& fresh, const CompareOptions& options);

}  // namespace vrambench
