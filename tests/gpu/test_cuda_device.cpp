// The cuda device: availability and library versions (no GPU needed), the segment source, the
// executor and the selftest against the CPU reference (GPU needed: skipped with the reason).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "cuda/gemm.h"
#include "device/cuda_device.h"
#include "program/program.h"

namespace vrambench {
namespace {

#define VB_REQUIRE_GPU()                                    \
  do {                                                      \
    std::string vb_why_;                                    \
    if (!cuda_available(&vb_why_)) GTEST_SKIP() << vb_why_; \
  } while (0)

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
  EXPECT_EQ(dtypes.size(), 3u);
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
