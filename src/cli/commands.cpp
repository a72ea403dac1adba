// search, estimate, program, presets and devices.
#include "cli/commands.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

#include "cli/progress.h"
#include "config/fields.h"
#include "config/gpu_profiles.h"
#include "core/error.h"
#include "device/device.h"
#include "device/gpu.h"
#include "estimate/estimate.h"
#include "model/families.h"
#include "model/weights.h"
#include "program/program.h"
#include "report/compare.h"
#include "report/merge.h"
#include "report/program_table.h"
#include "report/read.h"
#include "report/result_tables.h"
#include "report/table.h"
#include "report/writer.h"
#include "search/isolate.h"
#include "search/measure.h"

namespace vrambench {
namespace {

// The device of every grid point, made up front so a bad device fails before any output. Each
// distinct (device, vram) is made once (on a GPU that takes a child process and a context) and
// held once: a sweep's configurations point at it.
class GridDevices {
 public:
  GridDevices(const Grid& grid, const DeviceOptions& options) {
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
    if (!note.empty()) fmt::print(stderr, "{}\n", note);
  }
  const Device& operator[](std::size_t config) const { return distinct_[of_config_[config]]; }
  // Every distinct device, in the order the grid first names them.
  const std::vector<Device>& distinct() const { return distinct_; }

 private:
  std::vector<Device> distinct_;
  std::vector<std::uint32_t> of_config_;
};

std::string device_label(const std::vector<Device>& devices) {
  for (const Device& d : devices)
    if (d.info.label != devices.front().info.label)
      return "several (see the device and vram columns)";
  return devices.front().info.label;
}

// The device of the run, as provenance names it: that of its configurations, or for an empty shard
// (more shards than configurations) that of the base configuration, so that its table has the
// columns and device of the other shards.
struct RunDevice {
  DeviceKind kind;
  std::string label;
};
RunDevice run_device(const GridDevices& grid_devices, const CliOptions& options) {
  const std::vector<Device>& devices = grid_devices.distinct();
  if (devices.empty()) {
    const Device base = make_device(base_config(options), options.device);
    return {base.info.kind, base.info.label};
  }
  return {devices.front().info.kind, device_label(devices)};
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
// "sim:h100-80gb (H100 SXM 80GB), framework lean, finetune full, quant none, optimizer adamw,
// recompute none": what the summary line says the rows ran on, and the recipe they ran.
std::string on_device(const std::string& device, const Provenance& p) {
  std::string out = device;
  if (const auto it = p.extra.find("framework"); it != p.extra.end())
    out += fmt::format(", framework {}", it->second);
  if (const auto it = p.extra.find("recipe"); it != p.extra.end()) out += ", " + it->second;
  return out;
}

std::string describe_point(const RunConfig& cfg, const std::vector<std::string>& varying) {
  std::string out;
  for (const std::string& f : key_columns(varying))
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", f,
                       field_text(find_field(f), get_field(cfg, find_field(f))));
  return out;
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

bool stderr_is_terminal() {
  return isatty(STDERR_FILENO) != 0;
}

// `vrambench devices`: the detected GPUs (none without one).
Table gpu_table() {
  Table t;
  t.columns = {{"device", "device", CellKind::text},
               {"name", "name", CellKind::text},
               {"compute_capability", "cc", CellKind::text},
               {"total_bytes", "total", CellKind::bytes},
               {"free_bytes", "free", CellKind::bytes},
               {"driver", "driver", CellKind::integer},
               {"cuda_runtime", "CUDA runtime", CellKind::text},
               {"cublaslt", "cuBLASLt", CellKind::text},
               {"cudnn", "cuDNN", CellKind::text}};
  for (const CudaDeviceInfo& d : list_gpus())
    t.add_row({Cell::of_text(fmt::format("cuda:{}", d.ordinal)), Cell::of_text(d.name),
               Cell::of_text(fmt::format("{}.{}", d.cc_major, d.cc_minor)),
               Cell::of_bytes(d.total_memory), Cell::of_bytes(d.free_memory),
               Cell::of_int(d.driver_version), Cell::of_text(d.libraries.runtime_text()),
               Cell::of_text(d.libraries.cublaslt_text()),
               Cell::of_text(d.libraries.cudnn_text())});
  return t;
}

// Whether two paths name one file: the same path once resolved, or one file under two names (a
// link).
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec)) return true;
  std::error_code ec_a, ec_b;
  const auto resolved_a = std::filesystem::weakly_canonical(std::filesystem::absolute(a), ec_a);
  const auto resolved_b = std::filesystem::weakly_canonical(std::filesystem::absolute(b), ec_b);
  return !ec_a && !ec_b && resolved_a == resolved_b;
}

// The aligned Markdown table of the writer's rows, read back a row at a time.
void print_markdown(const ResultWriter& writer) {
  fmt::print("{}", writer.markdown().header());
  writer.for_each_row(
      [&](const std::vector<Cell>& row) { fmt::print("{}", writer.markdown().line(row)); });
}

RowSource rows_of(const ResultWriter& writer) {
  return [&writer](const RowVisitor& visit) { writer.for_each_row(visit); };
}

void print_written(const ResultWriter& writer) {
  for (const std::string& path : writer.written_files()) fmt::print("wrote {}\n", path);
}

}  // namespace

int run_estimate_command(const CliOptions& options, int argc, const char* const* argv) {
  const Formats& formats = options.formats;
  const Grid grid = make_grid(options);
  const GridDevices devices(grid, {});
  const std::string device_name = run_device(devices, options).label;
  // A batch given or swept: each row is the peak at its batch.
  const bool at_batch = options.fields.count("batch") > 0 ||
                        std::any_of(grid.axes.begin(), grid.axes.end(),
                                    [](const Axis& a) { return a.field == "batch"; });

  const Provenance provenance = provenance_of(grid, argc, argv, device_name);
  const Table header = estimate_table(grid.varying, at_batch);
  ResultWriter writer(options.out,
                      options.name.empty() ? default_output_name("estimate") : options.name, header,
                      provenance, formats.csv, formats.json);
  std::int64_t smallest = INT64_MAX, largest = 0;
  for (std::size_t i = 0; i < grid.configs.size(); ++i) {
    const RunConfig& cfg = grid.configs[i];
    const DeviceInfo& device = devices[i].info;
    BatchScaledProgram step(cfg, device.gemm_workspace);
    const Breakdown breakdown = analyze(step, estimate_overhead(device));
    // At a batch, the allocator's share is taken there, so that the row's peak is that batch's
    // replay and not a point of the line fitted where the largest batch is decided.
    writer.append(
        i, estimate_row(cfg, at_batch ? analyze(step, estimate_overhead(device, true)) : breakdown,
                        grid.varying, device, at_batch,
                        [&](std::int64_t batch) { return allocated_peak(step, batch); }));
    const std::int64_t max_batch = breakdown.max_batch(device.total);
    smallest = std::min(smallest, max_batch);
    largest = std::max(largest, max_batch);
  }
  if (grid.configs.empty()) smallest = largest = 0;  // an empty shard
  if (formats.markdown) print_markdown(writer);
  const std::string summary_line = estimate_summary_line(
      header.columns, rows_of(writer), on_device(device_name, provenance), smallest, largest);
  fmt::print("\n{}\n", summary_line);
  writer.finish({{"configurations", grid.configs.size()},
                 {"min_est_max_batch", smallest},
                 {"max_est_max_batch", largest},
                 {"summary", summary_line}},
                false);
  print_written(writer);
  return 0;
}

namespace {

// `search --over seq`: the longest sequence at cfg.batch per configuration, in this process (sim
// and cpu; a GPU's trials need the isolation of measure_isolated, which searches over the batch).
int run_seq_search(const CliOptions& options, const Grid& grid, int argc, const char* const* argv) {
  if (options.fields.count("seq") > 0 ||
      std::any_of(grid.axes.begin(), grid.axes.end(),
                  [](const Axis& a) { return a.field == "seq"; }))
    throw UsageError("--over seq: the sequence is what the search finds; drop --seq and its sweep");
  if (options.resume)
    throw UsageError("--over seq: --resume finishes searches over the batch only");
  const GridDevices devices(grid, options.device);
  const RunDevice run = run_device(devices, options);
  if (run.kind == DeviceKind::cuda)
    throw UsageError(
        "--over seq runs on sim and cpu devices; on a GPU, `vrambench plan --seq max` gives the "
        "sim replay's answer, or sweep --sweep seq=... over the batch search");
  const std::string measured = run.kind == DeviceKind::sim ? "sim" : "meas";
  const Table header = seq_search_table(grid.varying, measured);
  const Provenance provenance = provenance_of(grid, argc, argv, run.label);
  ResultWriter writer(options.out,
                      options.name.empty() ? default_output_name("search-seq") : options.name,
                      header, provenance, options.formats.csv, options.formats.json);
  Progress progress(!options.quiet && stderr_is_terminal(),
                    static_cast<std::int64_t>(grid.configs.size()));
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < grid.configs.size(); ++i) {
    progress.starting(describe_point(grid.configs[i], grid.varying));
    const TrialObserver observe = [&](std::int64_t seq, const TrialResult& result) {
      progress.trial(seq, result.fit);
    };
    const SeqMeasurement m = measure_max_seq(grid.configs[i], devices[i], SeqLimits{},
                                             progress.enabled() ? observe : TrialObserver{});
    writer.append(i, seq_search_row(m, grid.varying, devices[i].info.total));
    progress.finished(true);
  }
  progress.clear();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (options.formats.markdown) print_markdown(writer);
  const std::string summary_line = seq_search_summary_line(
      header.columns, rows_of(writer), on_device(run.label, provenance), seconds);
  fmt::print("\n{}\n", summary_line);
  writer.finish(
      {{"configurations", grid.configs.size()}, {"seconds", seconds}, {"summary", summary_line}},
      false);
  print_written(writer);
  return 0;
}

}  // namespace

int run_search_command(const CliOptions& options, int argc, const char* const* argv) {
  const Formats& formats = options.formats;
  const Grid grid = make_grid(options);
  if (options.over_seq) return run_seq_search(options, grid, argc, argv);
  const bool batch_given = options.fields.count("batch") > 0 ||
                           std::any_of(grid.axes.begin(), grid.axes.end(),
                                       [](const Axis& a) { return a.field == "batch"; });
  if (batch_given)
    throw UsageError(
        "--batch: the search finds the batch; for the peak of a given batch use "
        "`vrambench estimate --batch B` or `vrambench program --batch B` (with --over seq, "
        "--batch is the batch the longest sequence is found at)");
  if (options.resume && options.name.empty())
    throw UsageError(
        "--resume: give the --name of the run to finish (and the same --out), e.g. --name grid "
        "--resume");
  const GridDevices devices(grid, options.device);
  const RunDevice run = run_device(devices, options);
  const std::string measured = run.kind == DeviceKind::sim ? "sim" : "meas";
  const SearchLimits limits{options.max_batch};

  // On a real device each row also gets the sim replay of the same configuration.
  const bool with_sim = measured != "sim";
  const bool with_paged = std::any_of(grid.configs.begin(), grid.configs.end(),
                                      [](const RunConfig& c) { return is_paged(c.optimizer); });
  const Table header = search_table(grid.varying, measured, with_paged);
  const Provenance provenance = provenance_of(grid, argc, argv, run.label);
  ResultWriter writer(options.out,
                      options.name.empty() ? default_output_name("search") : options.name, header,
                      provenance, formats.csv, formats.json);
  // Rows and their details go to the writer as they finish and are not held here: a sweep's
  // memory stays flat in its length.
  const std::vector<bool> kept = options.resume
                                     ? resume_rows(grid, writer, header.columns, provenance)
                                     : std::vector<bool>(grid.configs.size(), false);

  // One line on the terminal, rewritten after every trial; nothing when stderr is not a terminal.
  Progress progress(!options.quiet && stderr_is_terminal(),
                    static_cast<std::int64_t>(grid.configs.size()));
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < grid.configs.size(); ++i) {
    if (kept[i]) {
      progress.finished(false);
      continue;
    }
    const RunConfig& cfg = grid.configs[i];
    const Device& device = devices[i];
    const std::string point = describe_point(cfg, grid.varying);
    progress.starting(point);
    const TrialObserver observe = [&](std::int64_t batch, const TrialResult& result) {
      progress.trial(batch, result.fit);
    };
    const TrialObserver maybe_observe = progress.enabled() ? observe : TrialObserver{};
    std::optional<Measurement> measured_row;
    try {
      // On CUDA a sticky error poisons the process: each configuration gets its own child.
      if (options.isolate || device.info.kind == DeviceKind::cuda)
        measured_row = measure_isolated(cfg, device, limits, fault_from_environment(cfg),
                                        maybe_observe, options.trial_timeout);
      else
        measured_row = measure(cfg, device, limits, maybe_observe);
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      // A broken configuration becomes a failed row; the sweep goes on.
      measured_row = failed_measurement(cfg, device.info, Failure::failed, e.what());
    }
    Measurement& m = *measured_row;
    std::optional<Measurement> sim;
    if (with_sim) {
      // The sim replays the same step with the fixed overhead the device measured for this row
      // (after its warm-up), so that meas vs sim compares the allocations and nothing else.
      DeviceInfo replayed_info = device.info;
      if (m.fixed_overhead > 0) replayed_info.fixed_overhead = m.fixed_overhead;
      const Device replayed = simulated(replayed_info);
      sim = measure(cfg, replayed, limits);
      // Make sure the sim has a trial at the device's batch, for the side-by-side peak.
      if (!sim->trials.count(m.compared_batch()))
        sim->trials.emplace(
            m.compared_batch(),
            run_trial(cfg, replayed, m.compared_batch(), replayed.info.tensor_capacity(), nullptr));
    }
    nlohmann::json details = search_details(m, device.info);
    details["point"] = point;
    writer.append(i,
                  search_row(m, grid.varying, device.info.total, sim ? &*sim : nullptr, with_paged),
                  details);
    progress.finished(true);
  }
  progress.clear();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (formats.markdown) print_markdown(writer);
  const SearchSummary summary = summarize_search(header.columns, rows_of(writer));
  const std::string summary_line =
      search_summary_line(summary, on_device(run.label, provenance), seconds);
  fmt::print("\n{}\n", summary_line);
  writer.finish(search_summary_json(summary, summary_line, seconds), true);
  print_written(writer);
  // Every row is written first; a row without an answer still fails the run, so that a script
  // (or CI) never takes a table of failed rows for a result.
  const std::int64_t unanswered = summary.failed + summary.timed_out;
  if (unanswered > 0) {
    fmt::print(stderr, "vrambench: {} of {} configurations failed{} (see the note column)\n",
               unanswered, summary.configurations,
               summary.timed_out > 0 ? fmt::format(", {} of them timed out", summary.timed_out)
                                     : std::string());
    return 1;
  }
  return 0;
}

int run_program_command(const CliOptions& options) {
  const Grid grid = make_grid(options);
  if (grid.configs.size() != 1)
    throw UsageError("`vrambench program` shows one configuration: drop --sweep");
  const RunConfig& cfg = grid.configs.front();
  const Device device = make_device(cfg);
  const Program program = build_program(cfg, device.info.gemm_workspace);
  fmt::print("{}", format_program(program, compute_liveness(program)));
  return 0;
}

int run_compare_command(const CliOptions& options) {
  const ResultFile base = read_result_file(options.base);
  const ResultFile fresh = read_result_file(options.fresh);
  const Comparison comparison = compare_results(base, fresh, options.compare);
  fmt::print("{}", format_comparison(comparison, base, fresh, options.compare));
  return comparison.passed() ? 0 : 1;
}

int run_merge_command(const CliOptions& options) {
  std::filesystem::path out = options.merge_out;
  if (out.extension() == ".csv" || out.extension() == ".json") out.replace_extension();
  if (out.filename().empty())
    throw UsageError(
        fmt::format("merge: '{}' names no file: give OUT as FOLDER/NAME", options.merge_out));
  // The merged files never replace a part: `merge p0 p0.json p1.json` would overwrite a shard.
  std::vector<std::string> outputs;
  if (options.formats.csv) outputs.push_back(out.string() + ".csv");
  if (options.formats.json) outputs.push_back(out.string() + ".json");
  for (const std::string& part : options.parts)
    for (const std::string& output : outputs)
      if (same_file(output, part))
        throw UsageError(fmt::format(
            "merge: OUT '{}' would overwrite the part '{}': give the merged table another name",
            options.merge_out, part));
  // Every part is read and checked before anything is written.
  std::vector<ResultFile> parts;
  for (const std::string& part : options.parts) parts.push_back(read_result_file(part));
  MergedResult merged = merge_shards(parts);

  Table header = merged.table;
  header.rows.clear();
  ResultWriter writer(out.parent_path().string(), out.filename().string(), header,
                      merged.provenance, options.formats.csv, options.formats.json);
  nlohmann::json summary;
  std::string summary_line;
  const auto configurations = static_cast<std::int64_t>(merged.table.rows.size());
  if (is_search_table(merged.table)) {
    const SearchSummary s = summarize_search(merged.table);
    summary_line = search_summary_line(s, on_device(merged.provenance.device, merged.provenance),
                                       merged.seconds);
    summary = search_summary_json(s, summary_line, merged.seconds);
  } else {
    summary_line =
        estimate_summary_line(merged.table.columns, rows_of(merged.table),
                              on_device(merged.provenance.device, merged.provenance),
                              merged.smallest_est_max_batch, merged.largest_est_max_batch);
    summary = {{"configurations", configurations},
               {"min_est_max_batch", merged.smallest_est_max_batch},
               {"max_est_max_batch", merged.largest_est_max_batch},
               {"summary", summary_line}};
  }
  summary_line += fmt::format(" (merged from {} shards)", merged.shards);
  summary["shards"] = merged.shards;
  summary["summary"] = summary_line;
  // The merged rows go through the writer as a sweep's do (the JSON's details with them).
  const bool with_details = is_search_table(merged.table) && !merged.details.is_null();
  for (std::size_t r = 0; r < merged.table.rows.size(); ++r)
    writer.append(r, merged.table.rows[r], with_details ? merged.details[r] : nlohmann::json());
  if (options.formats.markdown) fmt::print("{}", to_markdown(merged.table));
  fmt::print("\n{}\n", summary_line);
  writer.finish(summary, with_details);
  print_written(writer);
  return 0;
}

int run_presets_command() {
  Table t;
  t.columns = {{"name", "name", CellKind::text},
               {"arch", "arch", CellKind::text},
               {"parameters", "parameters", CellKind::integer},
               {"layers", "L", CellKind::integer},
               {"hidden", "H", CellKind::integer},
               {"heads", "A", CellKind::integer},
               {"kv_heads", "KV", CellKind::integer},
               {"ffn", "F", CellKind::integer},
               {"vocab", "V", CellKind::integer},
               {"description", "description", CellKind::text}};
  for (const Preset& p : presets()) {
    const ModelConfig& m = p.model;
    t.add_row({Cell::of_text(std::string(p.name)), Cell::of_text(std::string(to_string(m.arch))),
               Cell::of_int(parameter_count(m)), Cell::of_int(m.layers), Cell::of_int(m.hidden),
               Cell::of_int(m.heads), Cell::of_int(m.kv_heads), Cell::of_int(m.ffn),
               Cell::of_int(m.vocab), Cell::of_text(std::string(p.description))});
  }
  fmt::print(
      "{}\n{} presets; use one with --preset NAME, or sweep them: --sweep preset=gpt2,llama2-7b\n",
      to_markdown(t), presets().size());
  return 0;
}

int run_devices_command() {
  const GpuPresence gpu = probe_gpu();
  if (gpu.available) {
    fmt::print("GPUs:\n\n{}\n", to_markdown(gpu_table()));
  } else {
    fmt::print("No GPU: {}.\n\n", gpu.why);
  }
  Table t;
  t.columns = {{"profile", "profile", CellKind::text},
               {"card", "card", CellKind::text},
               {"total_bytes", "total", CellKind::bytes},
               {"context_bytes", "context", CellKind::bytes},
               {"gemm_workspace_bytes", "GEMM workspace", CellKind::bytes},
               {"compute_capability", "sm", CellKind::integer},
               {"sms", "SMs", CellKind::integer}};
  for (const GpuProfile& p : gpu_profiles()) {
    t.add_row({Cell::of_text("sim:" + std::string(p.name)), Cell::of_text(std::string(p.label)),
               Cell::of_bytes(p.total), Cell::of_bytes(p.context_overhead()),
               Cell::of_bytes(p.gemm_workspace()), Cell::of_int(p.compute_capability),
               Cell::of_int(p.sms)});
  }
  fmt::print(
      "Simulated devices (--device sim:PROFILE; totals as nvidia-smi reports them, "
      "approximate, varying by board and driver; context: what a PyTorch training process "
      "holds outside its caching allocator, 2 KiB per resident thread + 384 MiB, "
      "docs/memory-model.md):\n\n{}",
      to_markdown(t));
  return 0;
}

int run_selftest_command() {
  std::vector<SelftestRow> rows;
  try {
    rows = run_gpu_selftest();
  } catch (const NeedsGpu& e) {
    fmt::print(stderr, "vrambench: selftest {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "vrambench: selftest failed: {}\n", e.what());
    return 1;
  }
  Table t;
  t.columns = {{"config", "config", CellKind::text},
               {"op", "op", CellKind::text},
               {"dtype", "dtype", CellKind::text},
               {"ops", "ops", CellKind::integer},
               {"max_abs_error", "max abs error", CellKind::text},
               {"worst_ratio", "x tolerance", CellKind::text},
               {"passed", "passed", CellKind::flag},
               {"tolerance", "tolerance", CellKind::text}};
  bool all = true;
  for (const SelftestRow& r : rows) {
    all = all && r.passed;
    t.add_row({Cell::of_text(r.config), Cell::of_text(r.op),
               Cell::of_text(std::string(dtype_name(r.dtype))), Cell::of_int(r.ops),
               Cell::of_text(fmt::format("{:.3g}", r.max_abs_error)),
               Cell::of_text(fmt::format("{:.3g}", r.worst_ratio)), Cell::of_flag(r.passed),
               Cell::of_text(r.note)});
  }
  fmt::print("{}\n", to_markdown(t));
  fmt::print("selftest: {}\n", all ? "every op matches the CPU reference" : "FAILED");
  return all ? 0 : 1;
}

}  // namespace vrambench
