// GELU, SwiGLU / GeGLU and soft-capping over the shared element-wise bodies in common/math.h, one
// call per element as the CUDA kernels make them.
#include "cpu/activation.h"

#include "common/math.h"

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
