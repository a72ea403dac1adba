// GELU (tanh approximation) and SwiGLU, forward and backward: element-wise bodies and launchers.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

__host__ __device__ inline float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  const float u = k * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
__host__ __device__ inline float gelu_tanh_grad(float x) {
  const float k = 0.7978845608028654f;
  const float u = k * (x + 0.044715f * x * x * x);
  const float t = tanhf(u);
  const float du = k * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
__host__ __device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename T>
__host__ __device__ inline void gelu_fwd_body(std::int64_t i, T* y, const T* x) {
  y[i] = from_f32<T>(gelu_tanh(to_f32(x[i])));
}
template <typename T>
__host__ __device__ inline void gelu_bwd_body(std::int64_t i, T* dx, const T* dy, const T* x) {
  dx[i] = from_f32<T>(to_f32(dy[i]) * gelu_tanh_grad(to_f32(x[i])));
}
template <typename T>
__host__ __device__ inline void swiglu_fwd_body(std::int64_t i, T* y, const T* gate, const T* up) {
  const float g = to_f32(gate[i]);
  y[i] = from_f32<T>(g * sigmoid(g) * to_f32(up[i]));
}
template <typename T>
__host__ __device__ inline void swiglu_bwd_body(std::int64_t i, T* dgate, T* dup, const T* dy,
                                                const T* gate, const T* up) {
  const float g = to_f32(gate[i]);
  const float s = sigmoid(g);
  const float d = to_f32(dy[i]);
  dup[i] = from_f32<T>(d * g * s);
  dgate[i] = from_f32<T>(d * to_f32(up[i]) * s * (1.0f + g * (1.0f - s)));
}

// n = number of elements.
void launch_gelu_fwd(DType dtype, void* y, const void* x, std::int64_t n, cudaStream_t stream);
void launch_gelu_bwd(DType dtype, void* dx, const void* dy, const void* x, std::int64_t n,
                     cudaStream_t stream);
void launch_swiglu_fwd(DType dtype, void* y, const void* gate, const void* up, std::int64_t n,
                       cudaStream_t stream);
void launch_swiglu_bwd(DType dtype, void* dgate, void* dup, const void* dy, const void* gate,
                       const void* up, std::int64_t n, cudaStream_t stream);

}  // namespace vrambench::cuda
