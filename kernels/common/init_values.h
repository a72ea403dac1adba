// How a persistent tensor of a step starts (weights, master weights, optimizer state, inputs): a
// rule per tensor, chosen on the host from its role and name, and a value per element that both the
// CPU reference and a CUDA kernel compute from the rule and the element's index, so the cpu and
// cuda devices start a step from the same values without copying them from the host.
#pragma once

#include <cstdint>

#include "common/math.h"
#include "core/dtype.h"

namespace vrambench::kmath {

enum class InitKind : std::uint8_t {
  zeros,      // optimizer state, and anything without a rule
  constant,   // biases (0) and norm weights (1)
  normal,     // scale * N(0, 1), counter-based per (stream, element)
  token_ids,  // uniform integers in [0, vocab), stored as i32
};

struct InitRule {
  InitKind kind = InitKind::zeros;
  float value = 0.0f;                // constant: the value; normal: the scale
  std::uint64_t stream = 0;          // normal, token_ids: the counter stream
  std::uint64_t vocab = 1;           // token_ids
  DType round_through = DType::f32;  // a master weight holds its weight's value as the weight
                                     // stores it: rounded to this dtype first
};

// An approximately standard normal value, deterministic per (stream, i) and bit-identical on the
// host and the GPU: the Irwin-Hall sum of twelve uniforms of 24 bits each (mean 6, variance 1),
// summed as integers and converted once, so no transcendental function (whose last bit differs
// between libraries) is involved. Bounded to [-6, 6], which a weight initialisation never misses.
VB_HD inline float standard_normal(std::uint64_t stream, std::int64_t i) {
  const auto first = static_cast<std::uint64_t>(i) * 12;
  std::uint64_t sum = 0;
  for (std::uint64_t k = 0; k < 12; ++k) sum += hash64(stream, first + k) >> 40;
  return static_cast<float>(static_cast<double>(sum) * 0x1p-24 - 6.0);
}

// Element i under `rule`, before it is stored in the tensor's dtype (token ids as their value).
VB_HD inline float init_value(const InitRule& rule, std::int64_t i) {
  float v = 0.0f;
  switch (rule.kind) {
    case InitKind::zeros:
      return 0.0f;
    case InitKind::constant:
      v = rule.value;
      break;
    case InitKind::normal:
      v = rule.value * standard_normal(rule.stream, i);
      break;
    case InitKind::token_ids:
      return static_cast<float>(hash64(rule.stream, static_cast<std::uint64_t>(i)) % rule.vocab);
  }
  return round_to(rule.round_through, v);
}

// Writes element i of a tensor of `dtype` (i32 for token ids) under `rule`.
VB_HD inline void init_element(void* data, DType dtype, const InitRule& rule, std::int64_t i) {
  if (dtype == DType::i32) {
    static_cast<std::int32_t*>(data)[i] = static_cast<std::int32_t>(init_value(rule, i));
    return;
  }
  store(data, dtype, i, init_value(rule, i));
}

}  // namespace vrambench::kmath
