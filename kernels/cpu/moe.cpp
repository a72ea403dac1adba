// A mixture of experts on the CPU (docs/moe.md): the router's softmax and top-k by the op's
// routing (common/moe_math.h), the dispatch as a stable counting sort of the token-expert pairs by
// expert, each expert's GEMMs over its rows, the weighted combine in fp32, PEFT's LoRA on the
// experts' stacked weights, and the load-balancing loss. The adapters of the moe kinds
// (cpu/op_table.h).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/moe_math.h"
#include "cpu/linear.h"
#include "cpu/op_table.h"

namespace vrambench {
namespace {

// The experts' first rows: offsets[e] = the pairs of experts 0..e, as the dispatch wrote them.
std::vector<std::int64_t> expert_starts(const Operands& a, const Operand& offsets) {
  const auto* ends = static_cast<const std::int32_t*>(a.typed(offsets, DType::i32));
  const std::int64_t E = offsets.tensor->elements();
  std::vector<std::int64_t> starts(static_cast<std::size_t>(E) + 1, 0);
  for (std::int64_t e = 0; e < E; ++e) {
    starts[static_cast<std::size_t>(e) + 1] = ends[e];
    a.require(ends[e] >= starts[static_cast<std::size_t>(e)], "offsets must not decrease");
  }
  return starts;
}

// Row r of `m` (row length n).
const float* row(const std::vector<float>& m, std::int64_t r, std::int64_t n) {
  return m.data() + r * n;
}

}  // namespace

void cpu_run_router_topk(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  const auto logits = cpu::load(a.in[0]);
  std::vector<float> probs(static_cast<std::size_t>(d.M * d.E)),
      scores(static_cast<std::size_t>(d.M * d.K));
  std::int64_t* index = a.i64(a.out[2]);
  const bool skewed = a.op.routing == Routing::skewed;
  for (std::int64_t m = 0; m < d.M; ++m)
    kmath::router_row(row(logits, m, d.E), d.E, d.K, m, skewed, a.op.norm_topk,
                      probs.data() + m * d.E, scores.data() + m * d.K, index + m * d.K);
  cpu::store_out(a, 0, probs);
  cpu::store_out(a, 1, scores);
}

void cpu_run_router_topk_bwd(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  const auto dscores = cpu::load(a.in[0]), probs = cpu::load(a.in[1]);
  const std::int64_t* index = a.i64(a.in[2]);
  std::vector<float> dlogits(static_cast<std::size_t>(d.M * d.E)),
      scratch(static_cast<std::size_t>(d.K));
  for (std::int64_t m = 0; m < d.M; ++m)
    kmath::router_row_grad(row(dscores, m, d.K), row(probs, m, d.E), index + m * d.K, d.E, d.K,
                           a.op.norm_topk, scratch.data(),
                           kmath::FloatRow{dlogits.data() + m * d.E});
  cpu::store_out(a, 0, dlogits);
}

void cpu_run_moe_dispatch(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  const std::int64_t* index = a.i64(a.in[1]);
  std::int64_t* order = a.i64(a.out[1]);
  std::int32_t* offsets = a.i32_out(a.out[2]);
  std::vector<std::int64_t> count(static_cast<std::size_t>(d.E) + 1, 0);
  for (std::int64_t p = 0; p < d.pairs(); ++p) {
    a.require(index[p] >= 0 && index[p] < d.E, "an expert index out of range");
    ++count[static_cast<std::size_t>(index[p]) + 1];
  }
  for (std::int64_t e = 0; e < d.E; ++e) {
    count[static_cast<std::size_t>(e) + 1] += count[static_cast<std::size_t>(e)];
    offsets[e] = static_cast<std::int32_t>(count[static_cast<std::size_t>(e) + 1]);
  }
  for (std::int64_t p = 0; p < d.pairs(); ++p)
    order[count[static_cast<std::size_t>(index[p])]++] = p;
  const auto x = cpu::load(a.in[0]);
  std::vector<float> xs(static_cast<std::size_t>(d.pairs() * d.H));
  for (std::int64_t s = 0; s < d.pairs(); ++s) {
    const float* from = row(x, order[s] / d.K, d.H);
    std::copy(from, from + d.H, xs.begin() + s * d.H);
  }
  cpu::store_out(a, 0, xs);
}

void cpu_run_moe_dispatch_bwd(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  const auto dxs = cpu::load(a.in[0]);
  const std::int64_t* order = a.i64(a.in[1]);
  std::vector<float> dx(static_cast<std::size_t>(d.M * d.H), 0.0f);
  for (std::int64_t s = 0; s < d.pairs(); ++s) {
    float* to = dx.data() + (order[s] / d.K) * d.H;
    const float* from = row(dxs, s, d.H);
    for (std::int64_t h = 0; h < d.H; ++h) to[h] += from[h];
  }
  cpu::store_out(a, 0, dx);
}

void cpu_run_grouped_linear_fwd(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  const auto x = cpu::load(a.in[0]), w = cpu::load(a.in[1]);
  const std::vector<std::int64_t> starts = expert_starts(a, a.in[2]);
  a.require(starts.back() == d.M, "the offsets do not cover the rows");
  std::vector<float> y(static_cast<std::size_t>(d.M * d.Out), 0.0f);
  for (std::int64_t e = 0; e < d.E; ++e) {
    const std::int64_t r0 = starts[static_cast<std::size_t>(e)];
    const std::int64_t n = starts[static_cast<std::size_t>(e) + 1] - r0;
    if (n > 0)
      cpu::linear_fwd(y.data() + r0 * d.Out, x.data() + r0 * d.In, w.data() + e * d.Out * d.In,
                      nullptr, n, d.In, d.Out);
  }
  cpu::store_out(a, 0, y);
}

void cpu_run_grouped_linear_bwd(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  const auto dy = cpu::load(a.in[0]), w = cpu::load(a.in[1]);
  const std::vector<std::int64_t> starts = expert_starts(a, a.in[2]);
  a.require(starts.back() == d.M, "the offsets do not cover the rows");
  const bool weights = a.out.size() == 2;
  const std::vector<float> x = weights ? cpu::load(a.in[3]) : std::vector<float>{};
  std::vector<float> dx(static_cast<std::size_t>(d.M * d.In), 0.0f);
  std::vector<float> dw(weights ? static_cast<std::size_t>(d.E * d.Out * d.In) : 0, 0.0f);
  for (std::int64_t e = 0; e < d.E; ++e) {
    const std::int64_t r0 = starts[static_cast<std::size_t>(e)];
    const std::int64_t n = starts[static_cast<std::size_t>(e) + 1] - r0;
    if (n == 0) continue;
    const float* we = w.data() + e * d.Out * d.In;
    float* dxe = dx.data() + r0 * d.In;
    const float* dye = dy.data() + r0 * d.Out;
    if (weights) {
      cpu::linear_bwd(dxe, dw.data() + e * d.Out * d.In, nullptr, dye, x.data() + r0 * d.In, we, n,
                      d.In, d.Out);
      continue;
    }
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t o = 0; o < d.Out; ++o) {
        const float g = dye[r * d.Out + o];
        for (std::int64_t i = 0; i < d.In; ++i) dxe[r * d.In + i] += g * we[o * d.In + i];
      }
  }
  cpu::store_out(a, 0, dx);
  if (weights) cpu::store_out(a, 1, dw);
}

void cpu_run_moe_combine(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  const auto ys = cpu::load(a.in[0]), scores = cpu::load(a.in[1]);
  const std::int64_t* order = a.i64(a.in[2]);
  std::vector<float> y(static_cast<std::size_t>(d.M * d.H), 0.0f);
  for (std::int64_t s = 0; s < d.pairs(); ++s) {
    const float score = scores[static_cast<std::size_t>(order[s])];
    float* to = y.data() + (order[s] / d.K) * d.H;
    const float* from = row(ys, s, d.H);
    for (std::int64_t h = 0; h < d.H; ++h) to[h] += score * from[h];
  }
  cpu::store_out(a, 0, y);
}

void cpu_run_moe_combine_bwd(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  const auto dy = cpu::load(a.in[0]), ys = cpu::load(a.in[1]), scores = cpu::load(a.in[2]);
  const std::int64_t* order = a.i64(a.in[3]);
  std::vector<float> dys(static_cast<std::size_t>(d.pairs() * d.H));
  std::vector<float> dscores(static_cast<std::size_t>(d.pairs()), 0.0f);
  for (std::int64_t s = 0; s < d.pairs(); ++s) {
    const float score = scores[static_cast<std::size_t>(order[s])];
    const float* g = row(dy, order[s] / d.K, d.H);
    const float* y = row(ys, s, d.H);
    float dot = 0.0f;
    for (std::int64_t h = 0; h < d.H; ++h) {
      dys[static_cast<std::size_t>(s * d.H + h)] = score * g[h];
      dot += g[h] * y[h];
    }
    dscores[static_cast<std::size_t>(order[s])] = dot;
  }
  cpu::store_out(a, 0, dys);
  cpu::store_out(a, 1, dscores);
}

// w_eff[e] = w[e] + scale b_e a_e: b_e [Out,R] the columns e R.. of b [Out,E R], a_e [R,In] the
// rows e R.. of a.
void cpu_run_expert_lora_fwd(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  auto w = cpu::load(a.in[0]);
  const auto A = cpu::load(a.in[1]), B = cpu::load(a.in[2]);
  const std::int64_t ER = d.E * d.R;
  for (std::int64_t e = 0; e < d.E; ++e)
    for (std::int64_t o = 0; o < d.Out; ++o)
      for (std::int64_t r = 0; r < d.R; ++r) {
        const float b = a.op.lora_scale * B[static_cast<std::size_t>(o * ER + e * d.R + r)];
        const float* arow = A.data() + (e * d.R + r) * d.In;
        float* out = w.data() + (e * d.Out + o) * d.In;
        for (std::int64_t i = 0; i < d.In; ++i) out[i] += b * arow[i];
      }
  cpu::store_out(a, 0, w);
}

// da_e = scale b_e^T dw_eff[e]; db_e = scale dw_eff[e] a_e^T.
void cpu_run_expert_lora_bwd(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  const auto g = cpu::load(a.in[0]), A = cpu::load(a.in[1]), B = cpu::load(a.in[2]);
  const std::int64_t ER = d.E * d.R;
  std::vector<float> da(A.size(), 0.0f), db(B.size(), 0.0f);
  const float scale = a.op.lora_scale;
  for (std::int64_t e = 0; e < d.E; ++e)
    for (std::int64_t o = 0; o < d.Out; ++o) {
      const float* grow = g.data() + (e * d.Out + o) * d.In;
      for (std::int64_t r = 0; r < d.R; ++r) {
        const std::size_t bi = static_cast<std::size_t>(o * ER + e * d.R + r);
        const float* arow = A.data() + (e * d.R + r) * d.In;
        float* darow = da.data() + (e * d.R + r) * d.In;
        float dot = 0.0f;
        for (std::int64_t i = 0; i < d.In; ++i) {
          darow[i] += scale * B[bi] * grow[i];
          dot += grow[i] * arow[i];
        }
        db[bi] = scale * dot;
      }
    }
  cpu::store_out(a, 0, da);
  cpu::store_out(a, 1, db);
}

// This layer's softmax of its logits, and the statistics so far plus its share: the pairs of
// each expert (from the router's index) and its probabilities' sum, both over M, and one more
// layer in the last column.
void cpu_run_router_aux_stats(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  const auto logits = cpu::load(a.in[0]);
  const std::int64_t* index = a.i64(a.in[1]);
  const std::int64_t W = d.E + 1;
  std::vector<float> stats =
      a.in.size() == 3 ? cpu::load(a.in[2]) : std::vector<float>(static_cast<std::size_t>(2 * W));
  std::vector<float> probs(static_cast<std::size_t>(d.M * d.E));
  for (std::int64_t m = 0; m < d.M; ++m) {
    kmath::softmax_row_store(logits.data() + m * d.E, d.E, kmath::FloatRow{probs.data() + m * d.E});
    for (std::int64_t e = 0; e < d.E; ++e)
      stats[static_cast<std::size_t>(W + e)] +=
          probs[static_cast<std::size_t>(m * d.E + e)] / static_cast<float>(d.M);
  }
  for (std::int64_t p = 0; p < d.pairs(); ++p) {
    a.require(index[p] >= 0 && index[p] < d.E, "an expert index out of range");
    stats[static_cast<std::size_t>(index[p])] += 1.0f / static_cast<float>(d.M);
  }
  stats[static_cast<std::size_t>(d.E)] += 1.0f;
  cpu::store_out(a, 0, probs);
  cpu::store_out(a, 1, stats);
}

void cpu_run_router_aux_loss(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  const auto loss = cpu::load(a.in[0]), stats = cpu::load(a.in[1]);
  const float layers = stats[static_cast<std::size_t>(d.E)];
  a.require(layers >= 1.0f, "statistics of no layer");
  cpu::store_out(a, 0,
                 {loss[0] + kmath::aux_loss(stats.data(), stats.data() + d.E + 1, d.E, layers,
                                            a.op.aux_coef)});
}

void cpu_run_router_aux_bwd(const Operands& a, CpuContext&) {
  const MoeDims d = moe_dims(a);
  const auto probs = cpu::load(a.in[0]), stats = cpu::load(a.in[1]);
  const float layers = stats[static_cast<std::size_t>(d.E)];
  a.require(layers >= 1.0f, "statistics of no layer");
  const kmath::AuxGrads g{stats.data(), d.E, d.M, a.op.aux_coef, a.op.grad_scale};
  std::vector<float> dlogits(probs.size());
  for (std::int64_t m = 0; m < d.M; ++m)
    kmath::softmax_row_grad(probs.data() + m * d.E, g, d.E,
                            kmath::FloatRow{dlogits.data() + m * d.E});
  cpu::store_out(a, 0, dlogits);
}

}  // namespace vrambench
