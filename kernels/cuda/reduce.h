// Reductions shared by the row and column kernels. Column sums of a row-major [rows, cols] matrix
// run in two stages so that the whole GPU takes part: stage 1 over (column, row chunk) writes fp32
// partial sums into scratch (the program's GEMM workspace: a run may use only memory its program
// lists), stage 2 adds each column's partials in chunk order, so the result is the same on every
// run. Row kernels give each row a block; the block reductions below combine its threads' partials.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/units.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// Threads of a row block (LayerNorm, RMSNorm, softmax): a row of 768 columns is 3 per thread.
inline constexpr int kRowThreads = 256;

// ---- sizing -----------------------------------------------------------------------------------

// Threads per block of the column kernels (one thread per column, adjacent columns adjacent).
inline constexpr std::int64_t kColumnThreads = 256;
// Stage 2 blocks: kFinishColumns adjacent columns (a warp reads them coalesced) times kFinishLanes
// lanes that split the chunks of each column.
inline constexpr std::int64_t kFinishColumns = 32;
inline constexpr std::int64_t kFinishLanes = 16;
// A chunk of fewer rows than this costs more in partials traffic than it gains in parallelism
// (fp32 partials of 16 rows of 16-bit data are an eighth of what they sum).
inline constexpr std::int64_t kColumnChunkMinRows = 16;
// Columns x chunks wanted in flight: about two waves of an H100 (132 SMs x 2048 threads), so every
// SM stays busy; more chunks would only add partials for stage 2 to read (at H = 768 this gives
// 683 chunks, 43 per stage-2 lane).
inline constexpr std::int64_t kColumnTargetThreads = std::int64_t{1} << 19;
// gridDim.y holds the chunk index.
inline constexpr std::int64_t kMaxColumnChunks = 65535;

__host__ __device__ constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// How a column reduction of `rows` rows splits them: `count` chunks of `rows` rows each (the last
// may be shorter, none is empty). count == 1 means one pass without partials (the rows are few,
// the columns alone fill the GPU, or the workspace does not hold two chunks of partials).
struct ColumnChunks {
  std::int64_t count = 1;
  std::int64_t rows = 0;
  bool operator==(const ColumnChunks&) const = default;
};

// Chunks for sums of `outputs` vectors of `cols` columns each over `rows` rows, with fp32 partials
// in at most `workspace_bytes`: count * outputs * cols * 4 <= workspace_bytes whenever count > 1.
// Pure, so tests and the launchers agree on it.
constexpr ColumnChunks column_chunks(std::int64_t rows, std::int64_t cols, std::int64_t outputs,
                                     Bytes workspace_bytes) {
  const std::int64_t all = rows > 0 ? rows : 1;
  if (cols <= 0 || outputs <= 0) return {1, all};
  std::int64_t count = ceil_div(all, kColumnChunkMinRows);
  const std::int64_t wanted = ceil_div(kColumnTargetThreads, cols);
  if (count > wanted) count = wanted;
  const std::int64_t per_chunk = outputs * cols * 4;
  const std::int64_t fit = workspace_bytes > 0 ? workspace_bytes / per_chunk : 0;
  if (count > fit) count = fit;
  if (count > kMaxColumnChunks) count = kMaxColumnChunks;
  if (count < 2) return {1, all};
  const std::int64_t chunk_rows = ceil_div(all, count);
  return {ceil_div(all, chunk_rows), chunk_rows};  // no chunk left empty by the rounding
}

// ---- column sums: out[c] (+)= sum over rows of in[r, c] ---------------------------------------

// Stage 1: the fp32 sum of rows [chunk * chunk_rows, ...) of column `col` into partial[chunk, col].
template <typename T>
__host__ __device__ inline void column_sum_partial_body(std::int64_t col, std::int64_t chunk,
                                                        float* partial, const T* in,
                                                        std::int64_t rows, std::int64_t cols,
                                                        std::int64_t chunk_rows) {
  const std::int64_t begin = chunk * chunk_rows;
  const std::int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  float sum = 0.0f;
  for (std::int64_t r = begin; r < end; ++r) sum += to_f32(in[r * cols + col]);
  partial[chunk * cols + col] = sum;
}

// Stage 2, in two steps so that a block of kFinishColumns x kFinishLanes threads shares each
// column's partials [chunks, cols]: lane `lane` of `lanes` sums chunks lane, lane + lanes, ... in
// order; the lanes' sums are then added in lane order and stored (column_store). Fixed orders
// throughout: the same result on every run.
__host__ __device__ inline float column_finish_part(std::int64_t col, std::int64_t lane,
                                                    std::int64_t lanes, const float* partial,
                                                    std::int64_t chunks, std::int64_t cols) {
  float sum = 0.0f;
  for (std::int64_t k = lane; k < chunks; k += lanes) sum += partial[k * cols + col];
  return sum;
}
// out[col] = sum in the storage type, added to the old value when accumulate.
template <typename T>
__host__ __device__ inline void column_store(std::int64_t col, T* out, float sum, bool accumulate) {
  if (accumulate) sum += to_f32(out[col]);
  out[col] = from_f32<T>(sum);
}

// One pass (a single chunk): column `col` summed over all rows straight into out[col].
template <typename T>
__host__ __device__ inline void column_sum_body(std::int64_t col, T* out, const T* in,
                                                std::int64_t rows, std::int64_t cols,
                                                bool accumulate) {
  float sum = 0.0f;
  for (std::int64_t r = 0; r < rows; ++r) sum += to_f32(in[r * cols + col]);
  if (accumulate) sum += to_f32(out[col]);
  out[col] = from_f32<T>(sum);
}

// Stage 2 over partial[chunks, cols] into out[cols] (added to out when accumulate).
void launch_column_finish(DType dtype, void* out, const float* partial, std::int64_t chunks,
                          std::int64_t cols, bool accumulate, cudaStream_t stream);

// out[cols] (+)= column sums of in[rows, cols], two-stage with partials in `workspace` when
// column_chunks(rows, cols, 1, workspace_bytes) has more than one chunk.
void launch_column_sum(DType dtype, void* out, const void* in, std::int64_t rows, std::int64_t cols,
                       bool accumulate, void* workspace, Bytes workspace_bytes,
                       cudaStream_t stream);

// The grid of stage 1: (column blocks, chunks).
dim3 column_grid(std::int64_t cols, std::int64_t chunks);
// The grid of stage 2: one block per kFinishColumns columns.
unsigned finish_grid(std::int64_t cols);
// Grid of a kernel that gives each of `rows` rows a block (rows beyond it loop).
unsigned row_grid(std::int64_t rows);

}  // namespace vrambench::cuda

#if defined(__CUDACC__)
namespace vrambench::cuda {

// ---- block reductions (device only) -----------------------------------------------------------
// Every thread of the block must call them (uniform control flow: they hold barriers), with
// blockDim.x a multiple of 32 and at most 1024; `scratch` is __shared__ float[32]. Every thread
// gets the result. The order of the additions is fixed, so a row gives the same sum on every run.

__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ inline float block_sum(float v, float* scratch) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // a previous call may still be reading scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? scratch[lane] : 0.0f);
}
__device__ inline float block_max(float v, float* scratch) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? scratch[lane] : -INFINITY);
}

// Loop over the rows a block owns: blockIdx.x, then every gridDim.x further.
#define VB_BLOCK_ROWS(row, n) for (std::int64_t row = blockIdx.x; row < (n); row += gridDim.x)

}  // namespace vrambench::cuda
#endif
