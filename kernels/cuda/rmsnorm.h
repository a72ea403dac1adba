// RMSNorm over the last dimension: y = x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps) saved
// (fp32) per row; backward gives dx per row and dw per column.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

template <typename T>
__host__ __device__ inline void rmsnorm_fwd_body(std::int64_t row, T* y, float* rstd, const T* x,
                                                 const T* w, std::int64_t H, float eps) {
  const T* xr = x + row * H;
  float sq = 0.0f;
  for (std::int64_t h = 0; h < H; ++h) sq += to_f32(xr[h]) * to_f32(xr[h]);
  const float rs = 1.0f / sqrtf(sq / static_cast<float>(H) + eps);
  T* yr = y + row * H;
  for (std::int64_t h = 0; h < H; ++h) yr[h] = from_f32<T>(to_f32(xr[h]) * rs * to_f32(w[h]));
  rstd[row] = rs;
}

template <typename T>
__host__ __device__ inline void rmsnorm_bwd_dx_body(std::int64_t row, T* dx, const T* dy,
                                                    const T* x, const T* w, const float* rstd,
                                                    std::int64_t H) {
  const T* xr = x + row * H;
  const T* dyr = dy + row * H;
  const float rs = rstd[row];
  float mean_gx = 0.0f;
  for (std::int64_t h = 0; h < H; ++h)
    mean_gx += to_f32(dyr[h]) * to_f32(w[h]) * to_f32(xr[h]) * rs;
  mean_gx /= static_cast<float>(H);
  T* dxr = dx + row * H;
  for (std::int64_t h = 0; h < H; ++h) {
    const float g = to_f32(dyr[h]) * to_f32(w[h]);
    dxr[h] = from_f32<T>(rs * (g - to_f32(xr[h]) * rs * mean_gx));
  }
}

template <typename T>
__host__ __device__ inline void rmsnorm_bwd_dw_body(std::int64_t h, T* dw, const T* dy, const T* x,
                                                    const float* rstd, std::int64_t M,
                                                    std::int64_t H, bool accumulate) {
  float sw = 0.0f;
  for (std::int64_t m = 0; m < M; ++m) sw += to_f32(dy[m * H + h]) * to_f32(x[m * H + h]) * rstd[m];
  dw[h] = from_f32<T>(sw + (accumulate ? to_f32(dw[h]) : 0.0f));
}

void launch_rmsnorm_fwd(DType dtype, void* y, float* rstd, const void* x, const void* w,
                        std::int64_t M, std::int64_t H, float eps, cudaStream_t stream);
void launch_rmsnorm_bwd(DType dtype, void* dx, void* dw, const void* dy, const void* x,
                        const void* w, const float* rstd, std::int64_t M, std::int64_t H,
                        bool accumulate, cudaStream_t stream);

}  // namespace vrambench::cuda
