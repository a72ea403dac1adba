// Mixtures of experts (docs/moe.md): the configs of Mixtral, Qwen3-MoE and OLMoE as transformers
// reads them and their published parameter counts, the hf step's MoE blocks (the router's top-k,
// the dispatch, the experts' grouped GEMMs, the combine; PEFT's LoRA on the experts; QLoRA's fp32
// experts), what the routing changes and what it does not, and the gradients of a step on the CPU
// against finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/error.h"
#include "device/cpu_executor.h"
#include "device/host_runner.h"
#include "estimate/formula.h"
#include "finite_difference.h"
#include "model/families.h"
#include "model/model_file.h"
#include "model/weights.h"
#include "program/program.h"
#include "program_counts.h"
#include "reference_models.h"

namespace vrambench {
namespace {

ModelConfig from_text(const std::string& json) {
  return model_from_config_text(json, "test", "test.json");
}

const Tensor& tensor_named(const Program& p, std::string_view name) {
  return p.tensor(find_tensor(p, name));
}

RunConfig moe_config(std::string_view preset, Finetune finetune = Finetune::full,
                     Precision dtype = Precision::bf16) {
  RunConfig cfg;
  cfg.model = find_preset(preset).model;
  cfg.framework = Framework::hf;
  cfg.seq = 16;
  cfg.batch = 2;
  cfg.dtype = dtype;
  cfg.finetune = finetune;
  cfg.attention = Attention::flash;
  cfg.lora_rank = 4;
  cfg.lora_alpha = 8;
  cfg.lora_targets = parse_lora_targets("attn");
  return cfg;
}

// ---- configs and counts -----------------------------------------------------------------------

TEST(MoeModel, PresetsHaveThePublishedTotalsAndActiveParameters) {
  struct Expected {
    std::string_view preset;
    std::int64_t total, active;
  };
  // The totals the model cards publish; active: a token's top-k experts instead of all E (the
  // cards' 12.9B, 3.3B and 1.3B).
  for (const Expected& e : {Expected{"mixtral-8x7b", 46'702'792'704, 12'879'925'248},
                            Expected{"qwen3-30b-a3b", 30'532'122'624, 3'353'032'704},
                            Expected{"olmoe-1b-7b", 6'919'161'856, 1'282'017'280}}) {
    const ModelConfig& m = find_preset(e.preset).model;
    EXPECT_EQ(parameter_count(m), e.total) << e.preset;
    EXPECT_EQ(active_parameter_count(m), e.active) << e.preset;
  }
  // A dense model's active parameters are all of them.
  const ModelConfig& dense = find_preset("llama3-8b").model;
  EXPECT_EQ(active_parameter_count(dense), parameter_count(dense));
  // DeepSpeed's largest layer of Mixtral: one layer's experts, a module of both 3-D parameters.
  EXPECT_EQ(largest_module_parameters(find_preset("mixtral-8x7b").model), 8LL * 3 * 14336 * 4096);
}

TEST(MoeModel, ConfigsAreReadWithTheirClassesDefaults) {
  const ModelConfig mixtral = from_text(
      R"({"model_type": "mixtral", "hidden_size": 64, "num_attention_heads": 4,
          "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 256})");
  EXPECT_EQ(mixtral.experts, 8);  // MixtralConfig's num_local_experts
  EXPECT_EQ(mixtral.experts_per_token, 2);
  EXPECT_EQ(mixtral.expert_ffn, 96);
  EXPECT_TRUE(mixtral.norm_topk);
  EXPECT_TRUE(mixtral.router_scores_f32);
  EXPECT_FALSE(mixtral.router_aux_loss);
  EXPECT_DOUBLE_EQ(mixtral.router_aux_coef, 0.001);
  EXPECT_FALSE(mixtral.qk_norm);

  const ModelConfig qwen = from_text(
      R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 4,
          "num_hidden_layers": 4, "intermediate_size": 96, "vocab_size": 256,
          "mlp_only_layers": [1], "decoder_sparse_step": 2, "router_aux_loss_coef": 0.02})");
  EXPECT_EQ(qwen.experts, 128);
  EXPECT_EQ(qwen.experts_per_token, 8);
  EXPECT_EQ(qwen.expert_ffn, 768);
  EXPECT_EQ(qwen.head_dim(), 128);
  EXPECT_FALSE(qwen.norm_topk);
  EXPECT_FALSE(qwen.router_scores_f32);
  EXPECT_TRUE(qwen.qk_norm);
  EXPECT_FALSE(qwen.qk_norm_full_width);
  EXPECT_DOUBLE_EQ(qwen.router_aux_coef, 0.02);
  // Every second layer is MoE (decoder_sparse_step 2), but layer 1, listed in mlp_only_layers.
  EXPECT_FALSE(moe_layer(qwen, 0));
  EXPECT_FALSE(moe_layer(qwen, 1));
  EXPECT_FALSE(moe_layer(qwen, 2));
  EXPECT_TRUE(moe_layer(qwen, 3));

  const ModelConfig olmoe = from_text(
      R"({"model_type": "olmoe", "hidden_size": 64, "num_attention_heads": 4,
          "num_hidden_layers": 2, "intermediate_size": 32, "vocab_size": 256})");
  EXPECT_EQ(olmoe.experts, 64);
  EXPECT_EQ(olmoe.experts_per_token, 8);
  EXPECT_TRUE(olmoe.qk_norm_full_width);
  EXPECT_DOUBLE_EQ(olmoe.router_aux_coef, 0.01);
}

TEST(MoeModel, WhatIsNotModelledIsRefusedByName) {
  auto refusal = [](const std::string& json) {
    try {
      from_text(json);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string shape =
      R"("hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
         "intermediate_size": 32, "vocab_size": 256)";
  EXPECT_NE(refusal(R"({"model_type": "qwen2_moe", )" + shape + "}").find("shared expert"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model_type": "mixtral", "router_jitter_noise": 0.1, )" + shape + "}")
                .find("router_jitter_noise"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model_type": "olmoe", "clip_qkv": 8.0, )" + shape + "}").find("clip_qkv"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model_type": "olmoe", "num_key_value_heads": 2, )" + shape + "}")
                .find("num_key_value_heads"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model_type": "qwen3_moe", "mlp_only_layers": [5], )" + shape + "}")
                .find("mlp_only_layers"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model_type": "mixtral", "num_experts_per_tok": 9, )" + shape + "}")
                .find("num_experts_per_tok"),
            std::string::npos);

  // The load-balancing loss is the hf step's: refused under lean.
  RunConfig aux = moe_config("tiny-mixtral");
  aux.model.router_aux_loss = true;
  aux.model.router_aux_coef = 0.01;
  EXPECT_NO_THROW(validate(aux));
  aux.framework = Framework::lean;
  EXPECT_THROW(validate(aux), UsageError);
}

// ---- the step ---------------------------------------------------------------------------------

TEST(MoeProgram, EachMoeLayerRoutesDispatchesAndCombines) {
  RunConfig cfg = moe_config("tiny-qwen3-moe");  // layer 0 dense, layer 1 MoE
  validate(cfg);
  const Program p = build_program(cfg, 0);
  for (OpKind kind : {OpKind::router_topk, OpKind::router_topk_bwd, OpKind::moe_dispatch,
                      OpKind::moe_dispatch_bwd, OpKind::moe_combine, OpKind::moe_combine_bwd})
    EXPECT_EQ(count_ops(p, kind), 1) << to_string(kind);
  EXPECT_EQ(count_ops(p, OpKind::grouped_linear_fwd), 2);  // gate|up and down
  EXPECT_EQ(count_ops(p, OpKind::grouped_linear_bwd), 2);
  const ModelConfig& m = cfg.model;
  EXPECT_EQ(tensor_named(p, "layer1.mlp.experts.gate_up.w").shape,
            (Shape{m.experts, 2 * m.expert_ffn, m.hidden}));
  EXPECT_EQ(tensor_named(p, "layer1.mlp.experts.down.w").shape,
            (Shape{m.experts, m.hidden, m.expert_ffn}));
  EXPECT_EQ(tensor_named(p, "layer1.mlp.router.w").shape, (Shape{m.experts, m.hidden}));
  EXPECT_EQ(tensor_named(p, "layer0.mlp.gate.w").shape, (Shape{m.ffn, m.hidden}));
  // Every dispatch tensor has tokens x top-k rows; the expert indices are int64, as topk's.
  const std::int64_t pairs = cfg.batch * cfg.seq * m.experts_per_token;
  EXPECT_EQ(tensor_named(p, "layer1.mlp.experts.rows").shape, (Shape{pairs, m.hidden}));
  EXPECT_EQ(tensor_named(p, "layer1.mlp.experts.gate_up.out").shape,
            (Shape{pairs, 2 * m.expert_ffn}));
  EXPECT_EQ(tensor_named(p, "layer1.mlp.router.index").dtype, DType::i64);
  EXPECT_EQ(tensor_named(p, "layer1.mlp.router.probs").dtype, DType::f32);
  // The batch scales the dispatch rows: a sample adds seq x top-k.
  EXPECT_EQ(build_program(
                [&] {
                  RunConfig c = cfg;
                  c.batch = 3;
                  return c;
                }(),
                0)
                .tensor(find_tensor(p, "layer1.mlp.experts.rows"))
                .shape[0],
            pairs / 2 * 3);
}

TEST(MoeProgram, MixtralKeepsItsRoutingWeightsInFp32) {
  RunConfig mixtral = moe_config("tiny-mixtral"), qwen = moe_config("tiny-qwen3-moe");
  validate(mixtral);
  validate(qwen);
  EXPECT_EQ(tensor_named(build_program(mixtral, 0), "layer0.mlp.router.scores").dtype, DType::f32);
  EXPECT_EQ(tensor_named(build_program(qwen, 0), "layer1.mlp.router.scores").dtype, DType::bf16);
}

TEST(MoeProgram, LoraOnTheExpertsFoldsAnEffectiveWeightPerForward) {
  RunConfig cfg = moe_config("tiny-mixtral", Finetune::lora);
  cfg.lora_targets = parse_lora_targets("q_proj,v_proj,experts.gate_up_proj,experts.down_proj");
  validate(cfg);
  const Program p = build_program(cfg, 0);
  const ModelConfig& m = cfg.model;
  // ParamWrapper's adapters: rank r per expert.
  EXPECT_EQ(tensor_named(p, "layer0.mlp.experts.gate_up.lora_A").shape,
            (Shape{m.experts * cfg.lora_rank, m.hidden}));
  EXPECT_EQ(tensor_named(p, "layer0.mlp.experts.gate_up.lora_B").shape,
            (Shape{2 * m.expert_ffn, m.experts * cfg.lora_rank}));
  EXPECT_EQ(tensor_named(p, "layer0.mlp.experts.down.lora_A").shape,
            (Shape{m.experts * cfg.lora_rank, m.expert_ffn}));
  // W + scale B A, the size of the whole expert stack, kept by grouped_mm to the backward.
  const Tensor& w_eff = tensor_named(p, "layer0.mlp.experts.gate_up.w.lora");
  EXPECT_EQ(w_eff.shape, (Shape{m.experts, 2 * m.expert_ffn, m.hidden}));
  EXPECT_EQ(w_eff.role, Role::activation);
  EXPECT_EQ(count_ops(p, OpKind::expert_lora_fwd), 2 * static_cast<int>(m.layers));
  EXPECT_EQ(count_ops(p, OpKind::expert_lora_bwd), 2 * static_cast<int>(m.layers));
  // all-linear is PEFT's: nn.Linear modules, never the experts' parameters.
  cfg.lora_targets = parse_lora_targets("all-linear");
  EXPECT_EQ(count_ops(build_program(cfg, 0), OpKind::expert_lora_fwd), 0);
}

TEST(MoeProgram, QloraQuantisesTheLinearsAndKeepsTheExpertsInFp32) {
  RunConfig cfg = moe_config("tiny-mixtral", Finetune::qlora);
  validate(cfg);
  const Program p = build_program(cfg, 0);
  // bitsandbytes replaces nn.Linear alone; prepare_model_for_kbit_training casts every other
  // 16-bit parameter, the experts' and the router's, to fp32.
  EXPECT_EQ(tensor_named(p, "layer0.mlp.experts.gate_up.w").dtype, DType::f32);
  EXPECT_EQ(tensor_named(p, "layer0.mlp.router.w").dtype, DType::f32);
  EXPECT_NO_THROW(find_tensor(p, "layer0.attn.q.w.weight"));
  EXPECT_THROW(find_tensor(p, "layer0.attn.qkv.w"), std::exception);
  // grouped_mm is not autocast: the experts compute in fp32.
  EXPECT_EQ(tensor_named(p, "layer0.mlp.experts.gate_up.out").dtype, DType::f32);
}

// ---- routing ----------------------------------------------------------------------------------

// transformers' grouped_mm dispatch allocates tokens x top-k rows whatever the routing: the peak
// is the same for both; what differs is how the rows fall to the experts, which the executors
// follow.
TEST(MoeRouting, TheRoutingMovesRowsBetweenExpertsNotBytes) {
  RunConfig balanced = moe_config("tiny-mixtral");
  balanced.dtype = Precision::fp32;
  balanced.device = parse_device("cpu");
  RunConfig skewed = balanced;
  skewed.routing = Routing::skewed;
  validate(skewed);
  EXPECT_EQ(hf_cpu_tensor_peak(balanced), hf_cpu_tensor_peak(skewed));

  const std::int64_t tokens = balanced.batch * balanced.seq, K = balanced.model.experts_per_token;
  const std::int64_t E = balanced.model.experts;
  for (const RunConfig& cfg : {balanced, skewed}) {
    const Program p = build_program(cfg, 0);
    auto exec = make_cpu_executor(3);
    HostRunner run(p, *exec);
    const int offsets = find_tensor(p, "layer0.mlp.experts.offsets");
    run.keep_alive(offsets);
    run.step();
    const std::vector<float> ends = run.values(offsets);
    ASSERT_EQ(static_cast<std::int64_t>(ends.size()), E);
    for (std::int64_t e = 0; e < E; ++e) {
      const float rows = ends[static_cast<std::size_t>(e)] -
                         (e == 0 ? 0.0f : ends[static_cast<std::size_t>(e) - 1]);
      const float want = cfg.routing == Routing::skewed
                             ? (e < K ? static_cast<float>(tokens) : 0.0f)
                             : static_cast<float>(tokens * K / E);
      EXPECT_EQ(rows, want) << to_string(cfg.routing) << " expert " << e;
    }
  }
}

// ---- gradients ------------------------------------------------------------------------------

// The directional derivative of the loss along a random direction through each MoE weight (and
// all weights at once) against central differences, on the CPU in fp32: the router's softmax and
// top-k renormalisation, the dispatch, the grouped GEMMs and the combine, forward and backward.
TEST(MoeGradients, MatchFiniteDifferences) {
  for (Framework framework : {Framework::hf, Framework::lean})
    for (std::string_view preset : {"tiny-mixtral", "tiny-qwen3-moe", "tiny-olmoe"}) {
      RunConfig cfg = moe_config(preset, Finetune::full, Precision::fp32);
      cfg.framework = framework;
      // hf: with the load-balancing loss, its coefficient large enough to show in the router's
      // gradient.
      cfg.model.router_aux_loss = framework == Framework::hf;
      cfg.model.router_aux_coef = 0.5;
      GradientStep step(cfg, 5);
      const int moe = cfg.model.dense_layers.empty() ? 0 : 1;
      const std::string pre = "layer" + std::to_string(moe) + ".mlp.";
      for (const std::string& name : {pre + "router.w", pre + "experts.gate_up.w",
                                      pre + "experts.down.w", std::string("layer0.attn.qkv.w")}) {
        const Directional d =
            directional_check(step.run, step.program, name, step.grads.at(name + ".grad"), 1e-3);
        const double along = d.along, numeric = d.numeric;
        EXPECT_NEAR(along, numeric, 2e-3 + 0.03 * std::fabs(numeric))
            << to_string(framework) << " " << preset << " " << name;
        EXPECT_GT(std::fabs(along), 1e-5) << to_string(framework) << " " << preset << " " << name;
      }
    }
}

// ---- the formula ------------------------------------------------------------------------------

TEST(MoeFormula, CountsEveryExpertsWeightsAndTopKExpertsActivations) {
  RunConfig cfg = moe_config("mixtral-8x7b");
  cfg.seq = 1024;
  cfg.batch = 1;
  const Formula f = formula(cfg, 0);
  EXPECT_EQ(f.parameters, 46'702'792'704);
  // The MoE form: the dense MLP's 19 s h per layer becomes k (3 s h + 4 s I) + 4 s E.
  RunConfig dense = cfg;
  dense.model.experts = 0;
  const Formula d = formula(dense, 0);
  const ModelConfig& m = cfg.model;
  const Bytes delta =
      m.layers * cfg.seq *
      (m.experts_per_token * (3 * m.hidden + 4 * m.expert_ffn) + 4 * m.experts - 19 * m.hidden);
  EXPECT_EQ(f.activations - d.activations, delta);
}

}  // namespace
}  // namespace vrambench
