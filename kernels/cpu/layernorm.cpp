// LayerNorm. Row statistics and the weight-gradient column sums accumulate in double. Then the
// adapters of layernorm_fwd and layernorm_bwd (cpu/op_table.h).
#include "cpu/layernorm.h"

#include <cmath>
#include <vector>

#include "cpu/op_table.h"

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

namespace vrambench {

void cpu_run_layernorm_fwd(const Operands& a, CpuContext&) {
  const std::int64_t H = last_dim(a.in[0]), M = rows(a.in[0]);
  const auto x = cpu::load(a.in[0]), w = cpu::load(a.in[1]);
  const auto b = a.in.size() == 3 ? cpu::load(a.in[2]) : std::vector<float>{};
  auto y = cpu::zeros_like(a.out[0]), mean = cpu::zeros_like(a.out[1]),
       rstd = cpu::zeros_like(a.out[2]);
  cpu::layernorm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(),
                     b.empty() ? nullptr : b.data(), M, H, a.op.eps);
  cpu::store_out(a, 0, y);
  cpu::store_out(a, 1, mean);
  cpu::store_out(a, 2, rstd);
}

void cpu_run_layernorm_bwd(const Operands& a, CpuContext&) {
  const std::int64_t H = last_dim(a.in[1]), M = rows(a.in[1]);
  const auto dy = cpu::load(a.in[0]), x = cpu::load(a.in[1]), w = cpu::load(a.in[2]);
  const auto mean = cpu::load(a.in[3]), rstd = cpu::load(a.in[4]);
  auto dx = cpu::zeros_like(a.out[0]);
  std::vector<float> dw(static_cast<std::size_t>(H)), db(static_cast<std::size_t>(H));
  cpu::layernorm_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), M, H);
  cpu::store_out(a, 0, dx);
  if (a.out.size() >= 2) cpu::store_out(a, 1, dw);  // a frozen norm writes dx alone
  if (a.out.size() == 3) cpu::store_out(a, 2, db);
}

}  // namespace vrambench
