// Quantisation math shared by the CPU reference and the CUDA kernels: bitsandbytes' NF4 and FP4
// code tables, the dynamic 8-bit map, blockwise absmax quantisation (4-bit, 8-bit, int8 per row)
// and the 8-bit AdamW update. Plain functions over explicit indices, so both compilers build one
// body and the tests run it on the host. Block sizes and their sources are in core/quant_layout.h.
//
// Bit-exact on both sides: every rounding step is one IEEE operation (the *_rn helpers stop nvcc
// from fusing a multiply and an add into an FMA, which the host does not do), every encoder is a
// comparison against midpoints computed the same way, and sums run in a fixed order.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/math.h"
#include "core/dtype.h"
#include "core/quant_layout.h"

namespace vrambench::kquant {

// ---- single-rounding arithmetic ----------------------------------------------------------------
VB_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
VB_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
VB_HD inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
VB_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
VB_HD inline float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return sqrtf(a);
#endif
}

// 1 / absmax, the scale a block is multiplied by before encoding (as bitsandbytes does). The
// absmax is clamped to 1e-38 first, as in backends/default/ops.py quantize_4bit and
// quantize_blockwise (`absmax.clamp(min=1e-38)`): an all-zero block then encodes zeros.
VB_HD inline float absmax_reciprocal(float absmax) {
  return div_rn(1.0f, fmaxf(absmax, 1e-38f));
}

// ---- NF4 -------------------------------------------------------------------------------------
// The 16 NormalFloat levels of QLoRA (Dettmers et al. 2023): quantiles of N(0, 1) normalised to
// [-1, 1], 7 negative, zero, 8 positive. functional.py get_4bit_type("nf4") and csrc/kernels.cu
// nf4_dequantization_lut, value for value; code = index into this sorted list.
VB_HD inline float nf4_level(int code) {
  switch (code & 0x0F) {
    case 0:
      return -1.0f;
    case 1:
      return -0.6961928009986877f;
    case 2:
      return -0.5250730514526367f;
    case 3:
      return -0.39491748809814453f;
    case 4:
      return -0.28444138169288635f;
    case 5:
      return -0.18477343022823334f;
    case 6:
      return -0.09105003625154495f;
    case 7:
      return 0.0f;
    case 8:
      return 0.07958029955625534f;
    case 9:
      return 0.16093020141124725f;
    case 10:
      return 0.24611230194568634f;
    case 11:
      return 0.33791524171829224f;
    case 12:
      return 0.44070982933044434f;
    case 13:
      return 0.5626170039176941f;
    case 14:
      return 0.7229568362236023f;
    default:
      return 1.0f;
  }
}
// The nearest level to x (x already divided by the block's absmax): the number of midpoints
// between adjacent levels that lie strictly below x, so a tie goes to the lower level, as
// torch.bucketize does in backends/default/ops.py quantize_4bit. The unrolled loop has constant
// indices only: every midpoint is a compile-time constant.
VB_HD inline int nf4_encode(float x) {
  int code = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 0; k < 15; ++k) code += x > 0.5f * (nf4_level(k) + nf4_level(k + 1)) ? 1 : 0;
  return code;
}

// ---- FP4 -------------------------------------------------------------------------------------
// bitsandbytes' FP4: a sign bit (0b1000) over 3 bits of exponent and mantissa (2 + 1, exponent
// bias 2 in its own convention) with magnitudes 0, 0.0625, 8, 12, 4, 6, 2, 3 for bits 000..111,
// divided by 12. functional.py get_4bit_type("fp4") (`data.div_(data.abs().max())`) and
// csrc/kernels.cu fp4_dequantization_lut. Not the OCP E2M1 grid (0, 0.5, 1, ..., 6).
VB_HD inline float fp4_magnitude(int bits) {
  switch (bits & 0x7) {
    case 0:
      return 0.0f;
    case 1:
      return 0.0625f / 12.0f;
    case 2:
      return 8.0f / 12.0f;
    case 3:
      return 1.0f;
    case 4:
      return 4.0f / 12.0f;
    case 5:
      return 6.0f / 12.0f;
    case 6:
      return 2.0f / 12.0f;
    default:
      return 3.0f / 12.0f;
  }
}
VB_HD inline float fp4_level(int code) {
  const float magnitude = fp4_magnitude(code);
  return (code & 0x8) != 0 ? -magnitude : magnitude;
}
// The bits of the k-th smallest magnitude: 000, 001, 110, 111, 100, 101, 010, 011.
VB_HD inline int fp4_bits_of_rank(int rank) {
  switch (rank) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return 6;
    case 3:
      return 7;
    case 4:
      return 4;
    case 5:
      return 5;
    case 6:
      return 2;
    default:
      return 3;
  }
}
// The nearest level by magnitude, ties to the smaller magnitude, sign bit for x < 0: the rule of
// csrc/kernels.cu dQuantizeFP4 (its thresholds are these midpoints).
VB_HD inline int fp4_encode(float x) {
  const float magnitude = fabsf(x);
  int rank = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 0; k < 7; ++k)
    rank += magnitude > 0.5f * (fp4_magnitude(fp4_bits_of_rank(k)) +
                                fp4_magnitude(fp4_bits_of_rank(k + 1)))
                ? 1
                : 0;
  return fp4_bits_of_rank(rank) | (x < 0.0f ? 0x8 : 0);
}

VB_HD inline float level_4bit(QuantKind kind, int code) {
  return kind == QuantKind::fp4 ? fp4_level(code) : nf4_level(code);
}
VB_HD inline int encode_4bit(QuantKind kind, float x) {
  return kind == QuantKind::fp4 ? fp4_encode(x) : nf4_encode(x);
}

// The 16 levels of a kind as a table indexed by code (the CUDA kernels keep it in shared memory).
struct Levels4bit {
  float value[16];
  VB_HD float operator[](int code) const { return value[code]; }
};
VB_HD inline Levels4bit levels_4bit(QuantKind kind) {
  Levels4bit t{};
  for (int c = 0; c < 16; ++c) t.value[c] = level_4bit(kind, c);
  return t;
}

// ---- the dynamic 8-bit map ---------------------------------------------------------------------
// functional.py create_dynamic_map(signed, max_exponent_bits=7, total_bits=8): for i = 0..6 the
// midpoints of torch.linspace(0.1, 1, n_i + 1) (float32) times 10^(i - 6), with n_i = 2^i values
// per sign (signed) or 2^(i+1) (unsigned), plus 0 and 1.0; sorted. Signed: 127 negative values
// (down to -0.99297, no -1), 0 at index 127, 127 positive, 1.0 at 255. Unsigned: 0 at index 0,
// 254 positive, 1.0 at 255. Each group lies below the next, so the sorted index gives the group
// and the position in it directly. Element `index` is computed the way torch computes it on the
// CPU: linspace as start + step * j below the halfway point and end - step * (n - j) above it,
// each a fused multiply-add (as torch's CPU kernel compiles), the midpoint (a + b) / 2, the
// product with the float32 power of ten. Checked against the library's output in the tests.
VB_HD inline float dynamic_map_scale(int group) {
  switch (group) {
    case 0:
      return static_cast<float>(1e-6);
    case 1:
      return static_cast<float>(1e-5);
    case 2:
      return static_cast<float>(1e-4);
    case 3:
      return static_cast<float>(1e-3);
    case 4:
      return static_cast<float>(1e-2);
    case 5:
      return static_cast<float>(1e-1);
    default:
      return 1.0f;
  }
}
// Element j of torch.linspace(0.1, 1, items) in float32.
VB_HD inline float dynamic_map_boundary(int j, int items) {
  const float start = static_cast<float>(0.1), end = 1.0f;
  const float step = div_rn(sub_rn(end, start), static_cast<float>(items - 1));
  return j < items / 2 ? fmaf(step, static_cast<float>(j), start)
                       : fmaf(-step, static_cast<float>(items - j - 1), end);
}
VB_HD inline float dynamic_map_value(int index, bool is_signed) {
  if (index >= 255) return 1.0f;
  int rank = 0;  // position among the positive values below 1, ascending
  bool negative = false;
  if (is_signed) {
    if (index == 127) return 0.0f;
    negative = index < 127;
    rank = negative ? 126 - index : index - 128;
  } else {
    if (index <= 0) return 0.0f;
    rank = index - 1;
  }
  int group = 0, first = 0, size = is_signed ? 1 : 2;
  while (rank >= first + size) {
    first += size;
    size *= 2;
    ++group;
  }
  const int k = rank - first, items = size + 1;
  const float mean =
      div_rn(add_rn(dynamic_map_boundary(k, items), dynamic_map_boundary(k + 1, items)), 2.0f);
  const float scale = dynamic_map_scale(group);
  return mul_rn(negative ? -scale : scale, mean);
}

// The 256 values of a map as a table: the CPU reference and the CUDA launchers build it on the host
// with dynamic_map_value, and the kernels take it as a parameter (most copy it to shared memory).
struct DynamicMap {
  float value[kDynamicMapEntries];
  VB_HD float operator[](int index) const { return value[index]; }
};
VB_HD inline DynamicMap dynamic_map(bool is_signed) {
  DynamicMap map{};
  for (int i = 0; i < kDynamicMapEntries; ++i) map.value[i] = dynamic_map_value(i, is_signed);
  return map;
}

// The decision boundary between map[k] and map[k + 1] (k = 0..254): their midpoint, as
// backends/default/ops.py quantize_blockwise computes it (`bounds = (code[:-1] + code[1:]) / 2`).
template <typename Map>
VB_HD inline float dynamic_bound(const Map& map, int k) {
  return mul_rn(add_rn(map[k], map[k + 1]), 0.5f);
}
// A map's 255 boundaries computed on use: the CPU's table of them. The CUDA kernels keep them in
// shared memory instead, each computed once per CUDA block by dynamic_bound.
template <typename Map>
struct MapBounds {
  const Map& map;
  VB_HD float operator[](int k) const { return dynamic_bound(map, k); }
};

// The nearest map value to x (x divided by the block's absmax), ties to the lower index: the
// number of boundaries strictly below x, found by binary search (torch.bucketize in
// quantize_blockwise). `bounds` is indexed 0..254: a MapBounds, or a table of them.
template <typename Bounds>
VB_HD inline int dynamic_encode_bounded(const Bounds& bounds, float x) {
  int code = 0;
  for (int step = 128; step > 0; step /= 2)
    if (x > bounds[code + step - 1]) code += step;
  return code;
}
// The same from the map itself (any table indexed 0..255).
template <typename Map>
VB_HD inline int dynamic_encode(const Map& map, float x) {
  return dynamic_encode_bounded(MapBounds<Map>{map}, x);
}

// ---- element loads -----------------------------------------------------------------------------
// Element i of a weight of any floating dtype, as float (the CPU reference's loader).
struct StorageLoad {
  const void* data;
  DType dtype;
  VB_HD float operator()(std::int64_t i) const { return kmath::load(data, dtype, i); }
};
// x[i] - offset: the absmax of a 4-bit weight centred on its mean before double quantisation
// (functional.py quantize_4bit: `quantize_blockwise(_absmax - offset, ...)`); offset 0 otherwise.
struct OffsetLoad {
  const float* data;
  float offset;
  VB_HD float operator()(std::int64_t i) const { return sub_rn(data[i], offset); }
};

// The lane's part of the absmax of x[begin, end): max |x| over elements begin + lane, + lanes,
// ... (any block, any row: the maximum does not depend on the order).
template <typename Load>
VB_HD inline float absmax_part(Load load, std::int64_t begin, std::int64_t end, std::int64_t lane,
                               std::int64_t lanes) {
  float absmax = 0.0f;
  for (std::int64_t i = begin + lane; i < end; i += lanes) absmax = fmaxf(absmax, fabsf(load(i)));
  return absmax;
}

// ---- blockwise 4-bit (NF4, FP4) ----------------------------------------------------------------
// A weight of n values is cut into blocks of `block` (even) values; block b covers [begin, end)
// with begin = b * block and end = min(begin + block, n). Byte i / 2 of the codes holds element i
// in its high nibble when i is even and in its low nibble when odd (csrc/kernels.cu
// kQuantizeBlockwise: `qvals[j] = q(vals[2j]) << 4 | q(vals[2j+1])`). When n is odd the last low
// nibble encodes 0 (the library pads with a zero). Lane `lane` of `lanes` owns the bytes lane,
// lane + lanes, ... of the block; the CPU runs one lane of one.

// The lane's bytes of the block, given the block's absmax.
template <typename Load>
VB_HD inline void quantize_4bit_bytes(QuantKind kind, std::uint8_t* codes, Load load,
                                      std::int64_t begin, std::int64_t end, std::int64_t lane,
                                      std::int64_t lanes, float absmax) {
  const float scale = absmax_reciprocal(absmax);
  for (std::int64_t i = begin + 2 * lane; i < end; i += 2 * lanes) {
    const int high = encode_4bit(kind, mul_rn(load(i), scale));
    const int low = encode_4bit(kind, i + 1 < end ? mul_rn(load(i + 1), scale) : 0.0f);
    codes[i / 2] = static_cast<std::uint8_t>((high << 4) | low);
  }
}
// The code of element i.
VB_HD inline int code_4bit(const std::uint8_t* codes, std::int64_t i) {
  const int byte = codes[i / 2];
  return i % 2 == 0 ? byte >> 4 : byte & 0x0F;
}
// Element i dequantised: level * absmax of its block (csrc/kernels.cu kDequantizeBlockwise).
template <typename Levels>
VB_HD inline float dequantize_4bit_value(const Levels& levels, const std::uint8_t* codes,
                                         std::int64_t i, float absmax) {
  return mul_rn(levels[code_4bit(codes, i)], absmax);
}

// ---- double quantisation of the absmax ----------------------------------------------------------
// The offset is the mean of the fp32 absmax, summed in two stages of fixed order so that the GPU
// and the CPU agree to the bit and the GPU's first stage spreads over the whole grid. Stage 1: per
// group of kQuantNestedBlock blocks (the groups of the second-level absmax), the values as doubles,
// folded pairwise (s = 128, ..., 1: part[l] += part[l + s]), rounded to fp32; the GPU keeps the
// group sums in absmax2 until the nested quantisation overwrites it. Stage 2: lane l of
// kNestedMeanLanes sums group sums l, l + lanes, ... in order in double, the lanes' sums are folded
// pairwise the same way, and the total is divided by the number of blocks.
inline constexpr int kNestedMeanLanes = 1024;
// Lane `lane` of group g's fold: absmax[g * kQuantNestedBlock + lane], 0 past the last block.
VB_HD inline double nested_group_value(const float* absmax, std::int64_t blocks, std::int64_t g,
                                       int lane) {
  const std::int64_t b = g * kQuantNestedBlock + lane;
  return b < blocks ? static_cast<double>(absmax[b]) : 0.0;
}
VB_HD inline double nested_mean_part(const float* group_sums, std::int64_t groups, int lane) {
  double sum = 0.0;
  for (std::int64_t g = lane; g < groups; g += kNestedMeanLanes) sum += group_sums[g];
  return sum;
}
VB_HD inline float nested_mean(double folded_sum, std::int64_t blocks) {
  return blocks > 0 ? static_cast<float>(folded_sum / static_cast<double>(blocks)) : 0.0f;
}
// The fp32 absmax of 4-bit block b rebuilt from its 8-bit code: signed map value times the
// second-level absmax of its group of kQuantNestedBlock, plus the offset (functional.py
// dequantize_4bit: `dequantize_blockwise(absmax, state2)`, then `absmax += offset`).
template <typename Map>
VB_HD inline float nested_absmax(const Map& signed_map, const std::uint8_t* qabsmax,
                                 const float* absmax2, float offset, std::int64_t b) {
  return add_rn(mul_rn(signed_map[qabsmax[b]], absmax2[b / kQuantNestedBlock]), offset);
}

// ---- blockwise 8-bit (dynamic map) -------------------------------------------------------------
// As 4-bit, one code per byte: lane `lane` of `lanes` owns elements begin + lane, + lanes, ...
// `bounds` as in dynamic_encode_bounded (the CUDA kernels' shared table of them).
template <typename Load, typename Bounds>
VB_HD inline void quantize_8bit_values_bounded(std::uint8_t* codes, Load load, std::int64_t begin,
                                               std::int64_t end, std::int64_t lane,
                                               std::int64_t lanes, float absmax,
                                               const Bounds& bounds) {
  const float scale = absmax_reciprocal(absmax);
  for (std::int64_t i = begin + lane; i < end; i += lanes)
    codes[i] = static_cast<std::uint8_t>(dynamic_encode_bounded(bounds, mul_rn(load(i), scale)));
}
template <typename Load, typename Map>
VB_HD inline void quantize_8bit_values(std::uint8_t* codes, Load load, std::int64_t begin,
                                       std::int64_t end, std::int64_t lane, std::int64_t lanes,
                                       float absmax, const Map& map) {
  quantize_8bit_values_bounded(codes, load, begin, end, lane, lanes, absmax, MapBounds<Map>{map});
}
// Element i: map[code] * absmax of its block, plus offset.
template <typename Map>
VB_HD inline float dequantize_8bit_value(const Map& map, const std::uint8_t* codes,
                                         const float* absmax, std::int64_t block, float offset,
                                         std::int64_t i) {
  return add_rn(mul_rn(map[codes[i]], absmax[i / block]), offset);
}

// ---- int8 with a scale per row -----------------------------------------------------------------
// LLM.int8() weights (functional.py int8_vectorwise_quant, csrc/kernels.cu kInt8VectorQuant):
// q = round-half-even(x * 127 / absmax_row), dequantised as q * absmax_row * (1/127)
// (_ops.py int8_vectorwise_dequant: `A * stats.view(-1, 1) * 7.874015718698502e-3`). A row whose
// absmax is under 1e-30 quantises to zeros instead of dividing by (nearly) zero.
inline constexpr float kInt8Reciprocal = 1.0f / 127.0f;
VB_HD inline float int8_scale(float row_absmax) {
  return row_absmax > 1e-30f ? div_rn(127.0f, row_absmax) : 0.0f;
}
VB_HD inline std::int8_t int8_encode(float x, float scale) {
  const float q = fminf(fmaxf(rintf(mul_rn(x, scale)), -127.0f), 127.0f);
  return static_cast<std::int8_t>(q);
}
// The lane's codes of row [begin, end), given the row's absmax.
template <typename Load>
VB_HD inline void quantize_int8_values(std::int8_t* codes, Load load, std::int64_t begin,
                                       std::int64_t end, std::int64_t lane, std::int64_t lanes,
                                       float row_absmax) {
  const float scale = int8_scale(row_absmax);
  for (std::int64_t i = begin + lane; i < end; i += lanes) codes[i] = int8_encode(load(i), scale);
}
VB_HD inline float int8_decode(std::int8_t q, float row_absmax) {
  return mul_rn(mul_rn(static_cast<float>(q), row_absmax), kInt8Reciprocal);
}

// ---- 8-bit AdamW -------------------------------------------------------------------------------
// bitsandbytes' blockwise 8-bit Adam (csrc/kernels.cu kOptimizerStatic8bit2StateBlockwise): per
// block of kOptimizer8bitBlock values, m is stored as a signed dynamic-map code and v as an
// unsigned one, each with the block's fp32 absmax. A step dequantises both, runs the fp32 update,
// takes the new absmax of each over the block and requantises. The fp32 update here is the
// project's AdamW (kmath::adamw_update: decay first, bias-corrected m / (sqrt(v) + eps)) to the
// last bit on the host, so that 8-bit and 32-bit state differ only by the quantisation;
// bitsandbytes applies the decay after the step, a difference of order lr^2 * wd.

// One element: w (fp32: the master or the weight), the scaled gradient, m and v dequantised; the
// bias corrections bc1 = 1 - beta1^step, bc2 = 1 - beta2^step come from the host.
VB_HD inline void adamw_8bit_update(float* w, float scaled_g, float* m, float* v,
                                    const kmath::AdamParams& p, float bc1, float bc2) {
  const float g = div_rn(scaled_g, p.grad_scale);
  *w = sub_rn(*w, mul_rn(mul_rn(p.lr, p.weight_decay), *w));
  *m = add_rn(mul_rn(p.beta1, *m), mul_rn(1.0f - p.beta1, g));
  *v = add_rn(mul_rn(p.beta2, *v), mul_rn(mul_rn(1.0f - p.beta2, g), g));
  const float m_hat = div_rn(*m, bc1);
  const float v_hat = div_rn(*v, bc2);
  *w = sub_rn(*w, div_rn(mul_rn(p.lr, m_hat), add_rn(sqrt_rn(v_hat), p.eps)));
}
// A moment dequantised from its code: map value times the block's absmax (as
// kOptimizerStatic8bit2StateBlockwise: `smem_quantiles1[m_c1[j]] * absmax1`).
template <typename Map>
VB_HD inline float adamw_8bit_moment(const Map& map, std::uint8_t code, float absmax) {
  return mul_rn(map[code], absmax);
}
// The code of m in the signed map, kept on m's side of zero: a negative m that would round to 0
// takes the negative value next to it, so that the update keeps its direction (the sign check in
// kOptimizerStatic8bit2StateBlockwise; there -0.0 moves too, here only m < 0). `bounds` as in
// dynamic_encode_bounded; the overload without it computes them from the map.
template <typename Map, typename Bounds>
VB_HD inline int adamw_8bit_encode_m(const Map& signed_map, const Bounds& bounds, float m,
                                     float absmax_m) {
  int code = dynamic_encode_bounded(bounds, mul_rn(m, absmax_reciprocal(absmax_m)));
  if (m < 0.0f && !(signed_map[code] < 0.0f)) --code;
  return code;
}
template <typename Map>
VB_HD inline int adamw_8bit_encode_m(const Map& signed_map, float m, float absmax_m) {
  return adamw_8bit_encode_m(signed_map, MapBounds<Map>{signed_map}, m, absmax_m);
}
template <typename Bounds>
VB_HD inline int adamw_8bit_encode_v_bounded(const Bounds& bounds, float v, float absmax_v) {
  return dynamic_encode_bounded(bounds, mul_rn(v, absmax_reciprocal(absmax_v)));
}
template <typename Map>
VB_HD inline int adamw_8bit_encode_v(const Map& unsigned_map, float v, float absmax_v) {
  return adamw_8bit_encode_v_bounded(MapBounds<Map>{unsigned_map}, v, absmax_v);
}

// ---- the buffers of a quantised weight and of 8-bit AdamW state -------------------------------
// What quantized_weight_tensors (core/quant_layout.h) sizes, as pointers. nf4 / fp4: `data` the
// packed codes; without double quant `absmax` fp32 per block; with it `qabsmax`, `absmax2` and
// `offset`, and `absmax` a scratch of one fp32 per block that quantising fills (the library's
// transient _absmax) and dequantising does not use. int8: `data` the int8 codes, `absmax` fp32 per
// row.
struct QuantizedWeightBuffers {
  std::uint8_t* data = nullptr;
  float* absmax = nullptr;
  std::uint8_t* qabsmax = nullptr;
  float* absmax2 = nullptr;
  float* offset = nullptr;
};

// The state of one parameter tensor (optimizer8bit_state_bytes): with 8-bit state the codes and
// the absmax per block (zeros at the start: every code then means 0); under kMin8bitSize
// elements, fp32 m and v, updated as plain AdamW.
struct AdamW8bitState {
  std::uint8_t* m_codes = nullptr;
  std::uint8_t* v_codes = nullptr;
  float* absmax_m = nullptr;
  float* absmax_v = nullptr;
  float* m = nullptr;
  float* v = nullptr;
};

}  // namespace vrambench::kquant
