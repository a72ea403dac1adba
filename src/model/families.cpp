// The model families and their presets: transformers' field names per model_type, the defaults
// their config classes take where a config leaves a field out (transformers 5.x
// configuration_*.py), and the published config.json of each preset.
#include "model/families.h"

#include <fmt/format.h>

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/units.h"

namespace vrambench {
namespace {

// Families transformers has that the step program does not model yet, with what is missing:
// named in the refusal so that the user knows it is a gap, not a typo.
constexpr std::array<std::pair<std::string_view, std::string_view>, 2> kNotYet{{
    {"qwen2_moe", "its shared expert beside the routed ones"},
    {"gemma3",
     "its vision tower (a multimodal config: give its text_config as a gemma3_text "
     "config.json)"},
}};

// Whether the step program models `type`: one of kSupportedModelTypes, the list the refusals
// print.
bool is_supported(std::string_view type) {
  std::string_view rest = kSupportedModelTypes;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(", ");
    if (rest.substr(0, comma) == type) return true;
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 2);
  }
  return false;
}

// transformers' GPT2Config names: n_embd, n_head, n_layer, n_inner (null: 4 n_embd),
// n_positions (1024), tie_word_embeddings (true).
ModelConfig gpt2_model(const ConfigReader& r) {
  ModelConfig m;
  m.arch = Arch::gpt;
  m.hidden = r.required("n_embd", "gpt2");
  m.heads = r.required("n_head", "gpt2");
  m.kv_heads = m.heads;
  m.layers = r.required("n_layer", "gpt2");
  m.ffn = r.optional("n_inner", 0);
  if (m.ffn == 0) m.ffn = checked_mul(m.hidden, 4, "4 x n_embd (n_inner left out)");
  m.vocab = r.required("vocab_size", "gpt2");
  m.max_positions = r.optional("n_positions", 1024);
  m.tied_embeddings = r.flag("tie_word_embeddings", true);
  return m;
}

// The mixture-of-experts fields of MixtralConfig, Qwen3MoeConfig and OlmoeConfig, with their
// classes' defaults: the experts (num_local_experts 8 / num_experts 128 / 64), the top-k
// (num_experts_per_tok 2 / 8 / 8), the experts' width (Mixtral's and OLMoE's intermediate_size,
// Qwen3-MoE's moe_intermediate_size 768), which layers are MoE (Qwen3-MoE's decoder_sparse_step
// and mlp_only_layers; every layer of the others), the top-k renormalisation (always for Mixtral,
// norm_topk_prob for the others, default false), the load-balancing loss (output_router_logits,
// router_aux_loss_coef 0.001 / 0.001 / 0.01). OLMoE's q_norm and k_norm span the whole
// projections. What the step does not model is refused by name: Mixtral's router jitter noise,
// OLMoE's clip_qkv.
void read_experts(const ConfigReader& r, std::string_view type, ModelConfig& m) {
  const bool mixtral = type == "mixtral", qwen = type == "qwen3_moe";
  m.experts = mixtral ? r.optional("num_local_experts", r.optional("num_experts", 8))
                      : r.optional("num_experts", r.optional("num_local_experts", qwen ? 128 : 64));
  m.experts_per_token = r.optional("num_experts_per_tok", mixtral ? 2 : 8);
  if (m.experts_per_token > m.experts)
    r.fail(fmt::format("num_experts_per_tok {} is more than the {} experts", m.experts_per_token,
                       m.experts));
  m.expert_ffn = qwen ? r.optional("moe_intermediate_size", 768) : m.ffn;
  if (qwen) {
    m.sparse_step = r.optional("decoder_sparse_step", 1);
    m.dense_layers = r.index_list("mlp_only_layers", m.layers);
  }
  m.norm_topk = mixtral || r.flag("norm_topk_prob", false);
  m.router_scores_f32 = mixtral;
  m.router_aux_loss = r.flag("output_router_logits", false);
  m.router_aux_coef = r.non_negative("router_aux_loss_coef", type == "olmoe" ? 0.01 : 0.001);
  if (mixtral && r.non_negative("router_jitter_noise", 0.0) > 0.0)
    r.fail("router_jitter_noise > 0 (noise on the router's input in training) is not modelled yet");
  if (type == "olmoe") {
    if (r.positive_or_null("clip_qkv", 0.0) > 0.0)
      r.fail("clip_qkv (an in-place clamp of q, k and v) is not modelled yet");
    if (m.kv_heads != m.heads)
      r.fail("an OLMoE config with num_key_value_heads != num_attention_heads is not modelled yet");
    m.qk_norm_full_width = true;
  }
}

// Sliding-window attention as each config class sets it up: the window (sliding_window; null: none)
// with the class's default where the config leaves it out (4096 for Gemma 2 and 3 and Mistral,
// none for Phi-3 and Mixtral; Qwen2 and Qwen3 only with use_sliding_window, default false), and
// its layers: layer_types' "sliding_attention" where the config lists the kinds, else the class's
// pattern (Gemma 2 every other layer from the first, Gemma 3 all but every
// sliding_window_pattern-th (6), Qwen the layers from max_window_layers (28) on, the others every
// layer). Llama, the first Gemma and OLMoE have none.
void read_sliding_window(const ConfigReader& r, std::string_view type, ModelConfig& m) {
  const bool gemma2 = type == "gemma2", gemma3 = type == "gemma3_text";
  const bool qwen = type == "qwen2" || type == "qwen3" || type == "qwen3_moe";
  std::int64_t fallback = 0;
  if (gemma2 || gemma3 || type == "mistral" || (qwen && r.flag("use_sliding_window", false)))
    fallback = 4096;
  else if (type != "phi3" && type != "mixtral")
    return;
  m.sliding_window = r.has("sliding_window") ? r.optional("sliding_window", 0) : fallback;
  if (m.sliding_window == 0) return;
  m.mask_per_layer_kind = gemma2 || gemma3 || qwen;
  if (auto listed = r.layers_of_kind("layer_types", m.layers, "sliding_attention")) {
    m.sliding_layers = std::move(*listed);
    return;
  }
  const std::int64_t pattern = gemma3 ? r.optional("sliding_window_pattern", 6) : 0;
  const std::int64_t first = qwen ? r.optional("max_window_layers", 28) : 0;
  for (std::int64_t l = 0; l < m.layers; ++l)
    if ((gemma2 && l % 2 == 0) || (gemma3 && (l + 1) % pattern != 0) || (qwen && l >= first) ||
        (!gemma2 && !gemma3 && !qwen))
      m.sliding_layers.push_back(l);
}

// The llama-style families: LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, GemmaConfig,
// Gemma2Config, Gemma3TextConfig, Phi3Config. Their common fields: hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads (the heads when
// left out), head_dim (the class's default when left out: hidden / heads, 128 for Qwen3, 256 for
// Gemma), vocab_size, tie_word_embeddings (true for Gemma, false for the rest). Biases: Llama's
// attention_bias on q, k, v and o and mlp_bias on gate, up and down; Qwen3's and Gemma's
// attention_bias on q, k, v and o; Qwen2's q, k and v always (modeling_qwen2.py: bias=True);
// Mistral and Phi-3 none. What the family's modeling_*.py does besides: ModelConfig's flags.
ModelConfig llama_model(const ConfigReader& r, std::string_view type) {
  const bool gemma = type.starts_with("gemma");
  ModelConfig m;
  m.arch = Arch::llama;
  m.hidden = r.required("hidden_size", type);
  m.ffn = r.required("intermediate_size", type);
  m.layers = r.required("num_hidden_layers", type);
  m.heads = r.required("num_attention_heads", type);
  m.kv_heads = r.optional("num_key_value_heads", m.heads);
  m.vocab = r.required("vocab_size", type);
  m.max_positions = 1;  // rotary: no learned position table
  m.tied_embeddings = r.flag("tie_word_embeddings", gemma);
  const std::int64_t default_head_dim = type == "qwen3" || type == "qwen3_moe" ? 128
                                        : gemma                                ? 256
                                                                               : 0;
  const std::int64_t head_dim = r.optional("head_dim", default_head_dim);
  if (head_dim > 0 && !(m.hidden % m.heads == 0 && head_dim == m.hidden / m.heads))
    m.explicit_head_dim = head_dim;
  if (type == "llama" || type == "qwen3" || type == "qwen3_moe" || type == "olmoe" || gemma)
    m.qkv_bias = m.o_bias = r.flag("attention_bias", false);
  if (type == "llama") m.mlp_bias = r.flag("mlp_bias", false);
  m.qkv_bias = m.qkv_bias || type == "qwen2";
  m.qk_norm = type == "qwen3" || type == "qwen3_moe" || type == "olmoe" || type == "gemma3_text";
  if (gemma) {
    m.offset_norms = m.embed_scale = true;
    // gelu_pytorch_tanh; Gemma's config turns a legacy "gelu" into it.
    const std::string act =
        r.text(type == "gemma" ? "hidden_act" : "hidden_activation", "gelu_pytorch_tanh");
    if (!act.starts_with("gelu"))
      r.fail(fmt::format("activation '{}': a {} MLP is modelled with gelu (tanh)", act, type));
    m.gelu_mlp = true;
  }
  if (type == "gemma2" || type == "gemma3_text") m.sandwich_norms = true;
  m.fused_attention_is_fa2 = type == "gemma2";
  // Phi-3 (and Phi-4, whose configs say phi3): qkv_proj and gate_up_proj, and resid_pdrop's
  // dropouts on both branches.
  m.fused_linears = m.resid_dropout = type == "phi3";
  if (type == "mixtral" || type == "qwen3_moe" || type == "olmoe") read_experts(r, type, m);
  read_sliding_window(r, type, m);
  if (type == "gemma2") {
    m.attn_softcap = r.positive_or_null("attn_logit_softcapping", 50.0);
    m.final_softcap = r.positive_or_null("final_logit_softcapping", 30.0);
  } else if (type == "gemma3_text") {
    m.attn_softcap = r.positive_or_null("attn_logit_softcapping", 0.0);
    m.final_softcap = r.positive_or_null("final_logit_softcapping", 0.0);
  }
  return m;
}

// A preset is its model's config.json, read by the reader --model uses (model/model_file.h). The
// configs carry the fields that shape memory, with the values each model's published config.json
// on the Hugging Face hub gives (huggingface.co/<org>/<model>/blob/main/config.json):
//   gpt2*         openai-community/gpt2, gpt2-medium, gpt2-large, gpt2-xl
//   llama2-*      meta-llama/Llama-2-7b-hf, Llama-2-13b-hf
//   llama3-8b, llama3.1-8b   meta-llama/Meta-Llama-3-8B, Llama-3.1-8B (the same shape)
//   llama3.2-*    meta-llama/Llama-3.2-1B, Llama-3.2-3B (tie_word_embeddings true)
//   llama3.3-70b  meta-llama/Llama-3.3-70B-Instruct
//   mistral-7b    mistralai/Mistral-7B-v0.3;  mistral-nemo-12b  mistralai/Mistral-Nemo-Base-2407
//                 (head_dim 128 where 5120 / 32 heads would be 160)
//   qwen2.5-*     Qwen/Qwen2.5-0.5B ... Qwen2.5-72B (q/k/v biases; the small three tie their head)
//   qwen3-*       Qwen/Qwen3-0.6B ... Qwen3-32B (q/k norms, head_dim 128; the small three tie)
//   gemma-*       google/gemma-2b, gemma-7b (GeGLU, (1 + w) norms, scaled embeddings, tied)
//   gemma2-*      google/gemma-2-2b, gemma-2-9b, gemma-2-27b (four norms a block, soft-capping)
//   gemma3-*      google/gemma-3-1b-pt (gemma3_text), and the text_config of gemma-3-4b-pt,
//                 gemma-3-12b-pt, gemma-3-27b-pt (vocab_size left out there: Gemma3TextConfig's
//                 262208) as gemma3_text configs: the language model alone
//   mixtral-8x7b  mistralai/Mixtral-8x7B-v0.1;  qwen3-30b-a3b  Qwen/Qwen3-30B-A3B;
//   olmoe-1b-7b   allenai/OLMoE-1B-7B-0924 (mixtures of experts)
//   phi3.5-mini   microsoft/Phi-3.5-mini-instruct;  phi4  microsoft/phi-4 (model_type phi3: fused
//                 qkv_proj and gate_up_proj)
struct PresetConfig {
  std::string_view name, description, config;
};

constexpr std::array<PresetConfig, 49> kPresetConfigs{{
    {"tiny", "2-layer GPT for tests (H=64, A=4, V=256)",
     R"({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 256,
         "n_positions": 256})"},
    {"tiny-llama", "2-layer Llama for tests (H=64, A=4, KV=2, V=256)",
     R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 176,
         "vocab_size": 256})"},
    {"tiny-qwen3", "2-layer Qwen3 for tests (q/k norms, head_dim 16, tied embeddings)",
     R"({"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2,
         "intermediate_size": 176, "vocab_size": 256, "tie_word_embeddings": true})"},
    {"tiny-gemma2", "2-layer Gemma 2 for tests (head_dim 32, soft-capping at 5 and 10)",
     R"({"model_type": "gemma2", "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 32, "num_hidden_layers": 2,
         "intermediate_size": 176, "vocab_size": 256, "attn_logit_softcapping": 5.0,
         "final_logit_softcapping": 10.0})"},
    {"tiny-gemma3", "2-layer Gemma 3 for tests (q/k norms, four norms a block)",
     R"({"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2,
         "intermediate_size": 176, "vocab_size": 256})"},
    {"tiny-phi3", "2-layer Phi-3 for tests (fused qkv_proj and gate_up_proj)",
     R"({"model_type": "phi3", "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 176,
         "vocab_size": 256})"},
    {"tiny-mixtral", "2-layer Mixtral for tests (4 experts, top-2)",
     R"({"model_type": "mixtral", "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 96,
         "vocab_size": 256, "num_local_experts": 4, "num_experts_per_tok": 2})"},
    {"tiny-qwen3-moe", "2-layer Qwen3-MoE for tests (8 experts, top-2, layer 0 dense)",
     R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2,
         "intermediate_size": 176, "moe_intermediate_size": 32, "vocab_size": 256,
         "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": true,
         "mlp_only_layers": [0]})"},
    {"tiny-olmoe", "2-layer OLMoE for tests (8 experts, top-2, full-width q/k norms)",
     R"({"model_type": "olmoe", "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 4, "num_hidden_layers": 2, "intermediate_size": 32,
         "vocab_size": 256, "num_experts": 8, "num_experts_per_tok": 2})"},
    {"gpt2", "GPT-2 small, 124M",
     R"({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "vocab_size": 50257,
         "n_positions": 1024})"},
    {"gpt2-medium", "GPT-2 medium, 355M",
     R"({"model_type": "gpt2", "n_embd": 1024, "n_head": 16, "n_layer": 24, "vocab_size": 50257,
         "n_positions": 1024})"},
    {"gpt2-large", "GPT-2 large, 774M",
     R"({"model_type": "gpt2", "n_embd": 1280, "n_head": 20, "n_layer": 36, "vocab_size": 50257,
         "n_positions": 1024})"},
    {"gpt2-xl", "GPT-2 XL, 1.5B",
     R"({"model_type": "gpt2", "n_embd": 1600, "n_head": 25, "n_layer": 48, "vocab_size": 50257,
         "n_positions": 1024})"},
    {"llama2-7b", "Llama 2 7B",
     R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 32, "num_hidden_layers": 32, "intermediate_size": 11008,
         "vocab_size": 32000})"},
    {"llama2-13b", "Llama 2 13B",
     R"({"model_type": "llama", "hidden_size": 5120, "num_attention_heads": 40,
         "num_key_value_heads": 40, "num_hidden_layers": 40, "intermediate_size": 13824,
         "vocab_size": 32000})"},
    {"llama3-8b", "Llama 3 8B (GQA, 8 KV heads)",
     R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
         "vocab_size": 128256})"},
    {"llama3.1-8b", "Llama 3.1 8B (GQA, 8 KV heads)",
     R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
         "vocab_size": 128256})"},
    {"llama3.2-1b", "Llama 3.2 1B (GQA, tied embeddings)",
     R"({"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32,
         "num_key_value_heads": 8, "num_hidden_layers": 16, "intermediate_size": 8192,
         "vocab_size": 128256, "tie_word_embeddings": true})"},
    {"llama3.2-3b", "Llama 3.2 3B (GQA, tied embeddings)",
     R"({"model_type": "llama", "hidden_size": 3072, "num_attention_heads": 24,
         "num_key_value_heads": 8, "num_hidden_layers": 28, "intermediate_size": 8192,
         "vocab_size": 128256, "tie_word_embeddings": true})"},
    {"llama3.3-70b", "Llama 3.3 70B (GQA, 8 KV heads)",
     R"({"model_type": "llama", "hidden_size": 8192, "num_attention_heads": 64,
         "num_key_value_heads": 8, "num_hidden_layers": 80, "intermediate_size": 28672,
         "vocab_size": 128256})"},
    {"mistral-7b", "Mistral 7B v0.3 (GQA, 8 KV heads)",
     R"({"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
         "vocab_size": 32768, "sliding_window": null})"},
    {"mistral-nemo-12b", "Mistral Nemo 12B (GQA, head_dim 128, 131k vocabulary)",
     R"({"model_type": "mistral", "hidden_size": 5120, "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 40,
         "intermediate_size": 14336, "vocab_size": 131072,
         "sliding_window": null})"},
    {"qwen2.5-0.5b", "Qwen2.5 0.5B (GQA, q/k/v biases, tied embeddings)",
     R"({"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14,
         "num_key_value_heads": 2, "num_hidden_layers": 24, "intermediate_size": 4864,
         "vocab_size": 151936, "tie_word_embeddings": true})"},
    {"qwen2.5-1.5b", "Qwen2.5 1.5B (GQA, q/k/v biases, tied embeddings)",
     R"({"model_type": "qwen2", "hidden_size": 1536, "num_attention_heads": 12,
         "num_key_value_heads": 2, "num_hidden_layers": 28, "intermediate_size": 8960,
         "vocab_size": 151936, "tie_word_embeddings": true})"},
    {"qwen2.5-3b", "Qwen2.5 3B (GQA, q/k/v biases, tied embeddings)",
     R"({"model_type": "qwen2", "hidden_size": 2048, "num_attention_heads": 16,
         "num_key_value_heads": 2, "num_hidden_layers": 36, "intermediate_size": 11008,
         "vocab_size": 151936, "tie_word_embeddings": true})"},
    {"qwen2.5-7b", "Qwen2.5 7B (GQA, q/k/v biases, 152k vocabulary)",
     R"({"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
         "num_key_value_heads": 4, "num_hidden_layers": 28, "intermediate_size": 18944,
         "vocab_size": 152064})"},
    {"qwen2.5-14b", "Qwen2.5 14B (GQA, q/k/v biases)",
     R"({"model_type": "qwen2", "hidden_size": 5120, "num_attention_heads": 40,
         "num_key_value_heads": 8, "num_hidden_layers": 48, "intermediate_size": 13824,
         "vocab_size": 152064})"},
    {"qwen2.5-32b", "Qwen2.5 32B (GQA, q/k/v biases)",
     R"({"model_type": "qwen2", "hidden_size": 5120, "num_attention_heads": 40,
         "num_key_value_heads": 8, "num_hidden_layers": 64, "intermediate_size": 27648,
         "vocab_size": 152064})"},
    {"qwen2.5-72b", "Qwen2.5 72B (GQA, q/k/v biases)",
     R"({"model_type": "qwen2", "hidden_size": 8192, "num_attention_heads": 64,
         "num_key_value_heads": 8, "num_hidden_layers": 80, "intermediate_size": 29568,
         "vocab_size": 152064})"},
    {"qwen3-0.6b", "Qwen3 0.6B (GQA, q/k norms, tied embeddings)",
     R"({"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16,
         "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 28,
         "intermediate_size": 3072, "vocab_size": 151936, "tie_word_embeddings": true})"},
    {"qwen3-1.7b", "Qwen3 1.7B (GQA, q/k norms, tied embeddings)",
     R"({"model_type": "qwen3", "hidden_size": 2048, "num_attention_heads": 16,
         "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 28,
         "intermediate_size": 6144, "vocab_size": 151936, "tie_word_embeddings": true})"},
    {"qwen3-4b", "Qwen3 4B (GQA, q/k norms, tied embeddings)",
     R"({"model_type": "qwen3", "hidden_size": 2560, "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 36,
         "intermediate_size": 9728, "vocab_size": 151936, "tie_word_embeddings": true})"},
    {"qwen3-8b", "Qwen3 8B (GQA, q/k norms)",
     R"({"model_type": "qwen3", "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 36,
         "intermediate_size": 12288, "vocab_size": 151936, "tie_word_embeddings": false})"},
    {"qwen3-14b", "Qwen3 14B (GQA, q/k norms)",
     R"({"model_type": "qwen3", "hidden_size": 5120, "num_attention_heads": 40,
         "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 40,
         "intermediate_size": 17408, "vocab_size": 151936, "tie_word_embeddings": false})"},
    {"qwen3-32b", "Qwen3 32B (GQA, q/k norms)",
     R"({"model_type": "qwen3", "hidden_size": 5120, "num_attention_heads": 64,
         "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 64,
         "intermediate_size": 25600, "vocab_size": 151936, "tie_word_embeddings": false})"},
    {"gemma-2b", "Gemma 2B (MQA, head_dim 256, GeGLU)",
     R"({"model_type": "gemma", "hidden_size": 2048, "num_attention_heads": 8,
         "num_key_value_heads": 1, "head_dim": 256, "num_hidden_layers": 18,
         "intermediate_size": 16384, "vocab_size": 256000, "hidden_act": "gelu"})"},
    {"gemma-7b", "Gemma 7B (head_dim 256, GeGLU)",
     R"({"model_type": "gemma", "hidden_size": 3072, "num_attention_heads": 16,
         "num_key_value_heads": 16, "head_dim": 256, "num_hidden_layers": 28,
         "intermediate_size": 24576, "vocab_size": 256000, "hidden_act": "gelu"})"},
    {"gemma2-2b", "Gemma 2 2B (GQA, four norms a block, soft-capping)",
     R"({"model_type": "gemma2", "hidden_size": 2304, "num_attention_heads": 8,
         "num_key_value_heads": 4, "head_dim": 256, "num_hidden_layers": 26,
         "intermediate_size": 9216, "vocab_size": 256000,
         "hidden_activation": "gelu_pytorch_tanh", "attn_logit_softcapping": 50.0,
         "final_logit_softcapping": 30.0})"},
    {"gemma2-9b", "Gemma 2 9B (GQA, four norms a block, soft-capping)",
     R"({"model_type": "gemma2", "hidden_size": 3584, "num_attention_heads": 16,
         "num_key_value_heads": 8, "head_dim": 256, "num_hidden_layers": 42,
         "intermediate_size": 14336, "vocab_size": 256000,
         "hidden_activation": "gelu_pytorch_tanh", "attn_logit_softcapping": 50.0,
         "final_logit_softcapping": 30.0})"},
    {"gemma2-27b", "Gemma 2 27B (GQA, head_dim 128, four norms a block, soft-capping)",
     R"({"model_type": "gemma2", "hidden_size": 4608, "num_attention_heads": 32,
         "num_key_value_heads": 16, "head_dim": 128, "num_hidden_layers": 46,
         "intermediate_size": 36864, "vocab_size": 256000,
         "hidden_activation": "gelu_pytorch_tanh", "attn_logit_softcapping": 50.0,
         "final_logit_softcapping": 30.0})"},
    {"gemma3-1b", "Gemma 3 1B (MQA, q/k norms, four norms a block)",
     R"({"model_type": "gemma3_text", "hidden_size": 1152, "num_attention_heads": 4,
         "num_key_value_heads": 1, "head_dim": 256, "num_hidden_layers": 26,
         "intermediate_size": 6912, "vocab_size": 262144, "attn_logit_softcapping": null,
         "final_logit_softcapping": null, "sliding_window": 512,
         "sliding_window_pattern": 6})"},
    {"gemma3-4b", "Gemma 3 4B, text (GQA, q/k norms, four norms a block)",
     R"({"model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 34,
         "intermediate_size": 10240, "num_attention_heads": 8, "num_key_value_heads": 4,
         "vocab_size": 262208, "sliding_window": 1024,
         "sliding_window_pattern": 6})"},
    {"gemma3-12b", "Gemma 3 12B, text (GQA, q/k norms, four norms a block)",
     R"({"model_type": "gemma3_text", "hidden_size": 3840, "num_attention_heads": 16,
         "num_key_value_heads": 8, "num_hidden_layers": 48, "intermediate_size": 15360,
         "vocab_size": 262208, "sliding_window": 1024,
         "sliding_window_pattern": 6})"},
    {"gemma3-27b", "Gemma 3 27B, text (GQA, head_dim 128, q/k norms, four norms a block)",
     R"({"model_type": "gemma3_text", "hidden_size": 5376, "num_attention_heads": 32,
         "num_key_value_heads": 16, "head_dim": 128, "num_hidden_layers": 62,
         "intermediate_size": 21504, "vocab_size": 262208,
         "sliding_window": 1024, "sliding_window_pattern": 6})"},
    {"mixtral-8x7b", "Mixtral 8x7B (8 experts, top-2; 12.9B active)",
     R"({"model_type": "mixtral", "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
         "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
         "output_router_logits": false, "router_aux_loss_coef": 0.02,
         "router_jitter_noise": 0.0, "tie_word_embeddings": false})"},
    {"qwen3-30b-a3b", "Qwen3-30B-A3B (128 experts, top-8; 3.3B active)",
     R"({"model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 32,
         "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48,
         "intermediate_size": 6144, "moe_intermediate_size": 768, "vocab_size": 151936,
         "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true,
         "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": false,
         "router_aux_loss_coef": 0.001, "tie_word_embeddings": false})"},
    {"olmoe-1b-7b", "OLMoE 1B-7B (64 experts, top-8; 1.3B active)",
     R"({"model_type": "olmoe", "hidden_size": 2048, "num_attention_heads": 16,
         "num_key_value_heads": 16, "num_hidden_layers": 16, "intermediate_size": 1024,
         "vocab_size": 50304, "num_experts": 64, "num_experts_per_tok": 8,
         "norm_topk_prob": false, "clip_qkv": null, "output_router_logits": false,
         "router_aux_loss_coef": 0.01, "tie_word_embeddings": false})"},
    {"phi3.5-mini", "Phi-3.5 mini 3.8B (fused qkv and gate_up projections)",
     R"({"model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32,
         "num_key_value_heads": 32, "num_hidden_layers": 32, "intermediate_size": 8192,
         "vocab_size": 32064, "tie_word_embeddings": false,
         "sliding_window": 262144})"},
    {"phi4", "Phi-4 14B (GQA, 10 KV heads, fused qkv and gate_up projections)",
     R"({"model_type": "phi3", "hidden_size": 5120, "num_attention_heads": 40,
         "num_key_value_heads": 10, "num_hidden_layers": 40, "intermediate_size": 17920,
         "vocab_size": 100352, "tie_word_embeddings": false})"},
}};

const std::vector<Preset>& preset_table() {
  static const std::vector<Preset> table = [] {
    std::vector<Preset> out;
    for (const PresetConfig& p : kPresetConfigs)
      out.push_back(
          {p.name, p.description, model_from_config_text(p.config, std::string(p.name), "")});
    return out;
  }();
  return table;
}

}  // namespace

ModelConfig family_model(const ConfigReader& r, std::string_view type) {
  if (type == "gpt2") return gpt2_model(r);
  if (is_supported(type)) return llama_model(r, type);  // the llama-style families
  for (const auto& [family, missing] : kNotYet)
    if (type == family)
      r.fail(fmt::format("model_type '{}' is not modelled yet ({}); supported: {}", type, missing,
                         kSupportedModelTypes));
  const bool multimodal = r.has("text_config") || r.has("vision_config");
  const bool experts = r.has("num_local_experts") || r.has("num_experts");
  r.fail(fmt::format("unsupported model_type '{}'{}; supported: {}", type,
                     multimodal ? " (a multimodal config)"
                     : experts  ? " (a mixture of experts)"
                                : "",
                     kSupportedModelTypes));
}

std::span<const Preset> presets() {
  return preset_table();
}

const Preset& find_preset(std::string_view name) {
  for (const Preset& p : preset_table())
    if (p.name == name) return p;
  std::string known;
  for (const Preset& p : preset_table()) known += (known.empty() ? "" : ", ") + std::string(p.name);
  throw UsageError(fmt::format("unknown --preset '{}': known presets are {}", name, known));
}

}  // namespace vrambench
