// Engine speed of the search on the sim device: program build, trials and bisection over a
// 100-configuration sweep (gpt2 × seq × dtype × attention × recompute).
#include <benchmark/benchmark.h>

#include "config/gpu_profiles.h"
#include "measure_all.h"
#include "measure/measure.h"
#include "model/families.h"
#include "sweep/sweep.h"

namespace vrambench {
namespace {

std::vector<RunConfig> hundred_configs() {
  RunConfig base;
  base.model = find_preset("gpt2").model;
  base.device = parse_device("sim:h100-80gb");
  // 5 seq × 4 dtype × 5 (attention, recompute) = 100.
  std::vector<Axis> axes{parse_axis("seq=512..8192"), parse_axis("dtype=fp32,tf32,fp16,bf16"),
                         parse_axis("recompute=none,selective,full,none,full")};
  std::vector<RunConfig> grid = expand(base, axes);
  for (std::size_t i = 0; i < grid.size(); ++i)
    grid[i].attention = (i % 5 < 3) ? Attention::eager : Attention::flash;
  return grid;
}

void BM_SimSweep100(benchmark::State& state) {
  const std::vector<RunConfig> grid = hundred_configs();
  const GpuProfile& profile = find_gpu_profile("h100-80gb");
  DeviceInfo device;
  device.total = profile.total;
  device.fixed_overhead = profile.context_overhead();
  device.gemm_workspace = profile.gemm_workspace();
  std::int64_t trials = 0;
  for (auto _ : state) trials += measure_all(grid, device);
  state.counters["configs/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * grid.size()), benchmark::Counter::kIsRate);
  state.counters["trials/s"] =
      benchmark::Counter(static_cast<double>(trials), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SimSweep100)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vrambench
