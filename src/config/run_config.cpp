// Enum names, the device choice and validation of the run configuration.
#include "config/run_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

#include "config/gpu_profiles.h"
#include "core/error.h"
#include "model/weights.h"

namespace vrambench {
namespace {

template <typename E, std::size_t N>
using NameTable = std::array<std::pair<E, std::string_view>, N>;

constexpr NameTable<Precision, 6> kPrecision{{{Precision::fp32, "fp32"},
                                              {Precision::tf32, "tf32"},
                                              {Precision::fp16, "fp16"},
                                              {Precision::bf16, "bf16"},
                                              {Precision::amp_fp16, "amp-fp16"},
                                              {Precision::amp_bf16, "amp-bf16"}}};
constexpr NameTable<Framework, 3> kFramework{
    {{Framework::automatic, "auto"}, {Framework::lean, "lean"}, {Framework::hf, "hf"}}};
constexpr NameTable<Attention, 2> kAttention{
    {{Attention::eager, "eager"}, {Attention::flash, "flash"}}};
constexpr NameTable<Recompute, 3> kRecompute{
    {{Recompute::none, "none"}, {Recompute::selective, "selective"}, {Recompute::full, "full"}}};
constexpr NameTable<Optimizer, 6> kOptimizer{{{Optimizer::adamw, "adamw"},
                                              {Optimizer::adamw_8bit, "adamw-8bit"},
                                              {Optimizer::paged_adamw, "paged-adamw"},
                                              {Optimizer::paged_adamw_8bit, "paged-adamw-8bit"},
                                              {Optimizer::sgd, "sgd"},
                                              {Optimizer::none, "none"}}};
// Hugging Face TrainingArguments.optim spellings (transformers' OptimizerNames).
constexpr NameTable<Optimizer, 8> kOptimizerAliases{
    {{Optimizer::adamw, "adamw_torch"},
     {Optimizer::adamw, "adamw_torch_fused"},
     {Optimizer::adamw_8bit, "adamw_bnb_8bit"},
     {Optimizer::adamw_8bit, "adamw_8bit"},
     {Optimizer::paged_adamw, "paged_adamw_32bit"},
     {Optimizer::paged_adamw_8bit, "paged_adamw_8bit"},
     {Optimizer::sgd, "sgd"},
     {Optimizer::none, "none"}}};
constexpr NameTable<Finetune, 3> kFinetune{
    {{Finetune::full, "full"}, {Finetune::lora, "lora"}, {Finetune::qlora, "qlora"}}};
constexpr NameTable<QuantKind, 4> kQuant{{{QuantKind::none, "none"},
                                          {QuantKind::nf4, "nf4"},
                                          {QuantKind::fp4, "fp4"},
                                          {QuantKind::int8, "int8"}}};
constexpr NameTable<Toggle, 2> kToggle{{{Toggle::off, "off"}, {Toggle::on, "on"}}};
constexpr NameTable<Loop, 2> kLoop{{{Loop::trainer, "trainer"}, {Loop::native, "native"}}};
constexpr NameTable<Strategy, 6> kStrategy{{{Strategy::ddp, "ddp"},
                                            {Strategy::zero1, "zero1"},
                                            {Strategy::zero2, "zero2"},
                                            {Strategy::zero3, "zero3"},
                                            {Strategy::fsdp, "fsdp"},
                                            {Strategy::hsdp, "hsdp"}}};
constexpr NameTable<Offload, 3> kOffload{
    {{Offload::none, "none"}, {Offload::optimizer, "optimizer"}, {Offload::params, "params"}}};
constexpr NameTable<Routing, 2> kRouting{
    {{Routing::balanced, "balanced"}, {Routing::skewed, "skewed"}}};
constexpr NameTable<Trainer, 3> kTrainer{
    {{Trainer::sft, "sft"}, {Trainer::dpo, "dpo"}, {Trainer::kto, "kto"}}};
constexpr NameTable<Reference, 4> kReference{{{Reference::automatic, "auto"},
                                              {Reference::copy, "copy"},
                                              {Reference::adapters, "adapters"},
                                              {Reference::precomputed, "precomputed"}}};

constexpr NameTable<Scope, 4> kScope{{{Scope::model, "model"},
                                      {Scope::layer, "layer"},
                                      {Scope::attention, "attention"},
                                      {Scope::mlp, "mlp"}}};
constexpr NameTable<AllocatorKind, 2> kAllocator{
    {{AllocatorKind::direct, "direct"}, {AllocatorKind::caching, "caching"}}};

template <typename E, std::size_t N>
std::string_view name_of(const NameTable<E, N>& table, E value) {
  return enum_name<E>(table, value);
}

void require_positive(std::int64_t value, std::string_view option) {
  if (value <= 0)
    throw UsageError(fmt::format("invalid --{} {}: must be a positive integer", option, value));
}

// What a strategy and its offload take (docs/multi-gpu.md).
void validate_distributed(const RunConfig& cfg) {
  require_positive(cfg.gpus, "gpus");
  if (cfg.gpus > kMaxGpus)
    throw UsageError(fmt::format("invalid --gpus {}: at most {}", cfg.gpus, kMaxGpus));
  const std::string_view strategy = to_string(cfg.strategy);
  if (is_distributed(cfg) && cfg.scope != Scope::model)
    throw UsageError(fmt::format(
        "--strategy {} over --gpus {} spreads whole training steps: use --scope model (got "
        "--scope {})",
        strategy, cfg.gpus, to_string(cfg.scope)));
  if (cfg.strategy != Strategy::ddp && is_paged(cfg.optimizer))
    throw UsageError(fmt::format(
        "--optimizer {} keeps its state in managed memory on one device; --strategy {} shards "
        "optimizer state: use adamw or adamw-8bit",
        to_string(cfg.optimizer), strategy));
  if (is_zero(cfg.strategy) && (is_8bit(cfg.optimizer) || cfg.optimizer == Optimizer::sgd))
    throw UsageError(fmt::format(
        "--strategy {}: DeepSpeed's ZeRO optimizer steps AdamW over an fp32 partition; use "
        "--optimizer adamw (or none)",
        strategy));
  if (is_zero(cfg.strategy) && (is_autocast(cfg.dtype) || cfg.dtype == Precision::tf32))
    throw UsageError(fmt::format(
        "--strategy {}: DeepSpeed casts the model to its bf16 / fp16 (or keeps fp32); use --dtype "
        "bf16, fp16 or fp32 (got {})",
        strategy, to_string(cfg.dtype)));
  if (is_fsdp(cfg.strategy) && is_autocast(cfg.dtype))
    throw UsageError(fmt::format(
        "--strategy {} models a model loaded in its dtype (no MixedPrecisionPolicy yet): use "
        "--dtype bf16, fp16 or fp32 (got {})",
        strategy, to_string(cfg.dtype)));
  const bool allowed = cfg.offload == Offload::none ||
                       (is_zero(cfg.strategy) && cfg.offload == Offload::optimizer) ||
                       ((cfg.strategy == Strategy::zero3 || is_fsdp(cfg.strategy)) &&
                        cfg.offload == Offload::params);
  if (!allowed)
    throw UsageError(fmt::format(
        "--offload {} is not an option of --strategy {}: ddp offloads nothing, zero1 and zero2 "
        "the optimizer, zero3 the optimizer or the parameters (with the optimizer), fsdp and hsdp "
        "the parameters (CPUOffloadPolicy: with their gradients and optimizer state)",
        to_string(cfg.offload), strategy));
}

}  // namespace

std::string_view to_string(Precision v) {
  return name_of(kPrecision, v);
}
std::string_view to_string(Framework v) {
  return name_of(kFramework, v);
}
std::string_view to_string(Attention v) {
  return name_of(kAttention, v);
}
std::string_view to_string(Recompute v) {
  return name_of(kRecompute, v);
}
std::string_view to_string(Optimizer v) {
  return name_of(kOptimizer, v);
}
std::string_view to_string(Scope v) {
  return name_of(kScope, v);
}
std::string_view to_string(AllocatorKind v) {
  return name_of(kAllocator, v);
}
std::string_view to_string(Finetune v) {
  return name_of(kFinetune, v);
}
std::string_view to_string(QuantKind v) {
  return name_of(kQuant, v);
}
std::string_view to_string(Toggle v) {
  return name_of(kToggle, v);
}
std::string_view to_string(Loop v) {
  return name_of(kLoop, v);
}
std::string_view to_string(Strategy v) {
  return name_of(kStrategy, v);
}
std::string_view to_string(Offload v) {
  return name_of(kOffload, v);
}
std::string_view to_string(Routing v) {
  return name_of(kRouting, v);
}
std::string_view to_string(Trainer v) {
  return name_of(kTrainer, v);
}
std::string_view to_string(Reference v) {
  return name_of(kReference, v);
}

template <>
EnumNames<Precision> enum_names<Precision>() {
  return kPrecision;
}
template <>
EnumNames<Framework> enum_names<Framework>() {
  return kFramework;
}
template <>
EnumNames<Attention> enum_names<Attention>() {
  return kAttention;
}
template <>
EnumNames<Recompute> enum_names<Recompute>() {
  return kRecompute;
}
template <>
EnumNames<Optimizer> enum_names<Optimizer>() {
  return kOptimizer;
}
template <>
EnumNames<Scope> enum_names<Scope>() {
  return kScope;
}
template <>
EnumNames<AllocatorKind> enum_names<AllocatorKind>() {
  return kAllocator;
}
template <>
EnumNames<Finetune> enum_names<Finetune>() {
  return kFinetune;
}
template <>
EnumNames<QuantKind> enum_names<QuantKind>() {
  return kQuant;
}
template <>
EnumNames<Toggle> enum_names<Toggle>() {
  return kToggle;
}
template <>
EnumNames<Loop> enum_names<Loop>() {
  return kLoop;
}
template <>
EnumNames<Strategy> enum_names<Strategy>() {
  return kStrategy;
}
template <>
EnumNames<Offload> enum_names<Offload>() {
  return kOffload;
}
template <>
EnumNames<Routing> enum_names<Routing>() {
  return kRouting;
}
template <>
EnumNames<Trainer> enum_names<Trainer>() {
  return kTrainer;
}
template <>
EnumNames<Reference> enum_names<Reference>() {
  return kReference;
}
template <>
EnumNames<Optimizer> enum_aliases<Optimizer>() {
  return kOptimizerAliases;
}

std::string_view hf_optim_name(Optimizer o) {
  for (const auto& [e, name] : kOptimizerAliases)
    if (e == o) return name;
  return to_string(o);
}

std::string to_string(const DeviceChoice& device) {
  switch (device.kind) {
    case DeviceChoice::Kind::automatic:
      return "auto";
    case DeviceChoice::Kind::sim:
      return "sim:" + device.profile;
    case DeviceChoice::Kind::cpu:
      return "cpu";
    case DeviceChoice::Kind::cuda:
      return "cuda";
  }
  return "?";
}

DeviceChoice parse_device(std::string_view text) {
  if (text == "auto") return {};
  if (text == "cpu") return {DeviceChoice::Kind::cpu, {}};
  if (text == "cuda") return {DeviceChoice::Kind::cuda, {}};
  if (text.starts_with("sim:"))
    return {DeviceChoice::Kind::sim, std::string(find_gpu_profile(text).name)};
  throw UsageError(fmt::format(
      "invalid --device '{}': use auto, cpu, cuda or sim:PROFILE (see `vrambench devices`)", text));
}

DType activation_dtype(Precision p) {
  switch (p) {
    case Precision::fp16:
    case Precision::amp_fp16:
      return DType::f16;
    case Precision::bf16:
    case Precision::amp_bf16:
      return DType::bf16;
    case Precision::fp32:
    case Precision::tf32:
      return DType::f32;
  }
  return DType::f32;
}

bool has_master_weights(Precision p) {
  return p == Precision::fp16 || p == Precision::bf16 || is_autocast(p);
}

std::string hf_gap(const RunConfig& cfg) {
  // What the hf step program covers so far (docs/memory-model.md, "Frameworks").
  if (cfg.scope != Scope::model)
    return fmt::format(
        "--framework hf builds whole training steps: use --scope model (got --scope "
        "{})",
        to_string(cfg.scope));
  if (base_quant(cfg) == QuantKind::int8)
    return "--framework hf does not model bitsandbytes' 8-bit layers (Linear8bitLt) yet: use "
           "--quant nf4 or fp4, or --framework lean";
  if (cfg.recompute == Recompute::selective)
    return "--framework hf: transformers checkpoints whole decoder layers; use --recompute none or "
           "full";
  return "";
}

Framework framework_of(const RunConfig& cfg) {
  if (cfg.framework != Framework::automatic) return cfg.framework;
  return hf_gap(cfg).empty() ? Framework::hf : Framework::lean;
}

namespace {

// A mixture of experts' sizes and what its step models (docs/moe.md).
void validate_experts(const RunConfig& cfg) {
  const ModelConfig& m = cfg.model;
  if (m.arch != Arch::llama)
    throw UsageError("a mixture of experts is modelled on llama-style blocks");
  require_positive(m.expert_ffn, "expert width (moe_intermediate_size)");
  require_positive(m.sparse_step, "decoder_sparse_step");
  if (m.experts_per_token < 1 || m.experts_per_token > m.experts)
    throw UsageError(fmt::format("invalid top-k {}: a token goes to 1 to {} experts",
                                 m.experts_per_token, m.experts));
  if (m.router_aux_loss && framework_of(cfg) != Framework::hf)
    throw UsageError(
        "output_router_logits true (the load-balancing loss) is modelled in the step transformers "
        "runs: use --framework hf, or a config with output_router_logits false");
  if (m.router_aux_loss && !(m.router_aux_coef > 0.0))
    throw UsageError(
        "output_router_logits true with router_aux_loss_coef 0 is not modelled (transformers still "
        "runs the loss): give a coefficient above 0, or output_router_logits false");
  // The dispatch's rows and the experts' weights, in bytes, must fit in 64 bits.
  const std::int64_t pairs = checked_mul(checked_mul(cfg.batch, cfg.seq, "batch x seq"),
                                         m.experts_per_token, "token-expert pairs");
  checked_mul(checked_mul(pairs, std::max(2 * m.expert_ffn, m.hidden), "pair rows"), 4,
              "dispatch bytes");
}

// A preference trainer's step (docs/preference.md): TRL's, over transformers' model code, on one
// GPU, without dropout (TRL's disable_dropout).
void validate_preference(const RunConfig& cfg) {
  if (!is_preference(cfg)) {
    if (cfg.reference != Reference::automatic)
      throw UsageError(fmt::format(
          "--reference {} is a preference trainer's reference model: add --trainer dpo or kto",
          to_string(cfg.reference)));
    return;
  }
  const std::string_view trainer = to_string(cfg.trainer);
  if (framework_of(cfg) != Framework::hf)
    throw UsageError(fmt::format(
        "--trainer {} models the step TRL runs over transformers' model code: use --framework "
        "hf{}",
        trainer, cfg.framework == Framework::automatic ? fmt::format(" ({})", hf_gap(cfg)) : ""));
  if (is_distributed(cfg))
    throw UsageError(fmt::format(
        "--trainer {} is modelled on one GPU: --gpus {} --strategy {} (a sharded reference model) "
        "is not yet",
        trainer, cfg.gpus, to_string(cfg.strategy)));
  if (cfg.dropout > 0.0)
    throw UsageError(fmt::format(
        "--trainer {}: TRL disables the model's dropout (disable_dropout=True); use --dropout 0",
        trainer));
  if (cfg.loop != Loop::trainer)
    throw UsageError(
        fmt::format("--trainer {} runs in TRL's Trainer: use --loop trainer", trainer));
  if (cfg.model.router_aux_loss)
    throw UsageError(fmt::format(
        "--trainer {} with output_router_logits true (the load-balancing loss) is not modelled "
        "yet: give the config with output_router_logits false",
        trainer));
  if (cfg.reference == Reference::adapters && !is_finetune(cfg))
    throw UsageError(
        "--reference adapters disables a PEFT model's adapters: use --finetune lora or qlora, or "
        "--reference copy or precomputed under full fine-tuning");
  if (cfg.seq < 2)
    throw UsageError(fmt::format(
        "invalid --seq {} for --trainer {}: each sequence scores its next tokens, so at least 2",
        cfg.seq, trainer));
}

}  // namespace

void validate(const RunConfig& cfg) {
  const ModelConfig& m = cfg.model;
  require_positive(m.hidden, "hidden");
  require_positive(m.heads, "heads");
  require_positive(m.kv_heads, "kv-heads");
  require_positive(m.layers, "layers");
  if (m.layers > kMaxLayers)
    throw UsageError(fmt::format(
        "invalid --layers {}: at most {} (the deepest transformers trained have about 1,000; the "
        "step program and its estimate grow with every layer)",
        m.layers, kMaxLayers));
  require_positive(m.ffn, "ffn");
  require_positive(m.vocab, "vocab");
  require_positive(m.max_positions, "max-positions");
  require_positive(cfg.seq, "seq");
  require_positive(cfg.batch, "batch");
  if (m.explicit_head_dim == 0 && m.hidden % m.heads != 0)
    throw UsageError(fmt::format("invalid --heads {}: must divide --hidden {}", m.heads, m.hidden));
  if (m.heads % m.kv_heads != 0)
    throw UsageError(
        fmt::format("invalid --kv-heads {}: must divide --heads {}", m.kv_heads, m.heads));
  if (m.arch == Arch::llama && m.head_dim() % 2 != 0)
    throw UsageError(
        fmt::format("invalid --hidden {} / --heads {}: llama's rotary embedding needs an even head "
                    "size, got {}",
                    m.hidden, m.heads, m.head_dim()));
  if (!(cfg.dropout >= 0.0 && cfg.dropout < 1.0))
    throw UsageError(fmt::format("invalid --dropout {}: must be in [0, 1)", cfg.dropout));
  if (cfg.vram < 0) throw UsageError("invalid --vram: must be positive");
  require_positive(cfg.grad_accum, "grad-accum");
  if (is_finetune(cfg)) {
    require_positive(cfg.lora_rank, "lora-rank");
    if (!(cfg.lora_dropout >= 0.0 && cfg.lora_dropout < 1.0))
      throw UsageError(
          fmt::format("invalid --lora-dropout {}: must be in [0, 1)", cfg.lora_dropout));
    if (!(cfg.lora_alpha > 0.0))
      throw UsageError(fmt::format("invalid --lora-alpha {}: must be positive", cfg.lora_alpha));
    if (m.fused_linears && cfg.lora_targets.shorthand == LoraTargets::Shorthand::peft_default)
      throw UsageError(fmt::format(
          "invalid --lora-targets peft-default: PEFT has no default target modules for {} (fused "
          "linears, as Phi-3); name them: all-linear, attn, or some of {}",
          m.name, lora_module_list(m)));
    bool any = false;
    for (LoraModule module : lora_modules(m))
      any = any || lora_targets_module(cfg.lora_targets, m, module);
    if (!any)
      throw UsageError(fmt::format("invalid --lora-targets {}: no module of {}'s blocks; it has {}",
                                   to_string(cfg.lora_targets), m.name, lora_module_list(m)));
    if (cfg.scope != Scope::model)
      throw UsageError(fmt::format("--finetune {} needs --scope model (got --scope {})",
                                   to_string(cfg.finetune), to_string(cfg.scope)));
  } else if (cfg.quant != QuantKind::none) {
    throw UsageError(fmt::format(
        "--quant {} stores a frozen base: use it with --finetune lora or qlora, not full",
        to_string(cfg.quant)));
  }
  if (const std::string gap = hf_gap(cfg); cfg.framework == Framework::hf && !gap.empty())
    throw UsageError(gap);
  if (framework_of(cfg) == Framework::lean && is_autocast(cfg.dtype))
    throw UsageError(fmt::format(
        "--dtype {} is autocast over fp32 weights, a --framework hf recipe; "
        "--framework lean takes fp32, tf32, fp16 or bf16{}",
        to_string(cfg.dtype),
        cfg.framework == Framework::automatic ? fmt::format(" (auto chose lean: {})", hf_gap(cfg))
                                              : ""));
  if (cfg.loop == Loop::native && framework_of(cfg) != Framework::hf)
    throw UsageError(fmt::format(
        "--loop native keeps the output object of a transformers model, a --framework hf step; "
        "--framework lean has none{}",
        cfg.framework == Framework::automatic ? fmt::format(" (auto chose lean: {})", hf_gap(cfg))
                                              : ""));
  validate_distributed(cfg);
  validate_preference(cfg);
  if (is_moe(m)) validate_experts(cfg);
  if (cfg.finetune == Finetune::qlora && cfg.quant == QuantKind::int8)
    throw UsageError(
        "--finetune qlora quantises to 4 bits: use --quant nf4 or fp4 (or --finetune "
        "lora --quant int8)");

  // The largest byte counts the program and the estimate form; each must fit in 64 bits.
  const std::int64_t tokens =
      checked_mul(checked_mul(cfg.batch, rows_per_sample(cfg), "rows"), cfg.seq, "batch x seq");
  checked_mul(checked_mul(tokens, m.vocab, "batch x seq x vocab"), 4, "logits bytes");
  checked_mul(checked_mul(checked_mul(tokens, m.heads, "batch x heads x seq"), cfg.seq,
                          "batch x heads x seq x seq"),
              4, "attention score bytes");
  checked_mul(checked_mul(tokens, std::max(m.ffn, m.hidden), "batch x seq x ffn"),
              checked_mul(4, m.layers, "layers"), "activation bytes");
  checked_mul(checked_mul(m.hidden, m.hidden, "hidden x hidden"), m.layers, "layer weights");
  if (m.explicit_head_dim > 0) {  // q|k|v and the output projection read heads x head_dim
    const std::int64_t heads =
        checked_add(m.heads, checked_mul(m.kv_heads, 2, "key/value heads"), "q|k|v heads");
    checked_mul(checked_mul(checked_mul(heads, m.explicit_head_dim, "q|k|v width"), m.hidden,
                            "q|k|v weights"),
                checked_mul(m.layers, 2, "layers"), "attention weights");
  }
  checked_mul(checked_mul(m.vocab, m.hidden, "vocab x hidden"), 4, "embedding bytes");
  checked_mul(checked_mul(m.ffn, m.hidden, "ffn x hidden"), checked_mul(3, m.layers, "layers"),
              "mlp weights");
  // All parameter terms are now known to fit; the total with optimizer state must too.
  checked_mul(parameter_count(m), 20, "model state bytes");
  constexpr Bytes TiB = 1024 * GiB;
  if (const std::int64_t parameters = parameter_count(m); parameters > kMaxParameters)
    throw UsageError(fmt::format(
        "{} has {:.3g} trillion parameters: its weights alone, even at 4 bits, are {:.0f} TiB, "
        "over {} TiB, a hundred times the largest GPU's memory: no GPU holds it (at most {:.1f} "
        "trillion parameters)",
        m.name, static_cast<double>(parameters) / 1e12,
        static_cast<double>(parameters) / 2 / static_cast<double>(TiB), kMaxParameters / 2 / TiB,
        static_cast<double>(kMaxParameters) / 1e12));
}

}  // namespace vrambench
