// cuDNN fused attention through cudnn-frontend (see attention_cudnn.h): graph factory, validation,
// planning, the bounded plan cache, batch chunks and execution. The only file that compiles the
// frontend's headers (they are heavy): host C++, built by the C++ compiler, not nvcc.
#include "cuda/attention_cudnn.h"

#include <cudnn_frontend.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <unordered_map>

#include "core/units.h"
#include "cuda/attention_flash.h"
#include "cuda/check.h"
#include "cuda/op_table.h"
#include "cuda/owners.h"
#include "program/program.h"

namespace vrambench::cuda {

namespace fe = cudnn_frontend;

// check.cu names frontend error codes by their position in error_code_t.
static_assert(static_cast<int>(fe::error_code_t::GRAPH_NOT_SUPPORTED) == 5);
static_assert(static_cast<int>(fe::error_code_t::CUDA_API_FAILED) == 10);
static_assert(static_cast<int>(fe::error_code_t::CUDNN_BACKEND_API_FAILED) == 11);
static_assert(static_cast<int>(fe::error_code_t::NVRTC_COMPILATION_FAILED) == 15);

// ---- keys and layouts --------------------------------------------------------------------------

float SdpaShape::scale() const {
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

std::size_t SdpaKeyHash::operator()(const SdpaKey& k) const {
  std::size_t h = 0;
  auto mix = [&h](std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  const SdpaShape& s = k.shape;
  for (std::int64_t v : {s.batch, s.seq, s.heads, s.kv_heads, s.head_dim})
    mix(std::hash<std::int64_t>{}(v));
  mix(static_cast<std::size_t>(k.dtype));
  mix(std::hash<float>{}(k.dropout_p));
  mix(static_cast<std::size_t>(k.pass));
  return h;
}

std::string describe(const SdpaKey& k) {
  std::ostringstream out;
  const SdpaShape& s = k.shape;
  out << (k.pass == SdpaPass::forward ? "sdpa" : "sdpa_backward") << " B=" << s.batch
      << " S=" << s.seq << " A=" << s.heads << " K=" << s.kv_heads << " D=" << s.head_dim << " "
      << dtype_name(k.dtype);
  if (k.dropout_p > 0.0f) out << " dropout " << k.dropout_p;
  return out.str();
}

SdpaLayout sdpa_q_layout(const SdpaShape& s) {
  const std::int64_t W = s.width();
  return {{s.batch, s.heads, s.seq, s.head_dim}, {s.seq * W, s.head_dim, W, 1}};
}
SdpaLayout sdpa_kv_layout(const SdpaShape& s) {
  const std::int64_t W = s.width();
  return {{s.batch, s.kv_heads, s.seq, s.head_dim}, {s.seq * W, s.head_dim, W, 1}};
}
SdpaLayout sdpa_o_layout(const SdpaShape& s) {
  const std::int64_t AD = s.heads * s.head_dim;
  return {{s.batch, s.heads, s.seq, s.head_dim}, {s.seq * AD, s.head_dim, AD, 1}};
}
SdpaLayout sdpa_stats_layout(const SdpaShape& s) {
  return {{s.batch, s.heads, s.seq, 1}, {s.heads * s.seq, s.seq, 1, 1}};
}
std::int64_t sdpa_k_column(const SdpaShape& s) {
  return s.heads * s.head_dim;
}
std::int64_t sdpa_v_column(const SdpaShape& s) {
  return (s.heads + s.kv_heads) * s.head_dim;
}

std::vector<SdpaChunk> sdpa_batch_chunks(std::int64_t batch, std::int64_t max_batch) {
  if (batch < 1 || max_batch < 1)
    throw std::invalid_argument("sdpa batch chunks: batch " + std::to_string(batch) +
                                " and largest chunk " + std::to_string(max_batch) +
                                " must be at least 1");
  const std::int64_t n = (batch + max_batch - 1) / max_batch;
  const std::int64_t base = batch / n, larger = batch % n;  // `larger` chunks hold base + 1
  std::vector<SdpaChunk> chunks;
  chunks.reserve(static_cast<std::size_t>(n));
  std::int64_t first = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t size = base + (i < larger ? 1 : 0);
    chunks.push_back({first, size});
    first += size;
  }
  return chunks;
}

Bytes sdpa_frontend_workspace_bytes(const SdpaShape& s, SdpaPass pass) {
  if (pass == SdpaPass::forward) return 0;
  // CompositeSDPABackwardNode: dQ_accum [B,A,S,D] then softmax_sum [B,A,S,1], fp32, back to back.
  const Bytes rows =
      checked_mul(checked_mul(s.batch, s.heads, "sdpa workspace"), s.seq, "sdpa workspace");
  return checked_mul(checked_mul(rows, s.head_dim + 1, "sdpa workspace"), 4, "sdpa workspace");
}

Bytes sdpa_program_scratch_bytes(const SdpaShape& s, DType dtype, SdpaPass pass) {
  // One formula, the step program's: what the program lists is what cuDNN may use.
  if (pass == SdpaPass::forward) return flash_fwd_scratch_bytes();
  return flash_bwd_scratch_bytes(s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, dtype);
}

// ---- graphs ------------------------------------------------------------------------------------

namespace {

// Fixed uids of the tensors the variant pack binds.
enum SdpaUid : std::int64_t {
  kQ = 1,
  kK = 2,
  kV = 3,
  kO = 4,
  kStats = 5,
  kDO = 6,
  kDQ = 7,
  kDK = 8,
  kDV = 9,
  kSeed = 10,
  kOffset = 11,
};

fe::DataType_t io_type(DType t) {
  switch (t) {
    case DType::f16:
      return fe::DataType_t::HALF;
    case DType::bf16:
      return fe::DataType_t::BFLOAT16;
    case DType::f32:
      return fe::DataType_t::FLOAT;  // the frontend (or cuDNN) says whether it takes it
    default:
      break;
  }
  throw std::invalid_argument("cuDNN sdpa: dtype " + std::string(dtype_name(t)) +
                              " is not a floating storage type");
}

void check_key(const SdpaKey& k) {
  const SdpaShape& s = k.shape;
  if (s.batch < 1 || s.seq < 1 || s.heads < 1 || s.kv_heads < 1 || s.head_dim < 1)
    throw std::invalid_argument("cuDNN sdpa: every size must be at least 1 (" + describe(k) + ")");
  if (!(k.dropout_p >= 0.0f && k.dropout_p < 1.0f))
    throw std::invalid_argument("cuDNN sdpa: dropout must be in [0, 1) (" + describe(k) + ")");
}

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

TensorPtr input(fe::graph::Graph& g, const char* name, SdpaUid uid, const SdpaLayout& l) {
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(l.dims).set_stride(
          l.strides));
}
void output(const TensorPtr& t, SdpaUid uid, const SdpaLayout& l) {
  t->set_output(true).set_uid(uid).set_dim(l.dims).set_stride(l.strides);
}
TensorPtr by_value_int64(fe::graph::Graph& g, const char* name, SdpaUid uid) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({1, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::INT64)
                      .set_is_pass_by_value(true));
}

// The graph of one key: tensors over the packed layout (q, k, v are strided views of qkv rows),
// causal (top-left diagonal, right bound 0), scale 1/sqrt(D), stats = natural log-sum-exp.
// sm_version > 0 builds it for that GPU instead of the current device's; it must be set before any
// node is added, since each node copies the graph's context when it is made.
std::shared_ptr<fe::graph::Graph> make_graph(const SdpaKey& key, int sm_version = 0) {
  check_key(key);
  const SdpaShape& s = key.shape;
  auto g = std::make_shared<fe::graph::Graph>();
  if (sm_version > 0) g->set_sm_version(sm_version);
  g->set_name(describe(key))
      .set_io_data_type(io_type(key.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const TensorPtr q = input(*g, "Q", kQ, sdpa_q_layout(s));
  const TensorPtr k = input(*g, "K", kK, sdpa_kv_layout(s));
  const TensorPtr v = input(*g, "V", kV, sdpa_kv_layout(s));
  const bool dropout = key.dropout_p > 0.0f;
  TensorPtr seed, offset;
  if (dropout) {
    seed = by_value_int64(*g, "Seed", kSeed);
    offset = by_value_int64(*g, "Offset", kOffset);
  }
  // The node factories throw std::runtime_error when no implementation takes the attributes.
  try {
    if (key.pass == SdpaPass::forward) {
      auto options = fe::graph::SDPA_attributes()
                         .set_name("sdpa")
                         .set_generate_stats(true)
                         .set_attn_scale(s.scale())
                         .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                         .set_diagonal_band_right_bound(0);
      if (dropout) options.set_dropout(key.dropout_p, seed, offset);
      auto [o, stats] = g->sdpa(q, k, v, options);
      output(o, kO, sdpa_o_layout(s));
      output(stats, kStats, sdpa_stats_layout(s));
      stats->set_data_type(fe::DataType_t::FLOAT);
    } else {
      const TensorPtr o = input(*g, "O", kO, sdpa_o_layout(s));
      const TensorPtr d_o = input(*g, "dO", kDO, sdpa_o_layout(s));
      const TensorPtr stats = input(*g, "Stats", kStats, sdpa_stats_layout(s));
      stats->set_data_type(fe::DataType_t::FLOAT);
      auto options = fe::graph::SDPA_backward_attributes()
                         .set_name("sdpa_backward")
                         .set_attn_scale(s.scale())
                         .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                         .set_diagonal_band_right_bound(0);
      if (dropout) options.set_dropout(key.dropout_p, seed, offset);
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, options);
      output(dq, kDQ, sdpa_q_layout(s));
      output(dk, kDK, sdpa_kv_layout(s));
      output(dv, kDV, sdpa_kv_layout(s));
    }
  } catch (const std::exception& e) {
    throw_cudnn_frontend(static_cast<int>(fe::error_code_t::GRAPH_NOT_SUPPORTED), e.what(),
                         key.pass == SdpaPass::forward ? "graph.sdpa" : "graph.sdpa_backward",
                         __FILE__, __LINE__);
  }
  return g;
}

// Re-throws a library error with the key appended to its message, keeping its type.
[[noreturn]] void rethrow_for(const CudaError& e, const SdpaKey& key) {
  const std::string text = e.error_string() + " (" + describe(key) + ")";
  if (dynamic_cast<const CudaOutOfMemory*>(&e) != nullptr)
    throw CudaOutOfMemory(e.library(), e.code(), e.call(), e.file(), e.line(), e.error_name(),
                          text);
  throw CudaError(e.library(), e.code(), e.call(), e.file(), e.line(), e.error_name(), text);
}

// A graph built for one key: its plan chosen, its workspace known.
struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  Bytes workspace = 0;
};

std::shared_ptr<BuiltGraph> build(const SdpaKey& key, cudnnHandle_t handle) {
  auto built = std::make_shared<BuiltGraph>();
  try {
    built->graph = make_graph(key);
    fe::graph::Graph& g = *built->graph;
    VB_CUDNN_FE_CHECK(g.validate());
    VB_CUDNN_FE_CHECK(g.build_operation_graph(handle));
    // Heuristics in order: mode A's engine configurations, then the fallback list.
    VB_CUDNN_FE_CHECK(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}));
    VB_CUDNN_FE_CHECK(g.check_support(handle));
    // The first configuration that builds, in heuristics order.
    VB_CUDNN_FE_CHECK(g.build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE));
    std::int64_t workspace = 0;
    VB_CUDNN_FE_CHECK(g.get_workspace_size(workspace));
    built->workspace = workspace;
  } catch (const CudaError& e) {
    rethrow_for(e, key);
  } catch (const std::invalid_argument&) {
    throw;  // ours: a key outside what the graphs describe
  } catch (const std::exception& e) {
    // The frontend throws from a few places instead of returning an error_t.
    throw_cudnn_frontend(static_cast<int>(fe::error_code_t::GRAPH_NOT_SUPPORTED),
                         std::string(e.what()) + " (" + describe(key) + ")", "building the graph",
                         __FILE__, __LINE__);
  }
  return built;
}

}  // namespace

void validate_sdpa_graph(const SdpaKey& key, int sm_version) {
  try {
    if (sm_version <= 0)
      throw std::invalid_argument("validate_sdpa_graph: sm_version must be positive");
    std::shared_ptr<fe::graph::Graph> g = make_graph(key, sm_version);
    VB_CUDNN_FE_CHECK(g->validate());
  } catch (const CudaError& e) {
    rethrow_for(e, key);
  }
}

// ---- the runner --------------------------------------------------------------------------------

struct CudnnSdpa::Impl {
  Impl(std::size_t capacity, std::int64_t max_batch_)
      : handle(make_cudnn_handle()), cache(capacity), max_batch(max_batch_) {
    if (max_batch < 1) throw std::invalid_argument("CudnnSdpa: max_batch must be at least 1");
  }

  std::shared_ptr<BuiltGraph> graph_for(const SdpaKey& key) {
    if (std::shared_ptr<BuiltGraph>* hit = cache.find(key)) return *hit;
    return cache.insert(key, build(key, handle.get()));
  }

  // The chunks of `key` and, for each, the key of its graph.
  std::vector<std::pair<SdpaChunk, SdpaKey>> chunked(const SdpaKey& key) const {
    check_key(key);
    if (key.shape.heads > kSdpaMaxBatch)
      throw std::invalid_argument("cuDNN sdpa: " + std::to_string(key.shape.heads) +
                                  " heads, above the " + std::to_string(kSdpaMaxBatch) +
                                  " its kernels take (" + describe(key) + ")");
    std::vector<std::pair<SdpaChunk, SdpaKey>> out;
    for (const SdpaChunk& c : sdpa_batch_chunks(key.shape.batch, max_batch)) {
      SdpaKey k = key;
      k.shape.batch = c.batch;
      out.emplace_back(c, k);
    }
    return out;
  }

  Bytes workspace_bytes(const SdpaKey& key) {
    Bytes most = 0;
    for (const auto& [chunk, k] : chunked(key)) most = std::max(most, graph_for(k)->workspace);
    return most;
  }

  // Every chunk's plan, after checking that each fits in the listed workspace.
  std::vector<std::pair<SdpaChunk, std::shared_ptr<BuiltGraph>>> plans(const SdpaKey& key,
                                                                       Bytes listed,
                                                                       const std::string& op) {
    std::vector<std::pair<SdpaChunk, std::shared_ptr<BuiltGraph>>> out;
    for (const auto& [chunk, k] : chunked(key)) {
      std::shared_ptr<BuiltGraph> g = graph_for(k);
      if (g->workspace > listed)
        throw CudnnWorkspaceTooSmall(
            "cuDNN " + std::string(key.pass == SdpaPass::forward ? "sdpa" : "sdpa_backward") +
                " needs " + std::to_string(g->workspace) +
                " bytes of workspace, the program lists " + std::to_string(listed) + " for op '" +
                op + "' (" + describe(k) + ")",
            g->workspace, listed);
      out.emplace_back(chunk, std::move(g));
    }
    return out;
  }

  void execute(const BuiltGraph& g, const SdpaKey& key,
               std::unordered_map<std::int64_t, void*>& pack, void* workspace) {
    try {
      VB_CUDNN_FE_CHECK(g.graph->execute(handle.get(), pack, workspace));
    } catch (const CudaError& e) {
      rethrow_for(e, key);
    }
  }

  CudnnHandle handle;
  LruCache<SdpaKey, std::shared_ptr<BuiltGraph>, SdpaKeyHash> cache;
  std::int64_t max_batch;
};

CudnnSdpa::CudnnSdpa(std::size_t cache_capacity, std::int64_t max_batch)
    : impl_(std::make_unique<Impl>(cache_capacity, max_batch)) {}
CudnnSdpa::~CudnnSdpa() = default;
CudnnSdpa::CudnnSdpa(CudnnSdpa&&) noexcept = default;
CudnnSdpa& CudnnSdpa::operator=(CudnnSdpa&&) noexcept = default;

cudnnHandle_t CudnnSdpa::handle() const {
  return impl_->handle.get();
}

Bytes CudnnSdpa::workspace_bytes(const SdpaKey& key) {
  return impl_->workspace_bytes(key);
}

std::size_t CudnnSdpa::cached_graphs() const {
  return impl_->cache.size();
}

namespace {

// Byte offsets of chunk `c` in the packed tensors.
struct ChunkOffsets {
  std::int64_t qkv, y, lse;
};
ChunkOffsets chunk_offsets(const SdpaKey& key, const SdpaChunk& c) {
  const SdpaShape& s = key.shape;
  const std::int64_t es = dtype_size(key.dtype);
  return {c.first * s.seq * s.width() * es, c.first * s.seq * s.heads * s.head_dim * es,
          c.first * s.heads * s.seq * static_cast<std::int64_t>(sizeof(float))};
}
// The variant pack takes void* for inputs too.
char* at(const void* base, std::int64_t bytes) {
  return const_cast<char*>(static_cast<const char*>(base)) + bytes;
}

}  // namespace

void CudnnSdpa::forward(void* y, float* lse, const void* qkv, const SdpaKey& key, SdpaRng rng,
                        void* workspace, Bytes workspace_bytes, const std::string& op,
                        cudaStream_t stream) {
  if (key.pass != SdpaPass::forward)
    throw std::invalid_argument("CudnnSdpa::forward: the key is a backward's");
  const auto plans = impl_->plans(key, workspace_bytes, op);
  VB_CUDNN_CHECK(cudnnSetStream(impl_->handle.get(), stream));
  const std::int64_t es = dtype_size(key.dtype);
  for (const auto& [chunk, g] : plans) {
    const ChunkOffsets o = chunk_offsets(key, chunk);
    char* in = at(qkv, o.qkv);
    std::unordered_map<std::int64_t, void*> pack{
        {kQ, in},
        {kK, in + sdpa_k_column(key.shape) * es},
        {kV, in + sdpa_v_column(key.shape) * es},
        {kO, at(y, o.y)},
        {kStats, at(lse, o.lse)},
    };
    if (key.dropout_p > 0.0f) {
      pack[kSeed] = &rng.seed;
      pack[kOffset] = &rng.offset;
    }
    impl_->execute(*g, key, pack, workspace);
  }
}

void CudnnSdpa::backward(void* dqkv, const void* dy, const void* qkv, const void* y,
                         const float* lse, const SdpaKey& key, SdpaRng rng, void* workspace,
                         Bytes workspace_bytes, const std::string& op, cudaStream_t stream) {
  if (key.pass != SdpaPass::backward)
    throw std::invalid_argument("CudnnSdpa::backward: the key is a forward's");
  const auto plans = impl_->plans(key, workspace_bytes, op);
  VB_CUDNN_CHECK(cudnnSetStream(impl_->handle.get(), stream));
  const std::int64_t es = dtype_size(key.dtype);
  const std::int64_t k_col = sdpa_k_column(key.shape) * es, v_col = sdpa_v_column(key.shape) * es;
  for (const auto& [chunk, g] : plans) {
    const ChunkOffsets o = chunk_offsets(key, chunk);
    char* in = at(qkv, o.qkv);
    char* out = at(dqkv, o.qkv);
    std::unordered_map<std::int64_t, void*> pack{
        {kQ, in},         {kK, in + k_col},   {kV, in + v_col},
        {kO, at(y, o.y)}, {kDO, at(dy, o.y)}, {kStats, at(lse, o.lse)},
        {kDQ, out},       {kDK, out + k_col}, {kDV, out + v_col},
    };
    if (key.dropout_p > 0.0f) {
      pack[kSeed] = &rng.seed;
      pack[kOffset] = &rng.offset;
    }
    impl_->execute(*g, key, pack, workspace);
  }
}

}  // namespace vrambench::cuda

// ---- the flash ops -----------------------------------------------------------------------------

namespace vrambench {
namespace {

// flash_fwd / flash_bwd through cuDNN's fused attention. Nothing else runs the op when cuDNN
// cannot: an unsupported dtype or shape, no plan, or a plan that needs more workspace than the op
// lists (a run may use only the memory its program lists) all throw, with cuDNN's or the
// frontend's message; an allocation failure inside them is CudaOutOfMemory, which the executor
// turns into DeviceOutOfMemory. The op's scratch tensor is cuDNN's workspace.
void cudnn_flash(const Operands& a, CudaContext& context, const QkvShape& s, DType dt) {
  const Op& op = a.op;
  const bool fwd = op.kind == OpKind::flash_fwd;
  const cuda::SdpaKey key{{s.batch, s.seq, s.heads, s.kv_heads, s.head_dim},
                          dt,
                          static_cast<float>(op.dropout_p),
                          fwd ? cuda::SdpaPass::forward : cuda::SdpaPass::backward};
  // The forward and the backward of one attention carry the same seed, so they drop alike.
  const cuda::SdpaRng rng{static_cast<std::int64_t>(op.seed), 0};
  if (fwd)
    context.cudnn_sdpa().forward(a.out[0].data, a.f32(a.out[1]), a.in[0].data, key, rng,
                                 a.workspace, a.workspace_bytes, op.name.str(), context.stream());
  else
    context.cudnn_sdpa().backward(a.out[0].data, a.in[0].data, a.in[1].data, a.in[2].data,
                                  a.f32(a.in[3]), key, rng, a.workspace, a.workspace_bytes,
                                  op.name.str(), context.stream());
}

// cuDNN's fused attention or the plain fused kernels (cuda/attention_flash.h), as the context
// says for the op's dtype: cuDNN or fail, no fallback.
void flash(const Operands& a, CudaContext& context) {
  const Op& op = a.op;
  const DType dt = a.dtype();
  const QkvShape s = attention_shape(a);
  if (op.softcap > 0.0f)
    a.fail(
        fmt::format("the fused attention kernels here do not soft-cap scores (Gemma 2's "
                    "attn_logit_softcapping {}): use --attention eager on cuda, or --no-execute",
                    op.softcap));
  if (context.flash_on_cudnn(dt)) {
    cudnn_flash(a, context, s, dt);
    return;
  }
  const cuda::FlashShape f{
      s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, static_cast<float>(op.dropout_p), op.seed};
  if (op.kind == OpKind::flash_fwd)
    cuda::launch_flash_fwd(dt, a.out[0].data, a.f32(a.out[1]), a.in[0].data, f, context.stream());
  else
    cuda::launch_flash_bwd(dt, a.out[0].data, a.workspace, a.workspace_bytes, a.in[0].data,
                           a.in[1].data, a.in[2].data, a.f32(a.in[3]), f, context.stream());
}

}  // namespace

void cuda_run_flash_fwd(const Operands& a, CudaContext& context) {
  flash(a, context);
}

void cuda_run_flash_bwd(const Operands& a, CudaContext& context) {
  flash(a, context);
}

}  // namespace vrambench
