// Preset shapes from the published model cards; GPU totals from shared reference figures.
#include "core/presets.h"

#include <fmt/format.h>

#include <array>

#include "core/error.h"

namespace vrambench {
namespace {

constexpr ModelConfig gpt(std::string_view name, std::int64_t H, std::int64_t A, std::int64_t L,
                          std::int64_t V, std::int64_t P) {
  ModelConfig m;
  m.name = std::string(name);
  m.arch = Arch::gpt;
  m.hidden = H;
  m.heads = A;
  m.kv_heads = A;
  m.layers = L;
  m.ffn = 4 * H;
  m.vocab = V;
  m.max_positions = P;
  m.tied_embeddings = true;
  return m;
}

constexpr ModelConfig llama(std::string_view name, std::int64_t H, std::int64_t A, std::int64_t KV,
                            std::int64_t L, std::int64_t F, std::int64_t V) {
  ModelConfig m;
  m.name = std::string(name);
  m.arch = Arch::llama;
  m.hidden = H;
  m.heads = A;
  m.kv_heads = KV;
  m.layers = L;
  m.ffn = F;
  m.vocab = V;
  m.max_positions = 1;  // rotary: no learned position table
  m.tied_embeddings = false;
  return m;
}

// Llama-style models that tie the lm head to the embedding (Llama 3.2) or add q/k/v biases (Qwen2).
constexpr ModelConfig tied(ModelConfig m) {
  m.tied_embeddings = true;
  return m;
}
constexpr ModelConfig with_qkv_bias(ModelConfig m) {
  m.qkv_bias = true;
  return m;
}

const std::array<Preset, 13>& preset_table() {
  // The fine-tuning presets take their sizes from each model's published config.json:
  //   llama3.2-1b  huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json
  //   llama3.2-3b  huggingface.co/meta-llama/Llama-3.2-3B/blob/main/config.json
  //     (hidden_size, intermediate_size, num_attention_heads, num_key_value_heads,
  //      num_hidden_layers, vocab_size 128256, tie_word_embeddings true)
  //   mistral-7b   huggingface.co/mistralai/Mistral-7B-v0.3/blob/main/config.json
  //     (4096, 14336, 32 heads, 8 kv heads, 32 layers, vocab_size 32768, untied)
  //   qwen2.5-7b   huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json
  //     (3584, 18944, 28 heads, 4 kv heads, 28 layers, vocab_size 152064, untied; Qwen2 blocks
  //      have q/k/v biases, modeling_qwen2.py: q_proj = nn.Linear(..., bias=True))
  static const std::array<Preset, 13> table{{
      {"tiny", "2-layer GPT for tests (H=64, A=4, V=256)", gpt("tiny", 64, 4, 2, 256, 256)},
      {"tiny-llama", "2-layer Llama for tests (H=64, A=4, KV=2, V=256)",
       llama("tiny-llama", 64, 4, 2, 2, 176, 256)},
      {"gpt2", "GPT-2 small, 124M", gpt("gpt2", 768, 12, 12, 50257, 1024)},
      {"gpt2-medium", "GPT-2 medium, 355M", gpt("gpt2-medium", 1024, 16, 24, 50257, 1024)},
      {"gpt2-large", "GPT-2 large, 774M", gpt("gpt2-large", 1280, 20, 36, 50257, 1024)},
      {"gpt2-xl", "GPT-2 XL, 1.5B", gpt("gpt2-xl", 1600, 25, 48, 50257, 1024)},
      {"llama2-7b", "Llama 2 7B", llama("llama2-7b", 4096, 32, 32, 32, 11008, 32000)},
      {"llama2-13b", "Llama 2 13B", llama("llama2-13b", 5120, 40, 40, 40, 13824, 32000)},
      {"llama3-8b", "Llama 3 8B (GQA, 8 KV heads)",
       llama("llama3-8b", 4096, 32, 8, 32, 14336, 128256)},
      {"llama3.2-1b", "Llama 3.2 1B (GQA, tied embeddings)",
       tied(llama("llama3.2-1b", 2048, 32, 8, 16, 8192, 128256))},
      {"llama3.2-3b", "Llama 3.2 3B (GQA, tied embeddings)",
       tied(llama("llama3.2-3b", 3072, 24, 8, 28, 8192, 128256))},
      {"mistral-7b", "Mistral 7B v0.3 (GQA, 8 KV heads)",
       llama("mistral-7b", 4096, 32, 8, 32, 14336, 32768)},
      {"qwen2.5-7b", "Qwen2.5 7B (GQA, q/k/v biases, 152k vocabulary)",
       with_qkv_bias(llama("qwen2.5-7b", 3584, 28, 4, 28, 18944, 152064))},
  }};
  return table;
}

constexpr Bytes mib(std::int64_t n) {
  return n * MiB;
}

// Context overhead: ~250-450 MiB for a lazy-loading CUDA context (shared/reference/facts.md) plus
// the cuBLASLt and cuDNN handles; 512 MiB is a typical figure, replaced by the measured baseline
// on a real device.
constexpr Bytes kContext = mib(512);

constexpr std::array<GpuProfile, 15> kProfiles{{
    {"h100-80gb", "H100 SXM 80GB", mib(81559), kContext, 90},
    {"h200", "H200 141GB", mib(143771), kContext, 90},
    {"a100-80gb", "A100 80GB", mib(81920), kContext, 80},
    {"a100-40gb", "A100 40GB", mib(40960), kContext, 80},
    {"l40s", "L40S 48GB", mib(46068), kContext, 89},
    {"rtx6000-ada", "RTX 6000 Ada 48GB", mib(49140), kContext, 89},
    {"a6000", "RTX A6000 48GB", mib(49140), kContext, 86},
    {"rtx4090", "GeForce RTX 4090 24GB", mib(24564), kContext, 89},
    {"rtx3090", "GeForce RTX 3090 24GB", mib(24576), kContext, 86},
    {"rtx4080", "GeForce RTX 4080 16GB", mib(16376), kContext, 89},
    {"rtx4060ti-16gb", "GeForce RTX 4060 Ti 16GB", mib(16380), kContext, 89},
    {"t4", "Tesla T4 16GB", mib(15360), kContext, 75},
    {"rtx3060", "GeForce RTX 3060 12GB", mib(12288), kContext, 86},
    {"rtx4060", "GeForce RTX 4060 8GB", mib(8188), kContext, 89},
    {"rtx4050-laptop", "GeForce RTX 4050 Laptop 6GB", mib(6141), kContext, 89},
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

Bytes GpuProfile::gemm_workspace() const {
  return compute_capability >= 90 ? 32 * MiB : 4 * MiB;
}

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
  for (const GpuProfile& p : kProfiles)
    if (p.name == name) return p;
  throw UsageError(fmt::format("unknown GPU profile '{}': known profiles are {}", name,
                               joined_names(kProfiles)));
}

}  // namespace vrambench
