// The hf step program against PyTorch's own count: every row of tests/data/torch_reference.json in
// scope (full training; attention that ran a fused kernel) and every row of
// tests/data/torch_finetune_reference.json (PEFT LoRA, bitsandbytes QLoRA, 8-bit AdamW),
// torch_moe_reference.json and trl_reference.json (TRL's DPO and KTO steps) is rebuilt
// at its configuration and batch, replayed on the sim device, and its tensor peak compared with
// the measured peak, and per-sample bytes (peak at batch 2 - peak at batch 1) with the measured
// ones.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "config/run_config.h"
#include "device/sources.h"
#include "model/families.h"
#include "model/model_file.h"
#include "program/program.h"
#include "measure/trial.h"
#include "reference_models.h"

namespace vrambench {
namespace {

// The bound for every row; the fine-tuning rows are held to a tenth of it (all are within
// 0.01% today), so that a change that moves them shows.
constexpr double kTolerance = 0.03;
constexpr double kFinetuneTolerance = 0.003;

// Rows whose error is known to exceed kTolerance, with the error measured when they were listed
// (a row may not get worse than that; fix the model and delete the line). Keys are row keys
// without the batch ("per-sample") or with " peak B=<batch>". None at present, in either file.
const std::map<std::string, double> kKnownErrors = {};

struct Row {
  std::string key;  // the row's fields but the batch
  std::int64_t batch = 0;
  RunConfig cfg;
  HfOptions options;
  Bytes measured = 0;
  std::string phase;  // where the measured peak happened: forward, backward or optimizer
  Bytes forward = 0;  // the MoE rows: bytes live once the loss is computed, before backward
};

std::vector<Row> rows_in_scope() {
  const nlohmann::json doc = read_reference("torch_reference.json");
  std::vector<Row> rows;
  for (const nlohmann::json& r : doc.at("rows")) {
    // LoRA is a later profile; sdpa with dropout fell back to the math path on the CPU, where a
    // GPU runs a fused kernel with dropout inside (tests/data/README.md).
    if (r.at("adapter") != "none" || r.at("attention_kernel") == "math") continue;
    Row row;
    RunConfig& cfg = row.cfg;
    cfg.framework = Framework::hf;
    cfg.model = reference_model(r.at("model"));
    const std::string dtype = r.at("dtype");
    cfg.dtype = dtype == "fp32"   ? Precision::fp32
                : dtype == "bf16" ? Precision::bf16
                                  : Precision::amp_bf16;
    cfg.attention = r.at("attention") == "eager" ? Attention::eager : Attention::flash;
    cfg.recompute = r.at("checkpointing") == "on" ? Recompute::full : Recompute::none;
    cfg.dropout = r.at("dropout");
    cfg.seq = r.at("seq");
    cfg.optimizer = r.at("optimizer") == "adamw" ? Optimizer::adamw : Optimizer::none;
    row.batch = r.at("batch");
    cfg.batch = row.batch;
    row.options.device = HfOptions::Device::cpu;
    row.cfg.loop = r.at("loop") == "outputs" ? Loop::native : Loop::trainer;
    row.measured = r.at("peak_bytes");
    row.phase = r.at("phase");
    row.key =
        fmt::format("{} {} {} ckpt={} p={} S={} {} {}", std::string(r.at("model")), dtype,
                    std::string(r.at("attention")), std::string(r.at("checkpointing")), cfg.dropout,
                    cfg.seq, std::string(r.at("optimizer")), std::string(r.at("loop")));
    validate(cfg);
    rows.push_back(std::move(row));
  }
  return rows;
}

// The fine-tuning rows: PEFT's LoRA over a bf16 model or an fp32 one under autocast, and QLoRA
// (NF4 with double quantisation through prepare_model_for_kbit_training, under autocast as
// Trainer runs it with bf16=True), sdpa attention (eager in two rows), no model dropout.
std::vector<Row> finetune_rows() {
  const nlohmann::json doc = read_reference("torch_finetune_reference.json");
  std::vector<Row> rows;
  for (const nlohmann::json& r : doc.at("rows")) {
    Row row;
    RunConfig& cfg = row.cfg;
    cfg.framework = Framework::hf;
    cfg.model = reference_model(r.at("model"));
    const std::string base = r.at("base");
    cfg.finetune = base == "nf4" ? Finetune::qlora : Finetune::lora;
    cfg.dtype = base == "autocast-bf16" ? Precision::amp_bf16 : Precision::bf16;
    if (base == "nf4") {
      cfg.quant = QuantKind::nf4;
      cfg.double_quant = Toggle::on;
    }
    cfg.lora_rank = r.at("lora_r");
    cfg.lora_alpha = r.at("lora_alpha");
    cfg.lora_dropout = r.at("lora_dropout");
    // PEFT's default targets for the model type (target_modules=None), or every linear.
    const std::string targets = r.at("targets");
    cfg.lora_targets = parse_lora_targets(targets == "all-linear" ? "all-linear" : "peft-default");
    cfg.attention = r.at("attention") == "eager" ? Attention::eager : Attention::flash;
    cfg.dropout = 0.0;
    cfg.recompute = r.at("checkpointing") == "off" ? Recompute::none : Recompute::full;
    cfg.optimizer = r.at("optimizer") == "adamw8bit" ? Optimizer::adamw_8bit : Optimizer::adamw;
    cfg.seq = r.at("seq");
    row.batch = r.at("batch");
    cfg.batch = row.batch;
    row.options.device = HfOptions::Device::cpu;
    row.measured = r.at("peak_bytes");
    row.phase = r.at("phase");
    row.key =
        fmt::format("{} {} {} r={} p={} {} ckpt={} {} S={}", std::string(r.at("model")), base,
                    std::string(r.at("attention")), cfg.lora_rank, cfg.lora_dropout, targets,
                    std::string(r.at("checkpointing")), std::string(r.at("optimizer")), cfg.seq);
    validate(cfg);
    rows.push_back(std::move(row));
  }
  return rows;
}

// What the rows measured on real CPU tensors as a Trainer step (the MoE and TRL files) share: sdpa,
// no dropout, torch AdamW, checkpointing off or non-reentrant, the row's seq and batch, and its
// peak, phase and bytes live once the loss is formed.
void real_cpu_step(const nlohmann::json& r, Row& row) {
  RunConfig& cfg = row.cfg;
  cfg.attention = Attention::flash;
  cfg.dropout = 0.0;
  cfg.recompute = r.at("checkpointing") == "off" ? Recompute::none : Recompute::full;
  cfg.optimizer = Optimizer::adamw;
  cfg.seq = r.at("seq");
  row.batch = r.at("batch");
  cfg.batch = row.batch;
  row.options.device = HfOptions::Device::cpu;
  row.measured = r.at("peak_bytes");
  row.forward = r.at("forward_bytes");
  row.phase = r.at("phase");
}

// The mixture-of-experts rows (tests/data/torch_moe_reference.json): small Mixtral, Qwen3-MoE
// (one with a dense first layer) and OLMoE configs, full training in bf16, PEFT LoRA on the
// attention, on the attention and the experts (target_parameters), QLoRA, each with and without
// checkpointing, torch AdamW, sdpa; some with the load-balancing loss (aux=on).
std::vector<Row> moe_rows() {
  const nlohmann::json doc = read_reference("torch_moe_reference.json");
  std::vector<Row> rows;
  for (const nlohmann::json& r : doc.at("rows")) {
    Row row;
    RunConfig& cfg = row.cfg;
    const std::string model = r.at("model");
    cfg.framework = Framework::hf;
    cfg.model = model_from_config_text(doc.at("models").at(model).dump(), model, "");
    // The load-balancing loss (output_router_logits) with the row's coefficient.
    cfg.model.router_aux_loss = r.at("aux") == "on";
    if (cfg.model.router_aux_loss) cfg.model.router_aux_coef = r.at("aux_loss_coef");
    const std::string recipe = r.at("recipe");
    cfg.finetune = recipe == "full"    ? Finetune::full
                   : recipe == "qlora" ? Finetune::qlora
                                       : Finetune::lora;
    cfg.dtype = Precision::bf16;
    if (recipe != "full") {
      const nlohmann::json& lora = r.at("lora");
      cfg.lora_rank = lora.at("r");
      cfg.lora_alpha = lora.at("lora_alpha");
      const std::string attention = "q_proj,k_proj,v_proj,o_proj";
      cfg.lora_targets = parse_lora_targets(
          recipe == "lora-experts" ? attention + ",experts.gate_up_proj,experts.down_proj"
                                   : attention);
    }
    if (recipe == "qlora") {
      cfg.quant = QuantKind::nf4;
      cfg.double_quant = Toggle::on;
    }
    real_cpu_step(r, row);
    row.key = fmt::format("{} {} ckpt={} aux={} S={}", model, recipe,
                          std::string(r.at("checkpointing")), std::string(r.at("aux")), cfg.seq);
    validate(cfg);
    rows.push_back(std::move(row));
  }
  return rows;
}

// The preference rows (tests/data/trl_reference.json): TRL's DPOTrainer and KTOTrainer over small
// Llama and GPT-2 models in bf16, full fine-tuning and PEFT LoRA (its default targets), each
// reference (a frozen copy, the adapters disabled, precomputed log-probabilities), with and
// without checkpointing, torch AdamW, sdpa.
std::vector<Row> preference_rows() {
  const nlohmann::json doc = read_reference("trl_reference.json");
  std::vector<Row> rows;
  for (const nlohmann::json& r : doc.at("rows")) {
    Row row;
    RunConfig& cfg = row.cfg;
    cfg.framework = Framework::hf;
    cfg.model = reference_model(r.at("model"));
    const std::string trainer = r.at("trainer"), finetune = r.at("finetune"),
                      reference = r.at("reference");
    cfg.trainer = trainer == "dpo" ? Trainer::dpo : Trainer::kto;
    cfg.reference = reference == "copy"       ? Reference::copy
                    : reference == "adapters" ? Reference::adapters
                                              : Reference::precomputed;
    cfg.finetune = finetune == "lora" ? Finetune::lora : Finetune::full;
    cfg.dtype = Precision::bf16;
    if (cfg.finetune == Finetune::lora) {
      cfg.lora_rank = 8;
      cfg.lora_alpha = 16;
      cfg.lora_targets = parse_lora_targets("peft-default");
    }
    real_cpu_step(r, row);
    row.key = fmt::format("{} {} {} ref={} ckpt={} S={}", std::string(r.at("model")), trainer,
                          finetune, reference, std::string(r.at("checkpointing")), cfg.seq);
    validate(cfg);
    rows.push_back(std::move(row));
  }
  return rows;
}

Bytes sim_tensor_peak(const Row& row) {
  const Program program = build_hf_program(row.cfg, 0, row.options);
  auto source = make_virtual_source(Bytes{1} << 50);
  auto allocator = make_direct_allocator(*source);
  const TrialResult r = run_step(program, compute_liveness(program), *allocator, nullptr, 0);
  return r.tensor_peak;
}

// The program's tensor bytes live after its forward: once the loss op has run, before the first
// backward op (the gradients, which a step's zero_grad(set_to_none=True) drops before the forward,
// not yet made).
Bytes sim_forward_bytes(const Row& row) {
  const Program program = build_hf_program(row.cfg, 0, row.options);
  const Liveness live = compute_liveness(program);
  int loss_op = -1;
  for (std::size_t i = 0; i < program.ops.size(); ++i)
    for (int id : program.ops[i].outputs)
      if (id == program.loss_tensor) loss_op = static_cast<int>(i);
  Bytes bytes = 0;
  for (const Tensor& t : program.tensors) {
    const auto id = static_cast<std::size_t>(t.id);
    if (t.role == Role::grad || t.role == Role::workspace) continue;
    if (live.alloc_at[id] <= loss_op && live.free_after[id] > loss_op) bytes += t.bytes;
  }
  return bytes;
}

struct Check {
  std::string what;  // "peak B=2" or "per-sample"
  std::string key;
  double measured = 0, simulated = 0;
  double error() const { return (simulated - measured) / measured; }
};

// Every row's peak, and every configuration's per-sample bytes, within `tolerance` (or its known
// error); the worst listed on failure (all with VRAMBENCH_HF_REFERENCE_ALL set).
void expect_within_tolerance(const std::vector<Row>& rows, double tolerance) {
  struct Peaks {
    Bytes measured = 0, sim = 0;
    std::string phase;
  };
  std::map<std::string, std::map<std::int64_t, Peaks>> by_key;
  std::vector<Check> checks;
  for (const Row& row : rows) {
    const Bytes sim = sim_tensor_peak(row);
    by_key[row.key][row.batch] = {row.measured, sim, row.phase};
    checks.push_back({fmt::format("peak B={}", row.batch), row.key,
                      static_cast<double>(row.measured), static_cast<double>(sim)});
    if (row.forward > 0)
      checks.push_back({fmt::format("forward B={}", row.batch), row.key,
                        static_cast<double>(row.forward),
                        static_cast<double>(sim_forward_bytes(row))});
  }
  for (const auto& [key, batches] : by_key) {
    if (!batches.contains(1) || !batches.contains(2)) continue;
    const Peaks& one = batches.at(1);
    const Peaks& two = batches.at(2);
    // Per-sample bytes are a slope only where both peaks are in the same phase (README: gpt2
    // under autocast and checkpointing at S=512 peaks in backward at batch 1, in forward at 2).
    if (one.phase != two.phase) continue;
    checks.push_back({"per-sample", key, static_cast<double>(two.measured - one.measured),
                      static_cast<double>(two.sim - one.sim)});
  }

  std::vector<const Check*> failed, all;
  int within = 0;
  for (const Check& c : checks) {
    all.push_back(&c);
    const auto known = kKnownErrors.find(c.what == "per-sample" ? c.key : c.key + " " + c.what);
    const double allowed = known == kKnownErrors.end() ? tolerance : known->second + 0.005;
    if (std::abs(c.error()) <= tolerance) ++within;
    if (std::abs(c.error()) > allowed) failed.push_back(&c);
  }
  std::sort(all.begin(), all.end(), [](const Check* a, const Check* b) {
    return std::abs(a->error()) > std::abs(b->error());
  });
  std::string table = fmt::format("{} of {} checks within {:.1f}%; worst:\n", within, checks.size(),
                                  tolerance * 100);
  const bool verbose = std::getenv("VRAMBENCH_HF_REFERENCE_ALL") != nullptr;
  const std::size_t shown = verbose ? all.size() : std::min<std::size_t>(all.size(), 25);
  for (std::size_t i = 0; i < shown; ++i)
    table += fmt::format("  {:+7.2f}%  {:<11} {:<58} measured {:>14.0f} sim {:>14.0f}\n",
                         all[i]->error() * 100, all[i]->what, all[i]->key, all[i]->measured,
                         all[i]->simulated);
  if (verbose) std::cout << table;
  EXPECT_TRUE(failed.empty()) << failed.size() << " checks beyond their tolerance\n" << table;
}

TEST(HfReference, PeaksAndPerSampleBytesWithinTolerance) {
  const std::vector<Row> rows = rows_in_scope();
  ASSERT_GT(rows.size(), 300u);
  expect_within_tolerance(rows, kTolerance);
}

// PEFT LoRA and bitsandbytes QLoRA: all 230 rows measured on real CPU tensors (18 of them Phi-3,
// 2 with eager attention).
TEST(HfReference, FinetunePeaksAndPerSampleBytesWithinTolerance) {
  const std::vector<Row> rows = finetune_rows();
  ASSERT_EQ(rows.size(), 230u);
  expect_within_tolerance(rows, kFinetuneTolerance);
}

// Preference training: all 80 rows of TRL's DPO and KTO steps, each peak, the live bytes when the
// loss is formed and DPO's per-sample bytes (per pair), held to the fine-tuning rows' tenth of the
// bound (all are within 0.15% today).
TEST(HfReference, PreferencePeaksWithinTolerance) {
  const std::vector<Row> rows = preference_rows();
  ASSERT_EQ(rows.size(), 80u);
  expect_within_tolerance(rows, kFinetuneTolerance);
}

// Mixtures of experts: all 74 rows, each peak, live bytes after the forward and per-sample bytes.
TEST(HfReference, MoePeaksAndPerSampleBytesWithinTolerance) {
  const std::vector<Row> rows = moe_rows();
  ASSERT_EQ(rows.size(), 74u);
  expect_within_tolerance(rows, kTolerance);
}

}  // namespace
}  // namespace vrambench
