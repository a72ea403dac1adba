// Storage types of the CUDA kernels and their conversions to the fp32 the math is done in, shared
// by device code and by the CPU runs of the kernel bodies in tests. f32 = float, f16 = __half,
// bf16 = __nv_bfloat16; conversions round to nearest even.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/dtype.h"

namespace vrambench::cuda {

template <typename T>
__host__ __device__ inline float to_f32(T v);
template <>
__host__ __device__ inline float to_f32<float>(float v) {
  return v;
}
template <>
__host__ __device__ inline float to_f32<__half>(__half v) {
  return __half2float(v);
}
template <>
__host__ __device__ inline float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__host__ __device__ inline T from_f32(float v);
template <>
__host__ __device__ inline float from_f32<float>(float v) {
  return v;
}
template <>
__host__ __device__ inline __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__host__ __device__ inline __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Calls f(T{}) with T the storage type of a floating dtype; throws for u8/i32.
template <typename F>
void dispatch_float(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      return;
    case DType::f16:
      f(__half{});
      return;
    case DType::bf16:
      f(__nv_bfloat16{});
      return;
    default:
      break;
  }
  throw std::invalid_argument("CUDA kernels: dtype " + std::string(dtype_name(dtype)) +
                              " is not a floating storage type");
}

// Calls f(T{}, X{}) with T the storage type of `dtype` and X that of `x_dtype`, which must be
// `dtype` or fp32 (an fp32 input beside 16-bit outputs, as PyTorch upcasts); throws otherwise.
template <typename F>
void dispatch_float_or_f32(DType dtype, DType x_dtype, F&& f) {
  if (x_dtype != dtype && x_dtype != DType::f32)
    throw std::invalid_argument("CUDA kernels: an input of " + std::string(dtype_name(x_dtype)) +
                                " beside " + std::string(dtype_name(dtype)) +
                                " (only the same dtype or fp32)");
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (x_dtype == dtype)
      f(T{}, T{});
    else
      f(T{}, float{});
  });
}

// Grid for a grid-stride loop over n items.
inline unsigned grid_for(std::int64_t n, unsigned block) {
  const std::int64_t blocks = (n + block - 1) / block;
  const std::int64_t cap = 65535LL * 16;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

}  // namespace vrambench::cuda

#if defined(__CUDACC__)
// Grid-stride loop index over [0, n).
#define VB_GRID_STRIDE(i, n)                                                                       \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
#endif
