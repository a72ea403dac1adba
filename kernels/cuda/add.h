// Element-wise sum c = a + b (residual stream, gradient sums).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

template <typename T>
__host__ __device__ inline void add_body(std::int64_t i, T* c, const T* a, const T* b) {
  c[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

void launch_add(DType dtype, void* c, const void* a, const void* b, std::int64_t n,
                cudaStream_t stream);

}  // namespace vrambench::cuda
