// The fill rule of each persistent tensor, from its role and name.
#include "device/init.h"

#include <string_view>

namespace vrambench {
namespace {

std::uint64_t name_hash(std::string_view name) {  // FNV-1a
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// Weights: N(0, 0.02) from a stream of the name and the seed; biases 0; norm weights 1.
kmath::InitRule weight_rule(std::uint64_t seed, const std::string& name) {
  kmath::InitRule rule;
  const bool bias = name.ends_with(".b") || name.ends_with(".bias");
  const bool norm = name.find("ln") != std::string::npos || name.find("norm") != std::string::npos;
  if (bias || norm) {
    rule.kind = kmath::InitKind::constant;
    rule.value = bias ? 0.0f : 1.0f;
    return rule;
  }
  rule.kind = kmath::InitKind::normal;
  rule.value = 0.02f;
  rule.stream = name_hash(name) ^ (seed * 0x9E3779B97F4A7C15ull);
  return rule;
}

}  // namespace

kmath::InitRule init_rule(const Program& program, int tensor_id, std::uint64_t seed) {
  const Tensor& t = program.tensor(tensor_id);
  kmath::InitRule rule;
  switch (t.role) {
    case Role::weight:
      return weight_rule(seed, t.name);
    case Role::master_weight: {
      std::string weight_name = t.name;
      if (const auto at = weight_name.rfind(".master"); at != std::string::npos)
        weight_name.erase(at, 7);
      rule = weight_rule(seed, weight_name);
      for (const Tensor& other : program.tensors)
        if (other.name == weight_name && other.role == Role::weight)
          rule.round_through = other.dtype;
      return rule;
    }
    case Role::input:
      rule.stream = name_hash(t.name) ^ seed;
      if (t.dtype == DType::i32) {
        rule.kind = kmath::InitKind::token_ids;
        rule.vocab = static_cast<std::uint64_t>(program.config.model.vocab);
      } else {
        rule.kind = kmath::InitKind::normal;
        rule.value = 1.0f;
      }
      return rule;
    default:
      return rule;  // optimizer state and anything else starts at zero
  }
}

float initial_weight_value(std::uint64_t seed, const std::string& name, std::int64_t i) {
  return kmath::init_value(weight_rule(seed, name), i);
}

}  // namespace vrambench
