// The benchmarks' main: the heap set up as the tool's own main sets it (core/heap.h), so that the
// figures are those of the tool; then Google Benchmark's flags and runs.
#include <benchmark/benchmark.h>

#include "core/heap.h"

int main(int argc, char** argv) {
  vrambench::keep_freed_memory();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
