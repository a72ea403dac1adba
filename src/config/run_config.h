// The configuration of one measurement: the model (model/model_config.h) and the run (sequence,
// batch, precision, attention, recompute, optimizer, scope, allocator, device capacity,
// fine-tuning recipe), the enums' names, and what the recipe derives.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/enum_names.h"
#include "core/quant_layout.h"
#include "core/units.h"
#include "model/lora.h"
#include "model/model_config.h"

namespace vrambench {

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
// How a step is spread over --gpus N (docs/multi-gpu.md): ddp (every rank holds the whole model;
// PyTorch DDP's gradient buckets beside the gradients), zero1 / zero2 / zero3 (DeepSpeed ZeRO:
// optimizer state, then gradients, then parameters partitioned over the ranks, with bf16 / fp16
// mixed precision's fp32 master partition), fsdp (PyTorch FSDP2's fully_shard per decoder layer and
// on the root, each parameter sharded by rows), hsdp (FSDP2 sharded within a node of 8 GPUs and
// replicated across nodes). With one GPU, ddp is plain single-device training.
enum class Strategy { ddp, zero1, zero2, zero3, fsdp, hsdp };
// What a strategy keeps in host memory instead (reported apart, never on the device): none,
// optimizer (ZeRO's offload_optimizer: fp32 master and optimizer state, the step on the CPU),
// params (ZeRO-3's offload_param with the optimizer; FSDP2's CPUOffloadPolicy: sharded parameters,
// gradients and optimizer state).
enum class Offload { none, optimizer, params };
// How a mixture of experts' routers spread the tokens (docs/moe.md): balanced (every expert gets
// tokens x top-k / E of the pairs) or skewed (every token of a layer on the same top-k experts,
// the fewest experts a router can choose). What the executors route by; transformers' grouped_mm
// dispatch allocates the same bytes for either.
enum class Routing : std::uint8_t { balanced, skewed };
// The trainer whose step is modelled (docs/preference.md): sft (a language-modelling loss over the
// batch), or TRL's preference trainers: dpo (a batch of prompt/chosen/rejected pairs, both
// completions of a pair in one forward) and kto (a batch of examples, each desirable or not, and
// a KL term over mismatched pairs).
enum class Trainer : std::uint8_t { sft, dpo, kto };
// What a preference trainer compares the policy with: automatic (TRL's default: the adapters
// disabled under PEFT, else a copy), copy (a frozen second model in the policy's dtype: an explicit
// ref_model), adapters (the policy's own base with its adapters disabled), precomputed (log-
// probabilities computed before training, precompute_ref_log_probs=True: no reference forward).
enum class Reference : std::uint8_t { automatic, copy, adapters, precomputed };
enum class AllocatorKind { direct, caching };

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
std::string_view to_string(Strategy v);
std::string_view to_string(Offload v);
std::string_view to_string(Routing v);
std::string_view to_string(Trainer v);
std::string_view to_string(Reference v);

// Every value of an enum above with its name, in declaration order (core/enum_names.h).
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
template <>
EnumNames<Strategy> enum_names<Strategy>();
template <>
EnumNames<Offload> enum_names<Offload>();
template <>
EnumNames<Routing> enum_names<Routing>();
template <>
EnumNames<Trainer> enum_names<Trainer>();
template <>
EnumNames<Reference> enum_names<Reference>();
// The Hugging Face `optim` names of the optimizers ("adamw_torch", "paged_adamw_8bit").
template <>
EnumNames<Optimizer> enum_aliases<Optimizer>();
// Hugging Face's TrainingArguments.optim name of an optimizer: its first alias above
// ("adamw_torch", "adamw_bnb_8bit", "paged_adamw_32bit", "paged_adamw_8bit", "sgd", "none").
std::string_view hf_optim_name(Optimizer o);

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
  // Data parallelism: the program is one rank's of --gpus ranks (program/shard.h).
  std::int64_t gpus = 1;
  Strategy strategy = Strategy::ddp;
  Offload offload = Offload::none;
  Routing routing = Routing::balanced;  // a mixture of experts' routing
  Trainer trainer = Trainer::sft;
  Reference reference = Reference::automatic;  // a preference trainer's reference model
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

// A preference trainer's (dpo, kto): TRL's DPOTrainer or KTOTrainer.
constexpr bool is_preference(const RunConfig& c) {
  return c.trainer != Trainer::sft;
}
// The sequences the model reads per sample of the batch: DPO's batch is of pairs, whose chosen and
// rejected completions are concatenated into one forward of 2B rows; 1 otherwise.
constexpr std::int64_t rows_per_sample(const RunConfig& c) {
  return c.trainer == Trainer::dpo ? 2 : 1;
}
// The reference a preference trainer keeps: --reference, or TRL's default where automatic (PEFT:
// the adapters disabled; full fine-tuning: a copy of the model).
constexpr Reference reference_of(const RunConfig& c) {
  if (c.reference != Reference::automatic) return c.reference;
  return is_finetune(c) ? Reference::adapters : Reference::copy;
}

// The ranks a strategy shards parameters, gradients or optimizer state over: 1 for ddp and
// single-GPU runs, min(gpus, kGpusPerNode) for hsdp (sharded within a node, replicated across),
// gpus otherwise.
inline constexpr std::int64_t kGpusPerNode = 8;
constexpr std::int64_t shard_ranks(const RunConfig& c) {
  if (c.strategy == Strategy::ddp) return 1;
  if (c.strategy == Strategy::hsdp) return c.gpus < kGpusPerNode ? c.gpus : kGpusPerNode;
  return c.gpus;
}
// DeepSpeed ZeRO (any stage), and FSDP2 (fsdp, hsdp).
constexpr bool is_zero(Strategy s) {
  return s == Strategy::zero1 || s == Strategy::zero2 || s == Strategy::zero3;
}
constexpr bool is_fsdp(Strategy s) {
  return s == Strategy::fsdp || s == Strategy::hsdp;
}
// Whether the step program is one rank's of a sharded or replicated run (program/shard.h): any
// strategy but ddp, and ddp over more than one GPU (its gradient buckets).
constexpr bool is_distributed(const RunConfig& c) {
  return c.strategy != Strategy::ddp || c.gpus > 1;
}

// Whether the step keeps state off the device: a paged optimizer's managed memory, or what
// --offload keeps on the host (a trial gives both a pool of their own, outside the capacity).
constexpr bool has_off_device_state(const RunConfig& c) {
  return is_paged(c.optimizer) || c.offload != Offload::none;
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
// The most ranks a configuration may spread over (the largest training runs use tens of
// thousands; sharding to a row or less of each parameter says nothing more past this).
inline constexpr std::int64_t kMaxGpus = 65536;

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

}  // namespace vrambench
