// RMSNorm kernels: a block per row (forward, dx); dw as a two-stage column sum.
#include "cuda/check.h"
#include "cuda/reduce.h"
#include "cuda/rmsnorm.h"

namespace vrambench::cuda {
namespace {

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_fwd_kernel(T* y, float* rstd, const T* x, const T* w, std::int64_t M, std::int64_t H,
                       float eps) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, M) {
    const float rs =
        rmsnorm_rstd(block_sum(rmsnorm_sq_part(row, lane, lanes, x, H), scratch), H, eps);
    rmsnorm_fwd_write(row, lane, lanes, y, x, w, H, rs);
    if (lane == 0) rstd[row] = rs;
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_bwd_dx_kernel(T* dx, const T* dy, const T* x, const T* w, const float* rstd,
                          std::int64_t M, std::int64_t H) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, M) {
    const float rs = rstd[row];
    const float mean_gx = block_sum(rmsnorm_dx_part(row, lane, lanes, dy, x, w, rs, H), scratch) /
                          static_cast<float>(H);
    rmsnorm_dx_write(row, lane, lanes, dx, dy, x, w, rs, H, mean_gx);
  }
}

template <typename T>
__global__ void rmsnorm_dw_partial_kernel(float* partial, const T* dy, const T* x,
                                          const float* rstd, std::int64_t M, std::int64_t H,
                                          std::int64_t chunk_rows) {
  const std::int64_t h = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (h < H) rmsnorm_dw_partial_body(h, blockIdx.y, partial, dy, x, rstd, M, H, chunk_rows);
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
    rmsnorm_fwd_kernel<T><<<row_grid(M), kRowThreads, 0, stream>>>(
        static_cast<T*>(y), rstd, static_cast<const T*>(x), static_cast<const T*>(w), M, H, eps);
  });
  VB_CHECK_LAUNCH("rmsnorm_fwd_kernel");
}

void launch_rmsnorm_bwd(DType dtype, void* dx, void* dw, const void* dy, const void* x,
                        const void* w, const float* rstd, std::int64_t M, std::int64_t H,
                        bool accumulate, void* workspace, Bytes workspace_bytes,
                        cudaStream_t stream) {
  const ColumnChunks chunks = column_chunks(M, H, 1, workspace != nullptr ? workspace_bytes : 0);
  auto* partial = static_cast<float*>(workspace);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_bwd_dx_kernel<T><<<row_grid(M), kRowThreads, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x),
        static_cast<const T*>(w), rstd, M, H);
    VB_CHECK_LAUNCH("rmsnorm_bwd_dx_kernel");
    if (dw == nullptr) return;  // a frozen norm: dx alone
    if (chunks.count == 1) {
      rmsnorm_bwd_dw_kernel<T><<<grid_for(H, kColumnThreads), kColumnThreads, 0, stream>>>(
          static_cast<T*>(dw), static_cast<const T*>(dy), static_cast<const T*>(x), rstd, M, H,
          accumulate);
      VB_CHECK_LAUNCH("rmsnorm_bwd_dw_kernel");
      return;
    }
    rmsnorm_dw_partial_kernel<T><<<column_grid(H, chunks.count), kColumnThreads, 0, stream>>>(
        partial, static_cast<const T*>(dy), static_cast<const T*>(x), rstd, M, H, chunks.rows);
    VB_CHECK_LAUNCH("rmsnorm_dw_partial_kernel");
  });
  if (dw != nullptr && chunks.count > 1)
    launch_column_finish(dtype, dw, partial, chunks.count, H, accumulate, stream);
}

}  // namespace vrambench::cuda
