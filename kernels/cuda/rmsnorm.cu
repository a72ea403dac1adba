// RMSNorm kernels: a block per row (forward, dx); dw as a two-stage column sum. The q/k norm: a
// block per head row of the packed q|k|v, v copied, dw one pass per column.
#include "cuda/check.h"
#include "cuda/op_table.h"
#include "cuda/reduce.h"
#include "cuda/rmsnorm.h"

namespace vrambench::cuda {
namespace {

// A norm's weight (or its gradient) as the kernels read it, in its own floating dtype.
void require_floating(DType dtype) {
  if (!is_floating(dtype))
    throw std::invalid_argument("CUDA kernels: a norm weight of " + std::string(dtype_name(dtype)) +
                                " is not of a floating dtype");
}
AnyFloats any_floats(const void* p, DType dtype) {
  require_floating(dtype);
  return {p, dtype};
}
AnyFloatsOut any_floats_out(void* p, DType dtype) {
  require_floating(dtype);
  return {p, dtype};
}

template <typename T, typename X>
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_fwd_kernel(T* y, float* rstd, const X* x, AnyFloats w, std::int64_t M, std::int64_t H,
                       float eps, float w_offset) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, M) {
    const float rs =
        rmsnorm_rstd(block_sum(rmsnorm_sq_part(row, lane, lanes, x, H), scratch), H, eps);
    rmsnorm_fwd_write(row, lane, lanes, y, x, w, H, rs, w_offset);
    if (lane == 0) rstd[row] = rs;
  }
}

template <typename T, typename X>
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_bwd_dx_kernel(X* dx, const T* dy, const X* x, AnyFloats w, const float* rstd,
                          std::int64_t M, std::int64_t H, float w_offset) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, M) {
    const float rs = rstd[row];
    const float mean_gx =
        block_sum(rmsnorm_dx_part(row, lane, lanes, dy, x, w, rs, H, w_offset), scratch) /
        static_cast<float>(H);
    rmsnorm_dx_write(row, lane, lanes, dx, dy, x, w, rs, H, mean_gx, w_offset);
  }
}

// The q/k norm: the row's head of the packed tensors, normed as a row of D.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    qk_norm_fwd_kernel(T* y, float* rstd, const T* x, AnyFloats qw, AnyFloats kw, QkNormShape s,
                       float eps, float w_offset) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, s.rows()) {
    const std::int64_t at = s.offset(row);
    const float rs =
        rmsnorm_rstd(block_sum(rmsnorm_sq_part(0, lane, lanes, x + at, s.D), scratch), s.D, eps);
    rmsnorm_fwd_write(0, lane, lanes, y + at, x + at, s.query(row) ? qw : kw, s.D, rs, w_offset);
    if (lane == 0) rstd[row] = rs;
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    qk_norm_bwd_dx_kernel(T* dx, const T* dy, const T* x, AnyFloats qw, AnyFloats kw,
                          const float* rstd, QkNormShape s, float w_offset) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, s.rows()) {
    const std::int64_t at = s.offset(row);
    const AnyFloats w = s.query(row) ? qw : kw;
    const float rs = rstd[row];
    const float mean_gx =
        block_sum(rmsnorm_dx_part(0, lane, lanes, dy + at, x + at, w, rs, s.D, w_offset), scratch) /
        static_cast<float>(s.D);
    rmsnorm_dx_write(0, lane, lanes, dx + at, dy + at, x + at, w, rs, s.D, mean_gx, w_offset);
  }
}

// dst's v part from src's (the q/k norm passes v through, both ways).
template <typename T>
__global__ void qk_norm_copy_v_kernel(T* dst, const T* src, QkNormShape s) {
  const std::int64_t per_token = s.K * s.D;
  VB_GRID_STRIDE(i, s.tokens * per_token) {
    const std::int64_t at = i / per_token * s.width() + (s.A + s.K) * s.D + i % per_token;
    dst[at] = src[at];
  }
}

// Column d of dqw (c < D) or dkw (c >= D) in one pass: a sum over all the tokens and the heads of
// its kind.
template <typename T>
__global__ void qk_norm_dw_kernel(AnyFloatsOut dqw, AnyFloatsOut dkw, const T* dy, const T* x,
                                  const float* rstd, QkNormShape s, bool accumulate) {
  VB_GRID_STRIDE(c, 2 * s.D) {
    const bool query = c < s.D;
    const std::int64_t d = query ? c : c - s.D;
    const float sum = qk_norm_dw_part(c, dy, x, rstd, s, 0, s.tokens);
    const AnyFloatsOut dw = query ? dqw : dkw;
    dw.store(d, sum + (accumulate ? dw[d] : 0.0f));
  }
}

// Stage 1: a block of columns per chunk of tokens (blockIdx.y).
template <typename T>
__global__ void qk_norm_dw_partial_kernel(float* partial, const T* dy, const T* x,
                                          const float* rstd, QkNormShape s,
                                          std::int64_t chunk_tokens, std::int64_t count) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < 2 * s.D)
    qk_norm_dw_partial_body(c, blockIdx.y, partial, dy, x, rstd, s, chunk_tokens, count);
}

template <typename T, typename X>
__global__ void rmsnorm_dw_partial_kernel(float* partial, const T* dy, const X* x,
                                          const float* rstd, std::int64_t M, std::int64_t H,
                                          std::int64_t chunk_rows) {
  const std::int64_t h = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (h < H) rmsnorm_dw_partial_body(h, blockIdx.y, partial, dy, x, rstd, M, H, chunk_rows);
}

template <typename T, typename X>
__global__ void rmsnorm_bwd_dw_kernel(AnyFloatsOut dw, const T* dy, const X* x, const float* rstd,
                                      std::int64_t M, std::int64_t H, bool accumulate) {
  VB_GRID_STRIDE(h, H) rmsnorm_bwd_dw_body(h, dw, dy, x, rstd, M, H, accumulate);
}

}  // namespace

void launch_rmsnorm_fwd(DType dtype, DType x_dtype, DType w_dtype, void* y, float* rstd,
                        const void* x, const void* w, std::int64_t M, std::int64_t H, float eps,
                        float w_offset, cudaStream_t stream) {
  dispatch_float_pair(dtype, x_dtype, [&](auto tag, auto x_tag) {
    using T = decltype(tag);
    using X = decltype(x_tag);
    rmsnorm_fwd_kernel<T, X><<<row_grid(M), kRowThreads, 0, stream>>>(
        static_cast<T*>(y), rstd, static_cast<const X*>(x), any_floats(w, w_dtype), M, H, eps,
        w_offset);
  });
  VB_CHECK_LAUNCH("rmsnorm_fwd_kernel");
}

void launch_rmsnorm_bwd(DType dtype, DType x_dtype, DType w_dtype, void* dx, void* dw,
                        const void* dy, const void* x, const void* w, const float* rstd,
                        std::int64_t M, std::int64_t H, float w_offset, bool accumulate,
                        void* workspace, Bytes workspace_bytes, cudaStream_t stream) {
  const ColumnChunks chunks = column_chunks(M, H, 1, workspace != nullptr ? workspace_bytes : 0);
  auto* partial = static_cast<float*>(workspace);
  dispatch_float_pair(dtype, x_dtype, [&](auto tag, auto x_tag) {
    using T = decltype(tag);
    using X = decltype(x_tag);
    rmsnorm_bwd_dx_kernel<T, X><<<row_grid(M), kRowThreads, 0, stream>>>(
        static_cast<X*>(dx), static_cast<const T*>(dy), static_cast<const X*>(x),
        any_floats(w, w_dtype), rstd, M, H, w_offset);
    VB_CHECK_LAUNCH("rmsnorm_bwd_dx_kernel");
    if (dw == nullptr) return;  // a frozen norm: dx alone
    if (chunks.count == 1) {
      rmsnorm_bwd_dw_kernel<T, X><<<grid_for(H, kColumnThreads), kColumnThreads, 0, stream>>>(
          any_floats_out(dw, w_dtype), static_cast<const T*>(dy), static_cast<const X*>(x), rstd, M,
          H, accumulate);
      VB_CHECK_LAUNCH("rmsnorm_bwd_dw_kernel");
      return;
    }
    rmsnorm_dw_partial_kernel<T, X><<<column_grid(H, chunks.count), kColumnThreads, 0, stream>>>(
        partial, static_cast<const T*>(dy), static_cast<const X*>(x), rstd, M, H, chunks.rows);
    VB_CHECK_LAUNCH("rmsnorm_dw_partial_kernel");
  });
  if (dw != nullptr && chunks.count > 1)
    launch_column_finish(w_dtype, dw, partial, chunks.count, H, accumulate, stream);
}

void launch_qk_norm_fwd(DType dtype, DType w_dtype, void* y, float* rstd, const void* qkv,
                        const void* qw, const void* kw, const QkNormShape& s, float eps,
                        float w_offset, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    qk_norm_fwd_kernel<T><<<row_grid(s.rows()), kRowThreads, 0, stream>>>(
        static_cast<T*>(y), rstd, static_cast<const T*>(qkv), any_floats(qw, w_dtype),
        any_floats(kw, w_dtype), s, eps, w_offset);
    VB_CHECK_LAUNCH("qk_norm_fwd_kernel");
    qk_norm_copy_v_kernel<T>
        <<<grid_for(s.tokens * s.K * s.D, kColumnThreads), kColumnThreads, 0, stream>>>(
            static_cast<T*>(y), static_cast<const T*>(qkv), s);
    VB_CHECK_LAUNCH("qk_norm_copy_v_kernel");
  });
}

void launch_qk_norm_bwd(DType dtype, DType w_dtype, void* dqkv, void* dqw, void* dkw,
                        const void* dy, const void* qkv, const void* qw, const void* kw,
                        const float* rstd, const QkNormShape& s, float w_offset, bool accumulate,
                        void* workspace, Bytes workspace_bytes, cudaStream_t stream) {
  const ColumnChunks chunks =
      column_chunks(s.tokens, s.D, 2, workspace != nullptr ? workspace_bytes : 0);
  auto* partial = static_cast<float*>(workspace);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    qk_norm_bwd_dx_kernel<T><<<row_grid(s.rows()), kRowThreads, 0, stream>>>(
        static_cast<T*>(dqkv), static_cast<const T*>(dy), static_cast<const T*>(qkv),
        any_floats(qw, w_dtype), any_floats(kw, w_dtype), rstd, s, w_offset);
    VB_CHECK_LAUNCH("qk_norm_bwd_dx_kernel");
    qk_norm_copy_v_kernel<T>
        <<<grid_for(s.tokens * s.K * s.D, kColumnThreads), kColumnThreads, 0, stream>>>(
            static_cast<T*>(dqkv), static_cast<const T*>(dy), s);
    VB_CHECK_LAUNCH("qk_norm_copy_v_kernel");
    if (dqw == nullptr) return;  // frozen norms: dqkv alone
    if (chunks.count == 1) {
      qk_norm_dw_kernel<T><<<grid_for(2 * s.D, kColumnThreads), kColumnThreads, 0, stream>>>(
          any_floats_out(dqw, w_dtype), any_floats_out(dkw, w_dtype), static_cast<const T*>(dy),
          static_cast<const T*>(qkv), rstd, s, accumulate);
      VB_CHECK_LAUNCH("qk_norm_dw_kernel");
      return;
    }
    qk_norm_dw_partial_kernel<T><<<column_grid(2 * s.D, chunks.count), kColumnThreads, 0, stream>>>(
        partial, static_cast<const T*>(dy), static_cast<const T*>(qkv), rstd, s, chunks.rows,
        chunks.count);
    VB_CHECK_LAUNCH("qk_norm_dw_partial_kernel");
  });
  if (dqw == nullptr || chunks.count == 1) return;
  require_floating(w_dtype);
  launch_column_finish(w_dtype, dqw, partial, chunks.count, s.D, accumulate, stream);
  launch_column_finish(w_dtype, dkw, partial + chunks.count * s.D, chunks.count, s.D, accumulate,
                       stream);
}

}  // namespace vrambench::cuda

namespace vrambench {
namespace {

cuda::QkNormShape qk_norm_shape(const Operands& a) {
  const QkvShape s = attention_shape(a);
  return {s.batch * s.seq, s.heads, s.kv_heads, s.head_dim};
}

}  // namespace

// x and w may be of other dtypes than y (LlamaRMSNorm's fp32 input, fp32 norm weights).
void cuda_run_rmsnorm_fwd(const Operands& a, CudaContext& context) {
  cuda::launch_rmsnorm_fwd(a.dtype(), a.in[0].tensor->dtype, a.in[1].tensor->dtype, a.out[0].data,
                           a.f32(a.out[1]), a.in[0].data, a.in[1].data, rows(a.in[0]),
                           last_dim(a.in[0]), a.op.eps, a.op.norm_offset, context.stream());
}

// dy's dtype (the op's), x's (and dx's) and w's (and dw's); a frozen norm writes dx alone.
void cuda_run_rmsnorm_bwd(const Operands& a, CudaContext& context) {
  const bool dw = a.out.size() == 2;
  cuda::launch_rmsnorm_bwd(a.dtype(), a.in[1].tensor->dtype, a.in[2].tensor->dtype, a.out[0].data,
                           dw ? a.out[1].data : nullptr, a.in[0].data, a.in[1].data, a.in[2].data,
                           a.f32(a.in[3]), rows(a.in[1]), last_dim(a.in[1]), a.op.norm_offset,
                           dw && a.accumulates(a.out[1]), a.workspace, a.workspace_bytes,
                           context.stream());
}

// The weights may be of another dtype (autocast's fp32 model).
void cuda_run_qk_norm_fwd(const Operands& a, CudaContext& context) {
  cuda::launch_qk_norm_fwd(a.dtype(), a.in[1].tensor->dtype, a.out[0].data, a.f32(a.out[1]),
                           a.in[0].data, a.in[1].data, a.in[2].data, qk_norm_shape(a), a.op.eps,
                           a.op.norm_offset, context.stream());
}

// Frozen norms write dqkv alone.
void cuda_run_qk_norm_bwd(const Operands& a, CudaContext& context) {
  const bool dw = a.out.size() == 3;
  cuda::launch_qk_norm_bwd(a.dtype(), a.in[2].tensor->dtype, a.out[0].data,
                           dw ? a.out[1].data : nullptr, dw ? a.out[2].data : nullptr, a.in[0].data,
                           a.in[1].data, a.in[2].data, a.in[3].data, a.f32(a.in[4]),
                           qk_norm_shape(a), a.op.norm_offset, dw && a.accumulates(a.out[1]),
                           a.workspace, a.workspace_bytes, context.stream());
}

}  // namespace vrambench
