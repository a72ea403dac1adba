// The grid runner of estimate, search and search --over seq.
#include "cli/grid_run.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>

#include "cli/progress.h"
#include "core/error.h"
#include "config/fields.h"
#include "report/read.h"
#include "report/result_tables.h"
#include "report/same_run.h"

namespace vrambench {
namespace {

std::string device_label(const std::vector<Device>& devices) {
  for (const Device& d : devices)
    if (d.info.label != devices.front().info.label)
      return "several (see the device and vram columns)";
  return devices.front().info.label;
}

// Whose allocations the table's step reproduces (docs/memory-model.md, "Frameworks"): the one
// framework of the sweep's rows, or "per row" when they differ (a framework column when the sweep
// varies it; auto's rule otherwise: hf for every recipe it models, lean for the rest). Every table
// states it: in its provenance (extra.framework) and on its summary line.
Provenance provenance_of(const Grid& grid, int argc, const char* const* argv,
                         const std::string& device) {
  Provenance p = make_provenance(argc, argv, device);
  p.extra["framework"] = grid.framework;
  p.extra["recipe"] = grid.recipe;
  return p;
}
// --resume: the rows an earlier run of this command (--out, --name) finished, kept by the writer
// at their configuration's index with their details (the point added); true for each index kept.
// The run must be this one (run_differences, the rule merge reads: the command but for where and
// how it writes, the tool, the device), and every row one of its configurations: a UsageError
// otherwise, before anything is written.
std::vector<bool> resume_rows(const Grid& grid, ResultWriter& writer,
                              const std::vector<Column>& columns, const Provenance& provenance) {
  std::vector<bool> kept(grid.configs.size(), false);
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < grid.configs.size(); ++i) {
    std::string key;
    for (const Cell& cell : key_cells(grid.configs[i], grid.varying)) key += cell_text(cell) + '\n';
    index.emplace(std::move(key), i);
  }
  const std::size_t key_width = key_columns(grid.varying).size();
  Table header;
  header.columns = columns;
  const auto check = [&](const std::string& path, const nlohmann::json& stored) {
    if (stored.is_null())
      throw UsageError(fmt::format(
          "--resume: '{}' does not say which command wrote it (a CSV alone, or an older "
          "vrambench's partial), so its rows cannot be checked: run without --resume, or give "
          "another --name",
          path));
    if (const auto differences = run_differences(stored, nlohmann::json(provenance));
        !differences.empty())
      throw UsageError(fmt::format(
          "--resume: '{}' is of another run ({}): its rows are not this command's; run the "
          "command that wrote it, or give another --name",
          path, describe(differences)));
  };
  writer.resume([&](const ResultWriter::Keep& keep) {
    std::string path;
    read_finished_rows(
        writer.path(""), header,
        [&](const std::string& found, const nlohmann::json& stored) {
          path = found;
          check(found, stored);
        },
        [&](FinishedRow&& row) {
          std::string key;
          for (std::size_t c = 0; c < key_width; ++c) key += cell_text(row.cells[c]) + '\n';
          const auto it = index.find(key);
          if (it == index.end()) {
            std::replace(key.begin(), key.end(), '\n', ' ');
            throw UsageError(fmt::format(
                "--resume: '{}' has a row ({}) that this command does not run: another sweep?",
                path, key.substr(0, key.size() - 1)));
          }
          if (kept[it->second]) return;  // a row twice: the first is the one kept
          kept[it->second] = true;
          nlohmann::json details =
              row.details.is_object() ? std::move(row.details) : nlohmann::json::object();
          details["point"] = describe_point(grid.configs[it->second], grid.varying);
          keep(it->second, row.cells, details);
        });
  });
  return kept;
}

}  // namespace

std::string on_device(const std::string& device, const Provenance& p) {
  std::string out = device;
  if (const auto it = p.extra.find("framework"); it != p.extra.end())
    out += fmt::format(", framework {}", it->second);
  if (const auto it = p.extra.find("recipe"); it != p.extra.end()) out += ", " + it->second;
  return out;
}

GridDevices::GridDevices(const Grid& grid, const DeviceOptions& options, std::FILE* notes) {
  std::map<std::pair<DeviceChoice, Bytes>, std::uint32_t> made;
  std::string note;
  for (const RunConfig& cfg : grid.configs) {
    const std::pair<DeviceChoice, Bytes> key{cfg.device, cfg.vram};
    auto it = made.find(key);
    if (it == made.end()) {
      std::string this_note;
      it = made.emplace(key, static_cast<std::uint32_t>(distinct_.size())).first;
      distinct_.push_back(make_device(cfg, options, &this_note));
      if (note.empty()) note = this_note;
    }
    of_config_.push_back(it->second);
  }
  if (!note.empty()) fmt::print(notes, "{}\n", note);
  // A rank's program on a real device is a rehearsal of the sharded run: said once.
  for (std::size_t i = 0; i < grid.configs.size(); ++i) {
    const RunConfig& cfg = grid.configs[i];
    if (!is_distributed(cfg) || distinct_[of_config_[i]].info.kind == DeviceKind::sim) continue;
    fmt::print(notes,
               "note: --gpus {} --strategy {}: each trial runs one rank's step on this one device, "
               "a single-device rehearsal of the sharded run (its all-gathers and reduce-scatters "
               "copy this rank's rows; no other rank runs)\n",
               cfg.gpus, to_string(cfg.strategy));
    break;
  }
}

std::string describe_point(const RunConfig& cfg, const std::vector<std::string>& varying) {
  std::string out;
  for (const std::string& f : key_columns(varying))
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", f,
                       field_text(find_field(f), get_field(cfg, find_field(f))));
  return out;
}

GridRun::GridRun(const CliOptions& options, Grid grid, const DeviceOptions& device_options,
                 int argc, const char* const* argv)
    : options_(options),
      grid_(std::move(grid)),
      devices_(grid_, device_options, options.streams.err) {
  const std::vector<Device>& devices = devices_.distinct();
  if (devices.empty()) {
    const Device base = make_device(base_config(options), options.device);
    kind_ = base.info.kind;
    label_ = base.info.label;
  } else {
    kind_ = devices.front().info.kind;
    label_ = device_label(devices);
  }
  provenance_ = provenance_of(grid_, argc, argv, label_);
}

void GridRun::open(const Table& header, std::string_view default_name, bool resume) {
  const Formats& formats = options_.formats;
  writer_.emplace(
      options_.out,
      options_.name.empty() ? default_output_name(std::string(default_name)) : options_.name,
      header, provenance_, formats.csv, formats.json);
  kept_ = resume ? resume_rows(grid_, *writer_, header.columns, provenance_)
                 : std::vector<bool>(grid_.configs.size(), false);
}

int GridRun::jobs() const {
  const int cores = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  const int asked = options_.jobs > 0 ? options_.jobs : cores;
  const auto rows = static_cast<int>(std::count(kept_.begin(), kept_.end(), false));
  return std::max(1, std::min(asked, rows));
}

double GridRun::run(const RowMaker& row, bool parallel) {
  if (!writer_) throw InternalError("GridRun::run before open");
  // One line on the terminal, rewritten after every trial; nothing when stderr is not a terminal.
  Progress progress(!options_.quiet && isatty(STDERR_FILENO) != 0,
                    static_cast<std::int64_t>(grid_.configs.size()));
  std::mutex mutex;  // the writer and the progress line, between the threads
  const TrialObserver observe = [&](std::int64_t batch, const TrialResult& result) {
    const std::lock_guard<std::mutex> lock(mutex);
    progress.trial(batch, result.fit);
  };
  for (std::size_t i = 0; i < grid_.configs.size(); ++i)
    if (kept_[i]) progress.finished(false);
  std::size_t next = 0;  // the next configuration to start, under the mutex
  std::exception_ptr error;
  const auto work = [&] {
    for (;;) {
      std::size_t i = 0;
      std::string point;
      {
        const std::lock_guard<std::mutex> lock(mutex);
        while (next < kept_.size() && kept_[next]) ++next;
        if (error || next >= kept_.size()) return;
        i = next++;
        point = describe_point(grid_.configs[i], grid_.varying);
        progress.starting(point);
      }
      try {
        GridRow made = row(i, progress.enabled() ? observe : TrialObserver{});
        if (made.details.is_object()) made.details["point"] = point;
        const std::lock_guard<std::mutex> lock(mutex);
        writer_->append(i, made.cells, made.details);
        progress.finished(true);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        return;
      }
    }
  };
  const auto start = std::chrono::steady_clock::now();
  const int threads = parallel ? jobs() : 1;
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work);
    for (std::thread& t : pool) t.join();
  }
  progress.clear();
  if (error) std::rethrow_exception(error);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

RowSource GridRun::rows() const {
  return [this](const RowVisitor& visit) { writer_->for_each_row(visit); };
}

std::string GridRun::ran_on() const {
  return on_device(label_, provenance_);
}

void GridRun::finish(const std::string& line, nlohmann::json summary, bool with_details) {
  if (options_.formats.markdown) {
    fmt::print(options_.streams.out, "{}", writer_->markdown().header());
    writer_->for_each_row([&](const std::vector<Cell>& row) {
      fmt::print(options_.streams.out, "{}", writer_->markdown().line(row));
    });
  }
  fmt::print(options_.streams.out, "\n{}\n", line);
  summary["summary"] = line;
  writer_->finish(summary, with_details);
  for (const std::string& path : writer_->written_files())
    fmt::print(options_.streams.out, "wrote {}\n", path);
}

}  // namespace vrambench
