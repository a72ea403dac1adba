// Cross-entropy with a max-shifted log-sum-exp in double, and the adapters of cross_entropy_fwd and
// cross_entropy_bwd (cpu/op_table.h).
#include "cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "cpu/op_table.h"

namespace vrambench::cpu {
namespace {
std::int64_t checked_target(std::int32_t t, std::int64_t V) {
  if (t < 0 || t >= V)
    throw InternalError("cross_entropy: target " + std::to_string(t) + " outside [0, " +
                        std::to_string(V) + ")");
  return t;
}
}  // namespace

void cross_entropy_fwd(float* loss, float* lse, const float* logits, const std::int32_t* targets,
                       std::int64_t M, std::int64_t V) {
  double total = 0.0;
  for (std::int64_t m = 0; m < M; ++m) {
    const float* row = logits + m * V;
    const double row_max = *std::max_element(row, row + V);
    double sum = 0.0;
    for (std::int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - row_max);
    const double row_lse = row_max + std::log(sum);
    lse[m] = static_cast<float>(row_lse);
    total += row_lse - row[checked_target(targets[m], V)];
  }
  loss[0] = static_cast<float>(total / static_cast<double>(M));
}

void cross_entropy_bwd(float* dlogits, const float* logits, const std::int32_t* targets,
                       const float* lse, std::int64_t M, std::int64_t V, float grad_scale) {
  const double inv_m = static_cast<double>(grad_scale) / static_cast<double>(M);
  for (std::int64_t m = 0; m < M; ++m) {
    const std::int64_t t = checked_target(targets[m], V);
    for (std::int64_t v = 0; v < V; ++v) {
      const double p = std::exp(static_cast<double>(logits[m * V + v]) - lse[m]);
      dlogits[m * V + v] = static_cast<float>((p - (v == t ? 1.0 : 0.0)) * inv_m);
    }
  }
}

}  // namespace vrambench::cpu

namespace vrambench {

void cpu_run_cross_entropy_fwd(const Operands& a, CpuContext&) {
  const std::int64_t V = last_dim(a.in[0]), M = rows(a.in[0]);
  a.require(a.in[1].tensor->elements() == M, "targets must have one id per logits row");
  const auto logits = cpu::load(a.in[0]);
  const auto targets = cpu::load_ids(a, a.in[1]);
  auto loss = cpu::zeros_like(a.out[0]), lse = cpu::zeros_like(a.out[1]);
  cpu::cross_entropy_fwd(loss.data(), lse.data(), logits.data(), targets.data(), M, V);
  cpu::store_out(a, 0, loss);
  cpu::store_out(a, 1, lse);
}

void cpu_run_cross_entropy_bwd(const Operands& a, CpuContext&) {
  const std::int64_t V = last_dim(a.in[0]), M = rows(a.in[0]);
  const auto logits = cpu::load(a.in[0]);
  const auto targets = cpu::load_ids(a, a.in[1]);
  const auto lse = cpu::load(a.in[2]);
  auto dlogits = cpu::zeros_like(a.out[0]);
  cpu::cross_entropy_bwd(dlogits.data(), logits.data(), targets.data(), lse.data(), M, V,
                         a.op.grad_scale);
  cpu::store_out(a, 0, dlogits);
}

}  // namespace vrambench
