// Presets (the config.json of each model) and GPU profiles (totals from published figures).
#include "core/presets.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

#include "core/error.h"
#include "core/model_file.h"

namespace vrambench {
namespace {

// A preset is its model's config.json, read by the reader --model uses (core/model_file.h). The
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

constexpr Bytes mib(std::int64_t n) {
  return n * MiB;
}

// SMs: the spec sheets' (NVIDIA's data sheets and whitepapers; the A10G has 80, the A10 72).
// Totals: what `nvidia-smi` prints after the slash of Memory-Usage (driver 525 and later; older
// drivers print less for the same card), from public outputs (shared/reference/facts.md lists the
// first fifteen):
//   rtx5090      32607   github.com/noonghunna/club-3090/issues/617
//   a10g         23028   github.com/NVIDIA/DCGM/issues/232 (the A10 prints the same)
//   l4           23034   github.com/speaches-ai/speaches/pull/438
//   v100-16gb    16384   Tesla V100-SXM2-16GB on current drivers (16160 on driver 440)
//   v100-32gb    32768   github.com/Wan-Video/Wan2.1/issues/5 (driver 525)
//   h100-pcie    81559   "NVIDIA H100 PCIe ... 0MiB / 81559MiB", as the SXM card
//   b200         183359  github.com/NVIDIA/TensorRT-LLM/issues/10278
constexpr std::array<GpuProfile, 22> kProfiles{{
    {"h100-80gb", "H100 SXM 80GB", mib(81559), 90, 132},
    {"h100-pcie", "H100 PCIe 80GB", mib(81559), 90, 114},
    {"h200", "H200 141GB", mib(143771), 90, 132},
    {"b200", "B200 180GB", mib(183359), 100, 148},
    {"a100-80gb", "A100 80GB", mib(81920), 80, 108},
    {"a100-40gb", "A100 40GB", mib(40960), 80, 108},
    {"l40s", "L40S 48GB", mib(46068), 89, 142},
    {"rtx6000-ada", "RTX 6000 Ada 48GB", mib(49140), 89, 142},
    {"a6000", "RTX A6000 48GB", mib(49140), 86, 84},
    {"a10g", "A10G 24GB", mib(23028), 86, 80},
    {"l4", "L4 24GB", mib(23034), 89, 58},
    {"v100-32gb", "Tesla V100 32GB", mib(32768), 70, 80},
    {"v100-16gb", "Tesla V100 16GB", mib(16384), 70, 80},
    {"rtx5090", "GeForce RTX 5090 32GB", mib(32607), 120, 170},
    {"rtx4090", "GeForce RTX 4090 24GB", mib(24564), 89, 128},
    {"rtx3090", "GeForce RTX 3090 24GB", mib(24576), 86, 82},
    {"rtx4080", "GeForce RTX 4080 16GB", mib(16376), 89, 76},
    {"rtx4060ti-16gb", "GeForce RTX 4060 Ti 16GB", mib(16380), 89, 34},
    {"t4", "Tesla T4 16GB", mib(15360), 75, 40},
    {"rtx3060", "GeForce RTX 3060 12GB", mib(12288), 86, 28},
    {"rtx4060", "GeForce RTX 4060 8GB", mib(8188), 89, 24},
    {"rtx4050-laptop", "GeForce RTX 4050 Laptop 6GB", mib(6141), 89, 20},
}};

template <typename Range>
std::string joined_names(const Range& range) {
  std::string out;
  for (const auto& item : range) {
    if (!out.empty()) out += ", ";
    out += item.name;
  }
  return out;
}

}  // namespace

std::span<const Preset> presets() {
  return preset_table();
}

const Preset& find_preset(std::string_view name) {
  for (const Preset& p : preset_table())
    if (p.name == name) return p;
  throw UsageError(fmt::format("unknown --preset '{}': known presets are {}", name,
                               joined_names(preset_table())));
}

std::span<const GpuProfile> gpu_profiles() {
  return kProfiles;
}

const GpuProfile& find_gpu_profile(std::string_view name) {
  if (name.starts_with("sim:")) name.remove_prefix(4);
  // Case-insensitively: "RTX4090" is rtx4090.
  auto same = [](std::string_view a, std::string_view b) {
    return std::ranges::equal(a, b, [](char x, char y) {
      return std::tolower(static_cast<unsigned char>(x)) ==
             std::tolower(static_cast<unsigned char>(y));
    });
  };
  for (const GpuProfile& p : kProfiles)
    if (same(p.name, name)) return p;
  throw UsageError(fmt::format("unknown GPU profile '{}': known profiles are {}", name,
                               joined_names(kProfiles)));
}

}  // namespace vrambench
