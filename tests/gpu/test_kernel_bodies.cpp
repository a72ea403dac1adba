// Runs the __host__ __device__ bodies of the CUDA kernels over their whole grid on the CPU and
// compares with plain references written independently here (double math) or with the CPU
// reference kernels (kernels/cpu). Row bodies run with several lane counts, their parts added as
// the GPU's block reductions add them. No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cpu/attention.h"
#include "cpu/cross_entropy.h"
#include "cpu/embedding.h"
#include "cpu/layernorm.h"
#include "cpu/rmsnorm.h"
#include "cpu/rope.h"
#include "cuda/activation.h"
#include "cuda/add.h"
#include "cuda/attention.h"
#include "cuda/cast.h"
#include "cuda/collective.h"
#include "cuda/cross_entropy.h"
#include "cuda/dropout.h"
#include "cuda/embedding.h"
#include "cuda/layernorm.h"
#include "cuda/optimizer.h"
#include "cuda/reduce.h"
#include "cuda/rmsnorm.h"
#include "cuda/rope.h"
#include "program/program.h"

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

TYPED_TEST(Bodies, SwigluAndGegluForwardAndBackward) {
  using T = TypeParam;
  const std::int64_t n = 777;
  const auto gate = to_storage<T>(random_floats(n, 3, -5, 5));
  const auto up = to_storage<T>(random_floats(n, 4));
  const auto dy = to_storage<T>(random_floats(n, 5));
  for (const bool gelu_gate : {false, true}) {
    std::vector<T> y(n), dg(n), du(n);
    over(n, [&](std::int64_t i) {
      swiglu_fwd_body(i, y.data(), gate.data(), up.data(), n, n, gelu_gate);
    });
    over(n, [&](std::int64_t i) {
      swiglu_bwd_body(i, dg.data(), du.data(), dy.data(), gate.data(), up.data(), n, n, gelu_gate);
    });
    // Packed as Phi-3's gate|up (7 rows of 111: gate then up in each row of 222), the same
    // values land in the same places of each half.
    const std::int64_t rows = 7, width = n / rows;
    std::vector<T> packed(2 * n), dpacked(2 * n), yp(n);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < width; ++c) {
        packed[2 * r * width + c] = gate[r * width + c];
        packed[(2 * r + 1) * width + c] = up[r * width + c];
      }
    over(n, [&](std::int64_t i) {
      swiglu_fwd_body(i, yp.data(), packed.data(), packed.data() + width, width, 2 * width,
                      gelu_gate);
    });
    over(n, [&](std::int64_t i) {
      swiglu_bwd_body(i, dpacked.data(), dpacked.data() + width, dy.data(), packed.data(),
                      packed.data() + width, width, 2 * width, gelu_gate);
    });
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < width; ++c) {
        const std::int64_t i = r * width + c;
        ASSERT_EQ(to_f32(yp[i]), to_f32(y[i])) << i;
        ASSERT_EQ(to_f32(dpacked[2 * r * width + c]), to_f32(dg[i])) << i;
        ASSERT_EQ(to_f32(dpacked[(2 * r + 1) * width + c]), to_f32(du[i])) << i;
      }
    std::vector<double> wy(n), wdg(n), wdu(n);
    for (std::int64_t i = 0; i < n; ++i) {
      const double g = to_f32(gate[i]), u = to_f32(up[i]), d = to_f32(dy[i]);
      auto act = [gelu_gate](double a) {
        return gelu_gate
                   ? 0.5 * a * (1 + std::tanh(std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a)))
                   : a / (1 + std::exp(-a));
      };
      wy[i] = act(g) * u;
      wdu[i] = d * act(g);
      const double h = 1e-5;
      wdg[i] = d * u * (act(g + h) - act(g - h)) / (2 * h);
    }
    const char* what = gelu_gate ? "geglu" : "swiglu";
    expect_near_all(to_double(y), wy, tolerance<T>(), what);
    expect_near_all(to_double(du), wdu, tolerance<T>(), what);
    expect_near_all(to_double(dg), wdg, std::max(tolerance<T>(), 1e-4), what);
  }
}

TYPED_TEST(Bodies, SoftcapForwardAndBackwardKeepMaskedScores) {
  using T = TypeParam;
  const std::int64_t n = 513;
  const float cap = 5.0f;
  auto xs = random_floats(n, 6, -20, 20);
  xs[7] = -std::numeric_limits<float>::infinity();  // a masked score
  const auto x = to_storage<T>(xs);
  const auto dy = to_storage<T>(random_floats(n, 7));
  std::vector<T> y(n), dx(n);
  over(n, [&](std::int64_t i) { softcap_fwd_body(i, y.data(), x.data(), cap); });
  over(n, [&](std::int64_t i) { softcap_bwd_body(i, dx.data(), dy.data(), y.data(), cap); });
  std::vector<double> wy(n), wdx(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = to_f32(x[i]);
    if (std::isinf(v)) {
      wy[i] = 0.0;  // compared below
      continue;
    }
    wy[i] = cap * std::tanh(v / cap);
    const double t = std::tanh(v / cap);
    wdx[i] = to_f32(dy[i]) * (1 - t * t);
  }
  EXPECT_TRUE(std::isinf(to_f32(y[7])) && to_f32(y[7]) < 0);
  EXPECT_EQ(to_f32(dx[7]), 0.0f);
  y[7] = from_f32<T>(0.0f);
  expect_near_all(to_double(y), wy, tolerance<T>() * cap, "softcap");
  expect_near_all(to_double(dx), wdx, std::max(tolerance<T>(), 1e-3) * 4, "softcap_bwd");
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

// Autocast's (and QLoRA's) fp32 residual stream takes a 16-bit branch: c and a fp32, b of T; the
// sum is the fp32 sum of what is stored, exactly. And the other way: a 16-bit stream and an fp32
// b, rounded once.
TYPED_TEST(Bodies, AddTakesABranchOfAnotherDtype) {
  using T = TypeParam;
  const std::vector<float> a = random_floats(100, 61);
  const auto b = to_storage<T>(random_floats(100, 62));
  std::vector<float> c(100);
  over(100, [&](std::int64_t i) { add_body(i, c.data(), a.data(), b.data()); });
  for (int i = 0; i < 100; ++i) ASSERT_EQ(c[i], a[i] + to_f32(b[i])) << i;
  const auto a16 = to_storage<T>(a);
  const std::vector<float> b32 = random_floats(100, 63);
  std::vector<T> c16(100);
  over(100, [&](std::int64_t i) { add_body(i, c16.data(), a16.data(), b32.data()); });
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(to_f32(c16[i]), to_f32(from_f32<T>(to_f32(a16[i]) + b32[i]))) << i;
}

// The rehearsed all-gather of a shard of another dtype (fp32 master rows into a 16-bit copy, say):
// the full tensor is the shard repeated, element for element, rounded to its type.
TYPED_TEST(Bodies, GatherRepeatsTheShardInTheFullTensorsType) {
  using T = TypeParam;
  const std::int64_t shard_n = 7, full_n = 30;  // the last repeat cut short
  const std::vector<float> shard = random_floats(shard_n, 66);
  std::vector<T> full(full_n);
  over(full_n, [&](std::int64_t i) { gather_body(i, full.data(), shard.data(), shard_n); });
  for (std::int64_t i = 0; i < full_n; ++i)
    ASSERT_EQ(to_f32(full[i]), to_f32(from_f32<T>(shard[i % shard_n]))) << i;
}

// A LoRA adapter's columns of a layer output of another dtype: the forward adds the adapter's
// product into y's columns [col, +N) (the sum in fp32, stored in y's dtype), the backward copies
// dy's columns out into the adapter's dtype. Nothing outside the block changes.
TYPED_TEST(Bodies, CastRowsReadsAndAddsIntoABlockOfColumns) {
  using T = TypeParam;
  const std::int64_t M = 5, Out = 11, N = 4, col = 3;
  const auto y0 = to_storage<T>(random_floats(M * Out, 64));
  const std::vector<float> p = random_floats(M * N, 65);
  std::vector<T> y = y0;
  over(M * N,
       [&](std::int64_t i) { cast_rows_body(i, y.data() + col, Out, p.data(), N, N, true); });
  for (std::int64_t r = 0; r < M; ++r)
    for (std::int64_t c = 0; c < Out; ++c) {
      const std::int64_t i = r * Out + c;
      const bool inside = c >= col && c < col + N;
      const float want =
          inside ? to_f32(from_f32<T>(to_f32(y0[i]) + p[r * N + c - col])) : to_f32(y0[i]);
      ASSERT_EQ(to_f32(y[i]), want) << r << "," << c;
    }
  std::vector<float> g(M * N, NAN);
  over(M * N,
       [&](std::int64_t i) { cast_rows_body(i, g.data(), N, y.data() + col, Out, N, false); });
  for (std::int64_t r = 0; r < M; ++r)
    for (std::int64_t c = 0; c < N; ++c)
      ASSERT_EQ(g[r * N + c], to_f32(y[r * Out + col + c])) << r << "," << c;
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

// ---- row bodies: the GPU adds the lanes' parts with a block reduction; here in lane order ------

template <typename F>
float lanes_sum(std::int64_t lanes, F part) {
  float sum = 0.0f;
  for (std::int64_t lane = 0; lane < lanes; ++lane) sum += part(lane);
  return sum;
}
template <typename F>
float lanes_max(std::int64_t lanes, F part) {
  float mx = -INFINITY;
  for (std::int64_t lane = 0; lane < lanes; ++lane) mx = std::max(mx, part(lane));
  return mx;
}

// Storage values as the floats the CPU reference reads.
template <typename T>
std::vector<float> as_floats(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_f32(v[i]);
  return out;
}
std::vector<double> widen(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// QLoRA's fp32 q|k|v is rotated into the attention's 16 bits, and its gradient back into fp32:
// the body reads one type and writes another, each element rotated in fp32 and rounded once.
TYPED_TEST(Bodies, RopeReadsAndWritesAnotherDtype) {
  using T = TypeParam;
  RopeShape s{2, 5, 4, 2, 8};
  const std::int64_t n = s.elements();
  const std::vector<float> in = random_floats(n, 66);
  std::vector<float> want(n), back_want(n);
  cpu::rope_fwd(want.data(), in.data(), s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
  std::vector<T> out(n);
  over(n, [&](std::int64_t i) { rope_body(i, out.data(), in.data(), s, false); });
  expect_near_all(to_double(out), widen(want), std::max(tolerance<T>(), 1e-6), "rope into T");
  const std::vector<float> out_f = as_floats(out);
  cpu::rope_bwd(back_want.data(), out_f.data(), s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
  std::vector<float> back(n);
  over(n, [&](std::int64_t i) { rope_body(i, back.data(), out.data(), s, true); });
  expect_near_all(widen(back), widen(back_want), 1e-6, "rope back into fp32");
}

// Lane counts that split a row unevenly (more lanes than columns included).
constexpr std::int64_t kLaneCounts[] = {1, 4, 7, 32};

TYPED_TEST(Bodies, LayerNormRowsMatchTheCpuReferenceForAnyLaneCount) {
  using T = TypeParam;
  const std::int64_t M = 5, H = 19;
  const auto x = to_storage<T>(random_floats(M * H, 13, -3, 3));
  const auto w = to_storage<T>(random_floats(H, 14, 0.5f, 1.5f));
  const auto b = to_storage<T>(random_floats(H, 15));
  const auto dy = to_storage<T>(random_floats(M * H, 16));
  std::vector<float> want_y(M * H), want_mean(M), want_rstd(M), want_dx(M * H), want_dw(H),
      want_db(H);
  const auto xf = as_floats(x), wf = as_floats(w), bf = as_floats(b), dyf = as_floats(dy);
  cpu::layernorm_fwd(want_y.data(), want_mean.data(), want_rstd.data(), xf.data(), wf.data(),
                     bf.data(), M, H, 1e-5f);
  cpu::layernorm_bwd(want_dx.data(), want_dw.data(), want_db.data(), dyf.data(), xf.data(),
                     wf.data(), want_mean.data(), want_rstd.data(), M, H);
  for (std::int64_t lanes : kLaneCounts) {
    SCOPED_TRACE(lanes);
    std::vector<T> y(M * H, from_f32<T>(NAN)), dx(M * H, from_f32<T>(NAN));
    std::vector<float> mean(M), rstd(M);
    for (std::int64_t m = 0; m < M; ++m) {
      const float mu =
          lanes_sum(lanes,
                    [&](std::int64_t l) { return layernorm_sum_part(m, l, lanes, x.data(), H); }) /
          static_cast<float>(H);
      const float rs = layernorm_rstd(
          lanes_sum(
              lanes,
              [&](std::int64_t l) { return layernorm_var_part(m, l, lanes, x.data(), H, mu); }),
          H, 1e-5f);
      for (std::int64_t l = 0; l < lanes; ++l)
        layernorm_fwd_write(m, l, lanes, y.data(), x.data(), w.data(), b.data(), H, mu, rs);
      mean[m] = mu;
      rstd[m] = rs;
      float sg = 0, sgx = 0;
      float part_g = 0, part_gx = 0;
      for (std::int64_t l = 0; l < lanes; ++l) {
        layernorm_dx_parts(m, l, lanes, dy.data(), x.data(), w.data(), mu, rs, H, &part_g,
                           &part_gx);
        sg += part_g;
        sgx += part_gx;
      }
      for (std::int64_t l = 0; l < lanes; ++l)
        layernorm_dx_write(m, l, lanes, dx.data(), dy.data(), x.data(), w.data(), mu, rs, H,
                           sg / static_cast<float>(H), sgx / static_cast<float>(H));
    }
    expect_near_all(widen(mean), widen(want_mean), 1e-5, "mean");
    expect_near_all(widen(rstd), widen(want_rstd), 1e-5, "rstd");
    expect_near_all(to_double(y), widen(want_y), tolerance<T>(), "y");
    expect_near_all(to_double(dx), widen(want_dx), 2 * tolerance<T>(), "dx");
  }
  // dw, db: one pass, and two stages over chunks of several sizes, with and without accumulate.
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate);
    const std::vector<float> old = random_floats(H, 17);
    std::vector<double> wdw(H), wdb(H);
    for (std::int64_t h = 0; h < H; ++h) {
      wdw[h] = want_dw[h] + (accumulate ? to_f32(from_f32<T>(old[h])) : 0.0);
      wdb[h] = want_db[h] + (accumulate ? to_f32(from_f32<T>(old[h])) : 0.0);
    }
    std::vector<T> dw = to_storage<T>(old), db = to_storage<T>(old);
    over(H, [&](std::int64_t h) {
      layernorm_bwd_dw_body(h, dw.data(), db.data(), dy.data(), x.data(), want_mean.data(),
                            want_rstd.data(), M, H, accumulate);
    });
    expect_near_all(to_double(dw), wdw, 2 * tolerance<T>(), "dw one pass");
    expect_near_all(to_double(db), wdb, 2 * tolerance<T>(), "db one pass");
    for (std::int64_t chunk_rows : {1, 2, 4}) {
      SCOPED_TRACE(chunk_rows);
      const std::int64_t chunks = ceil_div(M, chunk_rows);
      std::vector<float> partial(2 * chunks * H, NAN);
      for (std::int64_t k = 0; k < chunks; ++k)
        over(H, [&](std::int64_t h) {
          layernorm_dw_partial_body(h, k, partial.data(), dy.data(), x.data(), want_mean.data(),
                                    want_rstd.data(), M, H, chunk_rows, chunks, true);
        });
      dw = to_storage<T>(old);
      db = to_storage<T>(old);
      for (std::int64_t h = 0; h < H; ++h) {
        const float sw = lanes_sum(3, [&](std::int64_t l) {
          return column_finish_part(h, l, 3, partial.data(), chunks, H);
        });
        const float sb = lanes_sum(3, [&](std::int64_t l) {
          return column_finish_part(h, l, 3, partial.data() + chunks * H, chunks, H);
        });
        column_store(h, dw.data(), sw, accumulate);
        column_store(h, db.data(), sb, accumulate);
      }
      expect_near_all(to_double(dw), wdw, 2 * tolerance<T>(), "dw two stages");
      expect_near_all(to_double(db), wdb, 2 * tolerance<T>(), "db two stages");
    }
  }
}

TYPED_TEST(Bodies, RmsNormRowsMatchTheCpuReferenceForAnyLaneCount) {
  using T = TypeParam;
  const std::int64_t M = 4, H = 13;
  const auto x = to_storage<T>(random_floats(M * H, 18));
  const auto w = to_storage<T>(random_floats(H, 19, 0.5f, 1.5f));
  const auto dy = to_storage<T>(random_floats(M * H, 20));
  const auto xf = as_floats(x), wf = as_floats(w), dyf = as_floats(dy);
  std::vector<float> want_y(M * H), want_rstd(M), want_dx(M * H), want_dw(H);
  // Gemma's (1 + w) is the reference's norm over w + 1; dw is the same either way.
  for (const float w_offset : {1.0f, 0.0f}) {
    std::vector<float> w_eff = wf;
    for (float& v : w_eff) v += w_offset;
    cpu::rmsnorm_fwd(want_y.data(), want_rstd.data(), xf.data(), w_eff.data(), M, H, 1e-6f);
    cpu::rmsnorm_bwd(want_dx.data(), want_dw.data(), dyf.data(), xf.data(), w_eff.data(),
                     want_rstd.data(), M, H);
    for (std::int64_t lanes : kLaneCounts) {
      SCOPED_TRACE(::testing::Message() << lanes << " lanes, w_offset " << w_offset);
      std::vector<T> y(M * H, from_f32<T>(NAN)), dx(M * H, from_f32<T>(NAN));
      std::vector<float> rstd(M);
      for (std::int64_t m = 0; m < M; ++m) {
        const float rs = rmsnorm_rstd(
            lanes_sum(lanes,
                      [&](std::int64_t l) { return rmsnorm_sq_part(m, l, lanes, x.data(), H); }),
            H, 1e-6f);
        for (std::int64_t l = 0; l < lanes; ++l)
          rmsnorm_fwd_write(m, l, lanes, y.data(), x.data(), w.data(), H, rs, w_offset);
        rstd[m] = rs;
        const float mean_gx = lanes_sum(lanes,
                                        [&](std::int64_t l) {
                                          return rmsnorm_dx_part(m, l, lanes, dy.data(), x.data(),
                                                                 w.data(), rs, H, w_offset);
                                        }) /
                              static_cast<float>(H);
        for (std::int64_t l = 0; l < lanes; ++l)
          rmsnorm_dx_write(m, l, lanes, dx.data(), dy.data(), x.data(), w.data(), rs, H, mean_gx,
                           w_offset);
      }
      expect_near_all(widen(rstd), widen(want_rstd), 1e-5, "rstd");
      expect_near_all(to_double(y), widen(want_y), tolerance<T>(), "y");
      expect_near_all(to_double(dx), widen(want_dx), 2 * tolerance<T>(), "dx");
    }
  }
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate);
    const std::vector<float> old = random_floats(H, 21);
    std::vector<double> wdw(H);
    for (std::int64_t h = 0; h < H; ++h)
      wdw[h] = want_dw[h] + (accumulate ? to_f32(from_f32<T>(old[h])) : 0.0);
    std::vector<T> dw = to_storage<T>(old);
    over(H, [&](std::int64_t h) {
      rmsnorm_bwd_dw_body(h, dw.data(), dy.data(), x.data(), want_rstd.data(), M, H, accumulate);
    });
    expect_near_all(to_double(dw), wdw, 2 * tolerance<T>(), "dw one pass");
    for (std::int64_t chunk_rows : {1, 3}) {
      const std::int64_t chunks = ceil_div(M, chunk_rows);
      std::vector<float> partial(chunks * H, NAN);
      for (std::int64_t k = 0; k < chunks; ++k)
        over(H, [&](std::int64_t h) {
          rmsnorm_dw_partial_body(h, k, partial.data(), dy.data(), x.data(), want_rstd.data(), M, H,
                                  chunk_rows);
        });
      dw = to_storage<T>(old);
      for (std::int64_t h = 0; h < H; ++h)
        column_store(h, dw.data(),
                     lanes_sum(2,
                               [&](std::int64_t l) {
                                 return column_finish_part(h, l, 2, partial.data(), chunks, H);
                               }),
                     accumulate);
      expect_near_all(to_double(dw), wdw, 2 * tolerance<T>(), "dw two stages");
    }
  }
}

// LlamaRMSNorm upcasts its input: the hf step's x and dx are fp32 beside a 16-bit y, dy and w,
// which the bodies take as two types. y and dw round to T; dx stays fp32, as exact as the
// reference computed from the same values.
TYPED_TEST(Bodies, RmsNormTakesAnFp32InputBesideItsDtype) {
  using T = TypeParam;
  const std::int64_t M = 3, H = 17, lanes = 4;
  const std::vector<float> x = random_floats(M * H, 22);
  const auto w = to_storage<T>(random_floats(H, 23, 0.5f, 1.5f));
  const auto dy = to_storage<T>(random_floats(M * H, 24));
  const auto wf = as_floats(w), dyf = as_floats(dy);
  std::vector<float> want_y(M * H), want_rstd(M), want_dx(M * H), want_dw(H);
  cpu::rmsnorm_fwd(want_y.data(), want_rstd.data(), x.data(), wf.data(), M, H, 1e-6f);
  cpu::rmsnorm_bwd(want_dx.data(), want_dw.data(), dyf.data(), x.data(), wf.data(),
                   want_rstd.data(), M, H);
  std::vector<T> y(M * H), dw(H);
  std::vector<float> dx(M * H, NAN);
  for (std::int64_t m = 0; m < M; ++m) {
    const float rs = rmsnorm_rstd(
        lanes_sum(lanes, [&](std::int64_t l) { return rmsnorm_sq_part(m, l, lanes, x.data(), H); }),
        H, 1e-6f);
    EXPECT_NEAR(rs, want_rstd[m], 1e-5 * want_rstd[m]);
    const float mean_gx =
        lanes_sum(lanes,
                  [&](std::int64_t l) {
                    return rmsnorm_dx_part(m, l, lanes, dy.data(), x.data(), w.data(), rs, H, 0.0f);
                  }) /
        static_cast<float>(H);
    for (std::int64_t l = 0; l < lanes; ++l) {
      rmsnorm_fwd_write(m, l, lanes, y.data(), x.data(), w.data(), H, rs, 0.0f);
      rmsnorm_dx_write(m, l, lanes, dx.data(), dy.data(), x.data(), w.data(), rs, H, mean_gx, 0.0f);
    }
  }
  over(H, [&](std::int64_t h) {
    rmsnorm_bwd_dw_body(h, dw.data(), dy.data(), x.data(), want_rstd.data(), M, H, false);
  });
  expect_near_all(to_double(y), widen(want_y), tolerance<T>(), "y");
  expect_near_all(widen(dx), widen(want_dx), 1e-5, "dx in fp32");
  expect_near_all(to_double(dw), widen(want_dw), 2 * tolerance<T>(), "dw");
}

// A norm's weight (and its gradient) in whichever dtype it is stored in, beside activations of T:
// prepare_model_for_kbit_training and autocast keep it fp32. AnyFloats reads and AnyFloatsOut
// writes each dtype exactly as a typed pointer does, bit for bit.
TYPED_TEST(Bodies, RmsNormReadsAndWritesItsWeightInAnyDtype) {
  using T = TypeParam;
  const std::int64_t M = 3, H = 13, lanes = 4;
  const auto x = to_storage<T>(random_floats(M * H, 71));
  const auto dy = to_storage<T>(random_floats(M * H, 72));
  const std::vector<float> rstd = {0.7f, 1.1f, 0.9f};
  auto check = [&](auto w_tag, DType w_dtype) {
    using W = decltype(w_tag);
    SCOPED_TRACE(dtype_name(w_dtype));
    const auto w = to_storage<W>(random_floats(H, 73, 0.5f, 1.5f));
    const AnyFloats any{w.data(), w_dtype};
    std::vector<T> y_typed(M * H), y_any(M * H), dx_typed(M * H), dx_any(M * H);
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t l = 0; l < lanes; ++l) {
        rmsnorm_fwd_write(m, l, lanes, y_typed.data(), x.data(), w.data(), H, rstd[m], 1.0f);
        rmsnorm_fwd_write(m, l, lanes, y_any.data(), x.data(), any, H, rstd[m], 1.0f);
        EXPECT_EQ(rmsnorm_dx_part(m, l, lanes, dy.data(), x.data(), w.data(), rstd[m], H, 0.0f),
                  rmsnorm_dx_part(m, l, lanes, dy.data(), x.data(), any, rstd[m], H, 0.0f));
        rmsnorm_dx_write(m, l, lanes, dx_typed.data(), dy.data(), x.data(), w.data(), rstd[m], H,
                         0.3f, 0.0f);
        rmsnorm_dx_write(m, l, lanes, dx_any.data(), dy.data(), x.data(), any, rstd[m], H, 0.3f,
                         0.0f);
      }
    EXPECT_EQ(to_double(y_typed), to_double(y_any));
    EXPECT_EQ(to_double(dx_typed), to_double(dx_any));
    // dw added into what is there (accumulate), in the weight's dtype.
    std::vector<W> dw_typed = w, dw_any = w;
    const AnyFloatsOut out{dw_any.data(), w_dtype};
    over(H, [&](std::int64_t h) {
      rmsnorm_bwd_dw_body(h, dw_typed.data(), dy.data(), x.data(), rstd.data(), M, H, true);
      rmsnorm_bwd_dw_body(h, out, dy.data(), x.data(), rstd.data(), M, H, true);
    });
    EXPECT_EQ(to_double(dw_typed), to_double(dw_any));
    EXPECT_NE(to_double(dw_typed), to_double(w));
  };
  check(float{}, DType::f32);
  check(__half{}, DType::f16);
  check(__nv_bfloat16{}, DType::bf16);
}

// The q/k norm weights' gradients as the kernels sum them: in one pass over all the tokens, and
// in two stages (partials per chunk of tokens, dq_w's block then dk_w's, then a sum over the
// chunks), both against the CPU reference's dq_w and dk_w. Chunks of 3 tokens leave the last
// one short.
TYPED_TEST(Bodies, QkNormWeightGradientsInOnePassAndInTwoStages) {
  using T = TypeParam;
  const QkNormShape s{7, 4, 2, 8};
  const std::int64_t Q = s.width(), n = s.tokens * Q;
  const auto qkv = to_storage<T>(random_floats(n, 81));
  const auto dy = to_storage<T>(random_floats(n, 82));
  const auto qw = random_floats(s.D, 83, 0.5f, 1.5f), kw = random_floats(s.D, 84, 0.5f, 1.5f);
  const auto qkvf = as_floats(qkv), dyf = as_floats(dy);
  std::vector<float> y(n), rstd(s.rows()), dqkv(n), want_dq(s.D), want_dk(s.D);
  cpu::qk_norm_fwd(y.data(), rstd.data(), qkvf.data(), qw.data(), kw.data(), s.tokens, s.A, s.K,
                   s.D, 1e-6f);
  cpu::qk_norm_bwd(dqkv.data(), want_dq.data(), want_dk.data(), dyf.data(), qkvf.data(), qw.data(),
                   kw.data(), rstd.data(), s.tokens, s.A, s.K, s.D);
  std::vector<double> one(2 * s.D);
  for (std::int64_t c = 0; c < 2 * s.D; ++c)
    one[c] = qk_norm_dw_part(c, dy.data(), qkv.data(), rstd.data(), s, 0, s.tokens);
  const std::int64_t chunk_tokens = 3, count = 3;
  std::vector<float> partial(count * 2 * s.D, NAN);
  for (std::int64_t chunk = 0; chunk < count; ++chunk)
    for (std::int64_t c = 0; c < 2 * s.D; ++c)
      qk_norm_dw_partial_body(c, chunk, partial.data(), dy.data(), qkv.data(), rstd.data(), s,
                              chunk_tokens, count);
  std::vector<double> two(2 * s.D, 0.0);
  for (std::int64_t chunk = 0; chunk < count; ++chunk)
    for (std::int64_t d = 0; d < s.D; ++d) {
      two[d] += partial[chunk * s.D + d];
      two[s.D + d] += partial[count * s.D + chunk * s.D + d];
    }
  std::vector<double> want(want_dq.begin(), want_dq.end());
  want.insert(want.end(), want_dk.begin(), want_dk.end());
  expect_near_all(one, want, 1e-5, "one pass");
  expect_near_all(two, want, 1e-5, "two stages");
  // A Qwen3 step of 8 x 4096 tokens (D 128) takes the two stages in Hopper's GEMM workspace: one
  // pass would leave 256 threads to sum a million rows each.
  EXPECT_GT(column_chunks(8 * 4096, 128, 2, 32 * MiB).count, 16);
}

// ---- column sums ------------------------------------------------------------------------------

TYPED_TEST(Bodies, ColumnSumTwoStagesAndOnePassMatchAPlainSum) {
  using T = TypeParam;
  const std::int64_t rows = 37, cols = 9;
  const auto in = to_storage<T>(random_floats(rows * cols, 22));
  const std::vector<float> old = random_floats(cols, 23);
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate);
    std::vector<double> want(cols, 0.0);
    for (std::int64_t c = 0; c < cols; ++c) {
      for (std::int64_t r = 0; r < rows; ++r) want[c] += to_f32(in[r * cols + c]);
      if (accumulate) want[c] += to_f32(from_f32<T>(old[c]));
    }
    std::vector<T> out = to_storage<T>(old);
    over(cols, [&](std::int64_t c) {
      column_sum_body(c, out.data(), in.data(), rows, cols, accumulate);
    });
    expect_near_all(to_double(out), want, tolerance<T>(), "one pass");
    for (std::int64_t chunk_rows : {1, 5, 16, 37}) {
      for (std::int64_t lanes : {1, 3, 16}) {
        SCOPED_TRACE(chunk_rows * 100 + lanes);
        const std::int64_t chunks = ceil_div(rows, chunk_rows);
        std::vector<float> partial(chunks * cols, NAN);
        for (std::int64_t k = 0; k < chunks; ++k)
          over(cols, [&](std::int64_t c) {
            column_sum_partial_body(c, k, partial.data(), in.data(), rows, cols, chunk_rows);
          });
        out = to_storage<T>(old);
        for (std::int64_t c = 0; c < cols; ++c)
          column_store(c, out.data(),
                       lanes_sum(lanes,
                                 [&](std::int64_t l) {
                                   return column_finish_part(c, l, lanes, partial.data(), chunks,
                                                             cols);
                                 }),
                       accumulate);
        expect_near_all(to_double(out), want, tolerance<T>(), "two stages");
      }
    }
  }
}

TEST(ColumnChunks, EveryChunkHasRowsAndThePartialsFitTheWorkspace) {
  for (std::int64_t rows : {0, 1, 3, 15, 16, 17, 100, 4096, 8192, 65536, 1 << 22})
    for (std::int64_t cols : {1, 5, 768, 3072, 4096, 786432})
      for (std::int64_t outputs : {1, 2})
        for (Bytes ws : {Bytes{0}, Bytes{4096}, 4 * MiB, 32 * MiB}) {
          const ColumnChunks c = column_chunks(rows, cols, outputs, ws);
          SCOPED_TRACE(::testing::Message()
                       << rows << " x " << cols << " x " << outputs << ", workspace " << ws << ": "
                       << c.count << " chunks of " << c.rows);
          const std::int64_t all = std::max<std::int64_t>(rows, 1);
          ASSERT_GE(c.count, 1);
          ASSERT_LE(c.count, kMaxColumnChunks);
          if (c.count == 1) {
            EXPECT_EQ(c.rows, all);
            continue;
          }
          EXPECT_LE(c.count * outputs * cols * 4, ws);
          EXPECT_GE(c.count * c.rows, all);        // every row in some chunk
          EXPECT_LT((c.count - 1) * c.rows, all);  // and no chunk empty
          EXPECT_GE(c.rows, 1);
        }
}

TEST(ColumnChunks, RealisticShapesSpreadOverManyChunks) {
  // gpt2 at B*S = 8192 rows: LayerNorm dw and db, a bias of 3072, on both workspace sizes.
  for (Bytes ws : {4 * MiB, 32 * MiB}) {
    EXPECT_GE(column_chunks(8192, 768, 2, ws).count, 256) << ws;
    EXPECT_GE(column_chunks(8192, 3072, 1, ws).count, 128) << ws;
  }
  // Nothing to gain: three rows, or columns that fill the GPU alone (dwpe of S*H columns).
  EXPECT_EQ(column_chunks(3, 5, 1, 32 * MiB).count, 1);
  EXPECT_EQ(column_chunks(8, 1024 * 768, 1, 32 * MiB).count, 1);
  // No workspace: one pass.
  EXPECT_EQ(column_chunks(8192, 768, 2, 0).count, 1);
}

// ---- embedding --------------------------------------------------------------------------------

TYPED_TEST(Bodies, EmbeddingForward) {
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
}

// The launcher's token sort, run body by body: counts, their exclusive prefix sum (the offsets
// kernel's job, done here by a loop), the scatter, then a bucket sum per (token, column).
template <typename T>
void sorted_token_grad(std::vector<T>& dwte, const std::vector<T>& dx,
                       const std::vector<std::int32_t>& tokens, std::int64_t H, std::int64_t V,
                       bool accumulate, std::int64_t pass) {
  const auto M = static_cast<std::int64_t>(tokens.size());
  std::vector<std::int32_t> counts(V), offsets(V + 1), sorted(pass, -1);
  for (std::int64_t first = 0; first < M; first += pass) {
    const std::int64_t n = std::min(pass, M - first);
    std::fill(counts.begin(), counts.end(), 0);
    over(n,
         [&](std::int64_t i) { embedding_count_body(i, counts.data(), tokens.data(), first, V); });
    std::int32_t run = 0;
    for (std::int64_t v = 0; v < V; ++v) {
      offsets[v] = run;
      run += counts[v];
      counts[v] = 0;
    }
    offsets[V] = run;
    over(n, [&](std::int64_t i) {
      embedding_scatter_body(i, sorted.data(), counts.data(), offsets.data(), tokens.data(), first,
                             V);
    });
    for (std::int64_t v = 0; v < V; ++v)
      over(H, [&](std::int64_t h) {
        embedding_bucket_body(v, h, dwte.data(), dx.data(), sorted.data(), offsets.data(), H,
                              accumulate || first > 0);
      });
  }
}

TYPED_TEST(Bodies, EmbeddingBackwardBySortedTokensMatchesTheCpuReference) {
  using T = TypeParam;
  const std::int64_t B = 3, S = 4, H = 5, V = 7, P = 6, M = B * S;
  const std::vector<std::int32_t> tokens = {1, 4, 1, 0, 4, 4, 6, 1, 1, 4, 0, 2};  // 3, 5 unused
  const auto dx = to_storage<T>(random_floats(M * H, 12));
  std::vector<float> want_te(V * H), want_pe(P * H);
  const auto dxf = as_floats(dx);
  cpu::embedding_bwd(want_te.data(), want_pe.data(), dxf.data(), tokens.data(), B, S, V, P, H);
  const std::vector<float> old = random_floats(V * H, 24);
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate);
    std::vector<double> want(V * H);
    for (std::int64_t i = 0; i < V * H; ++i)
      want[i] = want_te[i] + (accumulate ? to_f32(from_f32<T>(old[i])) : 0.0);
    // One pass holds every row; a workspace of two rows makes six passes, each after the first
    // adding to dwte as stored (the only extra rounding).
    for (Bytes ws : {Bytes{4096}, embedding_sort_bytes(2, V)}) {
      const std::int64_t pass = embedding_sort_rows(M, V, ws);
      SCOPED_TRACE(pass);
      ASSERT_GE(pass, 1);
      std::vector<T> dwte = to_storage<T>(old);
      sorted_token_grad(dwte, dx, tokens, H, V, accumulate, pass);
      expect_near_all(to_double(dwte), want, (pass < M ? 6 : 2) * tolerance<T>(), "dwte");
    }
    // Without room for the sort: one thread per column, adding in the storage type.
    std::vector<T> dwte = accumulate ? to_storage<T>(old) : std::vector<T>(V * H, from_f32<T>(0));
    over(H, [&](std::int64_t h) {
      embedding_dwte_column_body(h, dwte.data(), dx.data(), tokens.data(), M, H, V);
    });
    expect_near_all(to_double(dwte), want, 8 * tolerance<T>(), "dwte without the sort");
  }
  // Positions: dx as [B, S*H] summed over the batch; rows S.. of dwpe are zero (the launcher
  // clears them).
  std::vector<T> dwpe(S * H, from_f32<T>(NAN));
  over(S * H, [&](std::int64_t c) { column_sum_body(c, dwpe.data(), dx.data(), B, S * H, false); });
  const std::vector<float> want_first_rows(want_pe.begin(), want_pe.begin() + S * H);
  expect_near_all(to_double(dwpe), widen(want_first_rows), 2 * tolerance<T>(), "dwpe");
  for (std::int64_t i = S * H; i < P * H; ++i) ASSERT_EQ(want_pe[i], 0.0f);
}

TEST(EmbeddingSort, PassesFitTheWorkspace) {
  const std::int64_t V = 50257;
  // gpt2's vocabulary: 8192 rows sort in one pass in either workspace.
  EXPECT_EQ(embedding_sort_rows(8192, V, 4 * MiB), 8192);
  EXPECT_EQ(embedding_sort_rows(8192, V, 32 * MiB), 8192);
  // Counts and offsets alone do not fit: no sort.
  EXPECT_EQ(embedding_sort_rows(8192, V, embedding_sort_bytes(0, V)), 0);
  EXPECT_EQ(embedding_sort_rows(8192, V, 0), 0);
  for (std::int64_t rows : {1, 100, 8192, 1 << 24})
    for (Bytes ws : {embedding_sort_bytes(1, V), 4 * MiB, 32 * MiB}) {
      const std::int64_t pass = embedding_sort_rows(rows, V, ws);
      EXPECT_GE(pass, 1);
      EXPECT_LE(pass, rows);
      EXPECT_LE(embedding_sort_bytes(pass, V), ws);
      if (pass < rows) EXPECT_GT(embedding_sort_bytes(pass + 1, V), ws);  // as many as fit
    }
}

// ---- softmax ----------------------------------------------------------------------------------

TYPED_TEST(Bodies, CausalMaskSoftmaxAndBackwardMatchTheCpuReference) {
  using T = TypeParam;
  const std::int64_t blocks = 3, S = 7, rows = blocks * S + 1, n = rows * S;
  auto scores = to_storage<T>(random_floats(n, 25, -4, 4));
  over(blocks * S * S, [&](std::int64_t i) { causal_mask_body(i, scores.data(), S); });
  for (std::int64_t c = 0; c < S; ++c)  // a fully masked last row: zeros, not NaN
    scores[(rows - 1) * S + c] = from_f32<T>(-INFINITY);
  for (std::int64_t r = 0; r < blocks * S; ++r)
    for (std::int64_t c = 0; c < S; ++c)
      ASSERT_EQ(std::isinf(to_f32(scores[r * S + c])), c > r % S) << r << " " << c;
  const auto dp = to_storage<T>(random_floats(n, 26));
  const auto sf = as_floats(scores), dpf = as_floats(dp);
  std::vector<float> want_p(n), want_ds(n);
  cpu::softmax_fwd(want_p.data(), sf.data(), rows, S);
  for (std::int64_t lanes : kLaneCounts) {
    SCOPED_TRACE(lanes);
    std::vector<T> probs(n, from_f32<T>(NAN)), ds(n, from_f32<T>(NAN));
    for (std::int64_t r = 0; r < rows; ++r) {
      const float mx = lanes_max(
          lanes, [&](std::int64_t l) { return softmax_max_part(r, l, lanes, scores.data(), S); });
      const float sum = lanes_sum(lanes, [&](std::int64_t l) {
        return softmax_sum_part(r, l, lanes, scores.data(), S, mx);
      });
      for (std::int64_t l = 0; l < lanes; ++l)
        softmax_fwd_write(r, l, lanes, probs.data(), scores.data(), S, mx, sum);
    }
    expect_near_all(to_double(probs), widen(want_p), tolerance<T>(), "probs");
    // The backward from the probabilities as stored.
    const auto pf = as_floats(probs);
    cpu::softmax_bwd(want_ds.data(), dpf.data(), pf.data(), rows, S);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float dot = lanes_sum(lanes, [&](std::int64_t l) {
        return softmax_dot_part(r, l, lanes, dp.data(), probs.data(), S);
      });
      for (std::int64_t l = 0; l < lanes; ++l)
        softmax_bwd_write(r, l, lanes, ds.data(), dp.data(), probs.data(), S, dot);
    }
    expect_near_all(to_double(ds), widen(want_ds), 2 * tolerance<T>(), "dscores");
  }
}

// transformers' Llama asks for an fp32 softmax of 16-bit scores, and its backward writes the
// scores' gradient in 16 bits: the probabilities (and dprobs) fp32, the scores (and dscores) T.
TYPED_TEST(Bodies, SoftmaxTakesScoresOfAnotherDtype) {
  using T = TypeParam;
  const std::int64_t rows = 4, S = 9, n = rows * S, lanes = 4;
  const auto scores = to_storage<T>(random_floats(n, 74, -4, 4));
  const std::vector<float> dp = random_floats(n, 75);
  const auto sf = as_floats(scores);
  std::vector<float> want_p(n), want_ds(n), probs(n);
  cpu::softmax_fwd(want_p.data(), sf.data(), rows, S);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float mx = lanes_max(
        lanes, [&](std::int64_t l) { return softmax_max_part(r, l, lanes, scores.data(), S); });
    const float sum = lanes_sum(
        lanes, [&](std::int64_t l) { return softmax_sum_part(r, l, lanes, scores.data(), S, mx); });
    for (std::int64_t l = 0; l < lanes; ++l)
      softmax_fwd_write(r, l, lanes, probs.data(), scores.data(), S, mx, sum);
  }
  expect_near_all(widen(probs), widen(want_p), 1e-6, "fp32 probs of T scores");
  cpu::softmax_bwd(want_ds.data(), dp.data(), probs.data(), rows, S);
  std::vector<T> ds(n);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float dot = lanes_sum(lanes, [&](std::int64_t l) {
      return softmax_dot_part(r, l, lanes, dp.data(), probs.data(), S);
    });
    for (std::int64_t l = 0; l < lanes; ++l)
      softmax_bwd_write(r, l, lanes, ds.data(), dp.data(), probs.data(), S, dot);
  }
  expect_near_all(to_double(ds), widen(want_ds), tolerance<T>(), "T dscores of fp32 probs");
}

// ---- cross-entropy ----------------------------------------------------------------------------

// lse per row from the bodies, as the forward kernel combines them.
template <typename T>
std::vector<float> lse_of(const std::vector<T>& logits, std::int64_t rows, std::int64_t V,
                          std::int64_t lanes) {
  std::vector<float> lse(rows);
  for (std::int64_t m = 0; m < rows; ++m) {
    const float mx = lanes_max(lanes, [&](std::int64_t l) {
      return cross_entropy_max_part(m, l, lanes, logits.data(), V);
    });
    lse[m] = mx + std::log(lanes_sum(lanes, [&](std::int64_t l) {
               return cross_entropy_sum_part(m, l, lanes, logits.data(), V, mx);
             }));
  }
  return lse;
}

TYPED_TEST(Bodies, CrossEntropyMatchesTheCpuReference) {
  using T = TypeParam;
  const std::int64_t M = 6, V = 11;
  const auto logits = to_storage<T>(random_floats(M * V, 27, -3, 3));
  const std::vector<std::int32_t> targets = {0, 10, 3, 3, 7, 1};
  const auto lf = as_floats(logits);
  std::vector<float> want_loss(1), want_lse(M), want_dl(M * V);
  cpu::cross_entropy_fwd(want_loss.data(), want_lse.data(), lf.data(), targets.data(), M, V);
  for (std::int64_t lanes : kLaneCounts) {
    SCOPED_TRACE(lanes);
    const std::vector<float> lse = lse_of(logits, M, V, lanes);
    expect_near_all(widen(lse), widen(want_lse), 1e-6, "lse");
    float loss = 0;
    for (std::int64_t m = 0; m < M; ++m)
      loss += cross_entropy_row_loss(m, lse[m], logits.data(), targets.data(), V);
    EXPECT_NEAR(loss / M, want_loss[0], 1e-5);
    for (float scale : {1.0f, 8.0f}) {
      cpu::cross_entropy_bwd(want_dl.data(), lf.data(), targets.data(), want_lse.data(), M, V,
                             scale);
      std::vector<T> dl(M * V, from_f32<T>(NAN));
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t l = 0; l < lanes; ++l)
          cross_entropy_bwd_body(m, l, lanes, dl.data(), logits.data(), targets.data(), lse.data(),
                                 V, scale / static_cast<float>(M));
      expect_near_all(to_double(dl), widen(want_dl), tolerance<T>(), "dlogits");
    }
  }
  const std::vector<std::int32_t> outside = {11};
  EXPECT_TRUE(std::isnan(cross_entropy_row_loss(0, 1.0f, logits.data(), outside.data(), V)));
}

// gpt2's vocabulary at 8192 rows in fp16: the gradient of the mean loss, about 1 / (V M) per
// element, is below fp16's smallest subnormal, so without a loss scale every element but the
// target's rounds to zero and the row no longer sums to zero. With the recipe's scale none does.
TEST(BodiesF16, CrossEntropyGradientSurvivesInFp16WithTheLossScale) {
  const std::int64_t M = 8192, V = 50257, rows = 8;  // rows of the M checked: any row alike
  const auto logits = to_storage<__half>(random_floats(rows * V, 28, -4, 4));
  std::vector<std::int32_t> targets(rows);
  for (std::int64_t m = 0; m < rows; ++m) targets[m] = static_cast<std::int32_t>(m * 6007 % V);
  const std::vector<float> lse = lse_of(logits, rows, V, 1);
  const float scale = static_loss_scale(Precision::fp16, M, V);
  EXPECT_GT(scale, 1.0f);
  auto lost_rows = [&](float grad_scale) {
    std::vector<__half> dl(rows * V);
    for (std::int64_t m = 0; m < rows; ++m)
      cross_entropy_bwd_body(m, 0, 1, dl.data(), logits.data(), targets.data(), lse.data(), V,
                             grad_scale / static_cast<float>(M));
    int lost = 0;
    for (std::int64_t m = 0; m < rows; ++m) {
      std::int64_t zeros = 0;
      double sum = 0;
      for (std::int64_t v = 0; v < V; ++v) {
        const float g = to_f32(dl[m * V + v]);
        zeros += v != targets[m] && g == 0.0f;
        sum += g;
      }
      // The scaled row sums to zero up to fp16 rounding of its V elements.
      const bool sums_to_zero = std::fabs(sum) < 1e-2 * grad_scale / static_cast<double>(M);
      lost += zeros == V - 1 || !sums_to_zero;
    }
    return lost;
  };
  EXPECT_EQ(lost_rows(1.0f), rows) << "without the scale the softmax part of every row is lost";
  EXPECT_EQ(lost_rows(scale), 0);
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
  // Loss-scaled gradients with the scale in the parameters: the very same update.
  std::vector<T> w2 = to_storage<T>(wf), scaled(n);
  for (std::int64_t i = 0; i < n; ++i) scaled[i] = from_f32<T>(to_f32(grad[i]) * 1024.0f);
  std::vector<float> m2(n, 0.1f), v2(n, 0.2f), master2(n);
  for (std::int64_t i = 0; i < n; ++i) master2[i] = wf[i];
  AdamWParams ps = p;
  ps.grad_scale = 1024.0f;
  over(n, [&](std::int64_t i) {
    adamw_body(i, w2.data(), scaled.data(), m2.data(), v2.data(), master2.data(), ps);
  });
  EXPECT_EQ(master2, master);
  EXPECT_EQ(m2, m);
  EXPECT_EQ(v2, v);
  // The state in the weight's dtype (torch.optim's for a 16-bit model without masters): the same
  // fp32 update, the moments stored rounded, the weight as with fp32 state.
  std::vector<T> w3 = to_storage<T>(wf), m3(n, from_f32<T>(0.1f)), v3(n, from_f32<T>(0.2f));
  std::vector<float> m4(n), v4(n), master4(n);
  for (std::int64_t i = 0; i < n; ++i) {
    m4[i] = to_f32(m3[i]);
    v4[i] = to_f32(v3[i]);
    master4[i] = wf[i];
  }
  std::vector<T> w4 = to_storage<T>(wf);
  over(n, [&](std::int64_t i) {
    adamw_body(i, w3.data(), grad.data(), m3.data(), v3.data(), static_cast<float*>(nullptr), p);
    adamw_body(i, w4.data(), grad.data(), m4.data(), v4.data(), static_cast<float*>(nullptr), p);
  });
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(to_f32(m3[i]), to_f32(from_f32<T>(m4[i]))) << i;
    EXPECT_EQ(to_f32(v3[i]), to_f32(from_f32<T>(v4[i]))) << i;
    EXPECT_EQ(to_f32(w3[i]), to_f32(w4[i])) << i;
  }
}

// The optimizer kernels' packed walk (optimizer_thread over packs of kOptimizerPack) on a grid of
// 3 threads: every element once, the n % 4 left over by the scalar body, and the same bits as the
// scalar body over each element (with and without a master, state fp32 or in the weight's dtype).
TYPED_TEST(Bodies, OptimizerPacksGiveTheScalarBits) {
  using T = TypeParam;
  constexpr int N = kOptimizerPack;
  for (const std::int64_t n : {std::int64_t{50}, std::int64_t{3}, std::int64_t{64}}) {
    const auto wf = random_floats(n, 31);
    const auto grad = to_storage<T>(random_floats(n, 32));
    const AdamWParams ap{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 2};
    const SgdParams sp{0.1f, 0.9f, 0.01f};
    for (const bool with_master : {true, false}) {
      auto w1 = to_storage<T>(wf), w2 = w1;
      std::vector<float> m1 = random_floats(n, 33, -1.0f, 1.0f), v1 = random_floats(n, 34, 0.0f, 1.0f);
      std::vector<float> m2 = m1, v2 = v1, master1 = wf, master2 = wf;
      std::vector<T> hm1 = to_storage<T>(m1), hv1 = to_storage<T>(v1), hm2 = hm1, hv2 = hv1;
      float* mp1 = with_master ? master1.data() : nullptr;
      float* mp2 = with_master ? master2.data() : nullptr;
      over(n, [&](std::int64_t i) {
        adamw_body(i, w1.data(), grad.data(), m1.data(), v1.data(), mp1, ap);
      });
      std::vector<int> visits(static_cast<std::size_t>(n), 0);
      const std::int64_t threads = 3;
      for (std::int64_t t = 0; t < threads; ++t)
        optimizer_thread<N>(
            t, threads, n,
            [&](std::int64_t i) {
              for (int k = 0; k < N; ++k) ++visits[static_cast<std::size_t>(i + k)];
              adamw_pack_body<N>(i, w2.data(), grad.data(), m2.data(), v2.data(), mp2, ap);
            },
            [&](std::int64_t i) {
              ++visits[static_cast<std::size_t>(i)];
              adamw_body(i, w2.data(), grad.data(), m2.data(), v2.data(), mp2, ap);
            });
      EXPECT_EQ(visits, std::vector<int>(static_cast<std::size_t>(n), 1)) << "n " << n;
      EXPECT_EQ(to_double(w2), to_double(w1)) << "n " << n;
      EXPECT_EQ(m2, m1);
      EXPECT_EQ(v2, v1);
      EXPECT_EQ(master2, master1);
      // State in the weight's dtype.
      auto w3 = to_storage<T>(wf), w4 = w3;
      over(n, [&](std::int64_t i) {
        adamw_body(i, w3.data(), grad.data(), hm1.data(), hv1.data(), mp1, ap);
      });
      for (std::int64_t t = 0; t < threads; ++t)
        optimizer_thread<N>(
            t, threads, n,
            [&](std::int64_t i) {
              adamw_pack_body<N>(i, w4.data(), grad.data(), hm2.data(), hv2.data(), mp2, ap);
            },
            [&](std::int64_t i) {
              adamw_body(i, w4.data(), grad.data(), hm2.data(), hv2.data(), mp2, ap);
            });
      EXPECT_EQ(to_double(w4), to_double(w3));
      EXPECT_EQ(to_double(hm2), to_double(hm1));
      EXPECT_EQ(to_double(hv2), to_double(hv1));
      // SGD.
      auto w5 = to_storage<T>(wf), w6 = w5;
      std::vector<float> b5 = random_floats(n, 35), b6 = b5, master5 = wf, master6 = wf;
      float* mp5 = with_master ? master5.data() : nullptr;
      float* mp6 = with_master ? master6.data() : nullptr;
      over(n, [&](std::int64_t i) { sgd_body(i, w5.data(), grad.data(), b5.data(), mp5, sp); });
      for (std::int64_t t = 0; t < threads; ++t)
        optimizer_thread<N>(
            t, threads, n,
            [&](std::int64_t i) { sgd_pack_body<N>(i, w6.data(), grad.data(), b6.data(), mp6, sp); },
            [&](std::int64_t i) { sgd_body(i, w6.data(), grad.data(), b6.data(), mp6, sp); });
      EXPECT_EQ(to_double(w6), to_double(w5));
      EXPECT_EQ(b6, b5);
      EXPECT_EQ(master6, master5);
    }
  }
}

TEST(Bodies, OptimizerPacksNeedEveryArrayAligned) {
  alignas(16) float f[8] = {};
  alignas(16) __nv_bfloat16 h[8] = {};
  EXPECT_TRUE(packs_aligned<4>(f, h, static_cast<const float*>(nullptr)));
  EXPECT_TRUE(packs_aligned<4>(f + 4, h + 4));
  EXPECT_FALSE(packs_aligned<4>(f + 1, h)) << "an fp32 pack is 16 bytes";
  EXPECT_FALSE(packs_aligned<4>(f, h + 2)) << "a bf16 pack is 8 bytes";
  EXPECT_TRUE(packs_aligned<1>(f + 1, h + 1));
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
  // Loss-scaled gradients with the scale in the parameters: the very same update.
  auto w2 = to_storage<T>(wf);
  std::vector<T> scaled(n);
  for (std::int64_t i = 0; i < n; ++i) scaled[i] = from_f32<T>(to_f32(grad[i]) * 4096.0f);
  std::vector<float> mom2(n, 0.5f);
  SgdParams ps = p;
  ps.grad_scale = 4096.0f;
  over(n, [&](std::int64_t i) { sgd_body(i, w2.data(), scaled.data(), mom2.data(), nullptr, ps); });
  EXPECT_EQ(mom2, mom);
  for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(to_f32(w2[i]), to_f32(w[i]));
  // The momentum in the weight's dtype: the same update, the buffer stored rounded.
  auto w3 = to_storage<T>(wf);
  std::vector<T> mom3(n, from_f32<T>(0.5f));
  over(n, [&](std::int64_t i) { sgd_body(i, w3.data(), grad.data(), mom3.data(), nullptr, p); });
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(to_f32(mom3[i]), to_f32(from_f32<T>(mom[i]))) << i;
    EXPECT_EQ(to_f32(w3[i]), to_f32(w[i])) << i;
  }
}

}  // namespace
}  // namespace vrambench::cuda
