// Speed of the closed-form model: analyze() and max_batch() over a 1,000-point grid, the size of a
// typical sweep, so that estimating every row of a table stays negligible next to a simulation.
#include <benchmark/benchmark.h>

#include <array>
#include <vector>

#include "config/gpu_profiles.h"
#include "estimate/estimate.h"
#include "model/families.h"

namespace vrambench {
namespace {

// 5 presets x 10 sequence lengths x 4 precisions x 5 attention/recompute combinations = 1,000.
std::vector<RunConfig> grid() {
  constexpr std::array<std::string_view, 5> kPresets{"gpt2", "gpt2-xl", "llama2-7b", "llama2-13b",
                                                     "llama3-8b"};
  constexpr std::array<std::int64_t, 10> kSeq{128,  256,  512,  1024, 2048,
                                              3072, 4096, 6144, 8192, 16384};
  constexpr std::array<Precision, 4> kPrecisions{Precision::fp32, Precision::tf32, Precision::fp16,
                                                 Precision::bf16};
  struct Combo {
    Attention attention;
    Recompute recompute;
  };
  constexpr std::array<Combo, 5> kCombos{{{Attention::eager, Recompute::none},
                                          {Attention::eager, Recompute::selective},
                                          {Attention::eager, Recompute::full},
                                          {Attention::flash, Recompute::none},
                                          {Attention::flash, Recompute::full}}};
  std::vector<RunConfig> out;
  for (std::string_view preset : kPresets)
    for (std::int64_t seq : kSeq)
      for (Precision precision : kPrecisions)
        for (const Combo& combo : kCombos) {
          RunConfig cfg;
          cfg.model = find_preset(preset).model;
          cfg.seq = seq;
          cfg.dtype = precision;
          cfg.attention = combo.attention;
          cfg.recompute = combo.recompute;
          cfg.dropout = 0.1;
          out.push_back(cfg);
        }
  return out;
}

void BM_EstimateGrid(benchmark::State& state) {
  const std::vector<RunConfig> configs = grid();
  const GpuProfile& h100 = find_gpu_profile("h100-80gb");
  // With the capacity, as `vrambench estimate` runs it (the allocator's share is fitted there).
  const DeviceOverhead overhead{h100.context_overhead(), h100.gemm_workspace(), h100.total};
  for (auto _ : state) {
    std::int64_t total = 0;
    for (const RunConfig& cfg : configs) total += analyze(cfg, overhead).max_batch(h100.total);
    benchmark::DoNotOptimize(total);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(configs.size()));
  state.counters["points"] = static_cast<double>(configs.size());
}
BENCHMARK(BM_EstimateGrid)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vrambench
