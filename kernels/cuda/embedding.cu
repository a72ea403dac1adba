// Embedding kernels.
#include "cuda/check.h"
#include "cuda/embedding.h"

namespace vrambench::cuda {
namespace {
template <typename T>
__global__ void embedding_fwd_kernel(T* x, const std::int32_t* tokens, const T* wte, const T* wpe,
                                     std::int64_t n, std::int64_t seq, std::int64_t hidden) {
  VB_GRID_STRIDE(i, n) embedding_fwd_body(i, x, tokens, wte, wpe, seq, hidden);
}
template <typename T>
__global__ void embedding_bwd_kernel(T* dwte, T* dwpe, const T* dx, const std::int32_t* tokens,
                                     std::int64_t rows, std::int64_t seq, std::int64_t hidden) {
  VB_GRID_STRIDE(h, hidden) embedding_bwd_body(h, dwte, dwpe, dx, tokens, rows, seq, hidden);
}
}  // namespace

void launch_embedding_fwd(DType dtype, void* x, const std::int32_t* tokens, const void* wte,
                          const void* wpe, std::int64_t rows, std::int64_t seq, std::int64_t hidden,
                          cudaStream_t stream) {
  const std::int64_t n = rows * hidden;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    embedding_fwd_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<T*>(x), tokens, static_cast<const T*>(wte), static_cast<const T*>(wpe), n, seq,
        hidden);
  });
  VB_CHECK_LAUNCH("embedding_fwd_kernel");
}

void launch_embedding_bwd(DType dtype, void* dwte, void* dwpe, const void* dx,
                          const std::int32_t* tokens, std::int64_t rows, std::int64_t seq,
                          std::int64_t hidden, std::int64_t vocab, std::int64_t positions,
                          bool accumulate, cudaStream_t stream) {
  const auto es = static_cast<std::size_t>(dtype_size(dtype));
  if (!accumulate) {
    VB_CUDA_CHECK(cudaMemsetAsync(dwte, 0, es * static_cast<std::size_t>(vocab * hidden), stream));
    if (dwpe != nullptr)
      VB_CUDA_CHECK(
          cudaMemsetAsync(dwpe, 0, es * static_cast<std::size_t>(positions * hidden), stream));
  }
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    embedding_bwd_kernel<T><<<grid_for(hidden, 128), 128, 0, stream>>>(
        static_cast<T*>(dwte), static_cast<T*>(dwpe), static_cast<const T*>(dx), tokens, rows, seq,
        hidden);
  });
  VB_CHECK_LAUNCH("embedding_bwd_kernel");
}

}  // namespace vrambench::cuda
