// The fill rule of each persistent tensor, from its role and name.
#include "device/init_rule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#include "common/math.h"
#include "common/quant_math.h"
#include "core/error.h"
#include "core/quant_layout.h"
#include "cpu/quant.h"

namespace vrambench {
namespace {

std::uint64_t name_hash(std::string_view name) {  // FNV-1a
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// Weights: N(0, 0.02) from a stream of the name and the seed; biases 0; norm weights 1.
kmath::InitRule weight_rule(std::uint64_t seed, std::string_view name) {
  kmath::InitRule rule;
  const bool bias = name.ends_with(".b") || name.ends_with(".bias");
  const bool norm =
      name.find("ln") != std::string_view::npos || name.find("norm") != std::string_view::npos;
  if (name.ends_with(".lora_B")) return rule;  // zeros: PEFT starts B at 0
  if (bias || norm) {
    rule.kind = kmath::InitKind::constant;
    rule.value = bias ? 0.0f : 1.0f;
    return rule;
  }
  rule.kind = kmath::InitKind::normal;
  rule.value = 0.02f;
  rule.stream = name_hash(name) ^ (seed * 0x9E3779B97F4A7C15ull);
  return rule;
}

}  // namespace

kmath::InitRule init_rule(const Program& program, int tensor_id, std::uint64_t seed) {
  const Tensor& t = program.tensor(tensor_id);
  kmath::InitRule rule;
  switch (t.role) {
    case Role::weight:
      return weight_rule(seed, t.name);
    case Role::master_weight: {
      std::string weight_name = t.name.str();
      if (const auto at = weight_name.rfind(".master"); at != std::string::npos)
        weight_name.erase(at, 7);
      rule = weight_rule(seed, weight_name);
      for (const Tensor& other : program.tensors)
        if (other.name == weight_name && other.role == Role::weight)
          rule.round_through = other.dtype;
      return rule;
    }
    case Role::input:
      rule.stream = name_hash(t.name) ^ seed;
      if (t.dtype == DType::i32) {
        rule.kind = kmath::InitKind::token_ids;
        rule.vocab = static_cast<std::uint64_t>(program.config.model.vocab);
      } else {
        rule.kind = kmath::InitKind::normal;
        rule.value = 1.0f;
      }
      return rule;
    default:
      return rule;  // optimizer state and anything else starts at zero
  }
}

namespace {

constexpr std::string_view kPartPrefix = ".w.";

// "layer0.attn.q" of "layer0.attn.q.w.absmax", or "" for a tensor that is no such part.
std::string module_of(const Tensor& t, std::string_view part) {
  const std::string suffix = std::string(kPartPrefix) + std::string(part);
  if (t.role != Role::weight || !t.name.ends_with(suffix)) return {};
  return std::string(t.name.substr(0, t.name.size() - suffix.size()));
}

// The first dequantize op reading tensor `id` as input `index`.
const Op* dequantize_reading(const Program& program, int id, std::size_t* index) {
  for (const Op& op : program.ops) {
    if (op.kind != OpKind::dequantize) continue;
    for (std::size_t k = 0; k < op.inputs.size(); ++k)
      if (op.inputs[k] == id) {
        *index = k;
        return &op;
      }
  }
  return nullptr;
}

std::optional<QuantizedPart> part_of_op(const Program& program, int id, QuantizedPart::Kind kind) {
  std::size_t index = 0;
  const Op* op = dequantize_reading(program, id, &index);
  if (op == nullptr) return std::nullopt;
  const Tensor& w = program.tensor(op->outputs.at(0));
  QuantizedPart part;
  part.quant = op->quant;
  part.double_quant = op->double_quant;
  part.row_offset = op->row_offset;
  part.rows = op->rows;
  part.cols = w.shape.at(1);
  part.dtype = w.dtype;
  // The dequantised copy is "<linear>.w.dq[.bwd][recompute]": its weight is "<linear>.w".
  const auto at = w.name.find(".w.dq");
  if (at == std::string::npos) throw InternalError("dequantised weight '" + w.name + "'");
  part.weight = w.name.substr(0, at + 2);
  if (kind == QuantizedPart::Kind::codes) {
    constexpr QuantizedPart::Kind by_index[] = {
        QuantizedPart::Kind::codes, QuantizedPart::Kind::absmax, QuantizedPart::Kind::absmax2,
        QuantizedPart::Kind::offset};
    part.kind = by_index[std::min<std::size_t>(index, 3)];
  } else {
    part.kind = kind;
  }
  return part;
}

}  // namespace

std::optional<QuantizedPart> quantized_part(const Program& program, int tensor_id) {
  const Tensor& t = program.tensor(tensor_id);
  if (t.role != Role::weight || t.name.find(kPartPrefix) == std::string::npos) return std::nullopt;
  for (const auto& [name, kind] :
       {std::pair{"quant_map", QuantizedPart::Kind::quant_map},
        std::pair{"nested_quant_map", QuantizedPart::Kind::nested_quant_map}}) {
    const std::string module = module_of(t, name);
    if (module.empty()) continue;
    const std::string codes = module + std::string(kPartPrefix) + "weight";
    for (const Tensor& other : program.tensors)
      if (other.name == codes) return part_of_op(program, other.id, kind);
    return std::nullopt;
  }
  return part_of_op(program, tensor_id, QuantizedPart::Kind::codes);
}

void draw_quantized_module(const QuantizedPart& part, std::uint64_t seed, void* w) {
  const kmath::InitRule rule = weight_init_rule(seed, part.weight);
  const std::int64_t first = part.row_offset * part.cols;
  for (std::int64_t i = 0; i < part.rows * part.cols; ++i)
    kmath::store(w, part.dtype, i, kmath::init_value(rule, first + i));
}

void fill_code_table(const QuantizedPart& part, float* table, std::int64_t elements) {
  if (part.kind == QuantizedPart::Kind::quant_map) {
    for (std::int64_t k = 0; k < elements; ++k)
      table[k] =
          k < kQuant4bitCodeEntries ? kquant::level_4bit(part.quant, static_cast<int>(k)) : 0.0f;
    return;
  }
  const kquant::DynamicMap map = kquant::dynamic_map(true);
  for (std::int64_t k = 0; k < elements; ++k)
    table[k] = k < kDynamicMapEntries ? map.value[k] : 0.0f;
}

void fill_quantized_part(const Program& program, int tensor_id, const QuantizedPart& part,
                         std::uint64_t seed, void* data) {
  const Tensor& t = program.tensor(tensor_id);
  using Kind = QuantizedPart::Kind;
  if (part.kind == Kind::quant_map || part.kind == Kind::nested_quant_map) {
    if (t.dtype != DType::f32) throw InternalError("code table '" + t.name + "' is not fp32");
    fill_code_table(part, static_cast<float*>(data), t.elements());
    return;
  }
  const std::int64_t n = part.rows * part.cols;
  std::vector<unsigned char> w(static_cast<std::size_t>(n * dtype_size(part.dtype)));
  draw_quantized_module(part, seed, w.data());
  const QuantizedWeightBytes bytes =
      quantized_weight_bytes(n, part.rows, part.quant, part.double_quant);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(bytes.data));
  const std::int64_t scales =
      part.quant == QuantKind::int8 ? part.rows : quant_blocks(n, kQuant4bitBlock);
  std::vector<float> absmax(static_cast<std::size_t>(scales));
  std::vector<std::uint8_t> qabsmax(part.double_quant ? static_cast<std::size_t>(scales) : 0);
  std::vector<float> absmax2(
      part.double_quant ? static_cast<std::size_t>(quant_blocks(scales, kQuantNestedBlock)) : 0);
  float offset = 0.0f;
  kquant::QuantizedWeightBuffers out;
  out.data = codes.data();
  out.absmax = absmax.data();
  if (part.double_quant) {
    out.qabsmax = qabsmax.data();
    out.absmax2 = absmax2.data();
    out.offset = &offset;
  }
  cpu::quantize_weight(part.quant, part.double_quant, out, part.dtype, w.data(), part.rows,
                       part.cols);
  const void* src = nullptr;
  std::size_t size = 0;
  switch (part.kind) {
    case Kind::codes:
      src = codes.data(), size = codes.size();
      break;
    case Kind::absmax:
      if (part.double_quant)
        src = qabsmax.data(), size = qabsmax.size();
      else
        src = absmax.data(), size = absmax.size() * sizeof(float);
      break;
    case Kind::absmax2:
      src = absmax2.data(), size = absmax2.size() * sizeof(float);
      break;
    case Kind::offset:
      src = &offset, size = sizeof(float);
      break;
    default:
      break;
  }
  if (static_cast<Bytes>(size) != t.bytes)
    throw InternalError(
        fmt::format("quantised part '{}': {} bytes, the program has {}", t.name, size, t.bytes));
  std::memcpy(data, src, size);
}

kmath::InitRule weight_init_rule(std::uint64_t seed, std::string_view name) {
  return weight_rule(seed, name);
}

float initial_weight_value(std::uint64_t seed, std::string_view name, std::int64_t i) {
  return kmath::init_value(weight_rule(seed, name), i);
}

}  // namespace vrambench
