// Element-wise dtype conversion y = x (autocast's casts, .float(), .to()).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

template <typename To, typename From>
__host__ __device__ inline void cast_body(std::int64_t i, To* y, const From* x) {
  y[i] = from_f32<To>(to_f32(x[i]));
}

// y (to) from x (from), n elements; both floating-point dtypes.
void launch_cast(DType to, void* y, DType from, const void* x, std::int64_t n, cudaStream_t stream);

}  // namespace vrambench::cuda
