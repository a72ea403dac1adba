// Quantised base weights (NF4 / FP4 blockwise with optional double quantisation, int8 per row) and
// bitsandbytes' 8-bit AdamW on the GPU, over the bodies of common/quant_math.h, bit for bit the CPU
// reference (kernels/cpu/quant.h). The 4-bit kernels give each quantisation block of 64 a warp
// (eight per CUDA block), the 8-bit and int8 kernels a CUDA block per block or row, the 8-bit
// AdamW a CUDA block of 256 threads per 256-value block; absmax by warp shuffles and shared memory.
// Every grid is capped (quant_4bit_grid, row_grid, grid_for) and the kernels loop beyond it.
//
// The launchers check their arguments before any CUDA call and throw std::invalid_argument naming
// the launcher and the argument: a negative size, a null buffer that the call would touch, rows *
// cols beyond 64 bits, a quant kind or dtype the kernel does not take. Zero elements launch
// nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/math.h"
#include "common/quant_math.h"
#include "core/dtype.h"
#include "core/quant_layout.h"
#include "cuda/optimizer.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// Threads of every quantisation kernel but the mean: eight warps, and one per entry of the dynamic
// map, which each block rebuilds in shared memory.
inline constexpr int kQuantThreads = 256;
static_assert(kQuantThreads == kDynamicMapEntries && kQuantThreads == kOptimizer8bitBlock);

// CUDA blocks for the 4-bit kernels over n values: one warp per block of kQuant4bitBlock, capped
// as grid_for caps (the warps then loop over the blocks). Pure, so tests check the launch shape.
unsigned quant_4bit_grid(std::int64_t n);

// Element i of a weight stored as T, as float.
template <typename T>
struct TypedLoad {
  const T* data;
  __host__ __device__ float operator()(std::int64_t i) const { return to_f32(data[i]); }
};

// 8-bit AdamW for element i, with m and v already dequantised (they are requantised by the
// caller once the block's new absmax is known): the update on the master copy when there is one,
// else on the weight; the weight is the result rounded to T.
template <typename T>
__host__ __device__ inline void adamw_8bit_body(std::int64_t i, T* w, const T* grad, float* master,
                                                float* m, float* v, const AdamWParams& p, float bc1,
                                                float bc2) {
  float param = master != nullptr ? master[i] : to_f32(w[i]);
  kquant::adamw_8bit_update(&param, to_f32(grad[i]), m, v, p, bc1, bc2);
  if (master != nullptr) master[i] = param;
  w[i] = from_f32<T>(param);
}

// ---- 4-bit -------------------------------------------------------------------------------------

// codes ((n + 1) / 2 bytes) and fp32 absmax per kQuant4bitBlock of w[n] (dtype); kind nf4 / fp4.
void launch_quantize_4bit(QuantKind kind, DType dtype, std::uint8_t* codes, float* absmax,
                          const void* w, std::int64_t n, cudaStream_t stream);
// w[n] (dtype) from the codes and the fp32 absmax.
void launch_dequantize_4bit(QuantKind kind, DType dtype, void* w, const std::uint8_t* codes,
                            const float* absmax, std::int64_t n, cudaStream_t stream);
// w[n] (dtype) from the codes and the double-quantised absmax, rebuilt per block on the fly (no
// fp32 absmax is written).
void launch_dequantize_4bit_nested(QuantKind kind, DType dtype, void* w, const std::uint8_t* codes,
                                   const std::uint8_t* qabsmax, const float* absmax2,
                                   const float* offset, std::int64_t n, cudaStream_t stream);

// Double quantisation of the fp32 absmax of `blocks` 4-bit blocks: *offset = their mean, then
// qabsmax[blocks] and absmax2[ceil(blocks / 256)] from absmax - offset. Three kernels: a CUDA block
// per group of 256 blocks sums it (into absmax2, overwritten later), one CUDA block adds the
// ceil(blocks / 256) group sums (the order of common/quant_math.h), the 8-bit quantisation of the
// rest.
void launch_quantize_nested_absmax(std::uint8_t* qabsmax, float* absmax2, float* offset,
                                   const float* absmax, std::int64_t blocks, cudaStream_t stream);

// ---- 8-bit dynamic map -------------------------------------------------------------------------

// codes[n] and absmax per `block` (1 <= block) of x[n] - *offset (offset may be null: 0), in the
// signed or unsigned dynamic map.
void launch_quantize_8bit(std::uint8_t* codes, float* absmax, const float* x, const float* offset,
                          std::int64_t n, std::int64_t block, bool is_signed, cudaStream_t stream);
// x[n] = map[code] * absmax of its block + *offset (offset may be null), fp32: the absmax of a
// double-quantised weight as bitsandbytes rebuilds it, or a dequantised optimizer state.
void launch_dequantize_8bit(float* x, const std::uint8_t* codes, const float* absmax,
                            const float* offset, std::int64_t n, std::int64_t block, bool is_signed,
                            cudaStream_t stream);

// ---- int8 per row ------------------------------------------------------------------------------

void launch_quantize_int8_rows(DType dtype, std::int8_t* codes, float* row_absmax, const void* w,
                               std::int64_t rows, std::int64_t cols, cudaStream_t stream);
void launch_dequantize_int8_rows(DType dtype, void* w, const std::int8_t* codes,
                                 const float* row_absmax, std::int64_t rows, std::int64_t cols,
                                 cudaStream_t stream);

// ---- whole weights -----------------------------------------------------------------------------

// A [rows, cols] weight (dtype) into the buffers of `kind` (kquant::QuantizedWeightBuffers; with
// double quant `out.absmax` is the fp32 scratch of one float per block), and back.
void launch_quantize_weight(QuantKind kind, bool double_quant, DType dtype,
                            const kquant::QuantizedWeightBuffers& out, const void* w,
                            std::int64_t rows, std::int64_t cols, cudaStream_t stream);
void launch_dequantize_weight(QuantKind kind, bool double_quant, DType dtype, void* w,
                              const kquant::QuantizedWeightBuffers& in, std::int64_t rows,
                              std::int64_t cols, cudaStream_t stream);

// ---- 8-bit AdamW -------------------------------------------------------------------------------

// One step over w[n] (dtype; grad the same) with an optional fp32 master, and the state of
// optimizer8bit_state_bytes(n): 8-bit (codes and absmax) when optimizer_state_is_8bit(n), else
// state.m / state.v in fp32 through launch_adamw. The bias corrections are computed on the host.
void launch_adamw_8bit(DType dtype, void* w, const void* grad, const kquant::AdamW8bitState& state,
                       float* master, AdamWParams params, std::int64_t n, cudaStream_t stream);

}  // namespace vrambench::cuda
