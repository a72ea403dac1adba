// LayerNorm over the last dimension: forward saves mean and rstd (fp32) per row; backward gives dx
// per row and dw, db per column. The GPU gives each row a block of kRowThreads threads: thread
// `lane` of `lanes` owns columns lane, lane + lanes, ... (adjacent threads, adjacent columns), and
// the block adds the lanes' parts (block_sum). dw and db are column sums over the rows, two-stage
// through fp32 partials in the GEMM workspace (cuda/reduce.h). The bodies below take explicit
// indices, so tests run them on the CPU with any number of lanes.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/units.h"
#include "cuda/reduce.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// ---- forward ----------------------------------------------------------------------------------

// Lane's part of sum_h x[row, h].
template <typename T>
__host__ __device__ inline float layernorm_sum_part(std::int64_t row, std::int64_t lane,
                                                    std::int64_t lanes, const T* x,
                                                    std::int64_t H) {
  const T* xr = x + row * H;
  float sum = 0.0f;
  for (std::int64_t h = lane; h < H; h += lanes) sum += to_f32(xr[h]);
  return sum;
}
// Lane's part of sum_h (x[row, h] - mean)^2: two passes, as the CPU reference, so that a large
// mean does not cancel the variance.
template <typename T>
__host__ __device__ inline float layernorm_var_part(std::int64_t row, std::int64_t lane,
                                                    std::int64_t lanes, const T* x, std::int64_t H,
                                                    float mean) {
  const T* xr = x + row * H;
  float sum = 0.0f;
  for (std::int64_t h = lane; h < H; h += lanes) {
    const float d = to_f32(xr[h]) - mean;
    sum += d * d;
  }
  return sum;
}
__host__ __device__ inline float layernorm_rstd(float var_sum, std::int64_t H, float eps) {
  return 1.0f / sqrtf(var_sum / static_cast<float>(H) + eps);
}
// y[row, h] = (x - mean) * rstd * w + b over the lane's columns (b may be null).
template <typename T>
__host__ __device__ inline void layernorm_fwd_write(std::int64_t row, std::int64_t lane,
                                                    std::int64_t lanes, T* y, const T* x,
                                                    const T* w, const T* b, std::int64_t H,
                                                    float mean, float rstd) {
  const T* xr = x + row * H;
  T* yr = y + row * H;
  for (std::int64_t h = lane; h < H; h += lanes) {
    const float bias = b != nullptr ? to_f32(b[h]) : 0.0f;
    yr[h] = from_f32<T>((to_f32(xr[h]) - mean) * rstd * to_f32(w[h]) + bias);
  }
}

// ---- backward, dx -----------------------------------------------------------------------------

// Lane's parts of sum_h g and sum_h g * xhat, with g = dy * w and xhat = (x - mean) * rstd.
template <typename T>
__host__ __device__ inline void layernorm_dx_parts(std::int64_t row, std::int64_t lane,
                                                   std::int64_t lanes, const T* dy, const T* x,
                                                   const T* w, float mean, float rstd,
                                                   std::int64_t H, float* sum_g, float* sum_gx) {
  const T* xr = x + row * H;
  const T* dyr = dy + row * H;
  float sg = 0.0f, sgx = 0.0f;
  for (std::int64_t h = lane; h < H; h += lanes) {
    const float g = to_f32(dyr[h]) * to_f32(w[h]);
    sg += g;
    sgx += g * (to_f32(xr[h]) - mean) * rstd;
  }
  *sum_g = sg;
  *sum_gx = sgx;
}
// dx = rstd * (g - mean_h g - xhat * mean_h (g xhat)) over the lane's columns.
template <typename T>
__host__ __device__ inline void layernorm_dx_write(std::int64_t row, std::int64_t lane,
                                                   std::int64_t lanes, T* dx, const T* dy,
                                                   const T* x, const T* w, float mean, float rstd,
                                                   std::int64_t H, float mean_g, float mean_gx) {
  const T* xr = x + row * H;
  const T* dyr = dy + row * H;
  T* dxr = dx + row * H;
  for (std::int64_t h = lane; h < H; h += lanes) {
    const float g = to_f32(dyr[h]) * to_f32(w[h]);
    const float xhat = (to_f32(xr[h]) - mean) * rstd;
    dxr[h] = from_f32<T>(rstd * (g - mean_g - xhat * mean_gx));
  }
}

// ---- backward, dw and db (column sums) --------------------------------------------------------

// Stage 1: for rows [chunk * chunk_rows, ...) of column h, sum dy * xhat into partial[chunk, h]
// and (with_bias) sum dy into partial[chunks + chunk, h]: the db partials follow all dw partials.
template <typename T>
__host__ __device__ inline void layernorm_dw_partial_body(std::int64_t h, std::int64_t chunk,
                                                          float* partial, const T* dy, const T* x,
                                                          const float* mean, const float* rstd,
                                                          std::int64_t M, std::int64_t H,
                                                          std::int64_t chunk_rows,
                                                          std::int64_t chunks, bool with_bias) {
  const std::int64_t begin = chunk * chunk_rows;
  const std::int64_t end = begin + chunk_rows < M ? begin + chunk_rows : M;
  float sw = 0.0f, sb = 0.0f;
  for (std::int64_t m = begin; m < end; ++m) {
    const float g = to_f32(dy[m * H + h]);
    sw += g * (to_f32(x[m * H + h]) - mean[m]) * rstd[m];
    sb += g;
  }
  partial[chunk * H + h] = sw;
  if (with_bias) partial[(chunks + chunk) * H + h] = sb;
}

// One pass, without partials (a single chunk): column h over all rows; db may be null; added to
// the existing values when accumulate.
template <typename T>
__host__ __device__ inline void layernorm_bwd_dw_body(std::int64_t h, T* dw, T* db, const T* dy,
                                                      const T* x, const float* mean,
                                                      const float* rstd, std::int64_t M,
                                                      std::int64_t H, bool accumulate) {
  float sw = 0.0f, sb = 0.0f;
  for (std::int64_t m = 0; m < M; ++m) {
    const float g = to_f32(dy[m * H + h]);
    sw += g * (to_f32(x[m * H + h]) - mean[m]) * rstd[m];
    sb += g;
  }
  dw[h] = from_f32<T>(sw + (accumulate ? to_f32(dw[h]) : 0.0f));
  if (db != nullptr) db[h] = from_f32<T>(sb + (accumulate ? to_f32(db[h]) : 0.0f));
}

void launch_layernorm_fwd(DType dtype, void* y, float* mean, float* rstd, const void* x,
                          const void* w, const void* b, std::int64_t M, std::int64_t H, float eps,
                          cudaStream_t stream);
// db may be null (no bias); dw and db both null (a frozen norm) write dx alone. The dw/db partials
// go into `workspace` (the GEMM workspace); without room for two chunks of them (column_chunks(M,
// H, db ? 2 : 1, workspace_bytes)) one pass runs.
void launch_layernorm_bwd(DType dtype, void* dx, void* dw, void* db, const void* dy, const void* x,
                          const void* w, const float* mean, const float* rstd, std::int64_t M,
                          std::int64_t H, bool accumulate, void* workspace, Bytes workspace_bytes,
                          cudaStream_t stream);

}  // namespace vrambench::cuda
