// Token (+ learned position) embedding: forward gathers rows, backward scatters gradient rows.
//
// Backward, token table: dwte[v] = sum of dx over the rows whose token is v, in fp32. The rows are
// sorted by token with a counting sort whose int32 scratch lies in the GEMM workspace (a run may
// use only memory its program lists): counts[V] | offsets[V + 1] | rows[pass]. Then a block per
// (token, 256 columns) sums its rows' dx in fp32 and stores the row of dwte once: every element of
// dwte is written, adjacent threads write adjacent columns, and the work is spread over V blocks.
// The order of the rows within a token comes from atomics, so the fp32 sums may differ in their
// last bits from run to run. When the workspace holds fewer than M rows (embedding_sort_rows), the
// rows go in passes of that many, and every pass after the first adds its fp32 sums to dwte as
// stored, rounding to the storage type once per pass. Tokens outside [0, V) are skipped (the CPU
// reference throws).
// Backward, position table: dwpe[s] = sum over the batch of dx[b, s], a column sum of dx seen as
// [B, S*H] (cuda/reduce.h); rows from S on are zero.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/units.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// x[m, h] = scale (wte[tokens[m], h] + wpe[m % S, h]); i over M*H. wpe may be null (no learned
// positions); scale is 1 but for Gemma's sqrt(hidden).
template <typename T>
__host__ __device__ inline void embedding_fwd_body(std::int64_t i, T* x, const std::int32_t* tokens,
                                                   const T* wte, const T* wpe, std::int64_t seq,
                                                   std::int64_t hidden, float scale = 1.0f) {
  const std::int64_t m = i / hidden, h = i % hidden;
  float v = to_f32(wte[static_cast<std::int64_t>(tokens[m]) * hidden + h]);
  if (wpe != nullptr) v += to_f32(wpe[(m % seq) * hidden + h]);
  x[i] = from_f32<T>(scale == 1.0f ? v : v * scale);
}

// ---- token sort --------------------------------------------------------------------------------

// Rows of one pass of the sort: as many as the workspace holds next to counts and offsets, at
// most `rows`; 0 when not even one fits (then embedding_dwte_column_body runs instead).
constexpr std::int64_t embedding_sort_rows(std::int64_t rows, std::int64_t vocab,
                                           Bytes workspace_bytes) {
  const std::int64_t room = workspace_bytes / 4 - (2 * vocab + 1);
  if (room < 1 || rows < 1) return 0;
  const std::int64_t int32_max = 0x7fffffff;
  const std::int64_t pass = room < rows ? room : rows;
  return pass < int32_max ? pass : int32_max;
}
// Bytes of the sort's scratch for a pass of `pass_rows` rows.
constexpr Bytes embedding_sort_bytes(std::int64_t pass_rows, std::int64_t vocab) {
  return 4 * (2 * vocab + 1 + pass_rows);
}

// An atomic add on the GPU; the plain add it equals when the CPU runs a body alone.
__host__ __device__ inline std::int32_t fetch_add(std::int32_t* p, std::int32_t v) {
#if defined(__CUDA_ARCH__)
  return atomicAdd(p, v);
#else
  const std::int32_t old = *p;
  *p = old + v;
  return old;
#endif
}

// Row first + i of the pass: counts[token] += 1.
__host__ __device__ inline void embedding_count_body(std::int64_t i, std::int32_t* counts,
                                                     const std::int32_t* tokens, std::int64_t first,
                                                     std::int64_t vocab) {
  const std::int32_t t = tokens[first + i];
  if (t >= 0 && t < vocab) fetch_add(&counts[t], 1);
}
// Row first + i of the pass into the next free slot of its token: sorted[offsets[t] + cursor[t]++].
// cursor starts at zero (the offsets kernel clears the counts it read).
__host__ __device__ inline void embedding_scatter_body(std::int64_t i, std::int32_t* sorted,
                                                       std::int32_t* cursor,
                                                       const std::int32_t* offsets,
                                                       const std::int32_t* tokens,
                                                       std::int64_t first, std::int64_t vocab) {
  const std::int32_t t = tokens[first + i];
  if (t < 0 || t >= vocab) return;
  const std::int32_t slot = offsets[t] + fetch_add(&cursor[t], 1);
  sorted[slot] = static_cast<std::int32_t>(first + i);
}
// dwte[v, h] = scale times the fp32 sum of dx[r, h] over the rows r of token v (sorted[offsets[v]
// .. offsets[v + 1])), added to the old value when accumulate; written even when v has no rows.
template <typename T>
__host__ __device__ inline void embedding_bucket_body(std::int64_t v, std::int64_t h, T* dwte,
                                                      const T* dx, const std::int32_t* sorted,
                                                      const std::int32_t* offsets,
                                                      std::int64_t hidden, bool accumulate,
                                                      float scale = 1.0f) {
  float sum = 0.0f;
  for (std::int64_t i = offsets[v]; i < offsets[v + 1]; ++i)
    sum += to_f32(dx[static_cast<std::int64_t>(sorted[i]) * hidden + h]);
  if (scale != 1.0f) sum *= scale;
  T& out = dwte[v * hidden + h];
  if (accumulate) sum += to_f32(out);
  out = from_f32<T>(sum);
}

// Without room for the sort: column h of dwte, one thread walking every row and adding in the
// storage type (each add rounds). dwte must hold zeros, or the gradient to accumulate into.
template <typename T>
__host__ __device__ inline void embedding_dwte_column_body(std::int64_t h, T* dwte, const T* dx,
                                                           const std::int32_t* tokens,
                                                           std::int64_t rows, std::int64_t hidden,
                                                           std::int64_t vocab, float scale = 1.0f) {
  for (std::int64_t m = 0; m < rows; ++m) {
    const std::int32_t t = tokens[m];
    if (t < 0 || t >= vocab) continue;
    T& wt = dwte[static_cast<std::int64_t>(t) * hidden + h];
    wt = from_f32<T>(to_f32(wt) + scale * to_f32(dx[m * hidden + h]));
  }
}

// rows = B*S. vocab and positions size the gradients: dwte is overwritten (added into when
// accumulate: the tied lm head wrote it first), dwpe always overwritten. The sort's scratch and
// the dwpe partials use `workspace` (the GEMM workspace), one after the other.
// scale: the output's factor (Gemma's sqrt(hidden)), and the token table gradient's in the
// backward; a position table's gradient is taken unscaled (no model scales learned positions).
void launch_embedding_fwd(DType dtype, void* x, const std::int32_t* tokens, const void* wte,
                          const void* wpe, std::int64_t rows, std::int64_t seq, std::int64_t hidden,
                          float scale, cudaStream_t stream);
void launch_embedding_bwd(DType dtype, void* dwte, void* dwpe, const void* dx,
                          const std::int32_t* tokens, std::int64_t rows, std::int64_t seq,
                          std::int64_t hidden, std::int64_t vocab, std::int64_t positions,
                          bool accumulate, float scale, void* workspace, Bytes workspace_bytes,
                          cudaStream_t stream);

}  // namespace vrambench::cuda
