// LayerNorm kernels: a block per row (forward, dx); dw and db as two-stage column sums.
#include "cuda/check.h"
#include "cuda/layernorm.h"
#include "cuda/op_table.h"
#include "cuda/reduce.h"

namespace vrambench::cuda {
namespace {

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_fwd_kernel(T* y, float* mean, float* rstd, const T* x, const T* w, const T* b,
                         std::int64_t M, std::int64_t H, float eps) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, M) {
    const float mu =
        block_sum(layernorm_sum_part(row, lane, lanes, x, H), scratch) / static_cast<float>(H);
    const float rs =
        layernorm_rstd(block_sum(layernorm_var_part(row, lane, lanes, x, H, mu), scratch), H, eps);
    layernorm_fwd_write(row, lane, lanes, y, x, w, b, H, mu, rs);
    if (lane == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_bwd_dx_kernel(T* dx, const T* dy, const T* x, const T* w, const float* mean,
                            const float* rstd, std::int64_t M, std::int64_t H) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, M) {
    const float mu = mean[row], rs = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    layernorm_dx_parts(row, lane, lanes, dy, x, w, mu, rs, H, &sum_g, &sum_gx);
    const float mean_g = block_sum(sum_g, scratch) / static_cast<float>(H);
    const float mean_gx = block_sum(sum_gx, scratch) / static_cast<float>(H);
    layernorm_dx_write(row, lane, lanes, dx, dy, x, w, mu, rs, H, mean_g, mean_gx);
  }
}

template <typename T>
__global__ void layernorm_dw_partial_kernel(float* partial, const T* dy, const T* x,
                                            const float* mean, const float* rstd, std::int64_t M,
                                            std::int64_t H, std::int64_t chunk_rows,
                                            std::int64_t chunks, bool with_bias) {
  const std::int64_t h = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (h < H)
    layernorm_dw_partial_body(h, blockIdx.y, partial, dy, x, mean, rstd, M, H, chunk_rows, chunks,
                              with_bias);
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
    layernorm_fwd_kernel<T><<<row_grid(M), kRowThreads, 0, stream>>>(
        static_cast<T*>(y), mean, rstd, static_cast<const T*>(x), static_cast<const T*>(w),
        static_cast<const T*>(b), M, H, eps);
  });
  VB_CHECK_LAUNCH("layernorm_fwd_kernel");
}

void launch_layernorm_bwd(DType dtype, void* dx, void* dw, void* db, const void* dy, const void* x,
                          const void* w, const float* mean, const float* rstd, std::int64_t M,
                          std::int64_t H, bool accumulate, void* workspace, Bytes workspace_bytes,
                          cudaStream_t stream) {
  const bool with_bias = db != nullptr;
  const ColumnChunks chunks =
      column_chunks(M, H, with_bias ? 2 : 1, workspace != nullptr ? workspace_bytes : 0);
  auto* partial = static_cast<float*>(workspace);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    layernorm_bwd_dx_kernel<T><<<row_grid(M), kRowThreads, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x),
        static_cast<const T*>(w), mean, rstd, M, H);
    VB_CHECK_LAUNCH("layernorm_bwd_dx_kernel");
    if (dw == nullptr) return;  // a frozen norm: dx alone
    if (chunks.count == 1) {
      layernorm_bwd_dw_kernel<T><<<grid_for(H, kColumnThreads), kColumnThreads, 0, stream>>>(
          static_cast<T*>(dw), static_cast<T*>(db), static_cast<const T*>(dy),
          static_cast<const T*>(x), mean, rstd, M, H, accumulate);
      VB_CHECK_LAUNCH("layernorm_bwd_dw_kernel");
      return;
    }
    layernorm_dw_partial_kernel<T><<<column_grid(H, chunks.count), kColumnThreads, 0, stream>>>(
        partial, static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, M, H, chunks.rows,
        chunks.count, with_bias);
    VB_CHECK_LAUNCH("layernorm_dw_partial_kernel");
  });
  if (dw == nullptr || chunks.count == 1) return;
  launch_column_finish(dtype, dw, partial, chunks.count, H, accumulate, stream);
  if (with_bias)
    launch_column_finish(dtype, db, partial + chunks.count * H, chunks.count, H, accumulate,
                         stream);
}

}  // namespace vrambench::cuda

namespace vrambench {

void cuda_run_layernorm_fwd(const Operands& a, CudaContext& context) {
  cuda::launch_layernorm_fwd(a.dtype(), a.out[0].data, a.f32(a.out[1]), a.f32(a.out[2]),
                             a.in[0].data, a.in[1].data, a.in.size() == 3 ? a.in[2].data : nullptr,
                             rows(a.in[0]), last_dim(a.in[0]), a.op.eps, context.stream());
}

// A frozen norm (fine-tuning) writes dx alone.
void cuda_run_layernorm_bwd(const Operands& a, CudaContext& context) {
  cuda::launch_layernorm_bwd(a.dtype(), a.out[0].data, a.out.size() >= 2 ? a.out[1].data : nullptr,
                             a.out.size() == 3 ? a.out[2].data : nullptr, a.in[0].data,
                             a.in[1].data, a.in[2].data, a.f32(a.in[3]), a.f32(a.in[4]),
                             rows(a.in[1]), last_dim(a.in[1]),
                             a.out.size() >= 2 && a.accumulates(a.out[1]), a.workspace,
                             a.workspace_bytes, context.stream());
}

}  // namespace vrambench
