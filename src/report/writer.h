// ResultWriter: a run's rows written as they finish and not held, so that a sweep's memory stays
// flat in its length and a killed run keeps every finished row; the final CSV and JSON written
// from them, in the sweep's order, through a temporary file and rename. One run at a time per
// FOLDER/NAME.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "report/read.h"
#include "report/table.h"

namespace vrambench {

// Files under FOLDER, for a run named NAME:
//   NAME.lock           held (an fcntl lock) while the run writes: a second run of the same FOLDER
//                       and NAME refuses to start; removed when the writer is done
//   NAME.jsonl.partial  the provenance on line 1, then one line per finished row: its cells by
//                       column key, and its details (the JSON summary's per-row entry) when it has
//                       them; appended and flushed as each row finishes. Written whenever CSV or
//                       JSON is asked for: the final files are made from it, and --resume reads it
//   NAME.csv.partial    the CSV of the rows so far, when CSV is asked for (to follow a run)
//   NAME.csv, NAME.json the final files, written by finish(), which then removes the partials
// Nothing is written when neither CSV nor JSON is asked for; the rows are then held for the
// Markdown table.
class ResultWriter {
 public:
  // Takes the lock (creating the folder) when CSV or JSON is asked for. Throws UsageError, one
  // line, when another run holds it or the folder cannot be written.
  ResultWriter(std::string folder, std::string name, Table header_only, Provenance provenance,
               bool write_csv, bool write_json);
  // Releases the lock; a writer that wrote nothing leaves nothing behind (the folder it created
  // included).
  ~ResultWriter();
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;

  // Before any append: the rows an earlier run finished (--resume). `read` calls `keep` with each
  // row to keep, at its index, as it reads them; the partials start again with those rows, each
  // written to a temporary file renamed over it when `read` returns (so that a kill at any point
  // leaves the old partial or the new one, and a `read` that throws leaves the old).
  using Keep = std::function<void(std::size_t index, const std::vector<Cell>& row,
                                  const nlohmann::json& details)>;
  void resume(const std::function<void(const Keep& keep)>& read);
  // The row of configuration `index` (its place in the final files) and its details (null: none).
  void append(std::size_t index, const std::vector<Cell>& row,
              const nlohmann::json& details = nullptr);
  // Every row appended or kept, in index order, read back one at a time.
  void for_each_row(const std::function<void(const std::vector<Cell>&)>& visit) const;
  std::size_t size() const { return rows_; }
  // The Markdown layout of every row so far.
  const MarkdownLayout& markdown() const { return markdown_; }
  // Writes the final files: the rows in index order; `summary` beside "provenance" and "rows" in
  // the JSON, with "details" (every row's, in the same order) added to it when `with_details`.
  void finish(const nlohmann::json& summary, bool with_details);
  std::vector<std::string> written_files() const;  // paths of the final files
  // FOLDER/NAME + extension: path(".csv"), path(".jsonl.partial").
  std::string path(std::string_view extension) const;

 private:
  std::string folder_, name_;
  Table header_;
  Provenance provenance_;
  bool write_csv_, write_json_;
  MarkdownLayout markdown_;
  std::size_t rows_ = 0;
  // Where each index's line starts in the JSON Lines partial (-1: no row), or, with no file to
  // write, the rows themselves.
  std::vector<std::int64_t> offsets_;
  std::vector<std::vector<Cell>> held_;
  std::int64_t spool_size_ = 0;
  bool opened_ = false, finished_ = false;
  int lock_fd_ = -1;
  std::string created_folder_;  // the first folder the writer created, "" when none
  std::vector<std::string> written_;

  bool writes_files() const { return write_csv_ || write_json_; }
  std::string provenance_line() const;
  void open_partials();
  // The row's place: its line in the JSON Lines partial, which starts at spool_size_.
  void record(std::size_t index, const std::vector<Cell>& row);
  std::string partial_line(const std::vector<Cell>& row, const nlohmann::json& details) const;
  void each_row(const std::function<void(FinishedRow&&)>& visit) const;
  void write_json_document(const std::function<void(std::string_view)>& write,
                           const nlohmann::json& summary, bool with_details) const;
  void lock();
  void unlock() noexcept;
};

}  // namespace vrambench
