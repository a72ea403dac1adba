// Element-wise activations of the MLP: GELU (tanh approximation) and SwiGLU, CPU reference.
#pragma once

#include <cstdint>

namespace vrambench::cpu {

void gelu_fwd(float* y, const float* x, std::int64_t n);
void gelu_bwd(float* dx, const float* dy, const float* x, std::int64_t n);
// y = silu(gate) * up.
void swiglu_fwd(float* y, const float* gate, const float* up, std::int64_t n);
void swiglu_bwd(float* dgate, float* dup, const float* dy, const float* gate, const float* up,
                std::int64_t n);

}  // namespace vrambench::cpu
