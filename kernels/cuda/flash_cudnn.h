// Causal fused attention through cuDNN's backend graph API, forward and backward: the
// scaled-dot-product patterns (matmuls, scale, causal select, softmax with log-sum-exp stats; and
// their gradients from those stats) built node by node, the operation graph finalised, an engine
// picked by heuristics, the execution plan and its workspace cached by shape, and run with a
// uid -> pointer variant pack. 16-bit storage only (what cuDNN's fused attention engines take).
// Tensor and operation nodes finalise without a device; heuristics and plans need one.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/units.h"
#include "cuda/flash.h"
#include "cuda/owners.h"

namespace vrambench::cuda {

// Fixed uids of the graph's tensors that the variant pack binds.
enum SdpaUid : std::int64_t {
  kSdpaQ = 1,
  kSdpaK = 2,  // as K^T [B, K, D, S]
  kSdpaV = 3,
  kSdpaO = 4,
  kSdpaStats = 5,   // log-sum-exp [B, A, S, 1] fp32
  kSdpaScale = 6,   // by value: 1 / sqrt(D)
  kSdpaNegInf = 7,  // by value: -inf for the masked scores
};

// Dims and strides (elements) of the graph's non-virtual tensors over packed qkv[B,S,(A+2K)D],
// y[B,S,A*D] and lse[B,A,S].
struct SdpaLayout {
  std::vector<std::int64_t> dims, strides;
};
SdpaLayout sdpa_q_layout(const FlashShape& s);
SdpaLayout sdpa_kt_layout(const FlashShape& s);
SdpaLayout sdpa_v_layout(const FlashShape& s);
SdpaLayout sdpa_o_layout(const FlashShape& s);
SdpaLayout sdpa_stats_layout(const FlashShape& s);

// Every finalised node of a graph; `ops` are the operation nodes in graph order.
struct SdpaNodes {
  std::vector<BackendDescriptor> tensors;
  std::vector<BackendDescriptor> descriptors;  // matmul / pointwise / reduction descriptors
  std::vector<BackendDescriptor> ops;
};
using SdpaForwardNodes = SdpaNodes;
using SdpaBackwardNodes = SdpaNodes;
// Builds and finalises the nodes (no handle, no device). dtype is f16 or bf16.
SdpaForwardNodes build_sdpa_forward_nodes(const FlashShape& s, DType dtype);
// Finalises the operation graph over the nodes; handle may be null where cuDNN allows it.
BackendDescriptor make_sdpa_operation_graph(const SdpaNodes& nodes, cudnnHandle_t handle);

// ---- backward ---------------------------------------------------------------------------------

// Fixed uids of the backward graph's tensors. Q, K^T, V^T and O are views into qkv and y as in the
// forward; dQ, dK, dV are the same views into dqkv. softmax_sum and dQ_accum are fp32 tensors the
// engines need in global memory (cuDNN's own frontend puts them in its workspace); here they are
// carved out of the program's flash_bwd scratch tensor, before the plan's workspace.
enum SdpaBwdUid : std::int64_t {
  kSdpaBwdQ = 21,
  kSdpaBwdKt = 22,  // K^T [B, K, D, S]
  kSdpaBwdVt = 23,  // V^T [B, K, D, S]
  kSdpaBwdO = 24,
  kSdpaBwdDO = 25,
  kSdpaBwdStats = 26,  // log-sum-exp of the forward [B, A, S, 1] fp32
  kSdpaBwdDQ = 27,
  kSdpaBwdDK = 28,
  kSdpaBwdDV = 29,
  kSdpaBwdScale = 30,       // by value: 1 / sqrt(D)
  kSdpaBwdNegInf = 31,      // by value: -inf for the masked scores
  kSdpaBwdOne = 32,         // by value: 1, the dropout scale of a graph without dropout
  kSdpaBwdSoftmaxSum = 33,  // sum_d dO * O per query row [B, A, S, 1] fp32
  kSdpaBwdDQAccum = 34,     // fp32 dQ accumulator [B, A, S, D]
};

// K^T and V^T of the backward (the frontend's backend mapping: both enter as [B, K, D, S]), the
// k-row view [B, K, S, D] that dK and dV use over dqkv, and the fp32 scratch tensors.
SdpaLayout sdpa_vt_layout(const FlashShape& s);
SdpaLayout sdpa_k_layout(const FlashShape& s);
SdpaLayout sdpa_softmax_sum_layout(const FlashShape& s);
SdpaLayout sdpa_dq_accum_layout(const FlashShape& s);

// Where the backward's fp32 tensors and the plan's workspace sit in the flash_bwd scratch tensor:
// offsets aligned to 256 bytes; `total` is what the scratch must hold for cuDNN to run.
struct SdpaBackwardScratch {
  Bytes dq_accum_offset = 0, softmax_sum_offset = 0, workspace_offset = 0, total = 0;
};
SdpaBackwardScratch sdpa_backward_scratch(const FlashShape& s, Bytes plan_workspace);

// Builds and finalises the backward nodes (no handle, no device). dtype is f16 or bf16. With
// K < A heads, dK and dV are computed per query head and summed over each group by a reduction.
SdpaBackwardNodes build_sdpa_backward_nodes(const FlashShape& s, DType dtype);

// Runs the forward on one cuDNN handle, plans cached by shape.
class CudnnFlashForward {
 public:
  CudnnFlashForward();  // creates the cuDNN handle: needs a device
  cudnnHandle_t handle() const { return handle_.get(); }
  // Whether an engine takes this shape (false for dropout, fp32, or no engine); builds the plan.
  bool supports(const FlashShape& s, DType dtype);
  Bytes workspace_bytes(const FlashShape& s, DType dtype);
  void run(const FlashShape& s, DType dtype, void* y, float* lse, const void* qkv, void* workspace,
           Bytes workspace_bytes, cudaStream_t stream);

 private:
  struct Plan {
    SdpaForwardNodes nodes;
    BackendDescriptor graph, engine_config, plan;
    Bytes workspace = 0;
    bool ok = false;
  };
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int>;
  Plan& plan_for(const FlashShape& s, DType dtype);

  CudnnHandle handle_;
  std::map<Key, Plan> plans_;
};

// Runs the backward on one cuDNN handle, plans cached by shape. The scratch is the program's
// flash_bwd scratch tensor: cuDNN runs only when sdpa_backward_scratch(...).total fits in it.
class CudnnFlashBackward {
 public:
  CudnnFlashBackward();  // creates the cuDNN handle: needs a device
  // Runs on a handle owned elsewhere (the forward's), which must outlive this object: one handle
  // per process is what the device's fixed overhead accounts for.
  explicit CudnnFlashBackward(cudnnHandle_t shared);
  // Whether an engine takes this shape (false for dropout, fp32, or no engine); builds the plan.
  bool supports(const FlashShape& s, DType dtype);
  // Scratch bytes the run needs: fp32 dQ accumulator, softmax sums and the plan's workspace.
  Bytes scratch_bytes(const FlashShape& s, DType dtype);
  void run(const FlashShape& s, DType dtype, void* dqkv, const void* dy, const void* qkv,
           const void* y, const float* lse, void* scratch, Bytes scratch_bytes,
           cudaStream_t stream);

 private:
  struct Plan {
    SdpaBackwardNodes nodes;
    BackendDescriptor graph, engine_config, plan;
    Bytes workspace = 0;
    bool ok = false;
  };
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int>;
  Plan& plan_for(const FlashShape& s, DType dtype);

  CudnnHandle owned_;  // empty when the handle is shared
  cudnnHandle_t handle_ = nullptr;
  std::map<Key, Plan> plans_;
};

}  // namespace vrambench::cuda
