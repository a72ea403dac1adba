// AdamW (decoupled weight decay, bias-corrected) and SGD with momentum, element-wise and in place.
// With fp32 master weights (mixed precision) the update is applied to the master copy and the
// weight is its rounding to the storage type; otherwise the weight itself is fp32.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

struct AdamWParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  int step = 1;  // 1-based step for the bias correction
};
struct SgdParams {
  float lr = 1e-3f, momentum = 0.9f, weight_decay = 0.0f;
};

template <typename T>
__host__ __device__ inline void adamw_body(std::int64_t i, T* w, const T* grad, float* m, float* v,
                                           float* master, AdamWParams p) {
  float param = master != nullptr ? master[i] : to_f32(w[i]);
  const float g = to_f32(grad[i]);
  param -= p.lr * p.weight_decay * param;
  const float mi = p.beta1 * m[i] + (1.0f - p.beta1) * g;
  const float vi = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  const float mhat = mi / (1.0f - powf(p.beta1, static_cast<float>(p.step)));
  const float vhat = vi / (1.0f - powf(p.beta2, static_cast<float>(p.step)));
  param -= p.lr * mhat / (sqrtf(vhat) + p.eps);
  if (master != nullptr) master[i] = param;
  w[i] = from_f32<T>(param);
}

template <typename T>
__host__ __device__ inline void sgd_body(std::int64_t i, T* w, const T* grad, float* momentum,
                                         float* master, SgdParams p) {
  float param = master != nullptr ? master[i] : to_f32(w[i]);
  const float g = to_f32(grad[i]) + p.weight_decay * param;
  const float buf = p.momentum * momentum[i] + g;
  momentum[i] = buf;
  param -= p.lr * buf;
  if (master != nullptr) master[i] = param;
  w[i] = from_f32<T>(param);
}

// dtype is the weight's (and gradient's) storage; m, v, momentum and master are fp32.
void launch_adamw(DType dtype, void* w, const void* grad, float* m, float* v, float* master,
                  AdamWParams params, std::int64_t n, cudaStream_t stream);
void launch_sgd(DType dtype, void* w, const void* grad, float* momentum, float* master,
                SgdParams params, std::int64_t n, cudaStream_t stream);

}  // namespace vrambench::cuda
