// The LoRA module table and the parsing of --lora-targets.
#include "model/lora.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

#include "core/enum_names.h"
#include "core/error.h"
#include "model/weights.h"

namespace vrambench {
namespace {

constexpr std::array<std::string_view, kLoraModuleCount> kLoraModuleNames{
    "q_proj",           "k_proj",
    "v_proj",           "o_proj",
    "gate_proj",        "up_proj",
    "down_proj",        "c_attn",
    "c_proj",           "c_fc",
    "c_proj",           "qkv_proj",
    "gate_up_proj",     "experts.gate_up_proj",
    "experts.down_proj"};
constexpr std::array<std::pair<LoraTargets::Shorthand, std::string_view>, 4> kLoraShorthands{
    {{LoraTargets::Shorthand::attn, "attn"},
     {LoraTargets::Shorthand::attn_mlp, "attn-mlp"},
     {LoraTargets::Shorthand::all_linear, "all-linear"},
     {LoraTargets::Shorthand::peft_default, "peft-default"}}};

constexpr std::uint16_t bit(LoraModule m) {
  return static_cast<std::uint16_t>(1u << static_cast<unsigned>(m));
}

}  // namespace

LoraTargets parse_lora_targets(std::string_view text) {
  LoraTargets t;
  for (const auto& [shorthand, name] : kLoraShorthands)
    if (name == text) {
      t.shorthand = shorthand;
      return t;
    }
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find_first_of(",+", start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view name = text.substr(start, end - start);
    bool known = false;
    for (int m = 0; m < kLoraModuleCount; ++m)
      if (kLoraModuleNames[static_cast<std::size_t>(m)] == name) {
        t.modules |= bit(static_cast<LoraModule>(m));
        known = true;
      }
    if (!known)
      throw UsageError(fmt::format(
          "invalid --lora-targets '{}': unknown module '{}'; use attn, attn-mlp, all-linear, or "
          "module names: q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj (llama-style), "
          "c_attn,c_proj,c_fc (gpt-style), qkv_proj,o_proj,gate_up_proj,down_proj (Phi-3), "
          "experts.gate_up_proj,experts.down_proj (an MoE layer's experts, PEFT's "
          "target_parameters)",
          text, name));
    start = end + 1;
  }
  return t;
}

std::string to_string(const LoraTargets& targets) {
  if (targets.shorthand != LoraTargets::Shorthand::none)
    return std::string(enum_name<LoraTargets::Shorthand>(kLoraShorthands, targets.shorthand));
  std::string out;
  for (int m = 0; m < kLoraModuleCount; ++m) {
    const auto module = static_cast<LoraModule>(m);
    if (module == LoraModule::mlp_c_proj) continue;  // "c_proj" is written once
    if (targets.modules & bit(module)) {
      if (!out.empty()) out += '+';
      out += kLoraModuleNames[static_cast<std::size_t>(m)];
    }
  }
  return out;
}

bool lora_targets_module(const LoraTargets& targets, const ModelConfig& model, LoraModule module) {
  const LoraModules modules = lora_modules(model);
  if (std::find(modules.begin(), modules.end(), module) == modules.end()) return false;
  switch (targets.shorthand) {
    case LoraTargets::Shorthand::none:
      return (targets.modules & bit(module)) != 0;
    case LoraTargets::Shorthand::attn:
      return module == LoraModule::q || module == LoraModule::k || module == LoraModule::v ||
             module == LoraModule::o || module == LoraModule::c_attn ||
             module == LoraModule::attn_c_proj || module == LoraModule::qkv_proj;
    case LoraTargets::Shorthand::attn_mlp:
      return true;
    case LoraTargets::Shorthand::all_linear:
      // PEFT's all-linear takes nn.Linear modules: never the experts' 3-D parameters.
      return module != LoraModule::experts_gate_up && module != LoraModule::experts_down;
    case LoraTargets::Shorthand::peft_default:
      // peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: gpt2
      // ["c_attn"]; llama, mistral, qwen2 ["q_proj", "v_proj"].
      return module == LoraModule::q || module == LoraModule::v || module == LoraModule::c_attn;
  }
  return false;
}

LoraModules lora_modules(const ModelConfig& model) {
  LoraModules out;
  const ModelWeights weights = model_weights(model);
  for (const WeightModules* block : {&weights.block, &weights.dense_block})
    for (const WeightModule& w : *block)
      for (const ModuleRows& m : w.modules())
        if (std::find(out.begin(), out.end(), m.module) == out.end()) out.push_back(m.module);
  return out;
}

std::string lora_module_list(const ModelConfig& model) {
  std::string out;
  for (LoraModule m : lora_modules(model)) {
    if (m == LoraModule::mlp_c_proj) continue;  // "c_proj" is written once, as to_string does
    out += out.empty() ? "" : ",";
    out += lora_module_name(m);
  }
  return out;
}

std::string_view lora_module_name(LoraModule module) {
  return kLoraModuleNames[static_cast<std::size_t>(module)];
}

}  // namespace vrambench
