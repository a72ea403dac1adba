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
constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kNotYet{{
    {"mixtral", "its mixture of experts"},
    {"qwen2_moe", "its mixture of experts"},
    {"qwen3_moe", "its mixture of experts"},
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
  const std::int64_t default_head_dim = type == "qwen3" ? 128 : gemma ? 256 : 0;
  const std::int64_t head_dim = r.optional("head_dim", default_head_dim);
  if (head_dim > 0 && !(m.hidden % m.heads == 0 && head_dim == m.hidden / m.heads))
    m.explicit_head_dim = head_dim;
  if (type == "llama" || type == "qwen3" || gemma)
    m.qkv_bias = m.o_bias = r.flag("attention_bias", false);
  if (type == "llama") m.mlp_bias = r.flag("mlp_bias", false);
  m.qkv_bias = m.qkv_bias || type == "qwen2";
  m.qk_norm = type == "qwen3" || type == "gemma3_text";
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
  // Phi-3 (and Phi-4, whose configs say phi3): qkv_proj and gate_up_proj, and resid_pdrop's
  // dropouts on both branches.
  m.fused_linears = m.resid_dropout = type == "phi3";
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
//   phi3.5-mini   microsoft/Phi-3.5-mini-instruct;  phi4  microsoft/phi-4 (model_type phi3: fused
//                 qkv_proj and gate_up_proj)
struct PresetConfig {
  std::string_view name, description, config;
};

constexpr std::array<PresetConfig, 43> kPresetConfigs{{
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
         "vocab_size": 32768})"},
    {"mistral-nemo-12b", "Mistral Nemo 12B (GQA, head_dim 128, 131k vocabulary)",
     R"({"model_type": "mistral", "hidden_size": 5120, "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 40,
         "intermediate_size": 14336, "vocab_size": 131072})"},
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
         "final_logit_softcapping": null})"},
    {"gemma3-4b", "Gemma 3 4B, text (GQA, q/k norms, four norms a block)",
     R"({"model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 34,
         "intermediate_size": 10240, "num_attention_heads": 8, "num_key_value_heads": 4,
         "vocab_size": 262208})"},
    {"gemma3-12b", "Gemma 3 12B, text (GQA, q/k norms, four norms a block)",
     R"({"model_type": "gemma3_text", "hidden_size": 3840, "num_attention_heads": 16,
         "num_key_value_heads": 8, "num_hidden_layers": 48, "intermediate_size": 15360,
         "vocab_size": 262208})"},
    {"gemma3-27b", "Gemma 3 27B, text (GQA, head_dim 128, q/k norms, four norms a block)",
     R"({"model_type": "gemma3_text", "hidden_size": 5376, "num_attention_heads": 32,
         "num_key_value_heads": 16, "head_dim": 128, "num_hidden_layers": 62,
         "intermediate_size": 21504, "vocab_size": 262208})"},
    {"phi3.5-mini", "Phi-3.5 mini 3.8B (fused qkv and gate_up projections)",
     R"({"model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32,
         "num_key_value_heads": 32, "num_hidden_layers": 32, "intermediate_size": 8192,
         "vocab_size": 32064, "tie_word_embeddings": false})"},
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
