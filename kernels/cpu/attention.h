// Causal multi-head attention over a packed q|k|v tensor, CPU reference: the eager chain (scores,
// softmax, values and their backwards) and a flash-style fused forward/backward.
//
// qkv is [B,S,(A+2K)*D]: A query heads, then K key heads, then K value heads. Query head a reads
// kv head a / (A/K) (grouped-query attention; K == A is plain multi-head). Scores are
// q k^T / sqrt(D) with -inf above the diagonal (key j > query i), probs/scores are [B,A,S,S], the
// attention output y is [B,S,A*D] with head a in columns [a*D, (a+1)*D).
//
// Flash dropout: probability (b,a,i,j) is kept when kmath::keep(seed, ((b*A+a)*S+i)*S+j, p), the
// flat index of the same element in a [B,A,S,S] probs tensor, so flash with dropout equals the
// eager chain with a dropout_fwd (same seed) between softmax and values. The saved lse is the
// log-sum-exp of the undropped scaled scores.
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace vrambench::cpu {

struct AttnShape {
  std::int64_t B = 1, S = 1, A = 1, K = 1, D = 1;
  std::int64_t Q() const { return qkv_width(A, K, D); }
  std::int64_t kv_head(std::int64_t a) const { return a / (A / K); }
};

// scores[b,a,i,j] = q_i . k_j / sqrt(D) for j <= i, -inf otherwise.
void attn_scores(float* scores, const float* qkv, const AttnShape& s);
// Row softmax over the last dimension of probs[R,C]; -inf entries give 0.
void softmax_fwd(float* probs, const float* scores, std::int64_t rows, std::int64_t cols);
// dscores = probs * (dprobs - sum_row(dprobs * probs)).
void softmax_bwd(float* dscores, const float* dprobs, const float* probs, std::int64_t rows,
                 std::int64_t cols);
// y[b,i,a,:] = sum_j probs[b,a,i,j] v[b,j,kv(a),:].
void attn_values(float* y, const float* probs, const float* qkv, const AttnShape& s);
// dprobs = dy v^T per head; dqkv: v part = sum over the query heads of the group of probs^T dy,
// q and k parts zeroed (attn_scores_bwd fills them).
void attn_values_bwd(float* dprobs, float* dqkv, const float* dy, const float* probs,
                     const float* qkv, const AttnShape& s);
// Writes the q and k parts of dqkv from dscores; leaves its v part as it is.
void attn_scores_bwd(float* dqkv, const float* dscores, const float* qkv, const AttnShape& s);

// Online-softmax forward: one pass over the keys per query with a running max and sum, as the
// fused kernels do; saves y and lse[B,A,S].
// softcap > 0: the scaled scores are capped, softcap tanh(score / softcap), before the softmax.
void flash_fwd(float* y, float* lse, const float* qkv, const AttnShape& s, float dropout_p,
               std::uint64_t seed, float softcap = 0.0f);
// Recomputes the probabilities from q, k and lse; uses delta_i = dy_i . y_i for the softmax
// backward; writes all of dqkv.
void flash_bwd(float* dqkv, const float* dy, const float* qkv, const float* y, const float* lse,
               const AttnShape& s, float dropout_p, std::uint64_t seed, float softcap = 0.0f);

}  // namespace vrambench::cpu
