// cuDNN fused attention through cudnn-frontend (kernels/cuda/attention_cudnn.h).
// Without a GPU: the layouts over packed qkv/y/lse, batch chunks, the bounded plan cache, the
// workspace formula, the frontend's validate() of every variant the step programs use (and its
// rejections, reported with its message), frontend errors mapped to typed errors.
// With a GPU (CudnnSdpaGpu*; skipped only when there is no CUDA device): forward and backward
// against the CPU reference, dropout's mask shared by forward and backward, chunked batches, the
// workspace cuDNN needs next to what the step program lists, and no fallback when cuDNN cannot run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "cpu/attention.h"
#include "cuda/attention_cudnn.h"
#include "cuda/check.h"
#include "cuda/gemm.h"
#include "cuda/owners.h"
#include "cuda/types.h"
#include "device/cuda_device.h"
#include "gpu/require_gpu.h"
#include "program/program.h"

namespace vrambench::cuda {
namespace {

SdpaKey key_of(SdpaShape s, DType dt, SdpaPass pass, float dropout = 0.0f) {
  return SdpaKey{s, dt, dropout, pass};
}

// ---- without a device --------------------------------------------------------------------------

TEST(CudnnSdpaLayouts, ViewsOfPackedQkvYAndLse) {
  const SdpaShape s{2, 100, 8, 2, 64};
  const std::int64_t W = (8 + 2 * 2) * 64;
  EXPECT_EQ(s.width(), W);
  EXPECT_EQ(sdpa_q_layout(s).dims, (std::vector<std::int64_t>{2, 8, 100, 64}));
  EXPECT_EQ(sdpa_q_layout(s).strides, (std::vector<std::int64_t>{100 * W, 64, W, 1}));
  EXPECT_EQ(sdpa_kv_layout(s).dims, (std::vector<std::int64_t>{2, 2, 100, 64}));
  EXPECT_EQ(sdpa_kv_layout(s).strides, (std::vector<std::int64_t>{100 * W, 64, W, 1}));
  EXPECT_EQ(sdpa_o_layout(s).dims, (std::vector<std::int64_t>{2, 8, 100, 64}));
  EXPECT_EQ(sdpa_o_layout(s).strides, (std::vector<std::int64_t>{100 * 8 * 64, 64, 8 * 64, 1}));
  EXPECT_EQ(sdpa_stats_layout(s).dims, (std::vector<std::int64_t>{2, 8, 100, 1}));
  EXPECT_EQ(sdpa_stats_layout(s).strides, (std::vector<std::int64_t>{8 * 100, 100, 1, 1}));
  EXPECT_EQ(sdpa_k_column(s), 8 * 64);        // k of kv head 0 after the 8 query heads
  EXPECT_EQ(sdpa_v_column(s), (8 + 2) * 64);  // v after the 2 key heads
  EXPECT_FLOAT_EQ(s.scale(), 0.125f);
}

TEST(CudnnSdpaLayouts, ElementOffsetsAgreeWithTheCpuReferenceLayout) {
  // Element (b, h, i, d) of each view, through its strides, is where the CPU reference keeps it.
  const SdpaShape s{3, 7, 4, 2, 8};
  const cpu::AttnShape c{3, 7, 4, 2, 8};
  auto at = [](const SdpaLayout& l, std::int64_t b, std::int64_t h, std::int64_t i,
               std::int64_t d) {
    return b * l.strides[0] + h * l.strides[1] + i * l.strides[2] + d * l.strides[3];
  };
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t i = 0; i < 7; ++i)
      for (std::int64_t d = 0; d < 8; ++d) {
        const std::int64_t row = (b * c.S + i) * c.Q();
        for (std::int64_t a = 0; a < 4; ++a) {
          EXPECT_EQ(at(sdpa_q_layout(s), b, a, i, d), row + a * c.D + d);
          EXPECT_EQ(at(sdpa_o_layout(s), b, a, i, d), (b * c.S + i) * c.A * c.D + a * c.D + d);
        }
        for (std::int64_t k = 0; k < 2; ++k) {
          EXPECT_EQ(sdpa_k_column(s) + at(sdpa_kv_layout(s), b, k, i, d),
                    row + (c.A + k) * c.D + d);
          EXPECT_EQ(sdpa_v_column(s) + at(sdpa_kv_layout(s), b, k, i, d),
                    row + (c.A + c.K + k) * c.D + d);
        }
      }
}

TEST(CudnnSdpaChunks, SmallBatchesAreOneChunk) {
  EXPECT_EQ(sdpa_batch_chunks(1), (std::vector<SdpaChunk>{{0, 1}}));
  EXPECT_EQ(sdpa_batch_chunks(kSdpaMaxBatch), (std::vector<SdpaChunk>{{0, kSdpaMaxBatch}}));
  EXPECT_EQ(kSdpaMaxBatch, 65535);
}

TEST(CudnnSdpaChunks, LargeBatchesSplitEvenlyWithinTheLimit) {
  EXPECT_EQ(sdpa_batch_chunks(65536), (std::vector<SdpaChunk>{{0, 32768}, {32768, 32768}}));
  EXPECT_EQ(sdpa_batch_chunks(131071),
            (std::vector<SdpaChunk>{{0, 43691}, {43691, 43690}, {87381, 43690}}));
  EXPECT_EQ(sdpa_batch_chunks(5, 2), (std::vector<SdpaChunk>{{0, 2}, {2, 2}, {4, 1}}));
  for (std::int64_t batch : {1, 2, 65534, 65535, 65536, 65537, 131070, 131071, 131072, 1000003}) {
    const std::vector<SdpaChunk> chunks = sdpa_batch_chunks(batch);
    std::int64_t next = 0;
    std::set<std::int64_t> sizes;
    for (const SdpaChunk& c : chunks) {
      EXPECT_EQ(c.first, next) << batch;
      EXPECT_GE(c.batch, 1) << batch;
      EXPECT_LE(c.batch, kSdpaMaxBatch) << batch;
      sizes.insert(c.batch);
      next += c.batch;
    }
    EXPECT_EQ(next, batch);
    EXPECT_LE(sizes.size(), 2u) << "at most two graphs per op for batch " << batch;
    EXPECT_EQ(static_cast<std::int64_t>(chunks.size()),
              (batch + kSdpaMaxBatch - 1) / kSdpaMaxBatch);
  }
  EXPECT_THROW(sdpa_batch_chunks(0), std::invalid_argument);
  EXPECT_THROW(sdpa_batch_chunks(4, 0), std::invalid_argument);
}

TEST(CudnnSdpaCache, StaysBoundedAndKeepsTheRecentlyUsed) {
  LruCache<SdpaKey, int, SdpaKeyHash> cache(CudnnSdpa::kDefaultCacheCapacity);
  const SdpaKey kept = key_of({1, 64, 4, 4, 64}, DType::bf16, SdpaPass::forward);
  cache.insert(kept, -1);
  for (int b = 1; b <= 500; ++b) {
    cache.insert(key_of({b, 128, 8, 2, 64}, DType::bf16, SdpaPass::backward), b);
    ASSERT_NE(cache.find(kept), nullptr) << "used after every insert, so never the oldest";
    EXPECT_LE(cache.size(), CudnnSdpa::kDefaultCacheCapacity);
  }
  EXPECT_EQ(cache.size(), CudnnSdpa::kDefaultCacheCapacity);
  EXPECT_EQ(*cache.find(kept), -1);
  // The oldest inserts are gone, the newest are there.
  EXPECT_EQ(cache.find(key_of({1, 128, 8, 2, 64}, DType::bf16, SdpaPass::backward)), nullptr);
  ASSERT_NE(cache.find(key_of({500, 128, 8, 2, 64}, DType::bf16, SdpaPass::backward)), nullptr);
  // Inserting an existing key replaces it without growing.
  cache.insert(kept, 7);
  EXPECT_EQ(*cache.find(kept), 7);
  EXPECT_EQ(cache.size(), CudnnSdpa::kDefaultCacheCapacity);
  EXPECT_THROW((LruCache<SdpaKey, int, SdpaKeyHash>(0)), std::invalid_argument);
}

TEST(CudnnSdpaKey, EveryFieldTells) {
  const SdpaKey base = key_of({2, 100, 8, 2, 64}, DType::bf16, SdpaPass::forward);
  std::vector<SdpaKey> keys{base};
  auto with = [&](auto change) {
    SdpaKey k = base;
    change(k);
    keys.push_back(k);
  };
  with([](SdpaKey& k) { k.shape.batch = 3; });
  with([](SdpaKey& k) { k.shape.seq = 101; });
  with([](SdpaKey& k) { k.shape.heads = 4; });
  with([](SdpaKey& k) { k.shape.kv_heads = 8; });
  with([](SdpaKey& k) { k.shape.head_dim = 128; });
  with([](SdpaKey& k) { k.dtype = DType::f16; });
  with([](SdpaKey& k) { k.dropout_p = 0.1f; });
  with([](SdpaKey& k) { k.pass = SdpaPass::backward; });
  LruCache<SdpaKey, std::size_t, SdpaKeyHash> cache(64);
  for (std::size_t i = 0; i < keys.size(); ++i) cache.insert(keys[i], i);
  EXPECT_EQ(cache.size(), keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(*cache.find(keys[i]), i);
  EXPECT_EQ(describe(keys.back()), "sdpa_backward B=2 S=100 A=8 K=2 D=64 bf16");
  EXPECT_EQ(describe(keys[7]), "sdpa B=2 S=100 A=8 K=2 D=64 bf16 dropout 0.1");
}

TEST(CudnnSdpaWorkspace, FormulaIsTheFrontendsPartAndTheEngines) {
  const SdpaShape mha{2, 100, 4, 4, 64}, gqa{2, 100, 8, 2, 64};
  // dQ accumulator [B,A,S,D] and softmax sums [B,A,S], fp32, back to back.
  EXPECT_EQ(sdpa_frontend_workspace_bytes(mha, SdpaPass::backward),
            2 * 4 * 100 * 64 * 4 + 2 * 4 * 100 * 4);
  EXPECT_EQ(sdpa_frontend_workspace_bytes(gqa, SdpaPass::forward), 0);
  EXPECT_EQ(sdpa_program_scratch_bytes(mha, DType::bf16, SdpaPass::forward), 256);
  EXPECT_EQ(sdpa_program_scratch_bytes(gqa, DType::f16, SdpaPass::forward), 256);
  // What cuDNN 9.14 asked for on an H100 for these (S = 100: with the frontend's sequence
  // lengths): accumulator and sums, 8 B per batch row, 256; grouped heads add dK and dV per
  // query head in the storage type.
  EXPECT_EQ(sdpa_program_scratch_bytes(mha, DType::bf16, SdpaPass::backward), 208272);
  EXPECT_EQ(sdpa_program_scratch_bytes(gqa, DType::bf16, SdpaPass::backward), 825872);
  EXPECT_EQ(sdpa_program_scratch_bytes({2, 100, 8, 2, 128}, DType::f16, SdpaPass::backward),
            1645072);
  // ... and an upper bound where cuDNN needs no sequence lengths (S = 1024: it asked 67371264).
  EXPECT_EQ(sdpa_program_scratch_bytes({4, 1024, 16, 4, 128}, DType::bf16, SdpaPass::backward),
            67371264 + 8 * 4);
  // Per chunk it grows with the batch, so the chunks of a batch never need more than it.
  const SdpaShape big{65536, 8, 2, 1, 64};
  SdpaShape chunk = big;
  chunk.batch = sdpa_batch_chunks(big.batch).front().batch;
  EXPECT_LT(sdpa_program_scratch_bytes(chunk, DType::bf16, SdpaPass::backward),
            sdpa_program_scratch_bytes(big, DType::bf16, SdpaPass::backward));
}

// Every variant the step programs use: both storage types, causal, multi-head and grouped-query,
// head sizes 64 and 128, forward and backward, with and without dropout.
std::vector<SdpaKey> used_variants(std::int64_t batch, std::int64_t seq) {
  std::vector<SdpaKey> keys;
  for (DType dt : {DType::bf16, DType::f16})
    for (std::int64_t kv : {8, 2})
      for (std::int64_t d : {64, 128})
        for (SdpaPass pass : {SdpaPass::forward, SdpaPass::backward})
          for (float p : {0.0f, 0.1f}) keys.push_back(key_of({batch, seq, 8, kv, d}, dt, pass, p));
  return keys;
}

TEST(CudnnSdpaValidate, EveryVariantWeUseValidatesWithoutADevice) {
  for (int sm : {80, 90})
    for (const SdpaKey& k : used_variants(2, 100)) {
      SCOPED_TRACE(describe(k) + " sm" + std::to_string(sm));
      EXPECT_NO_THROW(validate_sdpa_graph(k, sm));
    }
}

// A rejected graph is an error with the frontend's own reason, never a silent "no".
void expect_rejected(const SdpaKey& k, int sm) {
  SCOPED_TRACE(describe(k));
  try {
    validate_sdpa_graph(k, sm);
    ADD_FAILURE() << "the frontend took it";
  } catch (const CudaOutOfMemory& e) {
    ADD_FAILURE() << "reported as out of memory: " << e.what();
  } catch (const CudaError& e) {
    EXPECT_EQ(e.library(), Library::cudnn_frontend);
    EXPECT_NE(e.code(), 0);
    EXPECT_NE(e.error_name(), "?");
    EXPECT_FALSE(e.error_string().empty());
    const std::string what = e.what();
    EXPECT_NE(what.find("cuDNN frontend error"), std::string::npos) << what;
    EXPECT_NE(what.find(describe(k)), std::string::npos) << what;
    EXPECT_NE(what.find("attention_cudnn.cpp:"), std::string::npos) << what;
  }
}

TEST(CudnnSdpaValidate, RejectedVariantsAreReportedWithTheFrontendsMessage) {
  // Head size not a multiple of 8 (the fused kernels load 16 bytes at a time).
  expect_rejected(key_of({2, 100, 8, 2, 60}, DType::bf16, SdpaPass::forward), 90);
  expect_rejected(key_of({2, 100, 8, 2, 60}, DType::f16, SdpaPass::backward), 90);
  // Query heads not a multiple of the kv heads.
  expect_rejected(key_of({2, 100, 6, 4, 64}, DType::bf16, SdpaPass::forward), 90);
  // Before Ampere there is no fused attention.
  expect_rejected(key_of({2, 100, 8, 2, 64}, DType::bf16, SdpaPass::forward), 75);
  // Not a floating storage type: refused before the frontend.
  EXPECT_THROW(validate_sdpa_graph(key_of({2, 100, 8, 2, 64}, DType::i32, SdpaPass::forward), 90),
               std::invalid_argument);
}

TEST(CudnnFrontendErrors, AllocationFailuresAreOutOfMemory) {
  // What the frontend's own checks put in error_t when a cuDNN or CUDA call fails.
  EXPECT_TRUE(is_out_of_memory_frontend(11,
                                        "cudnnBackendExecute(...) failed with message: , and code: "
                                        "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"));
  EXPECT_TRUE(is_out_of_memory_frontend(11, "... code: CUDNN_STATUS_ALLOC_FAILED"));
  EXPECT_TRUE(is_out_of_memory_frontend(10, "cudaMalloc(...) failed with out of memory"));
  EXPECT_FALSE(is_out_of_memory_frontend(5, "hidden_dim should be multiple of 8"));
  EXPECT_FALSE(is_out_of_memory_frontend(11, "... code: CUDNN_STATUS_NOT_SUPPORTED"));
  EXPECT_FALSE(is_out_of_memory_frontend(0, "out of memory"));  // OK is never an error

  EXPECT_THROW(throw_cudnn_frontend(11, "code: CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",
                                    "g.build_plans(h)", "x.cpp", 1),
               CudaOutOfMemory);
  try {
    throw_cudnn_frontend(6, "No valid execution plans built.", "g.build_plans(h)", "x.cpp", 7);
    FAIL() << "no throw";
  } catch (const CudaOutOfMemory&) {
    FAIL() << "reported as out of memory";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.library(), Library::cudnn_frontend);
    EXPECT_EQ(e.error_name(), "GRAPH_EXECUTION_PLAN_CREATION_FAILED");
    EXPECT_EQ(e.call(), "g.build_plans(h)");
    EXPECT_NE(std::string(e.what()).find("No valid execution plans built."), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("x.cpp:7"), std::string::npos);
  }
  EXPECT_STREQ(frontend_error_name(99), "?");
}

// ---- on a GPU ----------------------------------------------------------------------------------

// Deterministic values in [-1, 1), rounded to `dt` so that the GPU and the CPU read the same.
float round_to(float v, DType dt) {
  float out = v;
  dispatch_float(dt, [&](auto t) {
    using T = decltype(t);
    out = to_f32(from_f32<T>(v));
  });
  return out;
}
std::vector<float> values(std::size_t n, std::uint32_t seed, DType dt) {
  std::vector<float> v(n);
  std::uint32_t x = seed * 2654435761u + 1u;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = round_to(static_cast<float>(x >> 8) / 8388608.0f - 1.0f, dt);
  }
  return v;
}
DeviceBuffer upload(const std::vector<float>& v, DType dt) {
  const auto es = static_cast<std::size_t>(dtype_size(dt));
  std::vector<std::uint8_t> bytes(v.size() * es);
  dispatch_float(dt, [&](auto t) {
    using T = decltype(t);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const T x = from_f32<T>(v[i]);
      std::memcpy(bytes.data() + i * es, &x, es);
    }
  });
  DeviceBuffer d(bytes.size());
  VB_CUDA_CHECK(cudaMemcpy(d.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  return d;
}
std::vector<float> download(const DeviceBuffer& d, std::size_t n, DType dt) {
  const auto es = static_cast<std::size_t>(dtype_size(dt));
  std::vector<std::uint8_t> bytes(n * es);
  VB_CUDA_CHECK(cudaMemcpy(bytes.data(), d.get(), bytes.size(), cudaMemcpyDeviceToHost));
  std::vector<float> v(n);
  dispatch_float(dt, [&](auto t) {
    using T = decltype(t);
    for (std::size_t i = 0; i < n; ++i) {
      T x;
      std::memcpy(&x, bytes.data() + i * es, es);
      v[i] = to_f32(x);
    }
  });
  return v;
}
DeviceBuffer filled_with_nan(std::size_t bytes) {
  DeviceBuffer d(bytes);
  VB_CUDA_CHECK(cudaMemset(d.get(), 0xff, bytes));  // NaN in every float format: never written
  return d;
}

struct Tolerance {
  double rtol, atol;
};
// The selftest's tolerances for 16-bit storage; the backward's sums run longer.
// fp32 as the selftest's tf32 GEMMs (cuDNN may multiply in TF32).
Tolerance tolerance(DType dt, bool backward) {
  Tolerance t = dt == DType::bf16 ? Tolerance{5e-2, 1e-2} : Tolerance{1e-2, 2e-3};
  if (backward) t = {t.rtol * 2, t.atol * 2};
  return t;
}
// Largest |got - want| / (atol + rtol |want|); <= 1 passes; infinite for a NaN.
double worst_ratio(const std::vector<float>& got, const std::vector<float>& want, Tolerance t) {
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double r = std::fabs(static_cast<double>(got[i]) - want[i]) /
                     (t.atol + t.rtol * std::fabs(static_cast<double>(want[i])));
    if (std::isnan(r)) return INFINITY;
    worst = std::max(worst, r);
  }
  return worst;
}

// Sizes of the packed tensors of a shape.
struct Sizes {
  std::size_t qkv, y, lse;
};
Sizes sizes(const SdpaShape& s) {
  return {static_cast<std::size_t>(s.batch * s.seq * s.width()),
          static_cast<std::size_t>(s.batch * s.seq * s.heads * s.head_dim),
          static_cast<std::size_t>(s.batch * s.heads * s.seq)};
}
cpu::AttnShape cpu_shape(const SdpaShape& s) {
  return {s.batch, s.seq, s.heads, s.kv_heads, s.head_dim};
}

// The forward through `sdpa` against the CPU reference.
void check_forward(CudnnSdpa& sdpa, const SdpaShape& s, DType dt) {
  const Sizes n = sizes(s);
  const std::vector<float> qkv = values(n.qkv, 1, dt);
  std::vector<float> y_ref(n.y), lse_ref(n.lse);
  cpu::flash_fwd(y_ref.data(), lse_ref.data(), qkv.data(), cpu_shape(s), 0.0f, 0);
  const SdpaKey fwd = key_of(s, dt, SdpaPass::forward);
  const Bytes ws = sdpa.workspace_bytes(fwd);
  const DeviceBuffer d_qkv = upload(qkv, dt);
  DeviceBuffer d_y = filled_with_nan(n.y * static_cast<std::size_t>(dtype_size(dt)));
  DeviceBuffer d_lse = filled_with_nan(n.lse * sizeof(float));
  DeviceBuffer workspace = filled_with_nan(static_cast<std::size_t>(ws));
  sdpa.forward(d_y.get(), d_lse.as<float>(), d_qkv.get(), fwd, {}, workspace.get(), ws,
               "test.flash", nullptr);
  VB_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> lse(n.lse);
  VB_CUDA_CHECK(cudaMemcpy(lse.data(), d_lse.get(), n.lse * sizeof(float), cudaMemcpyDeviceToHost));
  const double y_ratio = worst_ratio(download(d_y, n.y, dt), y_ref, tolerance(dt, false));
  const double lse_ratio = worst_ratio(lse, lse_ref, {1e-3, 1e-3});
  EXPECT_LE(y_ratio, 1.0) << "y";
  EXPECT_LE(lse_ratio, 1.0) << "lse";
  std::printf("  %s: worst error / tolerance y %.3g, lse %.3g; workspace %lld B\n",
              describe(fwd).c_str(), y_ratio, lse_ratio, static_cast<long long>(ws));
}

// The backward through `sdpa` against the CPU reference, both from the reference's y (rounded to
// the storage type) and lse, so that only the backward is compared.
void check_backward(CudnnSdpa& sdpa, const SdpaShape& s, DType dt) {
  const Sizes n = sizes(s);
  const cpu::AttnShape c = cpu_shape(s);
  const std::vector<float> qkv = values(n.qkv, 1, dt), dy = values(n.y, 2, dt);
  std::vector<float> y(n.y), lse(n.lse), dqkv_ref(n.qkv);
  cpu::flash_fwd(y.data(), lse.data(), qkv.data(), c, 0.0f, 0);
  for (float& v : y) v = round_to(v, dt);
  cpu::flash_bwd(dqkv_ref.data(), dy.data(), qkv.data(), y.data(), lse.data(), c, 0.0f, 0);
  const SdpaKey bwd = key_of(s, dt, SdpaPass::backward);
  const Bytes ws = sdpa.workspace_bytes(bwd);
  const DeviceBuffer d_qkv = upload(qkv, dt), d_dy = upload(dy, dt), d_y = upload(y, dt);
  DeviceBuffer d_lse(n.lse * sizeof(float));
  VB_CUDA_CHECK(cudaMemcpy(d_lse.get(), lse.data(), n.lse * sizeof(float), cudaMemcpyHostToDevice));
  DeviceBuffer d_dqkv = filled_with_nan(n.qkv * static_cast<std::size_t>(dtype_size(dt)));
  DeviceBuffer workspace = filled_with_nan(static_cast<std::size_t>(ws));
  sdpa.backward(d_dqkv.get(), d_dy.get(), d_qkv.get(), d_y.get(), d_lse.as<float>(), bwd, {},
                workspace.get(), ws, "test.flash.bwd", nullptr);
  VB_CUDA_CHECK(cudaDeviceSynchronize());
  const double ratio = worst_ratio(download(d_dqkv, n.qkv, dt), dqkv_ref, tolerance(dt, true));
  EXPECT_LE(ratio, 1.0) << "dqkv";
  std::printf("  %s: worst error / tolerance dqkv %.3g; workspace %lld B\n", describe(bwd).c_str(),
              ratio, static_cast<long long>(ws));
}

void expect_matches_reference(CudnnSdpa& sdpa, const SdpaShape& s, DType dt) {
  check_forward(sdpa, s, dt);
  check_backward(sdpa, s, dt);
}

struct Variant {
  DType dtype;
  std::int64_t heads, kv_heads, head_dim;
};
void PrintTo(const Variant& v, std::ostream* os) {  // names in ctest without padding bytes
  *os << dtype_name(v.dtype) << " A=" << v.heads << " K=" << v.kv_heads << " D=" << v.head_dim;
}
class CudnnSdpaGpu : public ::testing::TestWithParam<Variant> {};

TEST_P(CudnnSdpaGpu, ForwardAndBackwardMatchTheCpuReference) {
  VB_REQUIRE_GPU();
  const Variant v = GetParam();
  CudnnSdpa sdpa;
  // S = 100: not a multiple of the kernels' 64 or 128 row tiles.
  expect_matches_reference(sdpa, {2, 100, v.heads, v.kv_heads, v.head_dim}, v.dtype);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, CudnnSdpaGpu,
    ::testing::Values(Variant{DType::bf16, 4, 4, 64}, Variant{DType::bf16, 8, 2, 64},
                      Variant{DType::bf16, 4, 4, 128}, Variant{DType::bf16, 8, 2, 128},
                      Variant{DType::f16, 4, 4, 64}, Variant{DType::f16, 8, 2, 64},
                      Variant{DType::f16, 4, 4, 128}, Variant{DType::f16, 8, 2, 128}),
    [](const ::testing::TestParamInfo<Variant>& info) {
      const Variant& v = info.param;
      return std::string(dtype_name(v.dtype)) + "_A" + std::to_string(v.heads) + "_K" +
             std::to_string(v.kv_heads) + "_D" + std::to_string(v.head_dim);
    });

TEST(CudnnSdpaGpuChunks, ChunkedBatchesMatchTheCpuReference) {
  VB_REQUIRE_GPU();
  // At most 2 batch rows per graph: 5 runs as 2 + 2 + 1, each at its own pointer offsets.
  CudnnSdpa sdpa(CudnnSdpa::kDefaultCacheCapacity, 2);
  expect_matches_reference(sdpa, {5, 72, 8, 2, 64}, DType::bf16);
  EXPECT_EQ(sdpa.cached_graphs(), 4u) << "chunks of 2 and of 1, forward and backward";
}

TEST(CudnnSdpaGpuChunks, BatchAboveTheGridLimitRuns) {
  VB_REQUIRE_GPU();
  // 70000 batch rows: two graphs of 35000, one after the other on the same workspace.
  CudnnSdpa sdpa;
  expect_matches_reference(sdpa, {70000, 8, 1, 1, 64}, DType::bf16);
  EXPECT_EQ(sdpa.cached_graphs(), 2u) << "one chunk shape, forward and backward";
}

TEST(CudnnSdpaGpuCache, PlanCacheStaysBounded) {
  VB_REQUIRE_GPU();
  CudnnSdpa sdpa(2);
  for (std::int64_t b = 1; b <= 4; ++b) {
    EXPECT_GE(sdpa.workspace_bytes(key_of({b, 64, 4, 4, 64}, DType::bf16, SdpaPass::forward)), 0);
    EXPECT_LE(sdpa.cached_graphs(), 2u);
  }
  EXPECT_EQ(sdpa.cached_graphs(), 2u);
}

// The flash ops of small step programs, the workspace cuDNN asks for each, and what the program
// lists for it (its scratch tensor of role workspace; none for flash_fwd today).
RunConfig flash_config(Arch arch, Precision precision, std::int64_t heads, std::int64_t kv_heads,
                       std::int64_t head_dim, std::int64_t seq, std::int64_t batch,
                       double dropout) {
  RunConfig c;
  c.model.name = "custom";
  c.model.arch = arch;
  c.model.hidden = heads * head_dim;
  c.model.heads = heads;
  c.model.kv_heads = kv_heads;
  c.model.layers = 1;
  c.model.ffn = 4 * c.model.hidden;
  c.model.vocab = 128;
  c.model.max_positions = seq;
  c.seq = seq;
  c.batch = batch;
  c.dtype = precision;
  c.attention = Attention::flash;
  c.recompute = Recompute::none;
  c.optimizer = Optimizer::adamw;
  c.dropout = dropout;
  c.scope = Scope::attention;
  c.device = parse_device("cuda");
  return c;
}

struct FlashOp {
  std::size_t index;
  SdpaKey key;
  Bytes listed;  // the op's workspace tensor, 0 when it has none
};
std::vector<FlashOp> flash_ops(const Program& p) {
  std::vector<FlashOp> out;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    if (op.kind != OpKind::flash_fwd && op.kind != OpKind::flash_bwd) continue;
    const bool fwd = op.kind == OpKind::flash_fwd;
    const Tensor& qkv = p.tensor(fwd ? op.inputs.at(0) : op.inputs.at(1));
    const std::int64_t A = op.heads, K = op.kv_heads > 0 ? op.kv_heads : op.heads;
    const SdpaShape s{qkv.shape.at(0), qkv.shape.at(1), A, K, qkv.shape.at(2) / (A + 2 * K)};
    Bytes listed = 0;
    for (int id : op.outputs)
      if (p.tensor(id).role == Role::workspace) listed += p.tensor(id).bytes;
    out.push_back({i,
                   {s, p.tensor(op.outputs.at(0)).dtype, static_cast<float>(op.dropout_p),
                    fwd ? SdpaPass::forward : SdpaPass::backward},
                   listed});
  }
  return out;
}

TEST(CudnnSdpaGpuWorkspace, FitsWhatTheProgramLists) {
  VB_REQUIRE_GPU();
  CudnnSdpa sdpa;
  const std::vector<RunConfig> configs{
      flash_config(Arch::llama, Precision::bf16, 8, 2, 64, 100, 2, 0.0),
      flash_config(Arch::llama, Precision::bf16, 16, 4, 128, 1024, 4, 0.0),
      flash_config(Arch::llama, Precision::fp16, 8, 8, 128, 2048, 2, 0.0),
      flash_config(Arch::gpt, Precision::bf16, 12, 12, 64, 1024, 8, 0.0),
      flash_config(Arch::gpt, Precision::fp16, 12, 12, 64, 512, 3, 0.1),
      flash_config(Arch::gpt, Precision::bf16, 16, 16, 128, 4096, 1, 0.1),
  };
  int seen = 0;
  for (const RunConfig& cfg : configs) {
    const Program p = build_program(cfg, gemm_workspace_bytes(90));
    for (const FlashOp& f : flash_ops(p)) {
      ++seen;
      const Bytes cudnn = sdpa.workspace_bytes(f.key);
      const Bytes formula = sdpa_program_scratch_bytes(f.key.shape, f.key.dtype, f.key.pass);
      std::printf("  %-56s cuDNN %11lld B, program lists %11lld B, formula %11lld B\n",
                  describe(f.key).c_str(), static_cast<long long>(cudnn),
                  static_cast<long long>(f.listed), static_cast<long long>(formula));
      EXPECT_LE(cudnn, f.listed) << describe(f.key) << ": the program lists too little";
      EXPECT_LE(cudnn, formula) << describe(f.key) << ": sdpa_program_scratch_bytes is too small";
      // The formula's slack: at most the sequence lengths and the engine's 256 B it always keeps.
      EXPECT_LE(formula - cudnn, 8 * f.key.shape.batch + kSdpaEngineWorkspace)
          << describe(f.key) << ": sdpa_program_scratch_bytes asks far more than cuDNN uses";
    }
  }
  EXPECT_GE(seen, 12);
}

TEST(CudnnSdpaGpuWorkspace, TooLittleIsRefusedNamingBothSizes) {
  VB_REQUIRE_GPU();
  CudnnSdpa sdpa;
  const SdpaKey bwd = key_of({2, 100, 8, 2, 64}, DType::bf16, SdpaPass::backward);
  const Bytes needed = sdpa.workspace_bytes(bwd);
  ASSERT_GT(needed, 0) << "the backward keeps its dQ accumulator in the workspace";
  DeviceBuffer workspace(static_cast<std::size_t>(needed));
  try {
    // Never dereferenced: refused before anything runs.
    sdpa.backward(nullptr, nullptr, nullptr, nullptr, nullptr, bwd, {}, workspace.get(), needed - 1,
                  "layer0.attn.flash.bwd", nullptr);
    FAIL() << "ran with less workspace than the plan needs";
  } catch (const CudnnWorkspaceTooSmall& e) {
    EXPECT_EQ(e.needed(), needed);
    EXPECT_EQ(e.listed(), needed - 1);
    const std::string what = e.what();
    EXPECT_NE(what.find("cuDNN sdpa_backward needs " + std::to_string(needed) +
                        " bytes of workspace, the program lists " + std::to_string(needed - 1) +
                        " for op 'layer0.attn.flash.bwd'"),
              std::string::npos)
        << what;
  }
}

// fp32 storage: cuDNN has no fused flash engine for it; where a pass builds anyway (an H100 with
// cuDNN 9.14 plans the forward) its results must match the reference, and where it does not the
// error carries the frontend's message. Never a silent substitute.
TEST(CudnnSdpaGpuErrors, Fp32RunsCorrectlyOrIsAnErrorWithTheFrontendsMessage) {
  VB_REQUIRE_GPU();
  CudnnSdpa sdpa;
  const SdpaShape s{2, 64, 4, 4, 64};
  int errors = 0;
  for (SdpaPass pass : {SdpaPass::forward, SdpaPass::backward}) {
    const SdpaKey k = key_of(s, DType::f32, pass);
    try {
      if (pass == SdpaPass::forward)
        check_forward(sdpa, s, DType::f32);
      else
        check_backward(sdpa, s, DType::f32);
    } catch (const CudaOutOfMemory& e) {
      ADD_FAILURE() << "reported as out of memory: " << e.what();
    } catch (const CudaError& e) {
      ++errors;
      EXPECT_EQ(e.library(), Library::cudnn_frontend) << e.what();
      EXPECT_FALSE(e.error_string().empty());
      EXPECT_NE(std::string(e.what()).find(describe(k)), std::string::npos) << e.what();
      std::printf("  %s: %.300s\n", describe(k).c_str(), e.what());
    }
  }
  std::printf("  fp32: %d of 2 passes refused\n", errors);
}

// ---- dropout -----------------------------------------------------------------------------------

// The forward and the backward with dropout against a reference that uses the mask cuDNN drew.
// The mask is read off a first forward whose v rows are one-hot (v_j = e_j, so y_i[j] is the
// kept-and-scaled probability p_ij); cuDNN's generator depends on (seed, offset) and the element's
// position only, so a second run with other q, k, v at the same seed draws the same mask.
TEST(CudnnSdpaGpuDropout, ForwardAndBackwardShareOneMask) {
  VB_REQUIRE_GPU();
  const DType dt = DType::bf16;
  const float p = 0.25f;
  const SdpaShape s{1, 40, 2, 1, 64};  // S <= D for the one-hot v rows; grouped-query heads
  const Sizes n = sizes(s);
  const cpu::AttnShape c = cpu_shape(s);
  const SdpaKey fwd = key_of(s, dt, SdpaPass::forward, p),
                bwd = key_of(s, dt, SdpaPass::backward, p);
  const SdpaRng rng{12345, 0};
  CudnnSdpa sdpa;
  const Bytes fwd_ws = sdpa.workspace_bytes(fwd), bwd_ws = sdpa.workspace_bytes(bwd);
  DeviceBuffer fwd_workspace(static_cast<std::size_t>(fwd_ws));
  DeviceBuffer bwd_workspace(static_cast<std::size_t>(bwd_ws));
  auto run_forward = [&](const std::vector<float>& qkv, std::vector<float>& y,
                         std::vector<float>& lse) {
    const DeviceBuffer d_qkv = upload(qkv, dt);
    DeviceBuffer d_y = filled_with_nan(n.y * 2), d_lse = filled_with_nan(n.lse * sizeof(float));
    sdpa.forward(d_y.get(), d_lse.as<float>(), d_qkv.get(), fwd, rng, fwd_workspace.get(), fwd_ws,
                 "test.flash", nullptr);
    VB_CUDA_CHECK(cudaDeviceSynchronize());
    y = download(d_y, n.y, dt);
    lse.resize(n.lse);
    VB_CUDA_CHECK(
        cudaMemcpy(lse.data(), d_lse.get(), n.lse * sizeof(float), cudaMemcpyDeviceToHost));
  };

  // 1. The mask, from one-hot v rows.
  std::vector<float> probe = values(n.qkv, 3, dt);
  for (std::int64_t j = 0; j < s.seq; ++j)
    for (std::int64_t d = 0; d < s.head_dim; ++d)
      probe[static_cast<std::size_t>(j * s.width() + sdpa_v_column(s) + d)] = d == j ? 1.0f : 0.0f;
  std::vector<float> probs(n.y), lse_ref(n.lse);  // y of the one-hot v without dropout = P
  cpu::flash_fwd(probs.data(), lse_ref.data(), probe.data(), c, 0.0f, 0);
  std::vector<float> y_probe, lse_probe;
  run_forward(probe, y_probe, lse_probe);
  EXPECT_LE(worst_ratio(lse_probe, lse_ref, {1e-3, 1e-3}), 1.0) << "stats are dropout's input";
  const float keep_scale = 1.0f / (1.0f - p);
  std::vector<float> mask(static_cast<std::size_t>(s.heads * s.seq * s.seq), 0.0f);  // [a, i, j]
  std::int64_t dropped = 0, causal = 0;
  for (std::int64_t a = 0; a < s.heads; ++a)
    for (std::int64_t i = 0; i < s.seq; ++i)
      for (std::int64_t j = 0; j < s.head_dim; ++j) {
        const auto at = static_cast<std::size_t>(i * s.heads * s.head_dim + a * s.head_dim + j);
        const float got = y_probe[at];
        if (j > i) {
          EXPECT_EQ(got, 0.0f) << "a " << a << " i " << i << " j " << j << ": above the diagonal";
          continue;
        }
        ++causal;
        if (got == 0.0f) {
          ++dropped;
          continue;
        }
        mask[static_cast<std::size_t>((a * s.seq + i) * s.seq + j)] = keep_scale;
        EXPECT_NEAR(got, probs[at] * keep_scale, 1e-3 + 2e-2 * probs[at] * keep_scale)
            << "a " << a << " i " << i << " j " << j << ": kept, scaled by 1 / (1 - p)";
      }
  const double fraction = static_cast<double>(dropped) / static_cast<double>(causal);
  EXPECT_NEAR(fraction, p, 0.08) << dropped << " of " << causal << " dropped";

  // 2. Other values at the same seed, against a reference with that mask.
  const std::vector<float> qkv = values(n.qkv, 4, dt), dy = values(n.y, 5, dt);
  std::vector<float> y_got, lse_got;
  run_forward(qkv, y_got, lse_got);
  const float scale = s.scale();
  auto score = [&](std::int64_t a, std::int64_t i, std::int64_t j) {
    const float* q = &qkv[static_cast<std::size_t>(i * s.width() + a * s.head_dim)];
    const float* k = &qkv[static_cast<std::size_t>(j * s.width() + sdpa_k_column(s) +
                                                   c.kv_head(a) * s.head_dim)];
    float dot = 0;
    for (std::int64_t d = 0; d < s.head_dim; ++d) dot += q[d] * k[d];
    return scale * dot;
  };
  auto v_row = [&](const std::vector<float>& t, std::int64_t a, std::int64_t j) {
    return &t[static_cast<std::size_t>(j * s.width() + sdpa_v_column(s) +
                                       c.kv_head(a) * s.head_dim)];
  };
  std::vector<float> no_dropout_y(n.y), lse(n.lse), y_ref(n.y, 0.0f);
  cpu::flash_fwd(no_dropout_y.data(), lse.data(), qkv.data(), c, 0.0f, 0);
  for (std::int64_t a = 0; a < s.heads; ++a)
    for (std::int64_t i = 0; i < s.seq; ++i)
      for (std::int64_t j = 0; j <= i; ++j) {
        const float pm = std::exp(score(a, i, j) - lse[static_cast<std::size_t>(a * s.seq + i)]) *
                         mask[static_cast<std::size_t>((a * s.seq + i) * s.seq + j)];
        const float* v = v_row(qkv, a, j);
        for (std::int64_t d = 0; d < s.head_dim; ++d)
          y_ref[static_cast<std::size_t>(i * s.heads * s.head_dim + a * s.head_dim + d)] +=
              pm * v[d];
      }
  EXPECT_LE(worst_ratio(y_got, y_ref, tolerance(dt, false)), 1.0) << "y with dropout";
  EXPECT_LE(worst_ratio(lse_got, lse, {1e-3, 1e-3}), 1.0) << "lse with dropout";

  // Backward from cuDNN's y (as the step does) and the reference lse.
  std::vector<float> dqkv_ref(n.qkv, 0.0f);
  for (std::int64_t a = 0; a < s.heads; ++a)
    for (std::int64_t i = 0; i < s.seq; ++i) {
      const std::size_t yi = static_cast<std::size_t>(i * s.heads * s.head_dim + a * s.head_dim);
      float delta = 0;  // dy_i . y_i = sum_j p_ij dp_ij
      for (std::int64_t d = 0; d < s.head_dim; ++d) delta += dy[yi + d] * y_got[yi + d];
      for (std::int64_t j = 0; j <= i; ++j) {
        const float prob = std::exp(score(a, i, j) - lse[static_cast<std::size_t>(a * s.seq + i)]);
        const float m = mask[static_cast<std::size_t>((a * s.seq + i) * s.seq + j)];
        const float* v = v_row(qkv, a, j);
        float dprob = 0;
        for (std::int64_t d = 0; d < s.head_dim; ++d) dprob += dy[yi + d] * v[d];
        const float dscore = scale * prob * (m * dprob - delta);
        const std::size_t qi = static_cast<std::size_t>(i * s.width() + a * s.head_dim);
        const std::size_t kj =
            static_cast<std::size_t>(j * s.width() + sdpa_k_column(s) + c.kv_head(a) * s.head_dim);
        const std::size_t vj =
            static_cast<std::size_t>(j * s.width() + sdpa_v_column(s) + c.kv_head(a) * s.head_dim);
        for (std::int64_t d = 0; d < s.head_dim; ++d) {
          const auto dd = static_cast<std::size_t>(d);
          dqkv_ref[qi + dd] += dscore * qkv[kj + dd];
          dqkv_ref[kj + dd] += dscore * qkv[qi + dd];
          dqkv_ref[vj + dd] += prob * m * dy[yi + dd];
        }
      }
    }
  const DeviceBuffer d_qkv = upload(qkv, dt), d_dy = upload(dy, dt), d_y = upload(y_got, dt);
  DeviceBuffer d_lse(n.lse * sizeof(float));
  VB_CUDA_CHECK(cudaMemcpy(d_lse.get(), lse.data(), n.lse * sizeof(float), cudaMemcpyHostToDevice));
  DeviceBuffer d_dqkv = filled_with_nan(n.qkv * 2);
  sdpa.backward(d_dqkv.get(), d_dy.get(), d_qkv.get(), d_y.get(), d_lse.as<float>(), bwd, rng,
                bwd_workspace.get(), bwd_ws, "test.flash.bwd", nullptr);
  VB_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LE(worst_ratio(download(d_dqkv, n.qkv, dt), dqkv_ref, tolerance(dt, true)), 1.0)
      << "dqkv with dropout";
}

// ---- the executor ------------------------------------------------------------------------------

// Runs op `index` of `p` on a cuda executor over zeroed device buffers for every tensor.
void run_op(const Program& p, std::size_t index, FlashImpl impl) {
  std::vector<DeviceBuffer> buffers;
  std::vector<void*> data;
  for (const Tensor& t : p.tensors) {
    buffers.emplace_back(static_cast<std::size_t>(t.bytes));
    if (t.bytes > 0)
      VB_CUDA_CHECK(cudaMemset(buffers.back().get(), 0, static_cast<std::size_t>(t.bytes)));
    data.push_back(buffers.back().get());
  }
  auto gpu = make_cuda_executor(1, impl);
  gpu->execute(p, index, data);
  gpu->synchronize();
}

TEST(CudnnSdpaGpuExecutor, CudnnRunsTheProgramsFlashOps) {
  VB_REQUIRE_GPU();
  for (const RunConfig& cfg : {flash_config(Arch::llama, Precision::bf16, 8, 2, 64, 100, 2, 0.0),
                               flash_config(Arch::gpt, Precision::fp16, 4, 4, 128, 72, 3, 0.1)}) {
    const Program p = build_program(cfg, gemm_workspace_bytes(90));
    const std::vector<FlashOp> ops = flash_ops(p);
    ASSERT_EQ(ops.size(), 2u);
    for (const FlashOp& f : ops) {
      SCOPED_TRACE(describe(f.key));
      EXPECT_NO_THROW(run_op(p, f.index, FlashImpl::cudnn));
    }
  }
}

TEST(CudnnSdpaGpuExecutor, Fp32BackwardFailsInsteadOfFallingBackToTheKernels) {
  VB_REQUIRE_GPU();
  for (Precision precision : {Precision::fp32, Precision::tf32}) {
    const Program p = build_program(flash_config(Arch::llama, precision, 4, 2, 64, 64, 2, 0.0),
                                    gemm_workspace_bytes(90));
    for (const FlashOp& f : flash_ops(p)) {
      SCOPED_TRACE(describe(f.key));
      if (f.key.pass == SdpaPass::backward) {
        // No cuDNN engine takes an fp32 backward: the op fails, the kernels do not step in.
        EXPECT_THROW(run_op(p, f.index, FlashImpl::cudnn), CudaError);
      } else {
        try {
          run_op(p, f.index, FlashImpl::cudnn);  // cuDNN may plan an fp32 forward
        } catch (const CudnnWorkspaceTooSmall&) {
        } catch (const CudaOutOfMemory& e) {
          ADD_FAILURE() << e.what();
        } catch (const CudaError& e) {
          EXPECT_EQ(e.library(), Library::cudnn_frontend) << e.what();
        }
      }
      EXPECT_NO_THROW(run_op(p, f.index, FlashImpl::kernels));  // what --flash-impl kernels runs
    }
  }
}

}  // namespace
}  // namespace vrambench::cuda
