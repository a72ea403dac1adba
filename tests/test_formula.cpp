// The calculators' formula against figures worked out here by hand: bytes per parameter for each
// recipe, Korthikanti's per-layer activations of a gpt2 block in each attention and recompute
// form, the fp32 logits, and the peak and max batch they add up to.
#include <gtest/gtest.h>

#include <string_view>

#include "estimate/formula.h"
#include "model/families.h"

namespace vrambench {
namespace {

constexpr Bytes kGpt2Params = 124'439'808;      // tied embeddings, 1024 positions
constexpr Bytes kLlama2Params = 6'738'415'616;  // untied lm head
constexpr Bytes kContext = 512 * MiB;

// The configuration's defaults: bf16, flash attention, no recompute, AdamW, full training.
RunConfig config(std::string_view preset, std::int64_t seq) {
  RunConfig cfg;
  cfg.model = find_preset(preset).model;
  cfg.seq = seq;
  return cfg;
}

// gpt2 at S = 1024 with these fields.
Formula gpt2(Precision dtype, Optimizer optimizer, Attention attention = Attention::flash,
             Recompute recompute = Recompute::none) {
  RunConfig cfg = config("gpt2", 1024);
  cfg.dtype = dtype;
  cfg.optimizer = optimizer;
  cfg.attention = attention;
  cfg.recompute = recompute;
  return formula(cfg, kContext);
}

TEST(Formula, SixteenBytesPerParameterForAdamWInMixedPrecisionAndInFp32) {
  const Formula f = formula(config("gpt2", 1024), kContext);
  EXPECT_EQ(f.parameters, kGpt2Params);
  // 2 weight + 2 gradient + 4 fp32 master + 4 m + 4 v.
  EXPECT_EQ(f.model_state, 16 * kGpt2Params);
  EXPECT_EQ(f.adapter_parameters, 0);
  // fp32 and autocast: 4 weight + 4 gradient + 8 state, no separate master.
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::amp_bf16})
    EXPECT_EQ(gpt2(p, Optimizer::adamw).model_state, 16 * kGpt2Params) << to_string(p);
}

TEST(Formula, BytesPerParameterOfTheOtherOptimizers) {
  // SGD: 2 + 2 + 4 master + 4 momentum; fp32: 4 + 4 + 4.
  EXPECT_EQ(gpt2(Precision::bf16, Optimizer::sgd).model_state, 12 * kGpt2Params);
  EXPECT_EQ(gpt2(Precision::fp32, Optimizer::sgd).model_state, 12 * kGpt2Params);
  // No step, no master: weights and gradients.
  EXPECT_EQ(gpt2(Precision::bf16, Optimizer::none).model_state, 4 * kGpt2Params);
  EXPECT_EQ(gpt2(Precision::fp32, Optimizer::none).model_state, 8 * kGpt2Params);
  // 8-bit AdamW: 2 bytes of state (m and v one byte each), paged or not.
  EXPECT_EQ(gpt2(Precision::bf16, Optimizer::adamw_8bit).model_state, 10 * kGpt2Params);
  EXPECT_EQ(gpt2(Precision::bf16, Optimizer::paged_adamw_8bit).model_state, 10 * kGpt2Params);
  EXPECT_EQ(gpt2(Precision::bf16, Optimizer::paged_adamw).model_state, 16 * kGpt2Params);
}

TEST(Formula, KorthikantisActivationsOfAGpt2Block) {
  // s = 1024, b = 1, h = 768, a = 12: s·b·h = 786,432; 5·a·s/h = 80.
  EXPECT_EQ(korthikanti_layer_bytes(1024, 1, 768, 12, true), 786'432 * (34 + 80));
  EXPECT_EQ(korthikanti_layer_bytes(1024, 1, 768, 12, true), 89'653'248);
  // Without the s² term: 34·s·b·h.
  EXPECT_EQ(korthikanti_layer_bytes(1024, 1, 768, 12, false), 26'738'688);
  // Linear in the batch.
  EXPECT_EQ(korthikanti_layer_bytes(1024, 3, 768, 12, true), 3 * 89'653'248);
}

TEST(Formula, ActivationsInEachAttentionAndRecomputeForm) {
  Precision dtype = Precision::bf16;
  const auto activations = [&](Attention a, Recompute r) {
    return gpt2(dtype, Optimizer::adamw, a, r).activations;
  };
  // Eager, no recompute: 12 layers of s·b·h·(34 + 5·a·s/h), memory-model.md's worked example.
  EXPECT_EQ(activations(Attention::eager, Recompute::none), 1'075'838'976);
  // Selective recompute drops the 5·a·s²·b; flash attention never saves it.
  EXPECT_EQ(activations(Attention::eager, Recompute::selective), 12 * 26'738'688);
  EXPECT_EQ(activations(Attention::flash, Recompute::none), 12 * 26'738'688);
  EXPECT_EQ(activations(Attention::flash, Recompute::selective), 12 * 26'738'688);
  // Full: each layer's input, 2·s·b·h, plus one layer recomputed whole.
  EXPECT_EQ(activations(Attention::eager, Recompute::full), 12 * 2 * 786'432 + 89'653'248);
  EXPECT_EQ(activations(Attention::flash, Recompute::full), 12 * 2 * 786'432 + 26'738'688);
  // 32-bit activations: twice Korthikanti's 16-bit bytes.
  dtype = Precision::fp32;
  EXPECT_EQ(activations(Attention::eager, Recompute::none), Bytes{2} * 1'075'838'976);
}

TEST(Formula, LogitsAreFp32OverTheVocabulary) {
  RunConfig cfg = config("gpt2", 1024);
  EXPECT_EQ(formula(cfg, kContext).logits, 4 * 1024 * 50257);
  cfg.dtype = Precision::fp32;  // the loss's copy is fp32 whatever the model's dtype
  EXPECT_EQ(formula(cfg, kContext).logits, 4 * 1024 * 50257);
}

TEST(Formula, PeakAndMaxBatchAddTheTermsAtOnce) {
  RunConfig cfg = config("gpt2", 1024);
  cfg.batch = 8;
  const Bytes fixed = 16 * kGpt2Params + kContext;              // 2,527,907,840
  const Bytes per_sample = 12 * 26'738'688 + 4 * 1024 * 50257;  // 526,716,928
  EXPECT_EQ(formula_peak(cfg, kContext), fixed + 8 * per_sample);
  EXPECT_EQ(formula(cfg, kContext).fixed(), fixed);
  EXPECT_EQ(formula(cfg, kContext).per_sample(), per_sample);
  // On the H100 profile (81,559 MiB): (85,520,809,984 − 2,527,907,840) / 526,716,928 = 157.57.
  EXPECT_EQ(formula_max_batch(cfg, kContext, 81559 * MiB), 157);
  // The fixed part alone over the capacity.
  EXPECT_EQ(formula_max_batch(cfg, kContext, fixed - 1), 0);
  EXPECT_EQ(formula_max_batch(cfg, kContext, fixed + per_sample), 1);
}

TEST(Formula, LoraAdaptersOfLlama2OnEveryLinear) {
  RunConfig cfg = config("llama2-7b", 1024);
  cfg.finetune = Finetune::lora;
  cfg.lora_rank = 16;
  // Per layer: q, k, v, o 16·(4096 + 4096); gate, up, down 16·(4096 + 11008); 32 layers: PEFT's
  // "trainable params: 39,976,960".
  EXPECT_EQ(lora_parameter_count(cfg), 32 * (4 * 16 * 8192 + 3 * 16 * 15104));
  EXPECT_EQ(lora_parameter_count(cfg), 39'976'960);
  const Formula f = formula(cfg, kContext);
  // The frozen base in bf16, the adapters in fp32 with their gradients and AdamW's m and v.
  EXPECT_EQ(f.model_state, 2 * kLlama2Params + 16 * 39'976'960);
  cfg.lora_targets = parse_lora_targets("q_proj,v_proj");
  EXPECT_EQ(lora_parameter_count(cfg), 32 * 2 * 16 * 8192);
  cfg.optimizer = Optimizer::none;
  EXPECT_EQ(formula(cfg, kContext).model_state, 2 * kLlama2Params + 8 * 32 * 2 * 16 * 8192);
}

TEST(Formula, QloraStoresAboutHalfAByteAParameter) {
  RunConfig cfg = config("llama2-7b", 1024);
  cfg.finetune = Finetune::qlora;
  cfg.optimizer = Optimizer::none;
  cfg.lora_targets = parse_lora_targets("q_proj");
  const Bytes adapters = 8 * lora_parameter_count(cfg);  // fp32 weight and gradient
  // NF4 without double quantisation: 4 bits + a 32-bit absmax per 64 = 4.5 bits, 0.5625 bytes.
  cfg.double_quant = Toggle::off;
  EXPECT_EQ(formula(cfg, kContext).model_state - adapters, kLlama2Params / 64 * 36);
  // With it: 4 + 8/64 + 32/(64·256) = 4.127 bits, 8,452 bytes per 16,384 parameters (0.516).
  cfg.double_quant = Toggle::on;
  const Bytes base = formula(cfg, kContext).model_state - adapters;
  EXPECT_EQ(base, 3'476'140'673);  // 6,738,415,616 · 8,452 / 16,384, a whole number
  EXPECT_NEAR(static_cast<double>(base) / static_cast<double>(kLlama2Params), 0.5159, 1e-4);
  // int8 (LoRA over an 8-bit base): one byte.
  cfg.finetune = Finetune::lora;
  cfg.quant = QuantKind::int8;
  EXPECT_EQ(formula(cfg, kContext).model_state - adapters, kLlama2Params);
}

TEST(Formula, OnlyWholeModelStepsHaveOne) {
  RunConfig cfg = config("gpt2", 1024);
  EXPECT_TRUE(has_formula(cfg));
  for (Scope s : {Scope::layer, Scope::mlp, Scope::attention}) {
    cfg.scope = s;
    EXPECT_FALSE(has_formula(cfg)) << to_string(s);
  }
}

}  // namespace
}  // namespace vrambench
