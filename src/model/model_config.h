// A model's architecture and sizes (ModelConfig), and the sub-formulas of its shapes that the step
// program, the weights description and the kernels all need, written once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/enum_names.h"

namespace vrambench {

enum class Arch { gpt, llama };

std::string_view to_string(Arch v);
template <>
EnumNames<Arch> enum_names<Arch>();

struct ModelConfig {
  std::string name = "custom";  // preset name, or "custom"
  Arch arch = Arch::gpt;
  std::int64_t hidden = 768;          // H
  std::int64_t heads = 12;            // A
  std::int64_t kv_heads = 12;         // grouped-query attention: key/value heads (== heads for MHA)
  std::int64_t layers = 12;           // L
  std::int64_t ffn = 3072;            // F
  std::int64_t vocab = 50257;         // V
  std::int64_t max_positions = 1024;  // learned positions (gpt only)
  bool tied_embeddings = true;        // lm head shares the token embedding (gpt2) or not (llama)
  bool qkv_bias = false;              // llama-style blocks with q/k/v biases (Qwen2); gpt has them
  bool o_bias = false;                // llama-style: the attention output projection's bias
  bool mlp_bias = false;              // llama-style: gate, up and down biases
  // A config's head_dim where it is not hidden / heads (Mistral Nemo: 5120 / 32 heads of 128);
  // 0: hidden / heads.
  std::int64_t explicit_head_dim = 0;
  // What blocks of other families change in the llama block (docs/memory-model.md, "Model
  // families"); all off for gpt2, llama, mistral and qwen2.
  bool qk_norm = false;         // Qwen3, Gemma 3: an RMSNorm over each query and key head ([D])
  bool sandwich_norms = false;  // Gemma 2 and 3: norms after attention and after the MLP too
  bool offset_norms = false;    // Gemma: RMSNorm scales by (1 + weight), computed in fp32
  bool embed_scale = false;     // Gemma: the embeddings times sqrt(hidden)
  bool gelu_mlp = false;        // Gemma: GeGLU, gelu (tanh) of the gate instead of SiLU
  double attn_softcap = 0.0;    // Gemma 2: scores -> cap tanh(scores / cap); 0: none
  double final_softcap = 0.0;   // Gemma 2: the logits likewise
  // Phi-3: one qkv_proj for q, k and v and one gate_up_proj for gate and up, each a single
  // module to LoRA and a single output that q, k, v (gate, up) are views of.
  bool fused_linears = false;
  bool resid_dropout = false;  // Phi-3: dropout (resid_pdrop) on the attention and MLP outputs
  // OLMoE: q_norm and k_norm are RMSNorms over the whole q and k projections ([A*D] and [K*D]),
  // not over each head.
  bool qk_norm_full_width = false;
  // A mixture of experts (Mixtral, Qwen3-MoE, OLMoE; 0 experts: a dense model). The MLP of each
  // MoE layer is a router [E, H] and E experts of width expert_ffn, stored as transformers 5
  // stores them: gate|up [E, 2 I, H] and down [E, H, I], one 3-D parameter each. Every token goes
  // to its top `experts_per_token` experts (model/moe.h).
  std::int64_t experts = 0;            // E: num_local_experts (Mixtral), num_experts
  std::int64_t experts_per_token = 0;  // k: num_experts_per_tok
  std::int64_t expert_ffn = 0;         // I: moe_intermediate_size (Mixtral: intermediate_size)
  // Which layers are MoE: every sparse_step-th (decoder_sparse_step), except mlp_only_layers,
  // which keep a dense MLP of width ffn (Qwen3-MoE).
  std::int64_t sparse_step = 1;
  std::vector<std::int64_t> dense_layers;
  bool norm_topk = true;           // the top-k weights renormalised to sum to 1 (norm_topk_prob)
  bool router_scores_f32 = false;  // Mixtral: the routing weights stay fp32 (else cast back)
  // output_router_logits: the load-balancing loss over every layer's router logits, added to the
  // loss times router_aux_loss_coef.
  bool router_aux_loss = false;
  double router_aux_coef = 0.0;
  // Sliding-window attention (Gemma 2 and 3, Phi-3 mini 4k, Mistral v0.1, Qwen2 and Qwen3 with
  // use_sliding_window): the window in tokens (0: none) and the layers that use it (layer_types'
  // "sliding_attention"). At a sequence of the window or longer, transformers hands sdpa a
  // boolean mask for those layers, which sdpa turns into an additive one per layer and saves.
  std::int64_t sliding_window = 0;
  std::vector<std::int64_t> sliding_layers;
  // Gemma 2 and 3, Qwen2 and Qwen3: the model makes a mask per kind of layer (full and sliding)
  // whether or not a layer of each kind is there; the others make the one their window says.
  bool mask_per_layer_kind = false;
  // Gemma 2: transformers has no sdpa path for it (sdpa does not soft-cap), so its fused
  // attention is flash-attention 2, which takes the window inside the kernel: no mask.
  bool fused_attention_is_fa2 = false;
  // The config.json the model was read from (--model), "" for a preset or a shape given by hand.
  std::string source;
  // Its transformers model_type ("llama", "qwen3", "gpt2"), "" for a shape given by hand.
  std::string model_type;
  // The dtype its config.json stores the weights in (dtype, or torch_dtype: float32, float16,
  // bfloat16): the run's --dtype where none is given. None for presets and hand-given shapes.
  std::optional<DType> dtype;

  std::int64_t head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : hidden / heads;
  }
  // The attention's output width, heads x head_dim: the output projection's input.
  std::int64_t attention_width() const { return heads * head_dim(); }
  bool operator==(const ModelConfig&) const = default;
};

// Columns of the packed q|k|v projection: `heads` query heads, then `kv_heads` key and `kv_heads`
// value heads, each `head_dim` wide: (A + 2K) * D.
constexpr std::int64_t qkv_width(std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim) {
  return (heads + 2 * kv_heads) * head_dim;
}
inline std::int64_t qkv_width(const ModelConfig& m) {
  return qkv_width(m.heads, m.kv_heads, m.head_dim());
}
// Whether the model is a mixture of experts, and whether its layer `layer` has the MoE MLP.
inline bool is_moe(const ModelConfig& m) {
  return m.experts > 0;
}
inline bool moe_layer(const ModelConfig& m, std::int64_t layer) {
  return is_moe(m) && (layer + 1) % m.sparse_step == 0 &&
         std::find(m.dense_layers.begin(), m.dense_layers.end(), layer) == m.dense_layers.end();
}
// Whether layer `layer` attends within a sliding window.
inline bool sliding_layer(const ModelConfig& m, std::int64_t layer) {
  return m.sliding_window > 0 && std::find(m.sliding_layers.begin(), m.sliding_layers.end(),
                                           layer) != m.sliding_layers.end();
}
// Whether layer `layer`'s fused attention (sdpa) gets a mask at sequence `seq`: a sliding-window
// layer at a sequence of the window or longer (transformers' _ignore_causal_mask_sdpa; shorter
// ones run causal without a mask), but under flash-attention 2.
inline bool sliding_mask_at(const ModelConfig& m, std::int64_t layer, std::int64_t seq) {
  return !m.fused_attention_is_fa2 && seq >= m.sliding_window && sliding_layer(m, layer);
}
// Whether any layer's sdpa attention gets one at sequence `seq`.
inline bool sliding_masks_at(const ModelConfig& m, std::int64_t seq) {
  return std::any_of(m.sliding_layers.begin(), m.sliding_layers.end(),
                     [&](std::int64_t layer) { return sliding_mask_at(m, layer, seq); });
}
// Token-expert pairs a step of `tokens` tokens routes: tokens x top-k, the rows of every dispatch
// tensor.
inline std::int64_t routed_rows(const ModelConfig& m, std::int64_t tokens) {
  return tokens * m.experts_per_token;
}

// Rows of the learned position table a step of `seq` tokens has: the model's, or one per position
// when the sequence is longer (so long sequences stay buildable); none for llama (rotary).
inline std::int64_t position_rows(const ModelConfig& m, std::int64_t seq) {
  return m.arch == Arch::gpt ? std::max(m.max_positions, seq) : 0;
}

}  // namespace vrambench
