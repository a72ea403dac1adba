// Command-line options as a plain struct (filled by CLI11 in main.cpp, or by tests), and how they
// become the base configuration and the grid of configurations to run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/fields.h"
#include "device/device.h"
#include "sweep/sweep.h"

namespace vrambench {

struct Formats {
  bool markdown = true, csv = true, json = true;
};
// Parses "md,csv,json" (any subset, in any order). Throws UsageError naming the bad entry.
Formats parse_formats(const std::string& text);

// Every value is typed: main.cpp's CLI11 options parse each once, as it is given.
struct CliOptions {
  std::string command = "search";  // search | estimate | program | presets | devices | selftest
  std::map<std::string, FieldValue> fields;  // explicit --FIELD VALUE, by canonical field name
  std::vector<Axis> sweeps;                  // --sweep, each one axis
  std::string out = "results";               // --out folder
  std::string name;                          // --name base of the output files
  Formats formats;                           // --format
  std::int64_t max_batch = 65536;            // --max-batch
  bool quiet = false;                        // --quiet: no progress line
  bool isolate = false;                      // --isolate: a child process per configuration
  DeviceOptions device;        // --no-execute, --flash-impl, --cuda-memory (cpu and cuda devices)
  double trial_timeout = 600;  // --trial-timeout: seconds per isolated trial
};

// The base configuration: the gpt2 preset, then --preset, then every other explicit field.
RunConfig base_config(const CliOptions& options);

struct Grid {
  std::vector<Axis> axes;
  std::vector<std::string> varying;  // fields with more than one value
  std::vector<RunConfig> configs;    // every configuration, each validated
};
// Expands the sweeps over the base configuration and validates every point (the one validate() of
// each configuration), so that a mistake anywhere in the grid is reported before anything runs or
// is written.
Grid make_grid(const CliOptions& options);

// The default --name: "<command>-<UTC yyyymmdd-hhmmss>".
std::string default_output_name(const std::string& command);

}  // namespace vrambench
