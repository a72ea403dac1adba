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

// full (full_n elements) from shard (shard_n > 0): its bytes repeated where the dtypes agree or
// either is not floating (4-bit codes, the flat u8 buffers), converted element by element where
// two floating dtypes differ.
void launch_all_gather(DType full_dtype, void* full, std::int64_t full_n, DType shard_dtype,
                       const void* shard, std::int64_t shard_n, cudaStream_t stream);
// shard (shard_n elements) from the first of full's (full_n), alike.
void launch_reduce_scatter(DType shard_dtype, void* shard, std::int64_t shard_n, DType full_dtype,
                           const void* full, std::int64_t full_n, cudaStream_t stream);

}  // namespace vrambench::cuda
