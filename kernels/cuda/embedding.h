// Token (+ learned position) embedding: forward gathers rows, backward scatters gradient rows.
// The backward runs one thread per hidden column looping over tokens, so it needs no atomics and
// gives the same sums on every run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// x[m, h] = wte[tokens[m], h] + wpe[m % S, h]; i over M*H. wpe may be null (no learned positions).
template <typename T>
__host__ __device__ inline void embedding_fwd_body(std::int64_t i, T* x, const std::int32_t* tokens,
                                                   const T* wte, const T* wpe, std::int64_t seq,
                                                   std::int64_t hidden) {
  const std::int64_t m = i / hidden, h = i % hidden;
  float v = to_f32(wte[static_cast<std::int64_t>(tokens[m]) * hidden + h]);
  if (wpe != nullptr) v += to_f32(wpe[(m % seq) * hidden + h]);
  x[i] = from_f32<T>(v);
}

// Column h of dwte (and dwpe): adds dx[m, h] into the row of each token (position). The outputs
// must hold zeros, or the gradient to accumulate into.
template <typename T>
__host__ __device__ inline void embedding_bwd_body(std::int64_t h, T* dwte, T* dwpe, const T* dx,
                                                   const std::int32_t* tokens, std::int64_t rows,
                                                   std::int64_t seq, std::int64_t hidden) {
  for (std::int64_t m = 0; m < rows; ++m) {
    const float g = to_f32(dx[m * hidden + h]);
    T& wt = dwte[static_cast<std::int64_t>(tokens[m]) * hidden + h];
    wt = from_f32<T>(to_f32(wt) + g);
    if (dwpe != nullptr) {
      T& wp = dwpe[(m % seq) * hidden + h];
      wp = from_f32<T>(to_f32(wp) + g);
    }
  }
}

// rows = B*S. vocab and positions size the gradients (zeroed first unless accumulate).
void launch_embedding_fwd(DType dtype, void* x, const std::int32_t* tokens, const void* wte,
                          const void* wpe, std::int64_t rows, std::int64_t seq, std::int64_t hidden,
                          cudaStream_t stream);
void launch_embedding_bwd(DType dtype, void* dwte, void* dwpe, const void* dx,
                          const std::int32_t* tokens, std::int64_t rows, std::int64_t seq,
                          std::int64_t hidden, std::int64_t vocab, std::int64_t positions,
                          bool accumulate, cudaStream_t stream);

}  // namespace vrambench::cuda
