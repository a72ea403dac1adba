// Cross-entropy of logits[M,V] against i32 targets: forward gives each row's log-sum-exp (fp32) and
// the mean loss; backward gives dlogits of the mean loss, (softmax - onehot) / M.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

template <typename T>
__host__ __device__ inline void cross_entropy_lse_body(std::int64_t row, float* lse,
                                                       const T* logits, std::int64_t V) {
  const T* l = logits + row * V;
  float mx = -INFINITY;
  for (std::int64_t v = 0; v < V; ++v) mx = fmaxf(mx, to_f32(l[v]));
  float sum = 0.0f;
  for (std::int64_t v = 0; v < V; ++v) sum += expf(to_f32(l[v]) - mx);
  lse[row] = mx + logf(sum);
}

// One thread: loss = mean over rows of lse - logit[target], summed in a fixed order.
template <typename T>
__host__ __device__ inline void cross_entropy_loss_body(float* loss, const float* lse,
                                                        const T* logits,
                                                        const std::int32_t* targets, std::int64_t M,
                                                        std::int64_t V) {
  float sum = 0.0f;
  for (std::int64_t m = 0; m < M; ++m)
    sum += lse[m] - to_f32(logits[m * V + static_cast<std::int64_t>(targets[m])]);
  loss[0] = sum / static_cast<float>(M);
}

template <typename T>
__host__ __device__ inline void cross_entropy_bwd_body(std::int64_t i, T* dlogits, const T* logits,
                                                       const std::int32_t* targets,
                                                       const float* lse, std::int64_t M,
                                                       std::int64_t V) {
  const std::int64_t m = i / V, v = i % V;
  const float p = expf(to_f32(logits[i]) - lse[m]);
  const float onehot = v == static_cast<std::int64_t>(targets[m]) ? 1.0f : 0.0f;
  dlogits[i] = from_f32<T>((p - onehot) / static_cast<float>(M));
}

void launch_cross_entropy_fwd(DType dtype, float* loss, float* lse, const void* logits,
                              const std::int32_t* targets, std::int64_t M, std::int64_t V,
                              cudaStream_t stream);
void launch_cross_entropy_bwd(DType dtype, void* dlogits, const void* logits,
                              const std::int32_t* targets, const float* lse, std::int64_t M,
                              std::int64_t V, cudaStream_t stream);

}  // namespace vrambench::cuda
