// The LoRA module table: the linear modules of a block that LoRA can target, by the names PEFT's
// target_modules use, and what --lora-targets names.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/small_vector.h"
#include "model/model_config.h"

namespace vrambench {

// llama-style blocks have q, k, v, o, gate, up, down (q_proj ...); gpt-style blocks have the packed
// c_attn, the attention's c_proj, c_fc and the MLP's c_proj ("c_proj" names both, as in PEFT);
// llama-style blocks with fused linears (Phi-3) have qkv_proj, o_proj, gate_up_proj and down_proj;
// an MoE layer's experts are two 3-D parameters, which PEFT adapts through target_parameters
// ("experts.gate_up_proj", "experts.down_proj"), one adapter each of rank r per expert.
enum class LoraModule : std::uint8_t {
  q,
  k,
  v,
  o,
  gate,
  up,
  down,
  c_attn,
  attn_c_proj,
  c_fc,
  mlp_c_proj,
  qkv_proj,
  gate_up_proj,
  experts_gate_up,
  experts_down
};
inline constexpr int kLoraModuleCount = 15;

// What --lora-targets names: modules, or a shorthand resolved per architecture.
struct LoraTargets {
  std::uint16_t modules = 0;  // bit (1 << LoraModule)
  enum class Shorthand : std::uint8_t { none, attn, attn_mlp, all_linear, peft_default };
  Shorthand shorthand = Shorthand::none;
  bool operator==(const LoraTargets&) const = default;
  auto operator<=>(const LoraTargets&) const = default;
};
// Module names separated by ',' or '+' ("q_proj,v_proj", "c_attn+c_proj"), or one of the
// shorthands attn (every attention projection), attn-mlp and all-linear (every block linear; the
// lm head is never a target, as in PEFT), and peft-default (what PEFT targets when
// target_modules is None: gpt2's c_attn, llama's q_proj and v_proj; PEFT has none for Phi-3, which
// validate() refuses). Throws UsageError naming the unknown module.
LoraTargets parse_lora_targets(std::string_view text);
// The shorthand's name, or the modules joined by '+' (sweepable: a sweep splits its values on ',').
std::string to_string(const LoraTargets& targets);
// Whether `module` is targeted in `model` (a module its blocks do not have never is).
bool lora_targets_module(const LoraTargets& targets, const ModelConfig& model, LoraModule module);
// The modules of the model's blocks, in block order: its block linears' (model/weights.h).
using LoraModules = SmallVector<LoraModule, 12>;
LoraModules lora_modules(const ModelConfig& model);
// Their names, joined by ',' ("q_proj,k_proj,...").
std::string lora_module_list(const ModelConfig& model);
// PEFT's name of the module: "q_proj", "c_attn", "c_proj".
std::string_view lora_module_name(LoraModule module);

}  // namespace vrambench
