// search, estimate, program, presets and devices.
#include "cli/commands.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>

#include "cli/gpu.h"
#include "core/error.h"
#include "core/fields.h"
#include "core/presets.h"
#include "estimate/estimate.h"
#include "program/print.h"
#include "program/program.h"
#include "report/result_tables.h"
#include "report/table.h"
#include "search/isolate.h"
#include "search/measure.h"

namespace vrambench {
namespace {

// Resolves the device of every grid point up front, so a bad device fails before any output.
// Each distinct (device, vram) is resolved once: on a GPU that takes a child process and a context.
std::vector<DeviceSpec> resolve_devices(const Grid& grid) {
  std::vector<DeviceSpec> devices;
  std::map<std::pair<std::string, Bytes>, DeviceSpec> resolved;
  std::string note;
  for (const RunConfig& cfg : grid.configs) {
    const std::pair<std::string, Bytes> key{cfg.device, cfg.vram};
    auto it = resolved.find(key);
    if (it == resolved.end()) {
      std::string this_note;
      it = resolved.emplace(key, resolve_device(cfg, &this_note)).first;
      if (note.empty()) note = this_note;
    }
    devices.push_back(it->second);
  }
  if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  return devices;
}

std::string device_label(const std::vector<DeviceSpec>& devices) {
  for (const DeviceSpec& d : devices)
    if (d.label != devices.front().label) return "several (see the device and vram columns)";
  return devices.front().label;
}

std::string describe_point(const RunConfig& cfg, const std::vector<std::string>& varying) {
  std::string out;
  for (const std::string& f : key_columns(varying))
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", f, get_field(cfg, f));
  return out;
}

bool stderr_is_terminal() {
  return isatty(STDERR_FILENO) != 0;
}

void print_written(const ResultWriter& writer) {
  for (const std::string& path : writer.written_files()) std::printf("wrote %s\n", path.c_str());
}

}  // namespace

int run_estimate_command(const CliOptions& options, int argc, const char* const* argv) {
  const Formats formats = parse_formats(options.format);
  const Grid grid = make_grid(options);
  const std::vector<DeviceSpec> devices = resolve_devices(grid);
  const bool at_batch = options.fields.count("batch") > 0;

  Table table = estimate_table(grid.varying, at_batch);
  ResultWriter writer(
      options.out, options.name.empty() ? default_output_name("estimate") : options.name, table,
      make_provenance(argc, argv, device_label(devices)), formats.csv, formats.json);
  std::int64_t smallest = INT64_MAX, largest = 0;
  for (std::size_t i = 0; i < grid.configs.size(); ++i) {
    const RunConfig& cfg = grid.configs[i];
    const DeviceSpec& device = devices[i];
    const Breakdown breakdown =
        analyze(cfg, DeviceOverhead{device.fixed_overhead, device.gemm_workspace});
    std::vector<Cell> row = estimate_row(cfg, breakdown, grid.varying, device, at_batch);
    writer.append(row);
    table.add_row(std::move(row));
    const std::int64_t max_batch = breakdown.max_batch(device.total);
    smallest = std::min(smallest, max_batch);
    largest = std::max(largest, max_batch);
  }
  if (formats.markdown) std::printf("%s", to_markdown(table).c_str());
  const std::string summary_line = fmt::format(
      "{} configuration{} on {}: estimated max batch {}", grid.configs.size(),
      grid.configs.size() == 1 ? "" : "s", device_label(devices),
      smallest == largest ? std::to_string(largest) : fmt::format("{}..{}", smallest, largest));
  std::printf("\n%s\n", summary_line.c_str());
  writer.finish({{"configurations", grid.configs.size()},
                 {"min_est_max_batch", smallest},
                 {"max_est_max_batch", largest},
                 {"summary", summary_line}});
  print_written(writer);
  return 0;
}

int run_search_command(const CliOptions& options, int argc, const char* const* argv) {
  if (options.flash_impl != "auto" && options.flash_impl != "cudnn" &&
      options.flash_impl != "kernels")
    throw UsageError(fmt::format("invalid --flash-impl '{}': use auto, cudnn or kernels",
                                 options.flash_impl));
  if (options.cuda_memory != "malloc" && options.cuda_memory != "async")
    throw UsageError(
        fmt::format("invalid --cuda-memory '{}': use malloc or async", options.cuda_memory));
  const Formats formats = parse_formats(options.format);
  const Grid grid = make_grid(options);
  const bool batch_given = options.fields.count("batch") > 0 ||
                           std::any_of(grid.axes.begin(), grid.axes.end(),
                                       [](const Axis& a) { return a.field == "batch"; });
  if (batch_given)
    throw UsageError(
        "--batch: the search finds the batch; for the peak of a given batch use "
        "`vrambench estimate --batch B` or `vrambench program --batch B`");
  const std::vector<DeviceSpec> devices = resolve_devices(grid);
  const std::string measured = devices.front().kind == DeviceKind::sim ? "sim" : "meas";
  const SearchLimits limits{options.max_batch};
  // One line on the terminal, rewritten after every trial; nothing when stderr is not a terminal.
  const bool progress = !options.quiet && stderr_is_terminal();

  // On a real device each row also gets the sim replay of the same configuration.
  const bool with_sim = measured != "sim";
  Table table = search_table(grid.varying, measured, with_sim);
  ResultWriter writer(
      options.out, options.name.empty() ? default_output_name("search") : options.name, table,
      make_provenance(argc, argv, device_label(devices)), formats.csv, formats.json);
  std::vector<Measurement> results, sims;
  nlohmann::json details = nlohmann::json::array();
  std::int64_t total_trials = 0;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < grid.configs.size(); ++i) {
    const RunConfig& cfg = grid.configs[i];
    const DeviceSpec& device = devices[i];
    const std::string point = describe_point(cfg, grid.varying);
    if (progress)
      std::fprintf(stderr, "\r\033[K[%zu/%zu] %s", i + 1, grid.configs.size(), point.c_str());
    int trials_so_far = 0;
    const auto config_start = std::chrono::steady_clock::now();
    const auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - config_start).count();
    };
    const TrialObserver observe = [&, i](std::int64_t batch, const TrialResult& result) {
      ++trials_so_far;
      std::fprintf(stderr, "\r\033[K[%zu/%zu] %s: batch %lld %s (trial %d, %.1f s)", i + 1,
                   grid.configs.size(), point.c_str(), static_cast<long long>(batch),
                   result.fit ? "fits" : "out of memory", trials_so_far, elapsed());
    };
    const SourceFactory sources = sources_for(device, options.cuda_memory == "async");
    const ExecutorFactory executors = executors_for(device, !options.no_execute, options.flash_impl);
    std::optional<Measurement> measured_row;
    try {
      // On CUDA a sticky error poisons the process: each configuration gets its own child.
      if (options.isolate || device.kind == DeviceKind::cuda)
        measured_row =
            measure_isolated(cfg, device, sources, executors, limits, fault_from_environment(),
                             progress ? observe : TrialObserver{}, options.trial_timeout);
      else
        measured_row =
            measure(cfg, device, sources, executors, limits, progress ? observe : TrialObserver{});
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      // A broken configuration becomes a failed row; the sweep goes on.
      measured_row = failed_measurement(cfg, device, fmt::format("failed: {}", e.what()));
    }
    Measurement& m = *measured_row;
    total_trials += static_cast<std::int64_t>(m.search.trials.size());
    std::optional<Measurement> sim;
    if (with_sim) {
      // The sim replays the same step with the fixed overhead the device measured for this row
      // (after its warm-up), so that meas vs sim compares the allocations and nothing else.
      DeviceSpec replayed = device;
      if (m.fixed_overhead > 0) replayed.fixed_overhead = m.fixed_overhead;
      sim = measure(cfg, replayed, virtual_sources(), {}, limits);
      // Make sure the sim has a trial at the device's batch, for the side-by-side peak.
      if (!sim->trials.count(m.compared_batch()))
        sim->trials.emplace(m.compared_batch(),
                            run_trial(cfg, replayed, m.compared_batch(),
                                      replayed.tensor_capacity(), virtual_sources(), nullptr));
    }
    std::vector<Cell> row = search_row(m, grid.varying, sim ? &*sim : nullptr);
    writer.append(row);
    table.add_row(std::move(row));
    nlohmann::json d = search_details(m, device);
    d["point"] = point;
    details.push_back(std::move(d));
    results.push_back(std::move(m));
    if (sim) sims.push_back(std::move(*sim));
  }
  if (progress) std::fprintf(stderr, "\r\033[K");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (formats.markdown) std::printf("%s", to_markdown(table).c_str());
  const ErrorSummary errors = summarize_errors(results);
  std::string summary_line =
      fmt::format("{} configuration{} on {}, {} trials ({:.1f} per configuration) in {:.2f} s",
                  results.size(), results.size() == 1 ? "" : "s", device_label(devices),
                  total_trials,
                  static_cast<double>(total_trials) /
                      static_cast<double>(std::max<std::size_t>(results.size(), 1)),
                  seconds);
  if (errors.compared > 0)
    summary_line += fmt::format(
        "; est vs {} peak: median |err| {:.1f}%, max |err| {:.1f}% ({:+.1f}%), {} under-estimate{}",
        measured, 100 * errors.median_abs, 100 * errors.max_abs, 100 * errors.max_signed,
        errors.under_estimates, errors.under_estimates == 1 ? "" : "s");
  const DeviceVsSim vs_sim = summarize_device_vs_sim(results, sims);
  if (vs_sim.compared > 0)
    summary_line += fmt::format("; {} vs sim peak: median |diff| {:.1f}%, max |diff| {:.1f}% ({:+.1f}%)",
                                measured, 100 * vs_sim.median_abs, 100 * vs_sim.max_abs,
                                100 * vs_sim.max_signed);
  if (errors.non_monotone > 0)
    summary_line += fmt::format("; {} non-monotone", errors.non_monotone);
  const auto failed = std::count_if(results.begin(), results.end(), [](const Measurement& m) {
    return m.reason.starts_with("failed") || m.reason.starts_with("crashed");
  });
  const auto timed_out = std::count_if(results.begin(), results.end(), [](const Measurement& m) {
    return m.reason.starts_with("timeout");
  });
  if (failed > 0) summary_line += fmt::format("; {} failed (see the note column)", failed);
  if (timed_out > 0)
    summary_line += fmt::format("; {} timed out after {:g} s without a finished trial", timed_out,
                                options.trial_timeout);
  std::printf("\n%s\n", summary_line.c_str());
  writer.finish({{"configurations", results.size()},
                 {"trials", total_trials},
                 {"seconds", seconds},
                 {"compared", errors.compared},
                 {"median_abs_rel_error", errors.median_abs},
                 {"max_abs_rel_error", errors.max_abs},
                 {"under_estimates", errors.under_estimates},
                 {"non_monotone", errors.non_monotone},
                 {"device_vs_sim_compared", vs_sim.compared},
                 {"device_vs_sim_median_abs", vs_sim.median_abs},
                 {"device_vs_sim_max_abs", vs_sim.max_abs},
                 {"failed", failed},
                 {"timed_out", timed_out},
                 {"summary", summary_line},
                 {"details", details}});
  print_written(writer);
  return 0;
}

int run_program_command(const CliOptions& options) {
  const Grid grid = make_grid(options);
  if (grid.configs.size() != 1)
    throw UsageError("`vrambench program` shows one configuration: drop --sweep");
  const RunConfig& cfg = grid.configs.front();
  const DeviceSpec device = resolve_device(cfg, nullptr);
  const Program program = build_program(cfg, device.gemm_workspace);
  std::printf("%s", format_program(program, compute_liveness(program)).c_str());
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
  std::printf(
      "%s\n%zu presets; use one with --preset NAME, or sweep them: --sweep preset=gpt2,llama2-7b\n",
      to_markdown(t).c_str(), presets().size());
  return 0;
}

int run_devices_command() {
  const GpuPresence gpu = probe_gpu();
  if (gpu.available) {
    std::printf("GPUs:\n\n%s\n", to_markdown(gpu_table()).c_str());
  } else {
    std::printf("No GPU: %s.\n\n", gpu.why.c_str());
  }
  Table t;
  t.columns = {{"profile", "profile", CellKind::text},
               {"card", "card", CellKind::text},
               {"total_bytes", "total", CellKind::bytes},
               {"context_bytes", "context", CellKind::bytes},
               {"gemm_workspace_bytes", "GEMM workspace", CellKind::bytes},
               {"compute_capability", "sm", CellKind::integer}};
  for (const GpuProfile& p : gpu_profiles()) {
    t.add_row({Cell::of_text("sim:" + std::string(p.name)), Cell::of_text(std::string(p.label)),
               Cell::of_bytes(p.total), Cell::of_bytes(p.context_overhead),
               Cell::of_bytes(p.gemm_workspace()), Cell::of_int(p.compute_capability)});
  }
  std::printf(
      "Simulated devices (--device sim:PROFILE; totals as nvidia-smi reports them, "
      "approximate, varying by board and driver):\n\n%s",
      to_markdown(t).c_str());
  return 0;
}

}  // namespace vrambench
