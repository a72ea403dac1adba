// The vrambench command line as a library: every subcommand's CLI11 options parsed and the command
// run. The program (main.cpp) and the Python module (python/src/engine.cpp) run commands through
// it alone, so that a command line means the same in both.
#pragma once

#include <string>
#include <vector>

#include "cli/options.h"
#include "core/error.h"

namespace vrambench {

// A command line that CLI11 refused (an unknown option, a value its validator rejected). The
// program prints it with "(see vrambench --help)".
class CommandLineError : public UsageError {
 public:
  using UsageError::UsageError;
};

// Runs one command line: `args` without the program's name ({"plan", "--preset", "gpt2"}); with no
// subcommand first it is `search`. Returns the command's exit code: 0, or 1 where the command says
// so (rows that failed, a comparison beyond its tolerance, a failed selftest); --help and
// --version print to `streams.out` and return 0. A mistake in the request throws UsageError
// (CommandLineError where CLI11 refused the line), before any result file is written.
int run_cli(const std::vector<std::string>& args, const CliStreams& streams = {});

// run_cli as the program runs it, on stdout and stderr: a mistake is printed on one line
// ("vrambench: error: ...") and returns 2, any other failure ("vrambench: internal error: ...") 1.
int cli_main(const std::vector<std::string>& args);

}  // namespace vrambench
