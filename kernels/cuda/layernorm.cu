// LayerNorm kernels: one thread per row (forward, dx) or per column (dw, db).
#include "cuda/check.h"
#include "cuda/layernorm.h"

namespace vrambench::cuda {
namespace {
template <typename T>
__global__ void layernorm_fwd_kernel(T* y, float* mean, float* rstd, const T* x, const T* w,
                                     const T* b, std::int64_t M, std::int64_t H, float eps) {
  VB_GRID_STRIDE(row, M) layernorm_fwd_body(row, y, mean, rstd, x, w, b, H, eps);
}
template <typename T>
__global__ void layernorm_bwd_dx_kernel(T* dx, const T* dy, const T* x, const T* w,
                                        const float* mean, const float* rstd, std::int64_t M,
                                        std::int64_t H) {
  VB_GRID_STRIDE(row, M) layernorm_bwd_dx_body(row, dx, dy, x, w, mean, rstd, H);
}
template <typename T>
__global__ void layernorm_bwd_dw_kernel(T* dw, T* db, const T* dy, const T* x, const float* mean,
                                        const float* rstd, std::int64_t M, std::int64_t H,
                                        bool accumulate) {
  VB_GRID_STRIDE(h, H) layernorm_bwd_dw_body(h, dw, db, dy, x, mean, rstd, M, H, accumulate);
}
}  // namespace

void launch_layernorm_fwd(DType dtype, void* y, float* mean, float* rstd, const void* x,
                          const void* w, const void* b, std::int64_t M, std::int64_t H, float eps,
                          cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    layernorm_fwd_kernel<T><<<grid_for(M, 128), 128, 0, stream>>>(
        static_cast<T*>(y), mean, rstd, static_cast<const T*>(x), static_cast<const T*>(w),
        static_cast<const T*>(b), M, H, eps);
  });
  VB_CHECK_LAUNCH("layernorm_fwd_kernel");
}

void launch_layernorm_bwd(DType dtype, void* dx, void* dw, void* db, const void* dy, const void* x,
                          const void* w, const float* mean, const float* rstd, std::int64_t M,
                          std::int64_t H, bool accumulate, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    layernorm_bwd_dx_kernel<T><<<grid_for(M, 128), 128, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x),
        static_cast<const T*>(w), mean, rstd, M, H);
    VB_CHECK_LAUNCH("layernorm_bwd_dx_kernel");
    layernorm_bwd_dw_kernel<T><<<grid_for(H, 128), 128, 0, stream>>>(
        static_cast<T*>(dw), static_cast<T*>(db), static_cast<const T*>(dy),
        static_cast<const T*>(x), mean, rstd, M, H, accumulate);
    VB_CHECK_LAUNCH("layernorm_bwd_dw_kernel");
  });
}

}  // namespace vrambench::cuda
