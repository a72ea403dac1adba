// Causal fused attention forward through cuDNN's backend graph API: the scaled-dot-product pattern
// (matmul, scale, causal select, softmax with log-sum-exp stats, matmul) built node by node, the
// operation graph finalised, an engine picked by heuristics, the execution plan and its workspace
// cached by shape, and run with a uid -> pointer variant pack. 16-bit storage only (what cuDNN's
// fused attention engines take). Tensor and operation nodes finalise without a device; heuristics
// and plans need one.
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

// Every finalised node of the forward graph; `ops` are the operation nodes in graph order.
struct SdpaForwardNodes {
  std::vector<BackendDescriptor> tensors;
  std::vector<BackendDescriptor> descriptors;  // matmul / pointwise / reduction descriptors
  std::vector<BackendDescriptor> ops;
};
// Builds and finalises the nodes (no handle, no device). dtype is f16 or bf16.
SdpaForwardNodes build_sdpa_forward_nodes(const FlashShape& s, DType dtype);
// Finalises the operation graph over the nodes; handle may be null where cuDNN allows it.
BackendDescriptor make_sdpa_operation_graph(const SdpaForwardNodes& nodes, cudnnHandle_t handle);

// Runs the forward on one cuDNN handle, plans cached by shape.
class CudnnFlashForward {
 public:
  CudnnFlashForward();  // creates the cuDNN handle: needs a device
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

}  // namespace vrambench::cuda
