// Selftest of the CUDA kernels: small gpt and llama programs run op by op on the GPU and on the CPU
// reference. Before each op both devices get the same inputs (the CPU's values), so each row
// measures one kernel's error, not an accumulation along the step.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "common/math.h"
#include "config/gpu_profiles.h"
#include "config/run_config.h"
#include "cuda/attention_cudnn.h"
#include "cuda/check.h"
#include "cuda/gemm.h"
#include "cuda/owners.h"
#include "device/cpu_executor.h"
#include "device/cuda_device.h"
#include "model/families.h"
#include "program/program.h"

namespace vrambench {
namespace {

RunConfig small(Arch arch, Precision precision, Attention attention, Optimizer optimizer,
                double dropout) {
  RunConfig c;
  c.model.name = arch == Arch::gpt ? "tiny-gpt" : "tiny-llama";
  c.model.arch = arch;
  c.model.hidden = 64;
  c.model.heads = 4;
  c.model.kv_heads = arch == Arch::llama ? 2 : 4;
  c.model.layers = 2;
  c.model.ffn = arch == Arch::llama ? 96 : 256;
  c.model.vocab = 101;
  c.model.max_positions = 32;
  c.model.tied_embeddings = arch == Arch::gpt;
  c.seq = 16;
  c.batch = 2;
  c.dtype = precision;
  c.attention = attention;
  c.recompute = Recompute::none;
  c.optimizer = optimizer;
  c.dropout = dropout;
  c.scope = Scope::model;
  c.device = parse_device("cuda");
  // lean: every op in one dtype; the "hf" configs below run PyTorch's step, whose dtypes mix.
  c.framework = Framework::lean;
  return c;
}

// A fine-tuning recipe over small(): LoRA rank `rank` on every linear, the base frozen (and stored
// as `quant`).
RunConfig finetune(RunConfig c, Finetune how, QuantKind quant, Toggle double_quant,
                   std::int64_t rank, double lora_dropout) {
  c.finetune = how;
  c.quant = quant;
  c.double_quant = double_quant;
  c.lora_rank = rank;
  c.lora_alpha = 2.0 * static_cast<double>(rank);
  c.lora_dropout = lora_dropout;
  return c;
}

// The step PyTorch and transformers run (with PEFT and bitsandbytes when fine-tuning).
RunConfig hf(RunConfig c) {
  c.framework = Framework::hf;
  return c;
}

// A mixture of experts' step with every token of a layer on the same top-k experts (the other
// experts' GEMMs run over no rows).
RunConfig moe_skewed(RunConfig c) {
  c.routing = Routing::skewed;
  return c;
}

// With the load-balancing loss (output_router_logits, coefficient 0.02 as Mixtral's).
RunConfig aux_loss(RunConfig c) {
  c.model.router_aux_loss = true;
  c.model.router_aux_coef = 0.02;
  return c;
}

// LoRA on the attention and on the experts' two 3-D weights (PEFT's target_parameters).
RunConfig experts_lora(RunConfig c) {
  c.lora_targets = parse_lora_targets("q_proj,v_proj,experts.gate_up_proj,experts.down_proj");
  return c;
}

// TRL's preference trainer `trainer` against `reference`: the fused LM head's tiles and the loss.
RunConfig preference(RunConfig c, Trainer trainer, Reference reference) {
  c.trainer = trainer;
  c.reference = reference;
  return c;
}

// One rank's step of `ranks` under `strategy`: the collectives' copies and casts.
RunConfig rank_of(RunConfig c, Strategy strategy, std::int64_t ranks) {
  c.strategy = strategy;
  c.gpus = ranks;
  return c;
}

// A test preset's model (the other families: q/k norms, Gemma's norms, GeGLU, scaled embeddings,
// soft-capping, Phi-3's fused linears) in small()'s step.
RunConfig family(std::string_view preset, Precision precision, Attention attention) {
  RunConfig c = small(Arch::llama, precision, attention, Optimizer::adamw, 0.0);
  c.model = find_preset(preset).model;
  return c;
}

}  // namespace

std::vector<SelftestConfig> selftest_configs() {
  return {
      {"gpt fp32 eager dropout",
       small(Arch::gpt, Precision::fp32, Attention::eager, Optimizer::adamw, 0.1)},
      {"gpt tf32 flash", small(Arch::gpt, Precision::tf32, Attention::flash, Optimizer::sgd, 0.0)},
      {"gpt fp16 eager",
       small(Arch::gpt, Precision::fp16, Attention::eager, Optimizer::adamw, 0.0)},
      {"gpt bf16 flash dropout",
       small(Arch::gpt, Precision::bf16, Attention::flash, Optimizer::adamw, 0.1)},
      {"llama bf16 eager",
       small(Arch::llama, Precision::bf16, Attention::eager, Optimizer::sgd, 0.0)},
      {"llama fp16 flash",
       small(Arch::llama, Precision::fp16, Attention::flash, Optimizer::adamw, 0.0)},
      // hf: transformers' Llama step as PyTorch runs it, RMSNorm's input upcast to fp32.
      {"llama bf16 flash hf",
       hf(small(Arch::llama, Precision::bf16, Attention::flash, Optimizer::adamw, 0.0))},
      {"llama bf16 flash cudnn",
       small(Arch::llama, Precision::bf16, Attention::flash, Optimizer::adamw, 0.0),
       FlashImpl::cudnn},
      {"gpt fp16 flash cudnn",
       small(Arch::gpt, Precision::fp16, Attention::flash, Optimizer::sgd, 0.0), FlashImpl::cudnn},
      // Fine-tuning: dequantize, linear_dgrad, lora_fwd / lora_bwd, frozen norms, and 8-bit
      // AdamW (rank 64 gives adapters of 4096 elements and more: 8-bit state).
      {"gpt fp32 eager lora dropout",
       finetune(small(Arch::gpt, Precision::fp32, Attention::eager, Optimizer::adamw, 0.0),
                Finetune::lora, QuantKind::none, Toggle::off, 8, 0.1)},
      {"llama bf16 flash qlora nf4 adamw-8bit",
       finetune(small(Arch::llama, Precision::bf16, Attention::flash, Optimizer::adamw_8bit, 0.0),
                Finetune::qlora, QuantKind::nf4, Toggle::on, 64, 0.0)},
      {"llama fp16 flash qlora fp4 paged-adamw-8bit",
       finetune(
           small(Arch::llama, Precision::fp16, Attention::flash, Optimizer::paged_adamw_8bit, 0.0),
           Finetune::qlora, QuantKind::fp4, Toggle::off, 64, 0.0)},
      {"gpt bf16 eager lora int8",
       finetune(small(Arch::gpt, Precision::bf16, Attention::eager, Optimizer::adamw, 0.0),
                Finetune::lora, QuantKind::int8, Toggle::off, 8, 0.0)},
      {"gemma2 bf16 eager", family("tiny-gemma2", Precision::bf16, Attention::eager)},
      {"qwen3 fp16 flash", family("tiny-qwen3", Precision::fp16, Attention::flash)},
      {"gemma3 bf16 flash", family("tiny-gemma3", Precision::bf16, Attention::flash)},
      // Phi-3: the swiglu kernels on gate|up packed, one adapter and one 4-bit weight per fused
      // linear.
      {"phi3 bf16 flash qlora nf4", finetune(family("tiny-phi3", Precision::bf16, Attention::flash),
                                             Finetune::qlora, QuantKind::nf4, Toggle::on, 8, 0.0)},
      // The hf step's mixed dtypes: PEFT's fp32 adapters over a bf16 base (the LoRA ops' y and
      // dy of another dtype, fp32 GEMMs); QLoRA's fp32 stream under autocast (16-bit branches
      // added into it, RoPE from fp32 into bf16); autocast's fp32 residual in gpt, and its fp32
      // mask promoting eager attention's scores; Llama's fp32 softmax of bf16 scores; autocast's
      // fp32 q/k norm weights beside 16-bit heads.
      {"llama bf16 flash lora hf",
       hf(finetune(small(Arch::llama, Precision::bf16, Attention::flash, Optimizer::adamw, 0.0),
                   Finetune::lora, QuantKind::none, Toggle::off, 8, 0.0))},
      {"llama bf16 flash qlora nf4 paged-adamw-8bit hf",
       hf(finetune(
           small(Arch::llama, Precision::bf16, Attention::flash, Optimizer::paged_adamw_8bit, 0.0),
           Finetune::qlora, QuantKind::nf4, Toggle::on, 64, 0.0))},
      {"gpt amp-bf16 eager hf",
       hf(small(Arch::gpt, Precision::amp_bf16, Attention::eager, Optimizer::adamw, 0.0))},
      {"llama bf16 eager hf",
       hf(small(Arch::llama, Precision::bf16, Attention::eager, Optimizer::adamw, 0.0))},
      {"qwen3 amp-bf16 eager hf", hf(family("tiny-qwen3", Precision::amp_bf16, Attention::eager))},
      // One rank's program: FSDP2's gathers through u8 flat buffers and per-parameter copies,
      // ZeRO's fp32 gradient partition (a cast on the way) and its 4-bit base gathered as bytes.
      {"llama bf16 flash fsdp 4 ranks hf",
       rank_of(hf(small(Arch::llama, Precision::bf16, Attention::flash, Optimizer::adamw, 0.0)),
               Strategy::fsdp, 4)},
      {"llama bf16 flash qlora nf4 zero3 4 ranks hf",
       rank_of(
           hf(finetune(small(Arch::llama, Precision::bf16, Attention::flash, Optimizer::adamw, 0.0),
                       Finetune::qlora, QuantKind::nf4, Toggle::on, 8, 0.0)),
           Strategy::zero3, 4)},
      // Mixtures of experts: the router, the dispatch, the experts' grouped GEMMs and the combine
      // (Mixtral's fp32 routing weights beside bf16 rows) and the load-balancing loss, under
      // both routings; OLMoE's
      // full-width q/k norms with Qwen3-MoE-style bf16 weights; PEFT's LoRA folded into the
      // experts' weights; QLoRA's fp32 experts under autocast.
      {"mixtral bf16 flash aux-loss hf",
       hf(aux_loss(family("tiny-mixtral", Precision::bf16, Attention::flash)))},
      {"mixtral bf16 flash skewed",
       moe_skewed(family("tiny-mixtral", Precision::bf16, Attention::flash))},
      {"olmoe fp32 eager hf", hf(family("tiny-olmoe", Precision::fp32, Attention::eager))},
      {"qwen3-moe bf16 flash lora experts hf",
       hf(experts_lora(finetune(family("tiny-qwen3-moe", Precision::bf16, Attention::flash),
                                Finetune::lora, QuantKind::none, Toggle::off, 8, 0.0)))},
      {"mixtral bf16 flash qlora nf4 hf",
       hf(finetune(family("tiny-mixtral", Precision::bf16, Attention::flash), Finetune::qlora,
                   QuantKind::nf4, Toggle::on, 8, 0.0))},
      // Preference trainers: DPO's pairs through a trainable tied head and a frozen copy (the
      // tiles in the head's dtype), KTO's KL and reference forwards with the adapters off under
      // QLoRA's autocast (the tiles' rows cast to bf16), DPO under autocast with a trainable head
      // and precomputed reference log-probabilities (the head's gradient through the cast rows).
      {"gpt bf16 flash dpo copy hf",
       preference(hf(small(Arch::gpt, Precision::bf16, Attention::flash, Optimizer::adamw, 0.0)),
                  Trainer::dpo, Reference::copy)},
      {"llama bf16 flash qlora nf4 kto adapters hf",
       preference(
           hf(finetune(small(Arch::llama, Precision::bf16, Attention::flash, Optimizer::adamw, 0.0),
                       Finetune::qlora, QuantKind::nf4, Toggle::on, 8, 0.0)),
           Trainer::kto, Reference::adapters)},
      {"llama amp-bf16 eager dpo precomputed hf",
       preference(
           hf(small(Arch::llama, Precision::amp_bf16, Attention::eager, Optimizer::adamw, 0.0)),
           Trainer::dpo, Reference::precomputed)},
  };
}

namespace {

bool is_gemm(OpKind k) {
  return k == OpKind::linear_fwd || k == OpKind::linear_bwd || k == OpKind::attn_scores ||
         k == OpKind::attn_values || k == OpKind::attn_values_bwd || k == OpKind::attn_scores_bwd ||
         k == OpKind::linear_dgrad || k == OpKind::lora_fwd || k == OpKind::lora_bwd ||
         k == OpKind::grouped_linear_fwd || k == OpKind::grouped_linear_bwd ||
         k == OpKind::expert_lora_fwd || k == OpKind::expert_lora_bwd || k == OpKind::logprob_fwd ||
         k == OpKind::logprob_bwd;
}

// Tolerance for one op's outputs, scaled to the storage type the step runs in.
struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance_for(const RunConfig& cfg, OpKind kind) {
  Tolerance t{1e-4, 1e-5};
  switch (activation_dtype(cfg.dtype)) {
    case DType::f16:
      t = {1e-2, 2e-3};
      break;
    case DType::bf16:
      t = {5e-2, 1e-2};
      break;
    default:
      break;
  }
  if (cfg.dtype == Precision::tf32 && is_gemm(kind)) t = {1e-2, 2e-3};  // 10-bit mantissa inputs
  // Sums of many 16-bit values rounded at every step on the GPU (embedding scatter).
  if (kind == OpKind::embedding_bwd && activation_dtype(cfg.dtype) != DType::f32) {
    t.rtol *= 4;
    t.atol *= 4;
  }
  return t;
}

struct Compare {
  double max_abs = 0, worst = 0;
};
void compare(const Tensor& t, const std::uint8_t* gpu, const std::uint8_t* cpu, Tolerance tol,
             Compare& c) {
  const std::int64_t n = t.elements();
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = kmath::load(gpu, t.dtype, i), w = kmath::load(cpu, t.dtype, i);
    if (std::isnan(g) != std::isnan(w) || std::isinf(g) != std::isinf(w)) {
      c.worst = std::max(c.worst, 1e30);
      continue;
    }
    if (std::isnan(w) || std::isinf(w)) continue;
    const double err = std::fabs(g - w);
    const bool exact = t.dtype == DType::u8 || t.dtype == DType::i32 || t.dtype == DType::i64;
    c.max_abs = std::max(c.max_abs, err);
    c.worst = std::max(
        c.worst, exact ? (err == 0 ? 0.0 : 1e30) : err / (tol.atol + tol.rtol * std::fabs(w)));
  }
}

}  // namespace

std::vector<SelftestRow> run_cuda_selftest() {
  std::string why;
  if (!cuda_available(&why)) throw NeedsGpu(why);
  const CudaDeviceInfo info = query_cuda_device(0);
  const Bytes workspace = cuda::gemm_workspace_bytes(info.compute_capability());

  std::vector<SelftestRow> rows;
  for (const SelftestConfig& sc : selftest_configs()) {
    const Program program = build_program(sc.cfg, workspace);
    const std::uint64_t seed = 7;
    auto cpu = make_cpu_executor(seed);
    auto gpu = make_cuda_executor(seed, sc.flash);

    const std::size_t n = program.tensors.size();
    std::vector<std::vector<std::uint8_t>> host(n);
    std::vector<cuda::DeviceBuffer> device(n);
    std::vector<void*> host_ptr(n), device_ptr(n);
    for (std::size_t id = 0; id < n; ++id) {
      const Tensor& t = program.tensors[id];
      host[id].assign(static_cast<std::size_t>(t.bytes), 0);
      device[id] = cuda::DeviceBuffer(static_cast<std::size_t>(t.bytes));
      host_ptr[id] = host[id].data();
      device_ptr[id] = device[id].get();
      const bool persistent = t.role == Role::weight || t.role == Role::master_weight ||
                              t.role == Role::optimizer_state ||
                              t.role == Role::paged_optimizer_state || t.role == Role::input;
      if (persistent) cpu->initialize(program, static_cast<int>(id), host[id].data());
    }
    auto upload = [&](int id) {
      const auto u = static_cast<std::size_t>(id);
      if (!host[u].empty())
        VB_CUDA_CHECK(
            cudaMemcpy(device_ptr[u], host[u].data(), host[u].size(), cudaMemcpyHostToDevice));
    };

    // With FlashImpl::cudnn the flash rows measure cuDNN or the config fails: its plans are built
    // here (a handle of its own), so a shape cuDNN cannot take stops the selftest with cuDNN's
    // message before any op runs, and the rows say what cuDNN's workspace was.
    std::string flash_note;
    if (sc.flash == FlashImpl::cudnn) {
      const RunConfig& c = sc.cfg;
      const cuda::SdpaShape shape{c.batch, c.seq, c.model.heads, c.model.kv_heads,
                                  c.model.head_dim()};
      const DType dt = activation_dtype(c.dtype);
      const auto p = static_cast<float>(c.dropout);
      try {
        cuda::CudnnSdpa probe(4);
        const Bytes fwd_ws = probe.workspace_bytes({shape, dt, p, cuda::SdpaPass::forward});
        const Bytes bwd_ws = probe.workspace_bytes({shape, dt, p, cuda::SdpaPass::backward});
        flash_note =
            fmt::format("cuDNN sdpa (workspace {} B forward, {} B backward)", fwd_ws, bwd_ws);
      } catch (const std::exception& e) {
        throw InternalError(fmt::format("selftest '{}': cuDNN cannot run its flash attention: {}",
                                        sc.label, e.what()));
      }
    }

    std::map<OpKind, SelftestRow> by_kind;
    std::vector<std::uint8_t> downloaded;
    for (std::size_t i = 0; i < program.ops.size(); ++i) {
      const Op& op = program.ops[i];
      for (int id : op.inputs) upload(id);
      for (int id : op.outputs) upload(id);
      VB_CUDA_CHECK(cudaDeviceSynchronize());
      gpu->execute(program, i, device_ptr);
      gpu->synchronize();
      cpu->execute(program, i, host_ptr);

      SelftestRow& row = by_kind[op.kind];
      row.config = sc.label;
      row.op = std::string(to_string(op.kind));
      row.dtype = activation_dtype(sc.cfg.dtype);
      ++row.ops;
      const Tolerance tol = tolerance_for(sc.cfg, op.kind);
      // In-place ops (optimizer steps) change their inputs; others their outputs.
      const bool in_place = op.kind == OpKind::adamw_step || op.kind == OpKind::sgd_step ||
                            op.kind == OpKind::adamw8bit_step;
      Compare c{row.max_abs_error, row.worst_ratio};
      for (int id : in_place ? op.inputs : op.outputs) {
        const Tensor& t = program.tensor(id);
        if (t.role == Role::workspace || (in_place && t.role == Role::grad)) continue;
        downloaded.resize(static_cast<std::size_t>(t.bytes));
        VB_CUDA_CHECK(cudaMemcpy(downloaded.data(), device_ptr[static_cast<std::size_t>(id)],
                                 downloaded.size(), cudaMemcpyDeviceToHost));
        compare(t, downloaded.data(), host[static_cast<std::size_t>(id)].data(), tol, c);
      }
      row.max_abs_error = c.max_abs;
      row.worst_ratio = c.worst;
      row.passed = c.worst <= 1.0;
      row.note = fmt::format("rtol {:g}, atol {:g}", tol.rtol, tol.atol);
      if ((op.kind == OpKind::flash_fwd || op.kind == OpKind::flash_bwd) && !flash_note.empty())
        row.note += "; " + flash_note;
    }
    for (auto& [kind, row] : by_kind) rows.push_back(row);
  }
  return rows;
}

}  // namespace vrambench
