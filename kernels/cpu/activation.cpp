// GELU, SwiGLU / GeGLU and soft-capping over the shared element-wise bodies in common/math.h, one
// call per element as the CUDA kernels make them. Then the adapters of the gelu, swiglu and softcap
// kinds (cpu/op_table.h).
#include "cpu/activation.h"

#include <vector>

#include "common/math.h"
#include "cpu/op_table.h"

namespace vrambench::cpu {

void gelu_fwd(float* y, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = kmath::gelu(x[i]);
}

void gelu_bwd(float* dx, const float* dy, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = dy[i] * kmath::gelu_grad(x[i]);
}

void swiglu_fwd(float* y, const float* gate, const float* up, std::int64_t n, bool gelu_gate) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = kmath::swiglu(gate[i], up[i], gelu_gate);
}

void swiglu_bwd(float* dgate, float* dup, const float* dy, const float* gate, const float* up,
                std::int64_t n, bool gelu_gate) {
  for (std::int64_t i = 0; i < n; ++i)
    kmath::swiglu_grad(dy[i], gate[i], up[i], &dgate[i], &dup[i], gelu_gate);
}

void softcap_fwd(float* y, const float* x, std::int64_t n, float cap) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = kmath::softcap(x[i], cap);
}

void softcap_bwd(float* dx, const float* dy, const float* y, std::int64_t n, float cap) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = kmath::softcap_grad(dy[i], y[i], cap);
}

}  // namespace vrambench::cpu

namespace vrambench {

void cpu_run_gelu_fwd(const Operands& a, CpuContext&) {
  const auto x = cpu::load(a.in[0]);
  auto y = cpu::zeros_like(a.out[0]);
  cpu::gelu_fwd(y.data(), x.data(), static_cast<std::int64_t>(x.size()));
  cpu::store_out(a, 0, y);
}

void cpu_run_gelu_bwd(const Operands& a, CpuContext&) {
  const auto dy = cpu::load(a.in[0]), x = cpu::load(a.in[1]);
  auto dx = cpu::zeros_like(a.out[0]);
  cpu::gelu_bwd(dx.data(), dy.data(), x.data(), static_cast<std::int64_t>(x.size()));
  cpu::store_out(a, 0, dx);
}

void cpu_run_swiglu_fwd(const Operands& a, CpuContext&) {
  const Op& op = a.op;
  const GateShape g = gate_shape(op, *a.out[0].tensor, *a.in[0].tensor);
  const auto gate = cpu::load(a.in[0]);
  auto y = cpu::zeros_like(a.out[0]);
  if (g.packed) {  // row r: gate columns [0, F), up columns [F, 2F) of gate|up
    for (std::int64_t r = 0; r < g.rows; ++r)
      cpu::swiglu_fwd(y.data() + r * g.width, gate.data() + 2 * r * g.width,
                      gate.data() + (2 * r + 1) * g.width, g.width, op.gelu_gate);
  } else {
    const auto up = cpu::load(a.in[1]);
    cpu::swiglu_fwd(y.data(), gate.data(), up.data(), static_cast<std::int64_t>(y.size()),
                    op.gelu_gate);
  }
  cpu::store_out(a, 0, y);
}

void cpu_run_swiglu_bwd(const Operands& a, CpuContext&) {
  const Op& op = a.op;
  const GateShape g = gate_shape(op, *a.in[0].tensor, *a.in[1].tensor);
  const auto dy = cpu::load(a.in[0]), gate = cpu::load(a.in[1]);
  auto dgate = cpu::zeros_like(a.out[0]);
  if (g.packed) {
    for (std::int64_t r = 0; r < g.rows; ++r) {
      const std::int64_t at = 2 * r * g.width;
      cpu::swiglu_bwd(dgate.data() + at, dgate.data() + at + g.width, dy.data() + r * g.width,
                      gate.data() + at, gate.data() + at + g.width, g.width, op.gelu_gate);
    }
    cpu::store_out(a, 0, dgate);
    return;
  }
  const auto up = cpu::load(a.in[2]);
  auto dup = cpu::zeros_like(a.out[1]);
  cpu::swiglu_bwd(dgate.data(), dup.data(), dy.data(), gate.data(), up.data(),
                  static_cast<std::int64_t>(dy.size()), op.gelu_gate);
  cpu::store_out(a, 0, dgate);
  cpu::store_out(a, 1, dup);
}

void cpu_run_softcap_fwd(const Operands& a, CpuContext&) {
  const auto x = cpu::load(a.in[0]);
  auto y = cpu::zeros_like(a.out[0]);
  cpu::softcap_fwd(y.data(), x.data(), static_cast<std::int64_t>(x.size()), a.op.softcap);
  cpu::store_out(a, 0, y);
}

void cpu_run_softcap_bwd(const Operands& a, CpuContext&) {
  const auto dy = cpu::load(a.in[0]), y = cpu::load(a.in[1]);
  auto dx = cpu::zeros_like(a.out[0]);
  cpu::softcap_bwd(dx.data(), dy.data(), y.data(), static_cast<std::int64_t>(y.size()),
                   a.op.softcap);
  cpu::store_out(a, 0, dx);
}

}  // namespace vrambench
