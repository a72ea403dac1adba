// RMSNorm, and the q/k norm as RMSNorm rows of each head. Row statistics and the weight-gradient
// column sums accumulate in double.
#include "cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace vrambench::cpu {

void rmsnorm_fwd(float* y, float* rstd, const float* x, const float* w, std::int64_t M,
                 std::int64_t H, float eps) {
  for (std::int64_t m = 0; m < M; ++m) {
    const float* row = x + m * H;
    double sum_sq = 0.0;
    for (std::int64_t h = 0; h < H; ++h) sum_sq += static_cast<double>(row[h]) * row[h];
    const double r = 1.0 / std::sqrt(sum_sq / static_cast<double>(H) + static_cast<double>(eps));
    rstd[m] = static_cast<float>(r);
    for (std::int64_t h = 0; h < H; ++h) y[m * H + h] = static_cast<float>(row[h] * r * w[h]);
  }
}

void rmsnorm_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w,
                 const float* rstd, std::int64_t M, std::int64_t H) {
  std::vector<double> acc_w(static_cast<std::size_t>(H), 0.0);
  for (std::int64_t m = 0; m < M; ++m) {
    const float* g = dy + m * H;
    const float* row = x + m * H;
    const double r = rstd[m];
    // dx = rstd * (dxhat - xhat * mean(dxhat * xhat)), dxhat = dy * w, xhat = x * rstd.
    double mean_dxhat_xhat = 0.0;
    for (std::int64_t h = 0; h < H; ++h) {
      const double xhat = row[h] * r;
      mean_dxhat_xhat += static_cast<double>(g[h]) * w[h] * xhat;
      acc_w[static_cast<std::size_t>(h)] += g[h] * xhat;
    }
    mean_dxhat_xhat /= static_cast<double>(H);
    for (std::int64_t h = 0; h < H; ++h) {
      const double xhat = row[h] * r;
      dx[m * H + h] =
          static_cast<float>(r * (static_cast<double>(g[h]) * w[h] - xhat * mean_dxhat_xhat));
    }
  }
  for (std::int64_t h = 0; h < H; ++h)
    dw[h] = static_cast<float>(acc_w[static_cast<std::size_t>(h)]);
}

void qk_norm_fwd(float* y, float* rstd, const float* qkv, const float* qw, const float* kw,
                 std::int64_t tokens, std::int64_t A, std::int64_t K, std::int64_t D, float eps) {
  const std::int64_t width = (A + 2 * K) * D;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t row = t * width;
    float* r = rstd + t * (A + K);
    rmsnorm_fwd(y + row, r, qkv + row, qw, A, D, eps);
    rmsnorm_fwd(y + row + A * D, r + A, qkv + row + A * D, kw, K, D, eps);
    std::copy(qkv + row + (A + K) * D, qkv + row + width, y + row + (A + K) * D);
  }
}

void qk_norm_bwd(float* dqkv, float* dqw, float* dkw, const float* dy, const float* qkv,
                 const float* qw, const float* kw, const float* rstd, std::int64_t tokens,
                 std::int64_t A, std::int64_t K, std::int64_t D) {
  const std::int64_t width = (A + 2 * K) * D;
  std::vector<float> part(static_cast<std::size_t>(D));
  std::fill(dqw, dqw + D, 0.0f);
  std::fill(dkw, dkw + D, 0.0f);
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t row = t * width;
    const float* r = rstd + t * (A + K);
    rmsnorm_bwd(dqkv + row, part.data(), dy + row, qkv + row, qw, r, A, D);
    for (std::int64_t d = 0; d < D; ++d) dqw[d] += part[static_cast<std::size_t>(d)];
    rmsnorm_bwd(dqkv + row + A * D, part.data(), dy + row + A * D, qkv + row + A * D, kw, r + A, K,
                D);
    for (std::int64_t d = 0; d < D; ++d) dkw[d] += part[static_cast<std::size_t>(d)];
    std::copy(dy + row + (A + K) * D, dy + row + width, dqkv + row + (A + K) * D);
  }
}

}  // namespace vrambench::cpu
