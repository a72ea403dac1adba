// Preference training on the CPU (docs/preference.md): the per-token log-probabilities of the next
// tokens, computed a position at a time over the whole vocabulary in double with each logit
// rounded to the tile's dtype (what TRL's chunked LM head rounds its tiles to), their gradient,
// and the DPO and KTO losses (common/preference_math.h). The adapters of the logprob kinds
// (cpu/op_table.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/math.h"
#include "common/preference_math.h"
#include "cpu/op_table.h"

namespace vrambench {
namespace {

// The logits over the vocabulary of x row `xr`, rounded to the tile's dtype.
void logits_of(const float* xr, const std::vector<float>& w, const LogprobOperands& d, DType tile,
               std::vector<double>& z) {
  for (std::int64_t v = 0; v < d.V; ++v) {
    const float* wr = w.data() + v * d.H;
    double dot = 0.0;
    for (std::int64_t h = 0; h < d.H; ++h) dot += static_cast<double>(xr[h]) * wr[h];
    z[static_cast<std::size_t>(v)] = kmath::round_to(tile, static_cast<float>(dot));
  }
}

double log_sum_exp(const std::vector<double>& z) {
  const double m = *std::max_element(z.begin(), z.end());
  double s = 0.0;
  for (double v : z) s += std::exp(v - m);
  return m + std::log(s);
}

// Each row's sum over its positions.
std::vector<double> row_sums(const std::vector<float>& values, std::int64_t rows) {
  std::vector<double> sums(static_cast<std::size_t>(rows), 0.0);
  const auto per_row = static_cast<std::int64_t>(values.size()) / std::max<std::int64_t>(rows, 1);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t s = 0; s < per_row; ++s)
      sums[static_cast<std::size_t>(r)] += values[static_cast<std::size_t>(r * per_row + s)];
  return sums;
}

// The loss's rows from the op's operands: the log-ratios and KTO's z.
struct LossRows {
  std::vector<double> ratio;
  kmath::PreferenceRows rows;
};
LossRows loss_rows(const Operands& a) {
  const Operand& logp = a.in[0];
  const std::int64_t R = logp.tensor->shape.empty() ? 1 : logp.tensor->shape[0];
  a.require(a.in[1].tensor->elements() == logp.tensor->elements(), "ref must be logp's shape");
  LossRows l;
  l.ratio = row_sums(cpu::load(logp), R);
  const std::vector<double> ref = row_sums(cpu::load(a.in[1]), R);
  for (std::int64_t r = 0; r < R; ++r) l.ratio[static_cast<std::size_t>(r)] -= ref[r];
  l.rows.rows = R;
  l.rows.beta = a.op.beta;
  l.rows.dpo = a.op.trainer == Trainer::dpo;
  a.require(!l.rows.dpo || R % 2 == 0, "dpo's rows are pairs: chosen then rejected");
  if (a.in.size() == 4) {
    const std::int64_t K = a.in[2].tensor->shape.empty() ? 1 : a.in[2].tensor->shape[0];
    const std::vector<double> kl = row_sums(cpu::load(a.in[2]), K);
    const std::vector<double> ref_kl = row_sums(cpu::load(a.in[3]), K);
    double mean = 0.0;
    for (std::int64_t k = 0; k < K; ++k) mean += kl[k] - ref_kl[k];
    l.rows.z = std::max(0.0, mean / static_cast<double>(std::max<std::int64_t>(K, 1)));
  }
  l.rows.ratio = l.ratio.data();
  return l;
}

}  // namespace

void cpu_run_logprob_fwd(const Operands& a, CpuContext&) {
  const LogprobOperands d = logprob_operands(a);
  const auto x = cpu::load(*d.x), w = cpu::load(a.in[1]);
  const auto targets = cpu::load_ids(a, a.in[2]);
  auto logp = cpu::zeros_like(a.out[0]), logz = cpu::zeros_like(a.out[1]);
  std::vector<float> xs;
  std::vector<double> z(static_cast<std::size_t>(d.V));
  for (std::int64_t r = 0; r < d.R; ++r)
    for (std::int64_t s = 0; s + 1 < d.S; ++s) {
      const std::int64_t t = r * d.S + s;
      const std::int32_t target = targets[static_cast<std::size_t>(t)];
      a.require(target >= 0 && target < d.V, "a target outside the vocabulary");
      const float* xr = x.data() + t * d.H;
      if (d.xs != nullptr) xs.insert(xs.end(), xr, xr + d.H);
      logits_of(xr, w, d, d.tile->tensor->dtype, z);
      const double lse = log_sum_exp(z);
      logz[static_cast<std::size_t>(t)] = static_cast<float>(lse);
      logp[static_cast<std::size_t>(t)] = static_cast<float>(z[target] - lse);
    }
  cpu::store_out(a, 0, logp);
  cpu::store_out(a, 1, logz);
  if (d.xs != nullptr) cpu::store_out(a, 2, xs);
}

void cpu_run_logprob_bwd(const Operands& a, CpuContext&) {
  const LogprobOperands d = logprob_operands(a);
  const auto dlogp = cpu::load(a.in[0]), x = cpu::load(*d.x), w = cpu::load(a.in[2]);
  const auto targets = cpu::load_ids(a, a.in[3]);
  const auto logz = cpu::load(a.in[4]);
  auto dx = cpu::zeros_like(a.out[0]);
  const bool weights = a.out.size() == 2;
  std::vector<float> dw = weights ? cpu::zeros_like(a.out[1]) : std::vector<float>();
  std::vector<double> z(static_cast<std::size_t>(d.V));
  for (std::int64_t r = 0; r < d.R; ++r)
    for (std::int64_t s = 0; s + 1 < d.S; ++s) {
      const std::int64_t t = r * d.S + s;
      const double g = dlogp[static_cast<std::size_t>(t)];
      if (g == 0.0) continue;
      const std::int32_t target = targets[static_cast<std::size_t>(t)];
      a.require(target >= 0 && target < d.V, "a target outside the vocabulary");
      const float* xr = x.data() + (r * d.P + s) * d.H;
      logits_of(xr, w, d, d.tile->tensor->dtype, z);
      const double lse = logz[static_cast<std::size_t>(t)];
      float* dxr = dx.data() + t * d.H;
      for (std::int64_t v = 0; v < d.V; ++v) {
        // d logp / d z_v = 1[v = target] - p_v
        const double dz = g * ((v == target ? 1.0 : 0.0) - std::exp(z[v] - lse));
        const float* wr = w.data() + v * d.H;
        for (std::int64_t h = 0; h < d.H; ++h) dxr[h] += static_cast<float>(dz * wr[h]);
        if (!weights) continue;
        float* dwr = dw.data() + v * d.H;
        for (std::int64_t h = 0; h < d.H; ++h) dwr[h] += static_cast<float>(dz * xr[h]);
      }
    }
  cpu::store_out(a, 0, dx);
  if (weights) cpu::store_out(a, 1, dw);
}

void cpu_run_preference_loss(const Operands& a, CpuContext&) {
  const LossRows l = loss_rows(a);
  cpu::store_out(a, 0, {static_cast<float>(kmath::preference_loss(l.rows))});
}

void cpu_run_preference_loss_bwd(const Operands& a, CpuContext&) {
  const LossRows l = loss_rows(a);
  auto dlogp = cpu::zeros_like(a.out[0]);
  const std::int64_t R = l.rows.rows;
  const std::int64_t S = a.out[0].tensor->elements() / std::max<std::int64_t>(R, 1);
  for (std::int64_t r = 0; r < R; ++r) {
    const auto g = static_cast<float>(a.op.grad_scale * kmath::preference_grad(l.rows, r));
    for (std::int64_t s = 0; s + 1 < S; ++s) dlogp[static_cast<std::size_t>(r * S + s)] = g;
  }
  cpu::store_out(a, 0, dlogp);
}

}  // namespace vrambench
