// Softmax kernels (a block per row) and the causal mask.
#include "cuda/attention.h"
#include "cuda/check.h"

namespace vrambench::cuda {
namespace {

template <typename T, typename S>
__global__ void __launch_bounds__(kRowThreads)
    softmax_fwd_kernel(T* probs, const S* scores, std::int64_t rows, std::int64_t cols) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, rows) {
    const float mx = block_max(softmax_max_part(row, lane, lanes, scores, cols), scratch);
    const float sum = block_sum(softmax_sum_part(row, lane, lanes, scores, cols, mx), scratch);
    softmax_fwd_write(row, lane, lanes, probs, scores, cols, mx, sum);
  }
}

template <typename T, typename D>
__global__ void __launch_bounds__(kRowThreads)
    softmax_bwd_kernel(D* dscores, const T* dprobs, const T* probs, std::int64_t rows,
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

void launch_softmax_fwd(DType dtype, void* probs, DType scores_dtype, const void* scores,
                        std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  dispatch_float_pair(dtype, scores_dtype, [&](auto tag, auto scores_tag) {
    using T = decltype(tag);
    using S = decltype(scores_tag);
    softmax_fwd_kernel<T, S><<<row_grid(rows), kRowThreads, 0, stream>>>(
        static_cast<T*>(probs), static_cast<const S*>(scores), rows, cols);
  });
  VB_CHECK_LAUNCH("softmax_fwd_kernel");
}

void launch_softmax_bwd(DType dtype, DType dscores_dtype, void* dscores, const void* dprobs,
                        const void* probs, std::int64_t rows, std::int64_t cols,
                        cudaStream_t stream) {
  dispatch_float_pair(dtype, dscores_dtype, [&](auto tag, auto d_tag) {
    using T = decltype(tag);
    using D = decltype(d_tag);
    softmax_bwd_kernel<T, D><<<row_grid(rows), kRowThreads, 0, stream>>>(
        static_cast<D*>(dscores), static_cast<const T*>(dprobs), static_cast<const T*>(probs), rows,
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
