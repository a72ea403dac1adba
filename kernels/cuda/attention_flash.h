// Fused causal attention over packed qkv[B,S,(A+2K)*D] that saves only y[B,S,A*D] and the row
// log-sum-exp lse[B,A,S] (fp32, natural log), never the S x S probabilities: forward and backward,
// with dropout drawn from the shared counter RNG at the index of the probability it drops (as eager
// attention and the CPU reference do). The only flash path of the fp32/tf32 recipes and of dropout.
//
// Tiling (attention_flash.cu): a block of 16 x 16 threads owns one tile of 64 (or 32) rows; the
// tiles it streams through are staged in shared memory as fp32, and each thread keeps a 4 x 4 (or 2
// x 2) patch of scores and its part of the fp32 accumulators in registers.
//   forward   a block per (batch, head, query tile); online softmax over the key tiles at or below
//             the diagonal.
//   backward  three kernels and no atomics: delta_i = dy_i . y_i per query row into the scratch;
//             dQ, a block per (batch, head, query tile) over the key tiles at or below the
//             diagonal; dK and dV, a block per (batch, kv head, key tile) over the query heads of
//             its group and the query tiles at or above the diagonal.
// Grouped-query attention: query head a reads kv head a / (A/K).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/math.h"
#include "core/dtype.h"
#include "core/units.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// Largest head size the kernels are compiled for (the head-size classes are 32, 64, 96, 128, 256).
inline constexpr std::int64_t kFlashMaxHeadDim = 256;
// Threads per block of the tiled kernels: 16 rows of 16 lanes.
inline constexpr int kFlashThreads = 256;
// Dynamic shared memory a block gets without opting in with cudaFuncSetAttribute.
inline constexpr std::int64_t kFlashDefaultSharedBytes = 48 * 1024;

struct FlashShape {
  std::int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float dropout_p = 0.0f;
  std::uint64_t seed = 0;
  __host__ __device__ std::int64_t width() const { return (heads + 2 * kv_heads) * head_dim; }
  __host__ __device__ std::int64_t kv_of(std::int64_t a) const { return a / (heads / kv_heads); }
  __host__ __device__ std::int64_t row(std::int64_t b, std::int64_t i) const {
    return (b * seq + i) * width();
  }
  __host__ __device__ std::int64_t q(std::int64_t a) const { return a * head_dim; }
  __host__ __device__ std::int64_t k(std::int64_t kv) const { return (heads + kv) * head_dim; }
  __host__ __device__ std::int64_t v(std::int64_t kv) const {
    return (heads + kv_heads + kv) * head_dim;
  }
  __host__ __device__ std::int64_t y(std::int64_t b, std::int64_t i, std::int64_t a) const {
    return (b * seq + i) * heads * head_dim + a * head_dim;
  }
  __host__ __device__ std::int64_t lse(std::int64_t b, std::int64_t a, std::int64_t i) const {
    return (b * heads + a) * seq + i;
  }
  __host__ __device__ std::uint64_t prob_index(std::int64_t b, std::int64_t a, std::int64_t i,
                                               std::int64_t j) const {
    return static_cast<std::uint64_t>(((b * heads + a) * seq + i) * seq + j);
  }
  __host__ __device__ float scale() const { return 1.0f / sqrtf(static_cast<float>(head_dim)); }
  // The factor dropout puts on probability (b, a, i, j): 0, 1/(1-p), or 1 without dropout.
  __host__ __device__ float mask(std::int64_t b, std::int64_t a, std::int64_t i,
                                 std::int64_t j) const {
    if (dropout_p <= 0.0f) return 1.0f;
    return kmath::keep(seed, prob_index(b, a, i, j), dropout_p) ? 1.0f / (1.0f - dropout_p) : 0.0f;
  }
};

// ---- tiles and blocks: index math shared by the kernels and the host -------------------------

enum class FlashKernel { forward, delta, dq, dkv };

// Rows per tile of a kernel compiled for a head-size class. Square tiles: a block's own tile and
// the tiles it streams through have the same length, so the causal bounds are whole tiles. The
// backward kernels hold three or four tiles in shared memory, so above 64 they take 32 rows (at
// most 66 KB for D = 128); the forward holds two.
__host__ __device__ constexpr int flash_tile_rows(FlashKernel kernel, int head_dim_class) {
  return head_dim_class > 128 || (kernel != FlashKernel::forward && head_dim_class > 64) ? 32 : 64;
}

// Tiles of `tile` rows that cover a sequence of `seq` (the last may be partial).
__host__ __device__ inline std::int64_t flash_tiles(std::int64_t seq, int tile) {
  return (seq + tile - 1) / tile;
}

// Floats per row of a shared-memory tile: odd, so that the 16 rows a half-warp reads at one column
// fall in 16 different banks.
__host__ __device__ inline int flash_shared_stride(std::int64_t head_dim) {
  return static_cast<int>(head_dim | 1);
}

// The (batch, head, tile) a block works on: blocks are numbered ((b * heads) + h) * tiles + t, so
// neighbouring blocks share a head and its kv tiles stay in L2.
struct FlashTile {
  std::int64_t batch = 0, head = 0, tile = 0;
};
__host__ __device__ inline FlashTile flash_tile_of_block(std::int64_t block, std::int64_t heads,
                                                         std::int64_t tiles) {
  return {block / (tiles * heads), (block / tiles) % heads, block % tiles};
}

// Whether query i sees key j: causal, and keys past the sequence never count. A padding query row
// (i >= seq, in a partial last tile) still sees key 0, so its running max stays finite.
__host__ __device__ inline bool flash_visible(std::int64_t i, std::int64_t j, std::int64_t seq) {
  return j <= i && j < seq;
}

// ---- launch geometry (host) -------------------------------------------------------------------

// The head size a kernel is compiled for: the smallest class of 32, 64, 96, 128, 256 that holds D.
int flash_head_dim_class(std::int64_t head_dim);

struct FlashLaunch {
  std::int64_t blocks = 0;        // grid.x (0: nothing to do)
  int threads = 0;                // block size
  std::int64_t shared_bytes = 0;  // dynamic shared memory per block
  int tile = 0;                   // rows per tile (0 for the delta pass, which has no tiles)
  int head_dim_class = 0;
};
// Grid, block and shared memory of one kernel for a shape; validates the shape (check_flash_shape)
// and throws std::invalid_argument when the grid would pass 2^31 - 1 blocks.
//   forward  B*A*ceil(S/tile) blocks, q and k|v tiles         2 * tile * stride * 4 bytes
//   delta    a warp per query row (grid-stride), no shared memory
//   dq       B*A*ceil(S/tile) blocks, q, dy and k|v tiles      3 * tile * stride * 4 bytes
//   dkv      B*K*ceil(S/tile) blocks, k, v, q and dy tiles    4 * tile * stride * 4 bytes
FlashLaunch flash_launch(FlashKernel kernel, const FlashShape& s);

// Throws std::invalid_argument naming the kernel and the limit when its block needs more shared
// memory than `limit_bytes` (the device's opt-in maximum per block: 227 KB on sm_90, 163 KB on
// sm_80, 99 KB on sm_86/89). The launchers opt in above kFlashDefaultSharedBytes after this check.
void check_flash_shared(const FlashLaunch& launch, std::int64_t limit_bytes, const char* kernel);

// The backward's fp32 scratch, as the program allots it (role workspace): [B,A,S,D] followed by
// [B,A,S]. The kernels keep delta_i = dy_i . y_i in the [B,A,S] region, which starts
// flash_delta_offset floats in; they do not touch the [B,A,S,D] region.
Bytes flash_bwd_scratch_bytes(const FlashShape& s);
std::int64_t flash_delta_offset(const FlashShape& s);

// Throws std::invalid_argument when the shape is outside what the kernels take (head size outside
// 1..kFlashMaxHeadDim, heads not a multiple of kv heads, negative sizes).
void check_flash_shape(const FlashShape& s);

// y[B,S,A*D] and lse[B,A,S] from qkv. No scratch.
void launch_flash_fwd(DType dtype, void* y, float* lse, const void* qkv, const FlashShape& s,
                      cudaStream_t stream);
// All of dqkv from dy, qkv, y and lse; `scratch` holds flash_bwd_scratch_bytes(s) (throws
// std::invalid_argument, before any launch, when scratch_bytes is less).
void launch_flash_bwd(DType dtype, void* dqkv, void* scratch, Bytes scratch_bytes, const void* dy,
                      const void* qkv, const void* y, const float* lse, const FlashShape& s,
                      cudaStream_t stream);

}  // namespace vrambench::cuda
