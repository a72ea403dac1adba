// The step program of the fine-tuning recipes: what a frozen, quantised base with adapters
// allocates, where gradients stop, and paged optimizer state outside the device's peaks.
#include <gtest/gtest.h>

#include <string>

#include "core/quant_layout.h"
#include "model/families.h"
#include "device/device.h"
#include "model/families.h"
#include "program/program.h"
#include "measure/measure.h"

namespace vrambench {
namespace {

RunConfig recipe(const char* preset, Finetune finetune) {
  RunConfig cfg;
  cfg.model = find_preset(preset).model;
  cfg.seq = 64;
  cfg.finetune = finetune;
  validate(cfg);
  return cfg;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

TEST(FinetuneProgram, QloraStoresEveryBlockLinearOfLlama2In4Bits) {
  RunConfig cfg = recipe("llama2-7b", Finetune::qlora);
  cfg.seq = 512;
  const Program p = build_program(cfg, 32 * MiB);
  const ModelConfig& m = cfg.model;
  const std::int64_t H = m.hidden, F = m.ffn;
  // q, k, v, o [H,H]; gate, up [F,H]; down [H,F]: 7 modules per layer, 224 in 32 layers.
  Bytes expected = 0;
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{H, H}, {H, H}, {H, H}, {H, H},
                                                          {F, H}, {F, H}, {H, F}};
  for (const auto& [rows, cols] : shapes)
    expected += quantized_weight_bytes(rows * cols, rows, QuantKind::nf4, true).total;
  expected *= m.layers;
  int codes = 0, adapter_grads = 0, frozen_grads = 0;
  Bytes quantised = 0;
  for (const Tensor& t : p.tensors) {
    if (ends_with(t.name, ".w.weight")) ++codes;
    if (t.role == Role::weight && t.name.find(".w.") != std::string::npos) quantised += t.bytes;
    if (t.role == Role::grad) {
      if (t.name.find(".lora_") != std::string::npos)
        ++adapter_grads;
      else
        ++frozen_grads;
    }
  }
  EXPECT_EQ(codes, 224);
  EXPECT_EQ(quantised, expected);
  EXPECT_EQ(adapter_grads, 2 * 224);  // A and B of every module (all-linear)
  EXPECT_EQ(frozen_grads, 0);
}

TEST(FinetuneProgram, GradientsStopBelowTheFirstAdapter) {
  RunConfig cfg = recipe("tiny-llama", Finetune::lora);
  cfg.lora_targets = parse_lora_targets("down_proj");
  const Program p = build_program(cfg, 4096);
  int flash_bwd_0 = 0, flash_bwd_1 = 0, embedding_bwd = 0;
  for (const Op& op : p.ops) {
    if (op.name == "layer0.attn.flash.bwd") ++flash_bwd_0;
    if (op.name == "layer1.attn.flash.bwd") ++flash_bwd_1;
    if (op.kind == OpKind::embedding_bwd) ++embedding_bwd;
  }
  // Layer 0's attention lies below its only adapter (the MLP's down projection): no backward.
  EXPECT_EQ(flash_bwd_0, 0);
  EXPECT_EQ(flash_bwd_1, 1);
  EXPECT_EQ(embedding_bwd, 0);
  // ... so what its forward made is not saved: no activation of layer 0's attention.
  for (const Tensor& t : p.tensors)
    if (t.name.starts_with("layer0.attn.")) {
      EXPECT_NE(t.role, Role::activation) << t.name;
    }
}

TEST(FinetuneProgram, AFrozenLinearSavesNoInputForItsOwnBackward) {
  RunConfig cfg = recipe("tiny-llama", Finetune::lora);
  cfg.lora_targets = parse_lora_targets("q_proj");
  const Program p = build_program(cfg, 4096);
  for (const Op& op : p.ops)
    if (op.kind == OpKind::linear_dgrad) {
      // dy and the weight (or its dequantised copy), never the input.
      ASSERT_GE(op.inputs.size(), 2u);
      EXPECT_NE(p.tensor(op.inputs[1]).role, Role::activation) << op.name;
    }
}

TEST(FinetuneProgram, PagedStateLeavesTheDevicePeak) {
  RunConfig cfg = recipe("tiny-llama", Finetune::lora);
  cfg.lora_rank = 1024;  // lora_B of gate [176, 1024]: past the 1e5 elements a paged buffer needs
  cfg.optimizer = Optimizer::adamw_8bit;
  DeviceInfo d;
  d.total = 1 * GiB;
  d.fixed_overhead = 0;
  const Device sim = simulated(d);
  const TrialResult on_device = run_trial(cfg, sim, 1, d.total, nullptr);
  cfg.optimizer = Optimizer::paged_adamw_8bit;
  const TrialResult paged = run_trial(cfg, sim, 1, d.total, nullptr);
  const Program p = build_program(cfg, 0);
  Bytes paged_tensors = 0;
  for (const Tensor& t : p.tensors)
    if (t.role == Role::paged_optimizer_state) paged_tensors += t.bytes;
  ASSERT_GT(paged_tensors, 0);
  EXPECT_EQ(paged.paged_bytes, paged_tensors);
  EXPECT_EQ(on_device.paged_bytes, 0);
  EXPECT_EQ(on_device.tensor_peak - paged.tensor_peak, paged_tensors);
}

}  // namespace
}  // namespace vrambench
