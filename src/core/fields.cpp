// Field table: the single place that maps a field name to a member of RunConfig.
#include "core/fields.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "core/presets.h"

namespace vrambench {
namespace {

constexpr std::array<FieldInfo, 20> kFields{{
    {"preset", FieldKind::text, "model preset (see `vrambench presets`)"},
    {"arch", FieldKind::choice, "gpt|llama"},
    {"hidden", FieldKind::integer, "hidden size H"},
    {"heads", FieldKind::integer, "attention heads A"},
    {"kv-heads", FieldKind::integer, "key/value heads (grouped-query attention)"},
    {"layers", FieldKind::integer, "transformer blocks L"},
    {"ffn", FieldKind::integer, "MLP inner size F"},
    {"vocab", FieldKind::integer, "vocabulary size V"},
    {"max-positions", FieldKind::integer, "learned position table rows (gpt)"},
    {"seq", FieldKind::integer, "sequence length S"},
    {"batch", FieldKind::integer, "micro-batch B"},
    {"dtype", FieldKind::choice, "fp32|tf32|fp16|bf16"},
    {"attention", FieldKind::choice, "eager|flash"},
    {"recompute", FieldKind::choice, "none|selective|full"},
    {"optimizer", FieldKind::choice, "adamw|sgd|none"},
    {"dropout", FieldKind::real, "dropout probability in [0, 1)"},
    {"scope", FieldKind::choice, "model|layer|attention|mlp"},
    {"allocator", FieldKind::choice, "direct|caching"},
    {"device", FieldKind::text, "auto|sim:PROFILE|cpu|cuda"},
    {"vram", FieldKind::size, "device capacity, e.g. 24GiB"},
}};

std::string normalise(std::string_view name) {
  std::string out(name);
  for (char& c : out)
    if (c == '_') c = '-';
  return out;
}

double parse_real(std::string_view text, std::string_view what) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
    throw UsageError(fmt::format("invalid {} '{}': expected a number", what, text));
  return value;
}

}  // namespace

std::int64_t parse_int(std::string_view text, std::string_view what) {
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range)
    throw UsageError(fmt::format("invalid {} '{}': overflows 64 bits", what, text));
  if (ec != std::errc() || end != text.data() + text.size())
    throw UsageError(fmt::format("invalid {} '{}': expected a whole number", what, text));
  if (value <= 0)
    throw UsageError(fmt::format("invalid {} '{}': must be a positive integer", what, text));
  return value;
}

std::span<const FieldInfo> fields() {
  return kFields;
}

const FieldInfo& find_field(std::string_view name) {
  const std::string n = normalise(name);
  for (const FieldInfo& f : kFields)
    if (f.name == n) return f;
  std::string known;
  for (const FieldInfo& f : kFields) known += (known.empty() ? "" : ", ") + std::string(f.name);
  throw UsageError(fmt::format("unknown field '{}': known fields are {}", name, known));
}

void set_field(RunConfig& cfg, std::string_view name, std::string_view value) {
  const std::string n(find_field(name).name);
  const std::string what = "--" + n;
  ModelConfig& m = cfg.model;
  auto custom = [&] {
    if (m.name.find("(custom)") == std::string::npos) m.name += " (custom)";
  };
  if (n == "preset")
    m = find_preset(value).model;
  else if (n == "arch") {
    // A custom gpt ties its lm head to the embedding as GPT-2 does; a custom llama does not.
    m.arch = parse_arch(value);
    m.tied_embeddings = m.arch == Arch::gpt;
    custom();
  } else if (n == "hidden") {
    m.hidden = parse_int(value, what);
    custom();
  } else if (n == "heads") {
    m.heads = parse_int(value, what);
    custom();
  } else if (n == "kv-heads") {
    m.kv_heads = parse_int(value, what);
    custom();
  } else if (n == "layers") {
    m.layers = parse_int(value, what);
    custom();
  } else if (n == "ffn") {
    m.ffn = parse_int(value, what);
    custom();
  } else if (n == "vocab") {
    m.vocab = parse_int(value, what);
    custom();
  } else if (n == "max-positions") {
    m.max_positions = parse_int(value, what);
    custom();
  } else if (n == "seq")
    cfg.seq = parse_int(value, what);
  else if (n == "batch")
    cfg.batch = parse_int(value, what);
  else if (n == "dtype")
    cfg.dtype = parse_precision(value);
  else if (n == "attention")
    cfg.attention = parse_attention(value);
  else if (n == "recompute")
    cfg.recompute = parse_recompute(value);
  else if (n == "optimizer")
    cfg.optimizer = parse_optimizer(value);
  else if (n == "dropout") {
    cfg.dropout = parse_real(value, what);
    if (!(cfg.dropout >= 0.0 && cfg.dropout < 1.0))
      throw UsageError(fmt::format("invalid --dropout {}: must be in [0, 1)", value));
  } else if (n == "scope")
    cfg.scope = parse_scope(value);
  else if (n == "allocator")
    cfg.allocator = parse_allocator(value);
  else if (n == "device")
    cfg.device = std::string(value);
  else if (n == "vram")
    cfg.vram = parse_bytes(value, what);
}

std::string get_field(const RunConfig& cfg, std::string_view name) {
  const std::string n(find_field(name).name);
  const ModelConfig& m = cfg.model;
  if (n == "preset") return m.name;
  if (n == "arch") return std::string(to_string(m.arch));
  if (n == "hidden") return std::to_string(m.hidden);
  if (n == "heads") return std::to_string(m.heads);
  if (n == "kv-heads") return std::to_string(m.kv_heads);
  if (n == "layers") return std::to_string(m.layers);
  if (n == "ffn") return std::to_string(m.ffn);
  if (n == "vocab") return std::to_string(m.vocab);
  if (n == "max-positions") return std::to_string(m.max_positions);
  if (n == "seq") return std::to_string(cfg.seq);
  if (n == "batch") return std::to_string(cfg.batch);
  if (n == "dtype") return std::string(to_string(cfg.dtype));
  if (n == "attention") return std::string(to_string(cfg.attention));
  if (n == "recompute") return std::string(to_string(cfg.recompute));
  if (n == "optimizer") return std::string(to_string(cfg.optimizer));
  if (n == "dropout") return fmt::format("{:g}", cfg.dropout);
  if (n == "scope") return std::string(to_string(cfg.scope));
  if (n == "allocator") return std::string(to_string(cfg.allocator));
  if (n == "device") return cfg.device;
  return std::to_string(cfg.vram) + "B";  // vram: raw bytes, readable back by set_field
}

}  // namespace vrambench
