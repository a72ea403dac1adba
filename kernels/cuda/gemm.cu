// cuBLASLt plans, descriptors and execution (with the alignments the operands really have); the
// bias gradient.
#include <cmath>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/gemm.h"
#include "cuda/reduce.h"

namespace vrambench::cuda {

GemmMath gemm_math(Precision p) {
  switch (p) {
    case Precision::fp32:
      return GemmMath::fp32;
    case Precision::tf32:
      return GemmMath::tf32;
    case Precision::fp16:
    case Precision::amp_fp16:  // autocast runs its GEMMs on 16-bit casts of both operands
      return GemmMath::fp16;
    case Precision::bf16:
    case Precision::amp_bf16:
      return GemmMath::bf16;
  }
  return GemmMath::fp32;
}

DType gemm_storage(GemmMath math) {
  switch (math) {
    case GemmMath::fp32:
    case GemmMath::tf32:
      return DType::f32;
    case GemmMath::fp16:
      return DType::f16;
    case GemmMath::bf16:
      return DType::bf16;
  }
  return DType::f32;
}

GemmMath gemm_math_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return GemmMath::fp32;
    case DType::f16:
      return GemmMath::fp16;
    case DType::bf16:
      return GemmMath::bf16;
    default:
      break;
  }
  throw std::invalid_argument("no GEMM computes in " + std::string(dtype_name(dtype)));
}

cublasComputeType_t compute_type(GemmMath math) {
  // 16-bit inputs accumulate in fp32; tf32 rounds fp32 inputs to 10 mantissa bits in the MMA.
  return math == GemmMath::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::u8:
      return CUDA_R_8U;
    case DType::i32:
      return CUDA_R_32I;
    case DType::i64:
      return CUDA_R_64I;
  }
  return CUDA_R_32F;
}

// y^T[Out, M] = op_T(w^T stored In x Out) * x^T[In, M].
GemmPlan plan_linear_fwd(std::int64_t M, std::int64_t in, std::int64_t out) {
  GemmPlan p;
  p.trans_a = true;
  p.m = out, p.n = M, p.k = in;
  p.lda = in, p.ldb = in, p.ldc = out;
  return p;
}

// dx^T[In, M] = w^T[In, Out] * dy^T[Out, M].
GemmPlan plan_linear_bwd_dx(std::int64_t M, std::int64_t in, std::int64_t out) {
  GemmPlan p;
  p.m = in, p.n = M, p.k = out;
  p.lda = in, p.ldb = out, p.ldc = in;
  return p;
}

// dw^T[In, Out] = x^T[In, M] * op_T(dy^T[Out, M]).
GemmPlan plan_linear_bwd_dw(std::int64_t M, std::int64_t in, std::int64_t out, bool accumulate) {
  GemmPlan p;
  p.trans_b = true;
  p.m = in, p.n = out, p.k = M;
  p.lda = in, p.ldb = out, p.ldc = in;
  p.beta = accumulate ? 1.0f : 0.0f;
  return p;
}

float AttentionShape::scale() const {
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

namespace {
// Batched over B: qkv rows of one sample are S * Q apart, scores blocks A * S * S, y rows S * A *
// D.
GemmPlan batched(const AttentionShape& s, std::int64_t stride_a, std::int64_t stride_b,
                 std::int64_t stride_c) {
  GemmPlan p;
  p.batch = s.batch;
  p.stride_a = stride_a, p.stride_b = stride_b, p.stride_c = stride_c;
  return p;
}
}  // namespace

// scores_a (row-major [Sq, Sk]) as column-major [Sk, Sq] = op_T(k^T stored D x Sk) * q^T[D, Sq].
GemmPlan plan_attn_scores(const AttentionShape& s) {
  const std::int64_t Q = s.qkv_width(), S = s.seq, D = s.head_dim;
  GemmPlan p = batched(s, S * Q, S * Q, s.heads * S * S);
  p.trans_a = true;
  p.m = S, p.n = S, p.k = D;
  p.lda = Q, p.ldb = Q, p.ldc = S;
  p.alpha = s.scale();
  return p;
}

// y_a^T[D, Sq] = v^T[D, Sk] * probs_a^T (stored as column-major [Sk, Sq]).
GemmPlan plan_attn_values(const AttentionShape& s) {
  const std::int64_t Q = s.qkv_width(), S = s.seq, D = s.head_dim, AD = s.heads * D;
  GemmPlan p = batched(s, S * Q, s.heads * S * S, S * AD);
  p.m = D, p.n = S, p.k = S;
  p.lda = Q, p.ldb = S, p.ldc = AD;
  return p;
}

// dprobs_a^T[Sk, Sq] = op_T(v^T stored D x Sk) * dy_a^T[D, Sq].
GemmPlan plan_attn_values_bwd_dprobs(const AttentionShape& s) {
  const std::int64_t Q = s.qkv_width(), S = s.seq, D = s.head_dim, AD = s.heads * D;
  GemmPlan p = batched(s, S * Q, S * AD, s.heads * S * S);
  p.trans_a = true;
  p.m = S, p.n = S, p.k = D;
  p.lda = Q, p.ldb = AD, p.ldc = S;
  return p;
}

// dv^T[D, Sk] (+)= dy_a^T[D, Sq] * op_T(probs_a^T stored Sk x Sq).
GemmPlan plan_attn_values_bwd_dv(const AttentionShape& s, bool first) {
  const std::int64_t Q = s.qkv_width(), S = s.seq, D = s.head_dim, AD = s.heads * D;
  GemmPlan p = batched(s, S * AD, s.heads * S * S, S * Q);
  p.trans_b = true;
  p.m = D, p.n = S, p.k = S;
  p.lda = AD, p.ldb = S, p.ldc = Q;
  p.beta = first ? 0.0f : 1.0f;
  return p;
}

// dq_a^T[D, Sq] = scale * k^T[D, Sk] * dscores_a^T (stored Sk x Sq).
GemmPlan plan_attn_scores_bwd_dq(const AttentionShape& s) {
  const std::int64_t Q = s.qkv_width(), S = s.seq, D = s.head_dim;
  GemmPlan p = batched(s, S * Q, s.heads * S * S, S * Q);
  p.m = D, p.n = S, p.k = S;
  p.lda = Q, p.ldb = S, p.ldc = Q;
  p.alpha = s.scale();
  return p;
}

// dk^T[D, Sk] (+)= scale * q_a^T[D, Sq] * op_T(dscores_a^T stored Sk x Sq).
GemmPlan plan_attn_scores_bwd_dk(const AttentionShape& s, bool first) {
  const std::int64_t Q = s.qkv_width(), S = s.seq, D = s.head_dim;
  GemmPlan p = batched(s, S * Q, s.heads * S * S, S * Q);
  p.trans_b = true;
  p.m = D, p.n = S, p.k = S;
  p.lda = Q, p.ldb = S, p.ldc = Q;
  p.alpha = s.scale();
  p.beta = first ? 0.0f : 1.0f;
  return p;
}

namespace {

MatrixLayout make_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                         std::int64_t batch, std::int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  VB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<std::uint64_t>(rows),
                                             static_cast<std::uint64_t>(cols), ld));
  MatrixLayout owner(layout);
  if (batch > 1) {
    const auto count = static_cast<std::int32_t>(batch);
    VB_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                     &count, sizeof(count)));
    VB_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return owner;
}

}  // namespace

GemmDescriptors make_gemm_descriptors(const GemmPlan& plan, GemmMath math, bool with_bias) {
  const cudaDataType_t type = cuda_data_type(gemm_storage(math));
  GemmDescriptors d;
  cublasLtMatmulDesc_t op = nullptr;
  VB_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, compute_type(math), CUDA_R_32F));
  d.op = MatmulDesc(op);
  const cublasOperation_t ta = plan.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = plan.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  VB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  VB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (with_bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    VB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                   sizeof(epilogue)));
    VB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type,
                                                   sizeof(type)));
  }
  d.a = make_layout(type, plan.a_rows(), plan.a_cols(), plan.lda, plan.batch, plan.stride_a);
  d.b = make_layout(type, plan.b_rows(), plan.b_cols(), plan.ldb, plan.batch, plan.stride_b);
  d.c = make_layout(type, plan.m, plan.n, plan.ldc, plan.batch, plan.stride_c);
  return d;
}

std::uint32_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (address == 0) return 256;
  const std::uintptr_t lowest = address & (~address + 1);
  return static_cast<std::uint32_t>(lowest < 256 ? lowest : 256);
}

std::uint32_t operand_alignment(const void* p, std::int64_t ld, std::int64_t batch,
                                std::int64_t stride, std::int64_t element_bytes) {
  std::uint32_t align = pointer_alignment(p);
  auto limit_by = [&](std::int64_t elements) {
    const auto bytes = static_cast<std::uint64_t>(elements * element_bytes);
    if (bytes == 0) return;
    const std::uint64_t lowest = bytes & (~bytes + 1);
    if (lowest < align) align = static_cast<std::uint32_t>(lowest);
  };
  limit_by(ld);
  if (batch > 1) limit_by(stride);
  return align;
}

MatmulPreference make_gemm_preference(Bytes workspace_bytes, std::uint32_t align_a,
                                      std::uint32_t align_b, std::uint32_t align_c) {
  cublasLtMatmulPreference_t raw = nullptr;
  VB_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw));
  MatmulPreference pref(raw);
  const auto max_ws = static_cast<std::uint64_t>(workspace_bytes);
  VB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)));
  VB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  VB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  VB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  VB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));
  const std::uint32_t reduction =
      CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  VB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      raw, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof(reduction)));
  return pref;
}

GemmRunner::GemmRunner() : handle_(make_cublaslt_handle()) {}

void GemmRunner::run(const GemmPlan& plan, GemmMath math, const void* a, const void* b, void* c,
                     const void* bias, void* workspace, Bytes workspace_bytes,
                     cudaStream_t stream) {
  const std::int64_t es = dtype_size(gemm_storage(math));
  const Alignments align{operand_alignment(a, plan.lda, plan.batch, plan.stride_a, es),
                         operand_alignment(b, plan.ldb, plan.batch, plan.stride_b, es),
                         operand_alignment(c, plan.ldc, plan.batch, plan.stride_c, es),
                         pointer_alignment(bias)};
  const auto key =
      std::tuple(plan.key(), static_cast<int>(math), bias != nullptr, workspace_bytes, align);
  Entry* cached = cache_.find(key);
  if (cached == nullptr) {
    Entry entry{make_gemm_descriptors(plan, math, bias != nullptr), {}, 0};
    const MatmulPreference pref = make_gemm_preference(workspace_bytes, std::get<0>(align),
                                                       std::get<1>(align), std::get<2>(align));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    VB_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(
        handle_.get(), entry.desc.op.get(), entry.desc.a.get(), entry.desc.b.get(),
        entry.desc.c.get(), entry.desc.c.get(), pref.get(), 1, &result, &found));
    if (found == 0)
      throw std::runtime_error("cuBLASLt has no algorithm for a " + std::to_string(plan.m) + "x" +
                               std::to_string(plan.n) + "x" + std::to_string(plan.k) +
                               " GEMM (batch " + std::to_string(plan.batch) + ")");
    entry.algo = result.algo;
    entry.workspace_needed = static_cast<Bytes>(result.workspaceSize);
    cached = &cache_.insert(key, std::move(entry));
  }
  Entry& e = *cached;
  if (bias != nullptr)
    VB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        e.desc.op.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  VB_CUBLAS_CHECK(cublasLtMatmul(handle_.get(), e.desc.op.get(), &plan.alpha, a, e.desc.a.get(), b,
                                 e.desc.b.get(), &plan.beta, c, e.desc.c.get(), c, e.desc.c.get(),
                                 &e.algo, workspace, static_cast<std::size_t>(workspace_bytes),
                                 stream));
}

void launch_bias_grad(DType dtype, void* db, const void* dy, std::int64_t rows, std::int64_t cols,
                      bool accumulate, void* workspace, Bytes workspace_bytes,
                      cudaStream_t stream) {
  launch_column_sum(dtype, db, dy, rows, cols, accumulate, workspace, workspace_bytes, stream);
}

}  // namespace vrambench::cuda
