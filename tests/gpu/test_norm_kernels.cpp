// The kernels that sum over rows, run on a GPU against the CPU reference (kernels/cpu): LayerNorm
// and RMSNorm (a block per row; dw, db two-stage through the workspace), the bias gradient (column
// sums) and the embedding backward (token sort in the workspace; positions summed over the batch).
// Every storage type, a realistic and an odd size, accumulate on and off, workspaces from none to
// the H100's, outputs poisoned before each run and every element checked. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/embedding.h"
#include "cpu/layernorm.h"
#include "cpu/rmsnorm.h"
#include "cuda/check.h"
#include "cuda/embedding.h"
#include "cuda/gemm.h"
#include "cuda/layernorm.h"
#include "cuda/owners.h"
#include "cuda/reduce.h"
#include "cuda/rmsnorm.h"
#include "cuda/types.h"
#include "device/cuda_device.h"
#include "gpu/require_gpu.h"

namespace vrambench::cuda {
namespace {

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, __half>) return DType::f16;
  return DType::bf16;
}

// Relative tolerance of one rounding to T, with room for fp32 sums in another order.
template <typename T>
double rtol() {
  if constexpr (std::is_same_v<T, float>) return 1e-4;
  if constexpr (std::is_same_v<T, __half>) return 2e-3;
  return 1.6e-2;
}

// Values drawn from [lo, hi), rounded to T (the CPU reference reads the same numbers).
template <typename T>
std::vector<T> random_storage(std::size_t n, unsigned seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = from_f32<T>(dist(rng));
  return v;
}
template <typename T>
std::vector<float> floats(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_f32(v[i]);
  return out;
}

template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer d(v.size() * sizeof(T));
  if (!v.empty()) VB_CUDA_CHECK(cudaMemcpy(d.get(), v.data(), d.bytes(), cudaMemcpyHostToDevice));
  return d;
}
// `bytes` of NaN in every element (all bits set is NaN in f32, f16 and bf16): an
// element the kernel does not write fails the comparison.
DeviceBuffer poisoned(std::size_t bytes) {
  DeviceBuffer d(bytes);
  if (bytes > 0) VB_CUDA_CHECK(cudaMemset(d.get(), 0xff, bytes));
  return d;
}
template <typename T>
std::vector<float> download(const DeviceBuffer& d, std::size_t n) {
  VB_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> h(n);
  VB_CUDA_CHECK(cudaMemcpy(h.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return floats(h);
}

// Every element within atol + rtol |want|; NaN never is. Names the first few that are not.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rtol,
                  double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i]))) {
      if (++bad <= 5)
        first += " [" + std::to_string(i) + "] " + std::to_string(got[i]) + " vs " +
                 std::to_string(want[i]) + ";";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off:" << first;
}
std::vector<double> widen(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Workspaces a launcher may get: none (one pass), a few chunks' worth, and both real sizes.
std::vector<Bytes> workspaces(std::int64_t cols, std::int64_t outputs) {
  return {0, 3 * outputs * cols * 4, 4 * MiB, 32 * MiB};
}

struct Shape {
  std::int64_t M, H;
};
constexpr Shape kShapes[] = {{4096, 768}, {3, 5}};

template <typename T>
class NormKernels : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(NormKernels, StorageTypes);

TYPED_TEST(NormKernels, LayerNormForwardAndBackward) {
  VB_REQUIRE_GPU();
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  for (const Shape s : kShapes) {
    const std::int64_t M = s.M, H = s.H;
    SCOPED_TRACE(::testing::Message() << M << " x " << H);
    const auto x = random_storage<T>(M * H, 1, -3, 3), w = random_storage<T>(H, 2, 0.5f, 1.5f),
               b = random_storage<T>(H, 3), dy = random_storage<T>(M * H, 4);
    const auto xf = floats(x), wf = floats(w), bf = floats(b), dyf = floats(dy);
    std::vector<float> y(M * H), mean(M), rstd(M), dx(M * H), dw(H), db(H);
    cpu::layernorm_fwd(y.data(), mean.data(), rstd.data(), xf.data(), wf.data(), bf.data(), M, H,
                       1e-5f);
    cpu::layernorm_bwd(dx.data(), dw.data(), db.data(), dyf.data(), xf.data(), wf.data(),
                       mean.data(), rstd.data(), M, H);

    const DeviceBuffer d_x = upload(x), d_w = upload(w), d_b = upload(b), d_dy = upload(dy);
    DeviceBuffer d_y = poisoned(M * H * sizeof(T)), d_mean = poisoned(M * 4),
                 d_rstd = poisoned(M * 4);
    launch_layernorm_fwd(dt, d_y.get(), d_mean.as<float>(), d_rstd.as<float>(), d_x.get(),
                         d_w.get(), d_b.get(), M, H, 1e-5f, nullptr);
    expect_close(download<T>(d_y, M * H), widen(y), rtol<T>(), rtol<T>(), "y");
    expect_close(download<float>(d_mean, M), widen(mean), 1e-5, 1e-6, "mean");
    expect_close(download<float>(d_rstd, M), widen(rstd), 1e-5, 0, "rstd");
    // Without a bias too.
    d_y = poisoned(M * H * sizeof(T));
    launch_layernorm_fwd(dt, d_y.get(), d_mean.as<float>(), d_rstd.as<float>(), d_x.get(),
                         d_w.get(), nullptr, M, H, 1e-5f, nullptr);
    std::vector<double> y_nobias(M * H);
    for (std::int64_t i = 0; i < M * H; ++i) y_nobias[i] = y[i] - bf[i % H];
    expect_close(download<T>(d_y, M * H), y_nobias, rtol<T>(), 2 * rtol<T>(), "y without bias");

    // Backward from the reference statistics, so that only the backward is compared.
    const DeviceBuffer d_mean_ref = upload(mean), d_rstd_ref = upload(rstd);
    const auto old = random_storage<T>(H, 5);
    for (bool accumulate : {false, true})
      for (Bytes ws : workspaces(H, 2)) {
        SCOPED_TRACE(::testing::Message() << "accumulate " << accumulate << ", workspace " << ws
                                          << ": " << column_chunks(M, H, 2, ws).count << " chunks");
        DeviceBuffer d_dx = poisoned(M * H * sizeof(T));
        DeviceBuffer d_dw = accumulate ? upload(old) : poisoned(H * sizeof(T));
        DeviceBuffer d_db = accumulate ? upload(old) : poisoned(H * sizeof(T));
        DeviceBuffer d_ws = poisoned(static_cast<std::size_t>(ws));
        launch_layernorm_bwd(dt, d_dx.get(), d_dw.get(), d_db.get(), d_dy.get(), d_x.get(),
                             d_w.get(), d_mean_ref.as<float>(), d_rstd_ref.as<float>(), M, H,
                             accumulate, ws > 0 ? d_ws.get() : nullptr, ws, nullptr);
        std::vector<double> want_dw(H), want_db(H);
        for (std::int64_t h = 0; h < H; ++h) {
          want_dw[h] = dw[h] + (accumulate ? to_f32(old[h]) : 0.0);
          want_db[h] = db[h] + (accumulate ? to_f32(old[h]) : 0.0);
        }
        // dw and db are sums of M values of about 1: an absolute floor for those that cancel.
        const double floor = rtol<T>() * std::sqrt(static_cast<double>(M));
        expect_close(download<T>(d_dx, M * H), widen(dx), 2 * rtol<T>(), 2 * rtol<T>(), "dx");
        expect_close(download<T>(d_dw, H), want_dw, rtol<T>(), floor, "dw");
        expect_close(download<T>(d_db, H), want_db, rtol<T>(), floor, "db");
      }
  }
}

TYPED_TEST(NormKernels, RmsNormForwardAndBackward) {
  VB_REQUIRE_GPU();
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  for (const Shape s : kShapes) {
    const std::int64_t M = s.M, H = s.H;
    SCOPED_TRACE(::testing::Message() << M << " x " << H);
    const auto x = random_storage<T>(M * H, 6), w = random_storage<T>(H, 7, 0.5f, 1.5f),
               dy = random_storage<T>(M * H, 8);
    const auto xf = floats(x), wf = floats(w), dyf = floats(dy);
    std::vector<float> y(M * H), rstd(M), dx(M * H), dw(H);
    cpu::rmsnorm_fwd(y.data(), rstd.data(), xf.data(), wf.data(), M, H, 1e-6f);
    cpu::rmsnorm_bwd(dx.data(), dw.data(), dyf.data(), xf.data(), wf.data(), rstd.data(), M, H);

    const DeviceBuffer d_x = upload(x), d_w = upload(w), d_dy = upload(dy);
    DeviceBuffer d_y = poisoned(M * H * sizeof(T)), d_rstd = poisoned(M * 4);
    launch_rmsnorm_fwd(dt, dt, dt, d_y.get(), d_rstd.as<float>(), d_x.get(), d_w.get(), M, H, 1e-6f,
                       0.0f, nullptr);
    expect_close(download<T>(d_y, M * H), widen(y), rtol<T>(), rtol<T>(), "y");
    expect_close(download<float>(d_rstd, M), widen(rstd), 1e-5, 0, "rstd");

    const DeviceBuffer d_rstd_ref = upload(rstd);
    const auto old = random_storage<T>(H, 9);
    for (bool accumulate : {false, true})
      for (Bytes ws : workspaces(H, 1)) {
        SCOPED_TRACE(::testing::Message() << "accumulate " << accumulate << ", workspace " << ws);
        DeviceBuffer d_dx = poisoned(M * H * sizeof(T));
        DeviceBuffer d_dw = accumulate ? upload(old) : poisoned(H * sizeof(T));
        DeviceBuffer d_ws = poisoned(static_cast<std::size_t>(ws));
        launch_rmsnorm_bwd(dt, dt, dt, d_dx.get(), d_dw.get(), d_dy.get(), d_x.get(), d_w.get(),
                           d_rstd_ref.as<float>(), M, H, 0.0f, accumulate,
                           ws > 0 ? d_ws.get() : nullptr, ws, nullptr);
        std::vector<double> want_dw(H);
        for (std::int64_t h = 0; h < H; ++h)
          want_dw[h] = dw[h] + (accumulate ? to_f32(old[h]) : 0.0);
        const double floor = rtol<T>() * std::sqrt(static_cast<double>(M));
        expect_close(download<T>(d_dx, M * H), widen(dx), 2 * rtol<T>(), 2 * rtol<T>(), "dx");
        expect_close(download<T>(d_dw, H), want_dw, rtol<T>(), floor, "dw");
      }
  }
}

// The bias gradient of linear_bwd: column sums of dy[M, Out].
TYPED_TEST(NormKernels, BiasGradientIsTheColumnSum) {
  VB_REQUIRE_GPU();
  using T = TypeParam;
  for (const Shape s : {Shape{4096, 768}, Shape{4096, 3072}, Shape{3, 5}, Shape{100000, 7}}) {
    const std::int64_t M = s.M, N = s.H;
    SCOPED_TRACE(::testing::Message() << M << " x " << N);
    const auto dy = random_storage<T>(M * N, 10);
    const auto old = random_storage<T>(N, 11);
    const DeviceBuffer d_dy = upload(dy);
    for (bool accumulate : {false, true})
      for (Bytes ws : workspaces(N, 1)) {
        SCOPED_TRACE(::testing::Message() << "accumulate " << accumulate << ", workspace " << ws);
        std::vector<double> want(N, 0.0);
        for (std::int64_t m = 0; m < M; ++m)
          for (std::int64_t n = 0; n < N; ++n) want[n] += to_f32(dy[m * N + n]);
        if (accumulate)
          for (std::int64_t n = 0; n < N; ++n) want[n] += to_f32(old[n]);
        DeviceBuffer d_db = accumulate ? upload(old) : poisoned(N * sizeof(T));
        DeviceBuffer d_ws = poisoned(static_cast<std::size_t>(ws));
        launch_bias_grad(dtype_of<T>(), d_db.get(), d_dy.get(), M, N, accumulate,
                         ws > 0 ? d_ws.get() : nullptr, ws, nullptr);
        // Sums of M values of about 1: an absolute floor for the ones that cancel.
        expect_close(download<T>(d_db, N), want, rtol<T>(), rtol<T>() * std::sqrt(double(M)), "db");
      }
  }
}

// gpt2's table (V = 50257) for 4096 rows with a skewed token distribution (one token in ten is
// the same), and an odd small case; dwte overwritten or accumulated (tied lm head), in one pass,
// in passes of 1000 rows, and without room for the sort; dwpe over the batch, rows from S zero.
TYPED_TEST(NormKernels, EmbeddingBackward) {
  VB_REQUIRE_GPU();
  using T = TypeParam;
  struct Case {
    std::int64_t B, S, H, V, P;
  };
  for (const Case c : {Case{4, 1024, 768, 50257, 1100}, Case{1, 3, 5, 7, 4}}) {
    const std::int64_t M = c.B * c.S, H = c.H, V = c.V, P = c.P;
    SCOPED_TRACE(::testing::Message() << "M " << M << ", H " << H << ", V " << V);
    std::mt19937 rng(12);
    std::vector<std::int32_t> tokens(M);
    for (std::int32_t& t : tokens)
      t = rng() % 10 == 0 ? 7 % static_cast<std::int32_t>(V)
                          : static_cast<std::int32_t>(rng() % static_cast<unsigned>(V));
    const auto dx = random_storage<T>(M * H, 13);
    const auto dxf = floats(dx);
    std::vector<float> dwte(V * H), dwpe(P * H);
    cpu::embedding_bwd(dwte.data(), dwpe.data(), dxf.data(), tokens.data(), c.B, c.S, V, P, H);
    const auto old = random_storage<T>(V * H, 14);
    const DeviceBuffer d_dx = upload(dx), d_tokens = upload(tokens);
    const std::vector<Bytes> spaces = {
        32 * MiB, embedding_sort_bytes(std::min<std::int64_t>(1000, M - 1), V), 0};
    for (bool accumulate : {false, true})
      for (Bytes ws : spaces) {
        const std::int64_t pass = embedding_sort_rows(M, V, ws);
        // Without the sort every row adds in the storage type: only the small case is exact
        // enough to compare.
        if (pass == 0 && M > 16) continue;
        SCOPED_TRACE(::testing::Message()
                     << "accumulate " << accumulate << ", rows per pass " << pass);
        DeviceBuffer d_dwte = accumulate ? upload(old) : poisoned(V * H * sizeof(T));
        DeviceBuffer d_dwpe = poisoned(P * H * sizeof(T));
        DeviceBuffer d_ws = poisoned(static_cast<std::size_t>(ws));
        launch_embedding_bwd(dtype_of<T>(), d_dwte.get(), d_dwpe.get(), d_dx.get(),
                             d_tokens.as<std::int32_t>(), M, c.S, H, V, P, accumulate, 1.0f,
                             ws > 0 ? d_ws.get() : nullptr, ws, nullptr);
        std::vector<double> want(V * H);
        for (std::int64_t i = 0; i < V * H; ++i)
          want[i] = dwte[i] + (accumulate ? to_f32(old[i]) : 0.0);
        // Each pass after the first rounds to T once more; the frequent token sums ~400 rows.
        const double passes = pass > 0 ? std::ceil(double(M) / double(pass)) : double(M);
        expect_close(download<T>(d_dwte, V * H), want, (1 + passes) * rtol<T>(),
                     (1 + passes) * rtol<T>(), "dwte");
        expect_close(download<T>(d_dwpe, P * H), widen(dwpe), rtol<T>(), rtol<T>(), "dwpe");
      }
  }
}

}  // namespace
}  // namespace vrambench::cuda
