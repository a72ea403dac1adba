// LayerNorm over the last dimension: forward saves mean and rstd (fp32) per row; backward gives dx
// per row and dw, db per column. Rows and columns are explicit indices so tests run the same code
// on the CPU; the GPU runs one thread per row (column).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

template <typename T>
__host__ __device__ inline void layernorm_fwd_body(std::int64_t row, T* y, float* mean, float* rstd,
                                                   const T* x, const T* w, const T* b,
                                                   std::int64_t H, float eps) {
  const T* xr = x + row * H;
  float sum = 0.0f;
  for (std::int64_t h = 0; h < H; ++h) sum += to_f32(xr[h]);
  const float mu = sum / static_cast<float>(H);
  float var = 0.0f;
  for (std::int64_t h = 0; h < H; ++h) {
    const float d = to_f32(xr[h]) - mu;
    var += d * d;
  }
  const float rs = 1.0f / sqrtf(var / static_cast<float>(H) + eps);
  T* yr = y + row * H;
  for (std::int64_t h = 0; h < H; ++h) {
    const float bias = b != nullptr ? to_f32(b[h]) : 0.0f;
    yr[h] = from_f32<T>((to_f32(xr[h]) - mu) * rs * to_f32(w[h]) + bias);
  }
  mean[row] = mu;
  rstd[row] = rs;
}

template <typename T>
__host__ __device__ inline void layernorm_bwd_dx_body(std::int64_t row, T* dx, const T* dy,
                                                      const T* x, const T* w, const float* mean,
                                                      const float* rstd, std::int64_t H) {
  const T* xr = x + row * H;
  const T* dyr = dy + row * H;
  const float mu = mean[row], rs = rstd[row];
  float mean_g = 0.0f, mean_gx = 0.0f;
  for (std::int64_t h = 0; h < H; ++h) {
    const float g = to_f32(dyr[h]) * to_f32(w[h]);
    mean_g += g;
    mean_gx += g * (to_f32(xr[h]) - mu) * rs;
  }
  mean_g /= static_cast<float>(H);
  mean_gx /= static_cast<float>(H);
  T* dxr = dx + row * H;
  for (std::int64_t h = 0; h < H; ++h) {
    const float g = to_f32(dyr[h]) * to_f32(w[h]);
    const float xhat = (to_f32(xr[h]) - mu) * rs;
    dxr[h] = from_f32<T>(rs * (g - mean_g - xhat * mean_gx));
  }
}

// Column h: dw[h] = sum_m dy * xhat, db[h] = sum_m dy (db may be null); added to the existing
// values when accumulate.
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
void launch_layernorm_bwd(DType dtype, void* dx, void* dw, void* db, const void* dy, const void* x,
                          const void* w, const float* mean, const float* rstd, std::int64_t M,
                          std::int64_t H, bool accumulate, cudaStream_t stream);

}  // namespace vrambench::cuda
