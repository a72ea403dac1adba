// Enum names, validation and parameter counts of the configuration.
#include "core/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

#include "core/error.h"
#include "core/presets.h"

namespace vrambench {
namespace {

template <typename E, std::size_t N>
using NameTable = std::array<std::pair<E, std::string_view>, N>;

constexpr NameTable<Arch, 2> kArch{{{Arch::gpt, "gpt"}, {Arch::llama, "llama"}}};
constexpr NameTable<Precision, 4> kPrecision{{{Precision::fp32, "fp32"},
                                              {Precision::tf32, "tf32"},
                                              {Precision::fp16, "fp16"},
                                              {Precision::bf16, "bf16"}}};
constexpr NameTable<Attention, 2> kAttention{
    {{Attention::eager, "eager"}, {Attention::flash, "flash"}}};
constexpr NameTable<Recompute, 3> kRecompute{
    {{Recompute::none, "none"}, {Recompute::selective, "selective"}, {Recompute::full, "full"}}};
constexpr NameTable<Optimizer, 3> kOptimizer{
    {{Optimizer::adamw, "adamw"}, {Optimizer::sgd, "sgd"}, {Optimizer::none, "none"}}};
constexpr NameTable<Scope, 4> kScope{{{Scope::model, "model"},
                                      {Scope::layer, "layer"},
                                      {Scope::attention, "attention"},
                                      {Scope::mlp, "mlp"}}};
constexpr NameTable<AllocatorKind, 2> kAllocator{
    {{AllocatorKind::direct, "direct"}, {AllocatorKind::caching, "caching"}}};

template <typename E, std::size_t N>
std::string_view name_of(const NameTable<E, N>& table, E value) {
  for (const auto& [e, name] : table)
    if (e == value) return name;
  return "?";
}

void require_positive(std::int64_t value, std::string_view option) {
  if (value <= 0)
    throw UsageError(fmt::format("invalid --{} {}: must be a positive integer", option, value));
}

}  // namespace

std::string_view to_string(Arch v) {
  return name_of(kArch, v);
}
std::string_view to_string(Precision v) {
  return name_of(kPrecision, v);
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

template <>
EnumNames<Arch> enum_names<Arch>() {
  return kArch;
}
template <>
EnumNames<Precision> enum_names<Precision>() {
  return kPrecision;
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

template <typename E>
E parse_enum(std::string_view text, std::string_view option) {
  std::string allowed;
  for (const auto& [e, name] : enum_names<E>()) {
    if (name == text) return e;
    allowed += allowed.empty() ? "" : "|";
    allowed += name;
  }
  throw UsageError(fmt::format("invalid --{} '{}': allowed values are {}", option, text, allowed));
}
template Arch parse_enum<Arch>(std::string_view, std::string_view);
template Precision parse_enum<Precision>(std::string_view, std::string_view);
template Attention parse_enum<Attention>(std::string_view, std::string_view);
template Recompute parse_enum<Recompute>(std::string_view, std::string_view);
template Optimizer parse_enum<Optimizer>(std::string_view, std::string_view);
template Scope parse_enum<Scope>(std::string_view, std::string_view);
template AllocatorKind parse_enum<AllocatorKind>(std::string_view, std::string_view);

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
      return DType::f16;
    case Precision::bf16:
      return DType::bf16;
    case Precision::fp32:
    case Precision::tf32:
      return DType::f32;
  }
  return DType::f32;
}

bool has_master_weights(Precision p) {
  return p == Precision::fp16 || p == Precision::bf16;
}

std::int64_t layer_parameter_count(const ModelConfig& m) {
  const std::int64_t H = m.hidden, F = m.ffn;
  const std::int64_t qkv_out = qkv_width(m);
  if (m.arch == Arch::gpt) {
    return 2 * H                    // ln1 weight, bias
           + qkv_out * H + qkv_out  // qkv
           + H * H + H              // attention output projection
           + 2 * H                  // ln2
           + F * H + F              // fc
           + H * F + H;             // mlp projection
  }
  return H              // attention rms norm
         + qkv_out * H  // q, k, v (no bias)
         + H * H        // output projection
         + H            // mlp rms norm
         + 3 * F * H;   // gate, up, down
}

std::int64_t parameter_count(const ModelConfig& m) {
  const std::int64_t H = m.hidden;
  std::int64_t n = m.vocab * H + m.layers * layer_parameter_count(m);
  if (m.arch == Arch::gpt)
    n += m.max_positions * H + 2 * H;  // positions, final layer norm
  else
    n += H;  // final rms norm
  if (!m.tied_embeddings) n += m.vocab * H;
  return n;
}

void validate(const RunConfig& cfg) {
  const ModelConfig& m = cfg.model;
  require_positive(m.hidden, "hidden");
  require_positive(m.heads, "heads");
  require_positive(m.kv_heads, "kv-heads");
  require_positive(m.layers, "layers");
  require_positive(m.ffn, "ffn");
  require_positive(m.vocab, "vocab");
  require_positive(m.max_positions, "max-positions");
  require_positive(cfg.seq, "seq");
  require_positive(cfg.batch, "batch");
  if (m.hidden % m.heads != 0)
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

  // The largest byte counts the program and the estimate form; each must fit in 64 bits.
  const std::int64_t tokens = checked_mul(cfg.batch, cfg.seq, "batch x seq");
  checked_mul(checked_mul(tokens, m.vocab, "batch x seq x vocab"), 4, "logits bytes");
  checked_mul(checked_mul(checked_mul(tokens, m.heads, "batch x heads x seq"), cfg.seq,
                          "batch x heads x seq x seq"),
              4, "attention score bytes");
  checked_mul(checked_mul(tokens, std::max(m.ffn, m.hidden), "batch x seq x ffn"),
              checked_mul(4, m.layers, "layers"), "activation bytes");
  checked_mul(checked_mul(m.hidden, m.hidden, "hidden x hidden"), m.layers, "layer weights");
  checked_mul(checked_mul(m.vocab, m.hidden, "vocab x hidden"), 4, "embedding bytes");
  checked_mul(checked_mul(m.ffn, m.hidden, "ffn x hidden"), checked_mul(3, m.layers, "layers"),
              "mlp weights");
  // All parameter terms are now known to fit; the total with optimizer state must too.
  checked_mul(parameter_count(m), 20, "model state bytes");
}

}  // namespace vrambench
