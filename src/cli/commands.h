// The subcommands. Each takes the parsed options (and argv for provenance) and returns the exit
// code; user mistakes are thrown as UsageError before anything is written.
#pragma once

#include "cli/options.h"

namespace vrambench {

int run_search_command(const CliOptions& options, int argc, const char* const* argv);
int run_estimate_command(const CliOptions& options, int argc, const char* const* argv);
int run_program_command(const CliOptions& options);
// Trainer settings from the sim replay: micro-batch, grad-accum, longest sequence, the budget and
// the changes that help, as text, hf, axolotl or json (options.plan). 0 once a plan is printed,
// fitting or not.
int run_plan_command(const CliOptions& options);
// options.base, options.fresh. 0 when every row is within tolerance and both files have the same
// configurations, 1 when not.
int run_compare_command(const CliOptions& options);
// options.merge_out (FOLDER/NAME, an extension .csv or .json dropped) and options.parts.
int run_merge_command(const CliOptions& options);
int run_presets_command(const CliStreams& streams);
int run_devices_command(const CliStreams& streams);
// Every CUDA op against the CPU reference; fails (1) without a GPU.
int run_selftest_command(const CliStreams& streams);

}  // namespace vrambench
