// The cuda device: availability and library versions (no GPU needed), the segment sources
// (cudaMalloc and the cudaMallocAsync pool), the executor and the selftest against the CPU
// reference (GPU needed: skipped with the reason).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda/gemm.h"
#include "cuda/owners.h"
#include "device/cpu_executor.h"
#include "device/cuda_device.h"
#include "device/sources.h"
#include "gpu/require_gpu.h"
#include "op/operands.h"
#include "program/program.h"

namespace vrambench {
namespace {

TEST(CudaDevice, AvailabilityExplainsItselfWhenFalse) {
  std::string why;
  const bool available = cuda_available(&why);
  if (!available) {
    EXPECT_FALSE(why.empty());
  } else {
    EXPECT_TRUE(why.empty());
  }
  EXPECT_EQ(cuda_available(nullptr), available);  // no error left behind by the first call
}

TEST(CudaDevice, LibraryVersionsAreKnownWithoutAGpu) {
  const CudaLibraryVersions v = cuda_library_versions();
  EXPECT_GE(v.cudnn, 90000u);  // cuDNN 9
  EXPECT_GT(v.cublaslt, 0u);
  EXPECT_EQ(v.cudnn_text().substr(0, 2), "9.");
  EXPECT_GE(v.runtime, 12000);
}

TEST(CudaDevice, WithoutAGpuEveryEntryPointSaysSo) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present";
  EXPECT_THROW(query_cuda_device(), NeedsGpu);
  EXPECT_THROW(make_cuda_source(GiB), NeedsGpu);
  EXPECT_THROW(make_cuda_async_source(GiB), NeedsGpu);
  EXPECT_THROW(make_cuda_executor(1), NeedsGpu);
  try {
    run_cuda_selftest();
    FAIL() << "selftest ran without a GPU";
  } catch (const NeedsGpu& e) {
    EXPECT_EQ(std::string(e.what()).rfind("needs a GPU: ", 0), 0u) << e.what();
  }
}

TEST(CudaDevice, InfoOfDeviceZero) {
  VB_REQUIRE_GPU();
  const CudaDeviceInfo info = query_cuda_device(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.total_memory, 0);
  EXPECT_LE(info.free_memory, info.total_memory);
  EXPECT_GE(info.compute_capability(), 50);
  EXPECT_GT(info.driver_version, 0);
}

TEST(CudaSource, RefusesAboveCapacityAndWhenTheDeviceIsOut) {
  VB_REQUIRE_GPU();
  auto source = make_cuda_source(64 * MiB);
  auto a = source->allocate_segment(32 * MiB);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(source->in_use(), 32 * MiB);
  EXPECT_FALSE(source->allocate_segment(40 * MiB).has_value()) << "above capacity";
  source->free_segment(*a, 32 * MiB);
  EXPECT_EQ(source->in_use(), 0);

  // A capacity larger than any GPU: the device refuses, and that is a result, not an error.
  auto huge = make_cuda_source(Bytes{1} << 52);
  EXPECT_FALSE(huge->allocate_segment(Bytes{1} << 51).has_value());
  auto b = huge->allocate_segment(MiB);  // the failed cudaMalloc left no sticky error
  ASSERT_TRUE(b.has_value());
  huge->free_segment(*b, MiB);
}

TEST(CudaAsyncSource, WithoutAGpuSaysSoAndWatermarksNeedItsSource) {
  try {
    auto source = make_cuda_async_source(GiB);
    if (!cuda_available()) FAIL() << "made a cudaMallocAsync source without a GPU";
  } catch (const NeedsGpu& e) {
    EXPECT_FALSE(cuda_available());
    EXPECT_EQ(std::string(e.what()).rfind("needs a GPU: ", 0), 0u) << e.what();
  }
  // Watermarks belong to the pool of an async source; any other source is refused (no GPU needed).
  auto virtual_source = make_virtual_source(GiB);
  EXPECT_THROW(cuda_pool_watermarks(*virtual_source), std::invalid_argument);
  EXPECT_THROW(reset_cuda_pool_watermarks(*virtual_source), std::invalid_argument);
}

TEST(CudaAsyncSource, RefusesAboveCapacityAndWhenTheDeviceIsOut) {
  VB_REQUIRE_GPU();
  auto source = make_cuda_async_source(64 * MiB);
  EXPECT_EQ(source->capacity(), 64 * MiB);
  auto a = source->allocate_segment(32 * MiB);
  ASSERT_TRUE(a.has_value());
  EXPECT_NE(*a, 0u);
  EXPECT_EQ(source->in_use(), 32 * MiB);
  EXPECT_FALSE(source->allocate_segment(40 * MiB).has_value()) << "above capacity";
  EXPECT_EQ(source->in_use(), 32 * MiB);
  EXPECT_FALSE(source->allocate_segment(0).has_value());
  auto b = source->allocate_segment(32 * MiB);  // exactly up to the capacity
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(source->in_use(), 64 * MiB);
  EXPECT_FALSE(source->allocate_segment(512).has_value()) << "full";
  source->free_segment(*a, 32 * MiB);
  source->free_segment(*b, 32 * MiB);
  EXPECT_EQ(source->in_use(), 0);

  // A capacity larger than any GPU: the device refuses, and that is a result, not an error.
  auto huge = make_cuda_async_source(Bytes{1} << 52);
  EXPECT_FALSE(huge->allocate_segment(Bytes{1} << 51).has_value());
  EXPECT_EQ(huge->in_use(), 0);
  auto c = huge->allocate_segment(MiB);  // the refusal left no error behind
  ASSERT_TRUE(c.has_value());
  huge->free_segment(*c, MiB);
}

TEST(CudaAsyncSource, HandsOutDistinctNonOverlappingSegments) {
  VB_REQUIRE_GPU();
  auto source = make_cuda_async_source(GiB);
  const std::vector<Bytes> sizes = {512, 4 * KiB, MiB, 2 * MiB, 3 * MiB, 512, 20 * MiB, 2 * MiB};
  std::vector<std::pair<std::uintptr_t, Bytes>> segments;
  Bytes total = 0;
  for (Bytes size : sizes) {
    auto address = source->allocate_segment(size);
    ASSERT_TRUE(address.has_value()) << size << " bytes";
    EXPECT_NE(*address, 0u);
    segments.emplace_back(*address, size);
    total += size;
    EXPECT_EQ(source->in_use(), total);
  }
  std::vector<std::pair<std::uintptr_t, Bytes>> sorted = segments;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 1; i < sorted.size(); ++i)
    EXPECT_GE(sorted[i].first,
              sorted[i - 1].first + static_cast<std::uintptr_t>(sorted[i - 1].second))
        << "segment " << i << " overlaps the one before it";
  // Freeing one and allocating again still gives an address no live segment covers.
  source->free_segment(segments[3].first, segments[3].second);
  total -= segments[3].second;
  segments.erase(segments.begin() + 3);
  auto again = source->allocate_segment(MiB);
  ASSERT_TRUE(again.has_value());
  for (const auto& [address, size] : segments)
    EXPECT_TRUE(*again + static_cast<std::uintptr_t>(MiB) <= address ||
                address + static_cast<std::uintptr_t>(size) <= *again);
  segments.emplace_back(*again, MiB);
  for (const auto& [address, size] : segments) source->free_segment(address, size);
  EXPECT_EQ(source->in_use(), 0);
}

TEST(CudaAsyncSource, WatermarksRiseWithAllocationsAndReset) {
  VB_REQUIRE_GPU();
  auto source = make_cuda_async_source(GiB);
  reset_cuda_pool_watermarks(*source);
  CudaPoolWatermarks w = cuda_pool_watermarks(*source);
  EXPECT_EQ(w.used_high, 0);
  EXPECT_EQ(w.used_current, 0);

  auto a = source->allocate_segment(8 * MiB);
  ASSERT_TRUE(a.has_value());
  w = cuda_pool_watermarks(*source);
  EXPECT_GE(w.used_current, 8 * MiB);
  EXPECT_GE(w.used_high, 8 * MiB);
  EXPECT_GE(w.reserved_high, w.used_high);
  const Bytes used_after_a = w.used_high;

  auto b = source->allocate_segment(16 * MiB);
  ASSERT_TRUE(b.has_value());
  w = cuda_pool_watermarks(*source);
  EXPECT_GE(w.used_high, used_after_a + 16 * MiB);
  EXPECT_GE(w.reserved_high, w.used_high);
  const CudaPoolWatermarks peak = w;

  // Freed: the highs stay, and with a release threshold of 0 the pool keeps nothing.
  source->free_segment(*a, 8 * MiB);
  source->free_segment(*b, 16 * MiB);
  w = cuda_pool_watermarks(*source);
  EXPECT_EQ(w.used_high, peak.used_high);
  EXPECT_EQ(w.reserved_high, peak.reserved_high);
  EXPECT_EQ(w.used_current, 0);
  EXPECT_EQ(w.reserved_current, 0) << "freed memory went back to the driver";

  // Reset: the highs drop to the current values, then rise again with the next allocation only.
  reset_cuda_pool_watermarks(*source);
  w = cuda_pool_watermarks(*source);
  EXPECT_EQ(w.used_high, 0);
  EXPECT_LT(w.reserved_high, peak.reserved_high);
  auto c = source->allocate_segment(4 * MiB);
  ASSERT_TRUE(c.has_value());
  w = cuda_pool_watermarks(*source);
  EXPECT_GE(w.used_high, 4 * MiB);
  EXPECT_LT(w.used_high, peak.used_high);
  source->free_segment(*c, 4 * MiB);
}

// The cuda executor fills persistent tensors on the GPU: every byte must equal what the cpu
// executor writes with the same seed (token ids, N(0, 0.02) weights rounded to their dtype, master
// copies of 16-bit weights, ones and zeros), so both devices start a step from the same values.
TEST(CudaExecutor, StartsFromTheCpuExecutorsValues) {
  VB_REQUIRE_GPU();
  for (const SelftestConfig& sc : selftest_configs()) {
    SCOPED_TRACE(sc.label);
    const Program program = build_program(sc.cfg, cuda::gemm_workspace_bytes(90));
    const Liveness liveness = compute_liveness(program);
    auto cpu = make_cpu_executor(99);
    auto gpu = make_cuda_executor(99, FlashImpl::kernels);
    for (int id : liveness.persistent) {
      const Tensor& t = program.tensor(id);
      const auto bytes = static_cast<std::size_t>(t.bytes);
      std::vector<std::uint8_t> want(bytes, 0xAB), got(bytes, 0xCD);
      cpu->initialize(program, id, want.data());
      cuda::DeviceBuffer buffer(bytes);
      // Poisoned first: an element the fill skipped shows as a difference.
      ASSERT_EQ(cudaMemset(buffer.get(), 0x5A, bytes), cudaSuccess);
      gpu->initialize(program, id, buffer.get());
      gpu->synchronize();
      ASSERT_EQ(cudaMemcpy(got.data(), buffer.get(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      std::size_t differing = 0;
      for (std::size_t i = 0; i < bytes; ++i) differing += want[i] != got[i];
      EXPECT_EQ(differing, 0u) << t.name << " (" << to_string(t.role) << ", " << bytes << " bytes)";
    }
  }
}

TEST(CudaSelftest, ConfigsBuildAndCoverEveryOpKind) {
  std::set<OpKind> kinds;
  std::set<DType> dtypes;
  for (const SelftestConfig& sc : selftest_configs()) {
    const Program p = build_program(sc.cfg, cuda::gemm_workspace_bytes(80));
    for (const Op& op : p.ops) kinds.insert(op.kind);
    dtypes.insert(activation_dtype(sc.cfg.dtype));
  }
  for (int k = 0; k <= static_cast<int>(OpKind::sgd_step); ++k)
    EXPECT_TRUE(kinds.count(static_cast<OpKind>(k)))
        << "no selftest program uses " << to_string(static_cast<OpKind>(k));
  // A mixture of experts' kinds, so that a GPU checks them against the CPU.
  for (int k = static_cast<int>(OpKind::router_topk); k < static_cast<int>(kOpKindCount); ++k)
    EXPECT_TRUE(kinds.count(static_cast<OpKind>(k)))
        << "no selftest program uses " << to_string(static_cast<OpKind>(k));
  EXPECT_EQ(dtypes.size(), 3u);
}

// Every operand of every selftest program is one the cuda kernels read in the dtype it is stored
// in: a config that mixes dtypes as the kernels cannot would fail on the GPU in one line instead
// of testing its ops. And the selftest runs every kind that takes an operand of another dtype in
// that form (the hf step's), so the GPU checks those kernels too.
TEST(CudaSelftest, ConfigsAreStepsTheCudaKernelsRun) {
  std::set<OpKind> mixed;
  for (const SelftestConfig& sc : selftest_configs()) {
    const Program p = build_program(sc.cfg, cuda::gemm_workspace_bytes(90));
    std::vector<void*> data(p.tensors.size(), &mixed);
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      const Operands a = decode_operands(p, i, data);
      const Operand* o = operand_of_another_dtype(a);
      EXPECT_EQ(o, nullptr) << sc.label << ": " << p.ops[i].name << " reads "
                            << (o ? o->tensor->name.str() : "") << " in another dtype";
      if (mixes_dtypes(a)) mixed.insert(a.op.kind);
    }
  }
  for (OpKind k :
       {OpKind::rmsnorm_fwd, OpKind::rmsnorm_bwd, OpKind::add, OpKind::rope_fwd, OpKind::rope_bwd,
        OpKind::lora_fwd, OpKind::lora_bwd, OpKind::softmax_fwd, OpKind::softmax_bwd,
        OpKind::qk_norm_fwd, OpKind::qk_norm_bwd, OpKind::attn_scores, OpKind::router_topk,
        OpKind::router_topk_bwd, OpKind::moe_combine, OpKind::moe_combine_bwd,
        OpKind::expert_lora_fwd, OpKind::expert_lora_bwd})
    EXPECT_TRUE(mixed.count(k)) << "no selftest op of " << to_string(k)
                                << " reads an operand of another dtype";
}

TEST(CudaSelftest, EveryOpMatchesTheCpuReference) {
  VB_REQUIRE_GPU();
  const auto rows = run_cuda_selftest();
  ASSERT_FALSE(rows.empty());
  for (const SelftestRow& r : rows)
    EXPECT_TRUE(r.passed) << r.config << " " << r.op << ": max abs error " << r.max_abs_error
                          << ", " << r.worst_ratio << "x tolerance (" << r.note << ")";
}

}  // namespace
}  // namespace vrambench
