// Preference training on cuda (docs/preference.md): the per-token log-probabilities of the next
// tokens as TRL's chunked LM head computes them, a [T,C] tile of logits at a time (one cuBLASLt
// GEMM each, folded into a running log-sum-exp per token), their gradient a tile at a time, and the
// DPO and KTO losses (common/preference_math.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace vrambench::cuda {

// One tile: positions [t0, t0 + n) of sequence r, vocabulary columns [c0, c0 + c).
struct LogprobTile {
  std::int64_t r = 0, t0 = 0, n = 0, c0 = 0, c = 0;
  bool operator==(const LogprobTile&) const = default;
};
// The tiles of R sequences of S positions (each scored but its last) and V columns, at T positions
// and C columns a tile: sequence by sequence, position chunk by chunk, each chunk's columns in
// order. Throws std::invalid_argument for R, T or C below 1, S below 2 or V below 1.
std::vector<LogprobTile> logprob_tiles(std::int64_t R, std::int64_t S, std::int64_t V,
                                       std::int64_t T, std::int64_t C);

// logz[t] = -inf and logp[t] = 0 over N tokens, before the first fold.
void launch_logprob_start(float* logp, float* logz, std::int64_t N, cudaStream_t stream);
// Folds a tile's logits (tile [n,c] of `dtype`, columns c0..) into positions t0.. of a sequence
// (targets, logp and logz at the sequence's first position): logz becomes the log-sum-exp so far,
// logp the target's logit where the target is among the columns.
void launch_logprob_fold(DType dtype, const void* tile, const LogprobTile& t,
                         const std::int32_t* targets, float* logp, float* logz,
                         cudaStream_t stream);
// logp = target logit - logz; both 0 at each sequence's last position (t % S == S - 1).
void launch_logprob_finish(float* logp, float* logz, std::int64_t N, std::int64_t S,
                           cudaStream_t stream);
// The tile's logits become their gradient in place: dlogp[t] (1[column = target] - exp(z - logz))
// (targets, dlogp and logz at the sequence's first position).
void launch_logprob_tile_grad(DType dtype, void* tile, const LogprobTile& t,
                              const std::int32_t* targets, const float* dlogp, const float* logz,
                              cudaStream_t stream);
// y[i] = x[i] in y's dtype (n elements), and y[i] += x[i].
void launch_logprob_convert(DType x_dtype, const void* x, DType y_dtype, void* y, std::int64_t n,
                            cudaStream_t stream);
void launch_logprob_accumulate(DType x_dtype, const void* x, DType y_dtype, void* y, std::int64_t n,
                               cudaStream_t stream);

// The loss over R rows of S positions (ref and, for kto, kl and ref_kl over K rows: nullptr
// without), and its gradient in logp scaled by `scale`.
struct PreferenceLaunch {
  const float* logp = nullptr;
  const float* ref = nullptr;
  const float* kl = nullptr;
  const float* ref_kl = nullptr;
  std::int64_t R = 0, S = 0, K = 0;
  float beta = 0.1f;
  bool dpo = true;
};
void launch_preference_loss(const PreferenceLaunch& p, float* loss, cudaStream_t stream);
void launch_preference_loss_bwd(const PreferenceLaunch& p, float scale, float* dlogp,
                                cudaStream_t stream);

}  // namespace vrambench::cuda
