// Every configuration field by name, so that the command line, sweeps and tables can address any
// of them. A field's text becomes its typed value once: on the command line through CLI11
// validators built from the same tables (src/cli/), in a sweep through parse_field. From then on
// only typed values move: set on a configuration, read back, shown as table cells.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "config/run_config.h"

namespace vrambench {

enum class FieldKind {
  integer,  // std::int64_t, positive
  real,     // double, a probability in [0, 1)
  number,   // double, positive
  size,     // std::int64_t bytes, from "24GiB", "16GB", "20.5" (GiB)
  choice,   // one of an enum's names (enum_names)
  text,     // preset and model (a ModelConfig), device (a DeviceChoice), lora-targets
};

// A field's typed value: the alternative its kind and name hold.
using FieldValue =
    std::variant<std::int64_t, double, Arch, Precision, Framework, Attention, Recompute, Optimizer,
                 Scope, AllocatorKind, Finetune, QuantKind, Toggle, Loop, Strategy, Offload,
                 Routing, Trainer, Reference, LoraTargets, DeviceChoice, ModelConfig>;

struct FieldInfo {
  std::string_view name;  // CLI spelling: "seq", "kv-heads", "vram"
  FieldKind kind;
  std::string help;  // a choice's starts with the names of its values: "fp32|tf32|..."
};

std::span<const FieldInfo> fields();
// Accepts "kv-heads" and "kv_heads". Throws UsageError listing the field names when unknown.
const FieldInfo& find_field(std::string_view name);

// The field's value from text, checked on its own (how fields fit together is validate()'s):
// "bf16", "1024", "24GiB", "0.1", "gpt2", "sim:h100-80gb". Throws UsageError naming --<field>.
FieldValue parse_field(const FieldInfo& field, std::string_view text);
// Sets one field. "preset" and "model" replace the whole model; a model field marks it "(custom)".
void set_field(RunConfig& cfg, const FieldInfo& field, const FieldValue& value);
FieldValue get_field(const RunConfig& cfg, const FieldInfo& field);
// The value as text that parse_field reads back: "bf16", "1024", the preset's name, the model's
// config.json path, sizes as raw bytes "85899345920B".
std::string field_text(const FieldInfo& field, const FieldValue& value);

}  // namespace vrambench
