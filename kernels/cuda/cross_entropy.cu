// Cross-entropy kernels: a block per row; the loss summed per block and added atomically.
#include "cuda/check.h"
#include "cuda/cross_entropy.h"
#include "cuda/op_table.h"
#include "cuda/reduce.h"

namespace vrambench::cuda {
namespace {

template <typename T>
__global__ void __launch_bounds__(kVocabThreads)
    cross_entropy_fwd_kernel(float* loss, float* lse, const T* logits, const std::int32_t* targets,
                             std::int64_t M, std::int64_t V) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  float block_loss = 0.0f;  // lane 0's sum over the block's rows
  VB_BLOCK_ROWS(row, M) {
    const float mx = block_max(cross_entropy_max_part(row, lane, lanes, logits, V), scratch);
    const float sum = block_sum(cross_entropy_sum_part(row, lane, lanes, logits, V, mx), scratch);
    if (lane == 0) {
      const float row_lse = mx + logf(sum);
      lse[row] = row_lse;
      block_loss += cross_entropy_row_loss(row, row_lse, logits, targets, V);
    }
  }
  // The mean: each block adds its share into the loss the launcher zeroed.
  if (lane == 0) atomicAdd(loss, block_loss / static_cast<float>(M));
}

template <typename T>
__global__ void __launch_bounds__(kVocabThreads)
    cross_entropy_bwd_kernel(T* dlogits, const T* logits, const std::int32_t* targets,
                             const float* lse, std::int64_t M, std::int64_t V, float scale) {
  VB_BLOCK_ROWS(row, M)
  cross_entropy_bwd_body(row, threadIdx.x, blockDim.x, dlogits, logits, targets, lse, V, scale);
}

}  // namespace

void launch_cross_entropy_fwd(DType dtype, float* loss, float* lse, const void* logits,
                              const std::int32_t* targets, std::int64_t M, std::int64_t V,
                              cudaStream_t stream) {
  VB_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), stream));
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_fwd_kernel<T><<<row_grid(M), kVocabThreads, 0, stream>>>(
        loss, lse, static_cast<const T*>(logits), targets, M, V);
  });
  VB_CHECK_LAUNCH("cross_entropy_fwd_kernel");
}

void launch_cross_entropy_bwd(DType dtype, void* dlogits, const void* logits,
                              const std::int32_t* targets, const float* lse, std::int64_t M,
                              std::int64_t V, float grad_scale, cudaStream_t stream) {
  const float scale = grad_scale / static_cast<float>(M);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_bwd_kernel<T><<<row_grid(M), kVocabThreads, 0, stream>>>(
        static_cast<T*>(dlogits), static_cast<const T*>(logits), targets, lse, M, V, scale);
  });
  VB_CHECK_LAUNCH("cross_entropy_bwd_kernel");
}

}  // namespace vrambench::cuda

namespace vrambench {

// The logits in whichever dtype the head wrote them.
void cuda_run_cross_entropy_fwd(const Operands& a, CudaContext& context) {
  cuda::launch_cross_entropy_fwd(a.in[0].tensor->dtype, a.f32(a.out[0]), a.f32(a.out[1]),
                                 a.in[0].data, a.i32(a.in[1]), rows(a.in[0]), last_dim(a.in[0]),
                                 context.stream());
}

void cuda_run_cross_entropy_bwd(const Operands& a, CudaContext& context) {
  cuda::launch_cross_entropy_bwd(a.dtype(), a.out[0].data, a.in[0].data, a.i32(a.in[1]),
                                 a.f32(a.in[2]), rows(a.in[0]), last_dim(a.in[0]), a.op.grad_scale,
                                 context.stream());
}

}  // namespace vrambench
