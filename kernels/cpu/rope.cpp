// RoPE forward and backward share one loop: the backward is the inverse rotation. Then the adapters
// of rope_fwd and rope_bwd (cpu/op_table.h).
#include "cpu/rope.h"

#include <vector>

#include "common/math.h"
#include "cpu/op_table.h"
#include "model/model_config.h"

namespace vrambench::cpu {
namespace {
void rotate_all(float* out, const float* in, std::int64_t B, std::int64_t S, std::int64_t A,
                std::int64_t K, std::int64_t D, bool inverse) {
  const std::int64_t Q = qkv_width(A, K, D);
  const std::int64_t rotated_columns = (A + K) * D;  // q and k heads; v follows untouched
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s) {
      const float* src = in + (b * S + s) * Q;
      float* dst = out + (b * S + s) * Q;
      for (std::int64_t c = 0; c < Q; ++c) dst[c] = src[c];
      for (std::int64_t head_start = 0; head_start < rotated_columns; head_start += D)
        for (std::int64_t pair = 0; pair < D / 2; ++pair) {
          float* x0 = dst + head_start + 2 * pair;
          kmath::rope_rotate(x0, x0 + 1, kmath::rope_angle(s, pair, D), inverse);
        }
    }
}
}  // namespace

void rope_fwd(float* qkv_rot, const float* qkv, std::int64_t B, std::int64_t S, std::int64_t A,
              std::int64_t K, std::int64_t D) {
  rotate_all(qkv_rot, qkv, B, S, A, K, D, false);
}

void rope_bwd(float* dqkv, const float* dqkv_rot, std::int64_t B, std::int64_t S, std::int64_t A,
              std::int64_t K, std::int64_t D) {
  rotate_all(dqkv, dqkv_rot, B, S, A, K, D, true);
}

}  // namespace vrambench::cpu

namespace vrambench {

void cpu_run_rope_fwd(const Operands& a, CpuContext&) {
  const QkvShape s = attention_shape(a);
  const auto qkv = cpu::load(a.in[0]);
  auto qkv_rot = cpu::zeros_like(a.out[0]);
  cpu::rope_fwd(qkv_rot.data(), qkv.data(), s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
  cpu::store_out(a, 0, qkv_rot);
}

void cpu_run_rope_bwd(const Operands& a, CpuContext&) {
  const QkvShape s = attention_shape(a);
  const auto dqkv_rot = cpu::load(a.in[0]);
  auto dqkv = cpu::zeros_like(a.out[0]);
  cpu::rope_bwd(dqkv.data(), dqkv_rot.data(), s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
  cpu::store_out(a, 0, dqkv);
}

}  // namespace vrambench
