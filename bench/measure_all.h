// The loop the sweep benchmarks time: measure() every configuration on the sim device.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "device/device.h"
#include "measure/measure.h"

namespace vrambench {

// Searches every configuration of `grid`; returns the trials the searches ran.
inline std::int64_t measure_all(const std::vector<RunConfig>& grid, const DeviceInfo& device) {
  const Device sim = simulated(device);
  std::int64_t trials = 0;
  for (const RunConfig& cfg : grid) {
    const Measurement m = measure(cfg, sim, {});
    trials += static_cast<std::int64_t>(m.search.trials.size());
    benchmark::DoNotOptimize(m.search.max_batch);
  }
  return trials;
}

}  // namespace vrambench
