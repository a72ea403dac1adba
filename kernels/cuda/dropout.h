// Dropout with a counter-based hash RNG: element i of a mask seeded by `seed` is the same on every
// run and every device, so a recomputed forward reproduces its mask. mask is u8, 1 = kept.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// splitmix64 finaliser of (seed, index) -> uniform float in [0, 1).
__host__ __device__ inline float dropout_uniform(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // top 24 bits
}

__host__ __device__ inline bool dropout_keep(std::uint64_t seed, std::uint64_t index, float p) {
  return dropout_uniform(seed, index) >= p;
}

template <typename T>
__host__ __device__ inline void dropout_fwd_body(std::int64_t i, T* y, std::uint8_t* mask,
                                                 const T* x, float p, std::uint64_t seed) {
  const bool keep = dropout_keep(seed, static_cast<std::uint64_t>(i), p);
  mask[i] = keep ? 1 : 0;
  y[i] = from_f32<T>(keep ? to_f32(x[i]) / (1.0f - p) : 0.0f);
}

template <typename T>
__host__ __device__ inline void dropout_bwd_body(std::int64_t i, T* dx, const T* dy,
                                                 const std::uint8_t* mask, float p) {
  dx[i] = from_f32<T>(mask[i] != 0 ? to_f32(dy[i]) / (1.0f - p) : 0.0f);
}

void launch_dropout_fwd(DType dtype, void* y, std::uint8_t* mask, const void* x, float p,
                        std::uint64_t seed, std::int64_t n, cudaStream_t stream);
void launch_dropout_bwd(DType dtype, void* dx, const void* dy, const std::uint8_t* mask, float p,
                        std::int64_t n, cudaStream_t stream);

}  // namespace vrambench::cuda
