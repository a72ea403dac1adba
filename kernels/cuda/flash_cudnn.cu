// cuDNN backend graph of causal scaled-dot-product attention, forward (see flash_cudnn.h).
#include <cmath>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/flash_cudnn.h"

namespace vrambench::cuda {
namespace {

void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
         cudnnBackendAttributeType_t type, std::int64_t count, const void* value) {
  VB_CUDNN_CHECK(cudnnBackendSetAttribute(d, name, type, count, value));
}
void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
              cudnnBackendDescriptor_t value) {
  set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}
void set_type(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnDataType_t t) {
  set(d, name, CUDNN_TYPE_DATA_TYPE, 1, &t);
}

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    default:
      break;
  }
  throw std::invalid_argument("cuDNN attention: dtype " + std::string(dtype_name(t)) +
                              " is not a floating storage type");
}

// Builds the nodes; tensors and descriptors are kept alive in `n`.
class Builder {
 public:
  explicit Builder(SdpaForwardNodes& nodes) : n_(nodes) {}

  cudnnBackendDescriptor_t tensor(std::int64_t uid, cudnnDataType_t type, const SdpaLayout& l,
                                  bool is_virtual, bool by_value = false) {
    BackendDescriptor t = make_backend_descriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const std::int64_t alignment = 16;
    set_type(t.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, type);
    set(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64,
        static_cast<std::int64_t>(l.dims.size()), l.dims.data());
    set(t.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64,
        static_cast<std::int64_t>(l.strides.size()), l.strides.data());
    set(t.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(t.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    set(t.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) set(t.get(), CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    VB_CUDNN_CHECK(cudnnBackendFinalize(t.get()));
    n_.tensors.push_back(std::move(t));
    return n_.tensors.back().get();
  }
  cudnnBackendDescriptor_t virt(cudnnDataType_t type, const SdpaLayout& l) {
    return tensor(next_virtual_++, type, l, true);
  }

  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    BackendDescriptor desc = make_backend_descriptor(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    set_type(desc.get(), CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
    VB_CUDNN_CHECK(cudnnBackendFinalize(desc.get()));
    BackendDescriptor op = make_backend_descriptor(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_DESC, desc.get());
    VB_CUDNN_CHECK(cudnnBackendFinalize(op.get()));
    n_.descriptors.push_back(std::move(desc));
    n_.ops.push_back(std::move(op));
  }

  // y = mode(x [, b] [, t]); axis for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, std::int64_t axis = -1) {
    BackendDescriptor desc = make_backend_descriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(desc.get(), CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set_type(desc.get(), CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_DATA_FLOAT);
    if (axis >= 0) set(desc.get(), CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    VB_CUDNN_CHECK(cudnnBackendFinalize(desc.get()));
    BackendDescriptor op = make_backend_descriptor(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc.get());
    set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b != nullptr) set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t != nullptr) set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    VB_CUDNN_CHECK(cudnnBackendFinalize(op.get()));
    n_.descriptors.push_back(std::move(desc));
    n_.ops.push_back(std::move(op));
  }

  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y) {
    BackendDescriptor desc = make_backend_descriptor(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    set(desc.get(), CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    set_type(desc.get(), CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
    VB_CUDNN_CHECK(cudnnBackendFinalize(desc.get()));
    BackendDescriptor op = make_backend_descriptor(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc.get());
    VB_CUDNN_CHECK(cudnnBackendFinalize(op.get()));
    n_.descriptors.push_back(std::move(desc));
    n_.ops.push_back(std::move(op));
  }

 private:
  SdpaForwardNodes& n_;
  std::int64_t next_virtual_ = 100;
};

SdpaLayout contiguous(std::vector<std::int64_t> dims) {
  std::vector<std::int64_t> strides(dims.size(), 1);
  for (std::size_t i = dims.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
  return {std::move(dims), std::move(strides)};
}

}  // namespace

SdpaLayout sdpa_q_layout(const FlashShape& s) {
  const std::int64_t W = s.width();
  return {{s.batch, s.heads, s.seq, s.head_dim}, {s.seq * W, s.head_dim, W, 1}};
}
SdpaLayout sdpa_kt_layout(const FlashShape& s) {
  const std::int64_t W = s.width();
  return {{s.batch, s.kv_heads, s.head_dim, s.seq}, {s.seq * W, s.head_dim, 1, W}};
}
SdpaLayout sdpa_v_layout(const FlashShape& s) {
  const std::int64_t W = s.width();
  return {{s.batch, s.kv_heads, s.seq, s.head_dim}, {s.seq * W, s.head_dim, W, 1}};
}
SdpaLayout sdpa_o_layout(const FlashShape& s) {
  const std::int64_t AD = s.heads * s.head_dim;
  return {{s.batch, s.heads, s.seq, s.head_dim}, {s.seq * AD, s.head_dim, AD, 1}};
}
SdpaLayout sdpa_stats_layout(const FlashShape& s) {
  return contiguous({s.batch, s.heads, s.seq, 1});
}

SdpaForwardNodes build_sdpa_forward_nodes(const FlashShape& s, DType dtype) {
  check_flash_shape(s);
  if (dtype != DType::f16 && dtype != DType::bf16)
    throw std::invalid_argument("cuDNN fused attention takes f16 or bf16, not " +
                                std::string(dtype_name(dtype)));
  const cudnnDataType_t io = cudnn_type(dtype), f32 = CUDNN_DATA_FLOAT;
  SdpaForwardNodes nodes;
  Builder g(nodes);
  const SdpaLayout scores = contiguous({s.batch, s.heads, s.seq, s.seq});
  const SdpaLayout row = contiguous({s.batch, s.heads, s.seq, 1});
  const SdpaLayout scalar = contiguous({1, 1, 1, 1});

  auto q = g.tensor(kSdpaQ, io, sdpa_q_layout(s), false);
  auto kt = g.tensor(kSdpaK, io, sdpa_kt_layout(s), false);
  auto v = g.tensor(kSdpaV, io, sdpa_v_layout(s), false);
  auto o = g.tensor(kSdpaO, io, sdpa_o_layout(s), false);
  auto stats = g.tensor(kSdpaStats, f32, sdpa_stats_layout(s), false);
  auto scale = g.tensor(kSdpaScale, f32, scalar, false, true);
  auto neg_inf = g.tensor(kSdpaNegInf, f32, scalar, false, true);

  // S = q k^T (heads map onto kv heads by broadcasting over the group), scaled.
  auto s_raw = g.virt(f32, scores);
  g.matmul(q, kt, s_raw);
  auto s_scaled = g.virt(f32, scores);
  g.pointwise(CUDNN_POINTWISE_MUL, s_raw, scale, nullptr, s_scaled);
  // Causal: keep (i, j) where row index i >= column index j, else -inf.
  auto row_index = g.virt(CUDNN_DATA_INT32, scores);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s_scaled, nullptr, nullptr, row_index, 2);
  auto col_index = g.virt(CUDNN_DATA_INT32, scores);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s_scaled, nullptr, nullptr, col_index, 3);
  auto keep = g.virt(CUDNN_DATA_BOOLEAN, scores);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row_index, col_index, nullptr, keep);
  auto s_masked = g.virt(f32, scores);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s_scaled, neg_inf, keep, s_masked);
  // Softmax with its log-sum-exp saved: stats = max + log(sum exp(S - max)).
  auto row_max = g.virt(f32, row);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s_masked, row_max);
  auto shifted = g.virt(f32, scores);
  g.pointwise(CUDNN_POINTWISE_SUB, s_masked, row_max, nullptr, shifted);
  auto expd = g.virt(f32, scores);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, nullptr, nullptr, expd);
  auto row_sum = g.virt(f32, row);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, expd, row_sum);
  auto log_sum = g.virt(f32, row);
  g.pointwise(CUDNN_POINTWISE_LOG, row_sum, nullptr, nullptr, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, row_max, log_sum, nullptr, stats);
  auto probs = g.virt(f32, scores);
  g.pointwise(CUDNN_POINTWISE_DIV, expd, row_sum, nullptr, probs);
  // O = P v
  g.matmul(probs, v, o);
  return nodes;
}

BackendDescriptor make_sdpa_operation_graph(const SdpaForwardNodes& nodes, cudnnHandle_t handle) {
  BackendDescriptor graph = make_backend_descriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const BackendDescriptor& op : nodes.ops) ops.push_back(op.get());
  set(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
      static_cast<std::int64_t>(ops.size()), ops.data());
  if (handle != nullptr)
    set(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  VB_CUDNN_CHECK(cudnnBackendFinalize(graph.get()));
  return graph;
}

CudnnFlashForward::CudnnFlashForward() : handle_(make_cudnn_handle()) {}

CudnnFlashForward::Plan& CudnnFlashForward::plan_for(const FlashShape& s, DType dtype) {
  const Key key{s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, static_cast<int>(dtype)};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan& p = plans_[key];
  if (s.dropout_p > 0.0f || (dtype != DType::f16 && dtype != DType::bf16)) return p;
  try {
    p.nodes = build_sdpa_forward_nodes(s, dtype);
    p.graph = make_sdpa_operation_graph(p.nodes, handle_.get());
    BackendDescriptor heur = make_backend_descriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    cudnnBackendDescriptor_t graph = p.graph.get();
    set(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &graph);
    set(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    VB_CUDNN_CHECK(cudnnBackendFinalize(heur.get()));
    // Try the heuristics' engine configurations in order until one finalises into a plan.
    constexpr int kCandidates = 8;
    std::vector<BackendDescriptor> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int i = 0; i < kCandidates; ++i) {
      configs.push_back(make_backend_descriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      raw.push_back(configs.back().get());
    }
    std::int64_t found = 0;
    VB_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, kCandidates, &found,
                                            raw.data()));
    for (std::int64_t i = 0; i < found && !p.ok; ++i) {
      BackendDescriptor plan = make_backend_descriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      cudnnHandle_t h = handle_.get();
      set(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
      set(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &raw[static_cast<std::size_t>(i)]);
      if (cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS) continue;
      std::int64_t ws = 0, count = 0;
      VB_CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                              CUDNN_TYPE_INT64, 1, &count, &ws));
      p.workspace = ws;
      p.plan = std::move(plan);
      p.engine_config = std::move(configs[static_cast<std::size_t>(i)]);
      p.ok = true;
    }
  } catch (const CudaOutOfMemory&) {
    plans_.erase(key);
    throw;
  } catch (const CudaError&) {
    p.ok = false;  // no engine for this graph here: the caller uses the plain kernels
  }
  return p;
}

bool CudnnFlashForward::supports(const FlashShape& s, DType dtype) {
  return plan_for(s, dtype).ok;
}

Bytes CudnnFlashForward::workspace_bytes(const FlashShape& s, DType dtype) {
  return plan_for(s, dtype).workspace;
}

void CudnnFlashForward::run(const FlashShape& s, DType dtype, void* y, float* lse, const void* qkv,
                            void* workspace, Bytes workspace_bytes, cudaStream_t stream) {
  Plan& p = plan_for(s, dtype);
  if (!p.ok) throw std::invalid_argument("cuDNN has no fused attention engine for this shape");
  if (p.workspace > workspace_bytes)
    throw std::invalid_argument("cuDNN fused attention needs " + std::to_string(p.workspace) +
                                " bytes of workspace, the program gives " +
                                std::to_string(workspace_bytes));
  VB_CUDNN_CHECK(cudnnSetStream(handle_.get(), stream));
  const std::int64_t es = dtype_size(dtype);
  const char* base = static_cast<const char*>(qkv);
  float scale = s.scale();
  float neg_inf = -INFINITY;
  void* pointers[] = {const_cast<char*>(base),
                      const_cast<char*>(base + s.heads * s.head_dim * es),
                      const_cast<char*>(base + (s.heads + s.kv_heads) * s.head_dim * es),
                      y,
                      lse,
                      &scale,
                      &neg_inf};
  const std::int64_t uids[] = {kSdpaQ, kSdpaK, kSdpaV, kSdpaO, kSdpaStats, kSdpaScale, kSdpaNegInf};
  BackendDescriptor pack = make_backend_descriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 7, uids);
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 7, pointers);
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  VB_CUDNN_CHECK(cudnnBackendFinalize(pack.get()));
  VB_CUDNN_CHECK(cudnnBackendExecute(handle_.get(), p.plan.get(), pack.get()));
}

}  // namespace vrambench::cuda
