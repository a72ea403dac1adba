// RMSNorm over the last dimension: y = x * rstd * (w_offset + w) with rstd = 1/sqrt(mean(x^2) +
// eps) saved (fp32) per row (w_offset 1: Gemma's (1 + w)); backward gives dx per row and dw per
// column. The q/k norm (Qwen3, Gemma 3) is the same per query and key head of a packed q|k|v row.
// As LayerNorm (cuda/layernorm.h): a block of kRowThreads per row whose thread `lane` of `lanes`
// owns columns lane, lane + lanes, ...; dw a two-stage column sum through fp32 partials in the GEMM
// workspace. x and dx (type X) may be of another floating dtype than y and dy (type T):
// transformers' LlamaRMSNorm upcasts its input, which the hf step keeps in fp32. The weights (type
// W: a typed pointer, or AnyFloats in the kernels) and their gradients may be of a third:
// prepare_model_for_kbit_training and autocast keep them in fp32.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/units.h"
#include "cuda/reduce.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// Lane's part of sum_h x[row, h]^2.
template <typename T>
__host__ __device__ inline float rmsnorm_sq_part(std::int64_t row, std::int64_t lane,
                                                 std::int64_t lanes, const T* x, std::int64_t H) {
  const T* xr = x + row * H;
  float sum = 0.0f;
  for (std::int64_t h = lane; h < H; h += lanes) sum += to_f32(xr[h]) * to_f32(xr[h]);
  return sum;
}
__host__ __device__ inline float rmsnorm_rstd(float sq_sum, std::int64_t H, float eps) {
  return 1.0f / sqrtf(sq_sum / static_cast<float>(H) + eps);
}
// y[row, h] = x * rstd * (w_offset + w) over the lane's columns.
template <typename T, typename X, typename W>
__host__ __device__ inline void rmsnorm_fwd_write(std::int64_t row, std::int64_t lane,
                                                  std::int64_t lanes, T* y, const X* x, W w,
                                                  std::int64_t H, float rstd, float w_offset) {
  const X* xr = x + row * H;
  T* yr = y + row * H;
  for (std::int64_t h = lane; h < H; h += lanes)
    yr[h] = from_f32<T>(to_f32(xr[h]) * rstd * (w_offset + to_f32(w[h])));
}

// Lane's part of sum_h g * x * rstd with g = dy * (w_offset + w).
template <typename T, typename X, typename W>
__host__ __device__ inline float rmsnorm_dx_part(std::int64_t row, std::int64_t lane,
                                                 std::int64_t lanes, const T* dy, const X* x, W w,
                                                 float rstd, std::int64_t H, float w_offset) {
  const X* xr = x + row * H;
  const T* dyr = dy + row * H;
  float sum = 0.0f;
  for (std::int64_t h = lane; h < H; h += lanes)
    sum += to_f32(dyr[h]) * (w_offset + to_f32(w[h])) * to_f32(xr[h]) * rstd;
  return sum;
}
// dx = rstd * (g - x * rstd * mean_h (g x rstd)) over the lane's columns.
template <typename T, typename X, typename W>
__host__ __device__ inline void rmsnorm_dx_write(std::int64_t row, std::int64_t lane,
                                                 std::int64_t lanes, X* dx, const T* dy, const X* x,
                                                 W w, float rstd, std::int64_t H, float mean_gx,
                                                 float w_offset) {
  const X* xr = x + row * H;
  const T* dyr = dy + row * H;
  X* dxr = dx + row * H;
  for (std::int64_t h = lane; h < H; h += lanes) {
    const float g = to_f32(dyr[h]) * (w_offset + to_f32(w[h]));
    dxr[h] = from_f32<X>(rstd * (g - to_f32(xr[h]) * rstd * mean_gx));
  }
}

// Stage 1: sum over rows [chunk * chunk_rows, ...) of dy * x * rstd into partial[chunk, h].
template <typename T, typename X>
__host__ __device__ inline void rmsnorm_dw_partial_body(std::int64_t h, std::int64_t chunk,
                                                        float* partial, const T* dy, const X* x,
                                                        const float* rstd, std::int64_t M,
                                                        std::int64_t H, std::int64_t chunk_rows) {
  const std::int64_t begin = chunk * chunk_rows;
  const std::int64_t end = begin + chunk_rows < M ? begin + chunk_rows : M;
  float sw = 0.0f;
  for (std::int64_t m = begin; m < end; ++m)
    sw += to_f32(dy[m * H + h]) * to_f32(x[m * H + h]) * rstd[m];
  partial[chunk * H + h] = sw;
}

// One pass, without partials: column h over all rows, added to dw when accumulate. DW: a typed
// pointer or an AnyFloatsOut.
template <typename T, typename X, typename DW>
__host__ __device__ inline void rmsnorm_bwd_dw_body(std::int64_t h, DW dw, const T* dy, const X* x,
                                                    const float* rstd, std::int64_t M,
                                                    std::int64_t H, bool accumulate) {
  float sw = 0.0f;
  for (std::int64_t m = 0; m < M; ++m) sw += to_f32(dy[m * H + h]) * to_f32(x[m * H + h]) * rstd[m];
  store_f32(dw, h, sw + (accumulate ? to_f32(dw[h]) : 0.0f));
}

// The q|k|v row of token t: A query heads, K key heads, K value heads of D columns each. Row r of
// the q/k norm is head r % (A + K) of token r / (A + K); qkv_head_offset gives where it starts.
struct QkNormShape {
  std::int64_t tokens = 0, A = 0, K = 0, D = 0;
  __host__ __device__ std::int64_t rows() const { return tokens * (A + K); }
  __host__ __device__ std::int64_t width() const { return (A + 2 * K) * D; }
  __host__ __device__ std::int64_t offset(std::int64_t row) const {
    return row / (A + K) * width() + row % (A + K) * D;
  }
  __host__ __device__ bool query(std::int64_t row) const { return row % (A + K) < A; }
};

// Column c of the q/k norm weights' gradients (c < D: dq_w's column c, else dk_w's c - D): the
// sum of dy * x * rstd over tokens [t_begin, t_end) and the heads of its kind.
template <typename T>
__host__ __device__ inline float qk_norm_dw_part(std::int64_t c, const T* dy, const T* x,
                                                 const float* rstd, const QkNormShape& s,
                                                 std::int64_t t_begin, std::int64_t t_end) {
  const bool query = c < s.D;
  const std::int64_t d = query ? c : c - s.D;
  const std::int64_t first = query ? 0 : s.A, heads = query ? s.A : s.K;
  float sum = 0.0f;
  for (std::int64_t t = t_begin; t < t_end; ++t)
    for (std::int64_t h = first; h < first + heads; ++h) {
      const std::int64_t row = t * (s.A + s.K) + h;
      const std::int64_t at = s.offset(row) + d;
      sum += to_f32(dy[at]) * to_f32(x[at]) * rstd[row];
    }
  return sum;
}
// Stage 1 of the two-stage sum (cuda/reduce.h): column c over the tokens of chunk `chunk` into
// partial: dq_w's partials [count, D] first, then dk_w's [count, D].
template <typename T>
__host__ __device__ inline void qk_norm_dw_partial_body(std::int64_t c, std::int64_t chunk,
                                                        float* partial, const T* dy, const T* x,
                                                        const float* rstd, const QkNormShape& s,
                                                        std::int64_t chunk_tokens,
                                                        std::int64_t count) {
  const std::int64_t begin = chunk * chunk_tokens;
  const std::int64_t end = begin + chunk_tokens < s.tokens ? begin + chunk_tokens : s.tokens;
  const bool query = c < s.D;
  partial[(query ? 0 : count * s.D) + chunk * s.D + (query ? c : c - s.D)] =
      qk_norm_dw_part(c, dy, x, rstd, s, begin, end);
}

// dtype: y's; x_dtype: x's; w_dtype: w's; each any floating dtype.
void launch_rmsnorm_fwd(DType dtype, DType x_dtype, DType w_dtype, void* y, float* rstd,
                        const void* x, const void* w, std::int64_t M, std::int64_t H, float eps,
                        float w_offset, cudaStream_t stream);
// dtype: dy's; x_dtype: x's and dx's; w_dtype: w's and dw's; each any floating dtype. dw may be
// null (a frozen norm): dx alone. The dw partials go into `workspace` (the GEMM
// workspace); without room for two chunks of them (column_chunks(M, H, 1, workspace_bytes)) one
// pass runs.
void launch_rmsnorm_bwd(DType dtype, DType x_dtype, DType w_dtype, void* dx, void* dw,
                        const void* dy, const void* x, const void* w, const float* rstd,
                        std::int64_t M, std::int64_t H, float w_offset, bool accumulate,
                        void* workspace, Bytes workspace_bytes, cudaStream_t stream);
// The q/k norm: each query head by qw, each key head by kw; v copied. rstd[s.rows()]. dtype: y's
// and qkv's; w_dtype: qw's and kw's, any floating dtype.
void launch_qk_norm_fwd(DType dtype, DType w_dtype, void* y, float* rstd, const void* qkv,
                        const void* qw, const void* kw, const QkNormShape& s, float eps,
                        float w_offset, cudaStream_t stream);
// dqkv (its v part dy's), and dqw, dkw (in w_dtype) when not null: a two-stage column sum over
// the tokens with its partials in `workspace` (the GEMM workspace; column_chunks(s.tokens, s.D,
// 2, workspace_bytes)), or one pass per column without room for two chunks.
void launch_qk_norm_bwd(DType dtype, DType w_dtype, void* dqkv, void* dqw, void* dkw,
                        const void* dy, const void* qkv, const void* qw, const void* kw,
                        const float* rstd, const QkNormShape& s, float w_offset, bool accumulate,
                        void* workspace, Bytes workspace_bytes, cudaStream_t stream);

}  // namespace vrambench::cuda
