// The cuBLASLt plans of linear and eager-attention GEMMs, checked without a GPU: each plan is run
// by a naive column-major GEMM on the CPU over the real row-major buffers (with the per-head
// pointer offsets) and compared with the op's definition; descriptors are created and read back.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/gemm.h"
#include "cuda/lru_cache.h"
#include "cuda/owners.h"
#include "device/cuda_device.h"
#include "gpu/require_gpu.h"

namespace vrambench::cuda {
namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// What cuBLASLt computes for a plan, column-major, batched by strides.
void reference_gemm(const GemmPlan& p, const float* a, const float* b, float* c) {
  for (std::int64_t bi = 0; bi < p.batch; ++bi) {
    const float* A = a + bi * p.stride_a;
    const float* B = b + bi * p.stride_b;
    float* C = c + bi * p.stride_c;
    for (std::int64_t i = 0; i < p.m; ++i)
      for (std::int64_t j = 0; j < p.n; ++j) {
        double sum = 0;
        for (std::int64_t l = 0; l < p.k; ++l) {
          const float av = p.trans_a ? A[l + i * p.lda] : A[i + l * p.lda];
          const float bv = p.trans_b ? B[j + l * p.ldb] : B[l + j * p.ldb];
          sum += double(av) * bv;
        }
        float& out = C[i + j * p.ldc];
        out = static_cast<float>(p.alpha * sum + (p.beta != 0.0f ? p.beta * out : 0.0));
      }
  }
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4) << what << " " << i;
}

TEST(GemmPlans, WorkspaceByArchitecture) {
  EXPECT_EQ(gemm_workspace_bytes(80), 8 * MiB + 128 * KiB);
  EXPECT_EQ(gemm_workspace_bytes(89), 8 * MiB + 128 * KiB);
  EXPECT_EQ(gemm_workspace_bytes(90), 32 * MiB);
  EXPECT_EQ(gemm_workspace_bytes(100), 32 * MiB);
}

TEST(GemmPlans, LinearForwardAndBackward) {
  const std::int64_t M = 5, In = 4, Out = 3;
  const auto x = random_floats(M * In, 1), w = random_floats(Out * In, 2),
             dy = random_floats(M * Out, 3);
  std::vector<float> y(M * Out), dx(M * In), dw(Out * In, 0.5f);
  reference_gemm(plan_linear_fwd(M, In, Out), w.data(), x.data(), y.data());
  reference_gemm(plan_linear_bwd_dx(M, In, Out), w.data(), dy.data(), dx.data());
  reference_gemm(plan_linear_bwd_dw(M, In, Out, true), x.data(), dy.data(), dw.data());
  std::vector<double> wy(M * Out), wdx(M * In), wdw(Out * In);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t o = 0; o < Out; ++o)
      for (std::int64_t i = 0; i < In; ++i) {
        wy[m * Out + o] += double(x[m * In + i]) * w[o * In + i];
        wdx[m * In + i] += double(dy[m * Out + o]) * w[o * In + i];
        wdw[o * In + i] += double(dy[m * Out + o]) * x[m * In + i];
      }
  for (double& v : wdw) v += 0.5;  // accumulate
  expect_close(y, wy, "y");
  expect_close(dx, wdx, "dx");
  expect_close(dw, wdw, "dw");
}

struct AttentionCase {
  AttentionShape s;
  std::vector<float> qkv, probs, dy, dscores;
  float q(std::int64_t b, std::int64_t t, std::int64_t a, std::int64_t d) const {
    return qkv[(b * s.seq + t) * s.qkv_width() + a * s.head_dim + d];
  }
  float k(std::int64_t b, std::int64_t t, std::int64_t kv, std::int64_t d) const {
    return qkv[(b * s.seq + t) * s.qkv_width() + (s.heads + kv) * s.head_dim + d];
  }
  float v(std::int64_t b, std::int64_t t, std::int64_t kv, std::int64_t d) const {
    return qkv[(b * s.seq + t) * s.qkv_width() + (s.heads + s.kv_heads + kv) * s.head_dim + d];
  }
  std::int64_t sidx(std::int64_t b, std::int64_t a, std::int64_t i, std::int64_t j) const {
    return ((b * s.heads + a) * s.seq + i) * s.seq + j;
  }
  std::int64_t yidx(std::int64_t b, std::int64_t t, std::int64_t a, std::int64_t d) const {
    return (b * s.seq + t) * s.heads * s.head_dim + a * s.head_dim + d;
  }
};

class AttentionPlans : public ::testing::TestWithParam<std::array<std::int64_t, 5>> {
 protected:
  AttentionCase make() const {
    const auto [B, S, A, K, D] = GetParam();
    AttentionCase c;
    c.s = AttentionShape{B, S, A, K, D};
    c.qkv = random_floats(B * S * c.s.qkv_width(), 10);
    c.probs = random_floats(B * A * S * S, 11);
    c.dy = random_floats(B * S * A * D, 12);
    c.dscores = random_floats(B * A * S * S, 13);
    return c;
  }
};

TEST_P(AttentionPlans, ScoresAndValues) {
  const AttentionCase c = make();
  const AttentionShape& s = c.s;
  std::vector<float> scores(s.batch * s.heads * s.seq * s.seq),
      y(s.batch * s.seq * s.heads * s.head_dim);
  for (std::int64_t a = 0; a < s.heads; ++a) {
    reference_gemm(plan_attn_scores(s), c.qkv.data() + s.k_offset(a), c.qkv.data() + s.q_offset(a),
                   scores.data() + s.scores_offset(a));
    reference_gemm(plan_attn_values(s), c.qkv.data() + s.v_offset(a),
                   c.probs.data() + s.scores_offset(a), y.data() + s.y_offset(a));
  }
  std::vector<double> ws(scores.size()), wy(y.size());
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t a = 0; a < s.heads; ++a)
      for (std::int64_t i = 0; i < s.seq; ++i) {
        for (std::int64_t j = 0; j < s.seq; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < s.head_dim; ++d)
            dot += double(c.q(b, i, a, d)) * c.k(b, j, s.kv_of(a), d);
          ws[c.sidx(b, a, i, j)] = dot * s.scale();
        }
        for (std::int64_t d = 0; d < s.head_dim; ++d) {
          double sum = 0;
          for (std::int64_t j = 0; j < s.seq; ++j)
            sum += double(c.probs[c.sidx(b, a, i, j)]) * c.v(b, j, s.kv_of(a), d);
          wy[c.yidx(b, i, a, d)] = sum;
        }
      }
  expect_close(scores, ws, "scores");
  expect_close(y, wy, "y");
}

TEST_P(AttentionPlans, Backward) {
  const AttentionCase c = make();
  const AttentionShape& s = c.s;
  std::vector<float> dprobs(s.batch * s.heads * s.seq * s.seq);
  std::vector<float> dqkv(c.qkv.size(), 7.0f);  // garbage: every q, k, v element must be written
  for (std::int64_t a = 0; a < s.heads; ++a) {
    const bool first = s.first_of_group(a);
    reference_gemm(plan_attn_values_bwd_dprobs(s), c.qkv.data() + s.v_offset(a),
                   c.dy.data() + s.y_offset(a), dprobs.data() + s.scores_offset(a));
    reference_gemm(plan_attn_values_bwd_dv(s, first), c.dy.data() + s.y_offset(a),
                   c.probs.data() + s.scores_offset(a), dqkv.data() + s.v_offset(a));
    reference_gemm(plan_attn_scores_bwd_dq(s), c.qkv.data() + s.k_offset(a),
                   c.dscores.data() + s.scores_offset(a), dqkv.data() + s.q_offset(a));
    reference_gemm(plan_attn_scores_bwd_dk(s, first), c.qkv.data() + s.q_offset(a),
                   c.dscores.data() + s.scores_offset(a), dqkv.data() + s.k_offset(a));
  }
  std::vector<double> wdp(dprobs.size()), wdqkv(dqkv.size(), 0.0);
  const std::int64_t W = s.qkv_width(), D = s.head_dim;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t a = 0; a < s.heads; ++a) {
      const std::int64_t kv = s.kv_of(a);
      for (std::int64_t i = 0; i < s.seq; ++i)
        for (std::int64_t j = 0; j < s.seq; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d)
            dot += double(c.dy[c.yidx(b, i, a, d)]) * c.v(b, j, kv, d);
          wdp[c.sidx(b, a, i, j)] = dot;
          const double p = c.probs[c.sidx(b, a, i, j)], ds = c.dscores[c.sidx(b, a, i, j)];
          for (std::int64_t d = 0; d < D; ++d) {
            wdqkv[(b * s.seq + j) * W + (s.heads + s.kv_heads + kv) * D + d] +=
                p * c.dy[c.yidx(b, i, a, d)];
            wdqkv[(b * s.seq + i) * W + a * D + d] += s.scale() * ds * c.k(b, j, kv, d);
            wdqkv[(b * s.seq + j) * W + (s.heads + kv) * D + d] += s.scale() * ds * c.q(b, i, a, d);
          }
        }
    }
  expect_close(dprobs, wdp, "dprobs");
  expect_close(dqkv, wdqkv, "dqkv");
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionPlans,
                         ::testing::Values(std::array<std::int64_t, 5>{2, 5, 2, 2, 4},    // MHA
                                           std::array<std::int64_t, 5>{2, 6, 4, 2, 8},    // GQA 2:1
                                           std::array<std::int64_t, 5>{1, 3, 6, 1, 2}));  // MQA

std::int64_t layout_attr(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr) {
  std::size_t written = 0;
  if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) {
    std::int32_t v = 0;
    EXPECT_EQ(cublasLtMatrixLayoutGetAttribute(l, attr, &v, sizeof(v), &written),
              CUBLAS_STATUS_SUCCESS);
    return v;
  }
  if (attr == CUBLASLT_MATRIX_LAYOUT_ROWS || attr == CUBLASLT_MATRIX_LAYOUT_COLS) {
    std::uint64_t v = 0;
    EXPECT_EQ(cublasLtMatrixLayoutGetAttribute(l, attr, &v, sizeof(v), &written),
              CUBLAS_STATUS_SUCCESS);
    return static_cast<std::int64_t>(v);
  }
  std::int64_t v = 0;
  EXPECT_EQ(cublasLtMatrixLayoutGetAttribute(l, attr, &v, sizeof(v), &written),
            CUBLAS_STATUS_SUCCESS);
  return v;
}

// An op outside its recipe's dtype (PEFT's fp32 adapters under bf16) multiplies in its own: fp32
// without TF32, or the 16-bit math of its storage; nothing computes in bytes or ids.
TEST(GemmMath, OfADtypeIsTheMathThatStoresIt) {
  for (GemmMath math : {GemmMath::fp32, GemmMath::fp16, GemmMath::bf16})
    EXPECT_EQ(gemm_math_of(gemm_storage(math)), math);
  EXPECT_EQ(gemm_math_of(DType::f32), GemmMath::fp32);  // not tf32
  EXPECT_THROW(gemm_math_of(DType::u8), std::invalid_argument);
}

TEST(GemmDescriptors, CreatedWithoutADeviceWithThePlansDims) {
  const AttentionShape s{4, 128, 8, 2, 64};
  const GemmPlan p = plan_attn_scores(s);
  for (GemmMath math : {GemmMath::fp32, GemmMath::tf32, GemmMath::fp16, GemmMath::bf16}) {
    const GemmDescriptors d = make_gemm_descriptors(p, math, false);
    ASSERT_TRUE(d.op && d.a && d.b && d.c);
    EXPECT_EQ(layout_attr(d.a.get(), CUBLASLT_MATRIX_LAYOUT_ROWS), 64);  // k^T stored D x S
    EXPECT_EQ(layout_attr(d.a.get(), CUBLASLT_MATRIX_LAYOUT_COLS), 128);
    EXPECT_EQ(layout_attr(d.a.get(), CUBLASLT_MATRIX_LAYOUT_LD), (8 + 2 * 2) * 64);
    EXPECT_EQ(layout_attr(d.a.get(), CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT), 4);
    EXPECT_EQ(layout_attr(d.a.get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET), 128 * 12 * 64);
    EXPECT_EQ(layout_attr(d.c.get(), CUBLASLT_MATRIX_LAYOUT_ROWS), 128);
    EXPECT_EQ(layout_attr(d.c.get(), CUBLASLT_MATRIX_LAYOUT_LD), 128);
    EXPECT_EQ(layout_attr(d.c.get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET), 8 * 128 * 128);
    cublasOperation_t ta{};
    cublasComputeType_t ct{};
    std::size_t written = 0;
    ASSERT_EQ(cublasLtMatmulDescGetAttribute(d.op.get(), CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                             sizeof(ta), &written),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescGetAttribute(d.op.get(), CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct,
                                             sizeof(ct), &written),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(ta, CUBLAS_OP_T);
    EXPECT_EQ(ct, math == GemmMath::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
    cudaDataType_t type{};
    ASSERT_EQ(cublasLtMatrixLayoutGetAttribute(d.b.get(), CUBLASLT_MATRIX_LAYOUT_TYPE, &type,
                                               sizeof(type), &written),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(type, cuda_data_type(gemm_storage(math)));
  }
  const GemmDescriptors lin =
      make_gemm_descriptors(plan_linear_fwd(256, 768, 2304), GemmMath::bf16, true);
  cublasLtEpilogue_t epi{};
  std::size_t written = 0;
  ASSERT_EQ(cublasLtMatmulDescGetAttribute(lin.op.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                           sizeof(epi), &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(epi, CUBLASLT_EPILOGUE_BIAS);
  EXPECT_EQ(layout_attr(lin.c.get(), CUBLASLT_MATRIX_LAYOUT_ROWS), 2304);
  EXPECT_EQ(layout_attr(lin.c.get(), CUBLASLT_MATRIX_LAYOUT_COLS), 256);
  EXPECT_EQ(layout_attr(lin.c.get(), CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT), 1);
}

// The heuristic's preference, made without a device: the workspace, the alignments, and split
// K's partial sums reduced in fp32 or not split (the default mask let cuBLASLt round them to the
// 16-bit output: LmHeadGemm failed on the H200 by 2-5 %).
TEST(GemmPreference, ReducesSplitKInFp32AndHoldsTheWorkspaceAndAlignments) {
  const MatmulPreference pref = make_gemm_preference(32 * MiB, 16, 2, 256);
  ASSERT_TRUE(pref);
  auto get32 = [&](cublasLtMatmulPreferenceAttributes_t attr) {
    std::uint32_t v = 0;
    std::size_t written = 0;
    EXPECT_EQ(cublasLtMatmulPreferenceGetAttribute(pref.get(), attr, &v, sizeof(v), &written),
              CUBLAS_STATUS_SUCCESS);
    return v;
  };
  EXPECT_EQ(get32(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK),
            static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  EXPECT_EQ(get32(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES), 16u);
  EXPECT_EQ(get32(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES), 2u);
  EXPECT_EQ(get32(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES), 256u);
  EXPECT_EQ(get32(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES), 256u);
  std::uint64_t workspace = 0;
  std::size_t written = 0;
  EXPECT_EQ(
      cublasLtMatmulPreferenceGetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace, sizeof(workspace), &written),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(workspace, std::uint64_t{32} * MiB);
}

TEST(GemmPlans, PointerAlignment) {
  alignas(256) static char buffer[1024];
  EXPECT_EQ(pointer_alignment(buffer), 256u);
  EXPECT_EQ(pointer_alignment(buffer + 512), 256u);
  EXPECT_EQ(pointer_alignment(buffer + 32), 32u);
  EXPECT_EQ(pointer_alignment(buffer + 2 * 24), 16u);  // bf16 head offset of 24 elements
  EXPECT_EQ(pointer_alignment(buffer + 2), 2u);
  EXPECT_EQ(pointer_alignment(nullptr), 256u);
}

// The alignment cuBLASLt is told: the pointer's, and that of every column (ld) and batch (stride).
TEST(GemmPlans, OperandAlignmentCountsLeadingDimensionAndStride) {
  alignas(256) static char buffer[1024];
  // The lm head's y and dy: ld = V = 50257, odd. A 256-byte aligned buffer still has columns
  // only 2 (16-bit) or 4 (fp32) bytes apart from 16-byte boundaries.
  EXPECT_EQ(operand_alignment(buffer, 50257, 1, 0, 2), 2u);
  EXPECT_EQ(operand_alignment(buffer, 50257, 1, 0, 4), 4u);
  // gpt2's other GEMMs: ld 768, 2304, 3072 elements are all multiples of 256 bytes in bf16.
  for (std::int64_t ld : {768, 2304, 3072}) EXPECT_EQ(operand_alignment(buffer, ld, 1, 0, 2), 256u);
  // ld 24 bf16 = 48 bytes: 16.
  EXPECT_EQ(operand_alignment(buffer, 24, 1, 0, 2), 16u);
  // The pointer bounds it too (a per-head offset of 24 bf16 elements).
  EXPECT_EQ(operand_alignment(buffer + 48, 768, 1, 0, 2), 16u);
  // A batch stride counts only when batched.
  EXPECT_EQ(operand_alignment(buffer, 768, 4, 1001, 2), 2u);
  EXPECT_EQ(operand_alignment(buffer, 768, 1, 1001, 2), 256u);
}

}  // namespace
}  // namespace vrambench::cuda

namespace vrambench::cuda {
namespace {

// The plan caches are bounded: least recently used first out, whatever the key's shape.
TEST(PlanCache, KeepsTheMostRecentlyUsedWithinItsCapacity) {
  using Key = std::tuple<std::tuple<bool, std::int64_t, float>, int>;
  LruCache<Key, int, TupleHash> cache(3);
  for (int i = 0; i < 3; ++i) cache.insert({{i % 2 == 0, i, 1.0f}, i}, i);
  ASSERT_NE(cache.find({{true, 0, 1.0f}, 0}), nullptr);  // 0 is now the most recent
  cache.insert({{true, 3, 1.0f}, 3}, 3);                 // evicts 1, the least recent
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.find({{false, 1, 1.0f}, 1}), nullptr);
  ASSERT_NE(cache.find({{true, 0, 1.0f}, 0}), nullptr);
  EXPECT_EQ(*cache.find({{true, 0, 1.0f}, 0}), 0);
  EXPECT_EQ(*cache.find({{true, 3, 1.0f}, 3}), 3);
  // Keys that differ in one nested field hash apart (no collision among these few).
  const TupleHash hash;
  EXPECT_NE(hash(Key{{true, 5, 1.0f}, 0}), hash(Key{{true, 5, 0.5f}, 0}));
  EXPECT_NE(hash(Key{{true, 5, 1.0f}, 0}), hash(Key{{false, 5, 1.0f}, 0}));
  EXPECT_NE(hash(Key{{true, 5, 1.0f}, 0}), hash(Key{{true, 5, 1.0f}, 1}));
}

// More distinct GEMMs than the cache holds: it stays at its bound, and a plan evicted and built
// again still computes the right product.
TEST(GemmRunnerCache, StaysBoundedAndRebuildsEvictedPlans) {
  VB_REQUIRE_GPU();
  const std::size_t shapes = GemmRunner::kGemmPlanCacheEntries + 88;
  const std::int64_t In = 8, Out = 8, max_M = static_cast<std::int64_t>(shapes);
  std::vector<float> x(static_cast<std::size_t>(max_M * In)), w(static_cast<std::size_t>(Out * In));
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng);
  DeviceBuffer dx(x.size() * 4), dw(w.size() * 4), dy(static_cast<std::size_t>(max_M * Out) * 4),
      ws(static_cast<std::size_t>(4 * MiB));
  ASSERT_EQ(cudaMemcpy(dx.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dw.get(), w.data(), w.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  GemmRunner runner;
  auto product = [&](std::int64_t M) {
    runner.run(plan_linear_fwd(M, In, Out), GemmMath::fp32, dw.get(), dx.get(), dy.get(), nullptr,
               ws.get(), 4 * MiB, nullptr);
    std::vector<float> y(static_cast<std::size_t>(M * Out));
    EXPECT_EQ(cudaMemcpy(y.data(), dy.get(), y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    double worst = 0;
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t o = 0; o < Out; ++o) {
        double want = 0;
        for (std::int64_t k = 0; k < In; ++k)
          want += double(x[static_cast<std::size_t>(m * In + k)]) *
                  double(w[static_cast<std::size_t>(o * In + k)]);
        worst = std::max(worst, std::fabs(want - y[static_cast<std::size_t>(m * Out + o)]));
      }
    return worst;
  };
  for (std::int64_t M = 1; M <= max_M; ++M) product(M);
  EXPECT_EQ(runner.cached_plans(), GemmRunner::kGemmPlanCacheEntries);
  EXPECT_LT(product(1), 1e-4) << "M=1 was evicted and built again";
  EXPECT_EQ(runner.cached_plans(), GemmRunner::kGemmPlanCacheEntries);
}

}  // namespace
}  // namespace vrambench::cuda
