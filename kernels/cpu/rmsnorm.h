// RMSNorm over the last dimension, and the q/k norm of a packed q|k|v row (RMSNorm of each query
// and key head), forward and backward, CPU reference.
#pragma once

#include <cstdint>

namespace vrambench::cpu {

// y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps); saves rstd[M].
void rmsnorm_fwd(float* y, float* rstd, const float* x, const float* w, std::int64_t M,
                 std::int64_t H, float eps);
void rmsnorm_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w,
                 const float* rstd, std::int64_t M, std::int64_t H);

// The q/k norm of `tokens` packed q|k|v rows ((A + 2K) D columns): each of the A query heads an
// RMSNorm row of D by qw, each of the K key heads by kw, v copied; rstd[tokens * (A + K)].
void qk_norm_fwd(float* y, float* rstd, const float* qkv, const float* qw, const float* kw,
                 std::int64_t tokens, std::int64_t A, std::int64_t K, std::int64_t D, float eps);
// dqkv (v: dy's), dqw and dkw summed over every token's heads.
void qk_norm_bwd(float* dqkv, float* dqw, float* dkw, const float* dy, const float* qkv,
                 const float* qw, const float* kw, const float* rstd, std::int64_t tokens,
                 std::int64_t A, std::int64_t K, std::int64_t D);

}  // namespace vrambench::cpu
