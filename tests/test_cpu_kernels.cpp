// The CPU reference kernels: every backward against central finite differences of its forward
// (fp32, tiny shapes, the scalar objective sum(r * y) for a fixed random r), flash attention
// against the eager chain, and the optimizer steps against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "common/math.h"
#include "cpu/ops.h"

namespace vrambench {
namespace {

using Vec = std::vector<float>;

Vec random_vec(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  Vec v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * (2.0f * kmath::uniform(seed, i) - 1.0f);
  return v;
}

double weighted_sum(const Vec& y, const Vec& r) {
  double s = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * r[i];
  return s;
}

// Checks analytic[i] == d objective / d x[i] for every i, by central differences of step h.
// `objective` reads x (which this function perturbs in place and restores).
void expect_gradient(const char* what, Vec& x, const Vec& analytic,
                     const std::function<double()>& objective, float h = 1e-2f,
                     double tolerance = 2e-3) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + h;
    const double plus = objective();
    x[i] = saved - h;
    const double minus = objective();
    x[i] = saved;
    const double numeric = (plus - minus) / (2.0 * static_cast<double>(h));
    EXPECT_NEAR(analytic[i], numeric, tolerance * (1.0 + std::fabs(numeric)))
        << what << " element " << i;
  }
}

void expect_close(const char* what, const Vec& a, const Vec& b, double tolerance = 1e-5) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], tolerance * (1.0 + std::fabs(b[i]))) << what << " element " << i;
}

TEST(CpuKernelsNorm, LayernormGradientsMatchFiniteDifferences) {
  const std::int64_t M = 3, H = 5;
  Vec x = random_vec(M * H, 1, 2.0f), w = random_vec(H, 2), b = random_vec(H, 3);
  const Vec r = random_vec(M * H, 4);
  Vec y(M * H), mean(M), rstd(M);
  auto objective = [&] {
    cpu::layernorm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), M, H,
                       1e-5f);
    return weighted_sum(y, r);
  };
  objective();
  // Each row of y is normalised: mean 0 and unit variance before the affine map.
  for (std::int64_t m = 0; m < M; ++m) {
    double s = 0.0;
    for (std::int64_t h = 0; h < H; ++h) s += (x[m * H + h] - mean[m]) * rstd[m];
    EXPECT_NEAR(s, 0.0, 1e-5);
  }
  Vec dx(M * H), dw(H), db(H);
  cpu::layernorm_bwd(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), M, H);
  expect_gradient("dx", x, dx, objective);
  expect_gradient("dw", w, dw, objective);
  expect_gradient("db", b, db, objective);
}

TEST(CpuKernelsNorm, RmsnormGradientsMatchFiniteDifferences) {
  const std::int64_t M = 3, H = 6;
  Vec x = random_vec(M * H, 5, 2.0f), w = random_vec(H, 6);
  const Vec r = random_vec(M * H, 7);
  Vec y(M * H), rstd(M);
  auto objective = [&] {
    cpu::rmsnorm_fwd(y.data(), rstd.data(), x.data(), w.data(), M, H, 1e-5f);
    return weighted_sum(y, r);
  };
  objective();
  Vec dx(M * H), dw(H);
  cpu::rmsnorm_bwd(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), M, H);
  expect_gradient("dx", x, dx, objective);
  expect_gradient("dw", w, dw, objective);
}

void check_linear(bool with_bias) {
  const std::int64_t M = 4, In = 3, Out = 5;
  Vec x = random_vec(M * In, 8), w = random_vec(Out * In, 9), b = random_vec(Out, 10);
  const Vec r = random_vec(M * Out, 11);
  Vec y(M * Out);
  const float* bias = with_bias ? b.data() : nullptr;
  auto objective = [&] {
    cpu::linear_fwd(y.data(), x.data(), w.data(), bias, M, In, Out);
    return weighted_sum(y, r);
  };
  objective();
  // Hand-computed element: y[1,2] = x[1,:] . w[2,:] + b[2].
  double y12 = with_bias ? b[2] : 0.0;
  for (std::int64_t i = 0; i < In; ++i) y12 += static_cast<double>(x[1 * In + i]) * w[2 * In + i];
  EXPECT_NEAR(y[1 * Out + 2], y12, 1e-6);
  Vec dx(M * In), dw(Out * In), db(Out);
  cpu::linear_bwd(dx.data(), dw.data(), with_bias ? db.data() : nullptr, r.data(), x.data(),
                  w.data(), M, In, Out);
  expect_gradient("dx", x, dx, objective);
  expect_gradient("dw", w, dw, objective);
  if (with_bias) expect_gradient("db", b, db, objective);
}

TEST(CpuKernelsLinear, GradientsWithBias) {
  check_linear(true);
}
TEST(CpuKernelsLinear, GradientsWithoutBias) {
  check_linear(false);
}

TEST(CpuKernelsActivation, GeluGradient) {
  const std::int64_t n = 9;
  Vec x = random_vec(n, 12, 3.0f);
  const Vec r = random_vec(n, 13);
  Vec y(n), dx(n);
  auto objective = [&] {
    cpu::gelu_fwd(y.data(), x.data(), n);
    return weighted_sum(y, r);
  };
  cpu::gelu_bwd(dx.data(), r.data(), x.data(), n);
  expect_gradient("dx", x, dx, objective, 1e-3f);
}

TEST(CpuKernelsActivation, SwigluAndGegluGradients) {
  const std::int64_t n = 9;
  for (const bool gelu_gate : {false, true}) {
    SCOPED_TRACE(gelu_gate ? "geglu" : "swiglu");
    Vec gate = random_vec(n, 14, 3.0f), up = random_vec(n, 15, 2.0f);
    const Vec r = random_vec(n, 16);
    Vec y(n), dgate(n), dup(n);
    auto objective = [&] {
      cpu::swiglu_fwd(y.data(), gate.data(), up.data(), n, gelu_gate);
      return weighted_sum(y, r);
    };
    objective();
    // GeGLU's gate goes through the tanh GELU, SwiGLU's through SiLU.
    const double g = gate[0];
    const double act = gelu_gate
                           ? 0.5 * g * (1 + std::tanh(0.7978845608 * (g + 0.044715 * g * g * g)))
                           : g / (1 + std::exp(-g));
    EXPECT_NEAR(y[0], act * up[0], 1e-5);
    cpu::swiglu_bwd(dgate.data(), dup.data(), r.data(), gate.data(), up.data(), n, gelu_gate);
    expect_gradient("dgate", gate, dgate, objective, 1e-3f);
    expect_gradient("dup", up, dup, objective, 1e-3f);
  }
}

TEST(CpuKernelsActivation, SoftcapBoundsKeepsMaskAndGradient) {
  const std::int64_t n = 12;
  const float cap = 3.0f;
  Vec x = random_vec(n, 30, 8.0f);
  const Vec r = random_vec(n, 31);
  Vec y(n), dx(n);
  auto objective = [&] {
    cpu::softcap_fwd(y.data(), x.data(), n, cap);
    return weighted_sum(y, r);
  };
  objective();
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_LT(std::abs(y[i]), cap);
    EXPECT_NEAR(y[i], cap * std::tanh(x[i] / cap), 1e-6);
  }
  cpu::softcap_bwd(dx.data(), r.data(), y.data(), n, cap);
  expect_gradient("dx", x, dx, objective, 1e-3f);
  // A masked score stays masked, and passes no gradient.
  const float masked = -std::numeric_limits<float>::infinity(), one = 1.0f;
  float capped = 0.0f, dmasked = 1.0f;
  cpu::softcap_fwd(&capped, &masked, 1, cap);
  EXPECT_EQ(capped, masked);
  cpu::softcap_bwd(&dmasked, &one, &capped, 1, cap);
  EXPECT_EQ(dmasked, 0.0f);
}

TEST(CpuKernelsNorm, QkNormNormsEachHeadCopiesVAndItsGradientsMatch) {
  const std::int64_t tokens = 3, A = 2, K = 1, D = 4, Q = (A + 2 * K) * D;
  Vec qkv = random_vec(tokens * Q, 32, 2.0f), qw = random_vec(D, 33), kw = random_vec(D, 34);
  const Vec r = random_vec(tokens * Q, 35);
  Vec y(tokens * Q), rstd(tokens * (A + K));
  auto objective = [&] {
    cpu::qk_norm_fwd(y.data(), rstd.data(), qkv.data(), qw.data(), kw.data(), tokens, A, K, D,
                     1e-6f);
    return weighted_sum(y, r);
  };
  objective();
  // Token 1's second query head is an RMSNorm row by qw; its key head one by kw; v is copied.
  Vec row(D), row_rstd(1);
  cpu::rmsnorm_fwd(row.data(), row_rstd.data(), qkv.data() + Q + D, qw.data(), 1, D, 1e-6f);
  for (std::int64_t d = 0; d < D; ++d) EXPECT_FLOAT_EQ(y[Q + D + d], row[d]);
  cpu::rmsnorm_fwd(row.data(), row_rstd.data(), qkv.data() + Q + A * D, kw.data(), 1, D, 1e-6f);
  for (std::int64_t d = 0; d < D; ++d) EXPECT_FLOAT_EQ(y[Q + A * D + d], row[d]);
  for (std::int64_t c = (A + K) * D; c < Q; ++c) EXPECT_EQ(y[2 * Q + c], qkv[2 * Q + c]);
  Vec dqkv(qkv.size()), dqw(D), dkw(D);
  cpu::qk_norm_bwd(dqkv.data(), dqw.data(), dkw.data(), r.data(), qkv.data(), qw.data(), kw.data(),
                   rstd.data(), tokens, A, K, D);
  expect_gradient("dqkv", qkv, dqkv, objective);
  expect_gradient("dqw", qw, dqw, objective);
  expect_gradient("dkw", kw, dkw, objective);
}

TEST(CpuKernelsRope, RotatesQkCopiesVAndBackwardIsTheGradient) {
  const std::int64_t B = 2, S = 3, A = 2, K = 1, D = 4, Q = (A + 2 * K) * D;
  Vec qkv = random_vec(B * S * Q, 17);
  const Vec r = random_vec(B * S * Q, 18);
  Vec out(B * S * Q);
  auto objective = [&] {
    cpu::rope_fwd(out.data(), qkv.data(), B, S, A, K, D);
    return weighted_sum(out, r);
  };
  objective();
  for (std::int64_t row = 0; row < B * S; ++row) {
    const std::int64_t s = row % S;
    for (std::int64_t c = 0; c < Q; ++c) {
      if (s == 0 || c >= (A + K) * D) {  // position 0 does not rotate; v never does
        EXPECT_EQ(out[row * Q + c], qkv[row * Q + c]);
      }
    }
    // Pair (0,1) of head 1 at position s: rotated by angle s exactly.
    const float* in = qkv.data() + row * Q + D;
    const float angle = static_cast<float>(s);
    EXPECT_NEAR(out[row * Q + D], in[0] * std::cos(angle) - in[1] * std::sin(angle), 1e-6);
  }
  Vec dqkv(B * S * Q);
  cpu::rope_bwd(dqkv.data(), r.data(), B, S, A, K, D);
  expect_gradient("dqkv", qkv, dqkv, objective);
}

// ---- attention ----------------------------------------------------------------------------------

struct EagerOut {
  Vec scores, probs, dropped, mask, y;
};

EagerOut eager_forward(const Vec& qkv, const cpu::AttnShape& s, float p = 0.0f,
                       std::uint64_t seed = 0) {
  EagerOut o;
  const std::int64_t n_probs = s.B * s.A * s.S * s.S;
  o.scores.resize(n_probs);
  o.probs.resize(n_probs);
  o.y.resize(s.B * s.S * s.A * s.D);
  cpu::attn_scores(o.scores.data(), qkv.data(), s);
  cpu::softmax_fwd(o.probs.data(), o.scores.data(), s.B * s.A * s.S, s.S);
  const Vec* values_in = &o.probs;
  if (p > 0.0f) {
    o.dropped.resize(n_probs);
    o.mask.resize(n_probs);
    cpu::dropout_fwd(o.dropped.data(), o.mask.data(), o.probs.data(), n_probs, p, seed);
    values_in = &o.dropped;
  }
  cpu::attn_values(o.y.data(), values_in->data(), qkv.data(), s);
  return o;
}

Vec eager_backward(const Vec& qkv, const EagerOut& o, const Vec& dy, const cpu::AttnShape& s,
                   float p = 0.0f) {
  const std::int64_t n_probs = s.B * s.A * s.S * s.S;
  Vec dprobs(n_probs), dscores(n_probs), dqkv(qkv.size(), 12345.0f);  // garbage must be overwritten
  cpu::attn_values_bwd(dprobs.data(), dqkv.data(), dy.data(),
                       p > 0.0f ? o.dropped.data() : o.probs.data(), qkv.data(), s);
  if (p > 0.0f) {
    Vec dundropped(n_probs);
    cpu::dropout_bwd(dundropped.data(), dprobs.data(), o.mask.data(), n_probs, p);
    dprobs = dundropped;
  }
  cpu::softmax_bwd(dscores.data(), dprobs.data(), o.probs.data(), s.B * s.A * s.S, s.S);
  cpu::attn_scores_bwd(dqkv.data(), dscores.data(), qkv.data(), s);
  return dqkv;
}

cpu::AttnShape shape(std::int64_t B, std::int64_t S, std::int64_t A, std::int64_t K,
                     std::int64_t D) {
  cpu::AttnShape s;
  s.B = B;
  s.S = S;
  s.A = A;
  s.K = K;
  s.D = D;
  return s;
}

void check_eager_chain(const cpu::AttnShape& s) {
  Vec qkv = random_vec(s.B * s.S * s.Q(), 19);
  const Vec r = random_vec(s.B * s.S * s.A * s.D, 20);
  const EagerOut o = eager_forward(qkv, s);
  // Causal: no probability above the diagonal, rows sum to one.
  for (std::int64_t row = 0; row < s.B * s.A * s.S; ++row) {
    const std::int64_t i = row % s.S;
    double sum = 0.0;
    for (std::int64_t j = 0; j < s.S; ++j) {
      if (j > i) {
        EXPECT_EQ(o.probs[row * s.S + j], 0.0f);
        EXPECT_TRUE(std::isinf(o.scores[row * s.S + j]));
      }
      sum += o.probs[row * s.S + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  // The first query sees only the first key: its output is that key's value, exactly.
  for (std::int64_t a = 0; a < s.A; ++a)
    for (std::int64_t d = 0; d < s.D; ++d)
      EXPECT_NEAR(o.y[a * s.D + d], qkv[(s.A + s.K + s.kv_head(a)) * s.D + d], 1e-6);
  const Vec dqkv = eager_backward(qkv, o, r, s);
  expect_gradient("dqkv", qkv, dqkv, [&] { return weighted_sum(eager_forward(qkv, s).y, r); });
}

TEST(CpuKernelsAttention, EagerChainGradientMultiHead) {
  check_eager_chain(shape(2, 3, 2, 2, 4));
}
TEST(CpuKernelsAttention, EagerChainGradientGroupedQuery) {
  check_eager_chain(shape(1, 4, 4, 2, 2));
}

void check_flash_equals_eager(const cpu::AttnShape& s, float p) {
  const std::uint64_t seed = 99;
  const Vec qkv = random_vec(s.B * s.S * s.Q(), 21, 2.0f);
  const Vec dy = random_vec(s.B * s.S * s.A * s.D, 22);
  const EagerOut o = eager_forward(qkv, s, p, seed);
  Vec y(o.y.size()), lse(s.B * s.A * s.S);
  cpu::flash_fwd(y.data(), lse.data(), qkv.data(), s, p, seed);
  expect_close("y", y, o.y);
  for (std::int64_t row = 0; row < s.B * s.A * s.S; ++row) {
    double sum = 0.0;
    for (std::int64_t j = 0; j <= row % s.S; ++j) sum += std::exp(o.scores[row * s.S + j]);
    EXPECT_NEAR(lse[row], std::log(sum), 1e-5) << row;
  }
  const Vec eager_dqkv = eager_backward(qkv, o, dy, s, p);
  Vec flash_dqkv(qkv.size());
  cpu::flash_bwd(flash_dqkv.data(), dy.data(), qkv.data(), y.data(), lse.data(), s, p, seed);
  expect_close("dqkv", flash_dqkv, eager_dqkv, 1e-4);
}

TEST(CpuKernelsAttention, FlashEqualsEagerMultiHead) {
  check_flash_equals_eager(shape(2, 5, 2, 2, 4), 0.0f);
}
TEST(CpuKernelsAttention, FlashEqualsEagerGroupedQuery) {
  check_flash_equals_eager(shape(1, 6, 4, 1, 4), 0.0f);
}
TEST(CpuKernelsAttention, FlashEqualsEagerWithDropout) {
  check_flash_equals_eager(shape(2, 6, 4, 2, 2), 0.3f);
}

TEST(CpuKernelsAttention, SoftcappedFlashEqualsTheEagerChainWithACap) {
  const cpu::AttnShape s = shape(2, 5, 2, 1, 4);
  const float cap = 0.5f;  // small enough to bend every score
  Vec qkv = random_vec(s.B * s.S * s.Q(), 36, 2.0f);
  const Vec dy = random_vec(s.B * s.S * s.A * s.D, 37);
  const std::int64_t n_probs = s.B * s.A * s.S * s.S, rows = s.B * s.A * s.S;
  Vec scores(n_probs), capped(n_probs), probs(n_probs), want_y(s.B * s.S * s.A * s.D);
  cpu::attn_scores(scores.data(), qkv.data(), s);
  cpu::softcap_fwd(capped.data(), scores.data(), n_probs, cap);
  cpu::softmax_fwd(probs.data(), capped.data(), rows, s.S);
  cpu::attn_values(want_y.data(), probs.data(), qkv.data(), s);
  Vec y(want_y.size()), lse(rows);
  cpu::flash_fwd(y.data(), lse.data(), qkv.data(), s, 0.0f, 0, cap);
  expect_close("y", y, want_y);
  Vec dprobs(n_probs), dcapped(n_probs), dscores(n_probs), want_dqkv(qkv.size());
  cpu::attn_values_bwd(dprobs.data(), want_dqkv.data(), dy.data(), probs.data(), qkv.data(), s);
  cpu::softmax_bwd(dcapped.data(), dprobs.data(), probs.data(), rows, s.S);
  cpu::softcap_bwd(dscores.data(), dcapped.data(), capped.data(), n_probs, cap);
  cpu::attn_scores_bwd(want_dqkv.data(), dscores.data(), qkv.data(), s);
  Vec dqkv(qkv.size());
  cpu::flash_bwd(dqkv.data(), dy.data(), qkv.data(), y.data(), lse.data(), s, 0.0f, 0, cap);
  expect_close("dqkv", dqkv, want_dqkv, 1e-4);
  // And the cap changes the output: without it flash gives another y.
  Vec uncapped(y.size());
  cpu::flash_fwd(uncapped.data(), lse.data(), qkv.data(), s, 0.0f, 0);
  double differ = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i)
    differ = std::max(differ, std::abs(double{y[i]} - uncapped[i]));
  EXPECT_GT(differ, 1e-3);
}

TEST(CpuKernelsAttention, FlashGradientMatchesFiniteDifferences) {
  const cpu::AttnShape s = shape(1, 4, 2, 1, 2);
  Vec qkv = random_vec(s.B * s.S * s.Q(), 23);
  const Vec r = random_vec(s.B * s.S * s.A * s.D, 24);
  Vec y(s.B * s.S * s.A * s.D), lse(s.B * s.A * s.S), dqkv(qkv.size());
  auto objective = [&] {
    cpu::flash_fwd(y.data(), lse.data(), qkv.data(), s, 0.0f, 0);
    return weighted_sum(y, r);
  };
  objective();
  cpu::flash_bwd(dqkv.data(), r.data(), qkv.data(), y.data(), lse.data(), s, 0.0f, 0);
  expect_gradient("dqkv", qkv, dqkv, objective);
}

// ---- dropout, embedding, cross-entropy, add
// ------------------------------------------------------

TEST(CpuKernelsDropout, FixedMaskGradientAndScale) {
  const std::int64_t n = 64;
  const float p = 0.25f;
  Vec x = random_vec(n, 25);
  const Vec r = random_vec(n, 26);
  Vec y(n), mask(n), dx(n);
  auto objective = [&] {
    cpu::dropout_fwd(y.data(), mask.data(), x.data(), n, p, 7);
    return weighted_sum(y, r);
  };
  objective();
  int kept = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(mask[i], kmath::keep(7, static_cast<std::uint64_t>(i), p) ? 1.0f : 0.0f);
    EXPECT_FLOAT_EQ(y[i], mask[i] * x[i] / 0.75f);
    kept += mask[i] != 0.0f;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, n);
  cpu::dropout_bwd(dx.data(), r.data(), mask.data(), n, p);
  expect_gradient("dx", x, dx, objective);
}

TEST(CpuKernelsEmbedding, GradientsWithRepeatedTokens) {
  const std::int64_t B = 2, S = 3, V = 5, P = 4, H = 3;
  const std::vector<std::int32_t> tokens = {1, 4, 1, 0, 1, 3};
  Vec wte = random_vec(V * H, 27), wpe = random_vec(P * H, 28);
  const Vec r = random_vec(B * S * H, 29);
  Vec x(B * S * H);
  auto objective = [&] {
    cpu::embedding_fwd(x.data(), tokens.data(), wte.data(), wpe.data(), B, S, V, H);
    return weighted_sum(x, r);
  };
  objective();
  EXPECT_FLOAT_EQ(x[(1 * S + 2) * H + 1], wte[3 * H + 1] + wpe[2 * H + 1]);
  Vec dwte(V * H, 7.0f), dwpe(P * H, 7.0f);  // garbage: the backward overwrites
  cpu::embedding_bwd(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, S, V, P, H);
  expect_gradient("dwte", wte, dwte, objective);
  expect_gradient("dwpe", wpe, dwpe, objective);
  for (std::int64_t h = 0; h < H; ++h) EXPECT_EQ(dwpe[3 * H + h], 0.0f);  // position 3 unused
}

TEST(CpuKernelsCrossEntropy, UniformLogitsGiveLogVAndGradientMatches) {
  const std::int64_t M = 3, V = 7;
  const std::vector<std::int32_t> targets = {0, 6, 3};
  Vec logits(M * V, 0.5f), loss(1), lse(M);
  cpu::cross_entropy_fwd(loss.data(), lse.data(), logits.data(), targets.data(), M, V);
  EXPECT_NEAR(loss[0], std::log(7.0), 1e-6);
  logits = random_vec(M * V, 30, 3.0f);
  auto objective = [&] {
    cpu::cross_entropy_fwd(loss.data(), lse.data(), logits.data(), targets.data(), M, V);
    return static_cast<double>(loss[0]);
  };
  objective();
  Vec dlogits(M * V);
  cpu::cross_entropy_bwd(dlogits.data(), logits.data(), targets.data(), lse.data(), M, V, 1.0f);
  // Each row of the gradient of a softmax cross-entropy sums to zero.
  for (std::int64_t m = 0; m < M; ++m) {
    double sum = 0.0;
    for (std::int64_t v = 0; v < V; ++v) sum += dlogits[m * V + v];
    EXPECT_NEAR(sum, 0.0, 1e-7);
  }
  expect_gradient("dlogits", logits, dlogits, objective);
  // With a loss scale the gradient is that of the scaled loss: every element times the scale.
  objective();  // lse of the unperturbed logits again
  cpu::cross_entropy_bwd(dlogits.data(), logits.data(), targets.data(), lse.data(), M, V, 1.0f);
  Vec scaled(M * V);
  cpu::cross_entropy_bwd(scaled.data(), logits.data(), targets.data(), lse.data(), M, V, 1024.0f);
  for (std::int64_t i = 0; i < M * V; ++i) EXPECT_FLOAT_EQ(scaled[i], 1024.0f * dlogits[i]) << i;
}

TEST(CpuKernelsAdd, SumsAndIsLinear) {
  const std::int64_t n = 5;
  Vec a = random_vec(n, 31), b = random_vec(n, 32);
  const Vec r = random_vec(n, 33);
  Vec c(n);
  auto objective = [&] {
    cpu::add(c.data(), a.data(), b.data(), n);
    return weighted_sum(c, r);
  };
  objective();
  for (std::int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(c[i], a[i] + b[i]);
  expect_gradient("da", a, r, objective);  // the gradient of a sum passes through unchanged
  expect_gradient("db", b, r, objective);
}

// ---- optimizers
// ------------------------------------------------------------------------------------

TEST(CpuKernelsOptimizer, AdamwOneStepByHand) {
  Vec w = {1.0f, -0.5f}, g = {0.1f, -0.4f}, m = {0.0f, 0.0f}, v = {0.0f, 0.0f};
  kmath::AdamParams p;
  p.lr = 0.01f;
  p.weight_decay = 0.1f;
  cpu::adamw_step(w.data(), g.data(), m.data(), v.data(), 2, p);
  // Step 1: m_hat = g, v_hat = g^2, so w -= lr * wd * w + lr * g / (|g| + eps).
  EXPECT_NEAR(w[0], 1.0 - 0.001 - 0.01, 1e-6);
  EXPECT_NEAR(w[1], -0.5 + 0.0005 + 0.01, 1e-6);
  EXPECT_NEAR(m[1], -0.04, 1e-7);
  EXPECT_NEAR(v[1], 0.001 * 0.16, 1e-8);  // 1 - beta2 is inexact in fp32
}

// A loss-scaled gradient, divided by its scale first, gives the same step as the unscaled one.
TEST(CpuKernelsOptimizer, StepsDivideTheLossScaleOut) {
  const Vec g = {0.1f, -0.4f, 3e-6f};
  Vec scaled_g(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) scaled_g[i] = g[i] * 32768.0f;
  kmath::AdamParams p;
  p.lr = 0.01f;
  p.weight_decay = 0.1f;
  kmath::AdamParams ps = p;
  ps.grad_scale = 32768.0f;
  Vec w = {1.0f, -0.5f, 0.25f}, m(3, 0.0f), v(3, 0.0f);
  Vec ws = w, ms = m, vs = v;
  cpu::adamw_step(w.data(), g.data(), m.data(), v.data(), 3, p);
  cpu::adamw_step(ws.data(), scaled_g.data(), ms.data(), vs.data(), 3, ps);
  EXPECT_EQ(ws, w);
  EXPECT_EQ(ms, m);
  EXPECT_EQ(vs, v);
  kmath::SgdParams q;
  kmath::SgdParams qs = q;
  qs.grad_scale = 32768.0f;
  Vec w2 = {1.0f, -0.5f, 0.25f}, buf(3, 0.2f);
  Vec w2s = w2, bufs = buf;
  cpu::sgd_step(w2.data(), g.data(), buf.data(), 3, q);
  cpu::sgd_step(w2s.data(), scaled_g.data(), bufs.data(), 3, qs);
  EXPECT_EQ(w2s, w2);
  EXPECT_EQ(bufs, buf);
  // Without dividing, the scaled step would differ.
  Vec w3 = {1.0f, -0.5f, 0.25f}, buf3(3, 0.2f);
  cpu::sgd_step(w3.data(), scaled_g.data(), buf3.data(), 3, q);
  EXPECT_NE(w3, w2);
}

TEST(CpuKernelsOptimizer, SgdOneStepByHand) {
  Vec w = {2.0f}, g = {0.5f}, buf = {0.2f};
  kmath::SgdParams p;
  p.lr = 0.1f;
  p.momentum = 0.9f;
  cpu::sgd_step(w.data(), g.data(), buf.data(), 1, p);
  EXPECT_NEAR(buf[0], 0.9 * 0.2 + 0.5, 1e-6);
  EXPECT_NEAR(w[0], 2.0 - 0.1 * 0.68, 1e-6);
}

}  // namespace
}  // namespace vrambench
