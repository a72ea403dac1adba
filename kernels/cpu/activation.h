// Element-wise activations: GELU (tanh approximation), SwiGLU / GeGLU and soft-capping, CPU
// reference.
#pragma once

#include <cstdint>

namespace vrambench::cpu {

void gelu_fwd(float* y, const float* x, std::int64_t n);
void gelu_bwd(float* dx, const float* dy, const float* x, std::int64_t n);
// y = silu(gate) * up; gelu_gate: y = gelu(gate) * up (GeGLU).
void swiglu_fwd(float* y, const float* gate, const float* up, std::int64_t n, bool gelu_gate);
void swiglu_bwd(float* dgate, float* dup, const float* dy, const float* gate, const float* up,
                std::int64_t n, bool gelu_gate);
// y = cap tanh(x / cap), masked (infinite) values kept; dx = dy (1 - (y / cap)^2), 0 where masked.
void softcap_fwd(float* y, const float* x, std::int64_t n, float cap);
void softcap_bwd(float* dx, const float* dy, const float* y, std::int64_t n, float cap);

}  // namespace vrambench::cpu
