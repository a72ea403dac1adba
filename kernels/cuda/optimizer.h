// AdamW and SGD with momentum (kmath::adamw_update / sgd_update), element-wise and in place.
// With fp32 master weights (mixed precision) the update is applied to the master copy and the
// weight is its rounding to the storage type; otherwise to the weight's own values in fp32. The
// gradients are divided by params.grad_scale (the static loss scale of fp16 training) in fp32
// first.
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

// T is the weight's (and gradient's) storage, S the state's: fp32, or T itself where PyTorch keeps
// the state in the parameter's dtype (torch.optim.AdamW and SGD make it zeros_like(param), so a
// bf16 model without master weights has bf16 moments). The update runs in fp32 either way and the
// state is stored rounded, as the cpu reference does.
template <typename T, typename S>
__host__ __device__ inline void adamw_body(std::int64_t i, T* w, const T* grad, S* m, S* v,
                                           float* master, AdamWParams p) {
  float param = master != nullptr ? master[i] : to_f32(w[i]);
  float mi = to_f32(m[i]), vi = to_f32(v[i]);
  kmath::adamw_update(&param, to_f32(grad[i]), &mi, &vi, p);
  m[i] = from_f32<S>(mi);
  v[i] = from_f32<S>(vi);
  if (master != nullptr) master[i] = param;
  w[i] = from_f32<T>(param);
}

template <typename T, typename S>
__host__ __device__ inline void sgd_body(std::int64_t i, T* w, const T* grad, S* momentum,
                                         float* master, SgdParams p) {
  float param = master != nullptr ? master[i] : to_f32(w[i]);
  float buf = to_f32(momentum[i]);
  kmath::sgd_update(&param, to_f32(grad[i]), &buf, p);
  momentum[i] = from_f32<S>(buf);
  if (master != nullptr) master[i] = param;
  w[i] = from_f32<T>(param);
}

// dtype is the weight's (and gradient's) storage; state_dtype that of m and v (momentum): fp32 or
// dtype, anything else throws; master is fp32.
void launch_adamw(DType dtype, DType state_dtype, void* w, const void* grad, void* m, void* v,
                  float* master, AdamWParams params, std::int64_t n, cudaStream_t stream);
void launch_sgd(DType dtype, DType state_dtype, void* w, const void* grad, void* momentum,
                float* master, SgdParams params, std::int64_t n, cudaStream_t stream);

}  // namespace vrambench::cuda
