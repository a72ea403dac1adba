// The collectives of one rank's step (program/shard.h), rehearsed on one device: all_gather
// repeats the rank's shard through the full tensor, reduce_scatter keeps the rank's rows of its
// own full tensor.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// Element i of the full tensor from a shard of `shard_n` elements of another floating type.
template <typename To, typename From>
__host__ __device__ inline void gather_body(std::int64_t i, To* full, const From* shard,
                                            std::int64_t shard_n) {
  full[i] = from_f32<To>(to_f32(shard[i % shard_n]));
}

// A copy of bytes where the dtypes agree or either is not floating (4-bit codes, the flat u8
// buffers): `to_bytes` of `to` filled with `from_bytes` (> 0) of `from`, repeated.
bool copies_bytes(DType a, DType b);
void launch_repeat_bytes(void* to, std::int64_t to_bytes, const void* from, std::int64_t from_bytes,
                         cudaStream_t stream);
// full (full_n elements) from a shard of shard_n > 0 elements of another floating dtype,
// converted element by element (gather_body).
void launch_gather_cast(DType full_dtype, void* full, std::int64_t full_n, DType shard_dtype,
                        const void* shard, std::int64_t shard_n, cudaStream_t stream);

}  // namespace vrambench::cuda
