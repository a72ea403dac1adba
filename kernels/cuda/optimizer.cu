// Optimizer kernels.
#include "cuda/check.h"
#include "cuda/optimizer.h"

namespace vrambench::cuda {
namespace {
template <typename T>
__global__ void adamw_kernel(T* w, const T* grad, float* m, float* v, float* master, AdamWParams p,
                             std::int64_t n) {
  VB_GRID_STRIDE(i, n) adamw_body(i, w, grad, m, v, master, p);
}
template <typename T>
__global__ void sgd_kernel(T* w, const T* grad, float* momentum, float* master, SgdParams p,
                           std::int64_t n) {
  VB_GRID_STRIDE(i, n) sgd_body(i, w, grad, momentum, master, p);
}
}  // namespace

void launch_adamw(DType dtype, void* w, const void* grad, float* m, float* v, float* master,
                  AdamWParams params, std::int64_t n, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    adamw_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<T*>(w), static_cast<const T*>(grad), m, v, master, params, n);
  });
  VB_CHECK_LAUNCH("adamw_kernel");
}

void launch_sgd(DType dtype, void* w, const void* grad, float* momentum, float* master,
                SgdParams params, std::int64_t n, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    sgd_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<T*>(w), static_cast<const T*>(grad), momentum, master, params, n);
  });
  VB_CHECK_LAUNCH("sgd_kernel");
}

}  // namespace vrambench::cuda
