// Sizes of quantised weights and 8-bit optimizer state; see core/quant_layout.h for the sources.
#include "core/quant_layout.h"

#include <fmt/format.h>

#include "core/error.h"

namespace vrambench {
namespace {

void require_numel(std::int64_t numel, std::string_view what) {
  if (numel < 0) throw UsageError(fmt::format("{}: element count {} is negative", what, numel));
}

}  // namespace

std::vector<QuantizedTensor> quantized_weight_tensors(std::int64_t numel, std::int64_t rows,
                                                      QuantKind kind, bool double_quant) {
  constexpr std::string_view what = "quantised weight";
  require_numel(numel, what);
  std::vector<QuantizedTensor> tensors;
  switch (kind) {
    case QuantKind::none:
      return tensors;
    case QuantKind::int8:
      if (rows < 1 || numel % rows != 0)
        throw UsageError(fmt::format(
            "int8 weight: {} elements do not split into {} rows (rows must be >= 1 and divide "
            "the element count)",
            numel, rows));
      // Int8Params: CB int8 [rows, cols], SCB fp32 [rows] (functional.py int8_vectorwise_quant).
      tensors.push_back({"weight", numel});
      tensors.push_back({"row_absmax", checked_mul(rows, 4, what)});
      return tensors;
    case QuantKind::nf4:
    case QuantKind::fp4:
      break;
  }
  const std::int64_t blocks = quant_blocks(numel, kQuant4bitBlock);
  // Order of allocation in functional.py quantize_4bit: the packed codes and the fp32 absmax
  // (the op), the code table (get_4bit_type), then for double quant the offset (mean), the 8-bit
  // absmax codes and the second-level absmax (quantize_blockwise), and the nested map copy.
  tensors.push_back({"weight", numel / 2 + numel % 2});
  if (!double_quant) {
    tensors.push_back({"absmax", checked_mul(blocks, 4, what)});
    tensors.push_back({"quant_map", kQuant4bitCodeEntries * 4});
    return tensors;
  }
  tensors.push_back({"quant_map", kQuant4bitCodeEntries * 4});
  tensors.push_back({"offset", kNestedOffsetBytes});
  tensors.push_back({"absmax", blocks});
  tensors.push_back(
      {"nested_absmax", checked_mul(quant_blocks(blocks, kQuantNestedBlock), 4, what)});
  tensors.push_back({"nested_quant_map", kDynamicMapEntries * 4});
  return tensors;
}

QuantizedWeightBytes quantized_weight_bytes(std::int64_t numel, std::int64_t rows, QuantKind kind,
                                            bool double_quant) {
  constexpr std::string_view what = "quantised weight";
  QuantizedWeightBytes out;
  for (const QuantizedTensor& t : quantized_weight_tensors(numel, rows, kind, double_quant)) {
    if (t.name == "weight")
      out.data = t.bytes;
    else if (t.name == "absmax" || t.name == "row_absmax")
      out.absmax = t.bytes;
    else if (t.name == "nested_absmax")
      out.absmax2 = t.bytes;
    else
      out.code_and_offset += t.bytes;
    out.total = checked_add(out.total, t.bytes, what);
  }
  if (is_4bit(kind) && double_quant)
    out.nested_absmax_transient = checked_mul(quant_blocks(numel, kQuant4bitBlock), 4, what);
  return out;
}

Optimizer8bitStateBytes optimizer8bit_state_bytes(std::int64_t numel, bool paged) {
  constexpr std::string_view what = "8-bit optimizer state";
  require_numel(numel, what);
  Optimizer8bitStateBytes out;
  out.eight_bit = optimizer_state_is_8bit(numel);
  if (out.eight_bit) {
    out.moments = checked_mul(numel, 2, what);
    out.absmax = checked_mul(quant_blocks(numel, kOptimizer8bitBlock), 2 * 4, what);
  } else {
    out.moments = checked_mul(numel, 2 * 4, what);
  }
  out.total = checked_add(out.moments, out.absmax, what);
  out.moments_paged = paged && numel >= kPagedMinNumel;
  return out;
}

}  // namespace vrambench
