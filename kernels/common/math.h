// Element-wise math shared by the CPU reference kernels and the CUDA kernels: storage rounding to
// bf16/fp16, loads and stores by DType, GELU, SiLU/SwiGLU, the dropout hash RNG, optimizer updates
// and the RoPE rotation. Plain functions over explicit values so both compilers build one body.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

#if defined(__CUDACC__)
#define VB_HD __host__ __device__
#else
#define VB_HD
#endif

namespace vrambench::kmath {

// ---- bit casts --------------------------------------------------------------------------------
// memcpy is the portable bit cast on both sides: nvcc lowers it to a register move in device code.
VB_HD inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
VB_HD inline float bits_float(std::uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// ---- bf16 -------------------------------------------------------------------------------------
// bf16 is the top half of an fp32. Round to nearest, ties to even: add 0x7FFF plus the lowest kept
// bit, then truncate. NaN would carry into the exponent, so it is mapped to a quiet NaN instead.
VB_HD inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0)
    return static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | 0x7FC0u);
  const std::uint32_t lsb = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7FFFu + lsb) >> 16);
}
VB_HD inline float bf16_to_float(std::uint16_t h) {
  return bits_float(static_cast<std::uint32_t>(h) << 16);
}

// ---- fp16 (IEEE binary16)
// ------------------------------------------------------------------------- 1 sign, 5 exponent
// (bias 15), 10 mantissa bits; max 65504, smallest subnormal 2^-24.
VB_HD inline std::uint16_t float_to_fp16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u)  // Inf stays Inf, NaN becomes a quiet NaN
    return static_cast<std::uint16_t>(sign | (abs > 0x7F800000u ? 0x7E00u : 0x7C00u));
  // At or above 65520 (= 65504 + half an ulp) the rounded value would be 2^16: overflow to Inf.
  if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (abs < 0x38800000u) {
    // Below 2^-14: subnormal. Scale the full significand so that the fp16 subnormal unit (2^-24)
    // is bit 0, rounding the dropped bits to nearest even. Values under 2^-25 round to zero.
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t exponent = abs >> 23;  // 102..112
    const std::uint32_t mantissa = (abs & 0x007FFFFFu) | 0x00800000u;
    const std::uint32_t shift = 126u - exponent;  // 14..24
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;  // may carry into normal: fine
    return static_cast<std::uint16_t>(sign | half);
  }
  // Normal: rebias the exponent (127 -> 15) and round 13 dropped mantissa bits to nearest even; a
  // carry out of the mantissa correctly bumps the exponent.
  const std::uint32_t lsb = (abs >> 13) & 1u;
  const std::uint32_t rounded = abs + 0x0FFFu + lsb;
  return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}
VB_HD inline float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  const std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1Fu) return bits_float(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    // Subnormal (or zero): mantissa * 2^-24, exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// ---- storage by dtype
// ----------------------------------------------------------------------------- Element i of a
// buffer of dtype t, as float. Integer dtypes convert numerically (u8 masks, i32 token ids), so
// every kernel can read any tensor through one path.
VB_HD inline float load(const void* data, DType t, std::int64_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(data)[i];
    case DType::f16:
      return fp16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::bf16:
      return bf16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::u8:
      return static_cast<float>(static_cast<const std::uint8_t*>(data)[i]);
    case DType::i32:
      return static_cast<float>(static_cast<const std::int32_t*>(data)[i]);
    case DType::i64:
      return static_cast<float>(static_cast<const std::int64_t*>(data)[i]);
  }
  return 0.0f;
}
// Stores v into element i, rounding to nearest even for 16-bit floats and to nearest for integers.
VB_HD inline void store(void* data, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(data)[i] = v;
      return;
    case DType::f16:
      static_cast<std::uint16_t*>(data)[i] = float_to_fp16(v);
      return;
    case DType::bf16:
      static_cast<std::uint16_t*>(data)[i] = float_to_bf16(v);
      return;
    case DType::u8:
      static_cast<std::uint8_t*>(data)[i] = static_cast<std::uint8_t>(lrintf(v));
      return;
    case DType::i32:
      static_cast<std::int32_t*>(data)[i] = static_cast<std::int32_t>(lrintf(v));
      return;
    case DType::i64:
      static_cast<std::int64_t*>(data)[i] = static_cast<std::int64_t>(llrintf(v));
      return;
  }
}
// The value v becomes once stored as t and loaded back.
VB_HD inline float round_to(DType t, float v) {
  switch (t) {
    case DType::f16:
      return fp16_to_float(float_to_fp16(v));
    case DType::bf16:
      return bf16_to_float(float_to_bf16(v));
    default:
      return v;
  }
}

// ---- activations
// ----------------------------------------------------------------------------------
inline constexpr float kSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kGeluCubic = 0.044715f;

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
VB_HD inline float gelu(float x) {
  const float inner = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}
// d gelu / dx of the same approximation.
VB_HD inline float gelu_grad(float x) {
  const float inner = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float t = tanhf(inner);
  const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner;
}

VB_HD inline float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}
VB_HD inline float silu(float x) {
  return x * sigmoid(x);
}
// d silu / dx = s (1 + x (1 - s)) with s = sigmoid(x).
VB_HD inline float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}
// SwiGLU: y = silu(gate) * up; GeGLU (`gelu_gate`): y = gelu(gate) * up.
VB_HD inline float swiglu(float gate, float up, bool gelu_gate = false) {
  return (gelu_gate ? gelu(gate) : silu(gate)) * up;
}
VB_HD inline void swiglu_grad(float dy, float gate, float up, float* dgate, float* dup,
                              bool gelu_gate = false) {
  *dgate = dy * up * (gelu_gate ? gelu_grad(gate) : silu_grad(gate));
  *dup = dy * (gelu_gate ? gelu(gate) : silu(gate));
}

// Whether x is infinite (fabsf and the largest float: the same test in host and device code).
VB_HD inline bool is_infinite(float x) {
  return fabsf(x) > 3.402823466e38f;
}
// Soft-capping (Gemma 2): cap tanh(x / cap). A masked score (-inf) stays masked.
VB_HD inline float softcap(float x, float cap) {
  return is_infinite(x) ? x : cap * tanhf(x / cap);
}
// From the capped value y: dx = dy (1 - (y / cap)^2); nothing flows into a masked score.
VB_HD inline float softcap_grad(float dy, float y, float cap) {
  if (is_infinite(y)) return 0.0f;
  const float t = y / cap;
  return dy * (1.0f - t * t);
}

// ---- dropout RNG
// ---------------------------------------------------------------------------------- Counter-based:
// the mask element at `index` depends only on (seed, index), so CPU and GPU, forward and recompute,
// and eager and flash attention all draw the same mask without stored state. splitmix64 finaliser
// over the seed-mixed counter.
VB_HD inline std::uint64_t hash64(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Uniform in [0, 1) with 24 random bits (exact in fp32).
VB_HD inline float uniform(std::uint64_t seed, std::uint64_t index) {
  return static_cast<float>(hash64(seed, index) >> 40) * 5.9604644775390625e-8f;
}
// True when element `index` survives dropout with probability p of being dropped.
VB_HD inline bool keep(std::uint64_t seed, std::uint64_t index, float p) {
  return uniform(seed, index) >= p;
}

// ---- optimizers
// -----------------------------------------------------------------------------------
struct AdamParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  int step = 1;  // 1-based step number for bias correction
  // Static loss scale: the gradients arrive multiplied by it (fp16 training, Op::grad_scale) and
  // are divided by it in fp32 before the update. A power of two, so the division is exact.
  float grad_scale = 1.0f;
  VB_HD float bias_correction1() const { return 1.0f - powf(beta1, static_cast<float>(step)); }
  VB_HD float bias_correction2() const { return 1.0f - powf(beta2, static_cast<float>(step)); }
};
// AdamW (Loshchilov & Hutter, as torch.optim.AdamW): decoupled decay w -= lr wd w, then the
// bias-corrected Adam step. The corrections are per step, not per element: loops over a tensor
// pass them in precomputed (bc1 = 1 - beta1^step, bc2 = 1 - beta2^step).
VB_HD inline void adamw_update(float* w, float scaled_g, float* m, float* v, const AdamParams& p,
                               float bc1, float bc2) {
  const float g = scaled_g / p.grad_scale;
  *w -= p.lr * p.weight_decay * *w;
  *m = p.beta1 * *m + (1.0f - p.beta1) * g;
  *v = p.beta2 * *v + (1.0f - p.beta2) * g * g;
  const float m_hat = *m / bc1;
  const float v_hat = *v / bc2;
  *w -= p.lr * m_hat / (sqrtf(v_hat) + p.eps);
}
VB_HD inline void adamw_update(float* w, float g, float* m, float* v, const AdamParams& p) {
  adamw_update(w, g, m, v, p, p.bias_correction1(), p.bias_correction2());
}

struct SgdParams {
  float lr = 1e-3f, momentum = 0.9f, weight_decay = 0.0f;
  float grad_scale = 1.0f;  // static loss scale, divided out as in AdamParams
};
// SGD with momentum (torch's form without dampening: buf = mu buf + g, w -= lr buf) and the same
// decoupled weight decay as AdamW, so that both recipes treat decay alike.
VB_HD inline void sgd_update(float* w, float scaled_g, float* momentum_buf, const SgdParams& p) {
  const float g = scaled_g / p.grad_scale;
  *w -= p.lr * p.weight_decay * *w;
  *momentum_buf = p.momentum * *momentum_buf + g;
  *w -= p.lr * *momentum_buf;
}

// ---- rotary position embedding
// ----------------------------------------------------------------------
inline constexpr float kRopeTheta = 10000.0f;
// Angle of pair i (elements 2i, 2i+1 of a head of size D) at position pos: pos * theta^(-2i/D).
VB_HD inline float rope_angle(std::int64_t pos, std::int64_t pair, std::int64_t D) {
  const float inv_freq = powf(kRopeTheta, -2.0f * static_cast<float>(pair) / static_cast<float>(D));
  return static_cast<float>(pos) * inv_freq;
}
// Rotates (x0, x1) by +angle (forward); the backward is the rotation by -angle (`inverse`).
VB_HD inline void rope_rotate(float* x0, float* x1, float angle, bool inverse) {
  const float c = cosf(angle);
  const float s = inverse ? -sinf(angle) : sinf(angle);
  const float a = *x0, b = *x1;
  *x0 = a * c - b * s;
  *x1 = a * s + b * c;
}

}  // namespace vrambench::kmath
