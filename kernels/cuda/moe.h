// A mixture of experts on cuda (docs/moe.md): the router's softmax and top-k, the dispatch (a
// stable counting sort of the token-expert pairs by expert, and the gather of their rows), the
// weighted combine, their backward, the load-balancing loss, and the plan of the experts' GEMMs,
// one cuBLASLt GEMM per expert over its rows (the offsets, which the host reads as transformers'
// fallback does).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "cuda/gemm.h"
#include "cuda/types.h"

namespace vrambench::cuda {

// The rows [first, first + rows) of expert `expert` in the sorted pairs.
struct ExpertRows {
  std::int64_t expert = 0, first = 0, rows = 0;
};
// The experts with rows, from the dispatch's offsets (offsets[e]: the pairs of experts 0..e).
// Throws std::invalid_argument when they decrease or do not end at `pairs`.
std::vector<ExpertRows> expert_rows(const std::vector<std::int32_t>& offsets, std::int64_t pairs);

// The GEMM of one expert's rows [first, +rows) of x [P,In] with its weight w[e] [Out,In] into
// y [P,Out], and the offsets (in elements) of its operands: a plan_linear_fwd of `rows` rows.
struct ExpertGemm {
  GemmPlan plan;
  std::int64_t w_offset = 0, x_offset = 0, y_offset = 0;
};
ExpertGemm expert_fwd_gemm(const ExpertRows& e, std::int64_t in, std::int64_t out);
// Its backward: dx rows (plan_linear_bwd_dx) and dw[e] (plan_linear_bwd_dw, overwritten).
ExpertGemm expert_dx_gemm(const ExpertRows& e, std::int64_t in, std::int64_t out);
ExpertGemm expert_dw_gemm(const ExpertRows& e, std::int64_t in, std::int64_t out);

// The router over M tokens of E logits (any floating dtype) into probs (fp32), scores (their
// dtype) and index, by the routing (common/moe_math.h); K at most kmath::kMaxTopK.
void launch_router_topk(DType logits_dtype, const void* logits, float* probs, DType scores_dtype,
                        void* scores, std::int64_t* index, std::int64_t M, std::int64_t E,
                        std::int64_t K, bool skewed, bool norm, cudaStream_t stream);
void launch_router_topk_bwd(DType dscores_dtype, const void* dscores, const float* probs,
                            const std::int64_t* index, DType dlogits_dtype, void* dlogits,
                            std::int64_t M, std::int64_t E, std::int64_t K, bool norm,
                            cudaStream_t stream);
// The dispatch: order and offsets from index (P = M K pairs), then xs[s] = x[order[s] / K].
void launch_moe_dispatch(DType x_dtype, const void* x, const std::int64_t* index, DType xs_dtype,
                         void* xs, std::int64_t* order, std::int32_t* offsets, std::int64_t M,
                         std::int64_t K, std::int64_t E, std::int64_t H, cudaStream_t stream);
// dx[m] = the sum of dxs over m's pairs; `scratch` (M K i64) keeps the inverse of the order.
void launch_moe_dispatch_bwd(DType dxs_dtype, const void* dxs, const std::int64_t* order,
                             std::int64_t* scratch, DType dx_dtype, void* dx, std::int64_t M,
                             std::int64_t K, std::int64_t H, cudaStream_t stream);
// y[m] = the sum over m's pairs of score x ys (fp32), and its backward.
void launch_moe_combine(DType ys_dtype, const void* ys, DType scores_dtype, const void* scores,
                        const std::int64_t* order, std::int64_t* scratch, DType y_dtype, void* y,
                        std::int64_t M, std::int64_t K, std::int64_t H, cudaStream_t stream);
void launch_moe_combine_bwd(DType dy_dtype, const void* dy, DType ys_dtype, const void* ys,
                            DType scores_dtype, const void* scores, const std::int64_t* order,
                            DType dys_dtype, void* dys, DType dscores_dtype, void* dscores,
                            std::int64_t M, std::int64_t K, std::int64_t H, cudaStream_t stream);

// The load-balancing loss: a layer's softmax of its logits into aux_probs and its statistics
// (stats_in, or zeros, plus its share: pairs per expert from index and the probabilities' sum,
// over M, one more layer), stats [2, E+1] fp32; the loss added to `loss`; a layer's gradient of
// its logits.
void launch_router_aux_stats(DType logits_dtype, const void* logits, const std::int64_t* index,
                             const float* stats_in, DType probs_dtype, void* aux_probs,
                             float* stats, std::int64_t M, std::int64_t K, std::int64_t E,
                             cudaStream_t stream);
void launch_router_aux_loss(const float* loss, const float* stats, float* total, std::int64_t E,
                            float coef, cudaStream_t stream);
void launch_router_aux_bwd(DType probs_dtype, const void* aux_probs, const float* stats,
                           DType dlogits_dtype, void* dlogits, std::int64_t M, std::int64_t E,
                           float coef, float scale, cudaStream_t stream);

}  // namespace vrambench::cuda
