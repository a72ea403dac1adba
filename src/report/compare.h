// `vrambench compare BASE NEW`: two result tables joined on their configuration columns, the
// change of every estimated and measured peak and max batch, and which rows moved beyond a
// tolerance (the regression gate for the memory model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report/read.h"
#include "report/same_run.h"
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
  // Peak and max batch columns one file has and the other lacks: a figure that cannot be
  // compared is not the same.
  std::vector<std::string> columns_only_in_base, columns_only_in_new;
  Table table;  // the rows shown: out of tolerance (every row: all)
  std::vector<std::string> only_in_base, only_in_new;  // rows as "seq=512 dtype=bf16"
  int matched = 0, out_of_tolerance = 0;
  // How the two JSON provenances differ (run_differences, without the git commit, which differs
  // between any reference and a fresh run); empty for a CSV, which has none. A command, device or
  // framework of its own makes the rows of other configurations than their keys say (the key
  // columns are only those the sweep varied); another tool version is what compare is for.
  std::vector<RunDifference> provenance;
  bool other_configurations() const;
  bool passed() const {
    return out_of_tolerance == 0 && only_in_base.empty() && only_in_new.empty() &&
           columns_only_in_base.empty() && columns_only_in_new.empty() && !other_configurations();
  }
};

// The configuration columns of a result table: those named after a configuration field ("seq",
// "dtype", "vram_bytes" for the size field vram ...), in table order.
std::vector<std::string> configuration_columns(const Table& table);

// Throws UsageError when the files have different configuration columns, when a configuration
// appears twice in one file, or when they share no peak or max batch column.
Comparison compare_results(const ResultFile& base, const ResultFile& fresh,
                           const CompareOptions& options);

// How the provenances differ (the first line, when they do), the Markdown table (when it has
// rows), the rows and the figure columns only in one file, and the summary line.
std::string format_comparison(const Comparison& comparison, const ResultFile& base,
                              const ResultFile& fresh, const CompareOptions& options);

}  // namespace vrambench
