// Token (and learned position) embedding lookup and its scatter-add backward, CPU reference.
#pragma once

#include <cstdint>

namespace vrambench::cpu {

// x[b,s,:] = wte[tokens[b,s],:] + wpe[s,:] (wpe may be null: rotary models have no table).
// Throws InternalError for a token outside [0, V).
void embedding_fwd(float* x, const std::int32_t* tokens, const float* wte, const float* wpe,
                   std::int64_t B, std::int64_t S, std::int64_t V, std::int64_t H);
// Overwrites dwte[V,H] (and dwpe[P,H] when non-null; rows at or past S get zero) with the
// sums of dx over the positions that read each row.
void embedding_bwd(float* dwte, float* dwpe, const float* dx, const std::int32_t* tokens,
                   std::int64_t B, std::int64_t S, std::int64_t V, std::int64_t P, std::int64_t H);

}  // namespace vrambench::cpu
