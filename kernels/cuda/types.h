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

#include "common/math.h"
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

// Calls f(T{}, X{}) with T the storage type of `dtype` and X that of `x_dtype`: an op that reads
// (or writes) one operand in a floating dtype of its own beside the dtype it computes in, as the
// hf step does where PyTorch mixes them (LlamaRMSNorm's fp32 input, autocast's fp32 residual,
// QLoRA's fp32 stream, PEFT's fp32 adapters over a 16-bit base). Throws for u8/i32.
template <typename F>
void dispatch_float_pair(DType dtype, DType x_dtype, F&& f) {
  dispatch_float(dtype,
                 [&](auto tag) { dispatch_float(x_dtype, [&](auto x_tag) { f(tag, x_tag); }); });
}

// A small operand read (AnyFloats) or written (AnyFloatsOut) in whichever floating dtype it is
// stored in: a norm's weight and its gradient, which the hf step may keep in fp32 beside 16-bit
// activations (prepare_model_for_kbit_training, autocast's fp32 model). Each access goes through
// kmath's load and store by DType, the path the cpu reference reads every tensor by, branching on
// the dtype alike in every thread; the kernels stay templated on the activations' types alone.
struct AnyFloats {
  const void* p = nullptr;
  DType dtype = DType::f32;
  __host__ __device__ float operator[](std::int64_t i) const { return kmath::load(p, dtype, i); }
};
struct AnyFloatsOut {
  void* p = nullptr;
  DType dtype = DType::f32;
  __host__ __device__ float operator[](std::int64_t i) const { return kmath::load(p, dtype, i); }
  __host__ __device__ void store(std::int64_t i, float v) const { kmath::store(p, dtype, i, v); }
};
// Element i of `out` = v: a typed pointer's, or an AnyFloatsOut's in its dtype.
template <typename T>
__host__ __device__ inline void store_f32(T* out, std::int64_t i, float v) {
  out[i] = from_f32<T>(v);
}
__host__ __device__ inline void store_f32(const AnyFloatsOut& out, std::int64_t i, float v) {
  out.store(i, v);
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
