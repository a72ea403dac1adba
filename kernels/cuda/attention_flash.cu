// Fused causal attention kernels (attention_flash.h): fp32 tiles in shared memory, online softmax,
// and a backward in three kernels without atomics.
//
// Thread layout of the tiled kernels: thread (ty, tx) = (threadIdx.x / 16, threadIdx.x % 16). Of a
// tile x tile patch of scores it holds rows ty*R .. ty*R + R-1 and columns tx, tx + 16, ..,
// tx + 16(R-1) (R = tile / 16); of a tile x D accumulator the same rows and the head columns
// tx + 16c, c < C (C = head-size class / 16). The 16 threads of a row are one half-warp, so row
// reductions and the broadcast of a row's weights are shuffles of width 16.
#include <climits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/attention_flash.h"
#include "cuda/check.h"

namespace vrambench::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kLanes = 16;  // threads per row of a tile, and per row of the thread block
constexpr int kWarps = kFlashThreads / 32;

// Blocks per multiprocessor the register allocation leaves room for (__launch_bounds__): two caps
// a thread at 128 registers. dK/dV at head size 256 keeps 2 x 32 fp32 accumulators per thread and
// its 131 KB of shared memory allow one block per multiprocessor anyway: there, 1, so it does not
// spill.
constexpr int flash_min_blocks(FlashKernel kernel, int head_dim_class) {
  return kernel == FlashKernel::dkv && head_dim_class > 128 ? 1 : 2;
}

// Rows [0, valid) of a tile from global rows of D elements, `stride` elements apart, into shared
// rows of `ld` floats; rows [valid, rows) become zeros, so a partial tile never hands out
// uninitialised shared memory (which may hold NaN, and 0 * NaN is NaN). A warp per row: coalesced
// reads, consecutive shared writes.
template <typename T>
__device__ __forceinline__ void load_tile(float* tile, const T* src, std::int64_t stride, int valid,
                                          int rows, int D, int ld) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < rows; r += kWarps) {
    if (r < valid) {
      const T* row = src + r * stride;
      for (int d = lane; d < D; d += 32) tile[r * ld + d] = to_f32(row[d]);
    } else {
      for (int d = lane; d < D; d += 32) tile[r * ld + d] = 0.0f;
    }
  }
}

// out[r][c] = a[ty*R + r] . b[tx + 16c] over the D columns of two shared tiles. Per column the
// R values of `a` are one address per half-warp (a broadcast) and the R values of `b` are 16 rows
// of an odd stride (16 banks).
template <int R>
__device__ __forceinline__ void tile_dots(float (&out)[R][R], const float* a, const float* b, int D,
                                          int ld, int ty, int tx) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < R; ++c) out[r][c] = 0.0f;
#pragma unroll 4
  for (int d = 0; d < D; ++d) {
    float av[R], bv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) av[r] = a[(ty * R + r) * ld + d];
#pragma unroll
    for (int c = 0; c < R; ++c) bv[c] = b[(tx + kLanes * c) * ld + d];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < R; ++c) out[r][c] = fmaf(av[r], bv[c], out[r][c]);
  }
}

// acc[r][c] += sum over the tile's rows k of w[r][k] * tile[k][tx + 16c]. Weight w[r][k] of tile
// row k = src + 16m sits in lane src of the half-warp (as w[r][m]): broadcast by a shuffle. Every
// lane of the warp takes part; head columns past D are skipped.
template <int R, int C>
__device__ __forceinline__ void accumulate_rows(float (&acc)[R][C], const float (&w)[R][R],
                                                const float* tile, int D, int ld, int tx) {
#pragma unroll
  for (int m = 0; m < R; ++m) {
#pragma unroll 4
    for (int src = 0; src < kLanes; ++src) {
      float wk[R];
#pragma unroll
      for (int r = 0; r < R; ++r) wk[r] = __shfl_sync(kFullMask, w[r][m], src, kLanes);
      const float* row = tile + (src + kLanes * m) * ld;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int col = tx + kLanes * c;
        if (col < D) {
          const float v = row[col];
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r][c] = fmaf(wk[r], v, acc[r][c]);
        }
      }
    }
  }
}

__device__ __forceinline__ float row_max(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset, kLanes));
  return v;
}
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(kFullMask, v, offset, kLanes);
  return v;
}

// Rows of the tile starting at `first` that lie inside the sequence.
__device__ __forceinline__ int rows_inside(std::int64_t first, int tile, std::int64_t seq) {
  return static_cast<int>(seq - first < tile ? seq - first : tile);
}

// Writes the R x C accumulator of this thread to rows first + ty*R + r (those inside the
// sequence) of a [.., D] matrix whose row i starts at out + i * stride, times factor[r].
template <typename T, int R, int C>
__device__ __forceinline__ void store_rows(T* out, std::int64_t stride, const float (&acc)[R][C],
                                           const float (&factor)[R], std::int64_t first,
                                           std::int64_t seq, int D, int ty, int tx) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t i = first + ty * R + r;
    if (i >= seq) continue;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int col = tx + kLanes * c;
      if (col < D) out[i * stride + col] = from_f32<T>(acc[r][c] * factor[r]);
    }
  }
}

// Forward: a block per (b, a, query tile). For each key tile at or below the diagonal: scores
// against the k tile, the online-softmax update of each row's max and sum (sums of the undropped
// probabilities), then the dropped-and-scaled probabilities times the v tile into the
// accumulators. k and v take turns in one shared tile.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kFlashThreads, flash_min_blocks(FlashKernel::forward, kHeadDim))
    flash_fwd_kernel(T* y, float* lse, const T* qkv, FlashShape s) {
  constexpr int kTile = flash_tile_rows(FlashKernel::forward, kHeadDim);
  constexpr int R = kTile / kLanes, C = kHeadDim / kLanes;
  extern __shared__ float shared[];
  const int D = static_cast<int>(s.head_dim), ld = flash_shared_stride(s.head_dim);
  float* q_tile = shared;
  float* kv_tile = shared + kTile * ld;
  const int tx = static_cast<int>(threadIdx.x) % kLanes,
            ty = static_cast<int>(threadIdx.x) / kLanes;

  const std::int64_t tiles = flash_tiles(s.seq, kTile);
  const FlashTile at = flash_tile_of_block(blockIdx.x, s.heads, tiles);
  const std::int64_t query_tile = tiles - 1 - at.tile;  // the longest rows start first
  const std::int64_t b = at.batch, a = at.head, kv = s.kv_of(a), i0 = query_tile * kTile;
  const float scale = s.scale();
  load_tile(q_tile, qkv + s.row(b, i0) + s.q(a), s.width(), rows_inside(i0, kTile, s.seq), kTile, D,
            ld);

  float running_max[R], running_sum[R], acc[R][C];  // running_sum: this lane's columns only
#pragma unroll
  for (int r = 0; r < R; ++r) {
    running_max[r] = -INFINITY;
    running_sum[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;
  }

  for (std::int64_t key_tile = 0; key_tile <= query_tile; ++key_tile) {
    const std::int64_t j0 = key_tile * kTile;
    const int keys = rows_inside(j0, kTile, s.seq);
    __syncthreads();  // the q tile is in; nobody still reads the last v tile
    load_tile(kv_tile, qkv + s.row(b, j0) + s.k(kv), s.width(), keys, kTile, D, ld);
    __syncthreads();
    float p[R][R];
    tile_dots(p, q_tile, kv_tile, D, ld, ty, tx);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const std::int64_t i = i0 + ty * R + r;
      float tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < R; ++c) {
        const std::int64_t j = j0 + tx + kLanes * c;
        p[r][c] = flash_visible(i, j, s.seq) ? p[r][c] * scale : -INFINITY;
        tile_max = fmaxf(tile_max, p[r][c]);
      }
      // Finite from the first key tile on: every row sees key 0.
      const float new_max = fmaxf(running_max[r], row_max(tile_max));
      const float correction = __expf(running_max[r] - new_max);  // 0 on the first tile
      running_max[r] = new_max;
      running_sum[r] *= correction;
#pragma unroll
      for (int c = 0; c < C; ++c) acc[r][c] *= correction;
#pragma unroll
      for (int c = 0; c < R; ++c) {
        const float weight = __expf(p[r][c] - new_max);  // 0 where masked
        running_sum[r] += weight;
        p[r][c] = weight * s.mask(b, a, i, j0 + tx + kLanes * c);
      }
    }
    __syncthreads();  // every thread is done with the k tile
    load_tile(kv_tile, qkv + s.row(b, j0) + s.v(kv), s.width(), keys, kTile, D, ld);
    __syncthreads();
    accumulate_rows(acc, p, kv_tile, D, ld, tx);
  }

  float inverse_sum[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float total = row_sum(running_sum[r]);  // >= 1: the max itself adds exp(0)
    inverse_sum[r] = 1.0f / total;
    const std::int64_t i = i0 + ty * R + r;
    if (tx == 0 && i < s.seq) lse[s.lse(b, a, i)] = running_max[r] + logf(total);
  }
  store_rows(y + s.y(b, 0, a), s.heads * s.head_dim, acc, inverse_sum, i0, s.seq, D, ty, tx);
}

// delta[(b*A + a)*S + i] = dy_i . y_i (= sum_j P~_ij dP~_ij, dropout included): a warp per row.
template <typename T>
__global__ void flash_bwd_delta_kernel(float* delta, const T* dy, const T* y, FlashShape s) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t rows = s.batch * s.heads * s.seq;
  const std::int64_t warps_per_block = blockDim.x / 32;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * warps_per_block;
  for (std::int64_t r = blockIdx.x * warps_per_block + threadIdx.x / 32; r < rows; r += stride) {
    const std::int64_t i = r % s.seq, a = (r / s.seq) % s.heads, b = r / (s.seq * s.heads);
    const std::int64_t at = s.y(b, i, a);
    float acc = 0.0f;
    for (std::int64_t d = lane; d < s.head_dim; d += 32)
      acc = fmaf(to_f32(dy[at + d]), to_f32(y[at + d]), acc);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(kFullMask, acc, offset);
    if (lane == 0) delta[r] = acc;
  }
}

// dS_ij = scale * P_ij * (mask_ij * dP~_ij - delta_i) with P_ij = exp(scale * q_i.k_j - lse_i):
// the softmax backward through the dropout, from the saved lse instead of the probabilities.
__device__ __forceinline__ float score_grad(float score, float dprob, float row_lse,
                                            float row_delta, float mask, float scale,
                                            float* kept_prob) {
  const float prob = __expf(score * scale - row_lse);
  *kept_prob = prob * mask;
  return scale * prob * (mask * dprob - row_delta);
}

// dQ: a block per (b, a, query tile), over the key tiles at or below the diagonal:
// dq_i = sum_j dS_ij k_j. v and then k take turns in one shared tile.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kFlashThreads, flash_min_blocks(FlashKernel::dq, kHeadDim))
    flash_bwd_dq_kernel(T* dqkv, const T* dy, const T* qkv, const float* lse, const float* delta,
                        FlashShape s) {
  constexpr int kTile = flash_tile_rows(FlashKernel::dq, kHeadDim);
  constexpr int R = kTile / kLanes, C = kHeadDim / kLanes;
  extern __shared__ float shared[];
  const int D = static_cast<int>(s.head_dim), ld = flash_shared_stride(s.head_dim);
  float* q_tile = shared;
  float* dy_tile = shared + kTile * ld;
  float* kv_tile = shared + 2 * kTile * ld;
  const int tx = static_cast<int>(threadIdx.x) % kLanes,
            ty = static_cast<int>(threadIdx.x) / kLanes;

  const std::int64_t tiles = flash_tiles(s.seq, kTile);
  const FlashTile at = flash_tile_of_block(blockIdx.x, s.heads, tiles);
  const std::int64_t query_tile = tiles - 1 - at.tile;  // the longest rows start first
  const std::int64_t b = at.batch, a = at.head, kv = s.kv_of(a), i0 = query_tile * kTile;
  const float scale = s.scale();
  const int queries = rows_inside(i0, kTile, s.seq);
  load_tile(q_tile, qkv + s.row(b, i0) + s.q(a), s.width(), queries, kTile, D, ld);
  load_tile(dy_tile, dy + s.y(b, i0, a), s.heads * s.head_dim, queries, kTile, D, ld);

  float row_lse[R], row_delta[R], dq[R][C];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t i = i0 + ty * R + r;
    row_lse[r] = i < s.seq ? lse[s.lse(b, a, i)] : 0.0f;
    row_delta[r] = i < s.seq ? delta[s.lse(b, a, i)] : 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) dq[r][c] = 0.0f;
  }

  for (std::int64_t key_tile = 0; key_tile <= query_tile; ++key_tile) {
    const std::int64_t j0 = key_tile * kTile;
    const int keys = rows_inside(j0, kTile, s.seq);
    __syncthreads();  // q and dy tiles are in; nobody still reads the last k tile
    load_tile(kv_tile, qkv + s.row(b, j0) + s.v(kv), s.width(), keys, kTile, D, ld);
    __syncthreads();
    float dprob[R][R];  // dP~_ij = dy_i . v_j
    tile_dots(dprob, dy_tile, kv_tile, D, ld, ty, tx);
    __syncthreads();  // every thread is done with the v tile
    load_tile(kv_tile, qkv + s.row(b, j0) + s.k(kv), s.width(), keys, kTile, D, ld);
    __syncthreads();
    float dscore[R][R];
    tile_dots(dscore, q_tile, kv_tile, D, ld, ty, tx);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const std::int64_t i = i0 + ty * R + r;
#pragma unroll
      for (int c = 0; c < R; ++c) {
        const std::int64_t j = j0 + tx + kLanes * c;
        float kept = 0.0f;
        dscore[r][c] = flash_visible(i, j, s.seq) && i < s.seq
                           ? score_grad(dscore[r][c], dprob[r][c], row_lse[r], row_delta[r],
                                        s.mask(b, a, i, j), scale, &kept)
                           : 0.0f;
      }
    }
    accumulate_rows(dq, dscore, kv_tile, D, ld, tx);
  }

  float one[R];
#pragma unroll
  for (int r = 0; r < R; ++r) one[r] = 1.0f;
  store_rows(dqkv + s.row(b, 0) + s.q(a), s.width(), dq, one, i0, s.seq, D, ty, tx);
}

// dK and dV: a block per (b, kv head, key tile), over the query heads a of its group and the query
// tiles at or above the diagonal: dv_j = sum_{a,i} mask_ij P_ij dy_i and dk_j = sum_{a,i} dS_ij
// q_i. The block's k and v tiles stay in shared memory; q and dy tiles stream through. Scores are
// transposed here: a thread's rows are keys, its columns queries.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kFlashThreads, flash_min_blocks(FlashKernel::dkv, kHeadDim))
    flash_bwd_dkv_kernel(T* dqkv, const T* dy, const T* qkv, const float* lse, const float* delta,
                         FlashShape s) {
  constexpr int kTile = flash_tile_rows(FlashKernel::dkv, kHeadDim);
  constexpr int R = kTile / kLanes, C = kHeadDim / kLanes;
  extern __shared__ float shared[];
  const int D = static_cast<int>(s.head_dim), ld = flash_shared_stride(s.head_dim);
  float* k_tile = shared;
  float* v_tile = shared + kTile * ld;
  float* q_tile = shared + 2 * kTile * ld;
  float* dy_tile = shared + 3 * kTile * ld;
  const int tx = static_cast<int>(threadIdx.x) % kLanes,
            ty = static_cast<int>(threadIdx.x) / kLanes;

  const std::int64_t tiles = flash_tiles(s.seq, kTile);
  const FlashTile at = flash_tile_of_block(blockIdx.x, s.kv_heads, tiles);
  const std::int64_t key_tile = at.tile;  // the first key tiles see the most queries: first
  const std::int64_t b = at.batch, kv = at.head, j0 = key_tile * kTile;
  const std::int64_t group = s.heads / s.kv_heads;
  const float scale = s.scale();
  const int keys = rows_inside(j0, kTile, s.seq);
  load_tile(k_tile, qkv + s.row(b, j0) + s.k(kv), s.width(), keys, kTile, D, ld);
  load_tile(v_tile, qkv + s.row(b, j0) + s.v(kv), s.width(), keys, kTile, D, ld);

  float dk[R][C], dv[R][C];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) dk[r][c] = dv[r][c] = 0.0f;

  for (std::int64_t a = kv * group; a < (kv + 1) * group; ++a) {
    for (std::int64_t query_tile = key_tile; query_tile < tiles; ++query_tile) {
      const std::int64_t i0 = query_tile * kTile;
      const int queries = rows_inside(i0, kTile, s.seq);
      __syncthreads();  // k and v tiles are in; nobody still reads the last q and dy tiles
      load_tile(q_tile, qkv + s.row(b, i0) + s.q(a), s.width(), queries, kTile, D, ld);
      load_tile(dy_tile, dy + s.y(b, i0, a), s.heads * s.head_dim, queries, kTile, D, ld);
      float col_lse[R], col_delta[R];
#pragma unroll
      for (int c = 0; c < R; ++c) {
        const std::int64_t i = i0 + tx + kLanes * c;
        col_lse[c] = i < s.seq ? lse[s.lse(b, a, i)] : 0.0f;
        col_delta[c] = i < s.seq ? delta[s.lse(b, a, i)] : 0.0f;
      }
      __syncthreads();
      float dscore[R][R], prob[R][R];  // [key][query]
      tile_dots(dscore, k_tile, q_tile, D, ld, ty, tx);
      tile_dots(prob, v_tile, dy_tile, D, ld, ty, tx);  // dP~_ij = dy_i . v_j, until replaced
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const std::int64_t j = j0 + ty * R + r;
#pragma unroll
        for (int c = 0; c < R; ++c) {
          const std::int64_t i = i0 + tx + kLanes * c;
          float kept = 0.0f;
          dscore[r][c] = flash_visible(i, j, s.seq) && i < s.seq
                             ? score_grad(dscore[r][c], prob[r][c], col_lse[c], col_delta[c],
                                          s.mask(b, a, i, j), scale, &kept)
                             : 0.0f;
          prob[r][c] = kept;
        }
      }
      accumulate_rows(dv, prob, dy_tile, D, ld, tx);
      accumulate_rows(dk, dscore, q_tile, D, ld, tx);
    }
  }

  float one[R];
#pragma unroll
  for (int r = 0; r < R; ++r) one[r] = 1.0f;
  store_rows(dqkv + s.row(b, 0) + s.k(kv), s.width(), dk, one, j0, s.seq, D, ty, tx);
  store_rows(dqkv + s.row(b, 0) + s.v(kv), s.width(), dv, one, j0, s.seq, D, ty, tx);
}

// Calls f(std::integral_constant<int, class>) for the head-size class of a launch.
template <typename F>
void dispatch_head_dim(int head_dim_class, F&& f) {
  switch (head_dim_class) {
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 96:
      return f(std::integral_constant<int, 96>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    case 256:
      return f(std::integral_constant<int, 256>{});
    default:
      throw std::invalid_argument("flash attention: no kernel for head-size class " +
                                  std::to_string(head_dim_class));
  }
}

// Above the default 48 KB a kernel must opt in to its dynamic shared memory; the device's opt-in
// maximum is checked first, so a shape that cannot fit is an invalid_argument, not a launch error.
template <typename Kernel>
void allow_shared(Kernel* kernel, const FlashLaunch& l, const char* name) {
  if (l.shared_bytes <= kFlashDefaultSharedBytes) return;
  int device = 0, limit = 0;
  VB_CUDA_CHECK(cudaGetDevice(&device));
  VB_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  check_flash_shared(l, limit, name);
  VB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(l.shared_bytes)));
}

std::string flash_shape_text(const FlashShape& s) {
  return "B=" + std::to_string(s.batch) + " S=" + std::to_string(s.seq) +
         " A=" + std::to_string(s.heads) + " K=" + std::to_string(s.kv_heads) +
         " D=" + std::to_string(s.head_dim);
}

}  // namespace

void check_flash_shape(const FlashShape& s) {
  if (s.head_dim <= 0 || s.head_dim > kFlashMaxHeadDim)
    throw std::invalid_argument("flash attention: head size " + std::to_string(s.head_dim) +
                                " is outside 1.." + std::to_string(kFlashMaxHeadDim) +
                                " (the largest head size the fused kernels are compiled for)");
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    throw std::invalid_argument("flash attention: " + std::to_string(s.heads) +
                                " heads are not a multiple of " + std::to_string(s.kv_heads) +
                                " kv heads");
  if (s.batch < 0 || s.seq < 0 || s.heads < 0)
    throw std::invalid_argument("flash attention: negative size in " + flash_shape_text(s));
}

int flash_head_dim_class(std::int64_t head_dim) {
  for (int c : {32, 64, 96, 128, 256})
    if (head_dim <= c) return c;
  throw std::invalid_argument("flash attention: head size " + std::to_string(head_dim) +
                              " is above " + std::to_string(kFlashMaxHeadDim));
}

FlashLaunch flash_launch(FlashKernel kernel, const FlashShape& s) {
  check_flash_shape(s);
  FlashLaunch l;
  l.threads = kFlashThreads;
  l.head_dim_class = flash_head_dim_class(s.head_dim);
  const std::int64_t rows = s.batch * s.heads * s.seq;
  if (kernel == FlashKernel::delta) {
    l.blocks = rows == 0 ? 0 : grid_for(rows * 32, static_cast<unsigned>(kFlashThreads));
    return l;
  }
  l.tile = flash_tile_rows(kernel, l.head_dim_class);
  const std::int64_t heads = kernel == FlashKernel::dkv ? s.kv_heads : s.heads;
  l.blocks = s.batch * heads * flash_tiles(s.seq, l.tile);
  if (l.blocks > INT_MAX)
    throw std::invalid_argument("flash attention: " + std::to_string(l.blocks) + " blocks for " +
                                flash_shape_text(s) + " are more than a grid's " +
                                std::to_string(INT_MAX));
  const int tiles_in_shared =
      kernel == FlashKernel::forward ? 2 : (kernel == FlashKernel::dq ? 3 : 4);
  l.shared_bytes = static_cast<std::int64_t>(tiles_in_shared) * l.tile *
                   flash_shared_stride(s.head_dim) * static_cast<std::int64_t>(sizeof(float));
  return l;
}

void check_flash_shared(const FlashLaunch& launch, std::int64_t limit_bytes, const char* kernel) {
  if (launch.shared_bytes > limit_bytes)
    throw std::invalid_argument(std::string("flash attention: ") + kernel + " needs " +
                                std::to_string(launch.shared_bytes) +
                                " bytes of shared memory per block (head size class " +
                                std::to_string(launch.head_dim_class) + ", " +
                                std::to_string(launch.tile) + "-row tiles); this device allows " +
                                std::to_string(limit_bytes));
}

Bytes flash_bwd_scratch_bytes(const FlashShape& s) {
  return s.batch * s.heads * s.seq * (s.head_dim + 1) * static_cast<Bytes>(sizeof(float));
}

std::int64_t flash_delta_offset(const FlashShape& s) {
  return s.batch * s.heads * s.seq * s.head_dim;
}

void launch_flash_fwd(DType dtype, void* y, float* lse, const void* qkv, const FlashShape& s,
                      cudaStream_t stream) {
  const FlashLaunch l = flash_launch(FlashKernel::forward, s);
  if (l.blocks == 0) return;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_head_dim(l.head_dim_class, [&](auto head_dim) {
      auto* kernel = flash_fwd_kernel<T, decltype(head_dim)::value>;
      allow_shared(kernel, l, "flash_fwd_kernel");
      kernel<<<static_cast<unsigned>(l.blocks), l.threads, l.shared_bytes, stream>>>(
          static_cast<T*>(y), lse, static_cast<const T*>(qkv), s);
    });
  });
  VB_CHECK_LAUNCH("flash_fwd_kernel");
}

void launch_flash_bwd(DType dtype, void* dqkv, void* scratch, Bytes scratch_bytes, const void* dy,
                      const void* qkv, const void* y, const float* lse, const FlashShape& s,
                      cudaStream_t stream) {
  check_flash_shape(s);
  const Bytes needed = flash_bwd_scratch_bytes(s);
  if (scratch_bytes < needed || (needed > 0 && scratch == nullptr))
    throw std::invalid_argument("flash attention backward: the scratch holds " +
                                std::to_string(scratch_bytes) + " bytes, " + flash_shape_text(s) +
                                " needs " + std::to_string(needed) + " (fp32 [B,A,S,D+1])");
  const FlashLaunch pre = flash_launch(FlashKernel::delta, s);
  const FlashLaunch dq = flash_launch(FlashKernel::dq, s);
  const FlashLaunch dkv = flash_launch(FlashKernel::dkv, s);
  if (dq.blocks == 0) return;
  float* delta = static_cast<float*>(scratch) + flash_delta_offset(s);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    flash_bwd_delta_kernel<T><<<static_cast<unsigned>(pre.blocks), pre.threads, 0, stream>>>(
        delta, static_cast<const T*>(dy), static_cast<const T*>(y), s);
    VB_CHECK_LAUNCH("flash_bwd_delta_kernel");
    dispatch_head_dim(dq.head_dim_class, [&](auto head_dim) {
      constexpr int kHeadDim = decltype(head_dim)::value;
      auto* dq_kernel = flash_bwd_dq_kernel<T, kHeadDim>;
      allow_shared(dq_kernel, dq, "flash_bwd_dq_kernel");
      dq_kernel<<<static_cast<unsigned>(dq.blocks), dq.threads, dq.shared_bytes, stream>>>(
          static_cast<T*>(dqkv), static_cast<const T*>(dy), static_cast<const T*>(qkv), lse, delta,
          s);
      VB_CHECK_LAUNCH("flash_bwd_dq_kernel");
      auto* dkv_kernel = flash_bwd_dkv_kernel<T, kHeadDim>;
      allow_shared(dkv_kernel, dkv, "flash_bwd_dkv_kernel");
      dkv_kernel<<<static_cast<unsigned>(dkv.blocks), dkv.threads, dkv.shared_bytes, stream>>>(
          static_cast<T*>(dqkv), static_cast<const T*>(dy), static_cast<const T*>(qkv), lse, delta,
          s);
      VB_CHECK_LAUNCH("flash_bwd_dkv_kernel");
    });
  });
}

}  // namespace vrambench::cuda
