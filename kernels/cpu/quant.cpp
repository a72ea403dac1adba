// Quantisation and 8-bit AdamW over whole tensors: the common/quant_math.h bodies, one lane per
// block. Then the adapters of dequantize and adamw8bit_step (cpu/op_table.h).
#include "cpu/quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/op_table.h"
#include "cpu/optimizer.h"

namespace vrambench::cpu {
namespace {

using kquant::DynamicMap;

// part[0] = the pairwise fold of part[0, count) (count a power of two), in the CUDA kernels' order:
// for s = count / 2, ..., 1, part[l] += part[l + s] for every l < s.
double fold_pairwise(std::vector<double>& part) {
  for (std::size_t s = part.size() / 2; s > 0; s /= 2)
    for (std::size_t lane = 0; lane < s; ++lane) part[lane] += part[lane + s];
  return part[0];
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
  const DynamicMap signed_map = kquant::dynamic_map(true);
  for (std::int64_t b = 0; b < quant_blocks(n, kQuant4bitBlock); ++b) {
    const float absmax = kquant::nested_absmax(signed_map, qabsmax, absmax2, *offset, b);
    const std::int64_t end = std::min((b + 1) * kQuant4bitBlock, n);
    for (std::int64_t i = b * kQuant4bitBlock; i < end; ++i)
      kmath::store(w, dtype, i, kquant::dequantize_4bit_value(levels, codes, i, absmax));
  }
}

void quantize_nested_absmax(std::uint8_t* qabsmax, float* absmax2, float* offset,
                            const float* absmax, std::int64_t blocks) {
  // The GPU's order (common/quant_math.h): a sum per group of kQuantNestedBlock, then a part per
  // lane over the group sums, each folded pairwise.
  const std::int64_t groups = quant_blocks(blocks, kQuantNestedBlock);
  std::vector<float> group_sums(static_cast<std::size_t>(groups));
  std::vector<double> part(kQuantNestedBlock);
  for (std::int64_t g = 0; g < groups; ++g) {
    for (int lane = 0; lane < kQuantNestedBlock; ++lane)
      part[lane] = kquant::nested_group_value(absmax, blocks, g, lane);
    group_sums[g] = static_cast<float>(fold_pairwise(part));
  }
  part.assign(kquant::kNestedMeanLanes, 0.0);
  for (int lane = 0; lane < kquant::kNestedMeanLanes; ++lane)
    part[lane] = kquant::nested_mean_part(group_sums.data(), groups, lane);
  *offset = kquant::nested_mean(fold_pairwise(part), blocks);
  quantize_8bit(qabsmax, absmax2, absmax, offset, blocks, kQuantNestedBlock, true);
}

void quantize_8bit(std::uint8_t* codes, float* absmax, const float* x, const float* offset,
                   std::int64_t n, std::int64_t block, bool is_signed) {
  const DynamicMap map = kquant::dynamic_map(is_signed);
  const kquant::OffsetLoad load{x, offset != nullptr ? *offset : 0.0f};
  for (std::int64_t b = 0; b < quant_blocks(n, block); ++b) {
    const std::int64_t begin = b * block, end = std::min(begin + block, n);
    absmax[b] = kquant::absmax_part(load, begin, end, 0, 1);
    kquant::quantize_8bit_values(codes, load, begin, end, 0, 1, absmax[b], map);
  }
}

void dequantize_8bit(float* x, const std::uint8_t* codes, const float* absmax, const float* offset,
                     std::int64_t n, std::int64_t block, bool is_signed) {
  const DynamicMap map = kquant::dynamic_map(is_signed);
  const float shift = offset != nullptr ? *offset : 0.0f;
  for (std::int64_t i = 0; i < n; ++i)
    x[i] = kquant::dequantize_8bit_value(map, codes, absmax, block, shift, i);
}

void quantize_int8_rows(std::int8_t* codes, float* row_absmax, DType dtype, const void* w,
                        std::int64_t rows, std::int64_t cols) {
  const kquant::StorageLoad load{w, dtype};
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t begin = r * cols;
    row_absmax[r] = kquant::absmax_part(load, begin, begin + cols, 0, 1);
    kquant::quantize_int8_values(codes, load, begin, begin + cols, 0, 1, row_absmax[r]);
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
  const DynamicMap signed_map = kquant::dynamic_map(true),
                   unsigned_map = kquant::dynamic_map(false);
  const float bc1 = p.bias_correction1(), bc2 = p.bias_correction2();
  std::array<float, kOptimizer8bitBlock> m{}, v{};
  for (std::int64_t b = 0; b < quant_blocks(n, kOptimizer8bitBlock); ++b) {
    const std::int64_t begin = b * kOptimizer8bitBlock;
    const std::int64_t count = std::min(kOptimizer8bitBlock, n - begin);
    float absmax_m = 0.0f, absmax_v = 0.0f;
    for (std::int64_t j = 0; j < count; ++j) {
      const std::int64_t i = begin + j;
      m[j] = kquant::adamw_8bit_moment(signed_map, state.m_codes[i], state.absmax_m[b]);
      v[j] = kquant::adamw_8bit_moment(unsigned_map, state.v_codes[i], state.absmax_v[b]);
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

namespace vrambench {

// Rows [row_offset, +rows) of the compute-dtype weight from the quantised module.
void cpu_run_dequantize(const Operands& a, CpuContext&) {
  const Op& op = a.op;
  const DequantizeOperands d = dequantize_operands(a);
  cpu::dequantize_weight(op.quant, op.double_quant, a.out[0].tensor->dtype, d.rows, d.in, op.rows,
                         d.cols);
}

// bitsandbytes' 8-bit AdamW on the weight (or its master), in place on the codes and absmax.
void cpu_run_adamw8bit_step(const Operands& a, CpuContext& context) {
  const Operand& weight = a.in[0];
  const Operand* master = a.input("master");
  const kquant::AdamW8bitState state = adamw_8bit_state(a);
  auto param = cpu::load(master ? *master : weight);
  const auto grad = cpu::load(a.in[1]);
  cpu::adamw_8bit_step(param.data(), grad.data(), state, static_cast<std::int64_t>(param.size()),
                       adam_params(a.op, context.optimizer_steps.next(weight)));
  if (master) cpu::store(*master, param, false);
  cpu::store(weight, param, false);
}

}  // namespace vrambench
