// Inverted dropout with a counter-based mask, CPU reference. Element i is kept when
// kmath::keep(seed, i, p); the flat index is the tensor's own, so a recompute with the same seed
// reproduces the mask, and flash attention (which indexes probabilities as [B,A,S,S]) draws the
// same mask as an eager dropout over the probs tensor.
#pragma once

#include <cstdint>

namespace vrambench::cpu {

// y = x * mask / (1 - p); mask[i] = 1 when kept, else 0. p >= 1 drops everything.
void dropout_fwd(float* y, float* mask, const float* x, std::int64_t n, float p,
                 std::uint64_t seed);
void dropout_bwd(float* dx, const float* dy, const float* mask, std::int64_t n, float p);

// The factor a kept element is multiplied by.
inline float dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

}  // namespace vrambench::cpu
