// A mixture of experts' router and dispatch bodies, shared by the CPU reference kernels and the
// CUDA kernels: which experts a token goes to under a routing, one row's softmax and top-k
// weights, and their backward. Plain functions over explicit values, as common/math.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/math.h"

namespace vrambench::kmath {

// The expert the k-th of token m's K pairs goes to: balanced, the pairs m K + k dealt round the E
// experts (each token's K experts distinct, every expert P / E pairs give or take one); skewed,
// every token on experts 0..K-1.
VB_HD inline std::int64_t routed_expert(bool skewed, std::int64_t m, std::int64_t k, std::int64_t K,
                                        std::int64_t E) {
  return skewed ? k : (m * K + k) % E;
}

// A row of floats written through a pointer (FloatRow::set), as the router's backward writes its
// output; the CUDA side writes through a reader of the output's dtype alike.
struct FloatRow {
  float* p = nullptr;
  VB_HD void set(std::int64_t i, float v) const { p[i] = v; }
};

// probs = softmax(logits) over E in fp32. `logits` is anything indexable to floats (a pointer,
// or the CUDA side's reader of a dtype).
template <typename Logits>
VB_HD inline void softmax_row(const Logits& logits, std::int64_t E, float* probs) {
  float top = logits[0];
  for (std::int64_t e = 1; e < E; ++e) top = logits[e] > top ? logits[e] : top;
  float sum = 0.0f;
  for (std::int64_t e = 0; e < E; ++e) sum += probs[e] = expf(logits[e] - top);
  for (std::int64_t e = 0; e < E; ++e) probs[e] /= sum;
}

// softmax(logits) over E written through out.set(e, p) (the load-balancing loss's, into a tensor
// of any dtype): the row's max, the sum of exponentials, then each probability, with no row kept.
template <typename Logits, typename Out>
VB_HD inline void softmax_row_store(const Logits& logits, std::int64_t E, const Out& out) {
  float top = logits[0];
  for (std::int64_t e = 1; e < E; ++e) top = logits[e] > top ? logits[e] : top;
  float sum = 0.0f;
  for (std::int64_t e = 0; e < E; ++e) sum += expf(logits[e] - top);
  for (std::int64_t e = 0; e < E; ++e) out.set(e, expf(logits[e] - top) / sum);
}

// One token's router: probs = softmax(logits) over E (fp32), index = its experts, scores = their
// probs, divided by their sum under `norm`.
template <typename Logits>
VB_HD inline void router_row(const Logits& logits, std::int64_t E, std::int64_t K, std::int64_t m,
                             bool skewed, bool norm, float* probs, float* scores,
                             std::int64_t* index) {
  softmax_row(logits, E, probs);
  float picked = 0.0f;
  for (std::int64_t k = 0; k < K; ++k) {
    index[k] = routed_expert(skewed, m, k, K, E);
    picked += scores[k] = probs[index[k]];
  }
  if (norm)
    for (std::int64_t k = 0; k < K; ++k) scores[k] /= picked;
}

// Its backward: the gradient of the scores through the renormalisation (s = p / Z, Z the sum of
// the picked p: dp_j = (ds_j - sum_k ds_k s_k) / Z) and the softmax (dlogit_e = p_e (dp_e -
// sum_j dp_j p_j), dp zero but at the picked experts, which are distinct). `dpicked` is K floats
// of scratch.
template <typename Grads, typename Out>
VB_HD inline void router_row_grad(const Grads& dscores, const float* probs,
                                  const std::int64_t* index, std::int64_t E, std::int64_t K,
                                  bool norm, float* dpicked, const Out& dlogits) {
  float picked = 0.0f, dot = 0.0f;
  for (std::int64_t k = 0; k < K; ++k) picked += probs[index[k]];
  for (std::int64_t k = 0; k < K; ++k) dot += dscores[k] * probs[index[k]] / picked;
  float inner = 0.0f;
  for (std::int64_t k = 0; k < K; ++k) {
    dpicked[k] = norm ? (dscores[k] - dot) / picked : dscores[k];
    inner += dpicked[k] * probs[index[k]];
  }
  for (std::int64_t e = 0; e < E; ++e) {
    float dp = 0.0f;
    for (std::int64_t k = 0; k < K; ++k) dp += index[k] == e ? dpicked[k] : 0.0f;
    dlogits.set(e, probs[e] * (dp - inner));
  }
}

// The load-balancing loss of transformers' load_balancing_loss_func over L layers: c_e and p_e
// the per-layer sums (over the layers) of the share of pairs and the mean probability of expert
// e, the loss coef E sum_e (c_e / L)(p_e / L). Its gradient with respect to one layer's
// probability of expert e at any of its M rows, times `scale`.
VB_HD inline float aux_loss(const float* c, const float* p, std::int64_t E, float layers,
                            float coef) {
  float dot = 0.0f;
  for (std::int64_t e = 0; e < E; ++e) dot += (c[e] / layers) * (p[e] / layers);
  return coef * static_cast<float>(E) * dot;
}
VB_HD inline float aux_prob_grad(float c_e, std::int64_t E, float layers, std::int64_t M,
                                 float coef, float scale) {
  return scale * coef * static_cast<float>(E) * c_e / (layers * layers * static_cast<float>(M));
}
// That gradient of every expert, read as g[e] off the statistics [2, E+1] (their first row the
// pairs' shares, the last column the layers).
struct AuxGrads {
  const float* stats = nullptr;
  std::int64_t E = 0, M = 0;
  float coef = 0.0f, scale = 1.0f;
  VB_HD float operator[](std::int64_t e) const {
    return aux_prob_grad(stats[e], E, stats[E], M, coef, scale);
  }
};

// A softmax row's backward of the gradient g (E values, read as g[e]) of its output probs:
// p_e (g_e - sum_j g_j p_j), written through `dlogits.set`.
template <typename Probs, typename Grads, typename Out>
VB_HD inline void softmax_row_grad(const Probs& probs, const Grads& g, std::int64_t E,
                                   const Out& dlogits) {
  float inner = 0.0f;
  for (std::int64_t e = 0; e < E; ++e) inner += g[e] * probs[e];
  for (std::int64_t e = 0; e < E; ++e) dlogits.set(e, probs[e] * (g[e] - inner));
}

// The most experts a token goes to that the CUDA router kernels keep per thread (Qwen3-MoE and
// OLMoE take 8, Mixtral 2).
inline constexpr std::int64_t kMaxTopK = 32;

}  // namespace vrambench::kmath
