// One training step on the GPU, op by op through the cuda executor as a trial runs it, next to the
// time of the same step's GEMMs alone: how far the non-GEMM kernels are from free. Every tensor of
// the program gets its own buffer (no allocator), so the timing is the kernels' alone.
//   gpt2, B=8, S=1024, bf16, the whole model (forward, loss, backward, AdamW)
//   one llama2-7b layer (config 1) or llama3-8b layer (config 2), B=2, S=2048, bf16 (forward and
//   backward of the block)
// step_over_gemm: the step's time over its GEMMs' (the target: at most 1.5); <kind>_ms: the ops of
// one kind alone, for each kind that takes 2% of the step or more.
// Arg 1: flash attention through cuDNN (1) or the fused kernels (0). Without a GPU, or when cuDNN
// cannot run the shape, the benchmark says why and skips.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <vector>

#include "config/gpu_profiles.h"
#include "cuda/check.h"
#include "cuda/gemm.h"
#include "cuda/owners.h"
#include "device/cuda_device.h"
#include "model/families.h"
#include "program/program.h"

namespace vrambench {
namespace {

RunConfig step_config(std::int64_t which) {
  RunConfig cfg;
  cfg.dtype = Precision::bf16;
  cfg.attention = Attention::flash;
  cfg.recompute = Recompute::none;
  cfg.optimizer = Optimizer::adamw;
  cfg.device = parse_device("cuda");
  if (which == 0) {
    cfg.model = find_preset("gpt2").model;
    cfg.scope = Scope::model;
    cfg.batch = 8;
    cfg.seq = 1024;
  } else {
    // 1: Llama 2 7B (multi-head attention); 2: Llama 3 8B (GQA, 8 KV heads, 128k vocabulary).
    cfg.model = find_preset(which == 1 ? "llama2-7b" : "llama3-8b").model;
    cfg.scope = Scope::layer;
    cfg.batch = 2;
    cfg.seq = 2048;
  }
  return cfg;
}

bool is_gemm(OpKind k) {
  return k == OpKind::linear_fwd || k == OpKind::linear_bwd || k == OpKind::attn_scores ||
         k == OpKind::attn_values || k == OpKind::attn_values_bwd || k == OpKind::attn_scores_bwd;
}

// Runs the ops `pick` selects once, in program order, and returns the seconds they took.
template <typename Pick>
double run_ops(Executor& executor, const Program& program, const std::vector<void*>& data,
               Pick&& pick) {
  VB_CUDA_CHECK(cudaDeviceSynchronize());
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < program.ops.size(); ++i)
    if (pick(program.ops[i])) executor.execute(program, i, data);
  executor.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void BM_TrainingStep(benchmark::State& state) {
  std::string why;
  if (!cuda_available(&why)) {
    state.SkipWithError(("needs a GPU: " + why).c_str());
    return;
  }
  const RunConfig cfg = step_config(state.range(0));
  const FlashImpl flash = state.range(1) == 1 ? FlashImpl::cudnn : FlashImpl::kernels;
  state.SetLabel(cfg.model.name + (cfg.scope == Scope::layer ? " layer" : " model") +
                 (flash == FlashImpl::cudnn ? ", cudnn-sdpa" : ", kernel"));
  const CudaDeviceInfo info = query_cuda_device(0);
  const Program program = build_program(cfg, cuda::gemm_workspace_bytes(info.compute_capability()));

  std::vector<cuda::DeviceBuffer> buffers;
  std::vector<void*> data(program.tensors.size(), nullptr);
  buffers.reserve(program.tensors.size());
  auto executor = make_cuda_executor(1, flash);
  for (const Tensor& t : program.tensors) {
    buffers.emplace_back(static_cast<std::size_t>(t.bytes));
    data[static_cast<std::size_t>(t.id)] = buffers.back().get();
  }
  for (int id : compute_liveness(program).persistent) {
    executor->initialize(program, id, data[static_cast<std::size_t>(id)]);
  }
  const auto all = [](const Op&) { return true; };
  const auto gemms = [](const Op& op) { return is_gemm(op.kind); };
  double step_seconds = 0.0, gemm_seconds = 0.0;
  try {
    run_ops(*executor, program, data, all);  // warm-up: plans, heuristics, module loads
    for (auto _ : state) {
      const double seconds = run_ops(*executor, program, data, all);
      step_seconds += seconds;
      state.SetIterationTime(seconds);
      state.PauseTiming();
      gemm_seconds += run_ops(*executor, program, data, gemms);
      state.ResumeTiming();
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const double iterations = static_cast<double>(state.iterations());
  // Where the rest goes: each op kind's ops alone (three runs, averaged), as <kind>_ms for the
  // kinds that take 2% of the step or more.
  try {
    for (std::size_t k = 0; k < kOpKindCount; ++k) {
      const auto kind = static_cast<OpKind>(k);
      if (is_gemm(kind)) continue;
      const auto of_kind = [kind](const Op& op) { return op.kind == kind; };
      if (std::none_of(program.ops.begin(), program.ops.end(), of_kind)) continue;
      double seconds = 0.0;
      for (int run = 0; run < 3; ++run) seconds += run_ops(*executor, program, data, of_kind) / 3;
      if (seconds >= 0.02 * step_seconds / iterations)
        state.counters[std::string(to_string(kind)) + "_ms"] = 1e3 * seconds;
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.counters["gemm_ms"] = 1e3 * gemm_seconds / iterations;
  // The step's time that is not its GEMMs, as a share of the step: what the other kernels cost.
  state.counters["non_gemm_share"] = step_seconds > 0 ? 1.0 - gemm_seconds / step_seconds : 0.0;
  // The step against its GEMMs alone (the target: at most 1.5).
  state.counters["step_over_gemm"] = gemm_seconds > 0 ? step_seconds / gemm_seconds : 0.0;
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(cfg.batch * cfg.seq),
                                                  benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ops"] = static_cast<double>(program.ops.size());
}
BENCHMARK(BM_TrainingStep)
    ->ArgNames({"config", "cudnn"})
    ->Args({0, 1})
    ->Args({0, 0})
    ->Args({1, 1})
    ->Args({1, 0})
    ->Args({2, 1})
    ->Args({2, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0);

}  // namespace
}  // namespace vrambench
