// vrambench's entry point: argv to the command line (app.h).
#include <string>
#include <vector>

#include "cli/app.h"
#include "core/heap.h"

int main(int argc, char** argv) {
  vrambench::keep_freed_memory();
  return vrambench::cli_main(std::vector<std::string>(argc > 0 ? argv + 1 : argv, argv + argc));
}
