// Quantisation of base weights (NF4, FP4 with or without double quantisation; int8 per row) and
// bitsandbytes' 8-bit AdamW, CPU reference over whole tensors: the bodies of common/quant_math.h
// run block by block in fp32, dequantised weights stored in their dtype (kmath::store). Buffers are
// sized by core/quant_layout.h; their layout is in kquant::QuantizedWeightBuffers and
// AdamW8bitState.
#pragma once

#include <cstdint>

#include "common/math.h"
#include "common/quant_math.h"
#include "core/dtype.h"
#include "core/quant_layout.h"

namespace vrambench::cpu {

// ---- pieces ------------------------------------------------------------------------------------

// 4-bit codes ((n + 1) / 2 bytes) and fp32 absmax per block of kQuant4bitBlock of w[n] (dtype).
void quantize_4bit(QuantKind kind, std::uint8_t* codes, float* absmax, DType dtype, const void* w,
                   std::int64_t n);
// w[n] (dtype) = level * absmax of its block.
void dequantize_4bit(QuantKind kind, DType dtype, void* w, const std::uint8_t* codes,
                     const float* absmax, std::int64_t n);
// The same with the absmax double-quantised (kquant::nested_absmax per block).
void dequantize_4bit_nested(QuantKind kind, DType dtype, void* w, const std::uint8_t* codes,
                            const std::uint8_t* qabsmax, const float* absmax2, const float* offset,
                            std::int64_t n);

// Double quantisation of the fp32 absmax of `blocks` 4-bit blocks: offset[0] = their mean, then
// absmax - offset in 8-bit codes (signed dynamic map) with an fp32 absmax2 per kQuantNestedBlock.
void quantize_nested_absmax(std::uint8_t* qabsmax, float* absmax2, float* offset,
                            const float* absmax, std::int64_t blocks);

// Blockwise 8-bit with the dynamic map (functional.py quantize_blockwise): codes[n], absmax per
// `block` of x[n] - offset; dequantised x = map[code] * absmax + offset. offset may be null (0).
void quantize_8bit(std::uint8_t* codes, float* absmax, const float* x, const float* offset,
                   std::int64_t n, std::int64_t block, bool is_signed);
void dequantize_8bit(float* x, const std::uint8_t* codes, const float* absmax, const float* offset,
                     std::int64_t n, std::int64_t block, bool is_signed);

// int8 codes [rows, cols] and fp32 absmax per row of w [rows, cols] (dtype), and back.
void quantize_int8_rows(std::int8_t* codes, float* row_absmax, DType dtype, const void* w,
                        std::int64_t rows, std::int64_t cols);
void dequantize_int8_rows(DType dtype, void* w, const std::int8_t* codes, const float* row_absmax,
                          std::int64_t rows, std::int64_t cols);

// ---- whole weights -----------------------------------------------------------------------------

// A [rows, cols] weight (dtype) into the buffers of `kind` (QuantKind::none is refused).
void quantize_weight(QuantKind kind, bool double_quant, const kquant::QuantizedWeightBuffers& out,
                     DType dtype, const void* w, std::int64_t rows, std::int64_t cols);
// The weight back in dtype (bf16 / fp16 / fp32), as the forward of a quantised linear needs it.
void dequantize_weight(QuantKind kind, bool double_quant, DType dtype, void* w,
                       const kquant::QuantizedWeightBuffers& in, std::int64_t rows,
                       std::int64_t cols);

// ---- 8-bit AdamW -------------------------------------------------------------------------------

// One step over param[n] (fp32: the master when there is one, else the weight) with the state of
// optimizer8bit_state_bytes(n): 8-bit codes and absmax when optimizer_state_is_8bit(n), else the
// fp32 m and v of `state` with plain AdamW (cpu::adamw_step), as bitsandbytes does under
// min_8bit_size.
void adamw_8bit_step(float* param, const float* grad, const kquant::AdamW8bitState& state,
                     std::int64_t n, const kmath::AdamParams& p);

}  // namespace vrambench::cpu
