// Construction of the cuDNN fused-attention graphs (forward and backward) without a GPU: layouts
// over packed qkv and dqkv, the backward's scratch layout, every tensor and operation node
// finalised; the operation graphs where cuDNN builds them without a handle; heuristics, plans and
// execution against the CPU reference only with a GPU (skipped with the reason otherwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/attention.h"
#include "cuda/check.h"
#include "cuda/flash_cudnn.h"
#include "cuda/types.h"
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

TEST(CudnnFlashBackwardLayouts, ViewsOfPackedQkvDqkvAndScratch) {
  const FlashShape s{2, 128, 8, 2, 64, 0.0f, 0};
  const std::int64_t W = (8 + 2 * 2) * 64;
  EXPECT_EQ(sdpa_vt_layout(s).dims, (std::vector<std::int64_t>{2, 2, 64, 128}));
  EXPECT_EQ(sdpa_vt_layout(s).strides, (std::vector<std::int64_t>{128 * W, 64, 1, W}));
  EXPECT_EQ(sdpa_k_layout(s).dims, (std::vector<std::int64_t>{2, 2, 128, 64}));
  EXPECT_EQ(sdpa_k_layout(s).strides, (std::vector<std::int64_t>{128 * W, 64, W, 1}));
  EXPECT_EQ(sdpa_softmax_sum_layout(s).dims, (std::vector<std::int64_t>{2, 8, 128, 1}));
  EXPECT_EQ(sdpa_dq_accum_layout(s).dims, (std::vector<std::int64_t>{2, 8, 128, 64}));
  EXPECT_EQ(sdpa_dq_accum_layout(s).strides,
            (std::vector<std::int64_t>{8 * 128 * 64, 128 * 64, 64, 1}));
}

TEST(CudnnFlashBackwardLayouts, ScratchHoldsAccumulatorSumsAndWorkspace) {
  const FlashShape s{2, 100, 3, 3, 8, 0.0f, 0};
  const Bytes dq_accum = 2 * 3 * 100 * 8 * 4;  // 19200, a multiple of 256
  const Bytes sums = 2 * 3 * 100 * 4;          // 2400 -> 2560 aligned
  const SdpaBackwardScratch at = sdpa_backward_scratch(s, 1000);
  EXPECT_EQ(at.dq_accum_offset, 0);
  EXPECT_EQ(at.softmax_sum_offset, dq_accum);
  EXPECT_EQ(at.workspace_offset, dq_accum + 2560);
  EXPECT_EQ(at.total, dq_accum + 2560 + 1000);
  EXPECT_GE(at.workspace_offset - at.softmax_sum_offset, sums);
  // The program's flash_bwd scratch is 4 B A S (D + 1) bytes: with B A S a multiple of 64 it is
  // exactly the accumulator and the sums, so cuDNN runs whenever its own workspace is zero ...
  const FlashShape aligned{2, 128, 8, 2, 64, 0.0f, 0};
  EXPECT_EQ(sdpa_backward_scratch(aligned, 0).total, 4 * 2 * 8 * 128 * (64 + 1));
  // ... and here (B A S = 600) the alignment of the sums needs more: the plain kernels run it.
  EXPECT_GT(sdpa_backward_scratch(s, 0).total, 4 * 2 * 3 * 100 * (8 + 1));
}

TEST(CudnnFlashBackwardGraph, NodesFinaliseWithoutADevice) {
  for (DType dt : {DType::f16, DType::bf16}) {
    // 5 matmuls, 14 pointwise, 1 reduction, 3 reshapes; grouped heads add a reduction for each
    // of dK and dV.
    const SdpaBackwardNodes mha =
        build_sdpa_backward_nodes(FlashShape{2, 64, 4, 4, 64, 0.0f, 0}, dt);
    EXPECT_EQ(mha.ops.size(), 22u);
    const SdpaBackwardNodes gqa =
        build_sdpa_backward_nodes(FlashShape{2, 64, 4, 2, 64, 0.0f, 0}, dt);
    EXPECT_EQ(gqa.ops.size(), 24u);
    for (const SdpaBackwardNodes* n : {&mha, &gqa}) {
      for (const BackendDescriptor& op : n->ops) EXPECT_TRUE(op);
      for (const BackendDescriptor& t : n->tensors) EXPECT_TRUE(t);
      EXPECT_GE(n->tensors.size(), 14u);  // 14 bound by uid, the rest virtual
    }
  }
  EXPECT_THROW(build_sdpa_backward_nodes(FlashShape{1, 8, 2, 2, 64, 0.0f, 0}, DType::f32),
               std::invalid_argument);
  EXPECT_THROW(build_sdpa_backward_nodes(FlashShape{1, 8, 3, 2, 64, 0.0f, 0}, DType::bf16),
               std::invalid_argument);  // heads not a multiple of kv heads
}

TEST(CudnnFlashBackwardGraph, OperationGraphWithoutAHandle) {
  for (std::int64_t kv : {4, 2}) {
    const SdpaBackwardNodes nodes =
        build_sdpa_backward_nodes(FlashShape{1, 64, 4, kv, 64, 0.0f, 0}, DType::bf16);
    try {
      const BackendDescriptor graph = make_sdpa_operation_graph(nodes, nullptr);
      EXPECT_TRUE(graph);
    } catch (const CudaError& e) {
      GTEST_SKIP() << "cuDNN does not finalise an operation graph without a handle here: "
                   << e.what();
    }
  }
}

using Bf16 = __nv_bfloat16;

// Deterministic values in [-1, 1), rounded to bf16 so that GPU and CPU read the same numbers.
std::vector<float> bf16_values(std::size_t n, std::uint32_t seed) {
  std::vector<float> v(n);
  std::uint32_t x = seed * 2654435761u + 1u;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = to_f32(from_f32<Bf16>(static_cast<float>(x >> 8) / 8388608.0f - 1.0f));
  }
  return v;
}
std::vector<Bf16> to_bf16(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), [](float f) { return from_f32<Bf16>(f); });
  return out;
}
DeviceBuffer upload(const void* host, std::size_t bytes) {
  DeviceBuffer d(bytes);
  VB_CUDA_CHECK(cudaMemcpy(d.get(), host, bytes, cudaMemcpyHostToDevice));
  return d;
}
std::vector<float> download_bf16(const DeviceBuffer& d, std::size_t n) {
  std::vector<Bf16> h(n);
  VB_CUDA_CHECK(cudaMemcpy(h.data(), d.get(), n * sizeof(Bf16), cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  std::transform(h.begin(), h.end(), out.begin(), [](Bf16 b) { return to_f32(b); });
  return out;
}
// Largest |got - want| / (atol + rtol |want|); <= 1 passes (the selftest's bf16 tolerances).
double worst_ratio(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double r = std::fabs(static_cast<double>(got[i]) - want[i]) /
                     (1e-2 + 5e-2 * std::fabs(static_cast<double>(want[i])));
    if (std::isnan(r)) return INFINITY;  // an element never written, or a NaN computed
    worst = std::max(worst, r);
  }
  return worst;
}

TEST(CudnnFlashBackwardGraph, ForwardAndBackwardMatchTheCpuReferenceOnAGpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  CudnnFlashForward fwd;
  CudnnFlashBackward bwd(fwd.handle());
  for (const FlashShape& s : {FlashShape{2, 128, 4, 4, 64, 0.0f, 0},     // multi-head
                              FlashShape{2, 128, 8, 2, 64, 0.0f, 0}}) {  // grouped-query
    SCOPED_TRACE("A=" + std::to_string(s.heads) + " K=" + std::to_string(s.kv_heads));
    if (!fwd.supports(s, DType::bf16) || !bwd.supports(s, DType::bf16))
      GTEST_SKIP() << "no cuDNN fused attention engine on this GPU for this shape";
    const cpu::AttnShape c{s.batch, s.seq, s.heads, s.kv_heads, s.head_dim};
    const auto n_qkv = static_cast<std::size_t>(s.batch * s.seq * s.width());
    const auto n_y = static_cast<std::size_t>(s.batch * s.seq * s.heads * s.head_dim);
    const auto n_lse = static_cast<std::size_t>(s.batch * s.heads * s.seq);
    const std::vector<float> qkv = bf16_values(n_qkv, 1), dy = bf16_values(n_y, 2);

    // Forward: cuDNN against the CPU's online softmax.
    std::vector<float> y_ref(n_y), lse_ref(n_lse);
    cpu::flash_fwd(y_ref.data(), lse_ref.data(), qkv.data(), c, 0.0f, 0);
    const DeviceBuffer d_qkv = upload(to_bf16(qkv).data(), n_qkv * sizeof(Bf16));
    DeviceBuffer d_y(n_y * sizeof(Bf16)), d_lse(n_lse * sizeof(float));
    DeviceBuffer fwd_ws(static_cast<std::size_t>(fwd.workspace_bytes(s, DType::bf16)));
    fwd.run(s, DType::bf16, d_y.get(), d_lse.as<float>(), d_qkv.get(), fwd_ws.get(),
            fwd.workspace_bytes(s, DType::bf16), nullptr);
    VB_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> lse(n_lse);
    VB_CUDA_CHECK(
        cudaMemcpy(lse.data(), d_lse.get(), n_lse * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT_LE(worst_ratio(download_bf16(d_y, n_y), y_ref), 1.0) << "y";
    EXPECT_LE(worst_ratio(lse, lse_ref), 1.0) << "lse";

    // Backward from the same y (rounded to bf16) and lse on both sides, so only it is compared.
    std::vector<float> y_rounded = y_ref;
    for (float& v : y_rounded) v = to_f32(from_f32<Bf16>(v));
    std::vector<float> dqkv_ref(n_qkv);
    cpu::flash_bwd(dqkv_ref.data(), dy.data(), qkv.data(), y_rounded.data(), lse_ref.data(), c,
                   0.0f, 0);
    const DeviceBuffer d_dy = upload(to_bf16(dy).data(), n_y * sizeof(Bf16));
    const DeviceBuffer d_y_ref = upload(to_bf16(y_rounded).data(), n_y * sizeof(Bf16));
    const DeviceBuffer d_lse_ref = upload(lse_ref.data(), n_lse * sizeof(float));
    DeviceBuffer d_dqkv(n_qkv * sizeof(Bf16));
    VB_CUDA_CHECK(cudaMemset(d_dqkv.get(), 0xff, d_dqkv.bytes()));  // NaN where nothing is written
    const Bytes scratch = bwd.scratch_bytes(s, DType::bf16);
    DeviceBuffer d_scratch(static_cast<std::size_t>(scratch));
    bwd.run(s, DType::bf16, d_dqkv.get(), d_dy.get(), d_qkv.get(), d_y_ref.get(),
            d_lse_ref.as<float>(), d_scratch.get(), scratch, nullptr);
    VB_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_LE(worst_ratio(download_bf16(d_dqkv, n_qkv), dqkv_ref), 1.0) << "dqkv";
    EXPECT_THROW(bwd.run(s, DType::bf16, d_dqkv.get(), d_dy.get(), d_qkv.get(), d_y_ref.get(),
                         d_lse_ref.as<float>(), d_scratch.get(), scratch - 1, nullptr),
                 std::invalid_argument)
        << "a scratch smaller than the plan needs is refused";
  }
  EXPECT_FALSE(bwd.supports(FlashShape{2, 128, 8, 2, 64, 0.1f, 1}, DType::bf16))
      << "dropout goes to the plain kernels (their mask matches the CPU reference)";
}

}  // namespace
}  // namespace vrambench::cuda
