// AdamW and SGD with momentum (kmath::adamw_update / sgd_update), element-wise and in place.
// With fp32 master weights (mixed precision) the update is applied to the master copy and the
// weight is its rounding to the storage type; otherwise the weight itself is fp32. The gradients
// are divided by params.grad_scale (the static loss scale of fp16 training) in fp32 first.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/math.h"
#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

using AdamWParams = kmath::AdamParams;
using SgdParams = kmath::SgdParams;

template <typename T>
__host__ __device__ inline void adamw_body(std::int64_t i, T* w, const T* grad, float* m, float* v,
                                           float* master, AdamWParams p) {
  float param = master != nullptr ? master[i] : to_f32(w[i]);
  kmath::adamw_update(&param, to_f32(grad[i]), &m[i], &v[i], p);
  if (master != nullptr) master[i] = param;
  w[i] = from_f32<T>(param);
}

template <typename T>
__host__ __device__ inline void sgd_body(std::int64_t i, T* w, const T* grad, float* momentum,
                                         float* master, SgdParams p) {
  float param = master != nullptr ? master[i] : to_f32(w[i]);
  kmath::sgd_update(&param, to_f32(grad[i]), &momentum[i], p);
  if (master != nullptr) master[i] = param;
  w[i] = from_f32<T>(param);
}

// dtype is the weight's (and gradient's) storage; m, v, momentum and master are fp32.
void launch_adamw(DType dtype, void* w, const void* grad, float* m, float* v, float* master,
                  AdamWParams params, std::int64_t n, cudaStream_t stream);
void launch_sgd(DType dtype, void* w, const void* grad, float* momentum, float* master,
                SgdParams params, std::int64_t n, cudaStream_t stream);

}  // namespace vrambench::cuda
