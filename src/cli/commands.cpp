// search, estimate, program, presets and devices.
#include "cli/commands.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>

#include "cli/grid_run.h"
#include "cli/progress.h"
#include "config/fields.h"
#include "config/gpu_profiles.h"
#include "core/error.h"
#include "device/device.h"
#include "device/gpu.h"
#include "estimate/estimate.h"
#include "measure/isolate.h"
#include "measure/measure.h"
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

namespace vrambench {
namespace {

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

}  // namespace

int run_estimate_command(const CliOptions& options, int argc, const char* const* argv) {
  Grid grid = make_grid(options);
  // A batch given or swept: each row is the peak at its batch.
  const bool at_batch = options.fields.count("batch") > 0 ||
                        std::any_of(grid.axes.begin(), grid.axes.end(),
                                    [](const Axis& a) { return a.field == "batch"; });
  GridRun run(options, std::move(grid), {}, argc, argv);
  const EstimateExtras extras = estimate_extras(run.grid().configs);
  const Table header = estimate_table(run.grid().varying, at_batch, extras);
  run.open(header, "estimate");
  std::int64_t smallest = INT64_MAX, largest = 0;
  std::mutex range;  // the rows are made on several threads
  run.run(
      [&](std::size_t i, const TrialObserver&) {
        const EstimateFigures e =
            estimate_figures(run.grid().configs[i], run.device(i).info, at_batch);
        const std::lock_guard<std::mutex> lock(range);
        smallest = std::min(smallest, e.est_max_batch);
        largest = std::max(largest, e.est_max_batch);
        return GridRow{estimate_row(e, run.grid().varying, at_batch, extras), nullptr};
      },
      true);
  if (run.grid().configs.empty()) smallest = largest = 0;  // an empty shard
  const std::string line =
      estimate_summary_line(header.columns, run.rows(), run.ran_on(), smallest, largest);
  run.finish(line,
             {{"configurations", run.grid().configs.size()},
              {"min_est_max_batch", smallest},
              {"max_est_max_batch", largest}},
             false);
  return 0;
}

namespace {

// `search --over seq`: the longest sequence at cfg.batch per configuration, in this process (sim
// and cpu; a GPU's trials need the isolation of measure_isolated, which searches over the batch).
int run_seq_search(const CliOptions& options, Grid grid, int argc, const char* const* argv) {
  if (options.fields.count("seq") > 0 ||
      std::any_of(grid.axes.begin(), grid.axes.end(),
                  [](const Axis& a) { return a.field == "seq"; }))
    throw UsageError("--over seq: the sequence is what the search finds; drop --seq and its sweep");
  if (options.resume)
    throw UsageError("--over seq: --resume finishes searches over the batch only");
  GridRun run(options, std::move(grid), options.device, argc, argv);
  if (run.kind() == DeviceKind::cuda)
    throw UsageError(
        "--over seq runs on sim and cpu devices; on a GPU, `vrambench plan --seq max` gives the "
        "sim replay's answer, or sweep --sweep seq=... over the batch search");
  const std::string measured = run.kind() == DeviceKind::sim ? "sim" : "meas";
  const Table header = seq_search_table(run.grid().varying, measured);
  run.open(header, "search-seq");
  const double seconds = run.run(
      [&](std::size_t i, const TrialObserver& observe) {
        const SeqMeasurement m =
            measure_max_seq(run.grid().configs[i], run.device(i), SeqLimits{}, observe);
        return GridRow{seq_search_row(m, run.grid().varying, run.device(i).info.total), nullptr};
      },
      run.kind() == DeviceKind::sim);
  const std::string line =
      seq_search_summary_line(header.columns, run.rows(), run.ran_on(), seconds);
  run.finish(line, {{"configurations", run.grid().configs.size()}, {"seconds", seconds}}, false);
  return 0;
}

// One row of the search: the measurement on the configuration's device (in a child process on
// CUDA, or with --isolate), on a real device beside the sim replay of the same configuration.
GridRow search_grid_row(const CliOptions& options, const GridRun& run, std::size_t i,
                        const TrialObserver& observe, bool with_sim, bool with_paged) {
  const RunConfig& cfg = run.grid().configs[i];
  const Device& device = run.device(i);
  const SearchLimits limits{options.max_batch};
  std::optional<Measurement> measured_row;
  try {
    // On CUDA a sticky error poisons the process: each configuration gets its own child.
    if (options.isolate || device.info.kind == DeviceKind::cuda)
      measured_row = measure_isolated(cfg, device, limits, fault_from_environment(cfg), observe,
                                      options.trial_timeout);
    else
      measured_row = measure(cfg, device, limits, observe);
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    // A broken configuration becomes a failed row; the sweep goes on.
    measured_row = failed_measurement(cfg, device.info, Failure::failed, e.what());
  }
  const Measurement& m = *measured_row;
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
      sim->trials.emplace(m.compared_batch(), run_trial(cfg, replayed, m.compared_batch(),
                                                        replayed.info.tensor_capacity(), nullptr));
  }
  return GridRow{search_row(m, run.grid().varying, sim ? &*sim : nullptr, with_paged),
                 search_details(m, device.info)};
}

}  // namespace

int run_search_command(const CliOptions& options, int argc, const char* const* argv) {
  Grid grid = make_grid(options);
  if (options.over_seq) return run_seq_search(options, std::move(grid), argc, argv);
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
  GridRun run(options, std::move(grid), options.device, argc, argv);
  const std::string measured = run.kind() == DeviceKind::sim ? "sim" : "meas";
  // On a real device each row also gets the sim replay of the same configuration.
  const bool with_sim = measured != "sim";
  const std::vector<RunConfig>& configs = run.grid().configs;
  const bool with_paged = std::any_of(configs.begin(), configs.end(),
                                      [](const RunConfig& c) { return has_off_device_state(c); });
  const Table header = search_table(run.grid().varying, measured, with_paged);
  // Rows and their details go to the files as they finish and are not held here: a sweep's
  // memory stays flat in its length.
  run.open(header, "search", options.resume);
  // Sim rows run no kernel and share nothing: several at once. A GPU's or the cpu device's run
  // one at a time, and so do rows measured in a child process.
  const bool parallel = run.kind() == DeviceKind::sim && !options.isolate;
  const double seconds = run.run(
      [&](std::size_t i, const TrialObserver& observe) {
        return search_grid_row(options, run, i, observe, with_sim, with_paged);
      },
      parallel);
  const SearchSummary summary = summarize_search(header.columns, run.rows());
  const std::string line = search_summary_line(summary, run.ran_on(), seconds);
  run.finish(line, search_summary_json(summary, line, seconds), true);
  // Every row is written first; a row without an answer still fails the run, so that a script
  // (or CI) never takes a table of failed rows for a result.
  const std::int64_t unanswered = summary.failed + summary.timed_out;
  if (unanswered > 0) {
    fmt::print(options.streams.err,
               "vrambench: {} of {} configurations failed{} (see the note column)\n", unanswered,
               summary.configurations,
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
  fmt::print(options.streams.out, "{}", format_program(program, compute_liveness(program)));
  return 0;
}

int run_compare_command(const CliOptions& options) {
  const ResultFile base = read_result_file(options.base);
  const ResultFile fresh = read_result_file(options.fresh);
  const Comparison comparison = compare_results(base, fresh, options.compare);
  fmt::print(options.streams.out, "{}",
             format_comparison(comparison, base, fresh, options.compare));
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
  if (options.formats.markdown) fmt::print(options.streams.out, "{}", to_markdown(merged.table));
  fmt::print(options.streams.out, "\n{}\n", summary_line);
  writer.finish(summary, with_details);
  for (const std::string& path : writer.written_files())
    fmt::print(options.streams.out, "wrote {}\n", path);
  return 0;
}

int run_presets_command(const CliStreams& streams) {
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
      streams.out,
      "{}\n{} presets; use one with --preset NAME, or sweep them: --sweep preset=gpt2,llama2-7b\n",
      to_markdown(t), presets().size());
  return 0;
}

int run_devices_command(const CliStreams& streams) {
  const GpuPresence gpu = probe_gpu();
  if (gpu.available) {
    fmt::print(streams.out, "GPUs:\n\n{}\n", to_markdown(gpu_table()));
  } else {
    fmt::print(streams.out, "No GPU: {}.\n\n", gpu.why);
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
  fmt::print(streams.out,
             "Simulated devices (--device sim:PROFILE; totals as nvidia-smi reports them, "
             "approximate, varying by board and driver; context: what a PyTorch training process "
             "holds outside its caching allocator, 2 KiB per resident thread + 384 MiB, "
             "docs/memory-model.md):\n\n{}",
             to_markdown(t));
  return 0;
}

int run_selftest_command(const CliStreams& streams) {
  std::vector<SelftestRow> rows;
  try {
    rows = run_gpu_selftest();
  } catch (const NeedsGpu& e) {
    fmt::print(streams.err, "vrambench: selftest {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(streams.err, "vrambench: selftest failed: {}\n", e.what());
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
  fmt::print(streams.out, "{}\n", to_markdown(t));
  fmt::print(streams.out, "selftest: {}\n", all ? "every op matches the CPU reference" : "FAILED");
  return all ? 0 : 1;
}

}  // namespace vrambench
