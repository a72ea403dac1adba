// RMSNorm, and the q/k norm as RMSNorm rows of each head. Row statistics and the weight-gradient
// column sums accumulate in double. Then the adapters of rmsnorm_fwd/bwd and qk_norm_fwd/bwd
// (cpu/op_table.h), which apply the weights with their norm_offset.
#include "cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/op_table.h"

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

namespace vrambench {
namespace {

// A norm's weight as its kernel applies it: w + norm_offset (Gemma's 1 + w).
std::vector<float> offset_weight(const Operand& w, const Op& op) {
  std::vector<float> values = cpu::load(w);
  if (op.norm_offset != 0.0f)
    for (float& v : values) v += op.norm_offset;
  return values;
}

}  // namespace

void cpu_run_rmsnorm_fwd(const Operands& a, CpuContext&) {
  const std::int64_t H = last_dim(a.in[0]), M = rows(a.in[0]);
  const auto x = cpu::load(a.in[0]), w = offset_weight(a.in[1], a.op);
  auto y = cpu::zeros_like(a.out[0]), rstd = cpu::zeros_like(a.out[1]);
  cpu::rmsnorm_fwd(y.data(), rstd.data(), x.data(), w.data(), M, H, a.op.eps);
  cpu::store_out(a, 0, y);
  cpu::store_out(a, 1, rstd);
}

void cpu_run_rmsnorm_bwd(const Operands& a, CpuContext&) {
  const std::int64_t H = last_dim(a.in[1]), M = rows(a.in[1]);
  const auto dy = cpu::load(a.in[0]), x = cpu::load(a.in[1]), rstd = cpu::load(a.in[3]);
  const auto w = offset_weight(a.in[2], a.op);
  auto dx = cpu::zeros_like(a.out[0]);
  std::vector<float> dw(static_cast<std::size_t>(H));
  cpu::rmsnorm_bwd(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), M, H);
  cpu::store_out(a, 0, dx);
  if (a.out.size() == 2) cpu::store_out(a, 1, dw);  // a frozen norm writes dx alone
}

void cpu_run_qk_norm_fwd(const Operands& a, CpuContext&) {
  const QkvShape s = attention_shape(a);
  const auto qkv = cpu::load(a.in[0]);
  const auto qw = offset_weight(a.in[1], a.op), kw = offset_weight(a.in[2], a.op);
  auto y = cpu::zeros_like(a.out[0]), rstd = cpu::zeros_like(a.out[1]);
  a.require(static_cast<std::int64_t>(rstd.size()) == s.batch * s.seq * (s.heads + s.kv_heads),
            "rstd must be [B,S,A+K]");
  cpu::qk_norm_fwd(y.data(), rstd.data(), qkv.data(), qw.data(), kw.data(), s.batch * s.seq,
                   s.heads, s.kv_heads, s.head_dim, a.op.eps);
  cpu::store_out(a, 0, y);
  cpu::store_out(a, 1, rstd);
}

void cpu_run_qk_norm_bwd(const Operands& a, CpuContext&) {
  const QkvShape s = attention_shape(a);
  const auto dy = cpu::load(a.in[0]), qkv = cpu::load(a.in[1]), rstd = cpu::load(a.in[4]);
  const auto qw = offset_weight(a.in[2], a.op), kw = offset_weight(a.in[3], a.op);
  auto dqkv = cpu::zeros_like(a.out[0]);
  std::vector<float> dqw(static_cast<std::size_t>(s.head_dim)), dkw(dqw.size());
  cpu::qk_norm_bwd(dqkv.data(), dqw.data(), dkw.data(), dy.data(), qkv.data(), qw.data(), kw.data(),
                   rstd.data(), s.batch * s.seq, s.heads, s.kv_heads, s.head_dim);
  cpu::store_out(a, 0, dqkv);
  if (a.out.size() == 3) {  // frozen norms write dqkv alone
    cpu::store_out(a, 1, dqw);
    cpu::store_out(a, 2, dkw);
  }
}

}  // namespace vrambench
