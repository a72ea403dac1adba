// The weights description (model/weights.h) against what reads it: the step programs of both
// frameworks hold exactly its parameters, in its order and shapes, for every preset; the parameter
// count and the formula's adapters are the programs' own.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/run_config.h"
#include "estimate/formula.h"
#include "model/families.h"
#include "model/weights.h"
#include "program/program.h"

namespace vrambench {
namespace {

// A whole-model step of `model` under `framework`: fp32, so that every parameter is one tensor in
// the model's dtype (no autocast copies, no master weights).
RunConfig config(const ModelConfig& model, Framework framework, Finetune finetune) {
  RunConfig cfg;
  cfg.model = model;
  cfg.seq = 64;
  cfg.batch = 2;
  cfg.framework = framework;
  cfg.dtype = Precision::fp32;
  cfg.finetune = finetune;
  cfg.lora_rank = 4;
  validate(cfg);
  return cfg;
}

struct Parameter {
  std::string name;
  Shape shape;
  bool operator==(const Parameter&) const = default;
};

void PrintTo(const Parameter& p, std::ostream* os) {
  *os << p.name << " [";
  for (std::int64_t d : p.shape) *os << d << ' ';
  *os << ']';
}

// The parameters the description lists for a step of `seq` tokens, in its order.
std::vector<Parameter> described(const ModelConfig& m, std::int64_t seq) {
  const ModelWeights w = model_weights(m, seq);
  std::vector<Parameter> out;
  auto add = [&](const std::string& prefix, const WeightModule& module) {
    const std::string name = prefix + std::string(module.name);
    switch (module.kind) {
      case WeightKind::embedding:
        out.push_back({name, Shape{module.rows, module.cols}});
        return;
      case WeightKind::norm:
        out.push_back({name + ".w", Shape{module.rows}});
        break;
      case WeightKind::linear:
        out.push_back({name + ".w", Shape{module.rows, module.cols}});
        break;
      case WeightKind::experts:
        out.push_back({name + ".w", Shape{module.experts, module.rows, module.cols}});
        break;
    }
    if (module.bias) out.push_back({name + ".b", Shape{module.rows}});
  };
  for (const WeightModule& module : w.embeddings) add("", module);
  for (std::int64_t l = 0; l < m.layers; ++l)
    for (const WeightModule& module : w.layer(l)) add("layer" + std::to_string(l) + ".", module);
  for (const WeightModule& module : w.head) add("", module);
  return out;
}

// The program's parameters (its weights, in the order it made them).
std::vector<Parameter> built(const Program& p) {
  std::vector<Parameter> out;
  for (const Tensor& t : p.tensors)
    if (t.role == Role::weight) out.push_back({std::string(t.name), t.shape});
  return out;
}

TEST(Weights, EveryPresetsProgramsHoldTheDescribedParametersInItsOrder) {
  for (const Preset& preset : presets()) {
    for (Framework framework : {Framework::lean, Framework::hf}) {
      SCOPED_TRACE(std::string(preset.name) + " " + std::string(to_string(framework)));
      const RunConfig cfg = config(preset.model, framework, Finetune::full);
      const Program p = build_program(cfg, 0);
      const std::vector<Parameter> params = built(p);
      EXPECT_EQ(params, described(preset.model, cfg.seq));
      // The parameter count is the program's, and so the formula's P.
      std::int64_t elements = 0;
      for (const Tensor& t : p.tensors)
        if (t.role == Role::weight) elements += t.elements();
      EXPECT_EQ(elements, parameter_count(preset.model));
      EXPECT_EQ(formula(cfg, 0).parameters, elements);
    }
  }
}

TEST(Weights, FormulaAdaptersAreTheProgramsForEveryPreset) {
  for (const Preset& preset : presets()) {
    for (Framework framework : {Framework::lean, Framework::hf}) {
      SCOPED_TRACE(std::string(preset.name) + " " + std::string(to_string(framework)));
      const RunConfig cfg = config(preset.model, framework, Finetune::lora);
      const Program p = build_program(cfg, 0);
      std::int64_t adapters = 0;
      for (const Tensor& t : p.tensors)
        if (t.role == Role::weight && t.component == MemoryComponent::adapters)
          adapters += t.elements();
      EXPECT_GT(adapters, 0);
      EXPECT_EQ(lora_parameter_count(cfg), adapters);
      EXPECT_EQ(formula(cfg, 0).adapter_parameters, adapters);
    }
  }
}

// Where a model gives its own head size, the attention is A x D wide, not H: Mistral Nemo's
// q_proj has 32 x 128 = 4096 rows from 5120 columns, and o_proj the transpose; k_proj and v_proj
// 8 x 128 rows each. The adapters the formula counts follow.
TEST(Weights, AnExplicitHeadDimShapesTheAttentionsModules) {
  const ModelConfig& m = find_preset("mistral-nemo-12b").model;
  const WeightModules block = block_modules(m);
  const WeightModule& qkv = block[1];
  ASSERT_EQ(qkv.part, WeightPart::qkv);
  ASSERT_EQ(qkv.modules().size(), 3u);
  EXPECT_EQ(qkv.modules()[0].rows, 4096);
  EXPECT_EQ(qkv.modules()[1].rows, 1024);
  EXPECT_EQ(qkv.rows, 4096 + 2 * 1024);
  EXPECT_EQ(qkv.cols, 5120);
  const WeightModule& o = block[2];
  ASSERT_EQ(o.part, WeightPart::proj);
  EXPECT_EQ(o.rows, 5120);
  EXPECT_EQ(o.cols, 4096);

  RunConfig cfg;
  cfg.model = m;
  cfg.finetune = Finetune::lora;
  cfg.lora_rank = 16;
  cfg.lora_targets = parse_lora_targets("attn");
  const std::int64_t per_layer =
      16 * ((5120 + 4096) + 2 * (5120 + 1024) + (4096 + 5120));  // q, k and v, o
  EXPECT_EQ(lora_parameter_count(cfg), 40 * per_layer);
}

// The LoRA modules of a model are its block linears' modules, in block order; the lm head, the
// norms and the embeddings are never targets.
TEST(Weights, TheLoraModulesAreTheBlockLinearsModules) {
  const ModelConfig& gpt2 = find_preset("gpt2").model;
  EXPECT_EQ(lora_modules(gpt2), (LoraModules{LoraModule::c_attn, LoraModule::attn_c_proj,
                                             LoraModule::c_fc, LoraModule::mlp_c_proj}));
  const ModelConfig& phi3 = find_preset("tiny-phi3").model;
  EXPECT_EQ(lora_modules(phi3), (LoraModules{LoraModule::qkv_proj, LoraModule::o,
                                             LoraModule::gate_up_proj, LoraModule::down}));
  const ModelWeights untied = model_weights(find_preset("llama2-7b").model);
  EXPECT_FALSE(untied.tied);
  ASSERT_EQ(untied.head.size(), 2u);
  EXPECT_EQ(untied.head[1].part, WeightPart::lm_head);
  for (const WeightModules* part : {&untied.embeddings, &untied.head})
    for (const WeightModule& module : *part) EXPECT_TRUE(module.modules().empty()) << module.name;
  for (const WeightModule& module : untied.block)
    EXPECT_EQ(!module.modules().empty(), module.kind == WeightKind::linear) << module.name;
  const ModelWeights tied = model_weights(gpt2);
  EXPECT_TRUE(tied.tied);
  ASSERT_EQ(tied.head.size(), 1u);
  EXPECT_EQ(tied.head[0].name, "ln_f");
}

}  // namespace
}  // namespace vrambench
