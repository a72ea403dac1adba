// Softmax kernels (a block per row) and the causal mask.
#include <string>

#include "cuda/attention.h"
#include "cuda/cast.h"
#include "cuda/check.h"
#include "cuda/gemm.h"
#include "cuda/op_table.h"

namespace vrambench::cuda {
namespace {

template <typename T, typename S>
__global__ void __launch_bounds__(kRowThreads)
    softmax_fwd_kernel(T* probs, const S* scores, std::int64_t rows, std::int64_t cols) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, rows) {
    const float mx = block_max(softmax_max_part(row, lane, lanes, scores, cols), scratch);
    const float sum = block_sum(softmax_sum_part(row, lane, lanes, scores, cols, mx), scratch);
    softmax_fwd_write(row, lane, lanes, probs, scores, cols, mx, sum);
  }
}

template <typename T, typename D>
__global__ void __launch_bounds__(kRowThreads)
    softmax_bwd_kernel(D* dscores, const T* dprobs, const T* probs, std::int64_t rows,
                       std::int64_t cols) {
  __shared__ float scratch[32];
  const std::int64_t lane = threadIdx.x, lanes = blockDim.x;
  VB_BLOCK_ROWS(row, rows) {
    const float dot = block_sum(softmax_dot_part(row, lane, lanes, dprobs, probs, cols), scratch);
    softmax_bwd_write(row, lane, lanes, dscores, dprobs, probs, cols, dot);
  }
}

template <typename T>
__global__ void causal_mask_kernel(T* scores, std::int64_t n, std::int64_t seq) {
  VB_GRID_STRIDE(i, n) causal_mask_body(i, scores, seq);
}

}  // namespace

void launch_softmax_fwd(DType dtype, void* probs, DType scores_dtype, const void* scores,
                        std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  dispatch_float_pair(dtype, scores_dtype, [&](auto tag, auto scores_tag) {
    using T = decltype(tag);
    using S = decltype(scores_tag);
    softmax_fwd_kernel<T, S><<<row_grid(rows), kRowThreads, 0, stream>>>(
        static_cast<T*>(probs), static_cast<const S*>(scores), rows, cols);
  });
  VB_CHECK_LAUNCH("softmax_fwd_kernel");
}

void launch_softmax_bwd(DType dtype, DType dscores_dtype, void* dscores, const void* dprobs,
                        const void* probs, std::int64_t rows, std::int64_t cols,
                        cudaStream_t stream) {
  dispatch_float_pair(dtype, dscores_dtype, [&](auto tag, auto d_tag) {
    using T = decltype(tag);
    using D = decltype(d_tag);
    softmax_bwd_kernel<T, D><<<row_grid(rows), kRowThreads, 0, stream>>>(
        static_cast<D*>(dscores), static_cast<const T*>(dprobs), static_cast<const T*>(probs), rows,
        cols);
  });
  VB_CHECK_LAUNCH("softmax_bwd_kernel");
}

void launch_causal_mask(DType dtype, void* scores, std::int64_t blocks, std::int64_t seq,
                        cudaStream_t stream) {
  const std::int64_t n = blocks * seq * seq;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    causal_mask_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(static_cast<T*>(scores), n, seq);
  });
  VB_CHECK_LAUNCH("causal_mask_kernel");
}

}  // namespace vrambench::cuda

namespace vrambench {
// A GEMM per query head, then the causal mask. Scores of another dtype (autocast's fp32 mask
// promotes them): the GEMMs write the product held with the op, in its dtype, which is cast into
// them.
void cuda_run_attn_scores(const Operands& a, CudaContext& context) {
  const DType dt = a.dtype();
  const auto s = attention_shape_as<cuda::AttentionShape>(a);
  const cuda::GemmPlan plan = cuda::plan_attn_scores(s);
  const Operand& scores = a.out[0];
  const DType scores_dt = scores.tensor->dtype;
  const Operand* product = scores_dt == dt ? &scores : a.held_like(dt, scores.tensor->shape);
  if (product == nullptr)
    a.fail("'" + scores.tensor->name + "' is " + std::string(dtype_name(scores_dt)) + " beside a " +
           std::string(dtype_name(dt)) + " product, and the op holds no " +
           std::string(dtype_name(dt)) + " tensor of its shape for the product");
  for (std::int64_t h = 0; h < s.heads; ++h)
    context.gemm(a, plan, cuda::element_offset(a.in[0].data, s.k_offset(h), dt),
                 cuda::element_offset(a.in[0].data, s.q_offset(h), dt),
                 cuda::element_offset(product->data, s.scores_offset(h), dt));
  if (product != &scores)
    cuda::launch_cast(scores_dt, scores.data, dt, product->data, scores.tensor->elements(),
                      context.stream());
  cuda::launch_causal_mask(scores_dt, scores.data, s.batch * s.heads, s.seq, context.stream());
}

// The scores may be 16-bit beside fp32 probabilities (Llama's softmax in fp32).
void cuda_run_softmax_fwd(const Operands& a, CudaContext& context) {
  cuda::launch_softmax_fwd(a.dtype(), a.out[0].data, a.in[0].tensor->dtype, a.in[0].data,
                           rows(a.in[0]), last_dim(a.in[0]), context.stream());
}

void cuda_run_softmax_bwd(const Operands& a, CudaContext& context) {
  cuda::launch_softmax_bwd(a.dtype(), a.out[0].tensor->dtype, a.out[0].data, a.in[0].data,
                           a.in[1].data, rows(a.in[1]), last_dim(a.in[1]), context.stream());
}

void cuda_run_attn_values(const Operands& a, CudaContext& context) {
  const DType dt = a.dtype();
  const auto s = attention_shape_as<cuda::AttentionShape>(a);
  const cuda::GemmPlan plan = cuda::plan_attn_values(s);
  for (std::int64_t h = 0; h < s.heads; ++h)
    context.gemm(a, plan, cuda::element_offset(a.in[1].data, s.v_offset(h), dt),
                 cuda::element_offset(a.in[0].data, s.scores_offset(h), dt),
                 cuda::element_offset(a.out[0].data, s.y_offset(h), dt));
}

void cuda_run_attn_values_bwd(const Operands& a, CudaContext& context) {
  const DType dt = a.dtype();
  const auto s = attention_shape_as<cuda::AttentionShape>(a);
  const auto es = static_cast<std::size_t>(dtype_size(dt));
  // The q and k columns of dqkv are written by attn_scores_bwd; zero them here as the contract
  // says, so that dqkv holds no stale values in between.
  VB_CUDA_CHECK(
      cudaMemset2DAsync(a.out[1].data, static_cast<std::size_t>(s.qkv_width()) * es, 0,
                        static_cast<std::size_t>((s.heads + s.kv_heads) * s.head_dim) * es,
                        static_cast<std::size_t>(s.batch * s.seq), context.stream()));
  const cuda::GemmPlan dprobs = cuda::plan_attn_values_bwd_dprobs(s);
  for (std::int64_t h = 0; h < s.heads; ++h) {
    context.gemm(a, dprobs, cuda::element_offset(a.in[2].data, s.v_offset(h), dt),
                 cuda::element_offset(a.in[0].data, s.y_offset(h), dt),
                 cuda::element_offset(a.out[0].data, s.scores_offset(h), dt));
    context.gemm(a, cuda::plan_attn_values_bwd_dv(s, s.first_of_group(h)),
                 cuda::element_offset(a.in[0].data, s.y_offset(h), dt),
                 cuda::element_offset(a.in[1].data, s.scores_offset(h), dt),
                 cuda::element_offset(a.out[1].data, s.v_offset(h), dt));
  }
}

void cuda_run_attn_scores_bwd(const Operands& a, CudaContext& context) {
  const DType dt = a.dtype();
  const auto s = attention_shape_as<cuda::AttentionShape>(a);
  if (a.out[0].data != a.in[2].data)  // keep the v part attn_values_bwd wrote
    VB_CUDA_CHECK(cudaMemcpyAsync(a.out[0].data, a.in[2].data,
                                  static_cast<std::size_t>(a.out[0].tensor->bytes),
                                  cudaMemcpyDeviceToDevice, context.stream()));
  const cuda::GemmPlan dq = cuda::plan_attn_scores_bwd_dq(s);
  for (std::int64_t h = 0; h < s.heads; ++h) {
    context.gemm(a, dq, cuda::element_offset(a.in[1].data, s.k_offset(h), dt),
                 cuda::element_offset(a.in[0].data, s.scores_offset(h), dt),
                 cuda::element_offset(a.out[0].data, s.q_offset(h), dt));
    context.gemm(a, cuda::plan_attn_scores_bwd_dk(s, s.first_of_group(h)),
                 cuda::element_offset(a.in[1].data, s.q_offset(h), dt),
                 cuda::element_offset(a.in[0].data, s.scores_offset(h), dt),
                 cuda::element_offset(a.out[0].data, s.k_offset(h), dt));
  }
}

}  // namespace vrambench
