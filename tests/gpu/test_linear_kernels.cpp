// The lm head's GEMMs on a GPU: linear forward and backward at M = 2048, In = 768, Out = 50257
// (gpt2's vocabulary: y and dy have an odd leading dimension, so their columns are not 16-byte
// aligned) in bf16 and fp16 through GemmRunner, against a CPU reference in double on a subset of
// the outputs (whole rows and whole columns, the last column included); every output element must
// have been written. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu/require_gpu.h"
#include "cuda/check.h"
#include "cuda/gemm.h"
#include "cuda/owners.h"
#include "cuda/types.h"
#include "device/cuda_device.h"

namespace vrambench::cuda {
namespace {

template <typename T>
std::vector<T> random_storage(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<T> v(n);
  for (T& x : v) x = from_f32<T>(dist(rng));
  return v;
}
template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer d(v.size() * sizeof(T));
  VB_CUDA_CHECK(cudaMemcpy(d.get(), v.data(), d.bytes(), cudaMemcpyHostToDevice));
  return d;
}
DeviceBuffer poisoned(std::size_t bytes) {  // NaN in every 16-bit element
  DeviceBuffer d(bytes);
  VB_CUDA_CHECK(cudaMemset(d.get(), 0xff, bytes));
  return d;
}
template <typename T>
std::vector<T> download(const DeviceBuffer& d, std::size_t n) {
  VB_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> h(n);
  VB_CUDA_CHECK(cudaMemcpy(h.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

template <typename T>
class LmHeadGemm : public ::testing::Test {};
using HalfTypes = ::testing::Types<__nv_bfloat16, __half>;
TYPED_TEST_SUITE(LmHeadGemm, HalfTypes);

TYPED_TEST(LmHeadGemm, ForwardAndBackwardAtVocabulary50257) {
  VB_REQUIRE_GPU();
  using T = TypeParam;
  const GemmMath math = std::is_same_v<T, __half> ? GemmMath::fp16 : GemmMath::bf16;
  const double rtol = std::is_same_v<T, __half> ? 2e-3 : 1.6e-2;
  const std::int64_t M = 2048, In = 768, Out = 50257;
  const auto x = random_storage<T>(M * In, 1), w = random_storage<T>(Out * In, 2),
             dy = random_storage<T>(M * Out, 3);
  // The reference reads the same rounded values, converted once.
  auto widen = [](const std::vector<T>& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_f32(v[i]);
    return out;
  };
  const std::vector<float> xf = widen(x), wf = widen(w), dyf = widen(dy);
  auto X = [&](std::int64_t m, std::int64_t i) { return double(xf[m * In + i]); };
  auto W = [&](std::int64_t o, std::int64_t i) { return double(wf[o * In + i]); };
  auto DY = [&](std::int64_t m, std::int64_t o) { return double(dyf[m * Out + o]); };

  const Bytes ws_bytes = gemm_workspace_bytes(query_cuda_device(0).compute_capability());
  DeviceBuffer ws(static_cast<std::size_t>(ws_bytes));
  const DeviceBuffer d_x = upload(x), d_w = upload(w), d_dy = upload(dy);
  DeviceBuffer d_y = poisoned(M * Out * sizeof(T)), d_dx = poisoned(M * In * sizeof(T)),
               d_dw = poisoned(Out * In * sizeof(T));
  GemmRunner runner;
  runner.run(plan_linear_fwd(M, In, Out), math, d_w.get(), d_x.get(), d_y.get(), nullptr, ws.get(),
             ws_bytes, nullptr);
  runner.run(plan_linear_bwd_dx(M, In, Out), math, d_w.get(), d_dy.get(), d_dx.get(), nullptr,
             ws.get(), ws_bytes, nullptr);
  runner.run(plan_linear_bwd_dw(M, In, Out, false), math, d_x.get(), d_dy.get(), d_dw.get(),
             nullptr, ws.get(), ws_bytes, nullptr);
  const auto y = download<T>(d_y, M * Out), dx = download<T>(d_dx, M * In),
             dw = download<T>(d_dw, Out * In);

  // Every element written (the poison is NaN) and finite.
  auto all_finite = [](const std::vector<T>& v) {
    std::size_t bad = 0;
    for (const T& e : v) bad += !std::isfinite(to_f32(e));
    return bad;
  };
  EXPECT_EQ(all_finite(y), 0u) << "y";
  EXPECT_EQ(all_finite(dx), 0u) << "dx";
  EXPECT_EQ(all_finite(dw), 0u) << "dw";

  // Inputs in [-1, 1): a sum of K products is about sqrt(K) / 3; the floor covers the fp32
  // accumulation of those that cancel.
  std::size_t bad = 0;
  std::string first;
  auto check = [&](const char* what, std::int64_t i, std::int64_t j, float got, double want,
                   std::int64_t K) {
    const double atol = 1e-4 * std::sqrt(static_cast<double>(K));
    if (std::fabs(got - want) <= atol + rtol * std::fabs(want)) return;
    if (++bad <= 5)
      first += std::string(" ") + what + "[" + std::to_string(i) + "," + std::to_string(j) + "] " +
               std::to_string(got) + " vs " + std::to_string(want) + ";";
  };
  const std::int64_t rows[] = {0, 1, 1023, M - 1};
  const std::int64_t cols[] = {0, 1, 8, 25000, Out - 2, Out - 1};
  for (std::int64_t m : rows)
    for (std::int64_t o = 0; o < Out; ++o) {  // y rows: the whole vocabulary
      double sum = 0;
      for (std::int64_t i = 0; i < In; ++i) sum += X(m, i) * W(o, i);
      check("y", m, o, to_f32(y[m * Out + o]), sum, In);
    }
  for (std::int64_t o : cols)
    for (std::int64_t m = 0; m < M; ++m) {  // y columns, the last (odd) one included
      double sum = 0;
      for (std::int64_t i = 0; i < In; ++i) sum += X(m, i) * W(o, i);
      check("y", m, o, to_f32(y[m * Out + o]), sum, In);
    }
  for (std::int64_t m : rows)
    for (std::int64_t i = 0; i < In; ++i) {  // dx = dy w over the whole vocabulary
      double sum = 0;
      for (std::int64_t o = 0; o < Out; ++o) sum += DY(m, o) * W(o, i);
      check("dx", m, i, to_f32(dx[m * In + i]), sum, Out);
    }
  for (std::int64_t o : cols)
    for (std::int64_t i = 0; i < In; ++i) {  // dw = dy^T x over the rows
      double sum = 0;
      for (std::int64_t m = 0; m < M; ++m) sum += DY(m, o) * X(m, i);
      check("dw", o, i, to_f32(dw[o * In + i]), sum, M);
    }
  EXPECT_EQ(bad, 0u) << bad << " sampled outputs off:" << first;
}

}  // namespace
}  // namespace vrambench::cuda
