// The configuration of one measurement: the model (architecture and sizes) and the run (sequence,
// batch, precision, attention, recompute, optimizer, scope, allocator, device capacity).
#pragma once

#include <algorithm>
#include <compare>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "core/dtype.h"
#include "core/quant_layout.h"
#include "core/units.h"

namespace vrambench {

enum class Arch { gpt, llama };
// fp32: fp32 everything. tf32: fp32 storage, tf32 GEMMs. fp16/bf16: under --framework lean mixed
// precision as in ZeRO (16-bit weights, gradients and activations; fp32 master weights and
// optimizer state); under --framework hf the model loaded in 16 bits (weights, gradients and AdamW
// state all 16-bit, no master copy). amp_fp16/amp_bf16 (hf only): autocast over fp32 weights:
// fp32 weights, gradients and optimizer state, 16-bit copies of the weights cached through the
// forward, activations 16-bit where autocast casts and fp32 where the model keeps them.
enum class Precision { fp32, tf32, fp16, bf16, amp_fp16, amp_bf16 };
// Whose allocations the step program reproduces (docs/memory-model.md, "Frameworks"): lean (a
// trainer that keeps only what each backward needs) or hf (PyTorch eager autograd running Hugging
// Face transformers model code, with PEFT and bitsandbytes under fine-tuning). automatic ("auto",
// the default): hf for every recipe it models, lean for the rest (framework_of).
enum class Framework { automatic, lean, hf };
enum class Attention { eager, flash };
enum class Recompute { none, selective, full };
// adamw: torch AdamW, fp32 m and v. adamw_8bit: bitsandbytes' AdamW8bit (1-byte moments, fp32
// absmax per 256). paged_*: the same state in managed memory (bitsandbytes' paged optimizers).
enum class Optimizer { adamw, adamw_8bit, paged_adamw, paged_adamw_8bit, sgd, none };
// full: every weight trains. lora: the base is frozen, adapters on --lora-targets train. qlora:
// lora over a base stored in 4 bits (--quant nf4 unless given).
enum class Finetune { full, lora, qlora };
enum class Toggle { off, on };
// The training loop around an hf step: trainer (transformers' Trainer, which drops the output
// object after the loss) or native ("train in native PyTorch": `outputs = model(**batch);
// outputs.loss.backward()`, the output object and its logits alive through backward).
enum class Loop { trainer, native };
enum class Scope { model, layer, attention, mlp };
enum class AllocatorKind { direct, caching };

std::string_view to_string(Arch v);
std::string_view to_string(Precision v);
std::string_view to_string(Framework v);
std::string_view to_string(Attention v);
std::string_view to_string(Recompute v);
std::string_view to_string(Optimizer v);
std::string_view to_string(Scope v);
std::string_view to_string(AllocatorKind v);
std::string_view to_string(Finetune v);
std::string_view to_string(QuantKind v);
std::string_view to_string(Toggle v);
std::string_view to_string(Loop v);

// Every value of an enum above with its name, in declaration order: the one table the command
// line, the sweep and the tables read names from.
template <typename E>
using EnumNames = std::span<const std::pair<E, std::string_view>>;
template <typename E>
EnumNames<E> enum_names();
template <>
EnumNames<Arch> enum_names<Arch>();
template <>
EnumNames<Precision> enum_names<Precision>();
template <>
EnumNames<Framework> enum_names<Framework>();
template <>
EnumNames<Attention> enum_names<Attention>();
template <>
EnumNames<Recompute> enum_names<Recompute>();
template <>
EnumNames<Optimizer> enum_names<Optimizer>();
template <>
EnumNames<Scope> enum_names<Scope>();
template <>
EnumNames<AllocatorKind> enum_names<AllocatorKind>();
template <>
EnumNames<Finetune> enum_names<Finetune>();
template <>
EnumNames<QuantKind> enum_names<QuantKind>();
template <>
EnumNames<Toggle> enum_names<Toggle>();
template <>
EnumNames<Loop> enum_names<Loop>();
// Other spellings an enum accepts (not listed as its names): the Hugging Face `optim` names of
// the optimizers ("adamw_torch", "paged_adamw_8bit"). Empty for most enums.
template <typename E>
EnumNames<E> enum_aliases() {
  return {};
}
template <>
EnumNames<Optimizer> enum_aliases<Optimizer>();
// Hugging Face's TrainingArguments.optim name of an optimizer: its first alias above
// ("adamw_torch", "adamw_bnb_8bit", "paged_adamw_32bit", "paged_adamw_8bit", "sgd", "none").
std::string_view hf_optim_name(Optimizer o);
// The value named `text`; throws UsageError naming --`option` and the allowed values.
template <typename E>
E parse_enum(std::string_view text, std::string_view option);

// What --device names: auto (the GPU when there is one, else the default simulated card), a
// simulated card (sim:PROFILE), the host (cpu) or the GPU (cuda).
struct DeviceChoice {
  enum class Kind { automatic, sim, cpu, cuda };
  Kind kind = Kind::automatic;
  std::string profile;  // sim: a GPU profile's name, "h100-80gb"
  auto operator<=>(const DeviceChoice&) const = default;
};
// "auto", "sim:h100-80gb", "cpu", "cuda".
std::string to_string(const DeviceChoice& device);
// Reads those forms (a sim profile must be known); throws UsageError naming what is allowed.
DeviceChoice parse_device(std::string_view text);

// Storage type of activations and weights for a precision (autocast: the 16-bit type its GEMMs
// produce).
DType activation_dtype(Precision p);
// True when the recipe keeps separate fp32 master weights (fp16/bf16; autocast too, whose fp32
// weights play that part for the estimate).
bool has_master_weights(Precision p);
// Autocast (amp_fp16, amp_bf16).
constexpr bool is_autocast(Precision p) {
  return p == Precision::amp_fp16 || p == Precision::amp_bf16;
}

// The optimizer's family and where its state lives.
constexpr bool is_adamw(Optimizer o) {
  return o == Optimizer::adamw || o == Optimizer::adamw_8bit || o == Optimizer::paged_adamw ||
         o == Optimizer::paged_adamw_8bit;
}
constexpr bool is_8bit(Optimizer o) {
  return o == Optimizer::adamw_8bit || o == Optimizer::paged_adamw_8bit;
}
constexpr bool is_paged(Optimizer o) {
  return o == Optimizer::paged_adamw || o == Optimizer::paged_adamw_8bit;
}

// The linear modules of a block that LoRA can target, by the names PEFT's target_modules use.
// llama-style blocks have q, k, v, o, gate, up, down (q_proj ...); gpt-style blocks have the packed
// c_attn, the attention's c_proj, c_fc and the MLP's c_proj ("c_proj" names both, as in PEFT);
// llama-style blocks with fused linears (Phi-3) have qkv_proj, o_proj, gate_up_proj and down_proj.
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
  gate_up_proj
};
inline constexpr int kLoraModuleCount = 13;

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
struct ModelConfig;
// Whether `module` is targeted in `model` (a module its blocks do not have never is).
bool lora_targets_module(const LoraTargets& targets, const ModelConfig& model, LoraModule module);
// The modules of the model's blocks, in block order.
std::span<const LoraModule> lora_modules(const ModelConfig& model);
// Their names, joined by ',' ("q_proj,k_proj,...").
std::string lora_module_list(const ModelConfig& model);
// PEFT's name of the module: "q_proj", "c_attn", "c_proj".
std::string_view lora_module_name(LoraModule module);

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
  // The config.json the model was read from (--model), "" for a preset or a shape given by hand.
  std::string source;
  // The dtype its config.json names (dtype, or torch_dtype: float32, float16, bfloat16): the run's
  // --dtype where none is given. None for presets and hand-given shapes.
  std::optional<Precision> dtype;

  std::int64_t head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : hidden / heads;
  }
  // The attention's output width, heads x head_dim: the output projection's input.
  std::int64_t attention_width() const { return heads * head_dim(); }
  bool operator==(const ModelConfig&) const = default;
};

// The sub-formulas the step program and the formula beside the estimate need, written once.
//
// Columns of the packed q|k|v projection: `heads` query heads, then `kv_heads` key and `kv_heads`
// value heads, each `head_dim` wide: (A + 2K) * D.
constexpr std::int64_t qkv_width(std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim) {
  return (heads + 2 * kv_heads) * head_dim;
}
inline std::int64_t qkv_width(const ModelConfig& m) {
  return qkv_width(m.heads, m.kv_heads, m.head_dim());
}
// Rows of the learned position table a step of `seq` tokens has: the model's, or one per position
// when the sequence is longer (so long sequences stay buildable); none for llama (rotary).
inline std::int64_t position_rows(const ModelConfig& m, std::int64_t seq) {
  return m.arch == Arch::gpt ? std::max(m.max_positions, seq) : 0;
}

struct RunConfig {
  ModelConfig model;
  std::int64_t seq = 1024;  // S
  std::int64_t batch = 1;   // B: the batch a single trial or estimate uses
  Precision dtype = Precision::bf16;
  // Whether dtype was given (--dtype, or a dtype axis); where not, a model that names its own
  // dtype sets it (ModelConfig::dtype).
  bool dtype_given = false;
  Framework framework = Framework::automatic;
  Attention attention = Attention::flash;
  Recompute recompute = Recompute::none;
  Optimizer optimizer = Optimizer::adamw;
  double dropout = 0.0;
  Scope scope = Scope::model;
  AllocatorKind allocator = AllocatorKind::caching;
  DeviceChoice device;
  Bytes vram = 0;  // capacity override; 0 = the device's own
  // Fine-tuning recipe (docs/memory-model.md, "Fine-tuning").
  Finetune finetune = Finetune::full;
  std::int64_t lora_rank = 16;
  double lora_alpha = 32.0;  // no memory effect; kept for the trainer settings
  double lora_dropout = 0.0;
  LoraTargets lora_targets{0, LoraTargets::Shorthand::all_linear};
  QuantKind quant = QuantKind::none;  // of the frozen block linears; qlora without it means nf4
  Toggle double_quant = Toggle::on;   // nf4 / fp4 only
  std::int64_t grad_accum = 1;        // micro-steps per optimizer step; B is the micro-batch
  Loop loop = Loop::trainer;          // hf: the loop around the step
  bool operator==(const RunConfig&) const = default;
};

// The fine-tuning recipe's derived facts.
constexpr bool is_finetune(const RunConfig& c) {
  return c.finetune != Finetune::full;
}
// The storage of the frozen block linears: --quant, or nf4 under qlora when not given.
constexpr QuantKind base_quant(const RunConfig& c) {
  return c.finetune == Finetune::qlora && c.quant == QuantKind::none ? QuantKind::nf4 : c.quant;
}

// Whether the hf step runs under autocast: asked for (amp-*), or QLoRA's Trainer with bf16 or
// fp16 (the 4-bit layers compute in 16 bits, the base's other parameters are fp32 after
// prepare_model_for_kbit_training). A model loaded in bf16 or fp16 otherwise runs in that dtype.
constexpr bool hf_autocast(const RunConfig& c) {
  const bool sixteen = c.dtype == Precision::bf16 || c.dtype == Precision::fp16;
  return is_autocast(c.dtype) || (sixteen && is_finetune(c) && base_quant(c) != QuantKind::none);
}

// What a configuration may ask for (docs/memory-model.md, "Limits"). A model above either is
// refused when the grid is made, before anything is built. The step program, its estimate and
// every trial grow with the layers: up to kMaxLayers each answers
// in seconds, and the deepest transformers trained have about 1,000 layers. kMaxParameters is
// 16 TiB of weights even at 4 bits a weight, the least any recipe here stores (over a hundred
// times the largest GPU profile): no GPU holds such a model, whatever its batch.
inline constexpr std::int64_t kMaxLayers = 2048;
inline constexpr std::int64_t kMaxParameters = std::int64_t{1} << 45;  // 35.2 trillion

// Checks every field and how they fit together; throws UsageError with one line naming the value
// and what is allowed. Also rejects configurations whose largest tensor or total parameter bytes
// overflow 64 bits, and models past kMaxLayers or kMaxParameters. Runs once per configuration, when
// the grid is made; everything after it (the estimate, the program builder, the trials) takes a
// validated configuration.
void validate(const RunConfig& cfg);

// Why the hf profile does not model cfg's recipe, as a sentence for the user ("--framework hf
// does not model bitsandbytes' 8-bit layers ... yet: ..."), or "" when it does.
std::string hf_gap(const RunConfig& cfg);
// The framework whose step cfg runs: cfg.framework, or for auto hf when hf_gap is empty, else lean.
Framework framework_of(const RunConfig& cfg);

// Number of trainable parameters of the whole model (embeddings, blocks, final norm, lm head).
std::int64_t parameter_count(const ModelConfig& m);
// Parameters of one transformer block.
std::int64_t layer_parameter_count(const ModelConfig& m);

}  // namespace vrambench
