// Softmax cross-entropy over the vocabulary, mean over the M = B*S positions, CPU reference.
#pragma once

#include <cstdint>

namespace vrambench::cpu {

// loss[0] = mean_m (lse[m] - logits[m, targets[m]]); saves lse[M] for the backward.
// Throws InternalError for a target outside [0, V).
void cross_entropy_fwd(float* loss, float* lse, const float* logits, const std::int32_t* targets,
                       std::int64_t M, std::int64_t V);
// dlogits = (softmax(logits) - onehot(targets)) * grad_scale / M: the gradient of grad_scale times
// the mean loss (grad_scale: the static loss scale, Op::grad_scale; 1 without loss scaling).
void cross_entropy_bwd(float* dlogits, const float* logits, const std::int32_t* targets,
                       const float* lse, std::int64_t M, std::int64_t V, float grad_scale);

}  // namespace vrambench::cpu
