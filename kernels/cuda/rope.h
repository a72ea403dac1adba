// Rotary position embedding over packed qkv[B,S,(A+2K)*D]: rotates each q and k head by the angle
// of its position (pairs (2i, 2i+1), kmath::rope_angle), copies v. Backward rotates back. The
// input may be of another floating dtype than the output: QLoRA's fp32 q|k|v rotated into the
// attention's 16 bits (and its gradient back).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/math.h"
#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

struct RopeShape {
  std::int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  __host__ __device__ std::int64_t row_width() const { return (heads + 2 * kv_heads) * head_dim; }
  __host__ __device__ std::int64_t elements() const { return batch * seq * row_width(); }
};

// Element i of the output; reads its pair partner.
template <typename T, typename In>
__host__ __device__ inline void rope_body(std::int64_t i, T* out, const In* in, RopeShape s,
                                          bool inverse) {
  const std::int64_t width = s.row_width();
  const std::int64_t col = i % width;
  const std::int64_t pos = (i / width) % s.seq;
  if (col >= (s.heads + s.kv_heads) * s.head_dim) {  // v: copied
    out[i] = from_f32<T>(to_f32(in[i]));
    return;
  }
  const std::int64_t d = col % s.head_dim;
  const std::int64_t first = i - (d & 1);  // element 2*pair of the pair
  float x0 = to_f32(in[first]), x1 = to_f32(in[first + 1]);
  kmath::rope_rotate(&x0, &x1, kmath::rope_angle(pos, d / 2, s.head_dim), inverse);
  out[i] = from_f32<T>((d & 1) != 0 ? x1 : x0);
}

// dtype: the output's; in_dtype: the input's, any floating dtype.
void launch_rope_fwd(DType dtype, void* qkv_rot, DType in_dtype, const void* qkv, RopeShape shape,
                     cudaStream_t stream);
void launch_rope_bwd(DType dtype, void* dqkv, DType in_dtype, const void* dqkv_rot, RopeShape shape,
                     cudaStream_t stream);

}  // namespace vrambench::cuda
