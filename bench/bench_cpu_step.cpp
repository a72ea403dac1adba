// Speed of one training step of the tiny presets on the cpu device (reference kernels, host
// memory): forward, backward and AdamW, reported as tokens per second.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "device/cpu_executor.h"
#include "device/host_runner.h"
#include "model/families.h"
#include "program/program.h"

namespace vrambench {
namespace {

// Args: {llama (0 = tiny gpt, 1 = tiny-llama), flash (0 = eager, 1 = flash)}.
void BM_CpuStepTiny(benchmark::State& state) {
  RunConfig cfg;
  cfg.model = find_preset(state.range(0) != 0 ? "tiny-llama" : "tiny").model;
  cfg.seq = 64;
  cfg.batch = 4;
  cfg.dtype = Precision::fp32;
  cfg.attention = state.range(1) != 0 ? Attention::flash : Attention::eager;
  cfg.recompute = Recompute::none;
  cfg.optimizer = Optimizer::adamw;
  cfg.device = parse_device("cpu");
  const Program program = build_program(cfg, 0);
  auto executor = make_cpu_executor(1);
  HostRunner run(program, *executor);
  for (auto _ : state) {
    run.step();
    benchmark::DoNotOptimize(run.loss());
  }
  const double tokens = static_cast<double>(cfg.batch * cfg.seq);
  state.counters["tokens_per_second"] = benchmark::Counter(
      tokens * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(
      fmt::format("{} {} B={} S={}", cfg.model.name, to_string(cfg.attention), cfg.batch, cfg.seq));
}
BENCHMARK(BM_CpuStepTiny)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"llama", "flash"})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vrambench
