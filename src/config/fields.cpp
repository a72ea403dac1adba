// The field table: the single place that maps a field name to a member of RunConfig, its parser,
// its text and its help, one row per field.
#include "config/fields.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "model/families.h"
#include "model/model_file.h"

namespace vrambench {
namespace {

// How a field is parsed, read and written.
struct Access {
  FieldValue (*parse)(std::string_view text, std::string_view option);
  FieldValue (*get)(const RunConfig& cfg);
  void (*set)(RunConfig& cfg, const FieldValue& value);
};

// One row per field: its name and kind, its help, how it is parsed, read and written, and for a
// choice the names of its values, which the help lists first ("fp32|tf32|..." + help).
struct Field {
  std::string_view name;
  FieldKind kind;
  std::string_view help;
  Access access;
  std::string (*names)() = nullptr;
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

template <typename E>
std::string value_names() {
  std::string out;
  for (const auto& [e, name] : enum_names<E>()) {
    out += out.empty() ? "" : "|";
    out += name;
  }
  return out;
}

// A model's integer field; changing one makes the model custom.
template <std::int64_t ModelConfig::*M>
constexpr Field model_integer(std::string_view name, std::string_view help) {
  return {
      name,
      FieldKind::integer,
      help,
      {[](std::string_view t, std::string_view o) -> FieldValue { return parse_positive(t, o); },
       [](const RunConfig& c) -> FieldValue { return c.model.*M; },
       [](RunConfig& c, const FieldValue& v) {
         c.model.*M = std::get<std::int64_t>(v);
         mark_custom(c.model);
       }}};
}

// A member of RunConfig, read and written as it is.
template <typename T, T RunConfig::*M>
constexpr Field run_value(std::string_view name, FieldKind kind, std::string_view help,
                          FieldValue (*parse)(std::string_view, std::string_view)) {
  return {name,
          kind,
          help,
          {parse, [](const RunConfig& c) -> FieldValue { return c.*M; },
           [](RunConfig& c, const FieldValue& v) { c.*M = std::get<T>(v); }}};
}

// A member of RunConfig that holds one of an enum's values.
template <typename E, E RunConfig::*M>
constexpr Field run_choice(std::string_view name, std::string_view help) {
  Field f = run_value<E, M>(name, FieldKind::choice, help, parse_choice<E>);
  f.names = value_names<E>;
  return f;
}

const std::array<Field, 37> kFields{{
    // preset: the whole model.
    {"preset",
     FieldKind::text,
     "model preset (see `vrambench presets`)",
     {[](std::string_view t, std::string_view) -> FieldValue { return find_preset(t).model; },
      [](const RunConfig& c) -> FieldValue { return c.model; },
      [](RunConfig& c, const FieldValue& v) { c.model = std::get<ModelConfig>(v); }}},
    // model: the whole model, from a config.json, and its dtype unless one was given.
    {"model",
     FieldKind::text,
     "a transformers config.json, or a folder holding one (a downloaded checkpoint): the model's "
     "shape, and its torch_dtype as the default --dtype (a model_type it does not read is refused, "
     "naming those it does)",
     {[](std::string_view t, std::string_view) -> FieldValue { return read_model_file(t); },
      [](const RunConfig& c) -> FieldValue { return c.model; },
      [](RunConfig& c, const FieldValue& v) {
        c.model = std::get<ModelConfig>(v);
        if (c.model.dtype && !c.dtype_given) c.dtype = stored_precision(*c.model.dtype);
      }}},
    // arch: a custom gpt ties its lm head to the embedding as GPT-2 does; a custom llama does not.
    {"arch",
     FieldKind::choice,
     "",
     {parse_choice<Arch>, [](const RunConfig& c) -> FieldValue { return c.model.arch; },
      [](RunConfig& c, const FieldValue& v) {
        c.model.arch = std::get<Arch>(v);
        c.model.tied_embeddings = c.model.arch == Arch::gpt;
        mark_custom(c.model);
      }},
     value_names<Arch>},
    model_integer<&ModelConfig::hidden>("hidden", "hidden size H"),
    model_integer<&ModelConfig::heads>("heads", "attention heads A"),
    model_integer<&ModelConfig::kv_heads>("kv-heads", "key/value heads (grouped-query attention)"),
    model_integer<&ModelConfig::layers>("layers", "transformer blocks L"),
    model_integer<&ModelConfig::ffn>("ffn", "MLP inner size F"),
    model_integer<&ModelConfig::vocab>("vocab", "vocabulary size V"),
    model_integer<&ModelConfig::max_positions>("max-positions",
                                               "learned position table rows (gpt)"),
    run_value<std::int64_t, &RunConfig::seq>("seq", FieldKind::integer, "sequence length S",
                                             parse_integer),
    run_value<std::int64_t, &RunConfig::batch>("batch", FieldKind::integer, "micro-batch B",
                                               parse_integer),
    // dtype: given by hand, it outranks a --model's own.
    {"dtype",
     FieldKind::choice,
     " (amp-*: autocast over fp32 weights, --framework hf); unless given, a --model's own "
     "torch_dtype",
     {parse_choice<Precision>, [](const RunConfig& c) -> FieldValue { return c.dtype; },
      [](RunConfig& c, const FieldValue& v) {
        c.dtype = std::get<Precision>(v);
        c.dtype_given = true;
      }},
     value_names<Precision>},
    run_choice<Framework, &RunConfig::framework>(
        "framework",
        ": whose allocations the step reproduces (hf: PyTorch autograd running transformers, with "
        "PEFT and bitsandbytes; lean: a hand-written trainer, a lower bound; auto: hf but for "
        "selective recompute, the layer scopes and an int8 base)"),
    run_choice<Attention, &RunConfig::attention>("attention", ""),
    run_choice<Recompute, &RunConfig::recompute>("recompute", ""),
    run_choice<Optimizer, &RunConfig::optimizer>(
        "optimizer",
        " (also Hugging Face's optim names: adamw_torch, adamw_bnb_8bit, paged_adamw_32bit, "
        "paged_adamw_8bit)"),
    run_value<double, &RunConfig::dropout>("dropout", FieldKind::real,
                                           "dropout probability in [0, 1)", parse_real),
    run_choice<Scope, &RunConfig::scope>("scope", ""),
    run_choice<AllocatorKind, &RunConfig::allocator>("allocator", ""),
    run_value<DeviceChoice, &RunConfig::device>("device", FieldKind::text,
                                                "auto|sim:PROFILE|cpu|cuda", parse_device_field),
    run_value<Bytes, &RunConfig::vram>("vram", FieldKind::size, "device capacity, e.g. 24GiB",
                                       parse_size),
    run_choice<Finetune, &RunConfig::finetune>("finetune", ""),
    run_value<std::int64_t, &RunConfig::lora_rank>("lora-rank", FieldKind::integer, "LoRA rank r",
                                                   parse_integer),
    run_value<double, &RunConfig::lora_alpha>(
        "lora-alpha", FieldKind::number, "LoRA alpha (no memory effect; kept for trainer settings)",
        parse_number),
    run_value<double, &RunConfig::lora_dropout>("lora-dropout", FieldKind::real,
                                                "dropout on the LoRA input, in [0, 1)", parse_real),
    run_value<LoraTargets, &RunConfig::lora_targets>(
        "lora-targets", FieldKind::text,
        "attn|attn-mlp|all-linear|peft-default (PEFT's own when target_modules is None: c_attn, "
        "or q_proj,v_proj), or module names as PEFT takes them: "
        "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj or c_attn,c_proj,c_fc; a "
        "mixture of experts' experts.gate_up_proj,experts.down_proj (PEFT's target_parameters; "
        "join with + in a sweep)",
        parse_lora_targets_field),
    run_choice<QuantKind, &RunConfig::quant>("quant", ": storage of the frozen block linears"),
    run_choice<Toggle, &RunConfig::double_quant>("double-quant", ": 8-bit absmax of 4-bit weights"),
    run_value<std::int64_t, &RunConfig::grad_accum>(
        "grad-accum", FieldKind::integer, "micro-steps per optimizer step (gradients stay live)",
        parse_integer),
    run_choice<Loop, &RunConfig::loop>(
        "loop",
        " (--framework hf): Trainer drops the model's output after the loss; a native PyTorch loop "
        "(outputs = model(**batch)) keeps it, and its logits, through backward"),
    run_value<std::int64_t, &RunConfig::gpus>(
        "gpus", FieldKind::integer,
        "data-parallel GPUs N: the figures are one rank's (per GPU) under --strategy",
        parse_integer),
    run_choice<Strategy, &RunConfig::strategy>(
        "strategy",
        ": how N GPUs share the step (ddp replicates; zero1/2/3 partition optimizer state, "
        "gradients, parameters as DeepSpeed does; fsdp shards as FSDP2's fully_shard, hsdp within "
        "a node of 8)"),
    run_choice<Offload, &RunConfig::offload>(
        "offload",
        ": host memory instead of the device's (zero*: optimizer; zero3: params; fsdp/hsdp: "
        "params), reported apart"),
    run_choice<Routing, &RunConfig::routing>(
        "routing",
        ": how a mixture of experts' routers spread the tokens (balanced: evenly over the "
        "experts; skewed: all on the same top-k experts)"),
    run_choice<Trainer, &RunConfig::trainer>(
        "trainer",
        ": the step of a language-modelling loss (sft), or of TRL's DPOTrainer (a batch of "
        "chosen/rejected pairs, 2 sequences each) or KTOTrainer (a batch of examples and a KL "
        "pass over mismatched pairs)"),
    run_choice<Reference, &RunConfig::reference>(
        "reference",
        " (--trainer dpo|kto): the reference model; auto is TRL's default (PEFT: adapters "
        "disabled; full fine-tuning: a frozen copy in the policy's dtype); precomputed: "
        "precompute_ref_log_probs=True, no reference forward"),
}};

// The fields as the other folders see them, in the table's order: a choice's help starts with
// the names of its values.
const std::vector<FieldInfo>& field_infos() {
  static const std::vector<FieldInfo> infos = [] {
    std::vector<FieldInfo> out;
    for (const Field& f : kFields)
      out.push_back({f.name, f.kind, (f.names ? f.names() : std::string()) + std::string(f.help)});
    return out;
  }();
  return infos;
}

const Access& access(const FieldInfo& field) {
  const auto index = static_cast<std::size_t>(&field - field_infos().data());
  if (index >= kFields.size())
    throw InternalError(fmt::format("field '{}' is not in the field table", field.name));
  return kFields[index].access;
}

std::string normalise(std::string_view name) {
  std::string out(name);
  for (char& c : out)
    if (c == '_') c = '-';
  return out;
}

}  // namespace

std::span<const FieldInfo> fields() {
  return field_infos();
}

const FieldInfo& find_field(std::string_view name) {
  const std::string n = normalise(name);
  for (const FieldInfo& f : fields())
    if (f.name == n) return f;
  std::string known;
  for (const FieldInfo& f : fields()) known += (known.empty() ? "" : ", ") + std::string(f.name);
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
