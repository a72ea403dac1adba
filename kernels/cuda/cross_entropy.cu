// Cross-entropy kernels.
#include "cuda/check.h"
#include "cuda/cross_entropy.h"

namespace vrambench::cuda {
namespace {
template <typename T>
__global__ void cross_entropy_lse_kernel(float* lse, const T* logits, std::int64_t M,
                                         std::int64_t V) {
  VB_GRID_STRIDE(row, M) cross_entropy_lse_body(row, lse, logits, V);
}
template <typename T>
__global__ void cross_entropy_loss_kernel(float* loss, const float* lse, const T* logits,
                                          const std::int32_t* targets, std::int64_t M,
                                          std::int64_t V) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    cross_entropy_loss_body(loss, lse, logits, targets, M, V);
}
template <typename T>
__global__ void cross_entropy_bwd_kernel(T* dlogits, const T* logits, const std::int32_t* targets,
                                         const float* lse, std::int64_t M, std::int64_t V) {
  VB_GRID_STRIDE(i, M * V) cross_entropy_bwd_body(i, dlogits, logits, targets, lse, M, V);
}
}  // namespace

void launch_cross_entropy_fwd(DType dtype, float* loss, float* lse, const void* logits,
                              const std::int32_t* targets, std::int64_t M, std::int64_t V,
                              cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_lse_kernel<T>
        <<<grid_for(M, 128), 128, 0, stream>>>(lse, static_cast<const T*>(logits), M, V);
    VB_CHECK_LAUNCH("cross_entropy_lse_kernel");
    cross_entropy_loss_kernel<T>
        <<<1, 1, 0, stream>>>(loss, lse, static_cast<const T*>(logits), targets, M, V);
    VB_CHECK_LAUNCH("cross_entropy_loss_kernel");
  });
}

void launch_cross_entropy_bwd(DType dtype, void* dlogits, const void* logits,
                              const std::int32_t* targets, const float* lse, std::int64_t M,
                              std::int64_t V, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_bwd_kernel<T><<<grid_for(M * V, 256), 256, 0, stream>>>(
        static_cast<T*>(dlogits), static_cast<const T*>(logits), targets, lse, M, V);
  });
  VB_CHECK_LAUNCH("cross_entropy_bwd_kernel");
}

}  // namespace vrambench::cuda
