// GELU (tanh approximation), SwiGLU / GeGLU and soft-capping, forward and backward: element-wise
// bodies and launchers.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/math.h"
#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

template <typename T>
__host__ __device__ inline void gelu_fwd_body(std::int64_t i, T* y, const T* x) {
  y[i] = from_f32<T>(kmath::gelu(to_f32(x[i])));
}
template <typename T>
__host__ __device__ inline void gelu_bwd_body(std::int64_t i, T* dx, const T* dy, const T* x) {
  dx[i] = from_f32<T>(to_f32(dy[i]) * kmath::gelu_grad(to_f32(x[i])));
}
// Element i of y (rows of `width`) reads gate and up (and writes their gradients) at the same row
// and column of rows `ld` apart: ld = width for separate tensors, 2 width for gate|up packed in
// one (gate = the packed pointer, up = it + width).
__host__ __device__ inline std::int64_t gate_index(std::int64_t i, std::int64_t width,
                                                   std::int64_t ld) {
  const std::int64_t row = i / width;
  return row * ld + (i - row * width);
}
template <typename T>
__host__ __device__ inline void swiglu_fwd_body(std::int64_t i, T* y, const T* gate, const T* up,
                                                std::int64_t width, std::int64_t ld,
                                                bool gelu_gate) {
  const std::int64_t j = gate_index(i, width, ld);
  y[i] = from_f32<T>(kmath::swiglu(to_f32(gate[j]), to_f32(up[j]), gelu_gate));
}
template <typename T>
__host__ __device__ inline void swiglu_bwd_body(std::int64_t i, T* dgate, T* dup, const T* dy,
                                                const T* gate, const T* up, std::int64_t width,
                                                std::int64_t ld, bool gelu_gate) {
  const std::int64_t j = gate_index(i, width, ld);
  float dg = 0.0f, du = 0.0f;
  kmath::swiglu_grad(to_f32(dy[i]), to_f32(gate[j]), to_f32(up[j]), &dg, &du, gelu_gate);
  dgate[j] = from_f32<T>(dg);
  dup[j] = from_f32<T>(du);
}
template <typename T>
__host__ __device__ inline void softcap_fwd_body(std::int64_t i, T* y, const T* x, float cap) {
  y[i] = from_f32<T>(kmath::softcap(to_f32(x[i]), cap));
}
template <typename T>
__host__ __device__ inline void softcap_bwd_body(std::int64_t i, T* dx, const T* dy, const T* y,
                                                 float cap) {
  dx[i] = from_f32<T>(kmath::softcap_grad(to_f32(dy[i]), to_f32(y[i]), cap));
}

// n = number of elements.
void launch_gelu_fwd(DType dtype, void* y, const void* x, std::int64_t n, cudaStream_t stream);
void launch_gelu_bwd(DType dtype, void* dx, const void* dy, const void* x, std::int64_t n,
                     cudaStream_t stream);
// y and dy: [rows, width]; gate, up and their gradients: rows `ld` apart (gate_index). gelu_gate:
// GeGLU.
void launch_swiglu_fwd(DType dtype, void* y, const void* gate, const void* up, std::int64_t rows,
                       std::int64_t width, std::int64_t ld, bool gelu_gate, cudaStream_t stream);
void launch_swiglu_bwd(DType dtype, void* dgate, void* dup, const void* dy, const void* gate,
                       const void* up, std::int64_t rows, std::int64_t width, std::int64_t ld,
                       bool gelu_gate, cudaStream_t stream);
void launch_softcap_fwd(DType dtype, void* y, const void* x, std::int64_t n, float cap,
                        cudaStream_t stream);
void launch_softcap_bwd(DType dtype, void* dx, const void* dy, const void* y, std::int64_t n,
                        float cap, cudaStream_t stream);

}  // namespace vrambench::cuda
