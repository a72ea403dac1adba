// Result tables read back from the files ResultWriter writes: the inputs of `compare` and `merge`,
// and the rows an interrupted run finished, for --resume.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
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

// A row a run finished, as read back: its cells, its details (null when the file has none), and
// where it goes (its configuration's index in the sweep, for the reader's caller to set).
struct FinishedRow {
  std::size_t index = 0;
  std::vector<Cell> cells;
  nlohmann::json details;
};

// One row line of NAME.jsonl.partial: the cells by the keys of `columns` (typed by their kinds),
// and "details" when the row has them. Throws UsageError naming `where` ("'x.jsonl.partial' line
// 4") when the line is not such a row.
FinishedRow partial_row(const std::vector<Column>& columns, std::string_view line,
                        const std::string& where);

// The rows an earlier run with the columns of `header` finished under BASE (FOLDER/NAME), read
// one at a time: from BASE.jsonl.partial (the provenance on line 1), else BASE.json, else
// BASE.csv.partial, else BASE.csv (a partial, when there is one, holds every row: a resumed run
// starts it with the rows it keeps). `found` is called first, once, with the file and the
// provenance of the run that wrote it: null from a CSV (a CSV records none) and from a partial an
// older vrambench wrote; then `visit` with every row, in the file's order. A kill can cut the last
// line of a partial: it is not a row. Returns the file read, "" when there is none (and calls
// neither). Throws UsageError, one line naming the file (and the line), when its columns are not
// `header`'s or a line is not a row.
std::string read_finished_rows(
    const std::string& base, const Table& header,
    const std::function<void(const std::string& path, const nlohmann::json& provenance)>& found,
    const std::function<void(FinishedRow&&)>& visit);

}  // namespace vrambench
