// LayerNorm over the last dimension, forward and backward, CPU reference.
#pragma once

#include <cstdint>

namespace vrambench::cpu {

// y = (x - mean) * rstd * w + b per row of x[M,H]; saves mean[M] and rstd[M] for the backward.
void layernorm_fwd(float* y, float* mean, float* rstd, const float* x, const float* w,
                   const float* b, std::int64_t M, std::int64_t H, float eps);
// From the saved statistics: dx, dw = sum_rows dy * xhat, db = sum_rows dy.
void layernorm_bwd(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                   const float* mean, const float* rstd, std::int64_t M, std::int64_t H);

}  // namespace vrambench::cpu
