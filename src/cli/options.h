// Command-line options as a plain struct (filled by CLI11 in main.cpp, or by tests), and how they
// become the base configuration and the grid of configurations to run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/config.h"
#include "sweep/sweep.h"

namespace vrambench {

struct CliOptions {
  std::string command = "search";  // search | estimate | program | presets | devices | selftest
  std::map<std::string, std::string> fields;  // explicit --FIELD VALUE, by canonical field name
  std::vector<std::string> sweeps;            // --sweep, each one axis
  std::string out = "results";                // --out folder
  std::string name;                           // --name base of the output files
  std::string format = "md,csv,json";         // --format
  std::int64_t max_batch = 65536;             // --max-batch
  bool quiet = false;                         // --quiet: no progress line
  bool isolate = false;                       // --isolate: a child process per configuration
  bool no_execute = false;                    // --no-execute: allocate only, run no kernel
  std::string flash_impl = "auto";            // --flash-impl: auto | cudnn | kernels (cuda device)
  std::string cuda_memory = "malloc";         // --cuda-memory: malloc | async (cuda device)
  double trial_timeout = 600;                 // --trial-timeout: seconds per isolated trial
};

struct Formats {
  bool markdown = false, csv = false, json = false;
};
// Parses "md,csv,json" (any subset, in any order). Throws UsageError naming the bad entry.
Formats parse_formats(const std::string& text);

// The base configuration: the gpt2 preset, then --preset, then every other explicit field.
RunConfig base_config(const CliOptions& options);

struct Grid {
  std::vector<Axis> axes;
  std::vector<std::string> varying;  // fields with more than one value
  std::vector<RunConfig> configs;    // every configuration, each validated
};
// Parses the sweeps, expands them over the base configuration and validates every point, so that
// a mistake anywhere in the grid is reported before anything runs or is written.
Grid make_grid(const CliOptions& options);

// The default --name: "<command>-<UTC yyyymmdd-hhmmss>".
std::string default_output_name(const std::string& command);

}  // namespace vrambench
