// Row softmax of attention scores (forward and backward) and the causal mask that attn_scores
// applies after its GEMM (-inf above the diagonal of each S x S block).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

template <typename T>
__host__ __device__ inline void softmax_fwd_body(std::int64_t row, T* probs, const T* scores,
                                                 std::int64_t cols) {
  const T* s = scores + row * cols;
  float mx = -INFINITY;
  for (std::int64_t c = 0; c < cols; ++c) mx = fmaxf(mx, to_f32(s[c]));
  T* p = probs + row * cols;
  if (mx == -INFINITY) {  // fully masked row: define as zeros rather than NaN
    for (std::int64_t c = 0; c < cols; ++c) p[c] = from_f32<T>(0.0f);
    return;
  }
  float sum = 0.0f;
  for (std::int64_t c = 0; c < cols; ++c) sum += expf(to_f32(s[c]) - mx);
  const float inv = 1.0f / sum;
  for (std::int64_t c = 0; c < cols; ++c) p[c] = from_f32<T>(expf(to_f32(s[c]) - mx) * inv);
}

template <typename T>
__host__ __device__ inline void softmax_bwd_body(std::int64_t row, T* dscores, const T* dprobs,
                                                 const T* probs, std::int64_t cols) {
  const T* dp = dprobs + row * cols;
  const T* p = probs + row * cols;
  float dot = 0.0f;
  for (std::int64_t c = 0; c < cols; ++c) dot += to_f32(dp[c]) * to_f32(p[c]);
  T* ds = dscores + row * cols;
  for (std::int64_t c = 0; c < cols; ++c) ds[c] = from_f32<T>(to_f32(p[c]) * (to_f32(dp[c]) - dot));
}

// i over blocks*S*S: sets element (r, c) of each S x S block to -inf when c > r.
template <typename T>
__host__ __device__ inline void causal_mask_body(std::int64_t i, T* scores, std::int64_t seq) {
  const std::int64_t c = i % seq, r = (i / seq) % seq;
  if (c > r) scores[i] = from_f32<T>(-INFINITY);
}

void launch_softmax_fwd(DType dtype, void* probs, const void* scores, std::int64_t rows,
                        std::int64_t cols, cudaStream_t stream);
void launch_softmax_bwd(DType dtype, void* dscores, const void* dprobs, const void* probs,
                        std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// blocks = B*A; scores[blocks, S, S].
void launch_causal_mask(DType dtype, void* scores, std::int64_t blocks, std::int64_t seq,
                        cudaStream_t stream);

}  // namespace vrambench::cuda
