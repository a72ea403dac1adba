// Command-line options as a plain struct (filled by CLI11 in main.cpp, or by tests), and how they
// become the base configuration and the grid of configurations to run.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/fields.h"
#include "config/run_config.h"
#include "device/device.h"
#include "plan/emit.h"
#include "plan/plan.h"
#include "report/compare.h"
#include "sweep/shard.h"
#include "sweep/sweep.h"

namespace vrambench {

struct Formats {
  bool markdown = true, csv = true, json = true;
};
// Parses "md,csv,json" (any subset, in any order). Throws UsageError naming the bad entry.
Formats parse_formats(const std::string& text);

// `vrambench plan`'s own options (and --safety-margin, which search accepts and never applies).
struct PlanCliOptions {
  bool vram_auto = false;                    // --vram auto: the free memory of the CUDA device
  bool seq_max = false;                      // --seq max
  SafetyMargin margin;                       // --safety-margin SIZE|PCT (default 1 GiB)
  std::optional<std::int64_t> target_batch;  // --target-batch N: the effective batch
  PlanEmit emit = PlanEmit::text;            // --emit text|hf|axolotl|json
};

// Where a command prints: `out` its results (tables, plans, summary lines, the files written),
// `err` its notes and warnings (a device fallback, rows that failed). The program's stdout and
// stderr; buffers when the Python module runs a command. The progress line is the terminal's
// (stderr) alone.
struct CliStreams {
  std::FILE* out = stdout;
  std::FILE* err = stderr;
};

// Every value is typed: app.cpp's CLI11 options parse each once, as it is given.
struct CliOptions {
  // search | estimate | plan | program | compare | merge | presets | devices | selftest
  std::string command = "search";
  std::map<std::string, FieldValue> fields;  // explicit --FIELD VALUE, by canonical field name
  std::vector<Axis> sweeps;                  // --sweep, each one axis
  std::string out = "results";               // --out folder
  std::string name;                          // --name base of the output files
  Formats formats;                           // --format
  std::int64_t max_batch = 65536;            // --max-batch
  bool over_seq = false;  // search --over seq: the longest sequence at --batch, not the max batch
  bool quiet = false;     // --quiet: no progress line (every command)
  bool resume = false;    // --resume: keep the rows a run of --name finished
  std::optional<Shard> shard;  // --shard K/N: every N-th configuration from K
  bool isolate = false;        // --isolate: a child process per configuration
  // --jobs: configurations worked on at once where they run no kernel (the sim device, the
  // estimate); 0: one per core. A GPU's or the cpu device's configurations run one at a time.
  int jobs = 0;
  DeviceOptions device;        // --no-execute, --flash-impl, --cuda-memory (cpu and cuda devices)
  double trial_timeout = 600;  // --trial-timeout: seconds per isolated trial
  CompareOptions compare;      // compare: --tolerance, --batch-tolerance, --all
  std::string base, fresh;     // compare BASE NEW
  std::string merge_out;       // merge OUT PARTS...
  std::vector<std::string> parts;
  PlanCliOptions plan;  // plan: --vram auto, --seq max, --safety-margin, --target-batch, --emit
  CliStreams streams;   // where the command prints
};

// The base configuration: the gpt2 preset, then --preset, then every other explicit field.
RunConfig base_config(const CliOptions& options);

struct Grid {
  std::vector<Axis> axes;
  std::vector<std::string> varying;  // fields with more than one value
  std::vector<RunConfig> configs;    // every configuration (of the shard), each validated
  // The framework whose step the whole sweep's rows run (framework_of), the same for every shard:
  // "lean", "hf", or "per row" when the sweep varies it or auto picks both.
  std::string framework;
  // The recipe of the whole sweep (recipe_text), the same for every shard: "finetune full, quant
  // none, optimizer adamw, recompute none/full".
  std::string recipe;
};
// Expands the sweeps over the base configuration and validates every point (the one validate() of
// each configuration), so that a mistake anywhere in the grid is reported before anything runs or
// is written; then keeps the configurations of --shard, when given.
Grid make_grid(const CliOptions& options);

// The default --name: "<command>-<UTC yyyymmdd-hhmmss>".
std::string default_output_name(const std::string& command);

}  // namespace vrambench
