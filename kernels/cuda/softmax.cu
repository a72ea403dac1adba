// Softmax kernels (a block per row) and the causal mask.
#include "cuda/check.h"
#include "cuda/softmax.h"

namespace vrambench::cuda {
namespace {

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    softmax_fwd_kernel(T* probs, const T* scores, std::int64_t rows, std::int64_t cols) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, rows) {
    const float mx = block_max(softmax_max_part(row, lane, lanes, scores, cols), scratch);
    const float sum = block_sum(softmax_sum_part(row, lane, lanes, scores, cols, mx), scratch);
    softmax_fwd_write(row, lane, lanes, probs, scores, cols, mx, sum);
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    softmax_bwd_kernel(T* dscores, const T* dprobs, const T* probs, std::int64_t rows,
                       std::int64_t cols) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, rows) {
    const float dot = block_sum(softmax_dot_part(row, lane, lanes, dprobs, probs, cols), scratch);
    softmax_bwd_write(row, lane, lanes, dscores, dprobs, probs, cols, dot);
  }
}

template <typename T>
__global__ void causal_mask_kernel(T* scores, std::int64_t n, std::int64_t seq) {
  VB_GRID_STRIDE(i, n) causal_mask_body(i, scores, seq);
}

}  // namespace

void launch_softmax_fwd(DType dtype, void* probs, const void* scores, std::int64_t rows,
                        std::int64_t cols, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_fwd_kernel<T><<<row_grid(rows), kRowThreads, 0, stream>>>(
        static_cast<T*>(probs), static_cast<const T*>(scores), rows, cols);
  });
  VB_CHECK_LAUNCH("softmax_fwd_kernel");
}

void launch_softmax_bwd(DType dtype, void* dscores, const void* dprobs, const void* probs,
                        std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_bwd_kernel<T><<<row_grid(rows), kRowThreads, 0, stream>>>(
        static_cast<T*>(dscores), static_cast<const T*>(dprobs), static_cast<const T*>(probs), rows,
        cols);
  });
  VB_CHECK_LAUNCH("softmax_bwd_kernel");
}

void launch_causal_mask(DType dtype, void* scores, std::int64_t blocks, std::int64_t seq,
                        cudaStream_t stream) {
  const std::int64_t n = blocks * seq * seq;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    causal_mask_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(static_cast<T*>(scores), n, seq);
  });
  VB_CHECK_LAUNCH("causal_mask_kernel");
}

}  // namespace vrambench::cuda
