// Engine speed over the 300-configuration grid of issue 13 (gpt2, gpt2-large, llama2-7b,
// llama3-8b, tiny-llama × seq 512..8192 × fp32/bf16 × eager/flash × none/selective/full, no
// optimizer, sim:h100-80gb), on one core: whole searches (estimate, trials, the replay of the
// first failure) and the closed-form estimate alone. Run Release builds only (scripts/bench.sh).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "device/device.h"
#include "estimate/estimate.h"
#include "measure_all.h"
#include "measure/measure.h"
#include "sweep/sweep.h"

namespace vrambench {
namespace {

std::vector<RunConfig> issue_grid() {
  RunConfig base;
  base.device = parse_device("sim:h100-80gb");
  base.optimizer = Optimizer::none;
  const std::vector<Axis> axes{parse_axis("preset=gpt2,gpt2-large,llama2-7b,llama3-8b,tiny-llama"),
                               parse_axis("seq=512..8192"), parse_axis("dtype=fp32,bf16"),
                               parse_axis("attention=eager,flash"),
                               parse_axis("recompute=none,selective,full")};
  return expand(base, axes);
}

DeviceInfo sim_device(const RunConfig& cfg) {
  return make_device(cfg).info;
}

// Counters: searches/s (the figure of issue 13), trials/search (the search's own trials, averaged
// over the grid).
void BM_SearchGrid(benchmark::State& state) {
  const std::vector<RunConfig> grid = issue_grid();
  const DeviceInfo device = sim_device(grid.front());
  std::int64_t searches = 0;
  std::int64_t trials = 0;
  for (auto _ : state) {
    trials += measure_all(grid, device);
    searches += static_cast<std::int64_t>(grid.size());
  }
  state.counters["configs"] = static_cast<double>(grid.size());
  state.counters["searches/s"] =
      benchmark::Counter(static_cast<double>(searches), benchmark::Counter::kIsRate);
  state.counters["trials/search"] =
      static_cast<double>(trials) / static_cast<double>(searches > 0 ? searches : 1);
}
BENCHMARK(BM_SearchGrid)->Unit(benchmark::kMillisecond);

// The closed-form model alone over the same grid, as `vrambench estimate` and the search run it:
// analyze() with the device's capacity (where the caching allocator's share is fitted, at the
// largest batch whose replay fits and the one after it) and max_batch().
void BM_EstimateIssueGrid(benchmark::State& state) {
  const std::vector<RunConfig> grid = issue_grid();
  const DeviceInfo device = sim_device(grid.front());
  const DeviceOverhead overhead{device.fixed_overhead, device.gemm_workspace, device.total};
  std::int64_t estimates = 0;
  for (auto _ : state) {
    std::int64_t total = 0;
    for (const RunConfig& cfg : grid) total += analyze(cfg, overhead).max_batch(device.total);
    benchmark::DoNotOptimize(total);
    estimates += static_cast<std::int64_t>(grid.size());
  }
  state.counters["estimates/s"] =
      benchmark::Counter(static_cast<double>(estimates), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EstimateIssueGrid)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vrambench
