// One run of a command over its grid, the same for `estimate`, `search` and `search --over seq`:
// the devices made up front (a bad device fails before any output), the provenance, the result
// files each row goes to as it finishes (with --resume, the rows an earlier run finished kept),
// one progress line on a terminal, and at the end the Markdown table, the summary line and the
// files written. A command gives its table's columns, how to make a row, and its summary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/options.h"
#include "device/device.h"
#include "measure/measure.h"
#include "report/table.h"
#include "report/writer.h"

namespace vrambench {

// The device of every grid point. Each distinct (device, vram) is made once (on a GPU that takes a
// child process and a context) and held once: a sweep's configurations point at it. A device's
// note (auto without a GPU: the sim it falls back to) goes to `notes`.
class GridDevices {
 public:
  GridDevices(const Grid& grid, const DeviceOptions& options, std::FILE* notes);
  const Device& operator[](std::size_t config) const { return distinct_[of_config_[config]]; }
  // Every distinct device, in the order the grid first names them.
  const std::vector<Device>& distinct() const { return distinct_; }

 private:
  std::vector<Device> distinct_;
  std::vector<std::uint32_t> of_config_;
};

// A row as a command makes it: its cells and, in the JSON, its details (none: null).
struct GridRow {
  std::vector<Cell> cells;
  nlohmann::json details;
};

// "seq=2048 dtype=bf16": a configuration by its key columns.
std::string describe_point(const RunConfig& cfg, const std::vector<std::string>& varying);

// What a summary line says a table's rows ran on: `device` and the framework and recipe of its
// provenance ("sim:h100-80gb (H100 SXM 80GB), framework lean, finetune full, ...").
std::string on_device(const std::string& device, const Provenance& p);

class GridRun {
 public:
  // `device_options`: how a configuration's device is made (the estimate runs none of its
  // kernels and gives the defaults).
  GridRun(const CliOptions& options, Grid grid, const DeviceOptions& device_options, int argc,
          const char* const* argv);
  const Grid& grid() const { return grid_; }
  const Device& device(std::size_t config) const { return devices_[config]; }
  // The kind of the run's devices, and their label as provenance and the summary name them: that
  // of its configurations ("several ..." when they differ), or for an empty shard that of the base
  // configuration, so that its table has the columns and device of the other shards.
  DeviceKind kind() const { return kind_; }
  const std::string& label() const { return label_; }

  // Opens the result files (--out, and --name or `default_name` with the time) with `header`'s
  // columns. With `resume`, the rows a run of this same command finished are kept (a UsageError,
  // before anything is written, when they are another run's).
  void open(const Table& header, std::string_view default_name, bool resume = false);

  // Makes the row of every configuration not kept, each written as it finishes. `row` gets the
  // configuration's index and an observer for its trials (the progress line's; empty when there
  // is none). With `parallel`, --jobs rows are made at once on as many threads (`row` must then
  // be safe to call from several: a sim device's or the estimate's, never a GPU's), in the grid's
  // order as each thread frees up; the files hold the rows in that order all the same. An error
  // a row throws stops the run: no row starts after it, those started finish, and it is
  // rethrown. Returns the seconds the rows took.
  using RowMaker = std::function<GridRow(std::size_t index, const TrialObserver& observe)>;
  double run(const RowMaker& row, bool parallel = false);
  // The threads run(row, true) would use: --jobs, or one per core, at most one per row.
  int jobs() const;

  // The rows written or kept, read back one at a time (a sweep's are never all held).
  RowSource rows() const;
  // What the summary line says the rows ran on: "sim:h100-80gb (H100 SXM 80GB), framework lean,
  // finetune full, quant none, optimizer adamw, recompute none".
  std::string ran_on() const;
  // Prints the Markdown table (unless --format leaves it out) and `line`, finishes the files with
  // `summary` (its "summary" set to `line`), and lists the files written.
  void finish(const std::string& line, nlohmann::json summary, bool with_details);

 private:
  const CliOptions& options_;
  Grid grid_;
  GridDevices devices_;
  DeviceKind kind_;
  std::string label_;
  Provenance provenance_;
  std::optional<ResultWriter> writer_;
  std::vector<bool> kept_;
};

}  // namespace vrambench
