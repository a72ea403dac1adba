// Fused causal attention over packed qkv[B,S,(A+2K)*D] that saves only y[B,S,A*D] and the row
// log-sum-exp lse[B,A,S] (fp32), never the S x S probabilities: forward and backward, with dropout
// drawn from the shared counter RNG at the index of the probability it drops (as eager attention
// and the CPU reference do). One thread per query row (forward, dq) or per key row (dk, dv) with
// fp32 accumulators in registers, so the bodies also run on the CPU in tests. This is the
// memory-faithful reference path; it is not tiled for speed.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/math.h"
#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

inline constexpr std::int64_t kFlashMaxHeadDim = 256;

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

template <typename T>
__host__ __device__ inline float flash_dot(const T* x, const T* y, std::int64_t n) {
  float acc = 0.0f;
  for (std::int64_t d = 0; d < n; ++d) acc += to_f32(x[d]) * to_f32(y[d]);
  return acc;
}

// Query row r = (b * A + a) * S + i: online softmax over keys j <= i.
template <typename T>
__host__ __device__ inline void flash_fwd_body(std::int64_t r, T* y, float* lse, const T* qkv,
                                               FlashShape s) {
  const std::int64_t i = r % s.seq, a = (r / s.seq) % s.heads, b = r / (s.seq * s.heads);
  const std::int64_t kv = s.kv_of(a), D = s.head_dim;
  const T* q = qkv + s.row(b, i) + s.q(a);
  float acc[kFlashMaxHeadDim];
  for (std::int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
  float running_max = -INFINITY, running_sum = 0.0f;
  for (std::int64_t j = 0; j <= i; ++j) {
    const float score = s.scale() * flash_dot(q, qkv + s.row(b, j) + s.k(kv), D);
    if (score > running_max) {
      const float correction = expf(running_max - score);  // 0 on the first key
      running_sum *= correction;
      for (std::int64_t d = 0; d < D; ++d) acc[d] *= correction;
      running_max = score;
    }
    const float weight = expf(score - running_max);
    running_sum += weight;
    const float kept = weight * s.mask(b, a, i, j);
    if (kept == 0.0f) continue;
    const T* v = qkv + s.row(b, j) + s.v(kv);
    for (std::int64_t d = 0; d < D; ++d) acc[d] += kept * to_f32(v[d]);
  }
  T* out = y + s.y(b, i, a);
  for (std::int64_t d = 0; d < D; ++d) out[d] = from_f32<T>(acc[d] / running_sum);
  lse[s.lse(b, a, i)] = running_max + logf(running_sum);
}

// dq of query row r = (b * A + a) * S + i, written into the q columns of dqkv.
template <typename T>
__host__ __device__ inline void flash_bwd_dq_body(std::int64_t r, T* dqkv, const T* dy,
                                                  const T* qkv, const T* y, const float* lse,
                                                  FlashShape s) {
  const std::int64_t i = r % s.seq, a = (r / s.seq) % s.heads, b = r / (s.seq * s.heads);
  const std::int64_t kv = s.kv_of(a), D = s.head_dim;
  const T* g = dy + s.y(b, i, a);
  const float delta = flash_dot(g, y + s.y(b, i, a), D);  // sum_j P~_ij dP~_ij
  const float row_lse = lse[s.lse(b, a, i)];
  const T* q = qkv + s.row(b, i) + s.q(a);
  float dq[kFlashMaxHeadDim];
  for (std::int64_t d = 0; d < D; ++d) dq[d] = 0.0f;
  for (std::int64_t j = 0; j <= i; ++j) {
    const T* k = qkv + s.row(b, j) + s.k(kv);
    const float prob = expf(s.scale() * flash_dot(q, k, D) - row_lse);
    const float dprob = s.mask(b, a, i, j) * flash_dot(g, qkv + s.row(b, j) + s.v(kv), D);
    const float dscore = s.scale() * prob * (dprob - delta);
    for (std::int64_t d = 0; d < D; ++d) dq[d] += dscore * to_f32(k[d]);
  }
  T* out = dqkv + s.row(b, i) + s.q(a);
  for (std::int64_t d = 0; d < D; ++d) out[d] = from_f32<T>(dq[d]);
}

// dk and dv of key row r = (b * K + kv) * S + j: sums over the query heads of its group and the
// queries i >= j; written into the k and v columns of dqkv.
template <typename T>
__host__ __device__ inline void flash_bwd_dkv_body(std::int64_t r, T* dqkv, const T* dy,
                                                   const T* qkv, const T* y, const float* lse,
                                                   FlashShape s) {
  const std::int64_t j = r % s.seq, kv = (r / s.seq) % s.kv_heads, b = r / (s.seq * s.kv_heads);
  const std::int64_t D = s.head_dim, group = s.heads / s.kv_heads;
  const T* k = qkv + s.row(b, j) + s.k(kv);
  const T* v = qkv + s.row(b, j) + s.v(kv);
  float dk[kFlashMaxHeadDim], dv[kFlashMaxHeadDim];
  for (std::int64_t d = 0; d < D; ++d) dk[d] = dv[d] = 0.0f;
  for (std::int64_t a = kv * group; a < (kv + 1) * group; ++a)
    for (std::int64_t i = j; i < s.seq; ++i) {
      const T* q = qkv + s.row(b, i) + s.q(a);
      const T* g = dy + s.y(b, i, a);
      const float prob = expf(s.scale() * flash_dot(q, k, D) - lse[s.lse(b, a, i)]);
      const float mask = s.mask(b, a, i, j);
      const float delta = flash_dot(g, y + s.y(b, i, a), D);
      const float dscore = s.scale() * prob * (mask * flash_dot(g, v, D) - delta);
      for (std::int64_t d = 0; d < D; ++d) {
        dk[d] += dscore * to_f32(q[d]);
        dv[d] += prob * mask * to_f32(g[d]);
      }
    }
  T* out_k = dqkv + s.row(b, j) + s.k(kv);
  T* out_v = dqkv + s.row(b, j) + s.v(kv);
  for (std::int64_t d = 0; d < D; ++d) {
    out_k[d] = from_f32<T>(dk[d]);
    out_v[d] = from_f32<T>(dv[d]);
  }
}

// Throws std::invalid_argument when the shape is outside what the kernels take (head size above
// kFlashMaxHeadDim, heads not a multiple of kv heads).
void check_flash_shape(const FlashShape& s);
void launch_flash_fwd(DType dtype, void* y, float* lse, const void* qkv, const FlashShape& s,
                      cudaStream_t stream);
void launch_flash_bwd(DType dtype, void* dqkv, const void* dy, const void* qkv, const void* y,
                      const float* lse, const FlashShape& s, cudaStream_t stream);

}  // namespace vrambench::cuda
