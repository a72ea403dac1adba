// The moe family's kernels and launchers (moe.h, cuda/op_table.h).
#include <stdexcept>
#include <string>

#include "common/moe_math.h"
#include "cuda/cast.h"
#include "cuda/check.h"
#include "cuda/moe.h"
#include "cuda/op_table.h"

namespace vrambench::cuda {
namespace {

// Row m of a tensor of any floating dtype, read (operator[]) or written (set) as floats.
struct RowIn {
  AnyFloats all;
  std::int64_t base = 0;
  __host__ __device__ float operator[](std::int64_t i) const { return all[base + i]; }
};
struct RowOut {
  AnyFloatsOut all;
  std::int64_t base = 0;
  __host__ __device__ void set(std::int64_t i, float v) const { all.store(base + i, v); }
};

__global__ void router_kernel(AnyFloats logits, float* probs, AnyFloatsOut scores,
                              std::int64_t* index, std::int64_t M, std::int64_t E, std::int64_t K,
                              bool skewed, bool norm) {
  VB_GRID_STRIDE(m, M) {
    float picked[kmath::kMaxTopK];
    kmath::router_row(RowIn{logits, m * E}, E, K, m, skewed, norm, probs + m * E, picked,
                      index + m * K);
    for (std::int64_t k = 0; k < K; ++k) scores.store(m * K + k, picked[k]);
  }
}

__global__ void router_bwd_kernel(AnyFloats dscores, const float* probs, const std::int64_t* index,
                                  AnyFloatsOut dlogits, std::int64_t M, std::int64_t E,
                                  std::int64_t K, bool norm) {
  VB_GRID_STRIDE(m, M) {
    float scratch[kmath::kMaxTopK];
    kmath::router_row_grad(RowIn{dscores, m * K}, probs + m * E, index + m * K, E, K, norm, scratch,
                           RowOut{dlogits, m * E});
  }
}

// Pairs per expert, one thread per expert.
__global__ void count_kernel(const std::int64_t* index, std::int64_t pairs, std::int64_t E,
                             std::int32_t* offsets) {
  VB_GRID_STRIDE(e, E) {
    std::int32_t n = 0;
    for (std::int64_t p = 0; p < pairs; ++p) n += index[p] == e ? 1 : 0;
    offsets[e] = n;
  }
}

// The running sum of the counts (one thread: E is at most a few hundred), then each expert's
// pairs in order into its rows.
__global__ void offsets_kernel(std::int32_t* offsets, std::int64_t E) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (std::int64_t e = 1; e < E; ++e) offsets[e] += offsets[e - 1];
}
__global__ void order_kernel(const std::int64_t* index, std::int64_t pairs, std::int64_t E,
                             const std::int32_t* offsets, std::int64_t* order) {
  VB_GRID_STRIDE(e, E) {
    std::int64_t at = e == 0 ? 0 : offsets[e - 1];
    for (std::int64_t p = 0; p < pairs; ++p)
      if (index[p] == e) order[at++] = p;
  }
}

__global__ void gather_rows_kernel(AnyFloats x, const std::int64_t* order, AnyFloatsOut xs,
                                   std::int64_t pairs, std::int64_t K, std::int64_t H) {
  VB_GRID_STRIDE(i, pairs * H) {
    const std::int64_t s = i / H, h = i % H;
    xs.store(i, x[(order[s] / K) * H + h]);
  }
}

// dx[m, h] and y[m, h]: each token's K pairs are at the rows whose order names them; the inverse
// is made once per call (inverse[m K + k] = s).
__global__ void inverse_kernel(const std::int64_t* order, std::int64_t pairs,
                               std::int64_t* inverse) {
  VB_GRID_STRIDE(s, pairs) inverse[order[s]] = s;
}

__global__ void scatter_rows_kernel(AnyFloats dxs, const std::int64_t* inverse, AnyFloatsOut dx,
                                    std::int64_t M, std::int64_t K, std::int64_t H) {
  VB_GRID_STRIDE(i, M * H) {
    const std::int64_t m = i / H, h = i % H;
    float sum = 0.0f;
    for (std::int64_t k = 0; k < K; ++k) sum += dxs[inverse[m * K + k] * H + h];
    dx.store(i, sum);
  }
}

__global__ void combine_kernel(AnyFloats ys, AnyFloats scores, const std::int64_t* inverse,
                               AnyFloatsOut y, std::int64_t M, std::int64_t K, std::int64_t H) {
  VB_GRID_STRIDE(i, M * H) {
    const std::int64_t m = i / H, h = i % H;
    float sum = 0.0f;
    for (std::int64_t k = 0; k < K; ++k) sum += scores[m * K + k] * ys[inverse[m * K + k] * H + h];
    y.store(i, sum);
  }
}

__global__ void combine_bwd_kernel(AnyFloats dy, AnyFloats ys, AnyFloats scores,
                                   const std::int64_t* order, AnyFloatsOut dys,
                                   AnyFloatsOut dscores, std::int64_t pairs, std::int64_t K,
                                   std::int64_t H) {
  VB_GRID_STRIDE(s, pairs) {
    const std::int64_t p = order[s], m = p / K;
    const float score = scores[p];
    float dot = 0.0f;
    for (std::int64_t h = 0; h < H; ++h) {
      const float g = dy[m * H + h];
      dys.store(s * H + h, score * g);
      dot += g * ys[s * H + h];
    }
    dscores.store(p, dot);
  }
}

// The inverse permutation (inverse[m K + k] = s) into `scratch`, `pairs` i64.
std::int64_t* invert(const std::int64_t* order, std::int64_t pairs, std::int64_t* scratch,
                     cudaStream_t stream) {
  inverse_kernel<<<grid_for(pairs, 256), 256, 0, stream>>>(order, pairs, scratch);
  VB_CHECK_LAUNCH("inverse_kernel");
  return scratch;
}

void require_top_k(std::int64_t K) {
  if (K < 1 || K > kmath::kMaxTopK)
    throw std::invalid_argument("router: top-k " + std::to_string(K) + " is not in [1, " +
                                std::to_string(kmath::kMaxTopK) + "]");
}

// The load-balancing loss's softmax rows, and its statistics per expert (one thread each) and
// the layer count (the thread past the last expert).
__global__ void aux_softmax_kernel(AnyFloats logits, AnyFloatsOut probs, std::int64_t M,
                                   std::int64_t E) {
  VB_GRID_STRIDE(m, M) kmath::softmax_row_store(RowIn{logits, m * E}, E, RowOut{probs, m * E});
}
__global__ void aux_stats_kernel(const std::int64_t* index, AnyFloats probs, const float* stats_in,
                                 float* stats, std::int64_t M, std::int64_t K, std::int64_t E) {
  VB_GRID_STRIDE(e, E + 1) {
    const std::int64_t W = E + 1;
    float c = stats_in ? stats_in[e] : 0.0f, p = stats_in ? stats_in[W + e] : 0.0f;
    if (e == E) {
      c += 1.0f;
    } else {
      for (std::int64_t i = 0; i < M * K; ++i) c += index[i] == e ? 1.0f / M : 0.0f;
      for (std::int64_t m = 0; m < M; ++m) p += probs[m * E + e] / M;
    }
    stats[e] = c;
    stats[W + e] = p;
  }
}
__global__ void aux_loss_kernel(const float* loss, const float* stats, float* total, std::int64_t E,
                                float coef) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  total[0] = loss[0] + kmath::aux_loss(stats, stats + E + 1, E, stats[E], coef);
}
__global__ void aux_bwd_kernel(AnyFloats probs, const float* stats, AnyFloatsOut dlogits,
                               std::int64_t M, std::int64_t E, float coef, float scale) {
  const kmath::AuxGrads g{stats, E, M, coef, scale};
  VB_GRID_STRIDE(m, M) kmath::softmax_row_grad(RowIn{probs, m * E}, g, E, RowOut{dlogits, m * E});
}

}  // namespace

std::vector<ExpertRows> expert_rows(const std::vector<std::int32_t>& offsets, std::int64_t pairs) {
  std::vector<ExpertRows> out;
  std::int64_t first = 0;
  for (std::size_t e = 0; e < offsets.size(); ++e) {
    const std::int64_t end = offsets[e];
    if (end < first) throw std::invalid_argument("moe: the offsets decrease");
    if (end > first) out.push_back({static_cast<std::int64_t>(e), first, end - first});
    first = end;
  }
  if (first != pairs) throw std::invalid_argument("moe: the offsets do not end at the pairs");
  return out;
}

ExpertGemm expert_fwd_gemm(const ExpertRows& e, std::int64_t in, std::int64_t out) {
  return {plan_linear_fwd(e.rows, in, out), e.expert * out * in, e.first * in, e.first * out};
}
ExpertGemm expert_dx_gemm(const ExpertRows& e, std::int64_t in, std::int64_t out) {
  return {plan_linear_bwd_dx(e.rows, in, out), e.expert * out * in, e.first * in, e.first * out};
}
ExpertGemm expert_dw_gemm(const ExpertRows& e, std::int64_t in, std::int64_t out) {
  return {plan_linear_bwd_dw(e.rows, in, out, false), e.expert * out * in, e.first * in,
          e.first * out};
}

void launch_router_topk(DType logits_dtype, const void* logits, float* probs, DType scores_dtype,
                        void* scores, std::int64_t* index, std::int64_t M, std::int64_t E,
                        std::int64_t K, bool skewed, bool norm, cudaStream_t stream) {
  require_top_k(K);
  router_kernel<<<grid_for(M, 128), 128, 0, stream>>>(AnyFloats{logits, logits_dtype}, probs,
                                                      AnyFloatsOut{scores, scores_dtype}, index, M,
                                                      E, K, skewed, norm);
  VB_CHECK_LAUNCH("router_kernel");
}

void launch_router_topk_bwd(DType dscores_dtype, const void* dscores, const float* probs,
                            const std::int64_t* index, DType dlogits_dtype, void* dlogits,
                            std::int64_t M, std::int64_t E, std::int64_t K, bool norm,
                            cudaStream_t stream) {
  require_top_k(K);
  router_bwd_kernel<<<grid_for(M, 128), 128, 0, stream>>>(
      AnyFloats{dscores, dscores_dtype}, probs, index, AnyFloatsOut{dlogits, dlogits_dtype}, M, E,
      K, norm);
  VB_CHECK_LAUNCH("router_bwd_kernel");
}

void launch_moe_dispatch(DType x_dtype, const void* x, const std::int64_t* index, DType xs_dtype,
                         void* xs, std::int64_t* order, std::int32_t* offsets, std::int64_t M,
                         std::int64_t K, std::int64_t E, std::int64_t H, cudaStream_t stream) {
  const std::int64_t pairs = M * K;
  count_kernel<<<grid_for(E, 64), 64, 0, stream>>>(index, pairs, E, offsets);
  VB_CHECK_LAUNCH("count_kernel");
  offsets_kernel<<<1, 1, 0, stream>>>(offsets, E);
  VB_CHECK_LAUNCH("offsets_kernel");
  order_kernel<<<grid_for(E, 64), 64, 0, stream>>>(index, pairs, E, offsets, order);
  VB_CHECK_LAUNCH("order_kernel");
  gather_rows_kernel<<<grid_for(pairs * H, 256), 256, 0, stream>>>(
      AnyFloats{x, x_dtype}, order, AnyFloatsOut{xs, xs_dtype}, pairs, K, H);
  VB_CHECK_LAUNCH("gather_rows_kernel");
}

void launch_moe_dispatch_bwd(DType dxs_dtype, const void* dxs, const std::int64_t* order,
                             std::int64_t* scratch, DType dx_dtype, void* dx, std::int64_t M,
                             std::int64_t K, std::int64_t H, cudaStream_t stream) {
  const std::int64_t* inverse = invert(order, M * K, scratch, stream);
  scatter_rows_kernel<<<grid_for(M * H, 256), 256, 0, stream>>>(
      AnyFloats{dxs, dxs_dtype}, inverse, AnyFloatsOut{dx, dx_dtype}, M, K, H);
  VB_CHECK_LAUNCH("scatter_rows_kernel");
}

void launch_moe_combine(DType ys_dtype, const void* ys, DType scores_dtype, const void* scores,
                        const std::int64_t* order, std::int64_t* scratch, DType y_dtype, void* y,
                        std::int64_t M, std::int64_t K, std::int64_t H, cudaStream_t stream) {
  const std::int64_t* inverse = invert(order, M * K, scratch, stream);
  combine_kernel<<<grid_for(M * H, 256), 256, 0, stream>>>(AnyFloats{ys, ys_dtype},
                                                           AnyFloats{scores, scores_dtype}, inverse,
                                                           AnyFloatsOut{y, y_dtype}, M, K, H);
  VB_CHECK_LAUNCH("combine_kernel");
}

void launch_moe_combine_bwd(DType dy_dtype, const void* dy, DType ys_dtype, const void* ys,
                            DType scores_dtype, const void* scores, const std::int64_t* order,
                            DType dys_dtype, void* dys, DType dscores_dtype, void* dscores,
                            std::int64_t M, std::int64_t K, std::int64_t H, cudaStream_t stream) {
  combine_bwd_kernel<<<grid_for(M * K, 128), 128, 0, stream>>>(
      AnyFloats{dy, dy_dtype}, AnyFloats{ys, ys_dtype}, AnyFloats{scores, scores_dtype}, order,
      AnyFloatsOut{dys, dys_dtype}, AnyFloatsOut{dscores, dscores_dtype}, M * K, K, H);
  VB_CHECK_LAUNCH("combine_bwd_kernel");
}

void launch_router_aux_stats(DType logits_dtype, const void* logits, const std::int64_t* index,
                             const float* stats_in, DType probs_dtype, void* aux_probs,
                             float* stats, std::int64_t M, std::int64_t K, std::int64_t E,
                             cudaStream_t stream) {
  aux_softmax_kernel<<<grid_for(M, 128), 128, 0, stream>>>(
      AnyFloats{logits, logits_dtype}, AnyFloatsOut{aux_probs, probs_dtype}, M, E);
  VB_CHECK_LAUNCH("aux_softmax_kernel");
  aux_stats_kernel<<<grid_for(E + 1, 64), 64, 0, stream>>>(index, AnyFloats{aux_probs, probs_dtype},
                                                           stats_in, stats, M, K, E);
  VB_CHECK_LAUNCH("aux_stats_kernel");
}

void launch_router_aux_loss(const float* loss, const float* stats, float* total, std::int64_t E,
                            float coef, cudaStream_t stream) {
  aux_loss_kernel<<<1, 1, 0, stream>>>(loss, stats, total, E, coef);
  VB_CHECK_LAUNCH("aux_loss_kernel");
}

void launch_router_aux_bwd(DType probs_dtype, const void* aux_probs, const float* stats,
                           DType dlogits_dtype, void* dlogits, std::int64_t M, std::int64_t E,
                           float coef, float scale, cudaStream_t stream) {
  aux_bwd_kernel<<<grid_for(M, 128), 128, 0, stream>>>(AnyFloats{aux_probs, probs_dtype}, stats,
                                                       AnyFloatsOut{dlogits, dlogits_dtype}, M, E,
                                                       coef, scale);
  VB_CHECK_LAUNCH("aux_bwd_kernel");
}

}  // namespace vrambench::cuda

namespace vrambench {
namespace {

// The experts with rows, read from the dispatch's offsets on the device (a sync, as transformers'
// grouped_mm fallback makes with offs.tolist()).
std::vector<cuda::ExpertRows> rows_of(const Operands& a, const Operand& offsets, std::int64_t pairs,
                                      CudaContext& context) {
  std::vector<std::int32_t> host(static_cast<std::size_t>(offsets.tensor->elements()));
  VB_CUDA_CHECK(cudaMemcpyAsync(host.data(), offsets.data, host.size() * sizeof(std::int32_t),
                                cudaMemcpyDeviceToHost, context.stream()));
  VB_CUDA_CHECK(cudaStreamSynchronize(context.stream()));
  try {
    return cuda::expert_rows(host, pairs);
  } catch (const std::invalid_argument& e) {
    a.fail(e.what());
  }
}

// Where the kernel inverts the order: the op's held [M*K] i64 tensor, the index PyTorch makes there
// (the combine's inv_perm; the sorted positions of index_put's accumulate under the gather's
// backward).
const Operand& inverse_scratch(const Operands& a, const MoeDims& d) {
  const Operand* o = a.held_like(DType::i64, Shape{d.pairs()});
  if (o == nullptr) a.fail("holds no [M*K] i64 tensor to invert the order in");
  return *o;
}

const void* at(const Operand& o, std::int64_t elements) {
  return cuda::element_offset(static_cast<const void*>(o.data), elements, o.tensor->dtype);
}
void* at_out(const Operand& o, std::int64_t elements) {
  return cuda::element_offset(o.data, elements, o.tensor->dtype);
}

}  // namespace

void cuda_run_router_topk(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  cuda::launch_router_topk(a.in[0].tensor->dtype, a.in[0].data, a.f32(a.out[0]),
                           a.out[1].tensor->dtype, a.out[1].data, a.i64(a.out[2]), d.M, d.E, d.K,
                           a.op.routing == Routing::skewed, a.op.norm_topk, context.stream());
}

void cuda_run_router_topk_bwd(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  cuda::launch_router_topk_bwd(a.in[0].tensor->dtype, a.in[0].data, a.f32(a.in[1]), a.i64(a.in[2]),
                               a.out[0].tensor->dtype, a.out[0].data, d.M, d.E, d.K, a.op.norm_topk,
                               context.stream());
}

void cuda_run_moe_dispatch(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  cuda::launch_moe_dispatch(a.in[0].tensor->dtype, a.in[0].data, a.i64(a.in[1]),
                            a.out[0].tensor->dtype, a.out[0].data, a.i64(a.out[1]),
                            a.i32_out(a.out[2]), d.M, d.K, d.E, d.H, context.stream());
}

void cuda_run_moe_dispatch_bwd(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  cuda::launch_moe_dispatch_bwd(a.in[0].tensor->dtype, a.in[0].data, a.i64(a.in[1]),
                                a.i64(inverse_scratch(a, d)), a.out[0].tensor->dtype, a.out[0].data,
                                d.M, d.K, d.H, context.stream());
}

void cuda_run_grouped_linear_fwd(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  for (const cuda::ExpertRows& e : rows_of(a, a.in[2], d.M, context)) {
    const cuda::ExpertGemm g = cuda::expert_fwd_gemm(e, d.In, d.Out);
    context.gemm(a, g.plan, at(a.in[1], g.w_offset), at(a.in[0], g.x_offset),
                 at_out(a.out[0], g.y_offset));
  }
}

void cuda_run_grouped_linear_bwd(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  const bool weights = a.out.size() == 2;
  // Experts without rows get no gradient from this step: zeros, as grouped_mm's backward writes.
  if (weights)
    VB_CUDA_CHECK(cudaMemsetAsync(
        a.out[1].data, 0, static_cast<std::size_t>(a.out[1].tensor->bytes), context.stream()));
  for (const cuda::ExpertRows& e : rows_of(a, a.in[2], d.M, context)) {
    const cuda::ExpertGemm dx = cuda::expert_dx_gemm(e, d.In, d.Out);
    context.gemm(a, dx.plan, at(a.in[1], dx.w_offset), at(a.in[0], dx.y_offset),
                 at_out(a.out[0], dx.x_offset));
    if (!weights) continue;
    const cuda::ExpertGemm dw = cuda::expert_dw_gemm(e, d.In, d.Out);
    context.gemm(a, dw.plan, at(a.in[3], dw.x_offset), at(a.in[0], dw.y_offset),
                 at_out(a.out[1], dw.w_offset));
  }
}

void cuda_run_moe_combine(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  cuda::launch_moe_combine(a.in[0].tensor->dtype, a.in[0].data, a.in[1].tensor->dtype, a.in[1].data,
                           a.i64(a.in[2]), a.i64(inverse_scratch(a, d)), a.out[0].tensor->dtype,
                           a.out[0].data, d.M, d.K, d.H, context.stream());
}

void cuda_run_moe_combine_bwd(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  cuda::launch_moe_combine_bwd(a.in[0].tensor->dtype, a.in[0].data, a.in[1].tensor->dtype,
                               a.in[1].data, a.in[2].tensor->dtype, a.in[2].data, a.i64(a.in[3]),
                               a.out[0].tensor->dtype, a.out[0].data, a.out[1].tensor->dtype,
                               a.out[1].data, d.M, d.K, d.H, context.stream());
}

// w_eff[e] = w[e] + scale b_e a_e: w copied, then per expert one GEMM of b's columns e R.. (ld
// E R) by a's rows e R.., added (beta 1) with alpha = scale, in w's dtype: PEFT folds
// `baddbmm(W, lhs, rhs, alpha)` with lhs and rhs cast to W's dtype, the op's held copies where
// the adapters are of another.
void cuda_run_expert_lora_fwd(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  const DType dt = a.in[0].tensor->dtype;
  const Operand* A = &a.in[1];
  const Operand* B = &a.in[2];
  if (A->tensor->dtype != dt) {
    A = a.held_like(dt, A->tensor->shape);
    B = a.held_like(dt, B->tensor->shape);
    a.require(A != nullptr && B != nullptr,
              "adapters of another dtype than w, and no held copies in w's");
    cuda::launch_cast(dt, A->data, a.in[1].tensor->dtype, a.in[1].data, A->tensor->elements(),
                      context.stream());
    cuda::launch_cast(dt, B->data, a.in[2].tensor->dtype, a.in[2].data, B->tensor->elements(),
                      context.stream());
  }
  VB_CUDA_CHECK(cudaMemcpyAsync(a.out[0].data, a.in[0].data,
                                static_cast<std::size_t>(a.out[0].tensor->bytes),
                                cudaMemcpyDeviceToDevice, context.stream()));
  for (std::int64_t e = 0; e < d.E; ++e) {
    // dx[M,In] = dy[M,Out'] w[Out',In] with M = Out, Out' = R: b_e [Out,R] by a_e [R,In].
    cuda::GemmPlan plan = cuda::plan_linear_bwd_dx(d.Out, d.In, d.R);
    plan.ldb = d.E * d.R;
    plan.alpha = a.op.lora_scale;
    plan.beta = 1.0f;
    context.gemm(a, plan, at(*A, e * d.R * d.In), at(*B, e * d.R),
                 at_out(a.out[0], e * d.Out * d.In));
  }
}

// da_e = scale b_e^T g_e and db_e = scale g_e a_e^T (g = dw_eff), in g's dtype, then cast into
// the adapters' gradients where they are of another.
void cuda_run_expert_lora_bwd(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  const DType dt = a.in[0].tensor->dtype;
  const Operand* A = &a.in[1];
  const Operand* B = &a.in[2];
  const Operand* dA = &a.out[0];
  const Operand* dB = &a.out[1];
  const bool cast = A->tensor->dtype != dt;
  if (cast) {
    // Held in order: a, b, da, db in w's dtype.
    a.require(a.held.size() >= 4, "adapters of another dtype than dw_eff and no held copies");
    A = &a.held[0];
    B = &a.held[1];
    dA = &a.held[2];
    dB = &a.held[3];
    cuda::launch_cast(dt, A->data, a.in[1].tensor->dtype, a.in[1].data, A->tensor->elements(),
                      context.stream());
    cuda::launch_cast(dt, B->data, a.in[2].tensor->dtype, a.in[2].data, B->tensor->elements(),
                      context.stream());
  }
  for (std::int64_t e = 0; e < d.E; ++e) {
    // da_e [R,In] = b_e^T [R,Out] g_e [Out,In]: a weight gradient of M = Out rows.
    cuda::GemmPlan da = cuda::plan_linear_bwd_dw(d.Out, d.In, d.R, false);
    da.ldb = d.E * d.R;
    da.alpha = a.op.lora_scale;
    context.gemm(a, da, at(a.in[0], e * d.Out * d.In), at(*B, e * d.R),
                 at_out(*dA, e * d.R * d.In));
    // db_e [Out,R] = g_e [Out,In] a_e^T: a forward of M = Out rows into b's columns (ld E R).
    cuda::GemmPlan db = cuda::plan_linear_fwd(d.Out, d.In, d.R);
    db.ldc = d.E * d.R;
    db.alpha = a.op.lora_scale;
    context.gemm(a, db, at(*A, e * d.R * d.In), at(a.in[0], e * d.Out * d.In),
                 at_out(*dB, e * d.R));
  }
  if (!cast) return;
  cuda::launch_cast(a.out[0].tensor->dtype, a.out[0].data, dt, dA->data, dA->tensor->elements(),
                    context.stream());
  cuda::launch_cast(a.out[1].tensor->dtype, a.out[1].data, dt, dB->data, dB->tensor->elements(),
                    context.stream());
}

void cuda_run_router_aux_stats(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  const float* stats_in = a.in.size() == 3 ? a.f32(a.in[2]) : nullptr;
  cuda::launch_router_aux_stats(a.in[0].tensor->dtype, a.in[0].data, a.i64(a.in[1]), stats_in,
                                a.out[0].tensor->dtype, a.out[0].data, a.f32(a.out[1]), d.M, d.K,
                                d.E, context.stream());
}

void cuda_run_router_aux_loss(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  cuda::launch_router_aux_loss(a.f32(a.in[0]), a.f32(a.in[1]), a.f32(a.out[0]), d.E, a.op.aux_coef,
                               context.stream());
}

void cuda_run_router_aux_bwd(const Operands& a, CudaContext& context) {
  const MoeDims d = moe_dims(a);
  cuda::launch_router_aux_bwd(a.in[0].tensor->dtype, a.in[0].data, a.f32(a.in[1]),
                              a.out[0].tensor->dtype, a.out[0].data, d.M, d.E, a.op.aux_coef,
                              a.op.grad_scale, context.stream());
}

}  // namespace vrambench
