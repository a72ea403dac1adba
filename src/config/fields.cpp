// The field table: the single place that maps a field name to a member of RunConfig, its parser
// and its text.
#include "config/fields.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "model/families.h"
#include "model/model_file.h"

namespace vrambench {
namespace {

constexpr std::array<FieldInfo, 31> kFields{{
    {"preset", FieldKind::text, "model preset (see `vrambench presets`)"},
    {"model", FieldKind::text,
     "a transformers config.json, or a folder holding one (a downloaded checkpoint): the model's "
     "shape, and its torch_dtype as the default --dtype (a model_type it does not read is refused, "
     "naming those it does)"},
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
    {"dtype", FieldKind::choice,
     "fp32|tf32|fp16|bf16|amp-fp16|amp-bf16 (amp-*: autocast over fp32 weights, --framework hf); "
     "unless given, a --model's own torch_dtype"},
    {"framework", FieldKind::choice,
     "auto|lean|hf: whose allocations the step reproduces (hf: PyTorch autograd running "
     "transformers, with PEFT and bitsandbytes; lean: a hand-written trainer, a lower bound; auto: "
     "hf but for selective recompute, the layer scopes and an int8 base)"},
    {"attention", FieldKind::choice, "eager|flash"},
    {"recompute", FieldKind::choice, "none|selective|full"},
    {"optimizer", FieldKind::choice,
     "adamw|adamw-8bit|paged-adamw|paged-adamw-8bit|sgd|none (also Hugging Face's optim names: "
     "adamw_torch, adamw_bnb_8bit, paged_adamw_32bit, paged_adamw_8bit)"},
    {"dropout", FieldKind::real, "dropout probability in [0, 1)"},
    {"scope", FieldKind::choice, "model|layer|attention|mlp"},
    {"allocator", FieldKind::choice, "direct|caching"},
    {"device", FieldKind::text, "auto|sim:PROFILE|cpu|cuda"},
    {"vram", FieldKind::size, "device capacity, e.g. 24GiB"},
    {"finetune", FieldKind::choice, "full|lora|qlora"},
    {"lora-rank", FieldKind::integer, "LoRA rank r"},
    {"lora-alpha", FieldKind::number, "LoRA alpha (no memory effect; kept for trainer settings)"},
    {"lora-dropout", FieldKind::real, "dropout on the LoRA input, in [0, 1)"},
    {"lora-targets", FieldKind::text,
     "attn|attn-mlp|all-linear|peft-default (PEFT's own when target_modules is None: c_attn, "
     "or q_proj,v_proj), or module names as PEFT takes them: "
     "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj or c_attn,c_proj,c_fc "
     "(join with + in a sweep)"},
    {"quant", FieldKind::choice, "none|nf4|fp4|int8: storage of the frozen block linears"},
    {"double-quant", FieldKind::choice, "on|off: 8-bit absmax of 4-bit weights"},
    {"grad-accum", FieldKind::integer, "micro-steps per optimizer step (gradients stay live)"},
    {"loop", FieldKind::choice,
     "trainer|native (--framework hf): Trainer drops the model's output after the loss; a native "
     "PyTorch loop (outputs = model(**batch)) keeps it, and its logits, through backward"},
}};

// How each field of kFields (same order) is parsed, read and written.
struct Access {
  FieldValue (*parse)(std::string_view text, std::string_view option);
  FieldValue (*get)(const RunConfig& cfg);
  void (*set)(RunConfig& cfg, const FieldValue& value);
};

std::int64_t parse_positive(std::string_view text, std::string_view option) {
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range)
    throw UsageError(fmt::format("invalid --{} '{}': overflows 64 bits", option, text));
  if (ec != std::errc() || end != text.data() + text.size())
    throw UsageError(fmt::format("invalid --{} '{}': expected a whole number", option, text));
  if (value <= 0)
    throw UsageError(fmt::format("invalid --{} '{}': must be a positive integer", option, text));
  return value;
}

double parse_probability(std::string_view text, std::string_view option) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
    throw UsageError(fmt::format("invalid --{} '{}': expected a number", option, text));
  if (!(value >= 0.0 && value < 1.0))
    throw UsageError(fmt::format("invalid --{} {}: must be in [0, 1)", option, text));
  return value;
}

// The precision of a model loaded in the dtype its checkpoint stores (f32, f16, bf16).
Precision stored_precision(DType dtype) {
  return dtype == DType::f16    ? Precision::fp16
         : dtype == DType::bf16 ? Precision::bf16
                                : Precision::fp32;
}

// A model field changed by hand makes the model "<preset> (custom)".
void mark_custom(ModelConfig& m) {
  if (m.name.find("(custom)") == std::string::npos) m.name += " (custom)";
}

template <std::int64_t ModelConfig::*M>
constexpr Access model_integer() {
  return {[](std::string_view t, std::string_view o) -> FieldValue { return parse_positive(t, o); },
          [](const RunConfig& c) -> FieldValue { return c.model.*M; },
          [](RunConfig& c, const FieldValue& v) {
            c.model.*M = std::get<std::int64_t>(v);
            mark_custom(c.model);
          }};
}

template <typename T, T RunConfig::*M>
constexpr Access run_value(FieldValue (*parse)(std::string_view, std::string_view)) {
  return {parse, [](const RunConfig& c) -> FieldValue { return c.*M; },
          [](RunConfig& c, const FieldValue& v) { c.*M = std::get<T>(v); }};
}

template <typename E>
FieldValue parse_choice(std::string_view text, std::string_view option) {
  return parse_enum<E>(text, option);
}
FieldValue parse_integer(std::string_view text, std::string_view option) {
  return parse_positive(text, option);
}
FieldValue parse_size(std::string_view text, std::string_view option) {
  return parse_bytes(text, fmt::format("--{}", option));
}
FieldValue parse_real(std::string_view text, std::string_view option) {
  return parse_probability(text, option);
}
FieldValue parse_device_field(std::string_view text, std::string_view) {
  return parse_device(text);
}
FieldValue parse_number(std::string_view text, std::string_view option) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value) ||
      !(value > 0.0))
    throw UsageError(fmt::format("invalid --{} '{}': expected a positive number", option, text));
  return value;
}
FieldValue parse_lora_targets_field(std::string_view text, std::string_view) {
  return parse_lora_targets(text);
}

const std::array<Access, kFields.size()> kAccess{{
    // preset: the whole model.
    {[](std::string_view t, std::string_view) -> FieldValue { return find_preset(t).model; },
     [](const RunConfig& c) -> FieldValue { return c.model; },
     [](RunConfig& c, const FieldValue& v) { c.model = std::get<ModelConfig>(v); }},
    // model: the whole model, from a config.json, and its dtype unless one was given.
    {[](std::string_view t, std::string_view) -> FieldValue { return read_model_file(t); },
     [](const RunConfig& c) -> FieldValue { return c.model; },
     [](RunConfig& c, const FieldValue& v) {
       c.model = std::get<ModelConfig>(v);
       if (c.model.dtype && !c.dtype_given) c.dtype = stored_precision(*c.model.dtype);
     }},
    // arch: a custom gpt ties its lm head to the embedding as GPT-2 does; a custom llama does not.
    {parse_choice<Arch>, [](const RunConfig& c) -> FieldValue { return c.model.arch; },
     [](RunConfig& c, const FieldValue& v) {
       c.model.arch = std::get<Arch>(v);
       c.model.tied_embeddings = c.model.arch == Arch::gpt;
       mark_custom(c.model);
     }},
    model_integer<&ModelConfig::hidden>(),
    model_integer<&ModelConfig::heads>(),
    model_integer<&ModelConfig::kv_heads>(),
    model_integer<&ModelConfig::layers>(),
    model_integer<&ModelConfig::ffn>(),
    model_integer<&ModelConfig::vocab>(),
    model_integer<&ModelConfig::max_positions>(),
    run_value<std::int64_t, &RunConfig::seq>(parse_integer),
    run_value<std::int64_t, &RunConfig::batch>(parse_integer),
    {parse_choice<Precision>, [](const RunConfig& c) -> FieldValue { return c.dtype; },
     [](RunConfig& c, const FieldValue& v) {
       c.dtype = std::get<Precision>(v);
       c.dtype_given = true;
     }},
    run_value<Framework, &RunConfig::framework>(parse_choice<Framework>),
    run_value<Attention, &RunConfig::attention>(parse_choice<Attention>),
    run_value<Recompute, &RunConfig::recompute>(parse_choice<Recompute>),
    run_value<Optimizer, &RunConfig::optimizer>(parse_choice<Optimizer>),
    run_value<double, &RunConfig::dropout>(parse_real),
    run_value<Scope, &RunConfig::scope>(parse_choice<Scope>),
    run_value<AllocatorKind, &RunConfig::allocator>(parse_choice<AllocatorKind>),
    run_value<DeviceChoice, &RunConfig::device>(parse_device_field),
    run_value<Bytes, &RunConfig::vram>(parse_size),
    run_value<Finetune, &RunConfig::finetune>(parse_choice<Finetune>),
    run_value<std::int64_t, &RunConfig::lora_rank>(parse_integer),
    run_value<double, &RunConfig::lora_alpha>(parse_number),
    run_value<double, &RunConfig::lora_dropout>(parse_real),
    run_value<LoraTargets, &RunConfig::lora_targets>(parse_lora_targets_field),
    run_value<QuantKind, &RunConfig::quant>(parse_choice<QuantKind>),
    run_value<Toggle, &RunConfig::double_quant>(parse_choice<Toggle>),
    run_value<std::int64_t, &RunConfig::grad_accum>(parse_integer),
    run_value<Loop, &RunConfig::loop>(parse_choice<Loop>),
}};

const Access& access(const FieldInfo& field) {
  const auto index = static_cast<std::size_t>(&field - kFields.data());
  if (index >= kFields.size())
    throw InternalError(fmt::format("field '{}' is not in the field table", field.name));
  return kAccess[index];
}

std::string normalise(std::string_view name) {
  std::string out(name);
  for (char& c : out)
    if (c == '_') c = '-';
  return out;
}

}  // namespace

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

FieldValue parse_field(const FieldInfo& field, std::string_view text) {
  return access(field).parse(text, field.name);
}

void set_field(RunConfig& cfg, const FieldInfo& field, const FieldValue& value) {
  access(field).set(cfg, value);
}

FieldValue get_field(const RunConfig& cfg, const FieldInfo& field) {
  return access(field).get(cfg);
}

std::string field_text(const FieldInfo& field, const FieldValue& value) {
  return std::visit(
      [&](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::int64_t>)
          return field.kind == FieldKind::size ? fmt::format("{}B", v) : std::to_string(v);
        else if constexpr (std::is_same_v<T, double>)
          return fmt::format("{:g}", v);
        else if constexpr (std::is_same_v<T, ModelConfig>)
          return field.name == "model" ? v.source : v.name;  // what parse_field reads back
        else
          return std::string(to_string(v));
      },
      value);
}

}  // namespace vrambench
