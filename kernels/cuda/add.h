// Element-wise sum c = a + b (residual stream, gradient sums). b may be of another floating dtype
// than a and c: autocast's fp32 residual stream (and QLoRA's) takes a 16-bit branch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

template <typename T, typename B>
__host__ __device__ inline void add_body(std::int64_t i, T* c, const T* a, const B* b) {
  c[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

// dtype: c's and a's; b_dtype: b's, any floating dtype.
void launch_add(DType dtype, void* c, const void* a, DType b_dtype, const void* b, std::int64_t n,
                cudaStream_t stream);

}  // namespace vrambench::cuda
