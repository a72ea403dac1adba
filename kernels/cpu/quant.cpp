// Quantisation and 8-bit AdamW over whole tensors: the common/quant.h bodies, one lane per block.
#include "cpu/quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/optimizer.h"

namespace vrambench::cpu {
namespace {

using Map = std::array<float, kDynamicMapEntries>;

Map dynamic_map(bool is_signed) {
  Map map{};
  for (int i = 0; i < kDynamicMapEntries; ++i) map[i] = kquant::dynamic_map_value(i, is_signed);
  return map;
}

void require_4bit(QuantKind kind, const char* what) {
  if (!is_4bit(kind))
    throw std::invalid_argument(std::string(what) + ": quant kind " +
                                std::string(quant_kind_name(kind)) + " is not nf4 or fp4");
}

}  // namespace

void quantize_4bit(QuantKind kind, std::uint8_t* codes, float* absmax, DType dtype, const void* w,
                   std::int64_t n) {
  require_4bit(kind, "quantize_4bit");
  const kquant::StorageLoad load{w, dtype};
  for (std::int64_t b = 0; b < quant_blocks(n, kQuant4bitBlock); ++b) {
    const std::int64_t begin = b * kQuant4bitBlock;
    const std::int64_t end = std::min(begin + kQuant4bitBlock, n);
    absmax[b] = kquant::absmax_part(load, begin, end, 0, 1);
    kquant::quantize_4bit_bytes(kind, codes, load, begin, end, 0, 1, absmax[b]);
  }
}

void dequantize_4bit(QuantKind kind, DType dtype, void* w, const std::uint8_t* codes,
                     const float* absmax, std::int64_t n) {
  require_4bit(kind, "dequantize_4bit");
  const kquant::Levels4bit levels = kquant::levels_4bit(kind);
  for (std::int64_t i = 0; i < n; ++i)
    kmath::store(w, dtype, i,
                 kquant::dequantize_4bit_value(levels, codes, i, absmax[i / kQuant4bitBlock]));
}

void dequantize_4bit_nested(QuantKind kind, DType dtype, void* w, const std::uint8_t* codes,
                            const std::uint8_t* qabsmax, const float* absmax2, const float* offset,
                            std::int64_t n) {
  require_4bit(kind, "dequantize_4bit_nested");
  const kquant::Levels4bit levels = kquant::levels_4bit(kind);
  for (std::int64_t b = 0; b < quant_blocks(n, kQuant4bitBlock); ++b) {
    const float absmax = kquant::nested_absmax(qabsmax, absmax2, *offset, b);
    const std::int64_t end = std::min((b + 1) * kQuant4bitBlock, n);
    for (std::int64_t i = b * kQuant4bitBlock; i < end; ++i)
      kmath::store(w, dtype, i, kquant::dequantize_4bit_value(levels, codes, i, absmax));
  }
}

void quantize_nested_absmax(std::uint8_t* qabsmax, float* absmax2, float* offset,
                            const float* absmax, std::int64_t blocks) {
  // The GPU's order: a part per lane, folded pairwise.
  std::vector<double> part(kquant::kNestedMeanLanes);
  for (int lane = 0; lane < kquant::kNestedMeanLanes; ++lane)
    part[lane] = kquant::nested_mean_part(absmax, blocks, lane);
  for (int s = kquant::kNestedMeanLanes / 2; s > 0; s /= 2)
    for (int lane = 0; lane < s; ++lane) part[lane] += part[lane + s];
  *offset = kquant::nested_mean(part[0], blocks);
  quantize_8bit(qabsmax, absmax2, absmax, offset, blocks, kQuantNestedBlock, true);
}

void quantize_8bit(std::uint8_t* codes, float* absmax, const float* x, const float* offset,
                   std::int64_t n, std::int64_t block, bool is_signed) {
  const Map map = dynamic_map(is_signed);
  const kquant::OffsetLoad load{x, offset != nullptr ? *offset : 0.0f};
  for (std::int64_t b = 0; b < quant_blocks(n, block); ++b) {
    const std::int64_t begin = b * block, end = std::min(begin + block, n);
    absmax[b] = kquant::absmax_part(load, begin, end, 0, 1);
    kquant::quantize_8bit_values(codes, load, begin, end, 0, 1, absmax[b], map);
  }
}

void dequantize_8bit(float* x, const std::uint8_t* codes, const float* absmax, const float* offset,
                     std::int64_t n, std::int64_t block, bool is_signed) {
  const Map map = dynamic_map(is_signed);
  const float shift = offset != nullptr ? *offset : 0.0f;
  for (std::int64_t i = 0; i < n; ++i)
    x[i] = kquant::dequantize_8bit_value(map, codes, absmax, block, shift, i);
}

void quantize_int8_rows(std::int8_t* codes, float* row_absmax, DType dtype, const void* w,
                        std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float absmax = 0.0f;
    for (std::int64_t c = 0; c < cols; ++c)
      absmax = std::max(absmax, std::fabs(kmath::load(w, dtype, r * cols + c)));
    row_absmax[r] = absmax;
    const float scale = kquant::int8_scale(absmax);
    for (std::int64_t c = 0; c < cols; ++c)
      codes[r * cols + c] = kquant::int8_encode(kmath::load(w, dtype, r * cols + c), scale);
  }
}

void dequantize_int8_rows(DType dtype, void* w, const std::int8_t* codes, const float* row_absmax,
                          std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      kmath::store(w, dtype, r * cols + c, kquant::int8_decode(codes[r * cols + c], row_absmax[r]));
}

void quantize_weight(QuantKind kind, bool double_quant, const kquant::QuantizedWeightBuffers& out,
                     DType dtype, const void* w, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  if (kind == QuantKind::int8) {
    quantize_int8_rows(reinterpret_cast<std::int8_t*>(out.data), out.absmax, dtype, w, rows, cols);
    return;
  }
  require_4bit(kind, "quantize_weight");
  quantize_4bit(kind, out.data, out.absmax, dtype, w, n);
  if (double_quant)
    quantize_nested_absmax(out.qabsmax, out.absmax2, out.offset, out.absmax,
                           quant_blocks(n, kQuant4bitBlock));
}

void dequantize_weight(QuantKind kind, bool double_quant, DType dtype, void* w,
                       const kquant::QuantizedWeightBuffers& in, std::int64_t rows,
                       std::int64_t cols) {
  const std::int64_t n = rows * cols;
  if (kind == QuantKind::int8) {
    dequantize_int8_rows(dtype, w, reinterpret_cast<const std::int8_t*>(in.data), in.absmax, rows,
                         cols);
    return;
  }
  require_4bit(kind, "dequantize_weight");
  if (double_quant)
    dequantize_4bit_nested(kind, dtype, w, in.data, in.qabsmax, in.absmax2, in.offset, n);
  else
    dequantize_4bit(kind, dtype, w, in.data, in.absmax, n);
}

void adamw_8bit_step(float* param, const float* grad, const kquant::AdamW8bitState& state,
                     std::int64_t n, const kmath::AdamParams& p) {
  if (!optimizer_state_is_8bit(n)) {
    adamw_step(param, grad, state.m, state.v, n, p);
    return;
  }
  const Map signed_map = dynamic_map(true), unsigned_map = dynamic_map(false);
  const float bc1 = p.bias_correction1(), bc2 = p.bias_correction2();
  std::array<float, kOptimizer8bitBlock> m{}, v{};
  for (std::int64_t b = 0; b < quant_blocks(n, kOptimizer8bitBlock); ++b) {
    const std::int64_t begin = b * kOptimizer8bitBlock;
    const std::int64_t count = std::min(kOptimizer8bitBlock, n - begin);
    float absmax_m = 0.0f, absmax_v = 0.0f;
    for (std::int64_t j = 0; j < count; ++j) {
      const std::int64_t i = begin + j;
      m[j] = kquant::mul_rn(signed_map[state.m_codes[i]], state.absmax_m[b]);
      v[j] = kquant::mul_rn(unsigned_map[state.v_codes[i]], state.absmax_v[b]);
      kquant::adamw_8bit_update(&param[i], grad[i], &m[j], &v[j], p, bc1, bc2);
      absmax_m = std::max(absmax_m, std::fabs(m[j]));
      absmax_v = std::max(absmax_v, std::fabs(v[j]));
    }
    state.absmax_m[b] = absmax_m;
    state.absmax_v[b] = absmax_v;
    for (std::int64_t j = 0; j < count; ++j) {
      state.m_codes[begin + j] =
          static_cast<std::uint8_t>(kquant::adamw_8bit_encode_m(signed_map, m[j], absmax_m));
      state.v_codes[begin + j] =
          static_cast<std::uint8_t>(kquant::adamw_8bit_encode_v(unsigned_map, v[j], absmax_v));
    }
  }
}

}  // namespace vrambench::cpu
