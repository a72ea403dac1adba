// Every configuration field by name, so that sweeps and tables can address any of them: set from
// text (validated per field), read back as text, and whether numeric ranges make sense for it.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/config.h"

namespace vrambench {

enum class FieldKind { integer, real, size, choice, text };

struct FieldInfo {
  std::string_view name;  // CLI spelling: "seq", "kv-heads", "vram"
  FieldKind kind;
  std::string_view help;
};

std::span<const FieldInfo> fields();
// Accepts "kv-heads" and "kv_heads". Throws UsageError listing the field names when unknown.
const FieldInfo& find_field(std::string_view name);

// Sets one field from text. "preset" replaces the whole model. Throws UsageError naming the field.
void set_field(RunConfig& cfg, std::string_view name, std::string_view value);
// The field's value as text that set_field reads back: "bf16", "1024", sizes as raw bytes
// "85899345920B".
std::string get_field(const RunConfig& cfg, std::string_view name);

// Parses a whole positive integer (no sign, no fraction); throws UsageError naming `what`.
std::int64_t parse_int(std::string_view text, std::string_view what);

}  // namespace vrambench
