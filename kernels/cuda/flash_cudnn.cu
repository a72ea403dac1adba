// cuDNN backend graphs of causal scaled-dot-product attention, forward and backward (see
// flash_cudnn.h).
#include <cmath>
#include <iterator>
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
  explicit Builder(SdpaNodes& nodes) : n_(nodes) {}

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

  // y = x seen through y's dims and strides (a transpose when the strides are swapped).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    BackendDescriptor op = make_backend_descriptor(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    VB_CUDNN_CHECK(cudnnBackendFinalize(op.get()));
    n_.ops.push_back(std::move(op));
  }

 private:
  SdpaNodes& n_;
  std::int64_t next_virtual_ = 100;
};

// Heuristics (mode A) over the graph, then its engine configurations in order until one
// finalises into a plan; false when none does. CudaError from cuDNN calls propagates.
bool find_plan(cudnnHandle_t handle, cudnnBackendDescriptor_t graph, BackendDescriptor& plan_out,
               BackendDescriptor& config_out, Bytes& workspace_out) {
  BackendDescriptor heur = make_backend_descriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  set(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  set(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  VB_CUDNN_CHECK(cudnnBackendFinalize(heur.get()));
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
  for (std::int64_t i = 0; i < found; ++i) {
    BackendDescriptor plan = make_backend_descriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    set(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    set(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &raw[static_cast<std::size_t>(i)]);
    if (cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS) continue;
    std::int64_t ws = 0, count = 0;
    VB_CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                            CUDNN_TYPE_INT64, 1, &count, &ws));
    workspace_out = ws;
    plan_out = std::move(plan);
    config_out = std::move(configs[static_cast<std::size_t>(i)]);
    return true;
  }
  return false;
}

void execute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, std::int64_t n,
             const std::int64_t* uids, void* const* pointers, void* workspace) {
  BackendDescriptor pack = make_backend_descriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers);
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  VB_CUDNN_CHECK(cudnnBackendFinalize(pack.get()));
  VB_CUDNN_CHECK(cudnnBackendExecute(handle, plan, pack.get()));
}

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

namespace {

// S = q k^T (heads map onto kv heads by broadcasting over the group), scaled, then causal: keep
// (i, j) where row index i >= column index j, else -inf. The forward and the backward (which
// recomputes P) build the same nodes, so the masks agree by construction.
cudnnBackendDescriptor_t causal_scaled_scores(Builder& g, cudnnBackendDescriptor_t q,
                                              cudnnBackendDescriptor_t kt,
                                              cudnnBackendDescriptor_t scale,
                                              cudnnBackendDescriptor_t neg_inf,
                                              const SdpaLayout& scores) {
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  auto s_raw = g.virt(f32, scores);
  g.matmul(q, kt, s_raw);
  auto s_scaled = g.virt(f32, scores);
  g.pointwise(CUDNN_POINTWISE_MUL, s_raw, scale, nullptr, s_scaled);
  auto row_index = g.virt(CUDNN_DATA_INT32, scores);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s_scaled, nullptr, nullptr, row_index, 2);
  auto col_index = g.virt(CUDNN_DATA_INT32, scores);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s_scaled, nullptr, nullptr, col_index, 3);
  auto keep = g.virt(CUDNN_DATA_BOOLEAN, scores);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row_index, col_index, nullptr, keep);
  auto s_masked = g.virt(f32, scores);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s_scaled, neg_inf, keep, s_masked);
  return s_masked;
}

}  // namespace

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

  auto s_masked = causal_scaled_scores(g, q, kt, scale, neg_inf, scores);
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

BackendDescriptor make_sdpa_operation_graph(const SdpaNodes& nodes, cudnnHandle_t handle) {
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
    p.ok = find_plan(handle_.get(), p.graph.get(), p.plan, p.engine_config, p.workspace);
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
  execute(handle_.get(), p.plan.get(), 7, uids, pointers, workspace);
}

// ---- backward ---------------------------------------------------------------------------------

SdpaLayout sdpa_vt_layout(const FlashShape& s) {
  return sdpa_kt_layout(s);  // same view shape; the pointer starts at the v columns
}
SdpaLayout sdpa_k_layout(const FlashShape& s) {
  return sdpa_v_layout(s);  // [B, K, S, D] rows of width W; the pointer picks the k or v columns
}
SdpaLayout sdpa_softmax_sum_layout(const FlashShape& s) {
  return contiguous({s.batch, s.heads, s.seq, 1});
}
SdpaLayout sdpa_dq_accum_layout(const FlashShape& s) {
  return contiguous({s.batch, s.heads, s.seq, s.head_dim});
}

SdpaBackwardScratch sdpa_backward_scratch(const FlashShape& s, Bytes plan_workspace) {
  constexpr Bytes kAlign = 256;
  auto up = [](Bytes b) { return (b + kAlign - 1) / kAlign * kAlign; };
  SdpaBackwardScratch r;
  r.dq_accum_offset = 0;
  r.softmax_sum_offset = up(s.batch * s.heads * s.seq * s.head_dim * 4);
  r.workspace_offset = r.softmax_sum_offset + up(s.batch * s.heads * s.seq * 4);
  r.total = r.workspace_offset + plan_workspace;
  return r;
}

// The pattern of cuDNN's fused-attention backward as its frontend lowers it (no dropout, no bias):
//   softmax_sum = reduce_add(dO * O) * 1                      (non-virtual, fp32)
//   P  = exp(causal(scale * Q K^T) - stats)
//   dV = P^T dO                     (per query head, then summed over the group when K < A)
//   dS = scale * P * (dO V^T - softmax_sum)
//   dK = dS^T Q                     (idem)
//   dQ = identity(dQ_accum),  dQ_accum = dS K                 (non-virtual, fp32)
// P^T and dS^T are reshapes (swapped strides) in the storage type, as the frontend writes them.
SdpaBackwardNodes build_sdpa_backward_nodes(const FlashShape& s, DType dtype) {
  check_flash_shape(s);
  if (dtype != DType::f16 && dtype != DType::bf16)
    throw std::invalid_argument("cuDNN fused attention takes f16 or bf16, not " +
                                std::string(dtype_name(dtype)));
  const cudnnDataType_t io = cudnn_type(dtype), f32 = CUDNN_DATA_FLOAT;
  const std::int64_t B = s.batch, A = s.heads, S = s.seq, D = s.head_dim;
  const bool grouped = s.kv_heads != s.heads;
  SdpaBackwardNodes nodes;
  Builder g(nodes);
  const SdpaLayout scores = contiguous({B, A, S, S});
  const SdpaLayout scores_t{{B, A, S, S}, {A * S * S, S * S, 1, S}};  // [B, A, S_kv, S_q]
  const SdpaLayout row = contiguous({B, A, S, 1});
  const SdpaLayout scalar = contiguous({1, 1, 1, 1});
  const SdpaLayout per_query_head = contiguous({B, A, S, D});
  const SdpaLayout k_rows = sdpa_kt_layout(s);  // K^T, seen back as K below
  const SdpaLayout k_view{
      {k_rows.dims[0], k_rows.dims[1], k_rows.dims[3], k_rows.dims[2]},
      {k_rows.strides[0], k_rows.strides[1], k_rows.strides[3], k_rows.strides[2]}};

  auto q = g.tensor(kSdpaBwdQ, io, sdpa_q_layout(s), false);
  auto kt = g.tensor(kSdpaBwdKt, io, sdpa_kt_layout(s), false);
  auto vt = g.tensor(kSdpaBwdVt, io, sdpa_vt_layout(s), false);
  auto o = g.tensor(kSdpaBwdO, io, sdpa_o_layout(s), false);
  auto d_o = g.tensor(kSdpaBwdDO, io, sdpa_o_layout(s), false);
  auto stats = g.tensor(kSdpaBwdStats, f32, sdpa_stats_layout(s), false);
  auto dq = g.tensor(kSdpaBwdDQ, io, sdpa_q_layout(s), false);
  auto dk = g.tensor(kSdpaBwdDK, io, sdpa_k_layout(s), false);
  auto dv = g.tensor(kSdpaBwdDV, io, sdpa_k_layout(s), false);
  auto scale = g.tensor(kSdpaBwdScale, f32, scalar, false, true);
  auto neg_inf = g.tensor(kSdpaBwdNegInf, f32, scalar, false, true);
  auto one = g.tensor(kSdpaBwdOne, f32, scalar, false, true);
  auto softmax_sum = g.tensor(kSdpaBwdSoftmaxSum, f32, sdpa_softmax_sum_layout(s), false);
  auto dq_accum = g.tensor(kSdpaBwdDQAccum, f32, sdpa_dq_accum_layout(s), false);

  // softmax_sum_i = dO_i . O_i (= sum_j P_ij dP_ij), the row term of the softmax backward.
  auto do_o = g.virt(f32, sdpa_o_layout(s));
  g.pointwise(CUDNN_POINTWISE_MUL, d_o, o, nullptr, do_o);
  auto do_o_sum = g.virt(f32, row);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, do_o, do_o_sum);
  g.pointwise(CUDNN_POINTWISE_MUL, do_o_sum, one, nullptr, softmax_sum);

  // P recomputed from the saved log-sum-exp, with the forward's causal mask.
  auto s_masked = causal_scaled_scores(g, q, kt, scale, neg_inf, scores);
  auto shifted = g.virt(f32, scores);
  g.pointwise(CUDNN_POINTWISE_SUB, s_masked, stats, nullptr, shifted);
  auto probs = g.virt(f32, scores);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, nullptr, nullptr, probs);

  // out = a^T b for a kv-head gradient (dK, dV): with grouped heads computed per query head
  // first, then summed onto the kv heads.
  auto kv_head_gradient = [&](cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                              cudnnBackendDescriptor_t out) {
    auto a_t = g.virt(io, scores_t);
    g.reshape(a, a_t);
    if (!grouped) {
      g.matmul(a_t, b, out);
      return;
    }
    auto per_head = g.virt(io, per_query_head);
    g.matmul(a_t, b, per_head);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, per_head, out);
  };

  // dV = P^T dO
  kv_head_gradient(probs, d_o, dv);

  // dS = scale * P * (dO V^T - softmax_sum)
  auto dprobs = g.virt(f32, scores);
  g.matmul(d_o, vt, dprobs);
  auto dprobs_centred = g.virt(f32, scores);
  g.pointwise(CUDNN_POINTWISE_SUB, dprobs, softmax_sum, nullptr, dprobs_centred);
  auto dscores_unscaled = g.virt(f32, scores);
  g.pointwise(CUDNN_POINTWISE_MUL, dprobs_centred, probs, nullptr, dscores_unscaled);
  auto dscores = g.virt(f32, scores);
  g.pointwise(CUDNN_POINTWISE_MUL, dscores_unscaled, scale, nullptr, dscores);

  // dK = dS^T Q
  kv_head_gradient(dscores, q, dk);

  // dQ = dS K, accumulated in fp32, then stored in the storage type.
  auto k = g.virt(io, k_view);
  g.reshape(kt, k);
  g.matmul(dscores, k, dq_accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, nullptr, nullptr, dq);
  return nodes;
}

CudnnFlashBackward::CudnnFlashBackward() : owned_(make_cudnn_handle()), handle_(owned_.get()) {}
CudnnFlashBackward::CudnnFlashBackward(cudnnHandle_t shared) : handle_(shared) {}

CudnnFlashBackward::Plan& CudnnFlashBackward::plan_for(const FlashShape& s, DType dtype) {
  const Key key{s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, static_cast<int>(dtype)};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan& p = plans_[key];
  if (s.dropout_p > 0.0f || (dtype != DType::f16 && dtype != DType::bf16)) return p;
  try {
    p.nodes = build_sdpa_backward_nodes(s, dtype);
    p.graph = make_sdpa_operation_graph(p.nodes, handle_);
    p.ok = find_plan(handle_, p.graph.get(), p.plan, p.engine_config, p.workspace);
  } catch (const CudaOutOfMemory&) {
    plans_.erase(key);
    throw;
  } catch (const CudaError&) {
    p.ok = false;  // no engine for this graph here: the caller uses the plain kernels
  }
  return p;
}

bool CudnnFlashBackward::supports(const FlashShape& s, DType dtype) {
  return plan_for(s, dtype).ok;
}

Bytes CudnnFlashBackward::scratch_bytes(const FlashShape& s, DType dtype) {
  return sdpa_backward_scratch(s, plan_for(s, dtype).workspace).total;
}

void CudnnFlashBackward::run(const FlashShape& s, DType dtype, void* dqkv, const void* dy,
                             const void* qkv, const void* y, const float* lse, void* scratch,
                             Bytes scratch_bytes, cudaStream_t stream) {
  Plan& p = plan_for(s, dtype);
  if (!p.ok) throw std::invalid_argument("cuDNN has no fused attention engine for this shape");
  const SdpaBackwardScratch at = sdpa_backward_scratch(s, p.workspace);
  if (at.total > scratch_bytes)
    throw std::invalid_argument("cuDNN fused attention backward needs " + std::to_string(at.total) +
                                " bytes of scratch, the program gives " +
                                std::to_string(scratch_bytes));
  VB_CUDNN_CHECK(cudnnSetStream(handle_, stream));
  // cuDNN zeroes the fp32 dQ accumulator itself from 9.6 on; before that its frontend cleared it.
  if (cudnnGetVersion() < 90600)
    VB_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(scratch) + at.dq_accum_offset, 0,
                                  static_cast<std::size_t>(at.softmax_sum_offset), stream));
  const std::int64_t es = dtype_size(dtype);
  const std::int64_t k_col = s.heads * s.head_dim * es;
  const std::int64_t v_col = (s.heads + s.kv_heads) * s.head_dim * es;
  char* in = const_cast<char*>(static_cast<const char*>(qkv));
  char* out = static_cast<char*>(dqkv);
  char* work = static_cast<char*>(scratch);
  float scale = s.scale();
  float neg_inf = -INFINITY;
  float one = 1.0f;
  void* pointers[] = {in,
                      in + k_col,
                      in + v_col,
                      const_cast<void*>(y),
                      const_cast<void*>(dy),
                      const_cast<float*>(lse),
                      out,
                      out + k_col,
                      out + v_col,
                      &scale,
                      &neg_inf,
                      &one,
                      work + at.softmax_sum_offset,
                      work + at.dq_accum_offset};
  const std::int64_t uids[] = {kSdpaBwdQ,          kSdpaBwdKt,     kSdpaBwdVt,     kSdpaBwdO,
                               kSdpaBwdDO,         kSdpaBwdStats,  kSdpaBwdDQ,     kSdpaBwdDK,
                               kSdpaBwdDV,         kSdpaBwdScale,  kSdpaBwdNegInf, kSdpaBwdOne,
                               kSdpaBwdSoftmaxSum, kSdpaBwdDQAccum};
  static_assert(std::size(uids) == std::size(pointers));
  execute(handle_, p.plan.get(), static_cast<std::int64_t>(std::size(uids)), uids, pointers,
          work + at.workspace_offset);
}

}  // namespace vrambench::cuda
