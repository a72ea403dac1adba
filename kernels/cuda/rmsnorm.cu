// RMSNorm kernels: one thread per row (forward, dx) or per column (dw).
#include "cuda/check.h"
#include "cuda/rmsnorm.h"

namespace vrambench::cuda {
namespace {
template <typename T>
__global__ void rmsnorm_fwd_kernel(T* y, float* rstd, const T* x, const T* w, std::int64_t M,
                                   std::int64_t H, float eps) {
  VB_GRID_STRIDE(row, M) rmsnorm_fwd_body(row, y, rstd, x, w, H, eps);
}
template <typename T>
__global__ void rmsnorm_bwd_dx_kernel(T* dx, const T* dy, const T* x, const T* w, const float* rstd,
                                      std::int64_t M, std::int64_t H) {
  VB_GRID_STRIDE(row, M) rmsnorm_bwd_dx_body(row, dx, dy, x, w, rstd, H);
}
template <typename T>
__global__ void rmsnorm_bwd_dw_kernel(T* dw, const T* dy, const T* x, const float* rstd,
                                      std::int64_t M, std::int64_t H, bool accumulate) {
  VB_GRID_STRIDE(h, H) rmsnorm_bwd_dw_body(h, dw, dy, x, rstd, M, H, accumulate);
}
}  // namespace

void launch_rmsnorm_fwd(DType dtype, void* y, float* rstd, const void* x, const void* w,
                        std::int64_t M, std::int64_t H, float eps, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_fwd_kernel<T><<<grid_for(M, 128), 128, 0, stream>>>(
        static_cast<T*>(y), rstd, static_cast<const T*>(x), static_cast<const T*>(w), M, H, eps);
  });
  VB_CHECK_LAUNCH("rmsnorm_fwd_kernel");
}

void launch_rmsnorm_bwd(DType dtype, void* dx, void* dw, const void* dy, const void* x,
                        const void* w, const float* rstd, std::int64_t M, std::int64_t H,
                        bool accumulate, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_bwd_dx_kernel<T><<<grid_for(M, 128), 128, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x),
        static_cast<const T*>(w), rstd, M, H);
    VB_CHECK_LAUNCH("rmsnorm_bwd_dx_kernel");
    rmsnorm_bwd_dw_kernel<T>
        <<<grid_for(H, 128), 128, 0, stream>>>(static_cast<T*>(dw), static_cast<const T*>(dy),
                                               static_cast<const T*>(x), rstd, M, H, accumulate);
    VB_CHECK_LAUNCH("rmsnorm_bwd_dw_kernel");
  });
}

}  // namespace vrambench::cuda
