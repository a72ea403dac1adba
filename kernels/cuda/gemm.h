// cuBLASLt GEMMs of the step: linear forward/backward and the strided-batched GEMMs of eager
// attention. Row-major tensors are handed to cuBLASLt (column-major) as their transposes, so each
// op becomes a plan of dims, leading dims, batch strides and pointer offsets; the plan is a pure
// function of the shape and is tested without a GPU, as is the creation of its descriptors.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <tuple>

#include "config/gpu_profiles.h"
#include "config/run_config.h"
#include "core/dtype.h"
#include "core/units.h"
#include "cuda/lru_cache.h"
#include "cuda/owners.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// cuBLASLt's workspace, the program's: the size PyTorch gives its cuBLAS handles
// (config/gpu_profiles.h).
using vrambench::gemm_workspace_bytes;

enum class GemmMath { fp32, tf32, fp16, bf16 };
GemmMath gemm_math(Precision p);
DType gemm_storage(GemmMath math);
// The math of a GEMM whose operands are of `dtype` (fp32 without TF32, PyTorch's default for
// matmuls): an op outside its recipe's dtype, as PEFT's fp32 adapters under a 16-bit recipe.
GemmMath gemm_math_of(DType dtype);
cublasComputeType_t compute_type(GemmMath math);
cudaDataType_t cuda_data_type(DType dtype);

// Column-major C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C, `batch` times with strides.
struct GemmPlan {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements
  float alpha = 1.0f, beta = 0.0f;
  // Rows and columns of A and B as stored (before op).
  std::int64_t a_rows() const { return trans_a ? k : m; }
  std::int64_t a_cols() const { return trans_a ? m : k; }
  std::int64_t b_rows() const { return trans_b ? n : k; }
  std::int64_t b_cols() const { return trans_b ? k : n; }
  auto key() const {
    return std::tuple(trans_a, trans_b, m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c,
                      alpha, beta);
  }
};

// Linear layer, x[M, In], w[Out, In], y[M, Out] (all row-major).
GemmPlan plan_linear_fwd(std::int64_t M, std::int64_t in, std::int64_t out);     // A=w, B=x, C=y
GemmPlan plan_linear_bwd_dx(std::int64_t M, std::int64_t in, std::int64_t out);  // A=w, B=dy, C=dx
GemmPlan plan_linear_bwd_dw(std::int64_t M, std::int64_t in, std::int64_t out,
                            bool accumulate);  // A=x, B=dy, C=dw

// Eager attention over packed qkv[B, S, (A + 2K) * D]. One GEMM per query head a, batched over B;
// head a reads kv head a / (A / K). Offsets are in elements from each tensor's start.
struct AttentionShape {
  std::int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  std::int64_t qkv_width() const { return vrambench::qkv_width(heads, kv_heads, head_dim); }
  std::int64_t group() const { return heads / kv_heads; }
  std::int64_t kv_of(std::int64_t a) const { return a / group(); }
  std::int64_t q_offset(std::int64_t a) const { return a * head_dim; }
  std::int64_t k_offset(std::int64_t a) const { return (heads + kv_of(a)) * head_dim; }
  std::int64_t v_offset(std::int64_t a) const { return (heads + kv_heads + kv_of(a)) * head_dim; }
  std::int64_t scores_offset(std::int64_t a) const { return a * seq * seq; }  // [B,A,S,S]
  std::int64_t y_offset(std::int64_t a) const { return a * head_dim; }        // [B,S,A*D]
  float scale() const;
  // The first head of each kv group overwrites dk/dv, the others add into them.
  bool first_of_group(std::int64_t a) const { return a % group() == 0; }
};
GemmPlan plan_attn_scores(const AttentionShape& s);                     // A=k, B=q, C=scores
GemmPlan plan_attn_values(const AttentionShape& s);                     // A=v, B=probs, C=y
GemmPlan plan_attn_values_bwd_dprobs(const AttentionShape& s);          // A=v, B=dy, C=dprobs
GemmPlan plan_attn_values_bwd_dv(const AttentionShape& s, bool first);  // A=dy, B=probs, C=dv
GemmPlan plan_attn_scores_bwd_dq(const AttentionShape& s);              // A=k, B=dscores, C=dq
GemmPlan plan_attn_scores_bwd_dk(const AttentionShape& s, bool first);  // A=q, B=dscores, C=dk

// Descriptors for a plan; created without a device.
struct GemmDescriptors {
  MatmulDesc op;
  MatrixLayout a, b, c;
};
GemmDescriptors make_gemm_descriptors(const GemmPlan& plan, GemmMath math, bool with_bias);

// Largest power of two (at most 256) dividing the address: what cuBLASLt may assume of a pointer.
// Per-head attention operands start D elements apart, so they are often less than 16-byte aligned,
// and the heuristic must be told, or it picks kernels that refuse (or fault on) such pointers.
std::uint32_t pointer_alignment(const void* p);
// What cuBLASLt may assume of an operand (bytes; a power of two, at most 256): an algorithm reads
// column j of a layout at p + j * ld elements, and batch b at p + b * stride, so the alignment is
// the least of the pointer's, ld's and (batched) the stride's in bytes. cuBLASLt states what each
// algorithm needs "for buffer pointer, leading dimension, and possibly other strides"
// (CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_*_BYTES) and its heuristic leaves out the ones that need more
// than the preference says, so the preference must count the leading dimension too: the lm head's
// y and dy have ld = V = 50257, odd, so their columns are only 2-byte aligned in 16-bit (4 in
// fp32) even when the pointer is 256-byte aligned, and an algorithm that assumed 16 bytes could
// fault or refuse.
std::uint32_t operand_alignment(const void* p, std::int64_t ld, std::int64_t batch,
                                std::int64_t stride, std::int64_t element_bytes);

// What the heuristic is asked for a GEMM, created without a device: at most `workspace_bytes` of
// workspace, the operands' alignments (A, B, C and D as C), and the reduction of a split K's
// partial sums in fp32 (in the workspace) or none: the default mask also lets cuBLASLt reduce
// them in place or in the output type, which rounds each partial to 16 bits (on an H200 the
// 2048 x 768 x 50257 lm head's dx came out 0.1 off in bf16 and its y 0.004 off in fp16, 400 times
// an fp32 accumulation's error). 16-bit inputs accumulate in fp32 all the way, as the cpu
// reference does; the memory is the same, the workspace being the program's.
MatmulPreference make_gemm_preference(Bytes workspace_bytes, std::uint32_t align_a,
                                      std::uint32_t align_b, std::uint32_t align_c);

// Runs plans on one cuBLASLt handle, caching descriptors and the chosen algorithm per plan.
class GemmRunner {
 public:
  GemmRunner();
  // C = plan(A, B) [+ bias broadcast over columns of C, i.e. per output feature].
  void run(const GemmPlan& plan, GemmMath math, const void* a, const void* b, void* c,
           const void* bias, void* workspace, Bytes workspace_bytes, cudaStream_t stream);

 private:
  struct Entry {
    GemmDescriptors desc;
    cublasLtMatmulAlgo_t algo{};
    Bytes workspace_needed = 0;
  };
  CublasLtHandle handle_;
  using Alignments = std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t>;
  using Key = std::tuple<decltype(GemmPlan{}.key()), int, bool, Bytes, Alignments>;
  LruCache<Key, Entry, TupleHash> cache_{kGemmPlanCacheEntries};

 public:
  // Plans kept: every GEMM of a few trials' steps, whatever the number of batch sizes searched.
  static constexpr std::size_t kGemmPlanCacheEntries = 512;
  std::size_t cached_plans() const { return cache_.size(); }
};

// db[o] = sum over rows of dy[rows, cols] (column o); added to db when accumulate. A two-stage
// column sum (cuda/reduce.h) with its fp32 partials in `workspace`, the op's GEMM workspace.
void launch_bias_grad(DType dtype, void* db, const void* dy, std::int64_t rows, std::int64_t cols,
                      bool accumulate, void* workspace, Bytes workspace_bytes, cudaStream_t stream);

}  // namespace vrambench::cuda
