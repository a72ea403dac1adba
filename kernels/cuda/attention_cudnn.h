// Causal fused attention through cuDNN's own frontend (cudnn-frontend's graph API): its sdpa node
// (attn_scale, causal mask, log-sum-exp saved as stats, optional dropout) and its sdpa_backward
// node, over the packed layout of the step program: qkv[B,S,(A+2K)*D] (q of head a at column a*D,
// k of kv head k at (A+k)*D, v at (A+K+k)*D), y[B,S,A*D], lse[B,A,S] fp32, dqkv laid out as qkv.
// Graphs are validated, lowered, planned by heuristics (mode A, then FALLBACK) and cached by shape
// in one bounded cache; a run uses only the workspace its op lists, and batches above what cuDNN's
// kernels take run in chunks. No frontend header is included here: attention_cudnn.cpp alone
// compiles them.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/units.h"
#include "cuda/lru_cache.h"
#include "program/program.h"

namespace vrambench::cuda {

// One fused attention over the packed tensors.
struct SdpaShape {
  std::int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  std::int64_t width() const { return qkv_width(heads, kv_heads, head_dim); }  // qkv columns
  float scale() const;                                                         // 1 / sqrt(D)
  bool operator==(const SdpaShape&) const = default;
};

enum class SdpaPass { forward, backward };

// Everything a built graph depends on, so the key of the plan cache. The dropout probability is a
// constant of the graph (0: a graph without dropout); the seed is not (it is passed by value).
struct SdpaKey {
  SdpaShape shape;
  DType dtype = DType::bf16;
  float dropout_p = 0.0f;
  SdpaPass pass = SdpaPass::forward;
  bool operator==(const SdpaKey&) const = default;
};
struct SdpaKeyHash {
  std::size_t operator()(const SdpaKey& k) const;
};
// "sdpa_backward B=2 S=100 A=8 K=2 D=64 bf16 dropout 0.1", for messages.
std::string describe(const SdpaKey& k);

// ---- layouts (pure) ----------------------------------------------------------------------------

// Dims and strides (elements) of a [b, h, s, d] view, as the frontend's tensors take them.
struct SdpaLayout {
  std::vector<std::int64_t> dims, strides;
};
SdpaLayout sdpa_q_layout(const SdpaShape& s);      // [B, A, S, D] in the rows of qkv (and dqkv)
SdpaLayout sdpa_kv_layout(const SdpaShape& s);     // [B, K, S, D] in the rows of qkv; k or v by
                                                   // the pointer (sdpa_k_column / sdpa_v_column)
SdpaLayout sdpa_o_layout(const SdpaShape& s);      // [B, A, S, D] in the rows of y (and dy)
SdpaLayout sdpa_stats_layout(const SdpaShape& s);  // [B, A, S, 1] of lse, fp32
std::int64_t sdpa_k_column(const SdpaShape& s);    // A * D
std::int64_t sdpa_v_column(const SdpaShape& s);    // (A + K) * D

// ---- batch chunks (pure) -----------------------------------------------------------------------

// cuDNN's fused attention kernels put the batch on a CUDA grid dimension (y or z) that holds at
// most 65535 blocks, and the frontend does not check it: on an H100 with cuDNN 9.14 the backward
// at B = 65536 fails to launch (CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER) where B = 65535 runs,
// and PyTorch keeps batches above 65535 away from cuDNN for the same reason. Larger batches run
// as chunks of at most this.
inline constexpr std::int64_t kSdpaMaxBatch = 65535;
struct SdpaChunk {
  std::int64_t first = 0, batch = 0;
  bool operator==(const SdpaChunk&) const = default;
};
// Contiguous chunks covering [0, batch), each at most max_batch, as even as can be (so at most
// two distinct chunk sizes: at most two cached graphs per op). Throws std::invalid_argument for
// batch < 1 or max_batch < 1.
std::vector<SdpaChunk> sdpa_batch_chunks(std::int64_t batch,
                                         std::int64_t max_batch = kSdpaMaxBatch);

// ---- workspace (pure) --------------------------------------------------------------------------

// What the frontend itself keeps at the front of the workspace, ahead of the engine's own part:
// for the backward, the fp32 dQ accumulator [B,A,S,D] followed by the fp32 softmax sums
// (dO . O per query row) [B,A,S], packed without padding; nothing for the forward. Linear in the
// batch, so a chunk never needs more than the whole batch.
Bytes sdpa_frontend_workspace_bytes(const SdpaShape& s, SdpaPass pass);

// The scratch (role workspace) the step program lists for the op, which cuDNN may use as its
// workspace (graph.get_workspace_size() of every chunk's plan at most this): the program's
// flash_fwd_scratch_bytes / flash_bwd_scratch_bytes (src/program/program.h, where the formula and
// its measured parts are), which tests/gpu/test_flash_cudnn.cpp checks on every GPU it runs.
inline constexpr Bytes kSdpaEngineWorkspace = kFlashEngineScratch;
Bytes sdpa_program_scratch_bytes(const SdpaShape& s, DType dtype, SdpaPass pass);

// The op lists less workspace than cuDNN's plan needs; the run is refused, never moved elsewhere.
class CudnnWorkspaceTooSmall : public std::runtime_error {
 public:
  CudnnWorkspaceTooSmall(const std::string& what, Bytes needed, Bytes listed)
      : std::runtime_error(what), needed_(needed), listed_(listed) {}
  Bytes needed() const { return needed_; }
  Bytes listed() const { return listed_; }

 private:
  Bytes needed_, listed_;
};

// ---- graphs without a device -------------------------------------------------------------------

// Builds the graph of `key` for a GPU of compute capability `sm_version` (90 for 9.0) and runs the
// frontend's validate(), which needs no device. Throws CudaError (Library::cudnn_frontend) with the
// frontend's message when it rejects the graph, std::invalid_argument for a dtype that is not a
// floating storage type.
void validate_sdpa_graph(const SdpaKey& key, int sm_version);

// ---- running on the GPU ------------------------------------------------------------------------

// Dropout's random numbers: cuDNN's Philox generator at (seed, offset), both passed by value. The
// forward and the backward of one attention pass the same pair, so they drop the same
// probabilities. (Not the CPU reference's generator: masks differ from the plain kernels'.)
struct SdpaRng {
  std::int64_t seed = 0, offset = 0;
};

// Runs sdpa / sdpa_backward on one cuDNN handle (one per executor), plans cached by SdpaKey in an
// LruCache. Every failure throws: CudaOutOfMemory when cuDNN, the frontend or CUDA could not
// allocate, CudnnWorkspaceTooSmall when the op lists less workspace than the plan needs, CudaError
// (Library::cudnn_frontend, the frontend's message) when cuDNN cannot take the graph (dtype, head
// size, no engine), std::invalid_argument for shapes outside what is described above.
class CudnnSdpa {
 public:
  static constexpr std::size_t kDefaultCacheCapacity = 64;

  // Creates the cuDNN handle: needs a device. max_batch is the largest chunk a graph is built for
  // (tests lower it to run the chunked path on small batches).
  explicit CudnnSdpa(std::size_t cache_capacity = kDefaultCacheCapacity,
                     std::int64_t max_batch = kSdpaMaxBatch);
  ~CudnnSdpa();
  CudnnSdpa(CudnnSdpa&&) noexcept;
  CudnnSdpa& operator=(CudnnSdpa&&) noexcept;
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  cudnnHandle_t handle() const;
  // Builds (or finds) the plans of every batch chunk of `key`; the most workspace any needs
  // (graph.get_workspace_size(): the frontend's part and the engine's).
  Bytes workspace_bytes(const SdpaKey& key);

  // y[B,S,A*D] and lse[B,A,S] from qkv. `workspace` is the op's scratch tensor (may be null when
  // workspace_bytes is 0); `op` names the op in errors.
  void forward(void* y, float* lse, const void* qkv, const SdpaKey& key, SdpaRng rng,
               void* workspace, Bytes workspace_bytes, const std::string& op, cudaStream_t stream);
  // dqkv (all of it) from dy, qkv, y and lse of the forward.
  void backward(void* dqkv, const void* dy, const void* qkv, const void* y, const float* lse,
                const SdpaKey& key, SdpaRng rng, void* workspace, Bytes workspace_bytes,
                const std::string& op, cudaStream_t stream);

  std::size_t cached_graphs() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vrambench::cuda
