// Fills a persistent tensor on the GPU with its starting values (kernels/common/init_values.h): the
// same values the CPU reference writes, without generating them on the host and copying them over.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/init_values.h"
#include "core/dtype.h"

namespace vrambench::cuda {

// Element i of `data` (n elements of `dtype`; i32 for token ids) gets kmath::init_value(rule, i).
void launch_init(void* data, DType dtype, std::int64_t n, const kmath::InitRule& rule,
                 cudaStream_t stream);
// Floating `data` (n elements) gets kmath::init_value(rule, first + i) at element i: rows of a
// longer tensor's stream (a quantised module of a packed weight). Throws std::invalid_argument for
// i32 data or a negative first.
void launch_init_offset(void* data, DType dtype, std::int64_t n, const kmath::InitRule& rule,
                        std::int64_t first, cudaStream_t stream);

}  // namespace vrambench::cuda
