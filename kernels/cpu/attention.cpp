// Attention reference kernels. Dot products and row sums accumulate in double; the flash pair keeps
// per-query fp64 accumulators instead of tiles, which the CPU does not need. Then the adapters of
// the eager chain and the flash pair (cpu/op_table.h).
#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/math.h"
#include "cpu/dropout.h"
#include "cpu/op_table.h"

namespace vrambench::cpu {
namespace {

// Offsets of head columns within one qkv row.
struct Packed {
  const AttnShape& s;
  std::int64_t row(std::int64_t b, std::int64_t i) const { return (b * s.S + i) * s.Q(); }
  std::int64_t q(std::int64_t a) const { return a * s.D; }
  std::int64_t k(std::int64_t kv) const { return (s.A + kv) * s.D; }
  std::int64_t v(std::int64_t kv) const { return (s.A + s.K + kv) * s.D; }
};

double dot(const float* x, const float* y, std::int64_t n) {
  double acc = 0.0;
  for (std::int64_t d = 0; d < n; ++d) acc += static_cast<double>(x[d]) * y[d];
  return acc;
}

std::int64_t prob_index(const AttnShape& s, std::int64_t b, std::int64_t a, std::int64_t i,
                        std::int64_t j) {
  return ((b * s.A + a) * s.S + i) * s.S + j;
}

double inv_sqrt_d(const AttnShape& s) {
  return 1.0 / std::sqrt(static_cast<double>(s.D));
}

// A scaled score under soft-capping (softcap > 0), or as it is.
double capped(double score, float softcap) {
  return softcap > 0.0f ? softcap * std::tanh(score / softcap) : score;
}

}  // namespace

void attn_scores(float* scores, const float* qkv, const AttnShape& s) {
  const Packed p{s};
  const double scale = inv_sqrt_d(s);
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t a = 0; a < s.A; ++a)
      for (std::int64_t i = 0; i < s.S; ++i)
        for (std::int64_t j = 0; j < s.S; ++j)
          scores[prob_index(s, b, a, i, j)] =
              j > i ? -std::numeric_limits<float>::infinity()
                    : static_cast<float>(scale * dot(qkv + p.row(b, i) + p.q(a),
                                                     qkv + p.row(b, j) + p.k(s.kv_head(a)), s.D));
}

void softmax_fwd(float* probs, const float* scores, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* in = scores + r * cols;
    float* out = probs + r * cols;
    double row_max = -std::numeric_limits<double>::infinity();
    for (std::int64_t c = 0; c < cols; ++c) row_max = std::max(row_max, static_cast<double>(in[c]));
    if (std::isinf(row_max) && row_max < 0) {  // a fully masked row has no mass
      for (std::int64_t c = 0; c < cols; ++c) out[c] = 0.0f;
      continue;
    }
    double sum = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(in[c] - row_max);
    for (std::int64_t c = 0; c < cols; ++c)
      out[c] = static_cast<float>(std::exp(in[c] - row_max) / sum);
  }
}

void softmax_bwd(float* dscores, const float* dprobs, const float* probs, std::int64_t rows,
                 std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* dp = dprobs + r * cols;
    const float* pr = probs + r * cols;
    const double inner = dot(dp, pr, cols);
    for (std::int64_t c = 0; c < cols; ++c)
      dscores[r * cols + c] = static_cast<float>(pr[c] * (dp[c] - inner));
  }
}

void attn_values(float* y, const float* probs, const float* qkv, const AttnShape& s) {
  const Packed p{s};
  std::vector<double> acc(static_cast<std::size_t>(s.D));
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t a = 0; a < s.A; ++a)
      for (std::int64_t i = 0; i < s.S; ++i) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t j = 0; j < s.S; ++j) {
          const double pij = probs[prob_index(s, b, a, i, j)];
          if (pij == 0.0) continue;
          const float* v = qkv + p.row(b, j) + p.v(s.kv_head(a));
          for (std::int64_t d = 0; d < s.D; ++d) acc[static_cast<std::size_t>(d)] += pij * v[d];
        }
        float* out = y + (b * s.S + i) * s.A * s.D + a * s.D;
        for (std::int64_t d = 0; d < s.D; ++d)
          out[d] = static_cast<float>(acc[static_cast<std::size_t>(d)]);
      }
}

void attn_values_bwd(float* dprobs, float* dqkv, const float* dy, const float* probs,
                     const float* qkv, const AttnShape& s) {
  const Packed p{s};
  const std::int64_t n = s.B * s.S * s.Q();
  std::vector<double> acc(static_cast<std::size_t>(n), 0.0);
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t a = 0; a < s.A; ++a)
      for (std::int64_t i = 0; i < s.S; ++i) {
        const float* g = dy + (b * s.S + i) * s.A * s.D + a * s.D;
        for (std::int64_t j = 0; j < s.S; ++j) {
          const std::int64_t kv = s.kv_head(a);
          const float* v = qkv + p.row(b, j) + p.v(kv);
          dprobs[prob_index(s, b, a, i, j)] = static_cast<float>(dot(g, v, s.D));
          const double pij = probs[prob_index(s, b, a, i, j)];
          double* dv = acc.data() + p.row(b, j) + p.v(kv);
          for (std::int64_t d = 0; d < s.D; ++d) dv[d] += pij * g[d];
        }
      }
  for (std::int64_t e = 0; e < n; ++e)
    dqkv[e] = static_cast<float>(acc[static_cast<std::size_t>(e)]);
}

void attn_scores_bwd(float* dqkv, const float* dscores, const float* qkv, const AttnShape& s) {
  const Packed p{s};
  const double scale = inv_sqrt_d(s);
  std::vector<double> acc(static_cast<std::size_t>(s.B * s.S * s.Q()), 0.0);
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t a = 0; a < s.A; ++a) {
      const std::int64_t kv = s.kv_head(a);
      for (std::int64_t i = 0; i < s.S; ++i)
        for (std::int64_t j = 0; j <= i; ++j) {  // above the diagonal the scores were constants
          const double ds = scale * dscores[prob_index(s, b, a, i, j)];
          if (ds == 0.0) continue;
          const float* q = qkv + p.row(b, i) + p.q(a);
          const float* k = qkv + p.row(b, j) + p.k(kv);
          double* dq = acc.data() + p.row(b, i) + p.q(a);
          double* dk = acc.data() + p.row(b, j) + p.k(kv);
          for (std::int64_t d = 0; d < s.D; ++d) {
            dq[d] += ds * k[d];
            dk[d] += ds * q[d];
          }
        }
    }
  const std::int64_t qk_columns = (s.A + s.K) * s.D;
  for (std::int64_t r = 0; r < s.B * s.S; ++r)
    for (std::int64_t c = 0; c < qk_columns; ++c)
      dqkv[r * s.Q() + c] = static_cast<float>(acc[static_cast<std::size_t>(r * s.Q() + c)]);
}

void flash_fwd(float* y, float* lse, const float* qkv, const AttnShape& s, float dropout_p,
               std::uint64_t seed, float softcap) {
  const Packed p{s};
  const double scale = inv_sqrt_d(s);
  const double keep_scale = dropout_scale(dropout_p);
  std::vector<double> acc(static_cast<std::size_t>(s.D));
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t a = 0; a < s.A; ++a) {
      const std::int64_t kv = s.kv_head(a);
      for (std::int64_t i = 0; i < s.S; ++i) {
        const float* q = qkv + p.row(b, i) + p.q(a);
        // Online softmax: when a larger score arrives, rescale what was summed so far.
        double running_max = -std::numeric_limits<double>::infinity(), running_sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t j = 0; j <= i; ++j) {
          const double score = capped(scale * dot(q, qkv + p.row(b, j) + p.k(kv), s.D), softcap);
          if (score > running_max) {
            const double correction = std::exp(running_max - score);  // 0 on the first key
            running_sum *= correction;
            for (double& x : acc) x *= correction;
            running_max = score;
          }
          const double weight = std::exp(score - running_max);
          running_sum += weight;
          if (dropout_p > 0.0f &&
              !kmath::keep(seed, static_cast<std::uint64_t>(prob_index(s, b, a, i, j)), dropout_p))
            continue;
          const double kept = dropout_p > 0.0f ? weight * keep_scale : weight;
          const float* v = qkv + p.row(b, j) + p.v(kv);
          for (std::int64_t d = 0; d < s.D; ++d) acc[static_cast<std::size_t>(d)] += kept * v[d];
        }
        float* out = y + (b * s.S + i) * s.A * s.D + a * s.D;
        for (std::int64_t d = 0; d < s.D; ++d)
          out[d] = static_cast<float>(acc[static_cast<std::size_t>(d)] / running_sum);
        lse[(b * s.A + a) * s.S + i] = static_cast<float>(running_max + std::log(running_sum));
      }
    }
}

void flash_bwd(float* dqkv, const float* dy, const float* qkv, const float* y, const float* lse,
               const AttnShape& s, float dropout_p, std::uint64_t seed, float softcap) {
  const Packed p{s};
  const double scale = inv_sqrt_d(s);
  const double keep_scale = dropout_scale(dropout_p);
  std::vector<double> acc(static_cast<std::size_t>(s.B * s.S * s.Q()), 0.0);
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t a = 0; a < s.A; ++a) {
      const std::int64_t kv = s.kv_head(a);
      for (std::int64_t i = 0; i < s.S; ++i) {
        const std::int64_t out_offset = (b * s.S + i) * s.A * s.D + a * s.D;
        const float* g = dy + out_offset;
        // delta_i = sum_j P~_ij dP~_ij = dy_i . y_i, dropout included.
        const double delta = dot(g, y + out_offset, s.D);
        const double row_lse = lse[(b * s.A + a) * s.S + i];
        const float* q = qkv + p.row(b, i) + p.q(a);
        double* dq = acc.data() + p.row(b, i) + p.q(a);
        for (std::int64_t j = 0; j <= i; ++j) {
          const float* k = qkv + p.row(b, j) + p.k(kv);
          const float* v = qkv + p.row(b, j) + p.v(kv);
          const double score = capped(scale * dot(q, k, s.D), softcap);
          const double prob = std::exp(score - row_lse);
          double mask = 1.0;
          if (dropout_p > 0.0f)
            mask =
                kmath::keep(seed, static_cast<std::uint64_t>(prob_index(s, b, a, i, j)), dropout_p)
                    ? keep_scale
                    : 0.0;
          const double dprob = mask * dot(g, v, s.D);  // through the dropout to the softmax output
          // Through the cap: d(c tanh(x / c)) / dx = 1 - (score / c)^2.
          const double t = softcap > 0.0f ? score / softcap : 0.0;
          const double dscore = scale * prob * (dprob - delta) * (1.0 - t * t);
          double* dk = acc.data() + p.row(b, j) + p.k(kv);
          double* dv = acc.data() + p.row(b, j) + p.v(kv);
          for (std::int64_t d = 0; d < s.D; ++d) {
            dq[d] += dscore * k[d];
            dk[d] += dscore * q[d];
            dv[d] += prob * mask * g[d];
          }
        }
      }
    }
  for (std::size_t e = 0; e < acc.size(); ++e) dqkv[e] = static_cast<float>(acc[e]);
}

}  // namespace vrambench::cpu

namespace vrambench {
void cpu_run_attn_scores(const Operands& a, CpuContext&) {
  const auto s = attention_shape_as<cpu::AttnShape>(a);
  a.require(a.out[0].tensor->elements() == s.B * s.A * s.S * s.S, "scores must be [B,A,S,S]");
  const auto qkv = cpu::load(a.in[0]);
  auto scores = cpu::zeros_like(a.out[0]);
  cpu::attn_scores(scores.data(), qkv.data(), s);
  cpu::store_out(a, 0, scores);
}

void cpu_run_softmax_fwd(const Operands& a, CpuContext&) {
  const auto scores = cpu::load(a.in[0]);
  auto probs = cpu::zeros_like(a.out[0]);
  cpu::softmax_fwd(probs.data(), scores.data(), rows(a.in[0]), last_dim(a.in[0]));
  cpu::store_out(a, 0, probs);
}

void cpu_run_softmax_bwd(const Operands& a, CpuContext&) {
  const auto dprobs = cpu::load(a.in[0]), probs = cpu::load(a.in[1]);
  auto dscores = cpu::zeros_like(a.out[0]);
  cpu::softmax_bwd(dscores.data(), dprobs.data(), probs.data(), rows(a.in[1]), last_dim(a.in[1]));
  cpu::store_out(a, 0, dscores);
}

void cpu_run_attn_values(const Operands& a, CpuContext&) {
  const auto s = attention_shape_as<cpu::AttnShape>(a);
  a.require(a.in[0].tensor->elements() == s.B * s.A * s.S * s.S, "probs must be [B,A,S,S]");
  a.require(a.out[0].tensor->elements() == s.B * s.S * s.A * s.D, "y must be [B,S,A*D]");
  const auto probs = cpu::load(a.in[0]), qkv = cpu::load(a.in[1]);
  auto y = cpu::zeros_like(a.out[0]);
  cpu::attn_values(y.data(), probs.data(), qkv.data(), s);
  cpu::store_out(a, 0, y);
}

void cpu_run_attn_values_bwd(const Operands& a, CpuContext&) {
  const auto s = attention_shape_as<cpu::AttnShape>(a);
  const auto dy = cpu::load(a.in[0]), probs = cpu::load(a.in[1]), qkv = cpu::load(a.in[2]);
  auto dprobs = cpu::zeros_like(a.out[0]), dqkv = cpu::zeros_like(a.out[1]);
  cpu::attn_values_bwd(dprobs.data(), dqkv.data(), dy.data(), probs.data(), qkv.data(), s);
  cpu::store_out(a, 0, dprobs);
  cpu::store_out(a, 1, dqkv);
}

void cpu_run_attn_scores_bwd(const Operands& a, CpuContext&) {
  const auto s = attention_shape_as<cpu::AttnShape>(a);
  const auto dscores = cpu::load(a.in[0]), qkv = cpu::load(a.in[1]);
  auto dqkv = cpu::load(a.in[2]);  // its v part, written by attn_values_bwd, is kept
  cpu::attn_scores_bwd(dqkv.data(), dscores.data(), qkv.data(), s);
  cpu::store_out(a, 0, dqkv);
}

void cpu_run_flash_fwd(const Operands& a, CpuContext&) {
  const Op& op = a.op;
  const auto s = attention_shape_as<cpu::AttnShape>(a);
  a.require(a.out[1].tensor->elements() == s.B * s.A * s.S, "lse must be [B,A,S]");
  const auto qkv = cpu::load(a.in[0]);
  auto y = cpu::zeros_like(a.out[0]), lse = cpu::zeros_like(a.out[1]);
  cpu::flash_fwd(y.data(), lse.data(), qkv.data(), s, static_cast<float>(op.dropout_p), op.seed,
                 op.softcap);
  cpu::store_out(a, 0, y);
  cpu::store_out(a, 1, lse);
}

void cpu_run_flash_bwd(const Operands& a, CpuContext&) {
  const Op& op = a.op;
  const auto s = attention_shape_as<cpu::AttnShape>(a);
  const auto dy = cpu::load(a.in[0]), qkv = cpu::load(a.in[1]), y = cpu::load(a.in[2]),
             lse = cpu::load(a.in[3]);
  auto dqkv = cpu::zeros_like(a.out[0]);
  cpu::flash_bwd(dqkv.data(), dy.data(), qkv.data(), y.data(), lse.data(), s,
                 static_cast<float>(op.dropout_p), op.seed, op.softcap);
  cpu::store_out(a, 0, dqkv);
}

}  // namespace vrambench
