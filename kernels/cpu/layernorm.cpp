// LayerNorm. Row statistics and the weight-gradient column sums accumulate in double.
#include "cpu/layernorm.h"

#include <cmath>
#include <vector>

namespace vrambench::cpu {

void layernorm_fwd(float* y, float* mean, float* rstd, const float* x, const float* w,
                   const float* b, std::int64_t M, std::int64_t H, float eps) {
  for (std::int64_t m = 0; m < M; ++m) {
    const float* row = x + m * H;
    double sum = 0.0;
    for (std::int64_t h = 0; h < H; ++h) sum += row[h];
    const double mu = sum / static_cast<double>(H);
    double var = 0.0;
    for (std::int64_t h = 0; h < H; ++h) var += (row[h] - mu) * (row[h] - mu);
    var /= static_cast<double>(H);
    const double r = 1.0 / std::sqrt(var + static_cast<double>(eps));
    mean[m] = static_cast<float>(mu);
    rstd[m] = static_cast<float>(r);
    for (std::int64_t h = 0; h < H; ++h)
      y[m * H + h] = static_cast<float>((row[h] - mu) * r * w[h] + (b ? b[h] : 0.0f));
  }
}

void layernorm_bwd(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                   const float* mean, const float* rstd, std::int64_t M, std::int64_t H) {
  std::vector<double> acc_w(static_cast<std::size_t>(H), 0.0),
      acc_b(static_cast<std::size_t>(H), 0.0);
  for (std::int64_t m = 0; m < M; ++m) {
    const float* g = dy + m * H;
    const float* row = x + m * H;
    const double mu = mean[m], r = rstd[m];
    // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * w.
    double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
    for (std::int64_t h = 0; h < H; ++h) {
      const double xhat = (row[h] - mu) * r;
      const double dxhat = static_cast<double>(g[h]) * w[h];
      mean_dxhat += dxhat;
      mean_dxhat_xhat += dxhat * xhat;
      acc_w[static_cast<std::size_t>(h)] += g[h] * xhat;
      acc_b[static_cast<std::size_t>(h)] += g[h];
    }
    mean_dxhat /= static_cast<double>(H);
    mean_dxhat_xhat /= static_cast<double>(H);
    for (std::int64_t h = 0; h < H; ++h) {
      const double xhat = (row[h] - mu) * r;
      const double dxhat = static_cast<double>(g[h]) * w[h];
      dx[m * H + h] = static_cast<float>(r * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
    }
  }
  for (std::int64_t h = 0; h < H; ++h) {
    dw[h] = static_cast<float>(acc_w[static_cast<std::size_t>(h)]);
    if (db) db[h] = static_cast<float>(acc_b[static_cast<std::size_t>(h)]);
  }
}

}  // namespace vrambench::cpu
