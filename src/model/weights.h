// The one description of a model's weights: every parameter-holding module of the embeddings, of
// a decoder block and of the head, in the order the model holds them, each with its name, its
// shape from the configuration, whether it is a LoRA and quantisation target and whether the head
// is tied. Both step program builders lay the model out from it, and the parameter count and the
// formula read it, as llm.c's size tables are read everywhere.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/small_vector.h"
#include "model/lora.h"
#include "model/model_config.h"

namespace vrambench {

// Which part of the model a module is: the slot a builder files its parameters under.
enum class WeightPart : std::uint8_t {
  token_embedding,     // wte
  position_embedding,  // wpe (gpt: learned positions)
  // A decoder block's, in block order.
  norm1,           // gpt: ln_1 (weight and bias); llama: input_layernorm
  qkv,             // gpt: c_attn; llama: q_proj, k_proj and v_proj packed; Phi-3: qkv_proj
  q_norm,          // qk_norm: RMSNorm over each query head
  k_norm,          // qk_norm: likewise each key head
  proj,            // the attention's output projection: gpt c_proj, llama o_proj
  post_attn_norm,  // sandwich_norms: the attention output's norm
  norm2,           // gpt: ln_2; llama: post_attention_layernorm (Gemma 2, 3: pre_feedforward)
  post_mlp_norm,   // sandwich_norms: the MLP output's norm
  fc,              // gpt: c_fc; llama: gate_proj; Phi-3: gate_up_proj
  up,              // llama: up_proj (none where fused)
  out,             // gpt: the MLP's c_proj; llama: down_proj
  // An MoE layer's MLP (model_config.h, experts) instead of fc, up and out.
  router,           // the router (transformers' mlp.gate): [E, H], no bias
  experts_gate_up,  // mlp.experts.gate_up_proj [E, 2I, H]
  experts_down,     // mlp.experts.down_proj [E, H, I]
  final_norm,       // gpt: ln_f; llama: norm
  lm_head,          // untied only: a tied head is the token embedding
};

enum class WeightKind : std::uint8_t {
  embedding,  // a table [rows, cols]; its weight is named as the module
  norm,       // a scale [rows] and, for layernorm, a bias [rows]: "<name>.w", "<name>.b"
  linear,     // a weight [rows, cols] (out x in) and a bias [rows]: "<name>.w", "<name>.b"
  experts,    // one 3-D weight [experts, rows, cols]: every expert's linear, "<name>.w"
};

// The rows of a linear's weight that one LoRA target module owns (q, k and v share the packed
// q|k|v linear, each its own rows).
struct ModuleRows {
  LoraModule module;
  std::int64_t rows = 0;
};

// One parameter-holding module.
struct WeightModule {
  WeightPart part;
  WeightKind kind;
  std::string_view name;  // "wte", "ln_f", "lm_head"; a block's after its prefix: "attn.qkv"
  std::int64_t rows = 0;  // embedding: entries; norm: width; linear: output features
  std::int64_t cols = 0;  // embedding: hidden; linear: input features; norm: 0
  std::int64_t experts = 0;  // experts: how many linears the weight stacks; else 0
  bool bias = false;
  // A block linear's modules, in row order (their rows add up to `rows`): each a LoRA target, and
  // each quantised on its own under --quant (bitsandbytes stores what PEFT sees as one module as
  // one weight). None for every other module: the norms, the embeddings and the lm head, which
  // PEFT never targets and bitsandbytes leaves unquantised, as fine-tuning freezes them.
  std::array<ModuleRows, 3> module_rows{};
  std::uint8_t module_count = 0;

  std::span<const ModuleRows> modules() const { return {module_rows.data(), module_count}; }
  // Elements of the weight (rows x cols, or rows) and of the bias.
  std::int64_t weight_elements() const;
  std::int64_t parameters() const;
};

using WeightModules = SmallVector<WeightModule, 11>;

// The model's modules: the embeddings, then each of the L blocks (`block`, named after the block's
// prefix "layer<l>."), then the head. A mixture of experts' `block` is its MoE layer's; the layers
// that keep a dense MLP (Qwen3-MoE's mlp_only_layers) are `dense_block`.
struct ModelWeights {
  WeightModules embeddings;
  WeightModules block;
  WeightModules dense_block;
  WeightModules head;
  std::vector<bool> dense_layer;  // by layer, where the model mixes the two; else empty
  bool tied = false;              // the lm head is the token embedding (no lm_head module)

  // Layer l's modules.
  const WeightModules& layer(std::int64_t l) const {
    const auto i = static_cast<std::size_t>(l);
    return i < dense_layer.size() && dense_layer[i] ? dense_block : block;
  }
};

// The description of `m` for a step of `seq` tokens, which sizes the learned position table
// (position_rows); seq 0 gives the model's own table.
ModelWeights model_weights(const ModelConfig& m, std::int64_t seq = 0);
// A decoder block's modules (ModelWeights::block: an MoE layer's in a mixture of experts).
WeightModules block_modules(const ModelConfig& m);
// Whether a block module belongs to the MLP (fc, up, out, or the router and experts): what the
// lean mlp scope holds.
constexpr bool in_mlp(WeightPart part) {
  return part == WeightPart::fc || part == WeightPart::up || part == WeightPart::out ||
         part == WeightPart::router || part == WeightPart::experts_gate_up ||
         part == WeightPart::experts_down;
}

// Parameters of the whole model (embeddings, blocks, final norm, lm head), and of one block.
std::int64_t parameter_count(const ModelConfig& m);
// The parameters one token uses: parameter_count with each MoE layer's experts counted
// top-k times instead of E (= parameter_count for a dense model).
std::int64_t active_parameter_count(const ModelConfig& m);
std::int64_t layer_parameter_count(const ModelConfig& m);
// The parameters of the largest module that holds its own (an embedding, one linear: q_proj,
// k_proj and v_proj each on their own), as DeepSpeed's model_to_params counts its largest layer.
std::int64_t largest_module_parameters(const ModelConfig& m);

}  // namespace vrambench
