// The row kernels of attention and the loss, and the optimizer steps, run on a GPU against the CPU
// reference (kernels/cpu): softmax forward and backward (rows of 1024 with the causal mask, rows of
// 8192), cross-entropy over gpt2's vocabulary (a block per row, the loss summed per block) with and
// without the fp16 loss scale, AdamW and SGD dividing the scale out. Every storage type, a
// realistic and an odd size, outputs poisoned before each run and every element checked. Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/attention.h"
#include "cpu/cross_entropy.h"
#include "cpu/optimizer.h"
#include "cuda/attention.h"
#include "cuda/check.h"
#include "cuda/cross_entropy.h"
#include "cuda/optimizer.h"
#include "cuda/owners.h"
#include "cuda/types.h"
#include "device/cuda_device.h"
#include "gpu/require_gpu.h"
#include "program/program.h"

namespace vrambench::cuda {
namespace {

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, __half>) return DType::f16;
  return DType::bf16;
}
template <typename T>
double rtol() {
  if constexpr (std::is_same_v<T, float>) return 1e-4;
  if constexpr (std::is_same_v<T, __half>) return 2e-3;
  return 1.6e-2;
}

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
// All bits set: NaN in f32, f16 and bf16, so an element the kernel leaves alone fails.
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
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rtol,
                  double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    // Infinities (masked scores) must match exactly; NaN never passes.
    const bool ok = std::isinf(want[i]) ? static_cast<double>(got[i]) == want[i]
                                        : err <= atol + rtol * std::fabs(want[i]);
    if (!ok && ++bad <= 5)
      first += " [" + std::to_string(i) + "] " + std::to_string(got[i]) + " vs " +
               std::to_string(want[i]) + ";";
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off:" << first;
}
std::vector<double> widen(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

template <typename T>
class LossKernels : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(LossKernels, StorageTypes);

// Rows of S = 1024 in S x S causal blocks, rows of 8192, and 3 rows of 5 with one fully masked.
TYPED_TEST(LossKernels, SoftmaxForwardAndBackward) {
  VB_REQUIRE_GPU();
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  struct Case {
    std::int64_t rows, cols;
    bool causal;
  };
  for (const Case c : {Case{4 * 1024, 1024, true}, Case{256, 8192, false}, Case{3, 5, false}}) {
    const std::int64_t n = c.rows * c.cols;
    SCOPED_TRACE(::testing::Message() << c.rows << " rows of " << c.cols);
    auto scores = random_storage<T>(n, 1, -8, 8);
    const DeviceBuffer d_scores = upload(scores);
    if (c.causal) {
      launch_causal_mask(dt, d_scores.get(), c.rows / c.cols, c.cols, nullptr);
      for (std::int64_t r = 0; r < c.rows; ++r)
        for (std::int64_t k = r % c.cols + 1; k < c.cols; ++k)
          scores[r * c.cols + k] = from_f32<T>(-INFINITY);
      expect_close(download<T>(d_scores, n), widen(floats(scores)), 0, 0, "masked scores");
    }
    if (c.cols == 5) {  // the last row fully masked: zeros, not NaN
      for (std::int64_t k = 0; k < c.cols; ++k)
        scores[(c.rows - 1) * c.cols + k] = from_f32<T>(-INFINITY);
      VB_CUDA_CHECK(
          cudaMemcpy(d_scores.get(), scores.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    }
    const auto sf = floats(scores);
    std::vector<float> probs(n);
    cpu::softmax_fwd(probs.data(), sf.data(), c.rows, c.cols);
    DeviceBuffer d_probs = poisoned(n * sizeof(T));
    launch_softmax_fwd(dt, d_probs.get(), dt, d_scores.get(), c.rows, c.cols, nullptr);
    expect_close(download<T>(d_probs, n), widen(probs), rtol<T>(), 1e-6, "probs");

    // Backward from the reference probabilities rounded to T, on both sides.
    std::vector<T> p_t(n);
    for (std::int64_t i = 0; i < n; ++i) p_t[i] = from_f32<T>(probs[i]);
    const auto pf = floats(p_t);
    const auto dp = random_storage<T>(n, 2);
    const auto dpf = floats(dp);
    std::vector<float> ds(n);
    cpu::softmax_bwd(ds.data(), dpf.data(), pf.data(), c.rows, c.cols);
    const DeviceBuffer d_p = upload(p_t), d_dp = upload(dp);
    DeviceBuffer d_ds = poisoned(n * sizeof(T));
    launch_softmax_bwd(dt, dt, d_ds.get(), d_dp.get(), d_p.get(), c.rows, c.cols, nullptr);
    expect_close(download<T>(d_ds, n), widen(ds), 2 * rtol<T>(), 1e-5, "dscores");
  }
}

// gpt2's vocabulary (V = 50257) over 512 rows, and 3 rows of 5.
TYPED_TEST(LossKernels, CrossEntropyForwardAndBackward) {
  VB_REQUIRE_GPU();
  using T = TypeParam;
  const DType dt = dtype_of<T>();
  struct Case {
    std::int64_t M, V;
  };
  for (const Case c : {Case{512, 50257}, Case{3, 5}}) {
    const std::int64_t M = c.M, V = c.V;
    SCOPED_TRACE(::testing::Message() << M << " rows of " << V);
    const auto logits = random_storage<T>(M * V, 3, -4, 4);
    std::mt19937 rng(4);
    std::vector<std::int32_t> targets(M);
    for (std::int32_t& t : targets) t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(V));
    const auto lf = floats(logits);
    std::vector<float> loss(1), lse(M);
    cpu::cross_entropy_fwd(loss.data(), lse.data(), lf.data(), targets.data(), M, V);

    const DeviceBuffer d_logits = upload(logits), d_targets = upload(targets);
    DeviceBuffer d_loss = poisoned(4), d_lse = poisoned(M * 4);
    launch_cross_entropy_fwd(dt, d_loss.as<float>(), d_lse.as<float>(), d_logits.get(),
                             d_targets.as<std::int32_t>(), M, V, nullptr);
    expect_close(download<float>(d_lse, M), widen(lse), 1e-6, 1e-5, "lse");
    expect_close(download<float>(d_loss, 1), widen(loss), 1e-5, 1e-6, "loss");

    // Backward from the reference lse; with the loss scale fp16 would use, and without.
    const DeviceBuffer d_lse_ref = upload(lse);
    const float fp16_scale = static_loss_scale(Precision::fp16, M, V);
    for (float scale : {1.0f, fp16_scale}) {
      SCOPED_TRACE(scale);
      std::vector<float> dl(M * V);
      cpu::cross_entropy_bwd(dl.data(), lf.data(), targets.data(), lse.data(), M, V, scale);
      DeviceBuffer d_dl = poisoned(M * V * sizeof(T));
      launch_cross_entropy_bwd(dt, d_dl.get(), d_logits.get(), d_targets.as<std::int32_t>(),
                               d_lse_ref.as<float>(), M, V, scale, nullptr);
      const std::vector<float> got = download<T>(d_dl, M * V);
      // fp16 rounds what is below its normal range to multiples of 2^-24.
      const double atol = std::is_same_v<T, __half> ? std::ldexp(1.0, -24) : 0.0;
      expect_close(got, widen(dl), rtol<T>(), atol, "dlogits");
      if (std::is_same_v<T, __half> && scale == fp16_scale && M > 3) {
        std::size_t zeros = 0;
        for (std::int64_t i = 0; i < M * V; ++i) zeros += got[i] == 0.0f;
        EXPECT_EQ(zeros, 0u) << "the loss scale keeps every element of the fp16 gradient";
      }
    }
  }
}

// AdamW and SGD, with and without fp32 masters, loss-scaled gradients divided out, the state in
// fp32 or in the weight's dtype (torch.optim's state of a 16-bit model without masters): the same
// update as the CPU reference on the unscaled gradient, the state rounded to its dtype.
template <typename T, typename S>
void optimizer_steps_match_the_cpu(std::int64_t n, bool with_master, float scale) {
  const DType dt = dtype_of<T>(), st = dtype_of<S>();
  const auto w = random_storage<T>(n, 5), g = random_storage<T>(n, 6);
  std::vector<T> scaled(n);
  for (std::int64_t i = 0; i < n; ++i) scaled[i] = from_f32<T>(to_f32(g[i]) * scale);
  const auto m0 = random_storage<S>(n, 7, 0, 0.1f);
  const auto v0 = random_storage<S>(n, 8, 0, 0.1f);
  // CPU: the update of the unscaled gradient, on the master (the weight's value) in fp32.
  std::vector<float> param = floats(w), m = floats(m0), v = floats(v0), grad = floats(g);
  AdamWParams ap{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 3};
  cpu::adamw_step(param.data(), grad.data(), m.data(), v.data(), n, ap);
  const DeviceBuffer d_g = upload(scaled);
  DeviceBuffer d_w = upload(w), d_m = upload(m0), d_v = upload(v0);
  DeviceBuffer d_master = upload(floats(w));
  AdamWParams gp = ap;
  gp.grad_scale = scale;
  launch_adamw(dt, st, d_w.get(), d_g.get(), d_m.get(), d_v.get(),
               with_master ? d_master.as<float>() : nullptr, gp, n, nullptr);
  expect_close(download<S>(d_m, n), widen(m), rtol<S>(), 1e-7, "adamw m");
  // v is small (squared gradients): in fp16 state much of it is below the normal range, where
  // fp16 rounds to multiples of 2^-24.
  const double v_atol = std::is_same_v<S, __half> ? std::ldexp(1.0, -24) : 1e-9;
  expect_close(download<S>(d_v, n), widen(v), rtol<S>(), v_atol, "adamw v");
  expect_close(download<T>(d_w, n), widen(param), rtol<T>(), 1e-5, "adamw w");
  if (with_master)
    expect_close(download<float>(d_master, n), widen(param), 1e-5, 1e-6, "adamw master");

  param = floats(w);
  std::vector<float> mom = floats(m0);
  SgdParams sp{0.1f, 0.9f, 0.01f};
  cpu::sgd_step(param.data(), grad.data(), mom.data(), n, sp);
  d_w = upload(w);
  d_m = upload(m0);
  d_master = upload(floats(w));
  SgdParams gsp = sp;
  gsp.grad_scale = scale;
  launch_sgd(dt, st, d_w.get(), d_g.get(), d_m.get(), with_master ? d_master.as<float>() : nullptr,
             gsp, n, nullptr);
  expect_close(download<S>(d_m, n), widen(mom), rtol<S>(), 1e-7, "sgd momentum");
  expect_close(download<T>(d_w, n), widen(param), rtol<T>(), 1e-5, "sgd w");
  if (with_master)
    expect_close(download<float>(d_master, n), widen(param), 1e-6, 1e-6, "sgd master");
}

TYPED_TEST(LossKernels, OptimizerStepsDivideTheLossScaleOut) {
  VB_REQUIRE_GPU();
  using T = TypeParam;
  for (std::int64_t n : {std::int64_t{1} << 20, std::int64_t{5}})
    for (bool with_master : {false, true})
      for (float scale : {1.0f, 1024.0f}) {
        SCOPED_TRACE(::testing::Message()
                     << n << " elements, master " << with_master << ", scale " << scale);
        {
          SCOPED_TRACE("fp32 state");
          optimizer_steps_match_the_cpu<T, float>(n, with_master, scale);
        }
        if constexpr (!std::is_same_v<T, float>) {
          SCOPED_TRACE("state in the weight's dtype");
          optimizer_steps_match_the_cpu<T, T>(n, with_master, scale);
        }
      }
}

// A state in neither fp32 nor the weight's dtype is refused before any launch.
TEST(OptimizerKernels, StateOfAThirdDtypeIsRefused) {
  EXPECT_THROW(launch_adamw(DType::bf16, DType::f16, nullptr, nullptr, nullptr, nullptr, nullptr,
                            AdamWParams{}, 4, nullptr),
               std::invalid_argument);
  EXPECT_THROW(launch_sgd(DType::f32, DType::bf16, nullptr, nullptr, nullptr, nullptr, SgdParams{},
                          4, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace vrambench::cuda
