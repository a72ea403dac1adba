// Row softmax of attention scores (forward and backward) and the causal mask that attn_scores
// applies after its GEMM (-inf above the diagonal of each S x S block). Each row gets a block of
// kRowThreads threads (rows of S = 1024 are 4 columns per thread): thread `lane` of `lanes` owns
// columns lane, lane + lanes, ..., and the block combines the lanes' parts (cuda/reduce.h). The
// bodies take explicit indices, so tests run them on the CPU with any number of lanes.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/reduce.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// Lane's part of max_c scores[row, c] (-inf when it owns no column).
template <typename T>
__host__ __device__ inline float softmax_max_part(std::int64_t row, std::int64_t lane,
                                                  std::int64_t lanes, const T* scores,
                                                  std::int64_t cols) {
  const T* s = scores + row * cols;
  float mx = -INFINITY;
  for (std::int64_t c = lane; c < cols; c += lanes) mx = fmaxf(mx, to_f32(s[c]));
  return mx;
}
// Lane's part of sum_c exp(scores[row, c] - mx); 0 for a fully masked row (mx = -inf).
template <typename T>
__host__ __device__ inline float softmax_sum_part(std::int64_t row, std::int64_t lane,
                                                  std::int64_t lanes, const T* scores,
                                                  std::int64_t cols, float mx) {
  if (mx == -INFINITY) return 0.0f;
  const T* s = scores + row * cols;
  float sum = 0.0f;
  for (std::int64_t c = lane; c < cols; c += lanes) sum += expf(to_f32(s[c]) - mx);
  return sum;
}
// probs[row, c] = exp(scores - mx) / sum over the lane's columns; a fully masked row (mx = -inf)
// is defined as zeros rather than NaN.
template <typename T, typename S>
__host__ __device__ inline void softmax_fwd_write(std::int64_t row, std::int64_t lane,
                                                  std::int64_t lanes, T* probs, const S* scores,
                                                  std::int64_t cols, float mx, float sum) {
  const S* s = scores + row * cols;
  T* p = probs + row * cols;
  if (mx == -INFINITY) {
    for (std::int64_t c = lane; c < cols; c += lanes) p[c] = from_f32<T>(0.0f);
    return;
  }
  const float inv = 1.0f / sum;
  for (std::int64_t c = lane; c < cols; c += lanes)
    p[c] = from_f32<T>(expf(to_f32(s[c]) - mx) * inv);
}

// Lane's part of sum_c dprobs * probs.
template <typename T>
__host__ __device__ inline float softmax_dot_part(std::int64_t row, std::int64_t lane,
                                                  std::int64_t lanes, const T* dprobs,
                                                  const T* probs, std::int64_t cols) {
  const T* dp = dprobs + row * cols;
  const T* p = probs + row * cols;
  float dot = 0.0f;
  for (std::int64_t c = lane; c < cols; c += lanes) dot += to_f32(dp[c]) * to_f32(p[c]);
  return dot;
}
// dscores = probs * (dprobs - dot) over the lane's columns.
template <typename T, typename D>
__host__ __device__ inline void softmax_bwd_write(std::int64_t row, std::int64_t lane,
                                                  std::int64_t lanes, D* dscores, const T* dprobs,
                                                  const T* probs, std::int64_t cols, float dot) {
  const T* dp = dprobs + row * cols;
  const T* p = probs + row * cols;
  D* ds = dscores + row * cols;
  for (std::int64_t c = lane; c < cols; c += lanes)
    ds[c] = from_f32<D>(to_f32(p[c]) * (to_f32(dp[c]) - dot));
}

// i over blocks*S*S: sets element (r, c) of each S x S block to -inf when c > r.
template <typename T>
__host__ __device__ inline void causal_mask_body(std::int64_t i, T* scores, std::int64_t seq) {
  const std::int64_t c = i % seq, r = (i / seq) % seq;
  if (c > r) scores[i] = from_f32<T>(-INFINITY);
}

// dtype: probs'; scores_dtype: the scores', any floating dtype (transformers' Llama asks for an
// fp32 softmax of 16-bit scores).
void launch_softmax_fwd(DType dtype, void* probs, DType scores_dtype, const void* scores,
                        std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// dtype: dprobs' and probs'; dscores_dtype: dscores', any floating dtype.
void launch_softmax_bwd(DType dtype, DType dscores_dtype, void* dscores, const void* dprobs,
                        const void* probs, std::int64_t rows, std::int64_t cols,
                        cudaStream_t stream);
// blocks = B*A; scores[blocks, S, S].
void launch_causal_mask(DType dtype, void* scores, std::int64_t blocks, std::int64_t seq,
                        cudaStream_t stream);

}  // namespace vrambench::cuda
