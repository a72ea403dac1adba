// The sweep grammar (`--sweep seq=512..8192`) and the Cartesian expansion of axes into configs.
// Pure functions: no I/O, no device.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/fields.h"
#include "config/run_config.h"

namespace vrambench {

// One axis: a configuration field (config/fields.h) and the values it takes, typed, in order.
struct Axis {
  std::string field;               // canonical field name ("seq", "kv-heads")
  std::vector<FieldValue> values;  // parsed once, when the axis is read
};

// Parses one --sweep argument. Forms:
//   seq=512..8192          inclusive, doubling
//   seq=512..4096:+512     inclusive, additive step
//   seq=256..8192:*4       inclusive, factor
//   seq=512,1024,3000      list (any field: dtype=fp16,bf16  preset=gpt2,llama2-7b
//   vram=24GiB,80GiB) seq=[512:4096:512]     nvbench range: start:end:step, inclusive
//   seq[pow2]=[9:13]       nvbench power-of-two range: 2^9 .. 2^13
// Ranges are for integer fields only. Every value is parsed (and checked on its own) with
// parse_field. A malformed axis throws UsageError quoting the offending text and showing a valid
// form.
Axis parse_axis(std::string_view text);

// The Cartesian product of the axes applied to `base`, first axis outermost. A `preset` axis is
// applied before the others so that model-field axes override it. Two axes on one field are an
// error. No axes: {base}.
std::vector<RunConfig> expand(const RunConfig& base, const std::vector<Axis>& axes);

// The names of the fields that take more than one value over the axes (the table's key columns).
std::vector<std::string> varying_fields(const std::vector<Axis>& axes);

}  // namespace vrambench
