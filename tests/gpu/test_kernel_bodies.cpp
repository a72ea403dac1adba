// Runs the __host__ __device__ bodies of the CUDA kernels over their whole grid on the CPU and
// compares with plain references written independently here (double math). No GPU needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/rope.h"
#include "cuda/activation.h"
#include "cuda/add.h"
#include "cuda/cross_entropy.h"
#include "cuda/dropout.h"
#include "cuda/embedding.h"
#include "cuda/layernorm.h"
#include "cuda/optimizer.h"
#include "cuda/rmsnorm.h"
#include "cuda/rope.h"
#include "cuda/softmax.h"

namespace vrambench::cuda {
namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

template <typename T>
std::vector<T> to_storage(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_f32<T>(v[i]);
  return out;
}
template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_f32(v[i]);
  return out;
}

template <typename F>
void over(std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) f(i);
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol,
                     const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " at " << i;
}

template <typename T>
double tolerance() {
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  if constexpr (std::is_same_v<T, __half>) return 2e-3;
  return 1.6e-2;  // bf16: 8 bits of mantissa
}

template <typename T>
class Bodies : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(Bodies, StorageTypes);

TEST(Conversions, RoundToNearestEven) {
  EXPECT_EQ(to_f32(from_f32<__nv_bfloat16>(1.0f + 1.0f / 256)), 1.0f);               // tie -> even
  EXPECT_EQ(to_f32(from_f32<__nv_bfloat16>(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);  // tie -> even
  EXPECT_EQ(to_f32(from_f32<__half>(1.0f + 1.0f / 2048)), 1.0f);
  EXPECT_EQ(to_f32(from_f32<__half>(65504.0f)), 65504.0f);
}

TYPED_TEST(Bodies, GeluMatchesFormula) {
  using T = TypeParam;
  const auto xf = random_floats(1000, 1, -6, 6);
  const auto x = to_storage<T>(xf);
  std::vector<T> y(x.size()), dx(x.size());
  const auto dy = to_storage<T>(random_floats(1000, 2));
  over(1000, [&](std::int64_t i) { gelu_fwd_body(i, y.data(), x.data()); });
  over(1000, [&](std::int64_t i) { gelu_bwd_body(i, dx.data(), dy.data(), x.data()); });
  std::vector<double> want(x.size()), want_dx(x.size());
  const double k = std::sqrt(2.0 / M_PI);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = to_f32(x[i]);
    auto g = [&](double a) { return 0.5 * a * (1 + std::tanh(k * (a + 0.044715 * a * a * a))); };
    want[i] = g(v);
    const double h = 1e-4;
    want_dx[i] = to_f32(dy[i]) * (g(v + h) - g(v - h)) / (2 * h);
  }
  expect_near_all(to_double(y), want, tolerance<T>(), "gelu");
  expect_near_all(to_double(dx), want_dx, std::max(tolerance<T>(), 1e-4), "gelu_bwd");
}

TYPED_TEST(Bodies, SwigluForwardAndBackward) {
  using T = TypeParam;
  const std::int64_t n = 777;
  const auto gate = to_storage<T>(random_floats(n, 3, -5, 5));
  const auto up = to_storage<T>(random_floats(n, 4));
  const auto dy = to_storage<T>(random_floats(n, 5));
  std::vector<T> y(n), dg(n), du(n);
  over(n, [&](std::int64_t i) { swiglu_fwd_body(i, y.data(), gate.data(), up.data()); });
  over(n, [&](std::int64_t i) {
    swiglu_bwd_body(i, dg.data(), du.data(), dy.data(), gate.data(), up.data());
  });
  std::vector<double> wy(n), wdg(n), wdu(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = to_f32(gate[i]), u = to_f32(up[i]), d = to_f32(dy[i]);
    auto silu = [](double a) { return a / (1 + std::exp(-a)); };
    wy[i] = silu(g) * u;
    wdu[i] = d * silu(g);
    const double h = 1e-5;
    wdg[i] = d * u * (silu(g + h) - silu(g - h)) / (2 * h);
  }
  expect_near_all(to_double(y), wy, tolerance<T>(), "swiglu");
  expect_near_all(to_double(du), wdu, tolerance<T>(), "swiglu dup");
  expect_near_all(to_double(dg), wdg, std::max(tolerance<T>(), 1e-4), "swiglu dgate");
}

TYPED_TEST(Bodies, Add) {
  using T = TypeParam;
  const auto a = to_storage<T>(random_floats(100, 6));
  const auto b = to_storage<T>(random_floats(100, 7));
  std::vector<T> c(100);
  over(100, [&](std::int64_t i) { add_body(i, c.data(), a.data(), b.data()); });
  std::vector<double> want(100);
  for (int i = 0; i < 100; ++i) want[i] = double(to_f32(a[i])) + to_f32(b[i]);
  expect_near_all(to_double(c), want, tolerance<T>(), "add");
}

TYPED_TEST(Bodies, DropoutKeepsAboutOneMinusPAndScales) {
  using T = TypeParam;
  const std::int64_t n = 20000;
  const float p = 0.25f;
  const auto x = to_storage<T>(random_floats(n, 8));
  std::vector<T> y(n), dx(n);
  std::vector<std::uint8_t> mask(n), mask2(n);
  over(n, [&](std::int64_t i) { dropout_fwd_body(i, y.data(), mask.data(), x.data(), p, 42); });
  std::vector<T> y2(n);
  over(n, [&](std::int64_t i) { dropout_fwd_body(i, y2.data(), mask2.data(), x.data(), p, 42); });
  EXPECT_EQ(mask, mask2) << "same seed must give the same mask (recompute)";
  std::int64_t kept = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    kept += mask[i];
    const double want = mask[i] ? to_f32(x[i]) / (1 - p) : 0.0;
    ASSERT_NEAR(to_f32(y[i]), want, tolerance<T>() * (1 + std::fabs(want)));
  }
  EXPECT_NEAR(double(kept) / n, 1 - p, 0.02);
  over(n, [&](std::int64_t i) { dropout_bwd_body(i, dx.data(), x.data(), mask.data(), p); });
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(to_f32(dx[i]), to_f32(y[i]));
  std::vector<std::uint8_t> other(n);
  over(n, [&](std::int64_t i) { dropout_fwd_body(i, y2.data(), other.data(), x.data(), p, 43); });
  EXPECT_NE(mask, other) << "another seed must give another mask";
}

TYPED_TEST(Bodies, RopeMatchesCpuReferenceAndBackwardInverts) {
  using T = TypeParam;
  RopeShape s{2, 5, 4, 2, 8};  // GQA: 4 q heads, 2 kv heads
  const std::int64_t n = s.elements();
  const auto in = to_storage<T>(random_floats(n, 9));
  std::vector<T> out(n), back(n);
  over(n, [&](std::int64_t i) { rope_body(i, out.data(), in.data(), s, false); });
  std::vector<float> in_f(n), want_f(n);
  for (std::int64_t i = 0; i < n; ++i) in_f[i] = to_f32(in[i]);
  cpu::rope_fwd(want_f.data(), in_f.data(), s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
  const std::vector<double> want(want_f.begin(), want_f.end());
  expect_near_all(to_double(out), want, std::max(tolerance<T>(), 1e-5), "rope");
  // v columns are copied bit for bit
  const std::int64_t W = s.row_width();
  for (std::int64_t i = 0; i < n; ++i)
    if (i % W >= (s.heads + s.kv_heads) * s.head_dim) ASSERT_EQ(to_f32(out[i]), to_f32(in[i]));
  over(n, [&](std::int64_t i) { rope_body(i, back.data(), out.data(), s, true); });
  expect_near_all(to_double(back), to_double(in), 3 * tolerance<T>(), "rope inverse");
}

TYPED_TEST(Bodies, EmbeddingForwardAndBackward) {
  using T = TypeParam;
  const std::int64_t B = 2, S = 3, H = 4, V = 5, P = 6, M = B * S;
  const std::vector<std::int32_t> tokens = {1, 4, 1, 0, 4, 4};
  const auto wte = to_storage<T>(random_floats(V * H, 10));
  const auto wpe = to_storage<T>(random_floats(P * H, 11));
  std::vector<T> x(M * H);
  over(M * H, [&](std::int64_t i) {
    embedding_fwd_body(i, x.data(), tokens.data(), wte.data(), wpe.data(), S, H);
  });
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t h = 0; h < H; ++h)
      ASSERT_NEAR(to_f32(x[m * H + h]),
                  double(to_f32(wte[tokens[m] * H + h])) + to_f32(wpe[(m % S) * H + h]),
                  tolerance<T>() * 4);
  const auto dx = to_storage<T>(random_floats(M * H, 12));
  std::vector<T> dwte(V * H, from_f32<T>(0)), dwpe(P * H, from_f32<T>(0));
  over(H, [&](std::int64_t h) {
    embedding_bwd_body(h, dwte.data(), dwpe.data(), dx.data(), tokens.data(), M, S, H);
  });
  std::vector<double> want_te(V * H, 0.0), want_pe(P * H, 0.0);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t h = 0; h < H; ++h) {
      want_te[tokens[m] * H + h] += to_f32(dx[m * H + h]);
      want_pe[(m % S) * H + h] += to_f32(dx[m * H + h]);
    }
  expect_near_all(to_double(dwte), want_te, 4 * tolerance<T>(), "dwte");
  expect_near_all(to_double(dwpe), want_pe, 4 * tolerance<T>(), "dwpe");
}

// Finite-difference check of a row-normalisation backward: L = sum(y * r) for a fixed r.
template <typename Fwd>
std::vector<double> numeric_grad_x(std::vector<float> x, const std::vector<float>& r, Fwd fwd) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    const float h = 1e-2f;
    x[i] = keep + h;
    const double lp = fwd(x, r);
    x[i] = keep - h;
    const double lm = fwd(x, r);
    x[i] = keep;
    g[i] = (lp - lm) / (2.0 * h);
  }
  return g;
}

TEST(BodiesF32, LayerNormForwardAndBackward) {
  const std::int64_t M = 3, H = 16;
  const auto x = random_floats(M * H, 13);
  const auto w = random_floats(H, 14, 0.5f, 1.5f);
  const auto b = random_floats(H, 15);
  const auto r = random_floats(M * H, 16);
  std::vector<float> y(M * H), mean(M), rstd(M);
  over(M, [&](std::int64_t m) {
    layernorm_fwd_body(m, y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), H,
                       1e-5f);
  });
  for (std::int64_t m = 0; m < M; ++m) {
    double mu = 0, var = 0;
    for (std::int64_t h = 0; h < H; ++h) mu += x[m * H + h];
    mu /= H;
    for (std::int64_t h = 0; h < H; ++h) var += (x[m * H + h] - mu) * (x[m * H + h] - mu);
    var /= H;
    EXPECT_NEAR(mean[m], mu, 1e-5);
    EXPECT_NEAR(rstd[m], 1 / std::sqrt(var + 1e-5), 1e-4);
    for (std::int64_t h = 0; h < H; ++h)
      EXPECT_NEAR(y[m * H + h], (x[m * H + h] - mu) / std::sqrt(var + 1e-5) * w[h] + b[h], 1e-4);
  }
  std::vector<float> dx(M * H), dw(H), db(H);
  over(M, [&](std::int64_t m) {
    layernorm_bwd_dx_body(m, dx.data(), r.data(), x.data(), w.data(), mean.data(), rstd.data(), H);
  });
  over(H, [&](std::int64_t h) {
    layernorm_bwd_dw_body(h, dw.data(), db.data(), r.data(), x.data(), mean.data(), rstd.data(), M,
                          H, false);
  });
  auto loss = [&](const std::vector<float>& xs, const std::vector<float>& rs) {
    std::vector<float> ys(M * H), mu(M), rsd(M);
    for (std::int64_t m = 0; m < M; ++m)
      layernorm_fwd_body(m, ys.data(), mu.data(), rsd.data(), xs.data(), w.data(), b.data(), H,
                         1e-5f);
    double l = 0;
    for (std::int64_t i = 0; i < M * H; ++i) l += double(ys[i]) * rs[i];
    return l;
  };
  const auto g = numeric_grad_x(x, r, loss);
  for (std::int64_t i = 0; i < M * H; ++i) EXPECT_NEAR(dx[i], g[i], 2e-2) << i;
  for (std::int64_t h = 0; h < H; ++h) {
    double sw = 0, sb = 0;
    for (std::int64_t m = 0; m < M; ++m) {
      sw += r[m * H + h] * (x[m * H + h] - mean[m]) * rstd[m];
      sb += r[m * H + h];
    }
    EXPECT_NEAR(dw[h], sw, 1e-4);
    EXPECT_NEAR(db[h], sb, 1e-4);
  }
  // accumulate adds into what is there
  std::vector<float> dw2(H, 1.0f), db2(H, 1.0f);
  over(H, [&](std::int64_t h) {
    layernorm_bwd_dw_body(h, dw2.data(), db2.data(), r.data(), x.data(), mean.data(), rstd.data(),
                          M, H, true);
  });
  for (std::int64_t h = 0; h < H; ++h) EXPECT_NEAR(dw2[h], dw[h] + 1.0f, 1e-5);
}

TEST(BodiesF32, RmsNormForwardAndBackward) {
  const std::int64_t M = 4, H = 12;
  const auto x = random_floats(M * H, 17);
  const auto w = random_floats(H, 18, 0.5f, 1.5f);
  const auto r = random_floats(M * H, 19);
  std::vector<float> y(M * H), rstd(M);
  over(M, [&](std::int64_t m) {
    rmsnorm_fwd_body(m, y.data(), rstd.data(), x.data(), w.data(), H, 1e-6f);
  });
  for (std::int64_t m = 0; m < M; ++m) {
    double sq = 0;
    for (std::int64_t h = 0; h < H; ++h) sq += double(x[m * H + h]) * x[m * H + h];
    const double rs = 1 / std::sqrt(sq / H + 1e-6);
    EXPECT_NEAR(rstd[m], rs, 1e-4);
    for (std::int64_t h = 0; h < H; ++h) EXPECT_NEAR(y[m * H + h], x[m * H + h] * rs * w[h], 1e-4);
  }
  std::vector<float> dx(M * H), dw(H);
  over(M, [&](std::int64_t m) {
    rmsnorm_bwd_dx_body(m, dx.data(), r.data(), x.data(), w.data(), rstd.data(), H);
  });
  over(H, [&](std::int64_t h) {
    rmsnorm_bwd_dw_body(h, dw.data(), r.data(), x.data(), rstd.data(), M, H, false);
  });
  auto loss = [&](const std::vector<float>& xs, const std::vector<float>& rs) {
    std::vector<float> ys(M * H), rsd(M);
    for (std::int64_t m = 0; m < M; ++m)
      rmsnorm_fwd_body(m, ys.data(), rsd.data(), xs.data(), w.data(), H, 1e-6f);
    double l = 0;
    for (std::int64_t i = 0; i < M * H; ++i) l += double(ys[i]) * rs[i];
    return l;
  };
  const auto g = numeric_grad_x(x, r, loss);
  for (std::int64_t i = 0; i < M * H; ++i) EXPECT_NEAR(dx[i], g[i], 2e-2) << i;
  for (std::int64_t h = 0; h < H; ++h) {
    double sw = 0;
    for (std::int64_t m = 0; m < M; ++m) sw += r[m * H + h] * x[m * H + h] * rstd[m];
    EXPECT_NEAR(dw[h], sw, 1e-4);
  }
}

TYPED_TEST(Bodies, CausalMaskSoftmaxAndBackward) {
  using T = TypeParam;
  const std::int64_t blocks = 3, S = 7, rows = blocks * S, n = rows * S;
  auto scores = to_storage<T>(random_floats(n, 20, -4, 4));
  over(n, [&](std::int64_t i) { causal_mask_body(i, scores.data(), S); });
  std::vector<T> probs(n), ds(n);
  over(rows, [&](std::int64_t r) { softmax_fwd_body(r, probs.data(), scores.data(), S); });
  const auto dp = to_storage<T>(random_floats(n, 21));
  over(rows, [&](std::int64_t r) { softmax_bwd_body(r, ds.data(), dp.data(), probs.data(), S); });
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t q = r % S;
    double mx = -1e30, sum = 0;
    for (std::int64_t c = 0; c <= q; ++c) mx = std::max(mx, double(to_f32(scores[r * S + c])));
    for (std::int64_t c = 0; c <= q; ++c) sum += std::exp(to_f32(scores[r * S + c]) - mx);
    double dot = 0;
    for (std::int64_t c = 0; c < S; ++c) {
      const double p = c <= q ? std::exp(to_f32(scores[r * S + c]) - mx) / sum : 0.0;
      if (c > q) ASSERT_TRUE(std::isinf(to_f32(scores[r * S + c])));
      ASSERT_NEAR(to_f32(probs[r * S + c]), p, tolerance<T>());
      dot += double(to_f32(dp[r * S + c])) * to_f32(probs[r * S + c]);
    }
    for (std::int64_t c = 0; c < S; ++c) {
      const double p = to_f32(probs[r * S + c]);
      ASSERT_NEAR(to_f32(ds[r * S + c]), p * (to_f32(dp[r * S + c]) - dot), 2 * tolerance<T>());
    }
  }
}

TYPED_TEST(Bodies, CrossEntropy) {
  using T = TypeParam;
  const std::int64_t M = 6, V = 11;
  const auto logits = to_storage<T>(random_floats(M * V, 22, -3, 3));
  const std::vector<std::int32_t> targets = {0, 10, 3, 3, 7, 1};
  std::vector<float> lse(M), loss(1);
  over(M, [&](std::int64_t m) { cross_entropy_lse_body(m, lse.data(), logits.data(), V); });
  cross_entropy_loss_body(loss.data(), lse.data(), logits.data(), targets.data(), M, V);
  std::vector<T> dl(M * V);
  over(M * V, [&](std::int64_t i) {
    cross_entropy_bwd_body(i, dl.data(), logits.data(), targets.data(), lse.data(), M, V);
  });
  double want_loss = 0;
  for (std::int64_t m = 0; m < M; ++m) {
    double sum = 0;
    for (std::int64_t v = 0; v < V; ++v) sum += std::exp(double(to_f32(logits[m * V + v])));
    const double l = std::log(sum);
    EXPECT_NEAR(lse[m], l, 1e-5);
    want_loss += l - to_f32(logits[m * V + targets[m]]);
    for (std::int64_t v = 0; v < V; ++v) {
      const double g = (std::exp(to_f32(logits[m * V + v]) - l) - (v == targets[m])) / M;
      ASSERT_NEAR(to_f32(dl[m * V + v]), g, tolerance<T>());
    }
  }
  EXPECT_NEAR(loss[0], want_loss / M, 1e-5);
}

TYPED_TEST(Bodies, AdamWWithAndWithoutMaster) {
  using T = TypeParam;
  const std::int64_t n = 50;
  const auto wf = random_floats(n, 23);
  const auto gf = random_floats(n, 24);
  auto w = to_storage<T>(wf);
  const auto grad = to_storage<T>(gf);
  std::vector<float> m(n, 0.1f), v(n, 0.2f), master(n);
  for (std::int64_t i = 0; i < n; ++i) master[i] = wf[i];
  AdamWParams p{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 3};
  over(n, [&](std::int64_t i) {
    adamw_body(i, w.data(), grad.data(), m.data(), v.data(), master.data(), p);
  });
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = to_f32(grad[i]);
    double param = wf[i];
    param -= 1e-2 * 0.1 * param;
    const double mi = 0.9 * 0.1 + 0.1 * g, vi = 0.999 * 0.2 + 0.001 * g * g;
    param -=
        1e-2 * (mi / (1 - std::pow(0.9, 3))) / (std::sqrt(vi / (1 - std::pow(0.999, 3))) + 1e-8);
    EXPECT_NEAR(m[i], mi, 1e-6);
    EXPECT_NEAR(v[i], vi, 1e-6);
    EXPECT_NEAR(master[i], param, 1e-5);
    EXPECT_NEAR(to_f32(w[i]), param, tolerance<T>() * (1 + std::fabs(param)));
  }
}

TYPED_TEST(Bodies, SgdMomentum) {
  using T = TypeParam;
  const std::int64_t n = 40;
  const auto wf = random_floats(n, 25);
  auto w = to_storage<T>(wf);
  const auto grad = to_storage<T>(random_floats(n, 26));
  std::vector<float> mom(n, 0.5f);
  SgdParams p{0.1f, 0.9f, 0.0f};
  std::vector<double> w0 = to_double(w);
  over(n, [&](std::int64_t i) { sgd_body(i, w.data(), grad.data(), mom.data(), nullptr, p); });
  for (std::int64_t i = 0; i < n; ++i) {
    const double buf = 0.9 * 0.5 + to_f32(grad[i]);
    EXPECT_NEAR(mom[i], buf, 1e-6);
    EXPECT_NEAR(to_f32(w[i]), w0[i] - 0.1 * buf, tolerance<T>() * (1 + std::fabs(w0[i])));
  }
}

}  // namespace
}  // namespace vrambench::cuda
