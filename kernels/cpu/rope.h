// Rotary position embedding over a packed q|k|v tensor, CPU reference.
//
// qkv is [B,S,(A+2K)*D]: A query heads, then K key heads, then K value heads, each D wide. Within
// every q and k head the pairs (2i, 2i+1) rotate by s * 10000^(-2i/D) at position s; v is copied.
#pragma once

#include <cstdint>

namespace vrambench::cpu {

void rope_fwd(float* qkv_rot, const float* qkv, std::int64_t B, std::int64_t S, std::int64_t A,
              std::int64_t K, std::int64_t D);
// The rotation is orthogonal, so the backward rotates the q and k gradients back by -angle.
void rope_bwd(float* dqkv, const float* dqkv_rot, std::int64_t B, std::int64_t S, std::int64_t A,
              std::int64_t K, std::int64_t D);

}  // namespace vrambench::cpu
