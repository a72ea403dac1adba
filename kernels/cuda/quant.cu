// Quantisation and 8-bit AdamW kernels: a warp per 4-bit block, a CUDA block per 8-bit block, per
// int8 row and per 8-bit AdamW block. The dynamic maps are built once on the host (the same
// function as the CPU reference's, so the same bits), passed as __grid_constant__ parameters and
// copied to shared memory with their decision boundaries; the 4-bit levels live in shared memory.
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/quant_layout.h"
#include "cuda/check.h"
#include "cuda/op_table.h"
#include "cuda/quant.h"
#include "cuda/reduce.h"

namespace vrambench::cuda {
namespace {

constexpr int kQuantWarps = kQuantThreads / 32;
constexpr int kBounds = kDynamicMapEntries - 1;
using kquant::DynamicMap;

// The two maps, built on first use; read-only afterwards.
const DynamicMap& host_map(bool is_signed) {
  static const DynamicMap signed_map = kquant::dynamic_map(true);
  static const DynamicMap unsigned_map = kquant::dynamic_map(false);
  return is_signed ? signed_map : unsigned_map;
}

// ---- device helpers -----------------------------------------------------------------------------

// A map and its boundaries in shared memory: thread t copies entry t and computes boundary t
// (kQuantThreads == kDynamicMapEntries). The caller synchronises before reading them.
struct SharedMap {
  float value[kDynamicMapEntries];
  float bound[kBounds];
};
__device__ inline void fill_shared_map(SharedMap& shared, const DynamicMap& map) {
  shared.value[threadIdx.x] = map[static_cast<int>(threadIdx.x)];
  if (threadIdx.x < kBounds)
    shared.bound[threadIdx.x] = kquant::dynamic_bound(map, static_cast<int>(threadIdx.x));
}

// part[0] + ... + part[kCount - 1] folded pairwise (s = kCount / 2, ..., 1: part[l] += part[l + s])
// by a block of at least kCount / 2 threads, the order of common/quant_math.h's nested mean. Every
// thread calls it after writing its part and gets the total; part may be rewritten afterwards.
template <int kCount>
__device__ inline double fold_pairwise(double* part) {
  for (int s = kCount / 2; s > 0; s /= 2) {
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
  }
  __syncthreads();
  const double total = part[0];
  __syncthreads();
  return total;
}

// Two adjacent values as one vector store; w aligned to two of them.
__device__ inline void store_pair(float* w, float first, float second) {
  *reinterpret_cast<float2*>(w) = make_float2(first, second);
}
__device__ inline void store_pair(__half* w, __half first, __half second) {
  *reinterpret_cast<__half2*>(w) = __halves2half2(first, second);
}
__device__ inline void store_pair(__nv_bfloat16* w, __nv_bfloat16 first, __nv_bfloat16 second) {
  *reinterpret_cast<__nv_bfloat162*>(w) = __halves2bfloat162(first, second);
}

// ---- 4-bit --------------------------------------------------------------------------------------

// Warp `warp` of CUDA block blockIdx.x takes 4-bit blocks blockIdx.x * kQuantWarps + warp, then
// every gridDim.x * kQuantWarps further: the loop is uniform over the warp, so its shuffles are.
// Each lane encodes one byte (two values) of the 32 of a block.
template <typename T>
__global__ void __launch_bounds__(kQuantThreads)
    quantize_4bit_kernel(QuantKind kind, std::uint8_t* codes, float* absmax, const T* w,
                         std::int64_t n, std::int64_t blocks) {
  const std::int64_t lane = threadIdx.x % 32;
  const TypedLoad<T> load{w};
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * kQuantWarps + threadIdx.x / 32;
       b < blocks; b += static_cast<std::int64_t>(gridDim.x) * kQuantWarps) {
    const std::int64_t begin = b * kQuant4bitBlock;
    const std::int64_t end = begin + kQuant4bitBlock < n ? begin + kQuant4bitBlock : n;
    const float block_absmax = warp_max(kquant::absmax_part(load, begin, end, lane, 32));
    if (lane == 0) absmax[b] = block_absmax;
    kquant::quantize_4bit_bytes(kind, codes, load, begin, end, lane, 32, block_absmax);
  }
}

// As quantize_4bit_kernel, a byte per lane decoded into two values stored as one pair when
// `paired`. The absmax comes from `absmax`, or when qabsmax is set from the double-quantised
// absmax: the lanes of a warp read the same map entry, which the constant cache broadcasts.
template <typename T>
__global__ void __launch_bounds__(kQuantThreads)
    dequantize_4bit_kernel(QuantKind kind, T* w, const std::uint8_t* codes, const float* absmax,
                           const std::uint8_t* qabsmax, const float* absmax2, const float* offset,
                           const __grid_constant__ DynamicMap signed_map, std::int64_t n,
                           std::int64_t blocks, bool paired) {
  __shared__ float levels[16];
  if (threadIdx.x < 16)
    levels[threadIdx.x] = kquant::level_4bit(kind, static_cast<int>(threadIdx.x));
  __syncthreads();
  const std::int64_t lane = threadIdx.x % 32;
  const float shift = qabsmax != nullptr ? *offset : 0.0f;
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * kQuantWarps + threadIdx.x / 32;
       b < blocks; b += static_cast<std::int64_t>(gridDim.x) * kQuantWarps) {
    const float block_absmax = qabsmax != nullptr
                                   ? kquant::nested_absmax(signed_map, qabsmax, absmax2, shift, b)
                                   : absmax[b];
    const std::int64_t begin = b * kQuant4bitBlock;
    const std::int64_t end = begin + kQuant4bitBlock < n ? begin + kQuant4bitBlock : n;
    const std::int64_t i = begin + 2 * lane;
    if (i >= end) continue;
    const T first = from_f32<T>(kquant::dequantize_4bit_value(levels, codes, i, block_absmax));
    if (i + 1 >= end) {
      w[i] = first;
      continue;
    }
    const T second = from_f32<T>(kquant::dequantize_4bit_value(levels, codes, i + 1, block_absmax));
    if (paired) {
      store_pair(w + i, first, second);
    } else {
      w[i] = first;
      w[i + 1] = second;
    }
  }
}

// ---- double quantisation ------------------------------------------------------------------------

// Stage 1 of the mean: a CUDA block per group of kQuantNestedBlock 4-bit blocks, a thread per
// block; the group's sum goes into absmax2[g] (the nested quantisation overwrites it afterwards).
__global__ void __launch_bounds__(kQuantNestedBlock)
    nested_group_sum_kernel(float* group_sums, const float* absmax, std::int64_t blocks,
                            std::int64_t groups) {
  __shared__ double part[kQuantNestedBlock];
  VB_BLOCK_ROWS(g, groups) {
    part[threadIdx.x] =
        kquant::nested_group_value(absmax, blocks, g, static_cast<int>(threadIdx.x));
    const double sum = fold_pairwise<kQuantNestedBlock>(part);
    if (threadIdx.x == 0) group_sums[g] = static_cast<float>(sum);
  }
}

// Stage 2: *offset = (sum of the group sums) / blocks, one block of kNestedMeanLanes threads over
// ceil(blocks / 256) values (ceil(n / 16384) for a weight of n values).
__global__ void __launch_bounds__(kquant::kNestedMeanLanes)
    nested_mean_kernel(float* offset, const float* group_sums, std::int64_t groups,
                       std::int64_t blocks) {
  __shared__ double part[kquant::kNestedMeanLanes];
  part[threadIdx.x] = kquant::nested_mean_part(group_sums, groups, static_cast<int>(threadIdx.x));
  const double sum = fold_pairwise<kquant::kNestedMeanLanes>(part);
  if (threadIdx.x == 0) *offset = kquant::nested_mean(sum, blocks);
}

// ---- 8-bit dynamic map --------------------------------------------------------------------------

// A CUDA block per block of `block` values.
__global__ void __launch_bounds__(kQuantThreads)
    quantize_8bit_kernel(std::uint8_t* codes, float* absmax, const float* x, const float* offset,
                         const __grid_constant__ DynamicMap map, std::int64_t n, std::int64_t block,
                         std::int64_t blocks) {
  __shared__ SharedMap shared;
  __shared__ float scratch[32];
  fill_shared_map(shared, map);
  __syncthreads();
  const kquant::OffsetLoad load{x, offset != nullptr ? *offset : 0.0f};
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(b, blocks) {
    const std::int64_t begin = b * block, end = begin + block < n ? begin + block : n;
    const float block_absmax =
        block_max(kquant::absmax_part(load, begin, end, lane, lanes), scratch);
    if (lane == 0) absmax[b] = block_absmax;
    kquant::quantize_8bit_values_bounded(codes, load, begin, end, lane, lanes, block_absmax,
                                         shared.bound);
  }
}

__global__ void __launch_bounds__(kQuantThreads)
    dequantize_8bit_kernel(float* x, const std::uint8_t* codes, const float* absmax,
                           const float* offset, const __grid_constant__ DynamicMap map,
                           std::int64_t n, std::int64_t block) {
  __shared__ float values[kDynamicMapEntries];
  values[threadIdx.x] = map[static_cast<int>(threadIdx.x)];
  __syncthreads();
  const float shift = offset != nullptr ? *offset : 0.0f;
  VB_GRID_STRIDE(i, n)
  x[i] = kquant::dequantize_8bit_value(values, codes, absmax, block, shift, i);
}

// ---- int8 per row -------------------------------------------------------------------------------

// A CUDA block per row.
template <typename T>
__global__ void __launch_bounds__(kQuantThreads)
    quantize_int8_rows_kernel(std::int8_t* codes, float* row_absmax, const T* w, std::int64_t rows,
                              std::int64_t cols) {
  __shared__ float scratch[32];
  const TypedLoad<T> load{w};
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(r, rows) {
    const std::int64_t begin = r * cols;
    const float absmax =
        block_max(kquant::absmax_part(load, begin, begin + cols, lane, lanes), scratch);
    if (lane == 0) row_absmax[r] = absmax;
    kquant::quantize_int8_values(codes, load, begin, begin + cols, lane, lanes, absmax);
  }
}

template <typename T>
__global__ void __launch_bounds__(kQuantThreads)
    dequantize_int8_rows_kernel(T* w, const std::int8_t* codes, const float* row_absmax,
                                std::int64_t rows, std::int64_t cols) {
  VB_BLOCK_ROWS(r, rows) {
    const float absmax = row_absmax[r];
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      w[r * cols + c] = from_f32<T>(kquant::int8_decode(codes[r * cols + c], absmax));
  }
}

// ---- 8-bit AdamW --------------------------------------------------------------------------------

// A CUDA block per block of 256 values, a thread per value: dequantise m and v, update, take the
// new absmax of each over the block (every thread has read the old one before block_max's first
// barrier), requantise.
template <typename T>
__global__ void __launch_bounds__(kQuantThreads)
    adamw_8bit_kernel(T* w, const T* grad, std::uint8_t* m_codes, std::uint8_t* v_codes,
                      float* absmax_m, float* absmax_v, float* master,
                      const __grid_constant__ DynamicMap signed_map,
                      const __grid_constant__ DynamicMap unsigned_map, AdamWParams p, float bc1,
                      float bc2, std::int64_t n, std::int64_t blocks) {
  __shared__ SharedMap shared_m, shared_v;
  __shared__ float scratch[32];
  fill_shared_map(shared_m, signed_map);
  fill_shared_map(shared_v, unsigned_map);
  __syncthreads();
  VB_BLOCK_ROWS(b, blocks) {
    const std::int64_t i = b * kOptimizer8bitBlock + threadIdx.x;
    float m = 0.0f, v = 0.0f;
    if (i < n) {
      m = kquant::adamw_8bit_moment(shared_m.value, m_codes[i], absmax_m[b]);
      v = kquant::adamw_8bit_moment(shared_v.value, v_codes[i], absmax_v[b]);
      adamw_8bit_body(i, w, grad, master, &m, &v, p, bc1, bc2);
    }
    const float new_absmax_m = block_max(fabsf(m), scratch);
    const float new_absmax_v = block_max(fabsf(v), scratch);
    if (threadIdx.x == 0) {
      absmax_m[b] = new_absmax_m;
      absmax_v[b] = new_absmax_v;
    }
    if (i < n) {
      m_codes[i] = static_cast<std::uint8_t>(
          kquant::adamw_8bit_encode_m(shared_m.value, shared_m.bound, m, new_absmax_m));
      v_codes[i] = static_cast<std::uint8_t>(
          kquant::adamw_8bit_encode_v_bounded(shared_v.bound, v, new_absmax_v));
    }
  }
}

// ---- argument checks (host, before any CUDA call) -----------------------------------------------

[[noreturn]] void fail(const char* launcher, const std::string& what) {
  throw std::invalid_argument(std::string(launcher) + ": " + what);
}
// False when there is nothing to do (size 0); throws for a negative size.
bool has_work(const char* launcher, const char* name, std::int64_t size) {
  if (size < 0) fail(launcher, std::string(name) + " is " + std::to_string(size) + ", not >= 0");
  return size > 0;
}
void require(const char* launcher, const char* name, const void* p) {
  if (p == nullptr) fail(launcher, std::string(name) + " is null");
}
void require_4bit(const char* launcher, QuantKind kind) {
  if (!is_4bit(kind))
    fail(launcher, "quant kind " + std::string(quant_kind_name(kind)) + " is not nf4 or fp4");
}
// rows * cols, both checked >= 0; throws when the product leaves 64 bits.
std::int64_t checked_elements(const char* launcher, std::int64_t rows, std::int64_t cols) {
  has_work(launcher, "rows", rows);
  has_work(launcher, "cols", cols);
  if (cols > 0 && rows > std::numeric_limits<std::int64_t>::max() / cols)
    fail(launcher, std::to_string(rows) + " x " + std::to_string(cols) + " overflows 64 bits");
  return rows * cols;
}
bool pair_aligned(const void* p, std::size_t element_bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % (2 * element_bytes) == 0;
}

// dequantize_4bit_kernel with the absmax plain (absmax) or double-quantised (qabsmax, absmax2,
// offset), the caller having checked those; n > 0.
void dequantize_4bit(const char* launcher, QuantKind kind, DType dtype, void* w,
                     const std::uint8_t* codes, const float* absmax, const std::uint8_t* qabsmax,
                     const float* absmax2, const float* offset, std::int64_t n,
                     cudaStream_t stream) {
  require(launcher, "w", w);
  require(launcher, "codes", codes);
  const std::int64_t blocks = quant_blocks(n, kQuant4bitBlock);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    dequantize_4bit_kernel<T><<<quant_4bit_grid(n), kQuantThreads, 0, stream>>>(
        kind, static_cast<T*>(w), codes, absmax, qabsmax, absmax2, offset, host_map(true), n,
        blocks, pair_aligned(w, sizeof(T)));
  });
  VB_CHECK_LAUNCH("dequantize_4bit_kernel");
}

}  // namespace

unsigned quant_4bit_grid(std::int64_t n) {
  return grid_for(quant_blocks(n > 0 ? n : 0, kQuant4bitBlock), kQuantWarps);
}

void launch_quantize_4bit(QuantKind kind, DType dtype, std::uint8_t* codes, float* absmax,
                          const void* w, std::int64_t n, cudaStream_t stream) {
  constexpr const char* kName = "launch_quantize_4bit";
  require_4bit(kName, kind);
  if (!has_work(kName, "n", n)) return;
  require(kName, "codes", codes);
  require(kName, "absmax", absmax);
  require(kName, "w", w);
  const std::int64_t blocks = quant_blocks(n, kQuant4bitBlock);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    quantize_4bit_kernel<T><<<quant_4bit_grid(n), kQuantThreads, 0, stream>>>(
        kind, codes, absmax, static_cast<const T*>(w), n, blocks);
  });
  VB_CHECK_LAUNCH("quantize_4bit_kernel");
}

void launch_dequantize_4bit(QuantKind kind, DType dtype, void* w, const std::uint8_t* codes,
                            const float* absmax, std::int64_t n, cudaStream_t stream) {
  constexpr const char* kName = "launch_dequantize_4bit";
  require_4bit(kName, kind);
  if (!has_work(kName, "n", n)) return;
  require(kName, "absmax", absmax);
  dequantize_4bit(kName, kind, dtype, w, codes, absmax, nullptr, nullptr, nullptr, n, stream);
}

void launch_dequantize_4bit_nested(QuantKind kind, DType dtype, void* w, const std::uint8_t* codes,
                                   const std::uint8_t* qabsmax, const float* absmax2,
                                   const float* offset, std::int64_t n, cudaStream_t stream) {
  constexpr const char* kName = "launch_dequantize_4bit_nested";
  require_4bit(kName, kind);
  if (!has_work(kName, "n", n)) return;
  require(kName, "qabsmax", qabsmax);
  require(kName, "absmax2", absmax2);
  require(kName, "offset", offset);
  dequantize_4bit(kName, kind, dtype, w, codes, nullptr, qabsmax, absmax2, offset, n, stream);
}

void launch_quantize_nested_absmax(std::uint8_t* qabsmax, float* absmax2, float* offset,
                                   const float* absmax, std::int64_t blocks, cudaStream_t stream) {
  constexpr const char* kName = "launch_quantize_nested_absmax";
  if (!has_work(kName, "blocks", blocks)) return;
  require(kName, "qabsmax", qabsmax);
  require(kName, "absmax2", absmax2);
  require(kName, "offset", offset);
  require(kName, "absmax", absmax);
  const std::int64_t groups = quant_blocks(blocks, kQuantNestedBlock);
  nested_group_sum_kernel<<<row_grid(groups), kQuantNestedBlock, 0, stream>>>(absmax2, absmax,
                                                                              blocks, groups);
  VB_CHECK_LAUNCH("nested_group_sum_kernel");
  nested_mean_kernel<<<1, kquant::kNestedMeanLanes, 0, stream>>>(offset, absmax2, groups, blocks);
  VB_CHECK_LAUNCH("nested_mean_kernel");
  launch_quantize_8bit(qabsmax, absmax2, absmax, offset, blocks, kQuantNestedBlock, true, stream);
}

void launch_quantize_8bit(std::uint8_t* codes, float* absmax, const float* x, const float* offset,
                          std::int64_t n, std::int64_t block, bool is_signed, cudaStream_t stream) {
  constexpr const char* kName = "launch_quantize_8bit";
  if (block < 1) fail(kName, "block is " + std::to_string(block) + ", not >= 1");
  if (!has_work(kName, "n", n)) return;
  require(kName, "codes", codes);
  require(kName, "absmax", absmax);
  require(kName, "x", x);
  const std::int64_t blocks = quant_blocks(n, block);
  quantize_8bit_kernel<<<row_grid(blocks), kQuantThreads, 0, stream>>>(
      codes, absmax, x, offset, host_map(is_signed), n, block, blocks);
  VB_CHECK_LAUNCH("quantize_8bit_kernel");
}

void launch_dequantize_8bit(float* x, const std::uint8_t* codes, const float* absmax,
                            const float* offset, std::int64_t n, std::int64_t block, bool is_signed,
                            cudaStream_t stream) {
  constexpr const char* kName = "launch_dequantize_8bit";
  if (block < 1) fail(kName, "block is " + std::to_string(block) + ", not >= 1");
  if (!has_work(kName, "n", n)) return;
  require(kName, "x", x);
  require(kName, "codes", codes);
  require(kName, "absmax", absmax);
  dequantize_8bit_kernel<<<grid_for(n, kQuantThreads), kQuantThreads, 0, stream>>>(
      x, codes, absmax, offset, host_map(is_signed), n, block);
  VB_CHECK_LAUNCH("dequantize_8bit_kernel");
}

void launch_quantize_int8_rows(DType dtype, std::int8_t* codes, float* row_absmax, const void* w,
                               std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  constexpr const char* kName = "launch_quantize_int8_rows";
  if (checked_elements(kName, rows, cols) == 0) return;
  require(kName, "codes", codes);
  require(kName, "row_absmax", row_absmax);
  require(kName, "w", w);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    quantize_int8_rows_kernel<T><<<row_grid(rows), kQuantThreads, 0, stream>>>(
        codes, row_absmax, static_cast<const T*>(w), rows, cols);
  });
  VB_CHECK_LAUNCH("quantize_int8_rows_kernel");
}

void launch_dequantize_int8_rows(DType dtype, void* w, const std::int8_t* codes,
                                 const float* row_absmax, std::int64_t rows, std::int64_t cols,
                                 cudaStream_t stream) {
  constexpr const char* kName = "launch_dequantize_int8_rows";
  if (checked_elements(kName, rows, cols) == 0) return;
  require(kName, "w", w);
  require(kName, "codes", codes);
  require(kName, "row_absmax", row_absmax);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    dequantize_int8_rows_kernel<T><<<row_grid(rows), kQuantThreads, 0, stream>>>(
        static_cast<T*>(w), codes, row_absmax, rows, cols);
  });
  VB_CHECK_LAUNCH("dequantize_int8_rows_kernel");
}

void launch_quantize_weight(QuantKind kind, bool double_quant, DType dtype,
                            const kquant::QuantizedWeightBuffers& out, const void* w,
                            std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  constexpr const char* kName = "launch_quantize_weight";
  const std::int64_t n = checked_elements(kName, rows, cols);
  if (kind == QuantKind::int8) {
    launch_quantize_int8_rows(dtype, reinterpret_cast<std::int8_t*>(out.data), out.absmax, w, rows,
                              cols, stream);
    return;
  }
  require_4bit(kName, kind);
  if (double_quant && n > 0) {  // all checked before the first launch
    require(kName, "out.qabsmax", out.qabsmax);
    require(kName, "out.absmax2", out.absmax2);
    require(kName, "out.offset", out.offset);
  }
  launch_quantize_4bit(kind, dtype, out.data, out.absmax, w, n, stream);
  if (double_quant)
    launch_quantize_nested_absmax(out.qabsmax, out.absmax2, out.offset, out.absmax,
                                  quant_blocks(n, kQuant4bitBlock), stream);
}

void launch_dequantize_weight(QuantKind kind, bool double_quant, DType dtype, void* w,
                              const kquant::QuantizedWeightBuffers& in, std::int64_t rows,
                              std::int64_t cols, cudaStream_t stream) {
  constexpr const char* kName = "launch_dequantize_weight";
  const std::int64_t n = checked_elements(kName, rows, cols);
  if (kind == QuantKind::int8) {
    launch_dequantize_int8_rows(dtype, w, reinterpret_cast<const std::int8_t*>(in.data), in.absmax,
                                rows, cols, stream);
    return;
  }
  require_4bit(kName, kind);
  if (double_quant)
    launch_dequantize_4bit_nested(kind, dtype, w, in.data, in.qabsmax, in.absmax2, in.offset, n,
                                  stream);
  else
    launch_dequantize_4bit(kind, dtype, w, in.data, in.absmax, n, stream);
}

void launch_adamw_8bit(DType dtype, void* w, const void* grad, const kquant::AdamW8bitState& state,
                       float* master, AdamWParams params, std::int64_t n, cudaStream_t stream) {
  constexpr const char* kName = "launch_adamw_8bit";
  if (!has_work(kName, "n", n)) return;
  require(kName, "w", w);
  require(kName, "grad", grad);
  if (!optimizer_state_is_8bit(n)) {
    require(kName, "state.m (fp32 state under kMin8bitSize elements)", state.m);
    require(kName, "state.v (fp32 state under kMin8bitSize elements)", state.v);
    launch_adamw(dtype, DType::f32, w, grad, state.m, state.v, master, params, n, stream);
    return;
  }
  require(kName, "state.m_codes", state.m_codes);
  require(kName, "state.v_codes", state.v_codes);
  require(kName, "state.absmax_m", state.absmax_m);
  require(kName, "state.absmax_v", state.absmax_v);
  const float bc1 = params.bias_correction1(), bc2 = params.bias_correction2();
  const std::int64_t blocks = quant_blocks(n, kOptimizer8bitBlock);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    adamw_8bit_kernel<T><<<row_grid(blocks), kQuantThreads, 0, stream>>>(
        static_cast<T*>(w), static_cast<const T*>(grad), state.m_codes, state.v_codes,
        state.absmax_m, state.absmax_v, master, host_map(true), host_map(false), params, bc1, bc2,
        n, blocks);
  });
  VB_CHECK_LAUNCH("adamw_8bit_kernel");
}

}  // namespace vrambench::cuda

namespace vrambench {

// Rows [row_offset, +rows) of the compute-dtype weight from the quantised module.
void cuda_run_dequantize(const Operands& a, CudaContext& context) {
  const Op& op = a.op;
  const DequantizeOperands d = dequantize_operands(a);
  cuda::launch_dequantize_weight(op.quant, op.double_quant, a.out[0].tensor->dtype, d.rows, d.in,
                                 op.rows, d.cols, context.stream());
}

// bitsandbytes' 8-bit AdamW, in place on the weight, its master and the codes and absmax.
void cuda_run_adamw8bit_step(const Operands& a, CudaContext& context) {
  const Operand& weight = a.in[0];
  const Operand* master = a.input("master");
  const kquant::AdamW8bitState state = adamw_8bit_state(a);
  if (a.in[1].tensor->dtype != weight.tensor->dtype) a.fail("grad and weight differ in dtype");
  cuda::launch_adamw_8bit(weight.tensor->dtype, weight.data, a.in[1].data, state,
                          master ? a.f32(*master) : nullptr,
                          adam_params(a.op, context.optimizer_steps.next(weight)),
                          weight.tensor->elements(), context.stream());
}

}  // namespace vrambench
