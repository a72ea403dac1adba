// Dropout forward and backward, and the adapters of dropout_fwd and dropout_bwd (cpu/op_table.h).
#include "cpu/dropout.h"

#include <vector>

#include "common/math.h"
#include "cpu/op_table.h"

namespace vrambench::cpu {

void dropout_fwd(float* y, float* mask, const float* x, std::int64_t n, float p,
                 std::uint64_t seed) {
  const float scale = dropout_scale(p);
  for (std::int64_t i = 0; i < n; ++i) {
    const bool kept = kmath::keep(seed, static_cast<std::uint64_t>(i), p);
    mask[i] = kept ? 1.0f : 0.0f;
    y[i] = kept ? x[i] * scale : 0.0f;
  }
}

void dropout_bwd(float* dx, const float* dy, const float* mask, std::int64_t n, float p) {
  const float scale = dropout_scale(p);
  for (std::int64_t i = 0; i < n; ++i) dx[i] = mask[i] != 0.0f ? dy[i] * scale : 0.0f;
}

}  // namespace vrambench::cpu

namespace vrambench {

void cpu_run_dropout_fwd(const Operands& a, CpuContext&) {
  const auto x = cpu::load(a.in[0]);
  auto y = cpu::zeros_like(a.out[0]), mask = cpu::zeros_like(a.out[1]);
  cpu::dropout_fwd(y.data(), mask.data(), x.data(), static_cast<std::int64_t>(x.size()),
                   static_cast<float>(a.op.dropout_p), a.op.seed);
  cpu::store_out(a, 0, y);
  cpu::store_out(a, 1, mask);
}

void cpu_run_dropout_bwd(const Operands& a, CpuContext&) {
  const auto dy = cpu::load(a.in[0]), mask = cpu::load(a.in[1]);
  auto dx = cpu::zeros_like(a.out[0]);
  cpu::dropout_bwd(dx.data(), dy.data(), mask.data(), static_cast<std::int64_t>(dy.size()),
                   static_cast<float>(a.op.dropout_p));
  cpu::store_out(a, 0, dx);
}

}  // namespace vrambench
