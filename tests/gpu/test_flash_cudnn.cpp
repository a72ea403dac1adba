// Construction of the cuDNN fused-attention graph without a GPU: layouts over packed qkv, every
// tensor and operation node finalised; the operation graph where cuDNN builds it without a handle;
// heuristics, plan and execution only with a GPU (skipped with the reason otherwise).
#include <gtest/gtest.h>

#include <string>

#include "cuda/check.h"
#include "cuda/flash_cudnn.h"
#include "device/cuda_device.h"

namespace vrambench::cuda {
namespace {

TEST(CudnnFlashLayouts, ViewsOfPackedQkvAndOutputs) {
  const FlashShape s{2, 128, 8, 2, 64, 0.0f, 0};
  const std::int64_t W = (8 + 2 * 2) * 64;
  EXPECT_EQ(sdpa_q_layout(s).dims, (std::vector<std::int64_t>{2, 8, 128, 64}));
  EXPECT_EQ(sdpa_q_layout(s).strides, (std::vector<std::int64_t>{128 * W, 64, W, 1}));
  EXPECT_EQ(sdpa_kt_layout(s).dims, (std::vector<std::int64_t>{2, 2, 64, 128}));
  EXPECT_EQ(sdpa_kt_layout(s).strides, (std::vector<std::int64_t>{128 * W, 64, 1, W}));
  EXPECT_EQ(sdpa_v_layout(s).dims, (std::vector<std::int64_t>{2, 2, 128, 64}));
  EXPECT_EQ(sdpa_o_layout(s).strides, (std::vector<std::int64_t>{128 * 8 * 64, 64, 8 * 64, 1}));
  EXPECT_EQ(sdpa_stats_layout(s).dims, (std::vector<std::int64_t>{2, 8, 128, 1}));
  EXPECT_EQ(sdpa_stats_layout(s).strides, (std::vector<std::int64_t>{8 * 128, 128, 1, 1}));
}

TEST(CudnnFlashGraph, NodesFinaliseWithoutADevice) {
  for (DType dt : {DType::f16, DType::bf16}) {
    const SdpaForwardNodes nodes =
        build_sdpa_forward_nodes(FlashShape{2, 64, 4, 2, 64, 0.0f, 0}, dt);
    EXPECT_EQ(nodes.ops.size(), 14u);  // 2 matmuls, 10 pointwise, 2 reductions
    for (const BackendDescriptor& op : nodes.ops) EXPECT_TRUE(op);
    EXPECT_GE(nodes.tensors.size(), 7u);
  }
  EXPECT_THROW(build_sdpa_forward_nodes(FlashShape{1, 8, 2, 2, 64, 0.0f, 0}, DType::f32),
               std::invalid_argument);
}

TEST(CudnnFlashGraph, OperationGraphWithoutAHandle) {
  const SdpaForwardNodes nodes =
      build_sdpa_forward_nodes(FlashShape{1, 64, 4, 4, 64, 0.0f, 0}, DType::bf16);
  try {
    const BackendDescriptor graph = make_sdpa_operation_graph(nodes, nullptr);
    EXPECT_TRUE(graph);
  } catch (const CudaError& e) {
    GTEST_SKIP() << "cuDNN does not finalise an operation graph without a handle here: "
                 << e.what();
  }
}

TEST(CudnnFlashGraph, PlanAndRunOnAGpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  CudnnFlashForward flash;
  const FlashShape s{2, 128, 8, 2, 64, 0.0f, 0};
  // Whether an engine exists depends on the GPU; the selftest compares its results when it does.
  if (!flash.supports(s, DType::bf16))
    GTEST_SKIP() << "no cuDNN fused attention engine on this GPU";
  EXPECT_GE(flash.workspace_bytes(s, DType::bf16), 0);
  EXPECT_FALSE(flash.supports(FlashShape{2, 128, 8, 2, 64, 0.1f, 1}, DType::bf16))
      << "dropout goes to the plain kernels (their mask matches the CPU reference)";
}

}  // namespace
}  // namespace vrambench::cuda
