// Dropout with the shared counter-based hash RNG (kmath::keep): element i of a mask seeded by
// `seed` is the same on every run and every device, so a recomputed forward reproduces its mask.
// mask is u8, 1 = kept.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/math.h"
#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// 1 / (1 - p), and 0 when everything is dropped (as the CPU reference).
__host__ __device__ inline float dropout_scale(float p) {
  return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
}

template <typename T>
__host__ __device__ inline void dropout_fwd_body(std::int64_t i, T* y, std::uint8_t* mask,
                                                 const T* x, float p, std::uint64_t seed) {
  const bool keep = kmath::keep(seed, static_cast<std::uint64_t>(i), p);
  mask[i] = keep ? 1 : 0;
  y[i] = from_f32<T>(keep ? to_f32(x[i]) * dropout_scale(p) : 0.0f);
}

template <typename T>
__host__ __device__ inline void dropout_bwd_body(std::int64_t i, T* dx, const T* dy,
                                                 const std::uint8_t* mask, float p) {
  dx[i] = from_f32<T>(mask[i] != 0 ? to_f32(dy[i]) * dropout_scale(p) : 0.0f);
}

void launch_dropout_fwd(DType dtype, void* y, std::uint8_t* mask, const void* x, float p,
                        std::uint64_t seed, std::int64_t n, cudaStream_t stream);
void launch_dropout_bwd(DType dtype, void* dx, const void* dy, const std::uint8_t* mask, float p,
                        std::int64_t n, cudaStream_t stream);

}  // namespace vrambench::cuda
