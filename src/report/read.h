// Result tables read back from the files ResultWriter writes: the inputs of `compare` and `merge`,
// and the rows an interrupted run finished, for --resume.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/table.h"

namespace vrambench {

struct ResultFile {
  std::string path;
  Table table;                // from a JSON: typed cells; from a CSV (which has no kinds): text
  nlohmann::json provenance;  // the JSON's provenance and summary; null for a CSV
  nlohmann::json summary;
};

// NAME.json or NAME.csv, by the extension. Throws UsageError, one line naming the file, when it
// cannot be read or is not a result table.
ResultFile read_result_file(const std::string& path);

// The rows an earlier run with the columns of `header` finished under BASE (FOLDER/NAME): from
// BASE.jsonl.partial, else BASE.json, else BASE.csv.partial, else BASE.csv (a partial, when there
// is one, holds every row: a resumed run starts it with the rows it keeps). `details` holds the
// JSON's per-row details where the rows came from BASE.json (else nulls), one per row. No rows and
// no path when there is no file. Throws UsageError when the file's columns are not `header`'s.
struct FinishedRows {
  std::string path;
  std::vector<std::vector<Cell>> rows;
  std::vector<nlohmann::json> details;
};
FinishedRows read_finished_rows(const std::string& base, const Table& header);

}  // namespace vrambench
