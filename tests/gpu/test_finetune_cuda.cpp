// The fine-tuning kinds on the cuda executor against the cpu executor: whole lora and qlora steps
// of a tiny model run on both from their own initialisation (the quantised base, the adapters and
// the 8-bit state filled on each device), compared after every op; and the selftest's coverage of
// the new kinds.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/math.h"
#include "config/gpu_profiles.h"
#include "cuda/gemm.h"
#include "cuda/owners.h"
#include "device/cpu_executor.h"
#include "device/cuda_device.h"
#include "device/host_runner.h"
#include "gpu/require_gpu.h"
#include "model/families.h"
#include "program/program.h"
#include "program/signature.h"

namespace vrambench {
namespace {

RunConfig tiny_finetune(Finetune finetune, Optimizer optimizer, Precision precision) {
  RunConfig cfg;
  cfg.model = find_preset("tiny-llama").model;
  cfg.model.vocab = 64;
  cfg.model.max_positions = 32;
  cfg.seq = 16;
  cfg.batch = 2;
  cfg.dtype = precision;
  cfg.attention = Attention::flash;
  cfg.optimizer = optimizer;
  cfg.finetune = finetune;
  cfg.lora_rank = 64;  // adapters of 4096 elements: 8-bit state under an 8-bit optimizer
  cfg.lora_alpha = 16.0;
  cfg.device = parse_device("cuda");
  return cfg;
}

TEST(FinetuneSelftest, ConfigsValidateAndCoverTheFinetuningKinds) {
  std::set<OpKind> kinds;
  bool frozen_norm = false;
  for (const SelftestConfig& sc : selftest_configs()) {
    EXPECT_NO_THROW(validate(sc.cfg)) << sc.label;
    const Program p = build_program(sc.cfg, cuda::gemm_workspace_bytes(90));
    for (const Op& op : p.ops) {
      kinds.insert(op.kind);
      frozen_norm |= (op.kind == OpKind::rmsnorm_bwd || op.kind == OpKind::layernorm_bwd) &&
                     op.outputs.size() <= 2 && p.tensor(op.outputs.back()).role != Role::grad;
    }
  }
  for (OpKind k : {OpKind::dequantize, OpKind::linear_dgrad, OpKind::lora_fwd, OpKind::lora_bwd,
                   OpKind::adamw8bit_step})
    EXPECT_TRUE(kinds.count(k)) << "no selftest program uses " << to_string(k);
  EXPECT_TRUE(frozen_norm);
}

// The selftest's fine-tuning programs (int8, fp4 and nf4 bases, LoRA dropout, 8-bit state) run
// on the cpu executor, the selftest's reference, with a finite loss: no GPU needed.
TEST(FinetuneSelftest, FinetuningConfigsRunOnTheCpuExecutor) {
  for (const SelftestConfig& sc : selftest_configs()) {
    if (sc.cfg.finetune == Finetune::full) continue;
    SCOPED_TRACE(sc.label);
    const Program program = build_program(sc.cfg, 4096);
    auto cpu = make_cpu_executor(3);
    HostRunner run(program, *cpu);
    run.step();
    EXPECT_TRUE(std::isfinite(run.loss()));
    run.step();
    EXPECT_TRUE(std::isfinite(run.loss()));
  }
}

struct StepCase {
  const char* label;
  Finetune finetune;
  Optimizer optimizer;
  Precision precision;
};

// One whole step on both executors, each from its own initialisation; before every op the GPU's
// inputs are replaced by the CPU's (so errors do not compound), and after it every output (and,
// for the optimizer steps, the updated weight and state) is compared.
TEST(FinetuneCuda, LoraAndQloraStepsMatchTheCpuExecutor) {
  VB_REQUIRE_GPU();
  for (const StepCase c :
       {StepCase{"lora fp32 adamw", Finetune::lora, Optimizer::adamw, Precision::fp32},
        // PEFT's fp32 adapters over the bf16 base (hf): the LoRA ops' y of another dtype.
        StepCase{"lora bf16 adamw", Finetune::lora, Optimizer::adamw, Precision::bf16},
        StepCase{"qlora bf16 adamw-8bit", Finetune::qlora, Optimizer::adamw_8bit, Precision::bf16},
        StepCase{"qlora fp32 paged-adamw-8bit", Finetune::qlora, Optimizer::paged_adamw_8bit,
                 Precision::fp32}}) {
    SCOPED_TRACE(c.label);
    const Program program = build_program(tiny_finetune(c.finetune, c.optimizer, c.precision),
                                          cuda::gemm_workspace_bytes(90));
    auto cpu = make_cpu_executor(5);
    auto gpu = make_cuda_executor(5, FlashImpl::kernels);
    const std::size_t n = program.tensors.size();
    std::vector<std::vector<std::uint8_t>> host(n), got(n);
    std::vector<cuda::DeviceBuffer> device(n);
    std::vector<void*> host_ptr(n), device_ptr(n);
    const Liveness liveness = compute_liveness(program);
    std::vector<bool> persistent(n, false);
    for (int id : liveness.persistent) persistent[static_cast<std::size_t>(id)] = true;
    for (std::size_t id = 0; id < n; ++id) {
      const auto bytes = static_cast<std::size_t>(program.tensors[id].bytes);
      host[id].assign(bytes, 0);
      device[id] = cuda::DeviceBuffer(bytes);
      host_ptr[id] = host[id].data();
      device_ptr[id] = device[id].get();
      if (!persistent[id]) continue;
      cpu->initialize(program, static_cast<int>(id), host_ptr[id]);
      gpu->initialize(program, static_cast<int>(id), device_ptr[id]);
    }
    gpu->synchronize();
    // Both devices start from the same bytes (quantised parts, code tables, zero B, 8-bit state).
    for (int id : liveness.persistent) {
      const auto u = static_cast<std::size_t>(id);
      got[u].resize(host[u].size());
      ASSERT_EQ(cudaMemcpy(got[u].data(), device_ptr[u], got[u].size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_EQ(got[u], host[u]) << program.tensors[u].name;
    }
    const double rtol = c.precision == Precision::bf16 ? 5e-2 : 1e-3;
    const double atol = c.precision == Precision::bf16 ? 1e-2 : 1e-5;
    for (std::size_t i = 0; i < program.ops.size(); ++i) {
      const Op& op = program.ops[i];
      for (const auto* ids : {&op.inputs, &op.outputs})
        for (int id : *ids) {
          const auto u = static_cast<std::size_t>(id);
          ASSERT_EQ(
              cudaMemcpy(device_ptr[u], host[u].data(), host[u].size(), cudaMemcpyHostToDevice),
              cudaSuccess);
        }
      gpu->execute(program, i, device_ptr);
      gpu->synchronize();
      cpu->execute(program, i, host_ptr);
      const bool in_place = signature(op.kind).attrs.optimizer;
      for (int id : in_place ? op.inputs : op.outputs) {
        const Tensor& t = program.tensor(id);
        if (t.role == Role::workspace || (in_place && t.role == Role::grad)) continue;
        const auto u = static_cast<std::size_t>(id);
        got[u].resize(host[u].size());
        ASSERT_EQ(cudaMemcpy(got[u].data(), device_ptr[u], got[u].size(), cudaMemcpyDeviceToHost),
                  cudaSuccess);
        const bool exact = t.dtype == DType::u8 || op.kind == OpKind::dequantize;
        double worst = 0.0;
        for (std::int64_t e = 0; e < t.elements(); ++e) {
          const double g = kmath::load(got[u].data(), t.dtype, e);
          const double w = kmath::load(host[u].data(), t.dtype, e);
          const double err = std::fabs(g - w);
          worst =
              std::max(worst, exact ? (err == 0 ? 0.0 : 1e30) : err / (atol + rtol * std::fabs(w)));
        }
        EXPECT_LE(worst, 1.0) << op.name << " (" << to_string(op.kind) << "): " << t.name;
      }
    }
  }
}

}  // namespace
}  // namespace vrambench
