// Rotary position embedding over packed qkv[B,S,(A+2K)*D]: rotates each q and k head by the angle of
// its position (half-split pairs (d, d + D/2), base 10000), copies v. Backward rotates back.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

struct RopeShape {
  std::int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float base = 10000.0f;
  __host__ __device__ std::int64_t row_width() const { return (heads + 2 * kv_heads) * head_dim; }
  __host__ __device__ std::int64_t elements() const { return batch * seq * row_width(); }
};

// direction +1 forward, -1 backward (the transpose of a rotation is the inverse rotation).
template <typename T>
__host__ __device__ inline void rope_body(std::int64_t i, T* out, const T* in, RopeShape s,
                                          float direction) {
  const std::int64_t width = s.row_width();
  const std::int64_t col = i % width;
  const std::int64_t pos = (i / width) % s.seq;
  if (col >= (s.heads + s.kv_heads) * s.head_dim) {  // v: copied
    out[i] = in[i];
    return;
  }
  const std::int64_t half = s.head_dim / 2;
  const std::int64_t d = col % s.head_dim;
  const std::int64_t j = d < half ? d : d - half;
  const float inv_freq =
      powf(s.base, -2.0f * static_cast<float>(j) / static_cast<float>(s.head_dim));
  const float angle = static_cast<float>(pos) * inv_freq;
  const float c = cosf(angle), sn = direction * sinf(angle);
  const float self = to_f32(in[i]);
  if (d < half) {
    const float partner = to_f32(in[i + half]);
    out[i] = from_f32<T>(self * c - partner * sn);
  } else {
    const float partner = to_f32(in[i - half]);
    out[i] = from_f32<T>(self * c + partner * sn);
  }
}

void launch_rope_fwd(DType dtype, void* qkv_rot, const void* qkv, RopeShape shape,
                     cudaStream_t stream);
void launch_rope_bwd(DType dtype, void* dqkv, const void* dqkv_rot, RopeShape shape,
                     cudaStream_t stream);

}  // namespace vrambench::cuda
