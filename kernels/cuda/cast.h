// Element-wise dtype conversion y = x (autocast's casts, .float(), .to()), and its strided form
// over a block of columns: a LoRA adapter's columns of a layer output of another dtype.
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

// Element i of a rows x cols block: y[r, c] = x[r, c] (+ y[r, c] with accumulate) in y's type,
// the sum in fp32; row r of y starts at r * ldy, of x at r * ldx.
template <typename To, typename From>
__host__ __device__ inline void cast_rows_body(std::int64_t i, To* y, std::int64_t ldy,
                                               const From* x, std::int64_t ldx, std::int64_t cols,
                                               bool accumulate) {
  const std::int64_t r = i / cols, c = i % cols;
  To& out = y[r * ldy + c];
  out = from_f32<To>(to_f32(x[r * ldx + c]) + (accumulate ? to_f32(out) : 0.0f));
}

// y (to) from x (from), n elements; both floating-point dtypes.
void launch_cast(DType to, void* y, DType from, const void* x, std::int64_t n, cudaStream_t stream);

// cast_rows_body over a rows x cols block (leading dimensions ldy, ldx >= cols); both floating-
// point dtypes.
void launch_cast_rows(DType to, void* y, std::int64_t ldy, DType from, const void* x,
                      std::int64_t ldx, std::int64_t rows, std::int64_t cols, bool accumulate,
                      cudaStream_t stream);

}  // namespace vrambench::cuda
