// Cross-entropy of logits[M,V] against i32 targets: forward gives each row's log-sum-exp (fp32) and
// the mean loss; backward gives dlogits of grad_scale times the mean loss, (softmax - onehot) *
// grad_scale / M. grad_scale is the static loss scale of fp16 training (Op::grad_scale): without
// it the gradient of the mean loss, about 1 / (V M), is below fp16's smallest subnormal for a
// vocabulary of 50257 and M = 8192 rows, and every element but the target's rounds to zero.
// Each row gets a block of kVocabThreads threads (V = 50257 is 50 columns per thread): thread
// `lane` of `lanes` owns columns lane, lane + lanes, ..., and the block combines the lanes' parts
// (cuda/reduce.h); each block adds its rows' losses into the zeroed loss (one fp32 atomicAdd per
// block). The bodies take explicit indices, so tests run them on the CPU with any number of lanes.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

inline constexpr int kVocabThreads = 1024;

// Lane's part of max_v logits[row, v].
template <typename T>
__host__ __device__ inline float cross_entropy_max_part(std::int64_t row, std::int64_t lane,
                                                        std::int64_t lanes, const T* logits,
                                                        std::int64_t V) {
  const T* l = logits + row * V;
  float mx = -INFINITY;
  for (std::int64_t v = lane; v < V; v += lanes) mx = fmaxf(mx, to_f32(l[v]));
  return mx;
}
// Lane's part of sum_v exp(logits[row, v] - mx).
template <typename T>
__host__ __device__ inline float cross_entropy_sum_part(std::int64_t row, std::int64_t lane,
                                                        std::int64_t lanes, const T* logits,
                                                        std::int64_t V, float mx) {
  const T* l = logits + row * V;
  float sum = 0.0f;
  for (std::int64_t v = lane; v < V; v += lanes) sum += expf(to_f32(l[v]) - mx);
  return sum;
}
// The row's loss, lse - logits[row, target]; NaN for a target outside [0, V), which a GPU cannot
// report otherwise (the CPU reference throws).
template <typename T>
__host__ __device__ inline float cross_entropy_row_loss(std::int64_t row, float lse,
                                                        const T* logits,
                                                        const std::int32_t* targets,
                                                        std::int64_t V) {
  const std::int64_t t = targets[row];
  if (t < 0 || t >= V) return NAN;
  return lse - to_f32(logits[row * V + t]);
}

// dlogits[row, v] = (exp(logits - lse) - onehot) * scale over the lane's columns, with
// scale = grad_scale / M.
template <typename T>
__host__ __device__ inline void cross_entropy_bwd_body(std::int64_t row, std::int64_t lane,
                                                       std::int64_t lanes, T* dlogits,
                                                       const T* logits, const std::int32_t* targets,
                                                       const float* lse, std::int64_t V,
                                                       float scale) {
  const T* l = logits + row * V;
  T* d = dlogits + row * V;
  const float row_lse = lse[row];
  const std::int64_t t = targets[row];
  for (std::int64_t v = lane; v < V; v += lanes) {
    const float p = expf(to_f32(l[v]) - row_lse);
    d[v] = from_f32<T>((p - (v == t ? 1.0f : 0.0f)) * scale);
  }
}

void launch_cross_entropy_fwd(DType dtype, float* loss, float* lse, const void* logits,
                              const std::int32_t* targets, std::int64_t M, std::int64_t V,
                              cudaStream_t stream);
// grad_scale: the static loss scale (1 unless the recipe scales; Op::grad_scale).
void launch_cross_entropy_bwd(DType dtype, void* dlogits, const void* logits,
                              const std::int32_t* targets, const float* lse, std::int64_t M,
                              std::int64_t V, float grad_scale, cudaStream_t stream);

}  // namespace vrambench::cuda
